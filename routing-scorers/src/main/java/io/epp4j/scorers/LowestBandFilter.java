package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import java.util.List;

/**
 * The Gateway API Inference Extension 0.5 band filters: keep the endpoints whose metric lies in
 * the lowest band, {@code [min, min + (max − min) / n]} over the {@code n} candidates, so with
 * equal values every endpoint stays and with one outlier only the lowest do. Never empty for a
 * non-empty input.
 */
abstract class LowestBandFilter implements Filter {
  private final String type;

  LowestBandFilter(String type) {
    this.type = type;
  }

  /** The metric the band is taken over (lower is better). */
  abstract double value(EndpointMetrics m);

  /**
   * The band's upper bound; counts use integer division as upstream does, fractions do not.
   */
  abstract double limit(double min, double max, int n);

  @Override
  public final List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    int n = candidates.size();
    if (n == 0) {
      return candidates;
    }
    double min = Double.MAX_VALUE;
    double max = 0;
    for (int i = 0; i < n; i++) {
      double v = value(candidates.get(i).metrics());
      min = Math.min(min, v);
      max = Math.max(max, v);
    }
    double limit = limit(min, max, n);
    return CandidateLists.retain(candidates, c -> value(c.metrics()) <= limit);
  }

  @Override
  public final String toString() {
    return type;
  }
}
