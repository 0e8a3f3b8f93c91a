package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Plugin;
import io.epp4j.api.PoolListener;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.Rejection;
import io.epp4j.api.RequestListener;
import io.epp4j.api.Result;
import io.epp4j.api.RouterHints;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Ticker;
import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.OpenTelemetry;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.function.Function;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * Decides which endpoint serves each inference request.
 *
 * <pre>{@code
 * Router router = Router.builder()
 *     .endpoints(List.of(Endpoint.parse("10.0.0.1:8000"), Endpoint.parse("10.0.0.2:8000")))
 *     .build();                                   // EPP default profile
 * RoutingDecision d = router.route(request);
 * if (d.isRouted()) { forward(d.primary()); ...; d.onComplete(usage); }
 * }</pre>
 *
 * <p>{@link #route} is thread-safe and takes no locks: it reads one immutable {@link State}, the
 * pool (endpoints with their latest metrics) together with the configuration, through a volatile
 * field, and uses only that for the whole request. Pool, metrics and configuration changes are
 * serialized among themselves and publish a new state; once {@link #removeEndpoint} returns, no
 * later {@code route} call returns that endpoint, and once {@link #reconfigure} returns, every
 * later {@code route} call runs the new configuration.
 *
 * <p>The request path: {@link #route} → the configuration's {@link ProfileHandler} → a
 * {@link SchedulingCycle} per profile it runs (filters, weighted scorers, picker) → a
 * {@link RoutingDecision} whose lifecycle an {@link InFlightLedger.Tracker} follows.
 *
 * <p>A routed request counts as in flight on its endpoint until the gateway calls
 * {@link RoutingDecision#onComplete} or {@link RoutingDecision#onFailure}, or until it is older
 * than {@link Builder#inFlightMaxAge}, whichever comes first, so a decision the gateway drops
 * or loses (even one that was garbage-collected) stops counting against its endpoint.
 */
public final class Router implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(Router.class.getName());

  /**
   * Where a plugin module offers the profile {@code Router.builder().build()} runs when given no
   * configuration: routing-scorers ships the EPP default profile there, since it owns the plugin
   * types that profile names.
   */
  public static final String DEFAULT_CONFIG_RESOURCE = "META-INF/epp4j/default-config.yaml";

  /** What one route reads: the pool and the configuration, published together. */
  private record State(PoolSnapshot pool, ActiveConfig active) {
    State withPool(PoolSnapshot p) {
      return new State(p, active);
    }
  }

  private final PluginRegistry registry;
  private final Ticker ticker;
  private final OpenAiRequestParser parser;
  private final PoolSaturation saturation;
  private final RouterTelemetry telemetry;
  private final Function<Class<?>, Optional<?>> services;
  private final List<Object> extraListeners;
  private final TieBreaks tieBreaks;
  private final ThrottledWarning routerWarning;
  private final ThrottledWarning expiryWarning;
  private final ThrottledWarning futureMetricsWarning;
  private final Duration inFlightMaxAge;
  private final InFlightLedger ledger;
  private final RetiredPlugins retired;
  private final HintApplier hints;
  /**
   * Serializes membership changes and reloads together with their pool-listener notifications,
   * so listeners hear adds and removes in the order the pool made them (a removal still
   * notifying cannot be overtaken by a re-add of the same id) and a new listener hears the whole
   * pool before anything else. Metrics updates take only {@link #stateLock}, so a slow listener
   * never delays them.
   */
  private final Object membershipLock = new Object();
  private final Object stateLock = new Object();
  /**
   * The in-flight counters of endpoints that left the pool while requests counted on them were
   * still running, by id. An endpoint that comes back at the same address (a readiness probe
   * that failed under load, a discovery blip) takes its counters up again, so the requests it
   * still serves go on counting against it, and their end takes off only what they added. An
   * entry is dropped at the next membership change once its requests have ended or expired, so
   * there are never more entries than requests in flight, plus the one leaving. Guarded by
   * {@link #stateLock}.
   */
  private final Map<String, EndpointState.InFlight> departed = new HashMap<>();
  /**
   * The pool as the pool listeners a reload dropped last heard it, until they are closed: one
   * that a later reload takes back (the same instance, as a configuration built in code can
   * give) missed the removals made meanwhile and hears them then, or it kept state for endpoints
   * gone for good. Guarded by {@link #membershipLock}.
   */
  private final Map<PoolListener, List<Endpoint>> lastHeard = new IdentityHashMap<>();
  private volatile State state;
  private volatile boolean closed;

  private Router(RouterSettings b, PluginReuse.Loaded initial) {
    this.registry = b.registry();
    this.ticker = b.ticker;
    this.parser = b.parser;
    this.tieBreaks = new TieBreaks(b.seed);
    this.services = b.services();
    this.extraListeners = List.copyOf(b.extraListeners);
    this.saturation = new PoolSaturation(b.saturationQueueThreshold, b.saturationKvThreshold,
        RouterSettings.nanos(b.metricsStaleness), b.ticker);
    this.routerWarning = new ThrottledWarning(LOG, ticker, "router");
    this.inFlightMaxAge = b.inFlightMaxAge;
    this.expiryWarning = new ThrottledWarning(LOG, ticker, "in-flight accounting:");
    this.futureMetricsWarning = new ThrottledWarning(LOG, ticker, "metrics");
    // expiry runs on later route and updateMetrics calls, after telemetry is set
    this.ledger = new InFlightLedger(RouterSettings.nanos(inFlightMaxAge), ticker.nanos(), this::expired,
        id -> {
          EndpointState s = state.pool.get(id);
          return s != null ? s.inFlight : keptCounters(id);
        }, ticker::nanos, this::keepCountedIfLeft);
    this.state = new State(PoolSnapshot.EMPTY, new ActiveConfig(initial.config(),
        initial.declared(), extraListeners, ledger, ticker, routerWarning, this::isClosed,
        this::running, this::awaitingClose));
    this.telemetry = new RouterTelemetry(b.openTelemetry(), this::readPool,
        this::poolSaturation);
    this.hints = b.hints;
    hints.bind(() -> state.pool, () -> state.active, ticker, RouterSettings.nanos(inFlightMaxAge),
        ledger::expireIfDue);
    this.retired = new RetiredPlugins(b.retiredPluginCloseDelay, this::inUse, membershipLock);
    for (String w : initial.config().warnings()) {
      LOG.warning(w);
    }
    for (String c : registry.conflicts()) {
      LOG.warning(c);
    }
    setEndpoints(b.endpoints);
  }

  private void expired(long n) {
    telemetry.inFlightExpired(n);
    expiryWarning.report("released " + n + " requests routed more than " + inFlightMaxAge
        + " ago that the gateway never finished; call onComplete or onFailure on every routed"
        + " decision", null);
  }

  public static Builder builder() {
    return new Builder();
  }

  // ---------------------------------------------------------------------------------- routing

  /**
   * Routes a request; never throws for normal outcomes (see {@link RoutingDecision}). A filter,
   * scorer, picker or profile handler that throws gives this request a 503 rejection naming the
   * plugin; a request listener that throws is skipped and the request stays routed. Either is
   * logged with its stack trace at most once a minute per plugin, with the count left out.
   */
  public RoutingDecision route(InferenceRequest request) {
    return schedule(request, null);
  }

  /**
   * Routes a request to one of the pool's endpoints whose {@link Endpoint#id() id} is in
   * {@code eligible}, as {@link #route(InferenceRequest)} otherwise does among all of them: a
   * proxy that may only send this request to some replicas (Envoy's subset hint) names them
   * here. Ids not in the pool are ignored. The rejection is {@code NO_ENDPOINTS} (503) when the
   * set is empty or none of its ids is in the pool. The restriction applies before admitters,
   * filters, scorers and picker, which see only the eligible candidates, in pool order (a list
   * without {@link io.epp4j.api.PoolOrder} unless every endpoint is eligible, as after a filter);
   * load shedding of sheddable requests still looks at the whole pool's saturation.
   */
  public RoutingDecision route(InferenceRequest request, Set<String> eligible) {
    return schedule(request, Objects.requireNonNull(eligible, "eligible"));
  }

  /** Both {@code route(InferenceRequest...)} overloads: the pool's endpoints or the eligible ones. */
  private RoutingDecision schedule(InferenceRequest request, @Nullable Set<String> eligible) {
    long start = System.nanoTime();
    State s = state;
    RoutingDecision d;
    try {
      d = decide(request, s.pool, s.active, eligible);
    } catch (SchedulingCycle.PluginFailure e) {
      // a plugin bug must not take the gateway down: this request gets a 503, the plugin was
      // logged (throttled) where it threw, and the next request is routed as usual
      return failed(start,
          Objects.requireNonNull(e.getCause()).getClass().getSimpleName() + " in " + e.source);
    } catch (RuntimeException e) {
      routerWarning.report("failed to route a request: " + e.getClass().getName(), e);
      return failed(start, e.getClass().getSimpleName());
    }
    if (d.isRouted()) {
      telemetry.routed();
    } else {
      telemetry.rejected(Objects.requireNonNull(d.rejection()).reason());
    }
    telemetry.recordDuration(System.nanoTime() - start);
    return d;
  }

  private RoutingDecision failed(long start, String what) {
    telemetry.error();
    telemetry.recordDuration(System.nanoTime() - start);
    return RoutingDecision.rejected(Rejection.Reason.NO_ENDPOINTS, "routing failed: " + what);
  }

  /**
   * Routes a request that has no body to parse ({@code GET /v1/models} and the like), by load
   * alone as it carries no prompt, with its headers read as {@link #route(String, Map, byte[])}
   * reads them: request id, priority (a sheddable request is shed on a saturated pool; a priority
   * that is not an integer gives a 400 rejection naming the header) and session key.
   */
  public RoutingDecision routeHeaders(Map<String, String> headers) {
    return scheduleHeaders(headers, null);
  }

  /**
   * {@link #routeHeaders(Map)} among the {@code eligible} endpoints only (see
   * {@link #route(InferenceRequest, Set)}).
   */
  public RoutingDecision routeHeaders(Map<String, String> headers, Set<String> eligible) {
    return scheduleHeaders(headers, Objects.requireNonNull(eligible, "eligible"));
  }

  private RoutingDecision scheduleHeaders(Map<String, String> headers,
      @Nullable Set<String> eligible) {
    Result<InferenceRequest> parsed = parser.parseHeaders(headers);
    if (!parsed.isOk()) {
      telemetry.rejected(Rejection.Reason.INVALID_REQUEST);
      return RoutingDecision.rejected(Rejection.Reason.INVALID_REQUEST, parsed.errors().get(0));
    }
    return schedule(parsed.value(), eligible);
  }

  /**
   * Parses an OpenAI request body and routes it. A malformed or oversized body gives a 400
   * rejection whose message names the problem.
   */
  public RoutingDecision route(String path, Map<String, String> headers, byte[] body) {
    Result<InferenceRequest> parsed = parser.parse(path, headers, body);
    if (!parsed.isOk()) {
      telemetry.rejected(Rejection.Reason.INVALID_REQUEST);
      return RoutingDecision.rejected(Rejection.Reason.INVALID_REQUEST, parsed.errors().get(0));
    }
    return schedule(parsed.value(), null);
  }

  /**
   * Parses an OpenAI request body and routes it among the {@code eligible} endpoints only (see
   * {@link #route(InferenceRequest, Set)}). A malformed body is a 400 whatever the subset.
   */
  public RoutingDecision route(String path, Map<String, String> headers, byte[] body,
      Set<String> eligible) {
    Objects.requireNonNull(eligible, "eligible");
    Result<InferenceRequest> parsed = parser.parse(path, headers, body);
    if (!parsed.isOk()) {
      telemetry.rejected(Rejection.Reason.INVALID_REQUEST);
      return RoutingDecision.rejected(Rejection.Reason.INVALID_REQUEST, parsed.errors().get(0));
    }
    return schedule(parsed.value(), eligible);
  }

  /** The request path proper, over one pool snapshot and one configuration. */
  private RoutingDecision decide(InferenceRequest request, PoolSnapshot pool,
      ActiveConfig active, @Nullable Set<String> eligible) {
    long now = ticker.nanos();
    ledger.expireIfDue(now);
    if (closed) {
      return RoutingDecision.rejected(Rejection.Reason.NO_ENDPOINTS, "router is closed");
    }
    if (pool.states.length == 0) {
      return RoutingDecision.rejected(Rejection.Reason.NO_ENDPOINTS, "no endpoints in the pool");
    }
    // an endpoint whose engine sleeps answers 503: routed to only when none is awake
    List<Candidate> candidates = pool.awake;
    if (eligible != null) {
      candidates = eligibleCandidates(pool, eligible);
      if (candidates.isEmpty()) {
        return RoutingDecision.rejected(Rejection.Reason.NO_ENDPOINTS, eligible.isEmpty()
            ? "the request's endpoint subset is empty"
            : "none of the request's " + eligible.size() + " eligible endpoints is in the pool");
      }
      if (pool.asleep > 0) {
        candidates = PoolSnapshot.awakeOf(candidates);
      }
    }
    if (request.priority() < 0 && poolSaturation(active, pool, now) >= 1.0) {
      return RoutingDecision.rejected(Rejection.Reason.SHED,
          "pool is saturated and the request is sheddable (priority " + request.priority() + ")");
    }
    CycleState cycleState = new CycleState(now, tieBreaks.next());
    try {
      return runCycle(request, pool, active, candidates, cycleState, now);
    } finally {
      endCycle(cycleState);
    }
  }

  /**
   * Ends a cycle once its decision is made or has failed. An end action that throws does not
   * undo the decision: it is reported and the decision returned.
   */
  private void endCycle(CycleState cycleState) {
    try {
      cycleState.end();
    } catch (RuntimeException e) {
      routerWarning.report("an end-of-cycle action failed: " + e.getClass().getName(), e);
    }
  }

  private RoutingDecision runCycle(InferenceRequest request, PoolSnapshot pool,
      ActiveConfig active, List<Candidate> candidates, CycleState cycleState, long now) {
    io.epp4j.api.RequestPreparer[] preparers = active.preparers;
    for (int i = 0; i < preparers.length; i++) {
      try {
        preparers[i].prepare(request, cycleState, candidates);
      } catch (RuntimeException e) {
        throw SchedulingCycle.failure(active, preparers[i], "prepare", e);
      }
    }
    io.epp4j.api.Admitter[] admitters = active.admitters;
    for (int i = 0; i < admitters.length; i++) {
      String refusal;
      try {
        refusal = admitters[i].refuse(request, cycleState, candidates);
      } catch (RuntimeException e) {
        throw SchedulingCycle.failure(active, admitters[i], "refuse", e);
      }
      if (refusal != null) {
        return RoutingDecision.rejected(Rejection.Reason.SHED, refusal);
      }
    }
    SchedulingCycle cycle = new SchedulingCycle(request, cycleState, candidates, active);
    ProfileHandler handler = active.config.profileHandler();
    String primary;
    try {
      primary = handler.handle(request, cycleState, cycle);
    } catch (SchedulingCycle.PluginFailure e) {
      throw e; // a profile the handler ran failed and was reported already
    } catch (RuntimeException e) {
      throw SchedulingCycle.failure(active, handler, "handle", e);
    }
    Rejection refused = cycleState.get(ProfileHandler.REJECTION);
    if (refused != null) {
      return RoutingDecision.rejected(refused);
    }
    ProfileResult pr = primary == null ? null : cycle.result(primary);
    if (pr == null || pr.isEmpty()) {
      return RoutingDecision.rejected(Rejection.Reason.NO_ENDPOINTS,
          "no endpoint passed the filters of profile '" + primary + "'");
    }
    Map<String, ProfileResult> results = cycle.results();
    InFlightLedger.Lease lease = InFlightLedger.lease(request, pool, results, now);
    RoutingDecision decision = RoutingDecision.routed(primary, results,
        new InFlightLedger.Tracker(active, request, lease));
    // counted before the listeners run, so a listener that finishes the decision at once releases
    // what was counted; from here on nothing may leave this method without the decision
    ledger.acquire(lease);
    if (state.pool != pool) {
      keepCountedIfLeft(lease);
    }
    try {
      active.afterRouting(request, cycleState, decision);
    } catch (Error e) {
      ledger.release(lease);
      throw e;
    }
    return decision;
  }

  /**
   * The pool's candidates whose id is in {@code eligible}, in pool order; the pool's own list
   * (which keeps its {@link io.epp4j.api.PoolOrder}) when every one of them is eligible.
   */
  private static List<Candidate> eligibleCandidates(PoolSnapshot pool, Set<String> eligible) {
    List<Candidate> all = pool.candidates;
    List<Candidate> kept = new ArrayList<>(Math.min(all.size(), eligible.size()));
    for (int i = 0; i < all.size(); i++) {
      Candidate c = all.get(i);
      if (eligible.contains(c.endpoint().id())) {
        kept.add(c);
      }
    }
    return kept.size() == all.size() ? all : Collections.unmodifiableList(kept);
  }

  /**
   * How long a routed request counts as in flight without being finished or renewed
   * ({@link RoutingDecision#onActivity()}); see {@link Builder#inFlightMaxAge}.
   */
  public Duration inFlightMaxAge() {
    return inFlightMaxAge;
  }

  // ------------------------------------------------------------------------------ pool changes

  /**
   * Adds an endpoint; returns whether it was added. An endpoint with the same id already in the
   * pool is not added again: when it comes with other labels (or host and port), it is updated
   * as {@link #setEndpoints} updates a member whose labels changed (plugins hear
   * {@link io.epp4j.api.PoolListener#onEndpointChanged}; its metrics and in-flight counts are
   * kept), and when it is equal nothing happens. So a discovery that reports every change of a
   * member as an addition keeps the router's labels current.
   */
  public boolean addEndpoint(Endpoint endpoint) {
    Objects.requireNonNull(endpoint, "endpoint");
    synchronized (membershipLock) {
      PoolSnapshot known;
      synchronized (stateLock) {
        State cur = state;
        int i = cur.pool.indexOf(endpoint.id());
        if (i < 0) {
          state = cur.withPool(cur.pool.with(endpoint, counters(endpoint.id())));
          known = null;
        } else {
          known = cur.pool;
        }
      }
      if (known == null) {
        notifyPoolListeners(List.of(), List.of(endpoint));
        return true;
      }
      // the pool cannot change meanwhile: membershipLock is held (and is reentrant)
      int i = known.indexOf(endpoint.id());
      if (!known.states[i].endpoint.equals(endpoint)) {
        List<Endpoint> members = new ArrayList<>(known.states.length);
        for (EndpointState s : known.states) {
          members.add(s.endpoint);
        }
        members.set(i, endpoint);
        setEndpoints(members);
      }
      return false;
    }
  }

  /**
   * Removes an endpoint by id; returns whether it was present. Requests routed there that are
   * still running keep their count: if the endpoint comes back at the same address before they
   * end (a readiness probe that failed under load, a discovery blip), they count against it again
   * until they end or expire, as if it had never left.
   */
  public boolean removeEndpoint(String endpointId) {
    synchronized (membershipLock) {
      EndpointState removed;
      synchronized (stateLock) {
        State cur = state;
        int i = cur.pool.indexOf(endpointId);
        if (i < 0) {
          return false;
        }
        removed = cur.pool.states[i];
        state = cur.withPool(cur.pool.without(i));
        departing(List.of(removed));
      }
      notifyPoolListeners(List.of(removed.endpoint), List.of());
    }
    return true;
  }

  /**
   * Makes the pool exactly {@code endpoints}: adds the new ones, removes the missing ones, keeps
   * metrics and in-flight counters of the ones that stay. An endpoint that comes back while
   * requests routed to it before it left still run counts them again (see
   * {@link #removeEndpoint}); its metrics start unknown.
   */
  public void setEndpoints(Collection<Endpoint> endpoints) {
    synchronized (membershipLock) {
      List<Endpoint> added = new ArrayList<>();
      List<Endpoint> removed = new ArrayList<>();
      List<PoolSnapshot.Relabel> relabelled = new ArrayList<>();
      synchronized (stateLock) {
        State cur = state;
        state = cur.withPool(
            cur.pool.reconciled(endpoints, added, removed, relabelled, this::counters));
        if (!removed.isEmpty()) {
          List<EndpointState> left = new ArrayList<>(removed.size());
          for (Endpoint e : removed) {
            left.add(Objects.requireNonNull(cur.pool.get(e.id())));
          }
          departing(left);
        }
      }
      state.active.notifyPool(removed, relabelled, added);
    }
  }

  /**
   * The in-flight counters for an endpoint joining the pool: those it left with, while requests
   * counted on them still run, else new ones. Called under {@link #stateLock}.
   */
  private EndpointState.InFlight counters(String endpointId) {
    EndpointState.InFlight f = departed.remove(endpointId);
    return f != null ? f : new EndpointState.InFlight(endpointId);
  }

  /**
   * Keeps the counters of endpoints leaving the pool while something is counted on them, and
   * drops those of endpoints that left before whose requests have all ended. Called under
   * {@link #stateLock}.
   */
  private void departing(List<EndpointState> leaving) {
    departed.values().removeIf(EndpointState.InFlight::idle);
    for (EndpointState s : leaving) {
      if (!s.inFlight.idle()) {
        departed.put(s.endpoint.id(), s.inFlight);
      }
    }
  }

  /**
   * Makes the counts a request just took findable by a return of its endpoint when the pool
   * changed while it was routed. A removal keeps only counters something counts on: one that
   * found the endpoint's counters idle and dropped them before this request counted there left
   * the request counted on counters nobody would take up again, so an endpoint back at the same
   * address (a readiness flap) did not count a request it was serving. Such counters are kept
   * now as the removal would have kept them, or the request moves to the counters the endpoint
   * has meanwhile (back in the pool, or kept after it left again). Off the common path: only
   * when the pool snapshot changed during the route, and the lock only when an endpoint the
   * request counts on is no longer in the pool with the same counters.
   */
  private void keepCountedIfLeft(InFlightLedger.Lease lease) {
    for (EndpointState.InFlight f : lease.held()) {
      EndpointState s = state.pool.get(f.endpointId);
      if (s != null && s.inFlight == f) {
        continue;
      }
      synchronized (stateLock) {
        EndpointState now = state.pool.get(f.endpointId);
        EndpointState.InFlight home = now != null ? now.inFlight : departed.get(f.endpointId);
        if (home == null) {
          if (!f.idle()) {
            departed.put(f.endpointId, f);
          }
        } else if (home != f) {
          lease.reattach(f, home); // every profile's count there, not only the first
        }
      }
    }
  }

  /**
   * The in-flight counters a request a fallback serves counts on when that endpoint has left the
   * pool: those kept for its return, else new ones kept the same way (the gateway still reaches
   * it, and it may come back while the request runs); the pool's when it came back meanwhile.
   * Counters made here are idle until the request counts on them, so a pool change could drop
   * them first: {@link #keepCountedIfLeft} runs after the move and keeps them then.
   */
  private EndpointState.InFlight keptCounters(String endpointId) {
    synchronized (stateLock) {
      EndpointState now = state.pool.get(endpointId);
      return now != null ? now.inFlight
          : departed.computeIfAbsent(endpointId, EndpointState.InFlight::new);
    }
  }

  /** Counters of endpoints that left the pool and are kept for their return; for tests. */
  int departedCounters() {
    synchronized (stateLock) {
      return departed.size();
    }
  }

  /** Called under {@link #membershipLock}, so the configuration cannot change meanwhile. */
  private void notifyPoolListeners(List<Endpoint> removed, List<Endpoint> added) {
    state.active.notifyPool(removed, List.of(), added);
  }

  /**
   * Publishes new metrics for an endpoint. Metrics without a scrape time are stamped with the
   * router's clock. Metrics whose {@link EndpointMetrics#scrapedAtNanos scrapedAtNanos} is later
   * than the router's clock (a caller's clock bug, another ticker) are stamped with the router's
   * clock too, as received now, and a warning is logged (at most once a minute): kept, such a
   * time would keep them fresh until the clock caught up, so the last figures of an endpoint that
   * stopped answering would be trusted all that while. Returns false when the endpoint is not in
   * the pool.
   */
  public boolean updateMetrics(String endpointId, EndpointMetrics metrics) {
    return updateMetrics(endpointId, metrics, null);
  }

  /**
   * Whether {@code membership} is the current stay of {@code endpointId} in the pool (see
   * {@link EndpointState#membership}): false once the endpoint left, also when it came back.
   */
  boolean isMember(String endpointId, Object membership) {
    EndpointState s = state.pool.get(endpointId);
    return s != null && s.membership == membership;
  }

  /**
   * {@link #updateMetrics(String, EndpointMetrics)} for a scrape begun during the stay
   * {@code membership} of the endpoint (null: whichever): false, publishing nothing, when the
   * endpoint left the pool since, even if it came back at the same address, as the page read
   * then belongs to the server that was there before.
   */
  boolean updateMetrics(String endpointId, EndpointMetrics metrics,
      @Nullable Object membership) {
    long now = ticker.nanos();
    warnIfInFuture(endpointId, metrics, now);
    // off the request path and called steadily by a scraper: a good place to expire
    ledger.expireIfDue(now);
    hints.expireIfDue(now);
    State next;
    List<Endpoint> dropped;
    synchronized (stateLock) {
      State cur = state;
      int i = cur.pool.indexOf(endpointId);
      if (i < 0 || membership != null && cur.pool.states[i].membership != membership) {
        return false;
      }
      next = cur.withPool(cur.pool.withMetrics(i, metrics, now, cur.active::published));
      state = next;
      dropped = cacheDropped(cur.pool.states[i], next.pool.states[i], null);
    }
    if (!dropped.isEmpty()) {
      next.active.notifyCacheDropped(dropped);
    }
    return true;
  }

  /**
   * Publishes metrics for several endpoints in one snapshot; unknown ids are ignored. Scrape
   * times are treated as by {@link #updateMetrics(String, EndpointMetrics)}: missing or later
   * than the router's clock, they become the router's clock.
   */
  public void updateMetrics(Map<String, EndpointMetrics> metricsById) {
    long now = ticker.nanos();
    for (Map.Entry<String, EndpointMetrics> e : metricsById.entrySet()) {
      warnIfInFuture(e.getKey(), e.getValue(), now);
    }
    ledger.expireIfDue(now);
    hints.expireIfDue(now);
    State next;
    List<Endpoint> dropped = List.of();
    synchronized (stateLock) {
      State cur = state;
      next = cur.withPool(cur.pool.withMetrics(metricsById, now, cur.active::published));
      state = next;
      for (int i = 0; i < next.pool.states.length; i++) {
        if (next.pool.states[i] != cur.pool.states[i]) {
          dropped = cacheDropped(cur.pool.states[i], next.pool.states[i], dropped);
        }
      }
    }
    if (!dropped.isEmpty()) {
      next.active.notifyCacheDropped(dropped);
    }
  }

  /**
   * {@code found} (null for none yet) with the member whose state went from {@code before} to
   * {@code after} by a metrics update, if its engine dropped its prefix cache meanwhile: it fell
   * asleep (was awake before, sleeps now), or its server restarted at the same address (its
   * start time changed, or its prompt-token counter went back: see
   * {@link EndpointState#restartIn}). Compared under {@link #stateLock}, so each transition is
   * found by one update only; a restart is logged.
   */
  private static List<Endpoint> cacheDropped(EndpointState before, EndpointState after,
      @Nullable List<Endpoint> found) {
    boolean fellAsleep = after.metrics.asleep() && !before.metrics.asleep();
    String restart = before.restartIn(after);
    if (!fellAsleep && restart == null) {
      return found == null ? List.of() : found;
    }
    if (restart != null) {
      LOG.info("metrics of " + after.endpoint.id() + " show that its server restarted ("
          + restart + "): its engine starts with an empty KV cache, so the prefixes routed"
          + " to it before are forgotten");
    }
    List<Endpoint> out = found == null || found.isEmpty() ? new ArrayList<>(1) : found;
    out.add(after.endpoint);
    return out;
  }

  private void warnIfInFuture(String endpointId, EndpointMetrics m, long now) {
    if (PoolSnapshot.inFuture(m, now)) {
      futureMetricsWarning.report("of " + endpointId + " were stamped " + (m.scrapedAtNanos() - now)
          + " ns after the router's ticker reads (scrapedAtNanos); taken as received now", null);
    }
  }

  /**
   * The current pool as candidates (endpoint, metrics, in-flight counts). Requests past
   * {@link Builder#inFlightMaxAge} are released first when a check is due, as by a route.
   */
  public List<Candidate> endpoints() {
    return readPool().candidates;
  }

  /**
   * The pool for a reader of its in-flight figures outside a route (the caller, telemetry, the
   * hints shared with other routers): expired requests are released first when a check is due,
   * so that a router without traffic or metrics does not report them as in flight for good.
   */
  private PoolSnapshot readPool() {
    ledger.expireIfDue(ticker.nanos());
    return state.pool;
  }

  /**
   * The pool's saturation by the rule in force: the configuration's saturation detector plugin,
   * else its utilization settings, else the builder's.
   */
  private double poolSaturation(ActiveConfig active, PoolSnapshot pool, long now) {
    io.epp4j.api.SaturationDetector d = active.saturationDetector;
    if (d != null) {
      try {
        return d.saturation(pool.candidates);
      } catch (RuntimeException e) {
        throw SchedulingCycle.failure(active, d, "saturation", e);
      }
    }
    PoolSaturation s = active.saturation;
    return (s != null ? s : saturation).poolSaturation(pool, now);
  }

  /**
   * Where a plugin or embedding code that shares routing state between the routers of one pool
   * delivers what the other routers did (prefixes sent, sessions bound, requests in flight), and
   * reads what this router has in flight; plugins get the same object as the service
   * {@code RouterHints}.
   */
  public RouterHints hints() {
    return hints;
  }

  /**
   * The current pool saturation (see the builder's saturation settings, which a configuration's
   * {@code saturationDetector} section replaces).
   */
  public double poolSaturation() {
    State s = state;
    return poolSaturation(s.active, s.pool, ticker.nanos());
  }

  // ------------------------------------------------------------------------- reconfiguration

  /**
   * Replaces the configuration with an {@code EndpointPickerConfig} file; see
   * {@link #reconfigure(RouterConfig)}. Plugins declared exactly as in the running configuration
   * (same name, type and parameters) keep their running instance and its state.
   *
   * @return the new configuration, or every problem found (the running one stays in place)
   */
  public Result<RouterConfig> reconfigure(Path file) {
    Result<String> text = ConfigLoader.readFile(file);
    return text.isOk() ? reconfigure(text.value(), file.toString()) : Result.errors(text.errors());
  }

  /**
   * Replaces the configuration with {@code EndpointPickerConfig} YAML text; {@code source} names
   * it in error messages. See {@link #reconfigure(Path)}.
   */
  public Result<RouterConfig> reconfigure(String yaml, String source) {
    synchronized (membershipLock) {
      // loaded under the lock: the instances it keeps must still be the running ones
      Result<PluginReuse.Loaded> r = PluginReuse.load(registry, ticker, inFlightMaxAge, services,
          yaml, source, state.active.declared);
      if (!r.isOk()) {
        return Result.errors(r.errors());
      }
      return install(r.value(), true);
    }
  }

  /**
   * Replaces the configuration. Decisions already made keep their in-flight counts until they
   * finish or expire, as before. Plugin instances the new configuration still uses (the same
   * objects) keep running with their state; new {@link PoolListener}s hear every current
   * endpoint before any route uses them (one an earlier reload dropped and this one takes back,
   * before it is closed, first hears the removal of every endpoint that left meanwhile); plugins it no longer uses stop hearing about new requests
   * and pool changes at once, hear how the requests routed while they were in use end until they
   * are closed (so one a later reload takes back does not count them in flight for good), and
   * are closed, exactly once, after
   * {@link Builder#retiredPluginCloseDelay}, so that a route that read the old configuration just
   * before the switch can finish with them.
   *
   * @return the new configuration, or an error when the router is closed
   */
  public Result<RouterConfig> reconfigure(RouterConfig config) {
    Objects.requireNonNull(config, "config");
    synchronized (membershipLock) {
      return install(new PluginReuse.Loaded(config, Map.of()), false);
    }
  }

  /** @param created whether the router created the plugins (so closes those it cannot use) */
  private Result<RouterConfig> install(PluginReuse.Loaded loaded, boolean created) {
    ActiveConfig old = state.active;
    ActiveConfig next = new ActiveConfig(loaded.config(), loaded.declared(), extraListeners,
        ledger, ticker, routerWarning, this::isClosed, this::running, this::awaitingClose);
    if (closed) {
      if (created) {
        retired.closeNow(ActiveConfig.difference(next.members, old.members));
      }
      return Result.error("router is closed");
    }
    // membershipLock keeps the pool's members fixed until the new configuration is published
    next.introducePool(old, state.pool, lastHeard::remove);
    synchronized (stateLock) {
      state = new State(state.pool, next);
    }
    hints.configReplaced();
    Set<Object> dropped = ActiveConfig.difference(old.members, next.members);
    // what a dropped pool listener knows of the pool, should a later reload take it back
    lastHeard.keySet().removeIf(l -> !retired.pending(l));
    List<Endpoint> members = new ArrayList<>(state.pool.states.length);
    for (EndpointState s : state.pool.states) {
      members.add(s.endpoint);
    }
    for (Object o : dropped) {
      if (o instanceof PoolListener l) {
        lastHeard.put(l, members);
      }
    }
    old.supersede();
    for (String w : loaded.config().warnings()) {
      LOG.warning(w);
    }
    retired.closeLater(dropped);
    return Result.ok(loaded.config());
  }

  private boolean isClosed() {
    return closed;
  }

  private ActiveConfig running() {
    return state.active;
  }

  /** Whether a reload dropped {@code plugin} and has not closed it yet. */
  private boolean awaitingClose(Object plugin) {
    return retired.awaitingClose(plugin);
  }

  /** Whether the running configuration uses {@code plugin} (a reload may have taken it back). */
  private boolean inUse(Object plugin) {
    return !closed && state.active.members.contains(plugin);
  }

  /** The running configuration. */
  public RouterConfig config() {
    return state.active.config;
  }

  public PluginRegistry registry() {
    return registry;
  }

  /** The body parser {@link #route(String, Map, byte[])} uses (its size limit, say). */
  public OpenAiRequestParser requestParser() {
    return parser;
  }

  public Ticker ticker() {
    return ticker;
  }

  /**
   * Closes every plugin (first any a reload retired and has not closed yet, then the running
   * configuration's) and stops telemetry callbacks; later routes are rejected. Decisions still in flight release their
   * counts when finished, but the closed plugins no longer hear about them (extra listeners
   * given to the builder, which the router does not close, still do). The pool can still be
   * changed after close; the same holds for who hears it.
   */
  @Override
  public void close() {
    synchronized (membershipLock) {
      if (closed) {
        return;
      }
      closed = true;
      telemetry.close();
      Set<Object> all = Collections.newSetFromMap(new IdentityHashMap<>());
      all.addAll(ActiveConfig.plugins(state.active.config));
      // the instances a reload retired first, the running ones last: plugins whose instances hand
      // over to one another (redis-replication) would otherwise have a retired instance take
      // over again from the running one, only to be closed next
      retired.closePending(all);
      retired.closeNow(all);
    }
  }

  // -------------------------------------------------------------------------------- builder

  /** Builds a {@link Router}; the settings and their defaults live in {@link RouterSettings}. */
  public static final class Builder {
    private final RouterSettings s = new RouterSettings();

    private Builder() {}

    /**
     * Initial endpoints, each address ({@link Endpoint#id()}) once over every call:
     * {@link #build()} refuses an address listed twice, since the pool holds one endpoint per
     * address and would keep only the last entry's labels (a prefill role, say).
     */
    public Builder endpoints(Collection<Endpoint> eps) {
      Objects.requireNonNull(eps, "endpoints");
      int i = 0;
      for (Endpoint e : eps) {
        // found now, naming the setting, rather than by build() as a bare NullPointerException
        int at = i++;
        Objects.requireNonNull(e, () -> "endpoints: the entry at index " + at + " is null");
      }
      s.endpoints.addAll(eps);
      return this;
    }

    /** One initial endpoint; see {@link #endpoints(Collection)}. */
    public Builder endpoint(Endpoint e) {
      s.endpoints.add(Objects.requireNonNull(e, "endpoint"));
      return this;
    }

    /** A configuration built in code; replaces any file or YAML given before. */
    public Builder config(RouterConfig c) {
      // null would fall back to the default profile without a word
      s.config = Objects.requireNonNull(c, "config");
      s.configFile = null;
      s.configYaml = null;
      return this;
    }

    /** A single profile built in code, run by the single-profile handler. */
    public Builder profile(SchedulingProfile p) {
      return config(RouterConfig.of(Objects.requireNonNull(p, "profile")));
    }

    /** An {@code EndpointPickerConfig} YAML file. */
    public Builder configFile(Path file) {
      s.configFile = Objects.requireNonNull(file, "configFile");
      s.config = null;
      s.configYaml = null;
      return this;
    }

    /** {@code EndpointPickerConfig} YAML text; {@code source} names it in error messages. */
    public Builder configYaml(String yaml, String source) {
      s.configYaml = Objects.requireNonNull(yaml, "configYaml");
      s.configSource = Objects.requireNonNull(source, "configYaml source");
      s.config = null;
      s.configFile = null;
      return this;
    }

    /** The plugin types to resolve config files against; default: ServiceLoader discovery. */
    public Builder registry(PluginRegistry r) {
      // null would fall back to ServiceLoader discovery without a word
      s.registry = Objects.requireNonNull(r, "registry");
      return this;
    }

    /** The clock for metrics ages, TTLs and cycle time; default {@link Ticker#system()}. */
    public Builder ticker(Ticker t) {
      s.ticker = Objects.requireNonNull(t, "ticker");
      return this;
    }

    /** Where metrics go; default {@code GlobalOpenTelemetry.getOrNoop()}. */
    public Builder openTelemetry(OpenTelemetry otel) {
      s.openTelemetry = Objects.requireNonNull(otel, "openTelemetry");
      return this;
    }

    /**
     * Makes random tie-breaks reproducible: with a seed, the n-th routing cycle of this router
     * always draws the same numbers (use from one thread for a fully deterministic sequence).
     */
    public Builder randomSeed(long seed) {
      s.seed = seed;
      return this;
    }

    /** The body parser used by {@link Router#route(String, Map, byte[])}. */
    public Builder requestParser(OpenAiRequestParser p) {
      s.parser = Objects.requireNonNull(p, "requestParser");
      return this;
    }

    /** Waiting requests at which an endpoint counts as saturated; default 5. */
    public Builder saturationQueueThreshold(int n) {
      s.saturationQueueThreshold = RouterSettings.atLeastOne(n, "saturationQueueThreshold");
      return this;
    }

    /** KV-cache usage at which an endpoint counts as saturated; default 0.8. */
    public Builder saturationKvThreshold(double v) {
      s.saturationKvThreshold = RouterSettings.fraction(v, "saturationKvThreshold");
      return this;
    }

    /**
     * Metrics older than this count as saturated for shedding; default 200 ms. A duration too
     * long to count in nanoseconds (about 292 years, or {@code ChronoUnit.FOREVER}) means metrics
     * never go stale; an endpoint never scraped still counts as saturated.
     */
    public Builder metricsStaleness(Duration d) {
      s.metricsStaleness = RouterSettings.positive(d, "metricsStaleness");
      return this;
    }

    /**
     * How long a routed request may stay counted as in flight without the gateway calling
     * {@code onComplete} or {@code onFailure}; default 10 minutes. Older requests are released by
     * the next call that finds a check due (one every eighth of this at most) and counted in
     * {@code epp4j.routing.in_flight_expired}: a {@code route} or {@code updateMetrics}, or a
     * read of the in-flight figures ({@code endpoints()}, the
     * {@code epp4j.pool.in_flight_requests} gauge, {@code hints().forEachLocalInFlight}), so an
     * idle router reports none of them once read.
     * This is a safety net for decisions the gateway dropped, not a request timeout: set it
     * well above the longest request you serve, since releasing a request that is still running
     * makes its endpoint look less busy than it is. A duration too long to count in nanoseconds
     * (about 292 years, or {@code ChronoUnit.FOREVER}) turns the safety net off.
     */
    public Builder inFlightMaxAge(Duration d) {
      s.inFlightMaxAge = RouterSettings.positive(d, "inFlightMaxAge");
      return this;
    }

    /**
     * How long after a {@link Router#reconfigure reload} the plugins it dropped are closed;
     * default 5 seconds. Routes that read the old configuration just before the switch may use
     * them until then, so keep it well above your slowest route. A duration too long to count in
     * nanoseconds (about 292 years) keeps them open until the router closes.
     */
    public Builder retiredPluginCloseDelay(Duration d) {
      s.retiredPluginCloseDelay = RouterSettings.notNegative(d, "retiredPluginCloseDelay");
      return this;
    }

    /** A service plugins can ask for through {@code PluginContext.service(type)}. */
    public <T> Builder service(Class<T> type, T instance) {
      Objects.requireNonNull(type, "service type");
      Objects.requireNonNull(instance, () -> "service " + type.getName() + ": instance is null");
      s.services.put(type, type.cast(instance));
      return this;
    }

    /**
     * An extra {@link RequestListener} and/or {@link PoolListener} (for example a simulator or
     * an index fed by the gateway) that is not part of the configuration; it stays across
     * {@link Router#reconfigure reloads}.
     */
    public Builder listener(Object listener) {
      Objects.requireNonNull(listener, "listener");
      if (!(listener instanceof RequestListener) && !(listener instanceof PoolListener)) {
        throw new IllegalArgumentException("listener must implement RequestListener or PoolListener");
      }
      s.extraListeners.add(listener);
      return this;
    }

    /**
     * Builds the router.
     *
     * @throws ConfigException with every problem found when the configuration is invalid, or
     *     when no configuration is given and no default profile can be built (routing-scorers
     *     ships it as {@link #DEFAULT_CONFIG_RESOURCE})
     */
    public Router build() {
      Map<String, Endpoint> seen = new HashMap<>();
      for (Endpoint e : s.endpoints) {
        Endpoint before = seen.putIfAbsent(e.id(), e);
        if (before != null) {
          throw new IllegalArgumentException("endpoint " + e.id() + " is listed twice"
              + (before.labels().equals(e.labels()) ? ""
                  : ", with labels " + before.labels() + " and " + e.labels())
              + ": the pool holds one endpoint per address");
        }
      }
      s.resolveDefaults();
      return new Router(s, s.loadConfig());
    }
  }
}
