package io.epp4j.api;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Function;
import java.util.concurrent.atomic.AtomicIntegerFieldUpdater;
import java.util.concurrent.atomic.AtomicReferenceFieldUpdater;
import org.jspecify.annotations.Nullable;

/**
 * The outcome of {@code Router.route}: either the endpoints to forward to (per profile, primary
 * profile first) or a {@link Rejection}. Normal outcomes are values, never exceptions.
 *
 * <p>A routed decision is also the handle through which the gateway reports the request's fate:
 * call {@link #onFirstToken()} when the first token arrives and exactly one of
 * {@link #onComplete(Usage)} or {@link #onFailure(Throwable)} at the end. Later calls after the
 * first terminal call are ignored, so in-flight counters can never go negative. A decision that
 * is never finished (dropped, or lost with its request) stops counting as in flight once it is
 * older than the router's {@code inFlightMaxAge}; finishing it after that changes no count, and
 * the request listeners still hear about it. The calls may come from any thread.
 *
 * <p>A gateway that could not reach the primary and forwards the request to one of the
 * fallbacks ({@link #endpoints()} after the first) calls {@link #onFallback(Endpoint)} before
 * the first token: the router then counts the request, and tells the plugins, on the endpoint
 * that serves it.
 */
public final class RoutingDecision {

  /** Header that carries the destination list to a proxy, as the upstream EPP writes it. */
  public static final String DESTINATION_HEADER = "x-gateway-destination-endpoint";
  /**
   * Header that tells a decode server where its prefill ran, set by the gateway from the
   * decision's prefill pick (see {@code PdProfileHandler}).
   */
  public static final String PREFILLER_HEADER = "x-prefiller-host-port";
  /**
   * The request headers the gateway sets from the decision itself ({@link #DESTINATION_HEADER},
   * {@link #PREFILLER_HEADER}): a plugin's {@link #setRequestHeader} for one of them is ignored,
   * since the request would otherwise go, or be prefilled, elsewhere than the decision (and the
   * router's in-flight counts, and Envoy's dynamic metadata) says.
   */
  public static final java.util.Set<String> RESERVED_REQUEST_HEADERS =
      java.util.Set.of(DESTINATION_HEADER, PREFILLER_HEADER);
  /**
   * Router-side receiver of a decision's lifecycle calls: for routers only. Gateways call
   * {@link #onFirstToken()}, {@link #onComplete} and {@link #onFailure} on the decision, never
   * this; plugins and their tests never need it ({@link #routed(String, Map)} builds a decision
   * without one).
   *
   * <p>It is public, with the {@link #routed(String, Map, Callbacks) routed} factory that takes
   * it, only because the router (routing-core) builds decisions from another package and Java
   * has no visibility between "package" and "public" without modules. A separate internal
   * package would not help: the factory must reach this class's private constructor, so it
   * would still be a public method somewhere. Keeping the hook here, in one documented place,
   * is the smallest surface; it is not part of the API that gateways and plugins program against
   * and may change between releases.
   */
  public interface Callbacks {
    void firstToken(RoutingDecision decision);

    void complete(RoutingDecision decision, Usage usage);

    void failure(RoutingDecision decision, Throwable cause);

    /**
     * The gateway forwards the request to {@code to} instead of {@code from}; see
     * {@link RoutingDecision#onFallback(Endpoint)}. Routers written before this call existed
     * ignore it.
     */
    default void fallback(RoutingDecision decision, Endpoint from, Endpoint to) {}

    /**
     * The request is still being served; see {@link RoutingDecision#onActivity()}. Routers
     * written before this call existed ignore it.
     */
    default void activity(RoutingDecision decision) {}
  }

  private static final Callbacks NO_CALLBACKS = new Callbacks() {
    @Override public void firstToken(RoutingDecision d) {}
    @Override public void complete(RoutingDecision d, Usage u) {}
    @Override public void failure(RoutingDecision d, Throwable c) {}
  };

  private static final int FIRST_TOKEN_SEEN = 1;
  private static final int TERMINATED = 2;
  // set while onFallback tells the router: a first token or an end reported meanwhile is
  // recorded and delivered by the fallback's thread once it is done, so that no listener hears
  // of the end (or the first token) of a request before it heard of the fallback
  private static final int FALLING_BACK = 4;

