package io.epp4j.api;

/**
 * Creates plugins of one type from named parameters. Register implementations in
 * {@code META-INF/services/io.epp4j.api.PluginProvider}; the router finds them through
 * {@link java.util.ServiceLoader} and a config refers to them by {@link #type()}.
 *
 * <p>When two providers claim one type name, the one with the higher {@link #priority()} wins;
 * on equal priority the one whose class name sorts first wins; the conflict is reported.
 */
public interface PluginProvider {

  /** The type name in lower-kebab-case, e.g. {@code prefix-cache-scorer}. */
  String type();

  /**
   * Former names of this type that configuration files may still use. A config naming one loads
   * this provider's plugin, and the load reports once which name is current. A real type of the
   * same name always wins over an alias.
   */
  default java.util.Set<String> aliases() {
    return java.util.Set.of();
  }

  /** Precedence among providers of the same type; built-ins use 0. */
  default int priority() {
    return 0;
  }

  /**
   * Creates a plugin. Returns an error result (never throws) when the parameters are invalid;
   * messages should name the parameter, e.g. {@code "parameter 'blockSizeTokens' must be > 0"}.
   */
  Result<? extends Plugin> create(PluginContext context, Parameters parameters);
}
