package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;

/**
 * {@code always-disagg-pd-decider} (llm-d): every request whose decode profile picked an endpoint
 * also runs the prefill profile, as KServe's generated P/D configuration asks. No parameters.
 */
final class AlwaysDisaggPdDecider implements PrefillDecider {
  @Override
  public boolean disaggregate(InferenceRequest request, CycleState state, Endpoint decodePick) {
    return true;
  }

  @Override
  public String toString() {
    return "always-disagg-pd-decider";
  }

  /** Provides {@code always-disagg-pd-decider}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("always-disagg-pd-decider");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new AlwaysDisaggPdDecider();
    }
  }
}
