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
     * {@code maxNumOfEndpoints}, default 1. Upstream's pickers read 0 or below as not set (one
     * endpoint), so such a file loads here too, with a notice rather than an error. Upstream sets
     * no upper bound, and a pick returns at most the candidates there are whatever the value, so
     * any larger value loads as given (one beyond a 32-bit integer as the largest, which picks
     * the same endpoints).
     */
    static int maxNumOfEndpoints(Parameters p) {
      long v = p.getLong("maxNumOfEndpoints", 1);
      if (v < 1) {
        p.notice("maxNumOfEndpoints", "is " + v + ": as upstream, a value below 1 means the"
            + " default, 1 endpoint");
        return 1;
      }
      return (int) Math.min(v, Integer.MAX_VALUE);
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
