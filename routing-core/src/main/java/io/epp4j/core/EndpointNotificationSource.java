package io.epp4j.core;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;

/**
 * {@code endpoint-notification-source} (llm-d data layer): tells its extractors when endpoints
 * join or leave the pool. In epp4j the router itself does this for every plugin that implements
 * {@link io.epp4j.api.PoolListener} (the precise scorer among them) whenever the application
 * changes the pool ({@link Router#setEndpoints}, {@link Router#addEndpoint},
 * {@link Router#removeEndpoint}), so this plugin only marks the mapping and has no parameters.
 */
final class EndpointNotificationSource implements Plugin {
  @Override
  public String toString() {
    return "endpoint-notification-source";
  }

  /**
   * Provides {@code endpoint-notification-source}; public only for
   * {@link java.util.ServiceLoader}.
   */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("endpoint-notification-source");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters p) {
      return new EndpointNotificationSource();
    }
  }
}