  private final @Nullable String primaryProfile;
  private final Map<String, ProfileResult> results;
  private final @Nullable Rejection rejection;
  private final Callbacks callbacks;
  // a field updater instead of an AtomicInteger: one object less per routed request
  private static final AtomicIntegerFieldUpdater<RoutingDecision> LIFECYCLE =
      AtomicIntegerFieldUpdater.newUpdater(RoutingDecision.class, "lifecycle");
  private volatile int lifecycle;
  // null until a fallback serves the request: the primary serves it
  private volatile @Nullable Endpoint servedBy;
  // the Usage or Throwable of an end reported during a fallback, until the fallback delivers it
  private static final AtomicReferenceFieldUpdater<RoutingDecision, Object> PENDING_END =
      AtomicReferenceFieldUpdater.newUpdater(RoutingDecision.class, Object.class, "pendingEnd");
  private volatile @Nullable Object pendingEnd;
  // copied on write: set by plugins while the request is routed, read by the gateway once
  private volatile Map<String, Function<RoutingDecision, @Nullable String>> responseHeaders =
      Map.of();
  // the reserved request headers plugins asked for, which were ignored; null when none
  private volatile @Nullable List<String> refusedRequestHeaders;
  private volatile Map<String, Function<RoutingDecision, @Nullable String>> requestHeaders =
      Map.of();

  private RoutingDecision(@Nullable String primaryProfile, Map<String, ProfileResult> results,
      @Nullable Rejection rejection, Callbacks callbacks) {
    this.primaryProfile = primaryProfile;
    this.results = results;
    this.rejection = rejection;
    this.callbacks = callbacks;
  }

  /**
   * A routed decision whose lifecycle calls do nothing, for testing plugins that read decisions
   * (a {@link RequestListener}'s {@code afterRouting}). {@code results} must contain a non-empty
   * result for {@code primaryProfile}; the decision keeps an unmodifiable copy of it, in its
   * iteration order.
   */
  public static RoutingDecision routed(String primaryProfile, Map<String, ProfileResult> results) {
    return routed(primaryProfile, results, NO_CALLBACKS);
  }

  /**
   * A routed decision that reports its lifecycle to {@code callbacks}: for routers only (see
   * {@link Callbacks}); the router calls it for every request it routes. Plugin tests use
   * {@link #routed(String, Map)}.
   */
  public static RoutingDecision routed(String primaryProfile, Map<String, ProfileResult> results,
      Callbacks callbacks) {
    // the caller's map may change later (or be changed by a reader of profileResults()); an
    // immutable map of at most one entry, as a single-profile cycle gives, is kept as it is
    Map<String, ProfileResult> own = results.size() <= 1 ? Map.copyOf(results)
        : Collections.unmodifiableMap(new LinkedHashMap<>(results));
    ProfileResult primary = own.get(primaryProfile);
    if (primary == null || primary.isEmpty()) {
      throw new IllegalArgumentException("primary profile '" + primaryProfile + "' picked nothing");
    }
    return new RoutingDecision(primaryProfile, own, null, Objects.requireNonNull(callbacks));
  }

  /** A rejected decision. */
  public static RoutingDecision rejected(Rejection rejection) {
    return new RoutingDecision(null, Map.of(), Objects.requireNonNull(rejection), NO_CALLBACKS);
  }

  /** Shorthand for a rejection. */
  public static RoutingDecision rejected(Rejection.Reason reason, String message) {
    return rejected(new Rejection(reason, message));
  }

  public boolean isRouted() {
    return rejection == null;
  }

  /** The rejection, or {@code null} when routed. */
  public @Nullable Rejection rejection() {
    return rejection;
  }

  /** The primary profile's name, or {@code null} when rejected. */
  public @Nullable String primaryProfile() {
    return primaryProfile;
  }

  /** Results of every profile that ran, in the order they ran; unmodifiable. */
  public Map<String, ProfileResult> profileResults() {
    return results;
  }

  /** The primary profile's endpoints (primary first, then fallbacks); empty when rejected. */
  public List<Endpoint> endpoints() {
    if (primaryProfile == null) {
      return List.of();
    }
    // routed(...) checked the primary profile has a result
    return Objects.requireNonNull(results.get(primaryProfile)).endpoints();
  }

  /**
   * The endpoint to forward to.
   *
   * @throws IllegalStateException when the decision is a rejection
   */
  public Endpoint primary() {
    if (primaryProfile == null) {
      throw new IllegalStateException("request was rejected: " + rejection);
    }
    return Objects.requireNonNull(results.get(primaryProfile)).endpoints().get(0);
  }

