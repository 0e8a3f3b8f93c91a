package io.epp4j.api;

import java.util.function.Supplier;

/**
 * The usual shape of a {@link PluginProvider}: a fixed type name and a {@link #build} method that
 * reads {@link Parameters} with its typed getters and returns the plugin. {@link #create} applies
 * the one rule every provider needs, so a plugin author writes only {@code build}: parameter
 * errors are collected while building rather than thrown one at a time; if any were recorded,
 * the half-configured plugin is closed (it may already hold threads or sockets) and the errors
 * become the result.
 *
 * <p>{@code build} may also throw {@link IllegalArgumentException} for a problem that no getter
 * could name; its message becomes the error unless parameter errors were recorded, which are
 * more precise and win.
 *
 * <p>The static {@link #checked(Parameters, Supplier)} forms apply the same rule where a provider
 * cannot extend this class (a factory that itself returns a {@link Result}, or a registry that
 * wraps any provider).
 */
public abstract class AbstractPluginProvider implements PluginProvider {
  private final String type;
  private final java.util.Set<String> aliases;

  /** @param type the plugin type name in lower-kebab-case, as configs spell it */
  protected AbstractPluginProvider(String type) {
    this(type, new String[0]);
  }

  /**
   * @param type the plugin type name in lower-kebab-case, as configs spell it
   * @param aliases former names of the type that configs may still use (see {@link #aliases()})
   */
  protected AbstractPluginProvider(String type, String... aliases) {
    this.type = type;
    this.aliases = java.util.Set.of(aliases);
  }

  @Override
  public final String type() {
    return type;
  }

  @Override
  public final java.util.Set<String> aliases() {
    return aliases;
  }

  /**
   * Builds the plugin, recording bad parameter values with {@link Parameters#error} (or through
   * the typed getters) and falling back to defaults so that every problem is reported at once.
   */
  protected abstract Plugin build(PluginContext context, Parameters parameters);

  @Override
  public final Result<? extends Plugin> create(PluginContext context, Parameters parameters) {
    return checked(parameters, () -> build(context, parameters));
  }

  /**
   * Runs {@code factory}; returns its plugin, or the errors recorded in {@code parameters} (the
   * plugin closed), or the message of an {@link IllegalArgumentException} it threw.
   */
  public static <P extends Plugin> Result<P> checked(Parameters parameters,
      Supplier<? extends P> factory) {
    P plugin;
    try {
      plugin = factory.get();
    } catch (IllegalArgumentException e) {
      if (parameters.errors().isEmpty()) {
        return Result.error(String.valueOf(e.getMessage()));
      }
      return Result.errors(parameters.errors());
    }
    return checked(parameters, Result.ok(plugin));
  }

  /**
   * Returns {@code result} unless it holds a plugin while {@code parameters} recorded errors:
   * then the plugin is closed and the errors are returned instead.
   */
  public static <P extends Plugin> Result<P> checked(Parameters parameters, Result<P> result) {
    if (result.isOk() && !parameters.errors().isEmpty()) {
      result.value().close();
      return Result.errors(parameters.errors());
    }
    return result;
  }
}
