package io.epp4j.core;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;

/** ServiceLoader providers of the plugins that live in core. */
public final class CorePluginProviders {
  private CorePluginProviders() {}

  /** {@code max-score-picker}; parameter {@code maxNumOfEndpoints} (default 1). */
  public static final class MaxScorePickerProvider extends AbstractPluginProvider {
    public MaxScorePickerProvider() {
      super("max-score-picker", "max-score");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters p) {
      return new MaxScorePicker(maxNumOfEndpoints(p),
          context.service(io.epp4j.api.RouterHints.class).orElse(null));
    }

    /**
     * {@code maxNumOfEndpoints}, default 1, at most 1024. Upstream's pickers read 0 or below as
     * not set (one endpoint), so such a file loads here too, with a notice rather than an error.
     */
    static int maxNumOfEndpoints(Parameters p) {
      int v = p.getInt("maxNumOfEndpoints", 1);
      if (v > 1024) {
        p.error("maxNumOfEndpoints", "must be in [1, 1024], got " + v);
        return 1;
      }
      if (v < 1) {
        p.notice("maxNumOfEndpoints", "is " + v + ": as upstream, a value below 1 means the"
            + " default, 1 endpoint");
        return 1;
      }
      return v;
    }
  }

  /** {@code single-profile-handler}; no parameters. */
  public static final class SingleProfileHandlerProvider extends AbstractPluginProvider {
    public SingleProfileHandlerProvider() {
      super("single-profile-handler");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters p) {
      return new SingleProfileHandler();
    }
  }
}