  /**
   * The endpoint that serves the request: {@link #primary()} unless the gateway reported a
   * fallback with {@link #onFallback(Endpoint)}, then the last fallback it reported.
   *
   * @throws IllegalStateException when the decision is a rejection
   */
  public Endpoint servedBy() {
    Endpoint e = servedBy;
    return e != null ? e : primary();
  }

  /**
   * The first endpoint the named profile picked, when that profile ran, picked one and is not
   * the primary profile; null otherwise. A profile handler that runs a secondary profile (for
   * example prefill next to decode) names it, and a gateway reads its pick here.
   */
  public @Nullable Endpoint secondaryEndpoint(String profile) {
    ProfileResult r = results.get(profile);
    return r == null || profile.equals(primaryProfile) ? null : r.primary();
  }

  /**
   * Asks the gateway to set header {@code name} to {@code value} on the request it forwards to
   * the endpoint, replacing any the client sent, or, with a null value, to remove a header of
   * that name the client sent (so that no client sets it): the upstream EPP's pre-request
   * plugins, such as {@code p2p-source-producer}'s KV cache source. For plugins, in
   * {@code RequestListener.afterRouting}, which runs before {@code route} returns. A second call
   * for the same name (compared ignoring case) replaces the first. Ignored on a rejection, and
   * for the {@link #RESERVED_REQUEST_HEADERS} (see {@link #refusedRequestHeaders()}).
   */
  public void setRequestHeader(String name, @Nullable String value) {
    setRequestHeaderFor(name, value == null ? NO_VALUE : d -> value);
  }

  private static final Function<RoutingDecision, @Nullable String> NO_VALUE = d -> null;

  /**
   * {@link #setRequestHeader} with a value that depends on the endpoint the request is forwarded
   * to: {@code value} is asked for this decision when the gateway reads {@link #requestHeaders()}
   * and {@link #removedRequestHeaders()}, for the primary pick and again, after
   * {@link #onFallback}, for a fallback ({@link #servedBy()} names the endpoint of the attempt).
   * A null value removes a header of that name the client sent. A gateway whose fallbacks are
   * made by its proxy, after the request's headers were set (Envoy), sends the primary's values.
   */
  public void setRequestHeaderFor(String name, Function<RoutingDecision, @Nullable String> value) {
    String n = askable(name, value);
    if (n != null) {
      synchronized (this) {
        if (RESERVED_REQUEST_HEADERS.contains(n)) {
          List<String> r = refusedRequestHeaders;
          List<String> more = new java.util.ArrayList<>(r == null ? List.of() : r);
          more.add(n);
          refusedRequestHeaders = List.copyOf(more);
        } else {
          requestHeaders = withHeader(requestHeaders, n, value);
        }
      }
    }
  }

  /**
   * The {@link #RESERVED_REQUEST_HEADERS} plugins asked to set or remove, in the order asked,
   * names in lower case; each ask was ignored. Empty when none. For routers, to name the plugin
   * that asked.
   */
  public List<String> refusedRequestHeaders() {
    List<String> r = refusedRequestHeaders;
    return r == null ? List.of() : r;
  }

  /**
   * The headers plugins asked the gateway to set on the request it forwards (see
   * {@link #setRequestHeader}), names in lower case, values as they are for this decision now;
   * empty when none.
   */
  public Map<String, String> requestHeaders() {
    return valuesNow(requestHeaders);
  }

  /**
   * The headers plugins asked the gateway to remove from the request it forwards, when the client
   * sent them (see {@link #setRequestHeader}); names in lower case, empty when none.
   */
  public java.util.Set<String> removedRequestHeaders() {
    Map<String, Function<RoutingDecision, @Nullable String>> m = requestHeaders;
    if (m.isEmpty()) {
      return java.util.Set.of();
    }
    java.util.Set<String> out = new java.util.LinkedHashSet<>();
    m.forEach((name, f) -> {
      if (f.apply(this) == null) {
        out.add(name);
      }
    });
    return Collections.unmodifiableSet(out);
  }

  /**
   * Asks the gateway to set header {@code name} on its answer to the client, with the value
   * {@code value} gives for this decision when the gateway reads {@link #responseHeaders()} (so a
   * value can name the endpoint that {@link #servedBy() served} the request after a fallback); a
   * null value sets nothing. For plugins, typically in {@code RequestListener.afterRouting}: the
   * upstream EPP's response-header processors, such as the session token of
   * {@code session-affinity-scorer}. A second call for the same name (compared ignoring case)
   * replaces the first. Ignored on a rejection.
   */
  public void setResponseHeader(String name, Function<RoutingDecision, @Nullable String> value) {
    String n = askable(name, value);
    if (n != null) {
      synchronized (this) {
        responseHeaders = withHeader(responseHeaders, n, value);
      }
    }
  }

