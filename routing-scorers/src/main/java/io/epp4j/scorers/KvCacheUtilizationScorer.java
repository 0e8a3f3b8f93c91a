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

/** {@code kv-cache-utilization-scorer}: {@code 1 − kvCacheUsage}. */
final class KvCacheUtilizationScorer implements Scorer {
  private final Staleness staleness;

  KvCacheUtilizationScorer(Staleness staleness) {
    this.staleness = staleness;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    long now = state.nowNanos();
    for (int i = 0, n = candidates.size(); i < n; i++) {
      Candidate c = candidates.get(i);
      double s = 1.0 - c.kvCacheUsage();
      scores[i] = staleness.usable(c, now) ? s : Staleness.unusableScore(c, s);
    }
  }

  @Override
  public String toString() {
    return "kv-cache-utilization-scorer";
  }

  /** Provides {@code kv-cache-utilization-scorer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("kv-cache-utilization-scorer", "kv-cache-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new KvCacheUtilizationScorer(Staleness.from(p));
    }
  }
}
