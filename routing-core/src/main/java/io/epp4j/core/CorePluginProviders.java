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
      return new MaxScorePicker(p.getInt("maxNumOfEndpoints", 1, 1, 1024),
          context.service(io.epp4j.api.RouterHints.class).orElse(null));
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
