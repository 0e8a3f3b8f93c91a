package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Picker;
import io.epp4j.api.Plugin;
import io.epp4j.api.PoolListener;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.ProfileRunner;
import io.epp4j.api.Rejection;
import io.epp4j.api.RequestListener;
import io.epp4j.api.Result;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Ticker;
import io.epp4j.api.Usage;
import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.OpenTelemetry;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.random.RandomGenerator;
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
 * <p>{@link #route} is thread-safe and takes no locks: it reads one immutable snapshot of the
 * pool (endpoints with their latest metrics) through a volatile field. Pool and metrics changes
 * are serialized among themselves and publish a new snapshot; once {@link #removeEndpoint}
 * returns, no later {@code route} call returns that endpoint.
 *
 * <p>A routed request counts as in flight on its endpoint until the gateway calls
 * {@link RoutingDecision#onComplete} or {@link RoutingDecision#onFailure}, or until it is older
 * than {@link Builder#inFlightMaxAge}, whichever comes first, so a decision the gateway drops
 * or loses (even one that was garbage-collected) stops counting against its endpoint.
 */
public final class Router implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(Router.class.getName());

  /** The EPP default profile used when no configuration is given. */
  public static final String DEFAULT_CONFIG_YAML = """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: prefix-cache-scorer
      - type: queue-scorer
      - type: kv-cache-utilization-scorer
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: prefix-cache-scorer
          weight: 3
        - pluginRef: queue-scorer
          weight: 2
        - pluginRef: kv-cache-utilization-scorer
          weight: 2
        - pluginRef: max-score-picker
      """;

  /**
   * Ten minutes: the OpenAI clients give up on a request after 600 s by default, and a chat or
   * completion request streams for seconds to a few minutes, so a request still unfinished after
   * ten minutes was almost surely dropped by the gateway rather than still running.
   */
  static final Duration DEFAULT_IN_FLIGHT_MAX_AGE = Duration.ofMinutes(10);

  private final RouterConfig config;
  private final PluginRegistry registry;
  private final Ticker ticker;
  private final OpenAiRequestParser parser;
  private final PoolSaturation saturation;
  private final RouterTelemetry telemetry;
  private final @Nullable Long seed;
  private final AtomicLong cycles = new AtomicLong();
  private final RequestListener[] requestListeners;
  private final ThrottledWarning[] requestListenerWarnings;
  private final PoolListener[] poolListeners;
  private final Map<Object, ThrottledWarning> pluginWarnings;
  private final ThrottledWarning routerWarning;
  private final ThrottledWarning expiryWarning;
  private final InFlightLedger ledger;
  /**
   * Serializes membership changes together with their pool-listener notifications, so listeners
   * hear adds and removes in the order the pool made them (a removal still notifying cannot be
   * overtaken by a re-add of the same id). Metrics updates take only {@link #poolLock}, so a
   * slow listener never delays them.
   */
  private final Object membershipLock = new Object();
  private final Object poolLock = new Object();
  private volatile PoolSnapshot pool = PoolSnapshot.EMPTY;
  private volatile boolean closed;

  private Router(Builder b, RouterConfig config) {
    this.config = config;
    this.registry = b.registry;
    this.ticker = b.ticker;
    this.parser = b.parser;
    this.seed = b.seed;
    this.saturation = new PoolSaturation(b.saturationQueueThreshold, b.saturationKvThreshold,
        b.metricsStaleness.toNanos(), b.ticker);
    Set<Object> all = Collections.newSetFromMap(new IdentityHashMap<>());
    all.addAll(config.plugins().values());
    all.add(config.profileHandler());
    for (SchedulingProfile p : config.profiles().values()) {
      all.addAll(p.filters());
      p.scorers().forEach(ws -> all.add(ws.scorer()));
      all.add(p.picker());
    }
    all.addAll(b.extraListeners);
    List<RequestListener> rl = new ArrayList<>();
    List<PoolListener> pl = new ArrayList<>();
    for (Object o : all) {
      if (o instanceof RequestListener r) {
        rl.add(r);
      }
      if (o instanceof PoolListener p) {
        pl.add(p);
      }
    }
    this.requestListeners = rl.toArray(new RequestListener[0]);
    this.poolListeners = pl.toArray(new PoolListener[0]);
    this.pluginWarnings = warningsByPlugin(config, all);
    this.requestListenerWarnings = new ThrottledWarning[requestListeners.length];
    for (int i = 0; i < requestListeners.length; i++) {
      requestListenerWarnings[i] = pluginWarnings.get(requestListeners[i]);
    }
    this.routerWarning = new ThrottledWarning(LOG, ticker, "router");
    this.telemetry = new RouterTelemetry(b.openTelemetry, () -> pool, saturation);
    Duration maxAge = b.inFlightMaxAge;
    this.expiryWarning = new ThrottledWarning(LOG, ticker, "in-flight accounting:");
    this.ledger = new InFlightLedger(maxAge.toNanos(), ticker.nanos(), n -> {
      telemetry.inFlightExpired(n);
      expiryWarning.report("released " + n + " requests routed more than " + maxAge
          + " ago that the gateway never finished; call onComplete or onFailure on every routed"
          + " decision", null);
    });
    for (String w : config.warnings()) {
      LOG.warning(w);
    }
    for (String c : registry.conflicts()) {
      LOG.warning(c);
    }
    setEndpoints(b.endpoints);
  }

  /**
   * One throttled warning per plugin or listener instance, named as the configuration names it,
   * so that each broken plugin gets its own log budget.
   */
  private Map<Object, ThrottledWarning> warningsByPlugin(RouterConfig config, Set<Object> all) {
    Map<Object, ThrottledWarning> m = new IdentityHashMap<>();
    config.plugins().forEach((name, p) ->
        m.putIfAbsent(p, new ThrottledWarning(LOG, ticker, "plugin '" + name + "'")));
    for (SchedulingProfile p : config.profiles().values()) {
      for (SchedulingProfile.WeightedScorer ws : p.scorers()) {
        m.putIfAbsent(ws.scorer(), new ThrottledWarning(LOG, ticker, "scorer '" + ws.name() + "'"));
      }
    }
    for (Object o : all) {
      m.computeIfAbsent(o, x -> new ThrottledWarning(LOG, ticker,
          "plugin " + x.getClass().getName()));
    }
    return m;
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
    long start = System.nanoTime();
    PoolSnapshot snap = pool;
    RoutingDecision d;
    try {
      d = schedule(request, snap);
    } catch (PluginFailure e) {
      // a plugin bug must not take the gateway down: this request gets a 503, the plugin was
      // logged (throttled) where it threw, and the next request is routed as usual
      telemetry.error();
      telemetry.recordDuration(System.nanoTime() - start);
      return RoutingDecision.rejected(Rejection.Reason.NO_ENDPOINTS, "routing failed: "
          + e.getCause().getClass().getSimpleName() + " in " + e.source);
    } catch (RuntimeException e) {
      routerWarning.report("failed to route a request: " + e.getClass().getName(), e);
      telemetry.error();
      telemetry.recordDuration(System.nanoTime() - start);
      return RoutingDecision.rejected(Rejection.Reason.NO_ENDPOINTS,
          "routing failed: " + e.getClass().getSimpleName());
    }
    if (d.isRouted()) {
      telemetry.routed();
    } else {
      telemetry.rejected(d.rejection().reason());
    }
    telemetry.recordDuration(System.nanoTime() - start);
    return d;
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
    return route(parsed.value());
  }

  private RoutingDecision schedule(InferenceRequest request, PoolSnapshot snap) {
    long now = ticker.nanos();
    ledger.expireIfDue(now);
    if (closed) {
      return RoutingDecision.rejected(Rejection.Reason.NO_ENDPOINTS, "router is closed");
    }
    if (snap.states.length == 0) {
      return RoutingDecision.rejected(Rejection.Reason.NO_ENDPOINTS, "no endpoints in the pool");
    }
    if (request.priority() < 0 && saturation.poolSaturation(snap, now) >= 1.0) {
      return RoutingDecision.rejected(Rejection.Reason.SHED,
          "pool is saturated and the request is sheddable (priority " + request.priority() + ")");
    }
    CycleState state = new CycleState(now, random());
    Cycle cycle = new Cycle(request, state, snap);
    ProfileHandler handler = config.profileHandler();
    String primary;
    try {
      primary = handler.handle(request, state, cycle);
    } catch (PluginFailure e) {
      throw e; // a profile the handler ran failed and was reported already
    } catch (RuntimeException e) {
      throw failure(handler, "handle", e);
    }
    ProfileResult pr = primary == null ? null : cycle.result(primary);
    if (pr == null || pr.isEmpty()) {
      return RoutingDecision.rejected(Rejection.Reason.NO_ENDPOINTS,
          "no endpoint passed the filters of profile '" + primary + "'");
    }
    Map<String, ProfileResult> results = cycle.results();
    InFlightLedger.Lease lease = lease(request, snap, results, now);
    RoutingDecision decision = RoutingDecision.routed(primary, results, new Tracker(request, lease));
    // counted before the listeners run, so a listener that finishes the decision at once releases
    // what was counted; from here on nothing may leave this method without the decision
    ledger.acquire(lease);
    try {
      for (int i = 0; i < requestListeners.length; i++) {
        try {
          requestListeners[i].afterRouting(request, state, decision);
        } catch (RuntimeException e) {
          // what a listener learns is an optimisation; the endpoint was chosen, so route anyway
          requestListenerWarnings[i].report("threw " + e.getClass().getName()
              + " in afterRouting; the request was routed anyway", e);
        }
      }
    } catch (Error e) {
      ledger.release(lease);
      throw e;
    }
    return decision;
  }

  private InFlightLedger.Lease lease(InferenceRequest request, PoolSnapshot snap,
      Map<String, ProfileResult> results, long now) {
    long tokens = (long) request.estimatedPromptTokens() + request.maxTokens();
    if (results.size() == 1) {
      Endpoint e = results.values().iterator().next().primary();
      EndpointState s = e == null ? null : snap.get(e.id());
      return new InFlightLedger.Lease(now, tokens, s == null ? null : s.inFlight, null);
    }
    EndpointState.InFlight[] c = new EndpointState.InFlight[results.size()];
    int k = 0;
    for (ProfileResult r : results.values()) {
      Endpoint e = r.primary();
      if (e != null) {
        EndpointState s = snap.get(e.id());
        if (s != null) {
          c[k++] = s.inFlight;
        }
      }
    }
    return new InFlightLedger.Lease(now, tokens, null,
        k == c.length ? c : java.util.Arrays.copyOf(c, k));
  }

  /** Logs (throttled) that {@code plugin} threw and wraps the cause to end the cycle with a 503. */
  private PluginFailure failure(Object plugin, String method, RuntimeException cause) {
    ThrottledWarning w = pluginWarnings.getOrDefault(plugin, routerWarning);
    w.report("threw " + cause.getClass().getName() + " in " + method
        + "; the request got a 503", cause);
    return new PluginFailure(w.source(), cause);
  }

  /** A plugin's exception, already logged, on its way out of the scheduling cycle. */
  private static final class PluginFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;
    final String source;

    PluginFailure(String source, RuntimeException cause) {
      super(source, cause, false, false); // no stack trace of its own: the cause has the useful one
      this.source = source;
    }
  }

  private RandomGenerator random() {
    if (seed == null) {
      return ThreadLocalRandom.current();
    }
    return new SplittableRandom(seed ^ (cycles.incrementAndGet() * 0x9E3779B97F4A7C15L));
  }

  /** Per-thread score scratch; taken out while in use, so a nested route gets its own. */
  private static final ThreadLocal<double[][]> SCORE_SCRATCH =
      ThreadLocal.withInitial(() -> new double[1][]);

  /**
   * One scheduling cycle: runs profiles on demand and keeps their results. Most cycles run one
   * profile, so the first result is kept in fields and a map is built only for a second one.
   */
  private final class Cycle implements ProfileRunner {
    final InferenceRequest request;
    final CycleState state;
    final PoolSnapshot snap;
    private @Nullable String firstName;
    private @Nullable ProfileResult firstResult;
    private @Nullable Map<String, ProfileResult> more;

    Cycle(InferenceRequest request, CycleState state, PoolSnapshot snap) {
      this.request = request;
      this.state = state;
      this.snap = snap;
    }

    @Override
    public Set<String> profileNames() {
      return config.profiles().keySet();
    }

    @Override
    public @Nullable ProfileResult result(String profile) {
      if (more != null) {
        return more.get(profile);
      }
      return profile.equals(firstName) ? firstResult : null;
    }

    /** Every result in the order the profiles ran. */
    Map<String, ProfileResult> results() {
      if (more != null) {
        return more;
      }
      return firstName == null || firstResult == null ? Map.of() : Map.of(firstName, firstResult);
    }

    @Override
    public ProfileResult run(String name) {
      ProfileResult done = result(name);
      if (done != null) {
        return done;
      }
      SchedulingProfile profile = config.profiles().get(name);
      if (profile == null) {
        throw new IllegalArgumentException("no scheduling profile named '" + name + "'");
      }
      ProfileResult r = runProfile(profile);
      if (firstName == null) {
        firstName = name;
        firstResult = r;
      } else {
        if (more == null) {
          more = new LinkedHashMap<>(4);
          more.put(firstName, firstResult);
        }
        more.put(name, r);
      }
      return r;
    }

    private ProfileResult runProfile(SchedulingProfile profile) {
      List<Candidate> candidates = snap.candidates;
      List<Filter> filters = profile.filters();
      for (int i = 0; i < filters.size() && !candidates.isEmpty(); i++) {
        Filter f = filters.get(i);
        try {
          candidates = f.filter(request, state, candidates);
        } catch (RuntimeException e) {
          throw failure(f, "filter", e);
        }
      }
      int n = candidates.size();
      if (n == 0) {
        return new ProfileResult(profile.name(), List.of());
      }
      double[] total = new double[n];
      List<SchedulingProfile.WeightedScorer> scorers = profile.scorers();
      if (!scorers.isEmpty()) {
        // scorers see an array of exactly n entries; a reused one is handed out only if it fits
        double[][] holder = SCORE_SCRATCH.get();
        double[] scratch = holder[0];
        holder[0] = null;
        if (scratch == null || scratch.length != n) {
          scratch = new double[n];
        }
        try {
          for (int s = 0; s < scorers.size(); s++) {
            SchedulingProfile.WeightedScorer ws = scorers.get(s);
            java.util.Arrays.fill(scratch, 0.0);
            try {
              ws.scorer().score(request, state, candidates, scratch);
            } catch (RuntimeException e) {
              throw failure(ws.scorer(), "score", e);
            }
            double w = ws.weight();
            for (int i = 0; i < n; i++) {
              double v = scratch[i];
              // clamp to [0,1]; NaN fails both comparisons and counts as 0
              total[i] += w * (v >= 1.0 ? 1.0 : v > 0.0 ? v : 0.0);
            }
          }
        } finally {
          holder[0] = scratch;
        }
      }
      Picker picker = profile.picker();
      List<Candidate> picked;
      try {
        picked = picker.pick(request, state, candidates, total);
      } catch (RuntimeException e) {
        throw failure(picker, "pick", e);
      }
      if (picked.size() == 1) {
        return new ProfileResult(profile.name(), List.of(picked.get(0).endpoint()));
      }
      List<Endpoint> eps = new ArrayList<>(picked.size());
      for (Candidate c : picked) {
        eps.add(c.endpoint());
      }
      return new ProfileResult(profile.name(), eps);
    }
  }

  /** Feeds the lifecycle of one decision into in-flight counters and request listeners. */
  private final class Tracker implements RoutingDecision.Callbacks {
    private final InferenceRequest request;
    private final InFlightLedger.Lease lease;

    Tracker(InferenceRequest request, InFlightLedger.Lease lease) {
      this.request = request;
      this.lease = lease;
    }

    // listeners run on the gateway's thread: one that throws must neither reach the gateway
    // nor keep the listeners after it from hearing about the request

    @Override
    public void firstToken(RoutingDecision decision) {
      Endpoint e = decision.primary();
      for (int i = 0; i < requestListeners.length; i++) {
        try {
          requestListeners[i].onFirstToken(request, e);
        } catch (RuntimeException x) {
          requestListenerWarnings[i].report("threw " + x.getClass().getName() + " in onFirstToken", x);
        }
      }
    }

    @Override
    public void complete(RoutingDecision decision, Usage usage) {
      ledger.release(lease);
      Endpoint e = decision.primary();
      for (int i = 0; i < requestListeners.length; i++) {
        try {
          requestListeners[i].onComplete(request, e, usage);
        } catch (RuntimeException x) {
          requestListenerWarnings[i].report("threw " + x.getClass().getName() + " in onComplete", x);
        }
      }
    }

    @Override
    public void failure(RoutingDecision decision, Throwable cause) {
      ledger.release(lease);
      Endpoint e = decision.primary();
      for (int i = 0; i < requestListeners.length; i++) {
        try {
          requestListeners[i].onFailure(request, e, cause);
        } catch (RuntimeException x) {
          requestListenerWarnings[i].report("threw " + x.getClass().getName() + " in onFailure", x);
        }
      }
    }
  }

  // ------------------------------------------------------------------------------ pool changes

  /** Adds an endpoint (no-op if one with the same id exists). Returns whether it was added. */
  public boolean addEndpoint(Endpoint endpoint) {
    Objects.requireNonNull(endpoint, "endpoint");
    synchronized (membershipLock) {
      synchronized (poolLock) {
        PoolSnapshot cur = pool;
        if (cur.indexOf(endpoint.id()) >= 0) {
          return false;
        }
        EndpointState[] next = java.util.Arrays.copyOf(cur.states, cur.states.length + 1);
        next[cur.states.length] =
            new EndpointState(endpoint, EndpointMetrics.UNKNOWN, new EndpointState.InFlight());
        pool = new PoolSnapshot(next);
      }
      notifyPoolListeners(List.of(), List.of(endpoint));
    }
    return true;
  }

  /** Removes an endpoint by id; returns whether it was present. */
  public boolean removeEndpoint(String endpointId) {
    synchronized (membershipLock) {
      EndpointState removed;
      synchronized (poolLock) {
        PoolSnapshot cur = pool;
        int i = cur.indexOf(endpointId);
        if (i < 0) {
          return false;
        }
        removed = cur.states[i];
        EndpointState[] next = new EndpointState[cur.states.length - 1];
        System.arraycopy(cur.states, 0, next, 0, i);
        System.arraycopy(cur.states, i + 1, next, i, cur.states.length - i - 1);
        pool = new PoolSnapshot(next);
      }
      notifyPoolListeners(List.of(removed.endpoint), List.of());
    }
    return true;
  }

  /**
   * Makes the pool exactly {@code endpoints}: adds the new ones, removes the missing ones, keeps
   * metrics and in-flight counters of the ones that stay.
   */
  public void setEndpoints(Collection<Endpoint> endpoints) {
    synchronized (membershipLock) {
      setEndpointsLocked(endpoints);
    }
  }

  private void setEndpointsLocked(Collection<Endpoint> endpoints) {
    List<Endpoint> added = new ArrayList<>();
    List<Endpoint> removed = new ArrayList<>();
    synchronized (poolLock) {
      PoolSnapshot cur = pool;
      Map<String, Endpoint> wanted = new LinkedHashMap<>();
      for (Endpoint e : endpoints) {
        wanted.put(e.id(), e);
      }
      List<EndpointState> next = new ArrayList<>(wanted.size());
      for (EndpointState s : cur.states) {
        Endpoint w = wanted.remove(s.endpoint.id());
        if (w == null) {
          removed.add(s.endpoint);
        } else if (w.equals(s.endpoint)) {
          next.add(s);
        } else {
          next.add(new EndpointState(w, s.metrics, s.inFlight)); // labels changed
        }
      }
      for (Endpoint e : wanted.values()) {
        next.add(new EndpointState(e, EndpointMetrics.UNKNOWN, new EndpointState.InFlight()));
        added.add(e);
      }
      pool = new PoolSnapshot(next.toArray(new EndpointState[0]));
    }
    notifyPoolListeners(removed, added);
  }

  /**
   * Tells every pool listener about removals, then additions. A listener that throws is logged
   * (throttled per listener) and skipped: the pool change has happened and the other listeners
   * must still hear it, or their per-endpoint state would drift from the pool.
   */
  private void notifyPoolListeners(List<Endpoint> removed, List<Endpoint> added) {
    for (PoolListener l : poolListeners) {
      for (Endpoint e : removed) {
        try {
          l.onEndpointRemoved(e);
        } catch (RuntimeException x) {
          pluginWarnings.get(l).report("threw " + x.getClass().getName() + " in onEndpointRemoved", x);
        }
      }
      for (Endpoint e : added) {
        try {
          l.onEndpointAdded(e);
        } catch (RuntimeException x) {
          pluginWarnings.get(l).report("threw " + x.getClass().getName() + " in onEndpointAdded", x);
        }
      }
    }
  }

  /**
   * Publishes new metrics for an endpoint. Metrics without a scrape time are stamped with the
   * router's clock. Returns false when the endpoint is not in the pool.
   */
  public boolean updateMetrics(String endpointId, EndpointMetrics metrics) {
    long now = ticker.nanos();
    // off the request path and called steadily by a scraper: a good place to expire
    ledger.expireIfDue(now);
    EndpointMetrics m = metrics.scrapedAtNanos() == EndpointMetrics.UNSET_TIME
        ? metrics.withScrapedAtNanos(now) : metrics;
    synchronized (poolLock) {
      PoolSnapshot cur = pool;
      int i = cur.indexOf(endpointId);
      if (i < 0) {
        return false;
      }
      EndpointState[] next = cur.states.clone();
      next[i] = next[i].withMetrics(m);
      pool = new PoolSnapshot(next);
      return true;
    }
  }

  /** Publishes metrics for several endpoints in one snapshot; unknown ids are ignored. */
  public void updateMetrics(Map<String, EndpointMetrics> metricsById) {
    long now = ticker.nanos();
    ledger.expireIfDue(now);
    synchronized (poolLock) {
      PoolSnapshot cur = pool;
      EndpointState[] next = cur.states.clone();
      for (int i = 0; i < next.length; i++) {
        EndpointMetrics m = metricsById.get(next[i].endpoint.id());
        if (m != null) {
          next[i] = next[i].withMetrics(m.scrapedAtNanos() == EndpointMetrics.UNSET_TIME
              ? m.withScrapedAtNanos(now) : m);
        }
      }
      pool = new PoolSnapshot(next);
    }
  }

  /** The current pool as candidates (endpoint, metrics, in-flight counts). */
  public List<Candidate> endpoints() {
    return pool.candidates;
  }

  /** The current pool saturation (see the builder's saturation settings). */
  public double poolSaturation() {
    return saturation.poolSaturation(pool);
  }

  public RouterConfig config() {
    return config;
  }

  public PluginRegistry registry() {
    return registry;
  }

  public Ticker ticker() {
    return ticker;
  }

  /** Closes every plugin and stops telemetry callbacks; later routes are rejected. */
  @Override
  public void close() {
    closed = true;
    telemetry.close();
    Set<Plugin> all = Collections.newSetFromMap(new IdentityHashMap<>());
    all.addAll(config.plugins().values());
    for (SchedulingProfile p : config.profiles().values()) {
      all.addAll(p.filters());
      p.scorers().forEach(ws -> all.add(ws.scorer()));
      all.add(p.picker());
    }
    all.add(config.profileHandler());
    for (Plugin p : all) {
      try {
        p.close();
      } catch (RuntimeException e) {
        LOG.log(Level.WARNING, "closing plugin " + p.getClass().getName() + " failed", e);
      }
    }
  }

  // -------------------------------------------------------------------------------- builder

  /** Builds a {@link Router}. */
  public static final class Builder {
    private final List<Endpoint> endpoints = new ArrayList<>();
    private @Nullable RouterConfig config;
    private @Nullable Path configFile;
    private @Nullable String configYaml;
    private String configSource = "config";
    private PluginRegistry registry;
    private Ticker ticker = Ticker.system();
    private OpenTelemetry openTelemetry;
    private @Nullable Long seed;
    private OpenAiRequestParser parser = OpenAiRequestParser.defaults();
    private int saturationQueueThreshold = 5;
    private double saturationKvThreshold = 0.8;
    private Duration metricsStaleness = Duration.ofMillis(200);
    private Duration inFlightMaxAge = DEFAULT_IN_FLIGHT_MAX_AGE;
    private final Map<Class<?>, Object> services = new LinkedHashMap<>();
    private final List<Object> extraListeners = new ArrayList<>();

    private Builder() {}

    /** Initial endpoints. */
    public Builder endpoints(Collection<Endpoint> eps) {
      endpoints.addAll(eps);
      return this;
    }

    public Builder endpoint(Endpoint e) {
      endpoints.add(e);
      return this;
    }

    /** A configuration built in code; replaces any file or YAML given before. */
    public Builder config(RouterConfig c) {
      this.config = c;
      this.configFile = null;
      this.configYaml = null;
      return this;
    }

    /** A single profile built in code, run by the single-profile handler. */
    public Builder profile(SchedulingProfile p) {
      return config(RouterConfig.of(p));
    }

    /** An {@code EndpointPickerConfig} YAML file. */
    public Builder configFile(Path file) {
      this.configFile = file;
      this.config = null;
      this.configYaml = null;
      return this;
    }

    /** {@code EndpointPickerConfig} YAML text; {@code source} names it in error messages. */
    public Builder configYaml(String yaml, String source) {
      this.configYaml = yaml;
      this.configSource = source;
      this.config = null;
      this.configFile = null;
      return this;
    }

    /** The plugin types to resolve config files against; default: ServiceLoader discovery. */
    public Builder registry(PluginRegistry r) {
      this.registry = r;
      return this;
    }

    /** The clock for metrics ages, TTLs and cycle time; default {@link Ticker#system()}. */
    public Builder ticker(Ticker t) {
      this.ticker = Objects.requireNonNull(t);
      return this;
    }

    /** Where metrics go; default {@code GlobalOpenTelemetry.getOrNoop()}. */
    public Builder openTelemetry(OpenTelemetry otel) {
      this.openTelemetry = Objects.requireNonNull(otel);
      return this;
    }

    /**
     * Makes random tie-breaks reproducible: with a seed, the n-th routing cycle of this router
     * always draws the same numbers (use from one thread for a fully deterministic sequence).
     */
    public Builder randomSeed(long s) {
      this.seed = s;
      return this;
    }

    /** The body parser used by {@link Router#route(String, Map, byte[])}. */
    public Builder requestParser(OpenAiRequestParser p) {
      this.parser = Objects.requireNonNull(p);
      return this;
    }

    /** Waiting requests at which an endpoint counts as saturated; default 5. */
    public Builder saturationQueueThreshold(int n) {
      if (n < 1) {
        throw new IllegalArgumentException("saturationQueueThreshold must be >= 1, got " + n);
      }
      this.saturationQueueThreshold = n;
      return this;
    }

    /** KV-cache usage at which an endpoint counts as saturated; default 0.8. */
    public Builder saturationKvThreshold(double v) {
      if (!(v > 0 && v <= 1)) {
        throw new IllegalArgumentException("saturationKvThreshold must be in (0,1], got " + v);
      }
      this.saturationKvThreshold = v;
      return this;
    }

    /** Metrics older than this count as saturated for shedding; default 200 ms. */
    public Builder metricsStaleness(Duration d) {
      if (d.isNegative() || d.isZero()) {
        throw new IllegalArgumentException("metricsStaleness must be positive, got " + d);
      }
      this.metricsStaleness = d;
      return this;
    }

    /**
     * How long a routed request may stay counted as in flight without the gateway calling
     * {@code onComplete} or {@code onFailure}; default 10 minutes. Older requests are released by
     * the next {@code route} or {@code updateMetrics} call that finds a check due (one every eighth
     * of this at most) and counted in {@code epp4j.routing.in_flight_expired}.
     * This is a safety net for decisions the gateway dropped, not a request timeout: set it
     * well above the longest request you serve, since releasing a request that is still running
     * makes its endpoint look less busy than it is.
     */
    public Builder inFlightMaxAge(Duration d) {
      if (d.isNegative() || d.isZero()) {
        throw new IllegalArgumentException("inFlightMaxAge must be positive, got " + d);
      }
      this.inFlightMaxAge = d;
      return this;
    }

    /** A service plugins can ask for through {@code PluginContext.service(type)}. */
    public <T> Builder service(Class<T> type, T instance) {
      services.put(type, type.cast(instance));
      return this;
    }

    /**
     * An extra {@link RequestListener} and/or {@link PoolListener} (for example a simulator or
     * an index fed by the gateway) that is not part of the configuration.
     */
    public Builder listener(Object listener) {
      if (!(listener instanceof RequestListener) && !(listener instanceof PoolListener)) {
        throw new IllegalArgumentException("listener must implement RequestListener or PoolListener");
      }
      extraListeners.add(listener);
      return this;
    }

    /**
     * Builds the router.
     *
     * @throws ConfigException with every problem found when the configuration is invalid, or
     *     when no configuration is given and the default profile's plugin types are missing
     */
    public Router build() {
      if (registry == null) {
        registry = PluginRegistry.fromServiceLoader();
      }
      if (openTelemetry == null) {
        openTelemetry = GlobalOpenTelemetry.getOrNoop();
      }
      // plugins with metrics of their own (e.g. the KV-event index) export through the same API
      services.putIfAbsent(OpenTelemetry.class, openTelemetry);
      RouterConfig c = config;
      if (c == null) {
        ConfigLoader loader = new ConfigLoader(registry, ticker,
            type -> Optional.ofNullable(services.get(type)));
        Result<RouterConfig> r;
        if (configFile != null) {
          r = loader.load(configFile);
        } else if (configYaml != null) {
          r = loader.load(configYaml, configSource);
        } else {
          r = loader.load(DEFAULT_CONFIG_YAML, "default profile");
          if (!r.isOk()) {
            List<String> errs = new ArrayList<>();
            errs.add("no configuration was given and the EPP default profile cannot be built;"
                + " add io.epp4j:routing-scorers to the classpath or pass a configuration");
            errs.addAll(r.errors());
            throw new ConfigException(errs);
          }
        }
        if (!r.isOk()) {
          throw new ConfigException(r.errors());
        }
        c = r.value();
      }
      return new Router(this, c);
    }
  }
}
