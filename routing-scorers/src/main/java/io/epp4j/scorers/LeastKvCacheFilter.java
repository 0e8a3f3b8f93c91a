package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;

/**
 * {@code least-kv-cache-filter} (Gateway API Inference Extension 0.5): keeps the endpoints whose
 * KV-cache usage lies in the lowest band, {@code [min, min + (max − min) / n]} over the {@code n}
 * candidates. Never empty for a non-empty input.
 */
final class LeastKvCacheFilter extends LowestBandFilter {
  LeastKvCacheFilter() {
    super("least-kv-cache-filter");
  }

  @Override
  double value(EndpointMetrics m) {
    return m.kvCacheUsage();
  }

  @Override
  double limit(double min, double max, int n) {
    return min + (max - min) / n;
  }

  /** Provides {@code least-kv-cache-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("least-kv-cache-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new LeastKvCacheFilter();
    }
  }
}
