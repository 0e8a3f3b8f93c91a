package io.epp4j.api;

/**
 * A plugin that can learn from what another router of the same pool did, so that its state
 * covers the requests it never saw itself (several gateway replicas behind one load balancer).
 * The router calls these methods when a plugin that replicates routing hints between routers
 * delivers them through {@link RouterHints}; a plugin that keeps no such state ignores them.
 *
 * <p>Calls come from that plugin's background thread, never from a route, and may run
 * concurrently with routes. Implementations must be thread-safe, must not block, must keep the
 * capacities they keep for their own knowledge, and must only look up per-endpoint state, never
 * create it (an endpoint this router has not announced is ignored).
 */
public interface HintListener {

  /** Another router sent a prompt with these block hashes to {@code endpointId}. */
  default void onRemotePrefix(String endpointId, PrefixBlocks blocks) {}

  /**
   * Another router sent a request of session {@code sessionKey} (the request's session key) to
   * {@code endpointId}; {@code nowNanos} is this router's clock when the hint was applied.
   */
  default void onRemoteSession(String sessionKey, String endpointId, long nowNanos) {}
}
