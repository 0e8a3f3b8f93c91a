package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PoolListener;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Ticker;
import io.epp4j.api.Usage;
import java.lang.invoke.VarHandle;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.jspecify.annotations.Nullable;

/**
 * {@code inflight-load-producer}, as llm-d's: per endpoint, the requests this router sent there
 * and has not seen end, and the tokens they still cost it. A request adds its prompt tokens less
 * those the endpoint was found to hold (the cycle's {@link PrefixHits}, when a prefix scorer or
 * producer ran), released at its first token, when the prefill is done; with
 * {@code addEstimatedOutputTokens}, also an estimate of its output,
 * {@code min(min(round(prompt × outputRatio), max_tokens) × n, maxEstimatedOutputTokens)}, one
 * sequence's estimate for each of the request's {@link InferenceRequest#sequences()}, released
 * when it ends. {@code prefix-cache-affinity-filter} reads it for its TTFT gate.
 *
 * <p>A request the gateway never finishes is forgotten after the router's {@code inFlightMaxAge},
 * counted from its route or its last {@code onActivity}. An endpoint that leaves the pool while
 * requests counted on it run keeps its counters until they end: if it comes back meanwhile (a
 * readiness probe that failed under load, a discovery blip) they still count there, as the
 * router's own in-flight counts do; once they have ended, it is forgotten. Thread-safe; nothing
 * blocks.
 */
final class InFlightLoadProducer implements Plugin, RequestListener, PoolListener {
  static final double DEFAULT_OUTPUT_RATIO = 1.5;

  private final boolean addEstimatedOutputTokens;
  private final double outputRatio;
  private final long maxEstimatedOutputTokens;
  private final Ticker ticker;
  private final long maxAgeNanos;
  private final ConcurrentHashMap<InferenceRequest, Held> held = new ConcurrentHashMap<>();
  private final ConcurrentHashMap<String, Load> loads = new ConcurrentHashMap<>();
  /**
   * Endpoints that left the pool with requests counted on them: their loads stay for a return,
   * and a sweep drops each once idle, so there are no more of them than requests in flight.
   */
  private final Set<String> departed = ConcurrentHashMap.newKeySet();
  /** Endpoints in the pool, as announced through {@link #onEndpointAdded}. */
  private final Set<String> members = ConcurrentHashMap.newKeySet();
  private final AtomicLong nextSweep;
  /**
   * Tests only: runs where an endpoint's counters have been found and nothing is recorded against
   * them yet, the gap a pool change or a sweep on another thread can fall into.
   */
  @Nullable Runnable lookupHook;

  /**
   * @param maxEstimatedOutputTokens cap of the output estimate; negative: none
   */
  InFlightLoadProducer(boolean addEstimatedOutputTokens, double outputRatio,
      long maxEstimatedOutputTokens, Ticker ticker, long maxAgeNanos) {
    this.addEstimatedOutputTokens = addEstimatedOutputTokens;
    this.outputRatio = outputRatio;
    this.maxEstimatedOutputTokens = maxEstimatedOutputTokens;
    this.ticker = ticker;
    this.maxAgeNanos = maxAgeNanos;
    this.nextSweep = new AtomicLong(ticker.nanos() + maxAgeNanos / 8);
  }

  /** Tokens in flight on {@code endpointId}: uncached prompts not yet prefilled, estimates. */
  long tokens(String endpointId) {
    Load l = loads.get(endpointId);
    return l == null ? 0 : Math.max(0, l.tokens.get());
  }

  /** Requests in flight on {@code endpointId}. */
  long requests(String endpointId) {
    Load l = loads.get(endpointId);
    return l == null ? 0 : Math.max(0, l.requests.get());
  }

  /**
   * The tokens {@code request} would add on {@code endpointId} if routed there (upstream's
   * uncached request tokens): its prompt tokens less those {@code hits} say the endpoint holds,
   * plus the output estimate when {@code addEstimatedOutputTokens} is set.
   */
  long requestTokens(InferenceRequest request, @Nullable PrefixHits hits, String endpointId) {
    return uncachedTokens(request, hits, endpointId) + outputTokens(request);
  }

