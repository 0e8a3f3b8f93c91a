package io.epp4j.scorers;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PoolListener;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import org.jspecify.annotations.Nullable;

/**
 * A plugin that reads in-flight counts from an {@link InFlightLoadProducer} and, when the file
 * has none, keeps one of its own, as upstream adds a default producer: the request lifecycle and
 * the pool's changes reach that own producer through these default methods. A producer of the
 * file hears them as a plugin of the file, so they reach nothing then.
 */
interface OwnsInFlightLoad extends RequestListener, PoolListener {

  /** The producer this plugin keeps for itself, or null when it reads the file's. */
  @Nullable InFlightLoadProducer ownLoad();

  @Override
  default void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    InFlightLoadProducer l = ownLoad();
    if (l != null) {
      l.afterRouting(request, state, decision);
    }
  }

  @Override
  default void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
    InFlightLoadProducer l = ownLoad();
    if (l != null) {
      l.onFallback(request, from, to);
    }
  }

  @Override
  default void onActivity(InferenceRequest request, Endpoint endpoint) {
    InFlightLoadProducer l = ownLoad();
    if (l != null) {
      l.onActivity(request, endpoint);
    }
  }

  @Override
  default void onFirstToken(InferenceRequest request, Endpoint endpoint) {
    InFlightLoadProducer l = ownLoad();
    if (l != null) {
      l.onFirstToken(request, endpoint);
    }
  }

  @Override
  default void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
    InFlightLoadProducer l = ownLoad();
    if (l != null) {
      l.onComplete(request, endpoint, usage);
    }
  }

  @Override
  default void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
    InFlightLoadProducer l = ownLoad();
    if (l != null) {
      l.onFailure(request, endpoint, cause);
    }
  }

  @Override
  default void onEndpointAdded(Endpoint endpoint) {
    InFlightLoadProducer l = ownLoad();
    if (l != null) {
      l.onEndpointAdded(endpoint);
    }
  }

  @Override
  default void onEndpointRemoved(Endpoint endpoint) {
    InFlightLoadProducer l = ownLoad();
    if (l != null) {
      l.onEndpointRemoved(endpoint);
    }
  }
}
