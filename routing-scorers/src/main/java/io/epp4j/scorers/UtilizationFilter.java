package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.List;

/**
 * {@code utilization-filter}: drops
 * endpoints whose fresh metrics show a waiting queue of at least {@code queueThreshold} or KV
 * usage of at least {@code kvCacheThreshold}. Fails open: if every candidate would be dropped,
 * all are kept. Endpoints without usable metrics are kept (unknown is not saturated; the
 * metric scorers already rank them neutrally).
 */
final class UtilizationFilter implements Filter {
  private final String type;
  private final int queueThreshold;
  private final double kvThreshold;
  private final Staleness staleness;

  UtilizationFilter(String type, int queueThreshold, double kvThreshold, Staleness staleness) {
    this.type = type;
    this.queueThreshold = queueThreshold;
    this.kvThreshold = kvThreshold;
    this.staleness = staleness;
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    long now = state.nowNanos();
    List<Candidate> kept = CandidateLists.retain(candidates, c -> !staleness.usable(c, now)
        || (c.metrics().waitingRequests() < queueThreshold
            && c.metrics().kvCacheUsage() < kvThreshold));
    return kept.isEmpty() ? candidates : kept;
  }

  @Override
  public String toString() {
    return type;
  }

  /** Provides {@code utilization-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("utilization-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return fromParameters(type(), p);
    }
  }

  static UtilizationFilter fromParameters(String type, Parameters p) {
    int q = p.getInt(CommonParameters.alias(p, "queueThreshold", "threshold"), 128, 1,
        Integer.MAX_VALUE);
    double kv = p.getDouble("kvCacheThreshold", 0.95, 0.0, 1.0);
    return new UtilizationFilter(type, q, kv, Staleness.from(p));
  }
}