  private static long uncachedTokens(InferenceRequest request, @Nullable PrefixHits hits,
      String endpointId) {
    long prompt = Math.max(0, request.estimatedPromptTokens());
    long cached = hits == null ? 0 : Math.max(0, hits.cachedTokens(endpointId));
    return Math.max(0, prompt - cached);
  }

  private long outputTokens(InferenceRequest request) {
    if (!addEstimatedOutputTokens) {
      return 0;
    }
    // estimated from the whole prompt, not the uncached part, as upstream's estimator; that is
    // one sequence's length, and the engine generates each of the request's n, as the router's
    // own in-flight count takes max_tokens once per sequence
    long output = Math.round(Math.max(0, request.estimatedPromptTokens()) * outputRatio);
    if (request.maxTokens() > 0) {
      output = Math.min(output, request.maxTokens());
    }
    int n = request.sequences();
    output = output > Long.MAX_VALUE / n ? Long.MAX_VALUE : output * n;
    if (maxEstimatedOutputTokens >= 0) {
      output = Math.min(output, maxEstimatedOutputTokens);
    }
    return output;
  }

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    long now = ticker.nanos();
    sweepIfDue(now);
    String id = decision.primary().id();
    PrefixHits hits = state.get(PrefixHits.KEY);
    long uncached = uncachedTokens(request, hits, id);
    long output = outputTokens(request);
    // a disaggregated request's prompt is computed on its prefill pick, which holds it until the
    // first token, as upstream counts every profile's pick
    Endpoint prefill = decision.secondaryEndpoint(PdProfileHandler.PREFILL_PROFILE);
    String prefillId = "";
    Load prefillLoad = null;
    long prefillTokens = 0;
    if (prefill != null && !prefill.id().equals(id)) {
      prefillId = prefill.id();
      prefillLoad = load(prefillId);
      prefillTokens = uncachedTokens(request, hits, prefillId);
    }
    Load load = load(id);
    Held h = new Held(id, load, uncached, output, prefillId, prefillLoad, prefillTokens, now);
    if (held.putIfAbsent(request, h) == null) {
      load.add(uncached + output, 1);
      if (prefillLoad != null) {
        prefillLoad.add(prefillTokens, 1);
      }
      // the counters may have been dropped, idle, between their lookup and the counts above (the
      // endpoint left, or a sweep ran): then the request counts again on the endpoint's own
      if (!countsFor(id, load) || prefillLoad != null && !countsFor(prefillId, prefillLoad)) {
        h.recount();
      }
    }
  }

  @Override
  public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
    Held h = held.get(request);
    if (h != null) {
      h.move(to.id());
    }
  }

  @Override
  public void onActivity(InferenceRequest request, Endpoint endpoint) {
    Held h = held.get(request);
    if (h != null) {
      h.touchedNanos = ticker.nanos();
    }
  }

  @Override
  public void onFirstToken(InferenceRequest request, Endpoint endpoint) {
    Held h = held.get(request);
    if (h != null) {
      h.releasePrompt();
    }
  }

  @Override
  public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
    end(request);
  }

  @Override
  public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
    end(request);
  }

  @Override
  public void onEndpointAdded(Endpoint endpoint) {
    String id = endpoint.id();
    // a member before it stops being away: see load
    members.add(id);
    // back while requests routed before it left still run: they go on counting on its load
    unmark(id);
  }

  /**
   * Ends the endpoint's away mark. Under the map's lock for the id, as the check of
   * {@link #dropIfIdle}: a drop decided while it was away has removed the load before the mark
   * goes, which {@link #countsFor} relies on.
   */
  private void unmark(String id) {
    loads.compute(id, (k, l) -> {
      departed.remove(k);
      return l;
    });
  }

  /**
   * Whether {@code l}, just counted on, is still {@code id}'s load. Loads are dropped only under
   * the map's lock for the id, only while idle and marked away: an endpoint not marked away after
   * the count keeps the load it has; one marked away is checked under that lock, so either the
   * drop saw the count and kept the load, or this sees it gone.
   */
  private boolean countsFor(String id, Load l) {
    VarHandle.fullFence();
    if (!departed.contains(id)) {
      return loads.get(id) == l;
    }
    return loads.computeIfPresent(id, (k, v) -> v) == l;
  }

  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    String id = endpoint.id();
    members.remove(id);
    departed.add(id);
    dropIfIdle(id);
  }

  /**
   * Forgets the load of a departed endpoint once nothing counts on it. Under the map's lock for
   * the id, and only while the endpoint is still away: a route that took the load after the
   * endpoint came back keeps adding to the load the map holds. The mark goes with the load, under
   * the same lock (see {@link #countsFor}).
   */
  private void dropIfIdle(String id) {
    loads.compute(id, (k, l) -> {
      if (l == null || l.idle() && departed.contains(k)) {
        departed.remove(k);
        return null;
      }
      return l;
    });
  }

  private void end(InferenceRequest request) {
    Held h = held.remove(request);
    if (h != null) {
      h.releaseAll();
    }
  }

  /**
   * The counters of {@code id}. An endpoint not in the pool (gone since the route read the pool,
   * or a fallback the gateway took outside it) gets them too, since the request runs there, but
   * marked as away, so that they are dropped once idle like those of an endpoint that left:
   * created and never marked, they stayed for good once its requests ended, one entry for every
   * such late route of a replaced pod.
   */
  private Load load(String id) {
    Load l = loads.computeIfAbsent(id, k -> new Load());
    if (!members.contains(id)) {
      departed.add(id);
      if (members.contains(id)) {
        // announced meanwhile: its announcement may have run before the mark above
        unmark(id);
      }
    }
    Runnable hook = lookupHook;
    if (hook != null) {
      hook.run();
    }
    return l;
  }

  /** Endpoints with counters, in the pool or kept after they left; for tests. */
  int trackedLoads() {
    return loads.size();
  }

  /**
   * Forgets the requests the gateway never finished that are past the maximum age, if a sweep is
   * due: for a reader that may refuse every route (a full pool's detector), after which no
   * {@link #afterRouting} would come to sweep them, and the refusals would last for good.
   */
  void expireOverdue() {
    sweepIfDue(ticker.nanos());
  }

  /** Forgets requests the gateway never finished, at most once per eighth of the maximum age. */
  private void sweepIfDue(long now) {
    long due = nextSweep.get();
    if (now - due < 0 || !nextSweep.compareAndSet(due, now + maxAgeNanos / 8)) {
      return;
    }
    for (var it = held.entrySet().iterator(); it.hasNext(); ) {
      var e = it.next();
      if (now - e.getValue().touchedNanos > maxAgeNanos && held.remove(e.getKey(), e.getValue())) {
        e.getValue().releaseAll();
      }
    }
    for (String id : departed) {
      dropIfIdle(id);
    }
  }

  /** Endpoints that left the pool and whose loads are kept for their return (for tests). */
  int departedLoads() {
    return departed.size();
  }

  @Override
  public String toString() {
    return "inflight-load-producer(addEstimatedOutputTokens=" + addEstimatedOutputTokens + ")";
  }

  /** One endpoint's counters. */
  private static final class Load {
    final AtomicLong tokens = new AtomicLong();
    final AtomicLong requests = new AtomicLong();

    void add(long t, long r) {
      tokens.addAndGet(t);
      requests.addAndGet(r);
    }

    boolean idle() {
      return tokens.get() == 0 && requests.get() == 0;
    }
  }

  /**
   * What one request holds, and where; every change under its own lock. It gives back to the
   * counters it added to, which are its endpoint's as long as the endpoint is in the pool or the
   * request runs.
   */
  private final class Held {
    private String endpoint;
    private Load load;
    private long prompt;
    private long output;
    /** The prefill pick; "" without one. */
    private final String prefillEndpoint;
    /** The prefill pick's counters while it computes the prompt, else null. */
    private @Nullable Load prefillLoad;
    private long prefillPrompt;
    private boolean ended;
    volatile long touchedNanos;

    Held(String endpoint, Load load, long prompt, long output, String prefillEndpoint,
        @Nullable Load prefillLoad, long prefillPrompt, long now) {
      this.endpoint = endpoint;
      this.load = load;
      this.prefillEndpoint = prefillEndpoint;
      this.prefillLoad = prefillLoad;
      this.prefillPrompt = prefillPrompt;
      this.prompt = prompt;
      this.output = output;
      this.touchedNanos = now;
    }

    synchronized void move(String to) {
      if (ended || to.equals(endpoint)) {
        return;
      }
      take(prompt + output, 1);
      endpoint = to;
      load = load(to);
      load.add(prompt + output, 1);
      recount();
    }

    /**
     * Moves what this request counts to its endpoints' loads where the loads it counted on were
     * dropped, idle, before the counts reached them: nobody reads those any more.
     */
    synchronized void recount() {
      while (!ended && !countsFor(endpoint, load)) {
        take(prompt + output, 1);
        load = load(endpoint);
        load.add(prompt + output, 1);
      }
      Load pl;
      while (!ended && (pl = prefillLoad) != null && !countsFor(prefillEndpoint, pl)) {
        pl.add(-prefillPrompt, -1);
        Load l = load(prefillEndpoint);
        l.add(prefillPrompt, 1);
        prefillLoad = l;
      }
    }

    synchronized void releasePrompt() {
      if (!ended && prompt > 0) {
        take(prompt, 0);
        prompt = 0;
      }
      if (!ended) {
        releasePrefill();
      }
    }

    synchronized void releaseAll() {
      if (!ended) {
        ended = true;
        take(prompt + output, 1);
        prompt = 0;
        output = 0;
        releasePrefill();
      }
    }

    /** The prefill pick is done with the request (its first token came, or it ended). */
    private void releasePrefill() {
      Load l = prefillLoad;
      if (l != null) {
        l.add(-prefillPrompt, -1);
        prefillLoad = null;
        prefillPrompt = 0;
      }
    }

    private void take(long tokens, long requests) {
      load.add(-tokens, -requests);
    }
  }

  /**
   * The router's {@code inFlightMaxAge} in nanoseconds, as the counts of requests the gateway
   * never finishes are kept: {@link Long#MAX_VALUE}, never released by age, for a duration too
   * long to count in nanoseconds ({@code ChronoUnit.FOREVER}), which the router's builder takes
   * as turning its own expiry off; {@code toNanos} threw on it, so every plugin counting
   * in-flight load failed to load under such a router.
   */
  static long maxAgeNanos(PluginContext c) {
    java.time.Duration d = c.inFlightMaxAge();
    try {
      return Math.max(1, d.toNanos());
    } catch (ArithmeticException tooLong) {
      return d.isNegative() ? 1 : Long.MAX_VALUE;
    }
  }

  /** The plugin of a file that {@code name} names, or its only in-flight producer; else null. */
  static @Nullable InFlightLoadProducer find(PluginContext c, Parameters p, String parameter) {
    if (p.has(parameter)) {
      String name = java.util.Objects.requireNonNullElse(p.getString(parameter, ""), "");
      Plugin named = c.plugin(name).orElse(null);
      if (named == null) {
        p.error(parameter, CommonParameters.noSuchPlugin(name));
      } else if (!(named instanceof InFlightLoadProducer l)) {
        p.error(parameter, "names '" + name + "', " + named + ", not an inflight-load-producer");
      } else {
        return l;
      }
      return null;
    }
    InFlightLoadProducer only = null;
    for (Plugin earlier : c.earlierPlugins()) {
      if (earlier instanceof InFlightLoadProducer l) {
        if (only != null) {
          p.error(parameter, "is required: the file declares more than one"
              + " inflight-load-producer");
          return null;
        }
        only = l;
      }
    }
    return only;
  }

  /** Provides {@code inflight-load-producer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("inflight-load-producer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      boolean add = p.getBoolean("addEstimatedOutputTokens", false);
      double ratio = p.getDouble("outputRatio", DEFAULT_OUTPUT_RATIO, 0.0, 1e6);
      long cap = -1;
      if (p.has("maxEstimatedOutputTokens")) {
        cap = p.getLong("maxEstimatedOutputTokens", -1);
        if (cap < 0) {
          p.error("maxEstimatedOutputTokens", "must be >= 0, got " + cap);
        }
      }
      if (p.has("prefixMatchInfoProducerName")) {
        p.notice("prefixMatchInfoProducerName", "has no effect: the cached tokens come from the"
            + " prefix hits whichever prefix scorer or producer ran for the request");
      }
      if (p.has("syncCrossReplicaState")) {
        p.notice("syncCrossReplicaState", "has no effect: each router counts the requests it"
            + " routed itself");
      }
      return new InFlightLoadProducer(add, ratio, cap, c.ticker(),
          maxAgeNanos(c));
    }
  }
}
