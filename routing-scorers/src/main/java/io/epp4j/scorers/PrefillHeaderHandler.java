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
 * Also loaded as {@code disagg-headers-handler}, llm-d's name for it from v0.7 on (of which
 * upstream made {@code prefill-header-handler} the alias), whose {@code encodeProfile} has no
 * effect: epp4j does not disaggregate encoding.
 */
final class PrefillHeaderHandler implements Plugin {
  private final String type;

  PrefillHeaderHandler() {
    this("prefill-header-handler");
  }

  PrefillHeaderHandler(String type) {
    this.type = type;
  }

  @Override
  public String toString() {
    return type;
  }

  static void checkPrefillProfile(Parameters p) {
    String profile = p.getString("prefillProfile", PdProfileHandler.PREFILL_PROFILE);
    if (!PdProfileHandler.PREFILL_PROFILE.equals(profile)) {
      p.error("prefillProfile", "names profile '" + profile + "'; epp4j's gateways read the"
          + " prefill pick from the profile named 'prefill': rename the profile");
    }
  }

  /** Provides {@code disagg-headers-handler}; public only for {@link java.util.ServiceLoader}. */
  public static final class DisaggHeadersProvider extends AbstractPluginProvider {
    public DisaggHeadersProvider() {
      super("disagg-headers-handler");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      checkPrefillProfile(p);
      if (p.has("encodeProfile")) {
        p.notice("encodeProfile", "has no effect: epp4j does not disaggregate encoding, so no"
            + " encode pick is ever written");
      }
      return new PrefillHeaderHandler("disagg-headers-handler");
    }
  }

  /** Provides {@code prefill-header-handler}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("prefill-header-handler", "prefill-header");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      checkPrefillProfile(p);
      return new PrefillHeaderHandler();
    }
  }
}
