package io.epp4j.api;

/**
 * Notified when endpoints join or leave the pool, for plugins that keep per-endpoint state and
 * must forget an endpoint that left. Called on the thread that changed the pool.
 */
public interface PoolListener {

  default void onEndpointAdded(Endpoint endpoint) {}

  default void onEndpointRemoved(Endpoint endpoint) {}
}
