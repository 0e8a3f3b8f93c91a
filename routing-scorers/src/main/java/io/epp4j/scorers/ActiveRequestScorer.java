package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Scorer;
import java.util.List;

/**
 * {@code active-request-scorer} (llm-d): router-tracked in-flight requests (counted from the
 * routing decision until {@code onComplete}/{@code onFailure}); 1.0 at or below
 * {@code idleThreshold}, else {@code (maxCount − count) / maxCount × maxBusyScore} over the
 * candidates. A {@code maxBusyScore} below 1 keeps every busy endpoint below every idle one.
 * Needs no metrics, so staleness does not apply.
 */
final class ActiveRequestScorer implements Scorer {
  private final int idleThreshold;
  private final double maxBusyScore;

  ActiveRequestScorer(int idleThreshold) {
    this(idleThreshold, 1.0);
  }

  ActiveRequestScorer(int idleThreshold, double maxBusyScore) {
    this.idleThreshold = idleThreshold;
    this.maxBusyScore = maxBusyScore;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    int max = 0;
    for (int i = 0; i < n; i++) {
      max = Math.max(max, candidates.get(i).inFlightRequests());
    }
    for (int i = 0; i < n; i++) {
      int c = candidates.get(i).inFlightRequests();
      scores[i] = c <= idleThreshold || max == 0 ? 1.0 : (double) (max - c) / max * maxBusyScore;
    }
  }

  @Override
  public String toString() {
    return "active-request-scorer";
  }

  /** Provides {@code active-request-scorer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("active-request-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new ActiveRequestScorer(p.getInt("idleThreshold", 0, 0, Integer.MAX_VALUE),
          p.getDouble("maxBusyScore", 1.0, 0.0, 1.0));
    }
  }
}
