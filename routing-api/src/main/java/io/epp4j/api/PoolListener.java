package io.epp4j.api;

/**
 * Notified when endpoints join or leave the pool, for plugins that keep per-endpoint state and
 * must forget an endpoint that left. Called on the thread that changed the pool, one pool change
 * at a time and in the order the pool made them: when {@code onEndpointRemoved(e)} runs, no
 * re-add of {@code e} has been announced yet. Keep these calls short, since the next pool change
 * waits for them (metrics updates and routing do not). An exception is logged and does not undo
 * the change or keep other listeners from hearing it.
 */
public interface PoolListener {

  default void onEndpointAdded(Endpoint endpoint) {}

  default void onEndpointRemoved(Endpoint endpoint) {}
}
