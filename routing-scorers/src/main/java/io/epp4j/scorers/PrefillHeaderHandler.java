package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;

/**
 * {@code prefill-header-handler} (llm-d; first called {@code prefill-header}): upstream, it
 * writes the prefill profile's pick into {@value PdProfileHandler#PREFILLER_HEADER} before the
 * request leaves. In epp4j the gateway writes that header from the decision
 * ({@link PdProfileHandler#prefillEndpoint}), whichever P/D handler made it, so this plugin only
 * marks the mapping. {@code prefillProfile} must be {@code prefill}, the name the gateway reads.
 */
final class PrefillHeaderHandler implements Plugin {
  @Override
  public String toString() {
    return "prefill-header-handler";
  }

  /** Provides {@code prefill-header-handler}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("prefill-header-handler", "prefill-header");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      String profile = p.getString("prefillProfile", PdProfileHandler.PREFILL_PROFILE);
      if (!PdProfileHandler.PREFILL_PROFILE.equals(profile)) {
        p.error("prefillProfile", "names profile '" + profile + "'; epp4j's gateways read the"
            + " prefill pick from the profile named 'prefill': rename the profile");
      }
      return new PrefillHeaderHandler();
    }
  }
}
