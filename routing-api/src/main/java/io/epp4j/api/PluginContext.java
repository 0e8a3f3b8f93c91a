package io.epp4j.api;

import java.util.Optional;

/**
 * What a provider gets besides parameters when creating a plugin: the instance name, the
 * router's clock and shared services offered by the embedding application (for example a KV
 * block index used by several plugins).
 */
public interface PluginContext {

  /** The plugin instance name (its {@code name} in the config, else its type). */
  String pluginName();

  /** The router's clock. */
  Ticker ticker();

  /** A service registered with the router builder, if any. */
  <T> Optional<T> service(Class<T> type);
}
