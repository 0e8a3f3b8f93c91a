package io.epp4j.sim;

import java.util.List;

/**
 * Receives the KV-cache events of simulated replicas, one batch per engine step as vLLM
 * publishes them, in simulated time order. This is the in-process stand-in for vLLM's ZMQ
 * publisher: a precise-mode index can subscribe here instead of to a socket. Called on the
 * simulation thread; implementations must not keep the arrays beyond the call if they mutate
 * them.
 */
@FunctionalInterface
public interface KvEventListener {

  /**
   * A batch of events from one replica's engine step.
   *
   * @param endpointId     the replica ({@code host:port}, as the router knows it)
   * @param timestampNanos simulated time of the step, on the router's ticker
   * @param events         events in the order they happened
   */
  void onKvEvents(String endpointId, long timestampNanos, List<KvEvent> events);
}
