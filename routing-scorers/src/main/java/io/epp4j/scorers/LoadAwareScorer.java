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
 * {@code load-aware-scorer} (llm-d): waiting queue q against a threshold T; 0.5 when q = 0,
 * else {@code 0.5 × (1 − min(q, T) / T)}. Its range is [0, 0.5], so its neutral score for
 * unusable metrics is 0.25.
 */
final class LoadAwareScorer implements Scorer {
  private final int threshold;
  private final Staleness staleness;

  LoadAwareScorer(int threshold, Staleness staleness) {
    this.threshold = threshold;
    this.staleness = staleness;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    long now = state.nowNanos();
    for (int i = 0, n = candidates.size(); i < n; i++) {
      Candidate c = candidates.get(i);
      int q = c.waitingRequests();
      double s = q == 0 ? 0.5 : 0.5 * (1.0 - (double) Math.min(q, threshold) / threshold);
      if (!staleness.usable(c, now)) {
        s = Staleness.known(c) ? Math.min(0.25, s) : 0.25;
      }
      scores[i] = s;
    }
  }

  @Override
  public String toString() {
    return "load-aware-scorer";
  }

  /** Provides {@code load-aware-scorer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("load-aware-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      String name = CommonParameters.alias(p, "queueThreshold", "threshold");
      int t = p.getInt(name, 128);
      if (t < 1) {
        // as llm-d's NewLoadAware, which logs and keeps its default
        p.notice(name, "is " + t + ", not positive: the default 128 is used, as upstream does");
        t = 128;
      }
      return new LoadAwareScorer(t, Staleness.from(p));
    }
  }
}
