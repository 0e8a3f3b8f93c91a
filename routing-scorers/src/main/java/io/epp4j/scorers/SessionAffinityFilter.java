package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Filter;
import io.epp4j.api.HintListener;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PoolListener;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import java.util.List;

/**
 * {@code session-affinity-filter}: {@code session-affinity-scorer} as a hard pin. When the
 * request's session is pinned to one of the candidates, that candidate is the only one kept;
 * otherwise (no session, an unbound one, or an endpoint that is no longer a candidate) every
 * candidate is kept for the filters and scorers after it. It never keeps none. The same
 * parameters, strategies and bindings as the scorer ({@link SessionAffinityScorer}); the filter
 * keeps its own bindings.
 */
final class SessionAffinityFilter implements Filter, RequestListener, PoolListener,
    HintListener {
  private final SessionAffinityScorer pins;

  SessionAffinityFilter(SessionAffinityScorer pins) {
    this.pins = pins;
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    int i = SessionAffinityScorer.indexOf(pins.target(request, state, candidates), candidates);
    return i < 0 || candidates.size() == 1 ? candidates : List.of(candidates.get(i));
  }

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    pins.afterRouting(request, state, decision);
  }

  @Override
  public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
    pins.onFallback(request, from, to);
  }

  @Override
  public void onRemoteSession(String sessionKey, String endpointId, long nowNanos) {
    pins.onRemoteSession(sessionKey, endpointId, nowNanos);
  }

  @Override
  public void onEndpointAdded(Endpoint endpoint) {
    pins.onEndpointAdded(endpoint);
  }

  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    pins.onEndpointRemoved(endpoint);
  }

  /** The endpoint id a session is bound to, or {@code null}; for tests. */
  @org.jspecify.annotations.Nullable String binding(String sessionKey) {
    return pins.binding(sessionKey);
  }

  @Override
  public String toString() {
    return "session-affinity-filter";
  }

  /** Provides {@code session-affinity-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("session-affinity-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new SessionAffinityFilter(SessionAffinityScorer.fromParameters(c, p));
    }
  }
}
