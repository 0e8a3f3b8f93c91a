package io.epp4j.api;

/**
 * Lifecycle hooks of a routed request, for plugins that learn from outcomes (the prefix index
 * records where a prompt went; load trackers count in-flight work). Calls come from the router
 * and the gateway's threads; implementations must be thread-safe and must not block.
 */
public interface RequestListener {

  /** Called once after a successful routing decision, on the routing thread. */
  default void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {}

  /**
   * Called when the gateway could not reach {@code from} and forwards the request to
   * {@code to}, another endpoint of the decision ({@link RoutingDecision#onFallback}), before
   * the first token. What {@code afterRouting} recorded for {@code from} belongs to {@code to}
   * now; the lifecycle calls that follow name {@code to}.
   */
  default void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {}

  /**
   * Called when the gateway reports that a long request is still being served on
   * {@code endpoint} ({@link RoutingDecision#onActivity()}, a websocket session, say): a plugin
   * that forgets requests never finished after some age counts that age from now.
   */
  default void onActivity(InferenceRequest request, Endpoint endpoint) {}

  /** Called when the first token arrives from {@code endpoint}. */
  default void onFirstToken(InferenceRequest request, Endpoint endpoint) {}

  /** Called when the request finished on {@code endpoint}. */
  default void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {}

  /** Called when forwarding or serving failed on {@code endpoint}. */
  default void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {}
}
