package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.AttributeKey;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.HintListener;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Picker;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.PoolListener;
import io.epp4j.api.PoolOrder;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.RequestListener;
import io.epp4j.api.Result;
import io.epp4j.api.RouterHints;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Ticker;
import io.epp4j.api.Usage;
import java.lang.invoke.VarHandle;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicIntegerFieldUpdater;
import java.util.concurrent.atomic.AtomicLongFieldUpdater;
import java.util.concurrent.atomic.AtomicLong;
import java.util.random.RandomGenerator;
import org.jspecify.annotations.Nullable;

/**
 * {@code token-cost-picker}: picks the endpoint where the request is expected to wait for the
 * least work, counting cache misses and load in one unit, tokens. For every candidate {@code e}:
 *
 * <pre>
 * cost(e) = uncached(e)                              prompt tokens e must prefill for this request
 *         + queueWeight  × (pending(e) + foreign(e))  prefill work already waiting on e
 *         + decodeWeight × decode(e)                  tokens still to generate on e
 *         + capacityWeight × overflow(e)              KV e cannot hold and must compute again
 *         + kvUsageWeight × usage(e) × prompt         the prompt's share of a crowded cache
 * </pre>
 *
 * and the lowest cost wins, among the endpoints within the bounded load. {@code uncached} comes
 * from the {@link PrefixHits} an earlier prefix-cache scorer of the cycle published (the whole
 * prompt when none ran). {@code pending} is this picker's own account: the uncached prompt tokens
 * of the requests it sent to {@code e} that have not produced their first token yet, current at
 * the instant of the decision, unlike a scraped queue that is up to one scrape interval old and
 * flat until a queue forms. {@code foreign} covers work the router did not send (another router
 * replica, direct clients): scraped waiting requests beyond what this router has in flight there,
 * each counted as a request of this one's size. {@code decode} is also this picker's account:
 * the most output tokens of each request it sent to {@code e} and not yet seen complete
 * ({@code max_tokens} for each of the request's {@code n} sequences), the decode work that stays
 * on {@code e} after the prefill. {@code overflow} is
 * what the scraped KV usage, the pending prefill and this request's new KV exceed the endpoint's
 * {@code num_gpu_blocks} by (0 when the capacity is not reported).
 *
 * <p>Why this rather than a weighted sum of scores: a cache hit and a queue are both prefill work
 * the engine does before this request's first token, so they compare in tokens without weights
 * that hold at one load only. With equal caches the least queued endpoint wins; with equal queues
 * the best cache wins; a long history outweighs a short queue and a long queue outweighs a short
 * hit. Pile-up on the endpoint that first cached a shared prefix stops as soon as the requests
 * sent there are waiting for their prefill, before any scrape shows a queue.
 *
 * <p>Optional bounded load (Mirrokni, Thorup and Zadimoghaddam, 2018; off by default): an
 * endpoint whose router-tracked in-flight requests would exceed
 * {@code ceil(balanceFactor × (total in flight + 1) / n)} is not chosen while another is within
 * that bound.
 *
 * <p>Bounded load on sessions (on by default): the picker remembers where each session key's
 * last request went; a session counts on that endpoint until it has been idle for
 * {@code sessionTtlSeconds}. A request whose session is new, or whose home is not among the
 * candidates, may go only to endpoints holding fewer than
 * {@code ceil(sessionBalanceFactor × (active sessions + 1) / n)} sessions; a session's own home
 * is always allowed. Without it the endpoint that first cached a shared system prompt is the
 * cheapest for every new dialog at light load and collects them, and comes back to haunt the
 * tail when those dialogs grow.
 *
 * <p>Ties (equal cost) go to the session's rendezvous-hash favourite when the request has a
 * session key, else to fewer requests in flight, then uniformly at random. Scores of other
 * scorers are ignored; put a prefix-cache scorer before this picker so hits are known.
 *
 * <p>Thread-safe and lock-free: per-endpoint counters are atomics, created when the pool
 * announces an endpoint. An endpoint that leaves the pool while requests this picker sent there
 * still run, or while sessions are at home there, keeps its counters: if it comes back at the
 * same address (a readiness probe that failed under load, a discovery blip) those requests go on
 * counting there until they end or expire, their end takes off only what they added, and the
 * sessions still have their home there. Once nothing counts on them, the counters of an endpoint
 * that stays away are dropped. A request counts as pending from
 * {@code afterRouting} until its first token, completion or failure; one the gateway never
 * finishes is released after the router's {@code inFlightMaxAge} (10 minutes by default),
 * counted from the gateway's last {@link RoutingDecision#onActivity()} when it renews one.
 */
