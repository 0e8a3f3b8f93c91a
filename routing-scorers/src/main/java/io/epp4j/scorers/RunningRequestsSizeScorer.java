package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;

/**
 * {@code running-requests-size-scorer}: fewer running requests score higher (min–max over the
 * candidates).
 */
final class RunningRequestsSizeScorer extends MinMaxCountScorer {
  static final String TYPE = "running-requests-size-scorer";

  RunningRequestsSizeScorer(Staleness staleness) {
    super(staleness);
  }

  @Override
  int value(EndpointMetrics m) {
    return m.runningRequests();
  }

  @Override
  public String toString() {
    return TYPE;
  }

  /** Provides {@value #TYPE}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super(TYPE);
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new RunningRequestsSizeScorer(Staleness.from(p));
    }
  }
}
