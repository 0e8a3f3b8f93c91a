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
import java.util.function.Function;

/**
 * The shared rule of {@link QueueScorer} and {@link RunningRequestsSizeScorer}: min–max
 * normalisation of a request count over the candidates with usable metrics,
 * {@code (max − v) / (max − min)}, all 1.0 when max = min. Endpoints without usable metrics: see
 * {@link Staleness}.
 */
abstract class MinMaxCountScorer implements Scorer {
  private final String type;
  private final Staleness staleness;

  MinMaxCountScorer(String type, Staleness staleness) {
    this.type = type;
    this.staleness = staleness;
  }

  /** The count this scorer ranks by; fewer is better. */
  abstract int value(Candidate c);

  @Override
  public final void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    long now = state.nowNanos();
    int min = Integer.MAX_VALUE;
    int max = Integer.MIN_VALUE;
    // two passes reading the candidates' own copies of the metrics: measured faster than one
    // pass that parks the counts in the score array, and than a table of each count's score
    for (int i = 0; i < n; i++) {
      Candidate c = candidates.get(i);
      if (staleness.usable(c, now)) {
        int v = value(c);
        min = Math.min(min, v);
        max = Math.max(max, v);
      }
    }
    boolean anyUsable = min != Integer.MAX_VALUE;
    for (int i = 0; i < n; i++) {
      Candidate c = candidates.get(i);
      double s = anyUsable ? normalise(value(c), min, max) : Staleness.NEUTRAL;
      scores[i] = staleness.usable(c, now) ? s : Staleness.unusableScore(c, s);
    }
  }

  private static double normalise(int v, int min, int max) {
    if (max == min) {
      return v <= min ? 1.0 : 0.0;
    }
    double s = (double) (max - v) / (max - min);
    return s < 0 ? 0 : s > 1 ? 1 : s;
  }

  @Override
  public String toString() {
    return type;
  }

  /** Builds a subclass from the shared staleness parameters, its only ones. */
  abstract static class Provider extends AbstractPluginProvider {
    private final Function<Staleness, MinMaxCountScorer> make;

    Provider(String type, Function<Staleness, MinMaxCountScorer> make) {
      super(type);
      this.make = make;
    }

    @Override
    protected final Plugin build(PluginContext c, Parameters p) {
      return make.apply(Staleness.from(p));
    }
  }
}
