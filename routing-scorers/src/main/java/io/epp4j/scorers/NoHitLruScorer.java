package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
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
import io.epp4j.api.Scorer;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * {@code no-hit-lru-scorer} (llm-d): spreads requests whose prompt is cached nowhere (a "cold"
 * request, judged from the {@link PrefixHits} published by an earlier prefix-cache scorer of the
 * cycle: approximate, precise or hybrid) over the endpoints that least recently received a cold request:
 * {@code 1 − rank / (N − 1)}, rank 0 for the least recently used; endpoints that never received
 * one share rank 0. Requests with a hit somewhere score a neutral 0.5 everywhere (no influence).
 * Without prefix hits in the cycle every request counts as cold.
 *
 * <p>Stamps exist only for endpoints in the pool: created when the pool announces an endpoint,
 * dropped when it leaves, never created by routing, so a route that outlives its endpoint's
 * removal leaves nothing behind.
 */
final class NoHitLruScorer implements Scorer, RequestListener, PoolListener {
  private final AtomicLong clock = new AtomicLong();
  /**
   * Upstream's {@code lruSize}: how many endpoints the LRU remembers. An endpoint that more than
   * this many others received a cold request after is forgotten, so it ranks as never used.
   */
  private final int lruSize;

  /** Upstream's default {@code lruSize}. */
  static final int DEFAULT_LRU_SIZE = 1024;

  NoHitLruScorer() {
    this(DEFAULT_LRU_SIZE);
  }

  NoHitLruScorer(int lruSize) {
    this.lruSize = lruSize;
  }
  private final ConcurrentHashMap<String, AtomicLong> lastColdUse = new ConcurrentHashMap<>();
  /**
   * Tests only: runs between a route's tick of the clock and its write of the stamp, the gap in
   * which another thread's route can stamp.
   */
  @org.jspecify.annotations.Nullable Runnable stampHook;

  static boolean isCold(CycleState state) {
    PrefixHits hits = state.get(PrefixHits.KEY);
    return hits == null || !hits.anyHit();
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    if (!isCold(state)) {
      for (int i = 0; i < n; i++) {
        scores[i] = 0.5;
      }
      return;
    }
    if (n == 1) {
      scores[0] = 1.0;
      return;
    }
    long[] stamps = new long[n];
    for (int i = 0; i < n; i++) {
      AtomicLong s = lastColdUse.get(candidates.get(i).id());
      stamps[i] = s == null ? 0 : s.get();
    }
    if (lastColdUse.size() > lruSize) {
      forgetBeyondLruSize(stamps);
    }
    for (int i = 0; i < n; i++) {
      int rank = 0;
      for (int j = 0; j < n; j++) {
        if (stamps[j] < stamps[i]) {
          rank++;
        }
      }
      scores[i] = 1.0 - (double) rank / (n - 1);
    }
  }

  /**
   * Zeroes the stamps of candidates that the bounded LRU would have evicted: those with at least
   * {@code lruSize} more recent stamps among all tracked endpoints. Runs only when the pool is
   * larger than {@code lruSize}.
   */
  private void forgetBeyondLruSize(long[] stamps) {
    long[] all = new long[lastColdUse.size()];
    int m = 0;
    for (AtomicLong s : lastColdUse.values()) {
      if (m < all.length) {
        all[m++] = s.get();
      }
    }
    java.util.Arrays.sort(all, 0, m);
    // the lruSize-th most recent stamp is the oldest one the LRU still holds
    long oldestKept = m >= lruSize ? all[m - lruSize] : 0;
    for (int i = 0; i < stamps.length; i++) {
      if (stamps[i] < oldestKept) {
        stamps[i] = 0;
      }
    }
  }

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    if (isCold(state)) {
      // as upstream: the primary (decode) pick first, then the prefill pick of a P/D decision,
      // which is therefore the more recent of the two
      stamp(decision.primary().id());
      Endpoint prefill = decision.secondaryEndpoint(PdProfileHandler.PREFILL_PROFILE);
      if (prefill != null) {
        stamp(prefill.id());
      }
    }
  }

  private void stamp(String id) {
    AtomicLong stamp = lastColdUse.get(id);
    if (stamp != null) {
      long now = clock.incrementAndGet();
      Runnable hook = stampHook;
      if (hook != null) {
        hook.run();
      }
      // never back: a route that took its tick before another route to the same endpoint, and
      // writes after it, would otherwise set the endpoint's use to before those in between
      stamp.accumulateAndGet(now, Math::max);
    }
  }

  @Override
  public void onEndpointAdded(Endpoint endpoint) {
    lastColdUse.putIfAbsent(endpoint.id(), new AtomicLong());
  }

  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    lastColdUse.remove(endpoint.id());
  }

  /** Number of endpoints with a stamp; for tests. */
  int trackedEndpoints() {
    return lastColdUse.size();
  }

  @Override
  public String toString() {
    return "no-hit-lru-scorer";
  }

  /**
   * {@code lruSize}, default 1024, as upstream reads it: 0 or below means the default (with a
   * notice here), and there is no upper bound. The remembered endpoints are never more than the
   * endpoints the scorer has seen, whatever the size, so a large one costs nothing; one beyond a
   * 32-bit integer is read as the largest, which remembers the same endpoints.
   */
  static int lruSize(Parameters p) {
    long v = p.getLong("lruSize", DEFAULT_LRU_SIZE);
    if (v < 1) {
      p.notice("lruSize", "is " + v + ": as upstream, a value below 1 means the default, "
          + DEFAULT_LRU_SIZE + " endpoints");
      return DEFAULT_LRU_SIZE;
    }
    return (int) Math.min(v, Integer.MAX_VALUE);
  }

  /** Provides {@code no-hit-lru-scorer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("no-hit-lru-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      for (String prefix : new String[] {"prefixPluginName", "prefixPluginType",
          "prefixMatchInfoProducerName"}) {
        if (p.has(prefix)) {
          p.notice(prefix, "has no effect: a request is cold when no endpoint has a hit in the"
              + " prefix hits of whichever prefix-cache scorer ran before this one");
        }
      }
      return new NoHitLruScorer(lruSize(p));
    }
  }
}
