package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;

/**
 * {@code least-queue-filter} (Gateway API Inference Extension 0.5): keeps the endpoints whose
 * waiting queue lies in the lowest band, {@code [min, min + (max − min) / n]} with integer
 * division over the {@code n} candidates, so with equal queues every endpoint stays and with one
 * outlier only the shortest queues do. Never empty for a non-empty input.
 */
final class LeastQueueFilter extends LowestBandFilter {
  LeastQueueFilter() {
    super("least-queue-filter");
  }

  @Override
  double value(EndpointMetrics m) {
    return m.waitingRequests();
  }

  @Override
  double limit(double min, double max, int n) {
    // whole requests: integer division, as upstream
    return min + Math.floor((max - min) / n);
  }

  /** Provides {@code least-queue-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("least-queue-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new LeastQueueFilter();
    }
  }
}
