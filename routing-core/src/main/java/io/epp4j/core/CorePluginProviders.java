package io.epp4j.core;

import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;

/** ServiceLoader providers of the plugins that live in core. */
public final class CorePluginProviders {
  private CorePluginProviders() {}

  /** {@code max-score-picker}; parameter {@code maxNumOfEndpoints} (default 1). */
  public static final class MaxScorePickerProvider implements PluginProvider {
    @Override
    public String type() {
      return "max-score-picker";
    }

    @Override
    public Result<? extends Plugin> create(PluginContext context, Parameters p) {
      int k = p.getInt("maxNumOfEndpoints", 1, 1, 1024);
      return p.errors().isEmpty() ? Result.ok(new MaxScorePicker(k)) : Result.errors(p.errors());
    }
  }

  /** {@code single-profile-handler}; no parameters. */
  public static final class SingleProfileHandlerProvider implements PluginProvider {
    @Override
    public String type() {
      return "single-profile-handler";
    }

    @Override
    public Result<? extends Plugin> create(PluginContext context, Parameters p) {
      return Result.ok(new SingleProfileHandler());
    }
  }
}