  /** The header name a plugin's ask is kept under (lower case); null when it is ignored. */
  private @Nullable String askable(String name, Function<RoutingDecision, @Nullable String> value) {
    Objects.requireNonNull(value, "value");
    String n = name.toLowerCase(java.util.Locale.ROOT);
    return primaryProfile == null || n.isEmpty() ? null : n;
  }

  /** {@code now} with {@code name} asked for as {@code value}, replacing an earlier ask. */
  private static Map<String, Function<RoutingDecision, @Nullable String>> withHeader(
      Map<String, Function<RoutingDecision, @Nullable String>> now, String name,
      Function<RoutingDecision, @Nullable String> value) {
    if (now.isEmpty()) {
      return Map.of(name, value); // the usual case: one plugin asks for one header
    }
    Map<String, Function<RoutingDecision, @Nullable String>> m = new LinkedHashMap<>(now);
    m.put(name, value);
    return Collections.unmodifiableMap(m);
  }

  /** The values the asks give for this decision now, those without one left out. */
  private Map<String, String> valuesNow(
      Map<String, Function<RoutingDecision, @Nullable String>> asked) {
    if (asked.isEmpty()) {
      return Map.of();
    }
    Map<String, String> out = new LinkedHashMap<>();
    asked.forEach((name, f) -> {
      String v = f.apply(this);
      if (v != null) {
        out.put(name, v);
      }
    });
    return Collections.unmodifiableMap(out);
  }

  /**
   * The headers plugins asked the gateway to set on its answer to the client (see
   * {@link #setResponseHeader}), names in lower case, values as they are for this decision now;
   * empty when none (always for a rejection). A gateway reads them when it writes the answer's
   * headers and sets them, replacing any of the same name the endpoint sent, on answers an
   * endpoint served (not on its own error answers).
   */
  public Map<String, String> responseHeaders() {
    return valuesNow(responseHeaders);
  }

  /** The {@value #DESTINATION_HEADER} value: {@code ip:port[,ip:port...]}; empty if rejected. */
  public String destinationHeaderValue() {
    List<Endpoint> eps = endpoints();
    StringBuilder sb = new StringBuilder(eps.size() * 20);
    for (int i = 0; i < eps.size(); i++) {
      if (i > 0) {
        sb.append(',');
      }
      sb.append(eps.get(i).id());
    }
    return sb.toString();
  }

  /**
   * Reports that the request goes to {@code endpoint}, one of {@link #endpoints()}, instead of
   * the endpoint that was to serve it ({@link #servedBy()}), because that one could not be
   * reached. The router moves the request's in-flight counts there and tells the plugins that
   * learn from routes (the prefix index, session bindings, the pending work of
   * {@code token-cost-picker}), so they do not count a request on an endpoint that never got
   * it; the lifecycle calls after it report {@code endpoint}. Call it before forwarding the
   * request there; a gateway that tries the fallbacks in order calls it once per fallback.
   *
   * <p>Calls after the first token or the end are ignored, as is a call naming the endpoint
   * that already serves the request, or one made while another thread's call is under way. A
   * first token or an end reported on another thread while this call runs is passed on to the
   * router when this call is done, so listeners hear of the fallback first.
   *
   * @throws IllegalArgumentException when {@code endpoint} is not one of {@link #endpoints()}
   * @throws IllegalStateException when the decision is a rejection
   */
  public void onFallback(Endpoint endpoint) {
    Objects.requireNonNull(endpoint, "endpoint");
    if (primaryProfile == null) {
      throw new IllegalStateException("request was rejected: " + rejection);
    }
    Endpoint named = null;
    for (Endpoint e : endpoints()) {
      if (e.id().equals(endpoint.id())) {
        named = e;
        break;
      }
    }
    if (named == null) {
      throw new IllegalArgumentException("endpoint " + endpoint.id()
          + " is not one of the decision's endpoints " + destinationHeaderValue());
    }
    if (!LIFECYCLE.compareAndSet(this, 0, FALLING_BACK)) {
      return;
    }
    try {
      Endpoint current = servedBy;
      Endpoint from = current != null ? current : primary();
      if (!from.id().equals(named.id())) {
        servedBy = named; // only the thread holding FALLING_BACK writes it
        callbacks.fallback(this, from, named);
      }
    } finally {
      finishFallback();
    }
  }

