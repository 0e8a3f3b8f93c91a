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

  /**
   * The router's {@code inFlightMaxAge}: how long a routed request the gateway never finished
   * keeps counting as in flight, renewed by {@link RoutingDecision#onActivity()}. A plugin that
   * keeps its own count of open requests forgets one after this long too, so that the two
   * agree. Ten minutes (the router's default) unless the router says otherwise.
   */
  default java.time.Duration inFlightMaxAge() {
    return java.time.Duration.ofMinutes(10);
  }

  /** A service registered with the router builder, if any. */
  <T> Optional<T> service(Class<T> type);

  /**
   * A plugin defined earlier in the same configuration file, by its name: how a plugin that
   * composes others (a decision tree of filters, a profile handler and its deciders) finds them,
   * as the upstream EPP's plugin handle does. Plugins defined later, and plugins of configurations
   * built in code, are not visible; the default finds nothing.
   */
  default Optional<Plugin> plugin(String name) {
    return Optional.empty();
  }

  /**
   * Every plugin defined earlier in the same configuration file, in file order: how a plugin
   * finds a data producer it depends on by what it is rather than by name (the precise scorer
   * finds a {@code token-producer} this way). Empty by default.
   */
  default java.util.List<Plugin> earlierPlugins() {
    return java.util.List.of();
  }
}