public final class TokenCostPicker implements Picker, RequestListener, PoolListener,
    HintListener {
  /** Plugin type name. */
  public static final String TYPE = "token-cost-picker";
  /**
   * Default multiplier of pending prefill tokens: 0.125, chosen from simulator runs (see
   * {@code docs/plugins.md}). A miss is work this choice adds to the cluster and, once caches
   * are full, a copy that evicts other prefixes; pending prefill exists wherever the request goes
   * and only decides who waits.
   */
  public static final double DEFAULT_QUEUE_WEIGHT = 0.125;
  /** Default multiplier of the decode tokens in flight (see {@code docs/plugins.md}). */
  public static final double DEFAULT_DECODE_WEIGHT = 0.3;
  /**
   * Default multiplier of scraped KV usage × prompt tokens: 1.0, chosen from simulator runs (see
   * {@code docs/plugins.md}).
   */
  public static final double DEFAULT_KV_USAGE_WEIGHT = 1.0;
  /**
   * Default multiplier of KV beyond the endpoint's capacity: 3.0. An overflowing prompt is not
   * admitted until running requests free room, or preempts one of them and has its whole context
   * computed again, so a token that does not fit costs more than one computed token; the value
   * was chosen from simulator runs (2 to 8 measured, see {@code docs/plugins.md}).
   */
  public static final double DEFAULT_CAPACITY_WEIGHT = 3.0;
  /** Default bounded-load factor: off (see {@code docs/plugins.md} for what was measured). */
  public static final double DEFAULT_BALANCE_FACTOR = 0.0;
  /**
   * Default bound on sessions per endpoint, as a multiple of the mean: no endpoint takes a new
   * session while it holds more than 1.25 × the mean of the active ones (see
   * {@code docs/plugins.md}).
   */
  public static final double DEFAULT_SESSION_BALANCE_FACTOR = 1.25;
  /**
   * Default time a session stays active without a request: 120 s, the idle time after which a
   * router without KV events (Dynamo's {@code ttl_secs}) forgets what it sent.
   */
  public static final double DEFAULT_SESSION_TTL_SECONDS = 120.0;
  /**
   * Default bound on the sessions remembered at once: 100,000, as {@code session-affinity-scorer}
   * keeps. Past it the least recently seen are forgotten first and placed again like new ones.
   */
  public static final int DEFAULT_MAX_SESSIONS = 100_000;
  /**
   * Ten minutes, the router's default in-flight expiry: a request without a first token after
   * that long was dropped by the gateway, not still prefilling.
   */
  static final long PENDING_MAX_AGE_NANOS = 600_000_000_000L;
  /**
   * How long a request never finished keeps its share: the router's {@code inFlightMaxAge} when
   * the provider built this picker in a router, else {@link #PENDING_MAX_AGE_NANOS}.
   */
  long pendingMaxAgeNanos = PENDING_MAX_AGE_NANOS;

  private final double queueWeight;
  private final double decodeWeight;
  private final double capacityWeight;
  private final double kvUsageWeight;
  private final double balanceFactor;
  private final double sessionBalanceFactor;
  private final long sessionTtlNanos;
  private final int maxSessions;
  private final AtomicBoolean trimming = new AtomicBoolean();
  private final ConcurrentHashMap<String, Load> loads = new ConcurrentHashMap<>();
  /**
   * The counters of endpoints that left the pool while requests counted on them still ran or
   * sessions had their home there, by id: an endpoint that comes back takes them up again. Each
   * is dropped once nothing counts on it (see {@link #settle}), so there are never more of them
   * than requests in flight plus sessions remembered.
   */
  private final ConcurrentHashMap<String, Load> departed = new ConcurrentHashMap<>();
  private volatile LoadSlots loadSlots = new LoadSlots(null, new Load[0]);
  // identity keys: InferenceRequest does not override equals
  private final ConcurrentHashMap<InferenceRequest, Pending> pending = new ConcurrentHashMap<>();
  private final AtomicLong nextSweep = new AtomicLong(Long.MIN_VALUE);
  // session key -> the endpoint its last request went to
  private final ConcurrentHashMap<String, Home> homes = new ConcurrentHashMap<>();
  private final AtomicLong nextSessionSweep = new AtomicLong(Long.MIN_VALUE);
  private final AttributeKey<Choice> choiceKey = AttributeKey.of("token-cost-choice", Choice.class);
  /**
   * When scraped figures count as stale: a stale endpoint's queue and KV usage count as at least
   * the mean of the endpoints whose figures are fresh, so that figures from before its scrapes
   * stopped (a replica too busy to answer them) cannot make it look cheaper than the rest.
   */
  Staleness staleness = new Staleness(Staleness.DEFAULT_MILLIS);
  /**
   * How much dearer than the cheapest endpoint a prompt's agreed place may be when routers share
   * state (see {@code agreedPlace}). 1.2 from the simulator, seed 1, 4 replicated gateways at
   * 2 ms: shared-prefix 88.9% -> 89.7% hit rate (one gateway 90.3%), the trace's TTFT p95 lower
   * than without; unbounded, the trace's unique prompts went to their hashed homes regardless
   * of load and its TTFT p95 nearly doubled.
   */
  static final double AGREEMENT_SLACK = 1.2;

  /** The router's hint side, when the provider built this picker in a router; else null. */
  private @Nullable RouterHints hints;
  /** The router's clock, when the provider built this picker in a router; else the system's. */
  Ticker ticker = Ticker.system();
  /**
   * Tests only: runs where a listener method has found an endpoint's counters and not yet
   * recorded anything against them, the gap a pool change on another thread can fall into.
   */
  @Nullable Runnable lookupHook;

  TokenCostPicker(double queueWeight, double decodeWeight, double capacityWeight,
      double balanceFactor) {
    this(queueWeight, decodeWeight, capacityWeight, balanceFactor, 0, DEFAULT_SESSION_TTL_SECONDS);
  }

  TokenCostPicker(double queueWeight, double decodeWeight, double capacityWeight,
      double balanceFactor, double sessionBalanceFactor, double sessionTtlSeconds) {
    this(queueWeight, decodeWeight, capacityWeight, balanceFactor, sessionBalanceFactor,
        sessionTtlSeconds, 0.0);
  }

  TokenCostPicker(double queueWeight, double decodeWeight, double capacityWeight,
      double balanceFactor, double sessionBalanceFactor, double sessionTtlSeconds,
      double kvUsageWeight) {
    this(queueWeight, decodeWeight, capacityWeight, balanceFactor, sessionBalanceFactor,
        sessionTtlSeconds, kvUsageWeight, DEFAULT_MAX_SESSIONS);
  }

  TokenCostPicker(double queueWeight, double decodeWeight, double capacityWeight,
      double balanceFactor, double sessionBalanceFactor, double sessionTtlSeconds,
      double kvUsageWeight, int maxSessions) {
    if (maxSessions < 1) {
      throw new IllegalArgumentException("maxSessions must be >= 1, got " + maxSessions);
    }
    this.maxSessions = maxSessions;
    if (!(kvUsageWeight >= 0 && Double.isFinite(kvUsageWeight))) {
      throw new IllegalArgumentException("kvUsageWeight must be a finite number >= 0, got "
          + kvUsageWeight);
    }
    this.kvUsageWeight = kvUsageWeight;
    if (!(queueWeight >= 0 && Double.isFinite(queueWeight))) {
      throw new IllegalArgumentException("queueWeight must be a finite number >= 0, got "
          + queueWeight);
    }
    if (!(decodeWeight >= 0 && Double.isFinite(decodeWeight))) {
      throw new IllegalArgumentException("decodeWeight must be a finite number >= 0, got "
          + decodeWeight);
    }
    if (!(capacityWeight >= 0 && Double.isFinite(capacityWeight))) {
      throw new IllegalArgumentException("capacityWeight must be a finite number >= 0, got "
          + capacityWeight);
    }
    if (balanceFactor != 0 && !(balanceFactor >= 1.0 && balanceFactor <= 1000.0)) {
      throw new IllegalArgumentException("balanceFactor must be 0 (off) or in [1, 1000], got "
          + balanceFactor);
    }
    if (sessionBalanceFactor != 0
        && !(sessionBalanceFactor >= 1.0 && sessionBalanceFactor <= 1000.0)) {
      throw new IllegalArgumentException("sessionBalanceFactor must be 0 (off) or in [1, 1000], got "
          + sessionBalanceFactor);
    }
    if (!(sessionTtlSeconds > 0 && sessionTtlSeconds <= 86_400)) {
      throw new IllegalArgumentException("sessionTtlSeconds must be in (0, 86400], got "
          + sessionTtlSeconds);
    }
    this.sessionBalanceFactor = sessionBalanceFactor;
    this.sessionTtlNanos = (long) (sessionTtlSeconds * 1e9);
    this.queueWeight = queueWeight;
    this.decodeWeight = decodeWeight;
    this.capacityWeight = capacityWeight;
    this.balanceFactor = balanceFactor;
  }

  /** A picker with the defaults. */
  public static TokenCostPicker create() {
    return new TokenCostPicker(DEFAULT_QUEUE_WEIGHT, DEFAULT_DECODE_WEIGHT,
        DEFAULT_CAPACITY_WEIGHT, DEFAULT_BALANCE_FACTOR, DEFAULT_SESSION_BALANCE_FACTOR,
        DEFAULT_SESSION_TTL_SECONDS, DEFAULT_KV_USAGE_WEIGHT);
  }

  /**
   * The cost of {@code candidate} for a request of {@code promptTokens} of which it holds
   * {@code cachedTokens}, with this picker's current account of its pending prefill.
   */
  double cost(Candidate candidate, long promptTokens, long cachedTokens) {
    return cost(candidate, promptTokens, cachedTokens, 0);
  }

  /** The same for a request that will generate up to {@code outputTokens} tokens. */
  double cost(Candidate candidate, long promptTokens, long cachedTokens, long outputTokens) {
    return cost(candidate, loads.get(candidate.id()), promptTokens, cachedTokens, outputTokens,
        null);
  }

  /**
   * The mean queue and KV usage of the candidates whose scraped figures are fresh at
   * {@code now}, which a stale candidate's figures count as at least; null when no candidate is
   * stale, or none is fresh (then the last figures are all there is).
   */
  private @Nullable FreshMean freshMean(List<Candidate> candidates, long now) {
    int fresh = 0;
    boolean anyStale = false;
    double waiting = 0;
    double usage = 0;
    for (int i = 0, n = candidates.size(); i < n; i++) {
      Candidate c = candidates.get(i);
      if (!Staleness.known(c)) {
        continue; // never scraped: its own accounts only, as documented
      }
      if (staleness.usable(c, now)) {
        fresh++;
        waiting += Math.max(0, c.metrics().waitingRequests());
        usage += Math.min(1.0, Math.max(0.0, c.metrics().kvCacheUsage()));
      } else {
        anyStale = true;
      }
    }
    return anyStale && fresh > 0 ? new FreshMean(now, waiting / fresh, usage / fresh) : null;
  }

  /** The cost of a prompt {@code c} holds none of, stale figures counted as in a pick. */
  private double costHere(Candidate c, long prompt, long outputTokens, @Nullable FreshMean mean) {
    return cost(c, loads.get(c.id()), prompt, 0, outputTokens, mean);
  }

  /** See {@link #freshMean}. */
  private record FreshMean(long now, double waiting, double usage) {}

  private double cost(Candidate candidate, @Nullable Load l, long promptTokens, long cachedTokens,
      long outputTokens, @Nullable FreshMean mean) {
    long uncached = promptTokens - Math.min(promptTokens, Math.max(0, cachedTokens));
    long pendTokens = l == null ? 0 : l.prefillTokens();
    int pendRequests = l == null ? 0 : l.prefillRequests();
    long decode = l == null ? 0 : l.decodeTokens();
    EndpointMetrics m = candidate.metrics();
    long waiting = m.waitingRequests();
    double usage = m.kvCacheUsage();
    if (mean != null && Staleness.known(candidate) && !staleness.usable(candidate, mean.now())) {
      waiting = Math.max(waiting, Math.round(mean.waiting()));
      usage = Math.max(usage, mean.usage());
    }
    // requests the engine reports that this router has no record of: another router's
    long foreign = waiting + m.runningRequests() - candidate.inFlightRequests();
    long foreignWaiting = Math.max(0, Math.min(waiting - pendRequests, foreign));
    double c = uncached
        + queueWeight * (Math.max(0, pendTokens) + foreignWaiting * (double) promptTokens)
        + decodeWeight * Math.max(0, decode);
    if (kvUsageWeight > 0) {
      // the share of the endpoint's KV that running requests hold, as a share of this prompt:
      // a prompt sent where the cache is crowded evicts what it would hit, or waits for room
      c += kvUsageWeight * Math.min(1.0, Math.max(0.0, usage)) * promptTokens;
    }
    // a bogus num_gpu_blocks can make the product wrap, to a few tokens that every prompt would
    // overflow: such an endpoint holds more than any prompt, not less
    long capBlocks = m.kvCapacityBlocks();
    long capProduct = capBlocks * m.blockSizeTokens();
    long capTokens = Math.multiplyHigh(capBlocks, m.blockSizeTokens()) != 0 || capProduct < 0
        ? Long.MAX_VALUE : capProduct;
    if (capacityWeight > 0 && capTokens > 0) {
      // KV the engine cannot hold is evicted or preempted and computed again: a cost in the same
      // unit. Usage is as scraped; prefill sent since is not in it yet. Only this request's own
      // new KV is its doing: the rest of the overflow is there wherever it goes
      long own = uncached + Math.max(0, outputTokens);
      double used = usage * capTokens + Math.max(0, pendTokens);
      c += capacityWeight * Math.min(own, Math.max(0, used + own - capTokens));
    }
    return c;
  }

  @Override
  public List<Candidate> pick(InferenceRequest request, CycleState state,
      List<Candidate> candidates, double[] scores) {
    int n = candidates.size();
    if (n == 0) {
      return List.of();
    }
    long prompt = request.estimatedPromptTokens();
    PrefixHits hits = state.get(PrefixHits.KEY);
    int cap = Integer.MAX_VALUE;
    if (balanceFactor > 0) {
      long total = 0;
      for (int i = 0; i < n; i++) {
        total += Math.max(0, candidates.get(i).inFlightRequests());
      }
      cap = (int) Math.min(Integer.MAX_VALUE, Math.max(1,
          (long) Math.ceil(balanceFactor * (total + 1) / n)));
    }
    Load[] byPosition = loadsByPosition(candidates);
    FreshMean mean = freshMean(candidates, state.nowNanos());
    String session = sessionOf(request);
    int sessionCap = Integer.MAX_VALUE;
    int homeIndex = -1;
    if (session != null && sessionBalanceFactor > 0) {
      // sessions idle past the TTL must not count against the bound: after a quiet spell the
      // first routes would otherwise see every session of before it as active
      sweepSessionsIfDue(state.nowNanos());
      Home home = homes.get(session);
      if (home != null && state.nowNanos() - home.lastNanos > sessionTtlNanos) {
        home = null; // idle too long: placed again like a new session
      }
      long sessions = 0;
      for (int i = 0; i < n; i++) {
        Candidate c = candidates.get(i);
        Load l = byPosition != null ? byPosition[i] : loads.get(c.id());
        sessions += l == null ? 0 : Math.max(0, l.sessions());
        if (home != null && homeIndex < 0
            && (byPosition != null ? l == home.load : c.id().equals(home.endpointId))) {
          homeIndex = i;
        }
      }
      // bounded load on sessions (Mirrokni et al.): a session that is new here, or moves here,
      // goes only where the active sessions stay within the bound; its own home is always within
      sessionCap = (int) Math.min(Integer.MAX_VALUE, Math.max(1,
          (long) Math.ceil(sessionBalanceFactor * (sessions + (homeIndex >= 0 ? 0 : 1)) / n)));
    }
    long sessionHash = session == null ? 0 : mix(session.hashCode() * 0x9E3779B97F4A7C15L);
    RandomGenerator rnd = null;
    int best = -1;
    double bestCost = 0;
    long bestHome = 0;
    boolean bestHomeKnown = false; // the rendezvous hash is computed only to break a tie
    int bestInFlight = 0;
    int ties = 0;
    boolean bestWithin = false;
    for (int i = 0; i < n; i++) {
      Candidate c = candidates.get(i);
      Load load = byPosition != null ? byPosition[i] : loads.get(c.id());
      int inFlight = c.inFlightRequests();
      boolean within = inFlight + 1 <= cap && (sessionCap == Integer.MAX_VALUE
          || i == homeIndex || (load == null ? 0 : load.sessions()) + 1 <= sessionCap);
      double cost = cost(c, load, prompt, cached(hits, i, c.id()), request.maxOutputTokens(),
          mean);
      long home = 0;
      boolean homeKnown = false;
      int cmp;
      if (best < 0 || within != bestWithin) {
        cmp = best < 0 || within ? -1 : 1;
      } else if (cost != bestCost) {
        cmp = cost < bestCost ? -1 : 1;
      } else {
        home = rendezvous(session, sessionHash, c);
        homeKnown = true;
        if (!bestHomeKnown) {
          bestHome = rendezvous(session, sessionHash, candidates.get(best));
          bestHomeKnown = true;
        }
        // rendezvous hashing: among equal costs a session returns to the same endpoint, which
        // may still hold history the prefix index has forgotten
        cmp = home != bestHome ? (home > bestHome ? -1 : 1) : Integer.compare(inFlight, bestInFlight);
      }
      if (cmp == 0) {
        // reservoir sampling: each of the k tied candidates is kept with probability 1/k
        ties++;
        if (rnd == null) {
          rnd = state.random();
        }
        if (rnd.nextInt(ties) != 0) {
          continue;
        }
      } else if (cmp > 0) {
        continue;
      } else {
        ties = 1;
      }
      best = i;
      bestCost = cost;
      bestHome = home;
      bestHomeKnown = homeKnown;
      bestInFlight = inFlight;
      bestWithin = within;
    }
    if (hints != null && bestWithin && homeIndex < 0 && hints.sharesState()) {
      best = agreedPlace(request, state, candidates, hits, prompt, best, cap, mean);
    }
    return choose(request, state, candidates, hits, prompt, best, session);
  }

  /**
   * Where routers that share state put a prompt no endpoint holds: its rendezvous home (the
   * highest hash of the prompt's first block with the endpoint) among the endpoints within the
   * bounds whose cost is at most {@link #AGREEMENT_SLACK} times the cheapest. The cost compares
   * this router's own pending prefill, which differs from router to router until the in-flight
   * figures arrive; a burst that reaches every gateway at once would otherwise place one prefix
   * on as many endpoints as there are routers. Any hit anywhere leaves the cost in charge, and so
   * does a load well above the cheapest (unique prompts stay balanced). The in-flight bound
   * holds; the bound on sessions per endpoint is not applied here, because in such a burst each
   * router counts only the sessions it placed itself and the bound would split the routers again
   * (it still keeps a session's later requests within bounds).
   */
  private int agreedPlace(InferenceRequest request, CycleState state, List<Candidate> candidates,
      @Nullable PrefixHits hits, long prompt, int best, int cap, @Nullable FreshMean mean) {
    PrefixBlocks blocks = state.get(PrefixBlocks.KEY);
    if (blocks == null || blocks.size() == 0) {
      return best;
    }
    int n = candidates.size();
    for (int i = 0; i < n; i++) {
      if (cached(hits, i, candidates.get(i).id()) > 0) {
        return best;
      }
    }
    double limit = costHere(candidates.get(best), prompt, request.maxOutputTokens(), mean)
        * AGREEMENT_SLACK;
    long key = blocks.hash(0);
    int chosen = best;
    long chosenHash = 0;
    boolean any = false;
    for (int i = 0; i < n; i++) {
      Candidate c = candidates.get(i);
      if (c.inFlightRequests() + 1 > cap
          || costHere(c, prompt, request.maxOutputTokens(), mean) > limit) {
        continue;
      }
      long h = mix(key ^ (c.id().hashCode() * 0x9E3779B97F4A7C15L));
      if (!any || h > chosenHash) {
        chosen = i;
        chosenHash = h;
        any = true;
      }
    }
    return chosen;
  }

  private List<Candidate> choose(InferenceRequest request, CycleState state,
      List<Candidate> candidates, @Nullable PrefixHits hits, long prompt, int index,
      @Nullable String session) {
    Candidate chosen = candidates.get(index);
    long uncached = prompt - Math.min(prompt, cached(hits, index, chosen.id()));
    // a picker named by two profiles of one cycle (decode and prefill) picks twice: each pick
    // is kept, and afterRouting counts the one that chose the endpoint serving the request
    state.put(choiceKey, new Choice(chosen.id(), uncached,
        Math.max(0, request.maxOutputTokens()), sessionBalanceFactor > 0 ? session : null, state.get(choiceKey)));
    return List.of(chosen);
  }

  /**
   * The candidates' counters by position when {@code candidates} is the pool in the router's
   * order ({@link PoolOrder}): looked up by id once per order instead of once per candidate and
   * route. {@code null} for any other list, and while an endpoint of the list has not been
   * announced yet (its counters do not exist; the next route looks again).
   */
  private Load @Nullable [] loadsByPosition(List<Candidate> candidates) {
    if (!(candidates instanceof PoolOrder po)) {
      return null;
    }
    Object order = po.poolOrder();
    LoadSlots ls = loadSlots;
    int n = candidates.size();
    if (ls.order == order && ls.loads.length == n) {
      return ls.loads;
    }
    Load[] byPosition = new Load[n];
    for (int i = 0; i < n; i++) {
      Load l = loads.get(candidates.get(i).id());
      if (l == null) {
        return null;
      }
      byPosition[i] = l;
    }
    loadSlots = new LoadSlots(order, byPosition);
    return byPosition;
  }

  /** Counters by position for one {@link PoolOrder} token. */
  private record LoadSlots(@Nullable Object order, Load[] loads) {}

  private int sessionsOf(String endpointId) {
    Load l = loads.get(endpointId);
    return l == null ? 0 : l.sessions();
  }

  /** A candidate's rendezvous hash for a session (0 without one). */
  private static long rendezvous(@Nullable String session, long sessionHash, Candidate c) {
    return session == null ? 0 : mix(sessionHash ^ c.id().hashCode());
  }

  /** The SplitMix64 finalizer: spreads similar inputs over all 64 bits. */
  static long mix(long z) {
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    return z ^ (z >>> 31);
  }

  private static long cached(@Nullable PrefixHits hits, int i, String id) {
    if (hits == null) {
      return 0;
    }
    // producers describe the candidates in the order they scored them: usually this order
    if (i < hits.size() && hits.endpointId(i).equals(id)) {
      return hits.cachedTokens(i);
    }
    return hits.cachedTokens(id);
  }

  // ------------------------------------------------------------------- pending prefill account

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    Endpoint primary = decision.primary();
    Choice c = choiceFor(state.get(choiceKey), primary);
    if (c == null || primary == null || !primary.id().equals(c.endpointId)) {
      return; // this picker did not choose the endpoint that serves the request
    }
    // the endpoint may have left the pool since the pick: the request counts on the counters
    // kept for its return (made now if nothing counted there as it left), as the router counts
    // it, so it is counted if the endpoint comes back while it runs and its end takes off what
    // it added
    long now = state.nowNanos();
    sweepIfDue(now); // first: a sweep drops idle kept counters, as the ones made here are yet
    // the prefill elsewhere is counted (and checked) as it is looked up
    Pending prefill = prefillElsewhere(state, decision, c);
    Load l;
    Pending p;
    while (true) {
      Load found = loadOf(c.endpointId);
      l = found != null ? found : keptFor(c.endpointId);
      afterLookup();
      p = new Pending(l, c.uncached, c.decode, now, prefill);
      // counted before it can be found, so a release racing in never takes more than was added
      p.addHere(1);
      // counters dropped, idle, between the lookup and the count (the endpoint left, or another
      // route's sweep dropped the kept ones just made) are nobody's: counted again on the
      // endpoint's as they are now. Counted on, these are not dropped while the request runs
      if (countsFor(c.endpointId, l)) {
        break;
      }
      p.addHere(-1);
    }
    Load home = l;
    String session = c.session;
    if (session != null) {
      sweepSessionsIfDue(now);
      homes.compute(session, (k, old) -> {
        if (old != null && old.load == home) {
          old.lastNanos = now;
          return old;
        }
        if (old != null) {
          old.load.addSessions(-1);
        }
        home.addSessions(1);
        return new Home(home, c.endpointId, now);
      });
      trimSessionsIfFull();
    }
    if (pending.putIfAbsent(request, p) != null) {
      p.add(-1); // the same request object routed again while in flight: counted once
    }
    forgetIfLeft(c.endpointId, l, request, session);
  }

  /**
   * The prefill this picker sent to another endpoint than the one that serves the request: when
   * it also picked for a secondary profile of the cycle (the prefill profile of a P/D
   * configuration), that endpoint prefills the prompt's uncached tokens there, and they are
   * pending on it until the request's first token (the serving endpoint decodes only after the
   * prefill is done) or its end. Null when no such pick was made. Counted here already, on the
   * counters the endpoint has (in the pool or kept for its return) once counted: a removal or a
   * sweep that dropped the counters looked up, idle, before the count reached them leaves them
   * nobody's, and the count is made again on the endpoint's counters as they are now.
   */
  private @Nullable Pending prefillElsewhere(CycleState state, RoutingDecision decision,
      Choice served) {
    String primaryProfile = decision.primaryProfile();
    for (var e : decision.profileResults().entrySet()) {
      if (e.getKey().equals(primaryProfile) || e.getValue().primary() == null) {
        continue;
      }
      String id = e.getValue().primary().id();
      if (id.equals(served.endpointId)) {
        continue; // prefills where it decodes: counted there already
      }
      for (Choice x = state.get(choiceKey); x != null; x = x.earlier) {
        if (x != served && x.endpointId.equals(id)) {
          while (true) {
            Load found = loadOf(id); // as the served endpoint: kept counters count too
            Load l = found != null ? found : keptFor(id);
            afterLookup();
            Pending prefill = new Pending(l, x.uncached, 0, state.nowNanos(), null);
            prefill.addHere(1);
            if (countsFor(id, l)) {
              return prefill;
            }
            prefill.addHere(-1); // on counters nobody reads: counted again on the endpoint's
          }
        }
      }
    }
    return null;
  }

  /**
   * Undoes what was just recorded against {@code l} when its endpoint left the pool after
   * {@code l} was looked up and its counters were dropped as idle (or it came back with new
   * ones): they are nobody's, and what counts on them counts nowhere. Counters kept for the
   * endpoint's return keep what was recorded, as they keep the requests sent before it left.
   * The removal drops counters only under the departed map's lock and only when nothing counts
   * on them, and this check takes the same lock after recording: either the removal sees what
   * was recorded and keeps them, or this check sees them gone.
   */
  private void forgetIfLeft(String endpointId, Load l, @Nullable InferenceRequest request,
      @Nullable String session) {
    if (countsFor(endpointId, l)) {
      return;
    }
    if (request != null) {
      Pending p = pending.get(request);
      if (p != null && p.load == l && pending.remove(request, p)) {
        p.release();
      }
    }
    if (session != null) {
      homes.computeIfPresent(session, (k, h) -> {
        if (h.load != l) {
          return h;
        }
        l.addSessions(-1);
        return null;
      });
    }
  }

  /**
   * Whether {@code l}, just counted on, is still {@code endpointId}'s counters, in the pool or
   * kept for its return. Counters are dropped only under the departed map's lock for the id and
   * only when idle, and the check of the kept ones takes that lock after the count: either the
   * drop saw the count and kept them, or this sees them gone.
   */
  private boolean countsFor(String endpointId, Load l) {
    VarHandle.fullFence();
    return loads.get(endpointId) == l
        || departed.computeIfPresent(endpointId, (k, v) -> v) == l;
  }

  /**
   * Another router sent a request of {@code session} to {@code endpointId}: the session's home
   * moves there as it would after a local route, so the bound on sessions per endpoint counts
   * the sessions every router placed. Nothing is counted as pending: the other router's load
   * arrives as in-flight figures and scraped metrics. Placed only on an endpoint in the pool;
   * the home is recorded on the counters looked up and checked after (see {@link #countsFor}):
   * counters dropped meanwhile (the endpoint left idle, and may be back with new ones) get it
   * taken off, and it is placed again on the endpoint's counters as they are now.
   */
  @Override
  public void onRemoteSession(String remoteSession, String endpointId, long nowNanos) {
    if (sessionBalanceFactor <= 0 || SessionKeys.isEndpointToken(remoteSession)) {
      return; // an endpoint token is no session's key (see sessionOf)
    }
    String session = SessionKeys.bounded(remoteSession);
    sweepSessionsIfDue(nowNanos);
    while (true) {
      Load l = loads.get(endpointId);
      if (l == null) {
        return; // away: not placed there, as a local route would not place it there
      }
      afterLookup();
      homes.compute(session, (k, old) -> {
        if (old != null && old.load == l) {
          old.lastNanos = Math.max(old.lastNanos, nowNanos);
          return old;
        }
        if (old != null) {
          old.load.addSessions(-1);
        }
        l.addSessions(1);
        return new Home(l, endpointId, nowNanos);
      });
      if (countsFor(endpointId, l)) {
        break;
      }
      forgetIfLeft(endpointId, l, null, session); // on counters nobody reads: placed again
    }
    trimSessionsIfFull();
  }

  /**
   * The gateway forwards the request to {@code to}, a fallback: its pending work moves there,
   * counted as the whole prompt (what {@code to} holds of it was not looked up, and a fallback
   * seldom holds the prefix); the session's home moves with it when it was {@code from} and
   * {@code to} is in the pool.
   */
  @Override
  public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
    Pending p = pending.get(request);
    if (p != null) {
      moveWork(request, p, to.id());
    }
    String session = sessionOf(request);
    if (session != null) {
      moveHome(session, from.id(), to.id());
    }
  }

  /**
   * Moves a request's work to {@code toId}'s counters. A fallback that left the pool after the
   * route may still be reached, and may come back while the request runs: the work counts on
   * the counters kept for its return (made now if nothing counted there as it left), as the
   * router counts it there. The work is counted on the counters looked up and checked before it
   * is published (see {@link #countsFor}): counters dropped meanwhile, idle (the endpoint left,
   * or a sweep dropped the kept ones just made), get the count taken off, and it is made again
   * on the endpoint's counters as they are now; counted on, they are not dropped while it runs.
   */
  private void moveWork(InferenceRequest request, Pending p, String toId) {
    while (true) {
      Load found = loadOf(toId);
      Load target = found != null ? found : keptFor(toId);
      afterLookup();
      if (p.load == target) {
        return;
      }
      Pending moved = new Pending(target, Math.max(p.prefill, request.estimatedPromptTokens()),
          p.decode, p.startNanos, p.prefillElsewhere);
      moved.addHere(1);
      if (!countsFor(toId, target)) {
        moved.addHere(-1); // on counters nobody reads: counted again on the endpoint's
        continue;
      }
      if (pending.replace(request, p, moved)) {
        p.releaseHere();
      } else {
        moved.addHere(-1); // released meanwhile
      }
      return;
    }
  }

  /**
   * Moves {@code session}'s home from {@code fromId} (in the pool or kept after it left) to
   * {@code toId} when it is there and {@code toId} is in the pool; a session is not placed on an
   * endpoint away, it stays where it was. The move is checked after it is made, as a route's
   * record is: when {@code toId}'s counters were dropped meanwhile, idle, the session goes back
   * and the move is made again against the counters as they are now.
   */
  private void moveHome(String session, String fromId, String toId) {
    while (true) {
      Load source = loadOf(fromId); // the endpoint that failed may have left the pool
      Load target = loads.get(toId);
      if (source == null || target == null || source == target) {
        return;
      }
      afterLookup();
      boolean[] moved = new boolean[1];
      homes.computeIfPresent(session, (k, old) -> {
        if (old.load != source) {
          return old;
        }
        source.addSessions(-1);
        target.addSessions(1);
        moved[0] = true;
        return new Home(target, toId, old.lastNanos);
      });
      if (!moved[0] || countsFor(toId, target)) {
        return;
      }
      homes.computeIfPresent(session, (k, h) -> {
        if (h.load != target) {
          return h;
        }
        target.addSessions(-1);
        source.addSessions(1);
        return new Home(source, fromId, h.lastNanos);
      });
      // the source's counters may have been dropped as the session left them: then it has none
      forgetIfLeft(fromId, source, null, session);
    }
  }

  /**
   * The gateway says the request is still served (a websocket session): its share of the
   * counters counts its maximum age from now, and its session's home stays remembered.
   */
  @Override
  public void onActivity(InferenceRequest request, Endpoint endpoint) {
    Pending p = pending.get(request);
    if (p == null) {
      return;
    }
    long now = ticker.nanos();
    p.startNanos = now;
    String session = sessionOf(request);
    if (session != null) {
      Home h = homes.get(session);
      if (h != null && h.load == p.load) {
        h.lastNanos = now;
      }
    }
  }

  @Override
  public void onFirstToken(InferenceRequest request, Endpoint endpoint) {
    Pending p = pending.get(request);
    if (p != null) {
      p.prefillDone();
    }
  }

  @Override
  public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
    release(request);
  }

  @Override
  public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
    release(request);
  }

  private void release(InferenceRequest request) {
    Pending p = pending.remove(request);
    if (p != null) {
      p.release();
    }
  }

  /** Drops requests the gateway never finished, at most once per eighth of the maximum age. */
  private void sweepIfDue(long now) {
    long due = nextSweep.get();
    if (due != Long.MIN_VALUE && now - due < 0) {
      return;
    }
    if (!nextSweep.compareAndSet(due, now + pendingMaxAgeNanos / 8) || due == Long.MIN_VALUE) {
      return;
    }
    for (var it = pending.entrySet().iterator(); it.hasNext(); ) {
      var e = it.next();
      if (now - e.getValue().startNanos > pendingMaxAgeNanos && pending.remove(e.getKey(),
          e.getValue())) {
        e.getValue().release();
      }
    }
    for (Load l : departed.values()) {
      settle(l);
    }
  }

  /** Forgets sessions idle longer than the TTL, at most once per eighth of it. */
  private void sweepSessionsIfDue(long now) {
    long due = nextSessionSweep.get();
    if (due != Long.MIN_VALUE && now - due < 0) {
      return;
    }
    if (!nextSessionSweep.compareAndSet(due, now + sessionTtlNanos / 8)) {
      return;
    }
    for (var it = homes.entrySet().iterator(); it.hasNext(); ) {
      var e = it.next();
      Home h = e.getValue();
      if (now - h.lastNanos > sessionTtlNanos && homes.remove(e.getKey(), h)) {
        h.load.addSessions(-1);
      }
    }
  }

  /**
   * Keeps the remembered sessions within {@code maxSessions}: once past it, one thread forgets
   * the least recently seen until an eighth of the bound is free again, so the pass (a walk over
   * the map) runs once per {@code maxSessions / 8} new sessions, not at each. The age that
   * separates the oldest is read off a sorted sample of at most 1,024 entries.
   */
  private void trimSessionsIfFull() {
    // a session added while another thread trims is seen by that thread's check after its pass
    while (homes.size() > maxSessions && trimming.compareAndSet(false, true)) {
      try {
        trimSessions();
      } finally {
        trimming.set(false);
      }
    }
  }

  private void trimSessions() {
    int target = maxSessions - maxSessions / 8;
    for (int pass = 0; pass < 3 && homes.size() > target; pass++) {
      int size = homes.size();
      int stride = Math.max(1, size / 1024);
      long[] sample = new long[Math.min(size, 1024) + 1];
      int taken = 0;
      int i = 0;
      for (Home h : homes.values()) {
        if (i++ % stride == 0 && taken < sample.length) {
          sample[taken++] = h.lastNanos;
        }
      }
      if (taken == 0) {
        return;
      }
      Arrays.sort(sample, 0, taken);
      double drop = (size - target) / (double) size;
      long cut = sample[Math.min(taken - 1, (int) Math.ceil(drop * taken))];
      for (var e : homes.entrySet()) {
        Home h = e.getValue();
        if (h.lastNanos - cut < 0 && homes.remove(e.getKey(), h)) {
          h.load.addSessions(-1);
        }
      }
    }
    // many sessions seen at one instant have one age: forget any of them down to the bound
    for (var it = homes.entrySet().iterator(); it.hasNext() && homes.size() > target; ) {
      var e = it.next();
      if (homes.remove(e.getKey(), e.getValue())) {
        e.getValue().load.addSessions(-1);
      }
    }
  }

  private void afterLookup() {
    Runnable hook = lookupHook;
    if (hook != null) {
      hook.run();
    }
  }

  /** Requests counted as pending or decoding now. */
  int pendingRequests() {
    return pending.size();
  }

  /**
   * The request's session key as the sessions are held (see {@link SessionKeys}); null for an
   * endpoint token, which every client of one endpoint carries ({@link SessionKeys#sessionKey}).
   */
  private static @Nullable String sessionOf(InferenceRequest request) {
    String key = SessionKeys.sessionKey(request);
    return key == null ? null : SessionKeys.bounded(key);
  }

  /** Characters of every session key remembered now; for tests. */
  long sessionKeyChars() {
    long n = 0;
    for (String k : homes.keySet()) {
      n += k.length();
    }
    return n;
  }

  /** Sessions remembered now. */
  int trackedSessions() {
    return homes.size();
  }

  /** The endpoint {@code session}'s last request went to, or null when it is not remembered. */
  @Nullable String homeOf(String session) {
    Home h = homes.get(SessionKeys.bounded(session));
    return h == null ? null : h.endpointId;
  }

  /** Active sessions whose last request this picker sent to {@code endpointId}. */
  int sessions(String endpointId) {
    return sessionsOf(endpointId);
  }

  /** Uncached prompt tokens this picker has sent to {@code endpointId} and not seen start. */
  long pendingTokens(String endpointId) {
    Load l = loads.get(endpointId);
    return l == null ? 0 : l.prefillTokens();
  }

  /** Output tokens ({@code max_tokens}) of the requests in flight on {@code endpointId}. */
  long decodeTokens(String endpointId) {
    Load l = loads.get(endpointId);
    return l == null ? 0 : l.decodeTokens();
  }

  @Override
  public void onEndpointAdded(Endpoint endpoint) {
    String id = endpoint.id();
    // under the departed map's lock for the id, as keptFor: counters made for a request recorded
    // while the endpoint was away are either taken up here or never made
    departed.compute(id, (k, back) -> {
      if (back == null) {
        loads.putIfAbsent(id, new Load(id));
        return null;
      }
      // back while requests sent before it left still run, or sessions are at home there: they
      // go on counting on the counters they were counted on. In the pool before it leaves the
      // departed map, so a request recorded meanwhile finds it in one of them (see forgetIfLeft)
      if (loads.putIfAbsent(id, back) == null) {
        back.away = false;
      }
      return null;
    });
  }

  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    String id = endpoint.id();
    Load[] left = new Load[1];
    // under the departed map's lock for the id, as keptFor: a request recorded meanwhile finds
    // these counters, in the pool or kept, and never makes others that this would replace
    departed.compute(id, (k, kept) -> {
      Load l = loads.remove(id);
      if (l == null) {
        return kept;
      }
      // requests sent there may still be served there, and its sessions' history may still be
      // in its cache: kept for a return, until nothing counts on it any more
      l.away = true;
      left[0] = l;
      return l;
    });
    if (left[0] != null) {
      settle(left[0]);
    }
  }

  /**
   * Drops the counters of an endpoint that left the pool once nothing counts on them. The check
   * runs under the departed map's lock for the id, as does the check of {@link #forgetIfLeft},
   * so a request or session recorded against them at the same time either is seen here or sees
   * them gone.
   */
  private void settle(Load l) {
    departed.computeIfPresent(l.id, (k, v) -> v == l && v.idle() ? null : v);
  }

  /**
   * The counters a request picked for {@code endpointId} counts on when the endpoint is neither
   * in the pool nor kept for its return: it left with nothing counted on it, between the pick
   * and the record. The gateway may still be forwarding there, and the router keeps its own
   * count of the request for the endpoint's return, so counters are kept here too, marked away:
   * a return takes them up, and they are dropped once the request ends. The counters the
   * endpoint has when it came back meanwhile, if it did.
   */
  private Load keptFor(String endpointId) {
    Load[] found = new Load[1];
    departed.compute(endpointId, (k, v) -> {
      if (v != null) {
        found[0] = v;
        return v;
      }
      Load in = loads.get(endpointId);
      if (in != null) {
        found[0] = in;
        return null;
      }
      Load kept = new Load(endpointId);
      kept.away = true;
      found[0] = kept;
      return kept;
    });
    return found[0];
  }

  /** The counters of {@code endpointId}, in the pool or kept after it left; null when neither. */
  private @Nullable Load loadOf(String endpointId) {
    Load l = loads.get(endpointId);
    return l != null ? l : departed.get(endpointId);
  }

  /** Endpoints that left the pool and whose counters are kept for their return; for tests. */
  int departedLoads() {
    return departed.size();
  }

  /**
   * One endpoint's counters, as fields of one object: a route reads all of them for every
   * candidate, and separate atomic objects would be separate cache lines.
   */
  private final class Load {
    private static final AtomicLongFieldUpdater<Load> PREFILL_TOKENS =
        AtomicLongFieldUpdater.newUpdater(Load.class, "prefillTokens");
    private static final AtomicIntegerFieldUpdater<Load> PREFILL_REQUESTS =
        AtomicIntegerFieldUpdater.newUpdater(Load.class, "prefillRequests");
    private static final AtomicLongFieldUpdater<Load> DECODE_TOKENS =
        AtomicLongFieldUpdater.newUpdater(Load.class, "decodeTokens");
    private static final AtomicIntegerFieldUpdater<Load> SESSIONS =
        AtomicIntegerFieldUpdater.newUpdater(Load.class, "sessions");
    final String id;
    /** Whether the endpoint has left the pool: then a count going down may free the counters. */
    volatile boolean away;
    private volatile long prefillTokens;
    private volatile int prefillRequests;
    private volatile long decodeTokens;
    private volatile int sessions;

    Load(String id) {
      this.id = id;
    }

    /** Whether nothing counts here: no request's work, no session. */
    boolean idle() {
      return prefillTokens == 0 && prefillRequests == 0 && decodeTokens == 0 && sessions == 0;
    }

    /** After a count went down: drops these counters once idle if the endpoint is away. */
    private void wentDown() {
      if (away) {
        settle(this);
      }
    }

    long prefillTokens() {
      return prefillTokens;
    }

    int prefillRequests() {
      return prefillRequests;
    }

    long decodeTokens() {
      return decodeTokens;
    }

    int sessions() {
      return sessions;
    }

    void addPrefill(long tokens, int requests) {
      PREFILL_TOKENS.addAndGet(this, tokens);
      PREFILL_REQUESTS.addAndGet(this, requests);
      if (tokens < 0 || requests < 0) {
        wentDown();
      }
    }

    void addDecode(long tokens) {
      DECODE_TOKENS.addAndGet(this, tokens);
      if (tokens < 0) {
        wentDown();
      }
    }

    void addSessions(int delta) {
      SESSIONS.addAndGet(this, delta);
      if (delta < 0) {
        wentDown();
      }
    }
  }

  /** Where a session's last request went, and when. */
  private static final class Home {
    final Load load;
    final String endpointId;
    volatile long lastNanos;

    Home(Load load, String endpointId, long lastNanos) {
      this.load = load;
      this.endpointId = endpointId;
      this.lastNanos = lastNanos;
    }
  }

  /** One routed request's share of its endpoint's counters. */
  private static final class Pending {
    private static final AtomicIntegerFieldUpdater<Pending> PREFILLING =
        AtomicIntegerFieldUpdater.newUpdater(Pending.class, "prefilling");
    final Load load;
    final long prefill;
    final long decode;
    /**
     * The prompt's prefill on another endpoint (P/D), given back with this one's prefill share;
     * it moves with the request on a fallback, which does not change where it was prefilled.
     */
    final @Nullable Pending prefillElsewhere;
    /** When it was routed or last renewed ({@link #onActivity}); the sweep's age counts from it. */
    volatile long startNanos;
    private volatile int prefilling = 1;

    Pending(Load load, long prefill, long decode, long startNanos,
        @Nullable Pending prefillElsewhere) {
      this.load = load;
      this.prefill = prefill;
      this.decode = decode;
      this.startNanos = startNanos;
      this.prefillElsewhere = prefillElsewhere;
    }

    void add(int sign) {
      addHere(sign);
      if (prefillElsewhere != null) {
        prefillElsewhere.addHere(sign);
      }
    }

    /** Counts this endpoint's share only, not the prefill elsewhere. */
    void addHere(int sign) {
      load.addPrefill(sign * prefill, sign);
      load.addDecode(sign * decode);
    }

    /** Gives back the prefill share once, at the first token or at the end. */
    void prefillDone() {
      if (PREFILLING.compareAndSet(this, 1, 0)) {
        load.addPrefill(-prefill, -1);
      }
      if (prefillElsewhere != null) {
        prefillElsewhere.prefillDone();
      }
    }

    void release() {
      prefillDone();
      load.addDecode(-decode);
    }

    /** Gives back this endpoint's share only: the request moves on, its prefill elsewhere not. */
    void releaseHere() {
      if (PREFILLING.compareAndSet(this, 1, 0)) {
        load.addPrefill(-prefill, -1);
      }
      load.addDecode(-decode);
    }
  }

  /** The most recent of a cycle's picks that chose {@code primary}, or null. */
  private static @Nullable Choice choiceFor(@Nullable Choice last, @Nullable Endpoint primary) {
    Choice c = last;
    while (c != null && primary != null && !primary.id().equals(c.endpointId)) {
      c = c.earlier;
    }
    return c;
  }

  /** One pick of this picker in a cycle, and the pick it made before in the same cycle. */
  private record Choice(String endpointId, long uncached, long decode, @Nullable String session,
      @Nullable Choice earlier) {}

  /** A duration in nanoseconds, saturated; the default for one that is not positive. */
  static long nanos(java.time.Duration d) {
    if (d.isNegative() || d.isZero()) {
      return PENDING_MAX_AGE_NANOS;
    }
    try {
      return d.toNanos();
    } catch (ArithmeticException tooLong) {
      return Long.MAX_VALUE;
    }
  }

  /** Provides {@code token-cost-picker}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super(TYPE);
    }

    @Override
    protected Plugin build(PluginContext context, Parameters p) {
      double queue = p.getDouble("queueWeight", DEFAULT_QUEUE_WEIGHT);
      if (!(queue >= 0 && Double.isFinite(queue))) {
        p.error("queueWeight", "must be a finite number >= 0, got " + queue);
      }
      double decode = p.getDouble("decodeWeight", DEFAULT_DECODE_WEIGHT);
      if (!(decode >= 0 && Double.isFinite(decode))) {
        p.error("decodeWeight", "must be a finite number >= 0, got " + decode);
      }
      double capacity = p.getDouble("capacityWeight", DEFAULT_CAPACITY_WEIGHT);
      if (!(capacity >= 0 && Double.isFinite(capacity))) {
        p.error("capacityWeight", "must be a finite number >= 0, got " + capacity);
      }
      double bf = p.getDouble("balanceFactor", DEFAULT_BALANCE_FACTOR);
      if (bf != 0 && !(bf >= 1.0 && bf <= 1000.0)) {
        p.error("balanceFactor", "must be 0 (off) or in [1, 1000], got " + bf);
      }
      double sbf = p.getDouble("sessionBalanceFactor", DEFAULT_SESSION_BALANCE_FACTOR);
      if (sbf != 0 && !(sbf >= 1.0 && sbf <= 1000.0)) {
        p.error("sessionBalanceFactor", "must be 0 (off) or in [1, 1000], got " + sbf);
      }
      double ttl = p.getDouble("sessionTtlSeconds", DEFAULT_SESSION_TTL_SECONDS);
      if (!(ttl > 0 && ttl <= 86_400)) {
        p.error("sessionTtlSeconds", "must be in (0, 86400], got " + ttl);
      }
      double kvUsage = p.getDouble("kvUsageWeight", DEFAULT_KV_USAGE_WEIGHT);
      if (!(kvUsage >= 0 && Double.isFinite(kvUsage))) {
        p.error("kvUsageWeight", "must be a finite number >= 0, got " + kvUsage);
      }
      long maxSessions = p.getLong("maxSessions", DEFAULT_MAX_SESSIONS);
      if (maxSessions < 1 || maxSessions > Integer.MAX_VALUE) {
        p.error("maxSessions", "must be in [1, " + Integer.MAX_VALUE + "], got " + maxSessions);
        maxSessions = DEFAULT_MAX_SESSIONS;
      }
      Staleness staleness = Staleness.from(p);
      TokenCostPicker picker = new TokenCostPicker(queue, decode, capacity, bf, sbf, ttl,
          kvUsage, (int) maxSessions);
      picker.staleness = staleness;
      picker.hints = context.service(RouterHints.class).orElse(null);
      picker.ticker = context.ticker();
      picker.pendingMaxAgeNanos = nanos(context.inFlightMaxAge());
      return picker;
    }
  }
}