  /** Clears {@link #FALLING_BACK} and passes on what was reported meanwhile, in order. */
  private void finishFallback() {
    int s;
    do {
      s = lifecycle;
    } while (!LIFECYCLE.compareAndSet(this, s, s & ~FALLING_BACK));
    if ((s & FIRST_TOKEN_SEEN) != 0) {
      callbacks.firstToken(this);
    }
    if ((s & TERMINATED) != 0) {
      deliverEnd(Objects.requireNonNull(pendingEnd));
    }
  }

  private void deliverEnd(Object end) {
    if (end instanceof Usage u) {
      callbacks.complete(this, u);
    } else {
      callbacks.failure(this, (Throwable) end);
    }
  }

  /**
   * Whether the decision is finished: its completion or failure was reported (a rejection is
   * never finished). A gateway that renews a decision on a timer ({@link #onActivity}) stops
   * when it is.
   */
  public boolean isFinished() {
    return primaryProfile != null && (lifecycle & TERMINATED) != 0;
  }

  /**
   * Reports that the request is still being served, for a request that legitimately lasts long,
   * such as a websocket session (vLLM's {@code /v1/realtime}): the router's
   * {@code inFlightMaxAge}, which releases a decision never finished, then counts from now, so
   * the request keeps counting as in flight while the gateway keeps saying so. Request listeners
   * hear {@link RequestListener#onActivity}, so plugins that keep their own count of open
   * requests (the {@code token-cost-picker}) renew it too. Call it well within that age (a
   * quarter of it, say); it is cheap, but not meant for every message. Ignored once the decision
   * is finished, and on a rejection.
   */
  public void onActivity() {
    if (primaryProfile != null && (lifecycle & TERMINATED) == 0) {
      callbacks.activity(this);
    }
  }

  /** Reports that the first token arrived; only the first call counts. */
  public void onFirstToken() {
    for (;;) {
      int s = lifecycle;
      if ((s & (FIRST_TOKEN_SEEN | TERMINATED)) != 0) {
        return;
      }
      if (LIFECYCLE.compareAndSet(this, s, s | FIRST_TOKEN_SEEN)) {
        if (s == 0) {
          callbacks.firstToken(this);
        } // else a fallback is being reported: its thread passes this on when it is done
        return;
      }
    }
  }

  /**
   * Whether an answer with HTTP status {@code status} from the endpoint ends its decision with
   * {@link #onFailure} rather than {@link #onComplete}: a 5xx (the endpoint failed), a 429 (the
   * endpoint refused the request under load) or a status that is not one (below 100, above 599).
   * Any other answer, a 400 for a bad prompt or a 404 for an unknown model among them, is the
   * endpoint serving the request: the fault is the client's, so it completes. Every gateway
   * integration here ends decisions by this rule, so that request listeners that count an
   * endpoint's failures (a circuit breaker, a health signal) hear the same thing whichever
   * gateway runs the router.
   */
  public static boolean endpointFailed(int status) {
    return status < 100 || status > 599 || status >= 500 || status == 429;
  }

  /** Reports completion; only the first terminal call ({@code onComplete}/{@code onFailure}) counts. */
  public void onComplete(Usage usage) {
    end(Objects.requireNonNull(usage, "usage"));
  }

  /** Reports failure; only the first terminal call counts. */
  public void onFailure(Throwable cause) {
    end(Objects.requireNonNull(cause, "cause"));
  }

  private void end(Object end) {
    for (;;) {
      int s = lifecycle;
      if ((s & TERMINATED) != 0) {
        return;
      }
      if ((s & FALLING_BACK) != 0) {
        // the fallback's thread delivers the end; the first end to claim the slot is the one
        if (!PENDING_END.compareAndSet(this, null, end)) {
          return;
        }
        for (;;) {
          int t = lifecycle;
          if ((t & TERMINATED) != 0) {
            // the fallback finished before this end was marked, and an end reported after it
            // took the ordinary path and was delivered: that one counts, this one is ignored
            return;
          }
          if (LIFECYCLE.compareAndSet(this, t, t | TERMINATED)) {
            if ((t & FALLING_BACK) == 0) {
              deliverEnd(end); // the fallback finished meanwhile without seeing this end
            }
            return;
          }
        }
      }
      if (LIFECYCLE.compareAndSet(this, s, s | TERMINATED)) {
        deliverEnd(end);
        return;
      }
    }
  }

  @Override
  public String toString() {
    return rejection != null
        ? "RoutingDecision{rejected=" + rejection + "}"
        : "RoutingDecision{primaryProfile=" + primaryProfile + ", results=" + results.values() + "}";
  }
}
