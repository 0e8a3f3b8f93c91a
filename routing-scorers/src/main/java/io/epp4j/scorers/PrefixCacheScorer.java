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
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PoolListener;
import io.epp4j.api.PoolOrder;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.PrefixHitsProducer;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import io.epp4j.api.Ticker;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.jspecify.annotations.Nullable;

/**
 * {@code prefix-cache-scorer}: approximate prefix-cache affinity. Remembers which prompt prefixes
 * were sent to which endpoint and scores each candidate by the fraction of the request's prompt
 * blocks it is believed to hold ({@code matched / total}; 0 when the prompt has no full block).
 *
 * <p>Differences from the upstream plugin: matching is a strict prefix per endpoint; each endpoint
 * has an exact LRU at block granularity whose eviction takes the tail of a chain before its head
 * (as vLLM frees blocks); lookups refresh recency of the blocks they match; the capacity follows
 * the endpoint's {@code num_gpu_blocks} when known. The match is published as
 * {@link PrefixHits} (matched and total blocks per candidate); after routing, the primary endpoint and the pick of a profile named
 * {@code prefill} are recorded as holding the prompt.
 *
 * <p>State exists only for endpoints in the pool: a block store is created when the pool
 * announces an endpoint ({@link #onEndpointAdded}) and leaves the index when it leaves. Scoring
 * and recording never create one, so a route that read the pool before an endpoint's removal and
 * records after it records nothing instead of bringing the endpoint back for good; replaced
 * pods, which return under new addresses, would otherwise accumulate. The store of an endpoint
 * that left is kept aside for {@link #KEEP_DEPARTED_SECONDS} seconds, for an endpoint that comes
 * back at the same address (a readiness probe that failed under load: its engine still holds
 * the cache), and never more of them than the pool has held endpoints at once. An endpoint scores 0 and is not recorded until it has been announced (the router
 * announces it right after adding it); used outside a router, announce the endpoints yourself.
 *
 * <p>Memory: 24–32 bytes per (block, endpoint) entry, at most the endpoint's capacity entries per
 * endpoint, plus a filter of 1–64 KiB per endpoint and 4 KiB per endpoint in the pool's
 * directory of first blocks ({@link HeadDirectory}). Thread-safe; a lookup takes one short lock on
 * each endpoint that may hold the prompt's first block and none on the others, never a global
 * one. Given the whole pool in the router's order ({@link PoolOrder}), it reads only those
 * endpoints, found in one row of the directory. A cycle hashes the prompt once for every prefix
 * scorer with the same block settings.
 */
public final class PrefixCacheScorer implements PrefixHitsProducer, RequestListener, PoolListener,
    HintListener {
  /** Default tokens per block (vLLM's default block size). */
  public static final int DEFAULT_BLOCK_SIZE_TOKENS = 16;
  /** Largest tokens per block. */
  static final int MAX_BLOCK_SIZE_TOKENS = 1 << 20;
  /** Default blocks considered per request: 8192 × 16 = 131,072 tokens. */
  public static final int DEFAULT_MAX_PREFIX_BLOCKS = 8192;
  /** Default per-endpoint capacity in blocks when {@code num_gpu_blocks} is unknown. */
  public static final int DEFAULT_LRU_CAPACITY_PER_SERVER = 31_250;
  /**
   * The least (and default) block size of an {@code approx-prefix-cache-producer}, as upstream's:
   * one index entry per block and endpoint, so smaller blocks cost memory.
   */
  static final int PRODUCER_MIN_BLOCK_SIZE_TOKENS = 64;
  /**
   * How long the store of an endpoint that left the pool is kept for its return. A readiness
   * flap (Kubernetes marks a pod unready after three failed probes ten seconds apart, and ready
   * again after one success) keeps an engine's cache; an engine that restarted comes back with
   * an empty one after loading its weights, which takes longer.
   */
  static final long KEEP_DEPARTED_SECONDS = 60;
  private static final long KEEP_DEPARTED_NANOS = TimeUnit.SECONDS.toNanos(KEEP_DEPARTED_SECONDS);

  private final BlockHasher hasher;
  private final int blockSizeTokens;
  private final int defaultCapacity;
  private final boolean autoTune;
  private final boolean refreshOnLookup;
  /** Built as {@code approx-prefix-cache-producer}: a file's prefix-cache-scorer may read it. */
  private final boolean producer;
  private final ConcurrentHashMap<String, EndpointBlocks> endpoints = new ConcurrentHashMap<>();
  private final Ticker ticker;
  /**
   * Stores of endpoints that left the pool, kept for their return, earliest departure first; at
   * most {@link #peakEndpoints} of them, each for {@link #KEEP_DEPARTED_NANOS}. Guarded by
   * itself.
   */
  private final LinkedHashMap<String, Departed> departed = new LinkedHashMap<>();
  /** The most endpoints the pool has held at once; guarded by {@link #departed}. */
  private int peakEndpoints;
  /** When the earliest kept store expires, or {@link Long#MAX_VALUE} when none is kept. */
  private volatile long departedExpiry = Long.MAX_VALUE;
  /** Bumped on every pool change; a {@link Slots} built under another epoch is not used. */
  private final AtomicLong epoch = new AtomicLong();
  private volatile Slots slots = Slots.EMPTY;
  private final Object slotsLock = new Object();
  private static final ThreadLocal<int[]> FOUND = ThreadLocal.withInitial(() -> new int[0]);
  // per instance, so two prefix scorers with different block sizes never share hashes
  private final AttributeKey<Lookup> lookupKey = AttributeKey.of("prefix-cache-lookup", Lookup.class);

  private PrefixCacheScorer(Builder b) {
    this.blockSizeTokens = b.blockSizeTokens;
    this.defaultCapacity = b.lruCapacityPerServer;
    this.autoTune = b.autoTune;
    this.refreshOnLookup = b.refreshOnLookup;
    this.producer = b.producer;
    this.ticker = b.ticker;
    this.hasher = new BlockHasher(b.blockSizeTokens, b.maxPrefixBlocksToMatch);
  }

  /** A scorer with the defaults (16-token blocks, 8192 blocks, 31,250 blocks per endpoint). */
  public static PrefixCacheScorer create() {
    return builder().build();
  }

  public static Builder builder() {
    return new Builder();
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    if (n == 0) {
      return;
    }
    Lookup lookup = lookup(request, state);
    long[] hashes = lookup.shared.hashes();
    int total = lookup.shared.size;
    Slots sl = slots;
    if (sl.epoch != epoch.get()) {
      sl = Slots.EMPTY;
    }
    Object order = candidates instanceof PoolOrder po ? po.poolOrder() : null;
    HeadDirectory dir = sl.directory;
    PrefixMatch match;
    if (total > 0 && order != null && order == sl.order && dir != null
        && n == sl.endpoints.length) {
      // the pool in the order the slots were built for: only the endpoints whose column of the
      // directory counts the prompt's first block are read
      int[] found = FOUND.get();
      if (found.length < n) {
        found = new int[n];
        FOUND.set(found);
      }
      int foundCount = scoreByDirectory(dir, sl, candidates, hashes, total, scores, n, found);
      lookup.slots = sl;
      lookup.candidates = candidates;
      // only the positions the directory named can have scored
      match = PrefixMatch.fromFound(total, blockSizeTokens, candidates, scores, found, foundCount);
    } else {
      scoreByPosition(sl, candidates, hashes, total, scores, n, order);
      // the counts are read back from the scores: no array per candidate while scoring
      match = PrefixMatch.fromScores(total, blockSizeTokens, candidates, scores);
    }
    lookup.match = match;
    lookup.touched = refreshOnLookup;
    PrefixHits.publish(state, match);
  }

  /** Scores the endpoints the directory names; returns how many it named, in {@code found}. */
  private int scoreByDirectory(HeadDirectory dir, Slots sl, List<Candidate> candidates,
      long[] hashes, int total, double[] scores, int n, int[] found) {
    Arrays.fill(scores, 0, n, 0.0);
    int k = dir.mayHold(hashes[0], found);
    for (int j = 0; j < k; j++) {
      int i = found[j];
      EndpointBlocks blocks = sl.blocks[i];
      if (blocks == null) {
        continue;
      }
      EndpointMetrics m = candidates.get(i).metrics();
      if (sl.metrics[i] != m) {
        tune(blocks, m);
        sl.metrics[i] = m;
      }
      int matched = refreshOnLookup ? blocks.matchAndTouch(hashes, total)
          : blocks.match(hashes, total);
      scores[i] = (double) matched / total;
    }
    return k;
  }

  private void scoreByPosition(Slots sl, List<Candidate> candidates, long[] hashes, int total,
      double[] scores, int n, @Nullable Object order) {
    int misses = 0;
    for (int i = 0; i < n; i++) {
      Candidate c = candidates.get(i);
      EndpointBlocks blocks;
      if (i < sl.endpoints.length && sl.endpoints[i] == c.endpoint()) {
        blocks = sl.blocks[i];
        EndpointMetrics m = c.metrics();
        if (sl.metrics[i] != m) {
          tune(blocks, m);
          sl.metrics[i] = m;
        }
      } else {
        blocks = blocksFor(c);
        if (i >= sl.endpoints.length || sl.endpoints[i] != null) {
          misses++; // an empty slot had no store to find: not a sign that the pool changed
        }
      }
      if (total > 0 && blocks != null) {
        int m = refreshOnLookup ? blocks.matchAndTouch(hashes, total) : blocks.match(hashes, total);
        scores[i] = (double) m / total;
      } else {
        scores[i] = 0;
      }
    }
    if ((misses > n / 2 || (order != null && order != sl.order)) && n == endpoints.size()) {
      // the whole pool, in an order the cached slots do not match: the pool changed (or this is
      // the first route), so the next routes find their stores by position. A filtered list
      // keeps taking the map, which allocates nothing.
      rebuildSlots(candidates, order);
    }
  }

  /**
   * Builds the slots of {@code candidates} and, for a list in the pool's order, a directory of
   * their first blocks that every store then counts in. One build at a time: the last build
   * attaches every store to the directory it publishes, so no store keeps counting in a
   * directory nobody reads.
   */
  private void rebuildSlots(List<Candidate> candidates, @Nullable Object order) {
    synchronized (slotsLock) {
      long e = epoch.get();
      Slots current = slots;
      if (current.epoch == e && order != null && current.order == order) {
        return; // another route built them meanwhile
      }
      slots = Slots.of(candidates, endpoints, e, order);
    }
  }

  private Lookup lookup(InferenceRequest request, CycleState state) {
    Lookup l = state.get(lookupKey);
    if (l == null) {
      l = new Lookup(hasher.hash(request, state), blockSizeTokens);
      state.put(lookupKey, l);
      publishBlocks(state, l);
    }
    return l;
  }

  /**
   * One cycle's hashes and, once scored, what each candidate matched. After routing, an endpoint
   * whose match the lookup already touched needs only the rest of the chain recorded. Readable
   * until the cycle ends (the hashes are in an array the thread reuses).
   */
  private static final class Lookup implements PrefixBlocks {
    final BlockHasher.Shared shared;
    final int blockSizeTokens;
    @Nullable PrefixMatch match;
    boolean touched;
    /** Set when the directory scored: candidates whose metrics the scoring did not read. */
    @Nullable Slots slots;
    @Nullable List<Candidate> candidates;

    Lookup(BlockHasher.Shared shared, int blockSizeTokens) {
      this.shared = shared;
      this.blockSizeTokens = blockSizeTokens;
    }

    @Override
    public int blockSizeTokens() {
      return blockSizeTokens;
    }

    @Override
    public int size() {
      return shared.size;
    }

    @Override
    public long hash(int i) {
      long[] a = shared.hashes();
      java.util.Objects.checkIndex(i, shared.size);
      return a[i];
    }

    @Override
    public long[] toArray() {
      return Arrays.copyOf(shared.hashes(), shared.size);
    }

    /** The hashes live in an array the thread reuses after the cycle: a copy. */
    @Override
    public PrefixBlocks retained() {
      return PrefixBlocks.of(blockSizeTokens, toArray());
    }

    /** Blocks already present and refreshed on {@code endpointId} by this cycle's lookup. */
    int touchedPrefix(String endpointId) {
      PrefixMatch m = match;
      if (!touched || m == null) {
        return 0;
      }
      int i = m.indexOf(endpointId);
      return i < 0 ? 0 : m.matchedAt(i);
    }
  }

  private @Nullable EndpointBlocks blocksFor(Candidate c) {
    EndpointBlocks b = endpoints.get(c.id());
    tune(b, c.metrics());
    return b;
  }

  /**
   * The directory reads the metrics of the candidates that may hold the prompt only; the store a
   * route records into follows its endpoint's metrics before it grows.
   */
  private void tuneUnscored(EndpointBlocks b, String endpointId, Lookup lookup) {
    Slots sl = lookup.slots;
    List<Candidate> candidates = lookup.candidates;
    if (sl == null || candidates == null) {
      return;
    }
    int at = candidates instanceof PoolOrder po ? po.positionOf(endpointId) : -1;
    if (at >= 0 && at < sl.blocks.length && sl.blocks[at] == b) {
      EndpointMetrics m = candidates.get(at).metrics();
      if (sl.metrics[at] != m) {
        tune(b, m);
        sl.metrics[at] = m;
      }
    }
  }

  /** The capacity follows the endpoint's {@code num_gpu_blocks} when known. */
  private void tune(@Nullable EndpointBlocks b, EndpointMetrics m) {
    if (b != null && autoTune && m.kvCapacityBlocks() > 0) {
      int cap = capacityOf(m);
      if (b.capacity() != cap) {
        b.setCapacity(cap);
      }
    }
  }

  /**
   * The block stores of one candidate list by position, so that a route over the same pool finds
   * each candidate's store with an identity check instead of a map lookup (with 256 endpoints the
   * lookups were about a quarter of a 1 KB route). A slot is used only while the candidate at
   * that position is the same {@link Endpoint} object and the epoch has not moved; anything else
   * (a filtered list, a changed pool) takes the map. The metrics last seen per slot decide when
   * the capacity has to be tuned again; racing writes there only cause an extra check.
   */
  private static final class Slots {
    static final Slots EMPTY = new Slots(new Endpoint[0], new EndpointBlocks[0], -1, null);

    /** Null where the candidate had no store. */
    final @Nullable Endpoint[] endpoints;
    final @Nullable EndpointBlocks[] blocks;
    final @Nullable EndpointMetrics[] metrics;
    final long epoch;
    /** The {@link PoolOrder} token of the list the slots were built from, if it had one. */
    final @Nullable Object order;
    /** The stores' first blocks by position; built with the slots of a list with an order. */
    final @Nullable HeadDirectory directory;

    private Slots(@Nullable Endpoint[] endpoints, @Nullable EndpointBlocks[] blocks, long epoch,
        @Nullable Object order) {
      int n = endpoints.length;
      this.endpoints = endpoints;
      this.blocks = blocks;
      this.metrics = new EndpointMetrics[n];
      this.epoch = epoch;
      this.order = order;
      HeadDirectory d = null;
      if (order != null) {
        d = new HeadDirectory(n, HeadDirectory.DEFAULT_SLOTS);
        for (int i = 0; i < n; i++) {
          EndpointBlocks b = blocks[i];
          if (b != null) {
            b.attach(d, i);
          }
        }
      }
      this.directory = d;
    }

    /**
     * Built from the map under {@code epoch}, read before the lookups: a pool change during the
     * build bumps the epoch, so a store looked up before a removal is never used afterwards.
     */
    static Slots of(List<Candidate> candidates, ConcurrentHashMap<String, EndpointBlocks> map,
        long epoch, @Nullable Object order) {
      int n = candidates.size();
      Endpoint[] eps = new Endpoint[n];
      EndpointBlocks[] blocks = new EndpointBlocks[n];
      for (int i = 0; i < n; i++) {
        Endpoint e = candidates.get(i).endpoint();
        EndpointBlocks b = map.get(e.id());
        // a candidate without a store (a list read before its endpoint left) gets no slot: the
        // slots keep nothing of an endpoint that is gone, and it scores 0 through the map anyway
        eps[i] = b == null ? null : e;
        blocks[i] = b;
      }
      return new Slots(eps, blocks, epoch, order);
    }
  }

  int capacityOf(EndpointMetrics m) {
    long blocks = m.kvCapacityBlocks();
    if (!autoTune || blocks <= 0) {
      return defaultCapacity;
    }
    int serverBlock = m.blockSizeTokens() > 0 ? m.blockSizeTokens() : blockSizeTokens;
    // a bogus num_gpu_blocks can make the product wrap; such a server gets the largest store,
    // not whatever the wrapped value gives (it was 1 block)
    long product = blocks * serverBlock;
    long ours = Math.multiplyHigh(blocks, serverBlock) != 0 || product < 0 ? Long.MAX_VALUE
        : product / blockSizeTokens;
    return (int) Math.max(1, Math.min(EndpointBlocks.MAX_ENTRIES, ours));
  }

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    expireDepartedIfDue();
    Lookup lookup = lookup(request, state);
    if (lookup.shared.size == 0) {
      return;
    }
    Endpoint primary = decision.primary();
    record(primary.id(), lookup);
    Endpoint prefill = PdProfileHandler.prefillEndpoint(decision);
    if (prefill != null && !prefill.id().equals(primary.id())) {
      record(prefill.id(), lookup);
    }
  }

  /**
   * The gateway forwards the request to {@code to}, a fallback: {@code to} will hold the
   * prompt's blocks, so they are recorded there (hashed again: the cycle's hashes are gone).
   * The blocks recorded for {@code from} stay until its LRU evicts them or it leaves the pool;
   * which of them it held before this request is not known.
   */
  @Override
  public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
    EndpointBlocks b = endpoints.get(to.id());
    if (b == null) {
      return;
    }
    hasher.withHashes(request, (hashes, n) -> {
      if (n > 0) {
        b.record(hashes, n);
      }
    });
  }

  private void record(String endpointId, Lookup lookup) {
    EndpointBlocks b = endpoints.get(endpointId);
    if (b != null) {
      tuneUnscored(b, endpointId, lookup);
      b.recordAfterMatch(lookup.shared.hashes(), lookup.shared.size,
          lookup.touchedPrefix(endpointId));
    }
  }

  /** The first prefix scorer of a cycle tells the other plugins which blocks it hashed. */
  private static void publishBlocks(CycleState state, Lookup l) {
    if (state.get(PrefixBlocks.KEY) == null) {
      state.put(PrefixBlocks.KEY, l);
    }
  }

  /**
   * Another router sent a prompt with these hashes to {@code endpointId}: recorded as if this
   * router had sent it, when the block sizes agree and the endpoint is in the pool.
   */
  @Override
  public void onRemotePrefix(String endpointId, PrefixBlocks blocks) {
    if (blocks.blockSizeTokens() != blockSizeTokens || blocks.size() == 0) {
      return;
    }
    EndpointBlocks b = endpoints.get(endpointId);
    if (b != null) {
      long[] hashes = blocks.toArray();
      b.record(hashes, hashes.length);
    }
  }

  /** Records that {@code endpointId}, if in the pool, now holds the given chain; for tests. */
  void record(String endpointId, long[] hashes) {
    EndpointBlocks b = endpoints.get(endpointId);
    if (b != null) {
      b.record(hashes, hashes.length);
    }
  }

  /**
   * Gives the endpoint a store: the one it left with when it comes back within
   * {@link #KEEP_DEPARTED_SECONDS} (its engine likely still holds those blocks), else a new one.
   */
  @Override
  public void onEndpointAdded(Endpoint endpoint) {
    String id = endpoint.id();
    EndpointBlocks back = null;
    synchronized (departed) {
      long now = ticker.nanos();
      Departed d = departed.remove(id);
      if (d != null && now - d.leftNanos <= KEEP_DEPARTED_NANOS) {
        back = d.blocks;
      }
      dropExpiredDeparted(now);
    }
    EndpointBlocks kept = back;
    // keeps the store of an endpoint announced twice; the capacity follows its metrics once
    // it is scored
    endpoints.computeIfAbsent(id, k -> kept != null ? kept : new EndpointBlocks(defaultCapacity));
    synchronized (departed) {
      peakEndpoints = Math.max(peakEndpoints, endpoints.size());
    }
    epoch.incrementAndGet();
    dropSlots();
  }

  /**
   * Forgets what the endpoint was believed to hold: its engine fell asleep, which discards the KV
   * cache, so it wakes up with none of the prefixes routed to it before. It keeps its place in the
   * pool with an empty store of the same capacity.
   */
  @Override
  public void onEndpointCacheDropped(Endpoint endpoint) {
    EndpointBlocks emptied = endpoints.computeIfPresent(endpoint.id(),
        (id, b) -> new EndpointBlocks(b.capacity()));
    if (emptied != null) {
      epoch.incrementAndGet();
      dropSlots();
    }
  }

  /**
   * Takes the endpoint's store out of the index and keeps it aside for a return, dropping the
   * stores kept longest when more are kept than the pool has held endpoints at once.
   */
  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    String id = endpoint.id();
    EndpointBlocks b = endpoints.remove(id);
    epoch.incrementAndGet();
    dropSlots();
    if (b == null) {
      return;
    }
    synchronized (departed) {
      long now = ticker.nanos();
      departed.remove(id);
      departed.put(id, new Departed(b, now));
      dropExpiredDeparted(now);
      for (Iterator<Departed> it = departed.values().iterator();
          it.hasNext() && departed.size() > Math.max(1, peakEndpoints); ) {
        it.next();
        it.remove();
      }
      departedExpiry = nextExpiry();
    }
  }

  /** A store kept for its endpoint's return, and when the endpoint left. */
  private record Departed(EndpointBlocks blocks, long leftNanos) {}

  /** Drops the kept stores older than the grace period; under {@link #departed}. */
  private void dropExpiredDeparted(long now) {
    for (Iterator<Departed> it = departed.values().iterator(); it.hasNext(); ) {
      if (now - it.next().leftNanos <= KEEP_DEPARTED_NANOS) {
        break; // earliest departure first: the rest are younger
      }
      it.remove();
    }
    departedExpiry = nextExpiry();
  }

  private long nextExpiry() {
    Iterator<Departed> it = departed.values().iterator();
    return it.hasNext() ? it.next().leftNanos + KEEP_DEPARTED_NANOS : Long.MAX_VALUE;
  }

  /**
   * Lets go of kept stores whose grace period is over, so they do not wait for the next pool
   * change; one volatile read when none is due.
   */
  private void expireDepartedIfDue() {
    long due = departedExpiry;
    if (due != Long.MAX_VALUE && ticker.nanos() - due > 0) {
      synchronized (departed) {
        dropExpiredDeparted(ticker.nanos());
      }
    }
  }

  /** Stores kept for the return of endpoints that left; for tests. */
  int departedStores() {
    synchronized (departed) {
      return departed.size();
    }
  }

  /**
   * Lets go of the slots once the pool has changed. The epoch already keeps routes from reading
   * them, but they still reference the stores, endpoints and metrics of the pool they were built
   * for, and only a route over the whole pool replaced them: where every route is over a
   * filtered list (prefill and decode profiles), a departed endpoint's store (up to about 1 MB)
   * stayed reachable for good. The stores stop counting in the dropped directory, which nobody
   * reads again. Called after the epoch moved, under the lock builds take, so no build publishes
   * slots of the old pool afterwards.
   */
  private void dropSlots() {
    synchronized (slotsLock) {
      Slots current = slots;
      if (current == Slots.EMPTY) {
        return;
      }
      slots = Slots.EMPTY;
      HeadDirectory d = current.directory;
      if (d != null) {
        for (EndpointBlocks b : current.blocks) {
          if (b != null) {
            b.detach(d);
          }
        }
      }
    }
  }

  /** Whether this cycle's scoring read the directory of first blocks; for tests. */
  boolean scoredByDirectory(CycleState state) {
    Lookup l = state.get(lookupKey);
    return l != null && l.slots != null;
  }

  /** The block store of an endpoint, or {@code null}; for tests. */
  @Nullable EndpointBlocks blocks(String endpointId) {
    return endpoints.get(endpointId);
  }

  /** The hashes this scorer computes for a request; for tests and benchmarks. */
  long[] blockHashes(InferenceRequest request) {
    return hasher.hash(request);
  }

  /** Number of endpoints with state. */
  int trackedEndpoints() {
    return endpoints.size();
  }

  /**
   * Every block store this scorer references, by the map, the table or kept for a return; for
   * tests.
   */
  Set<EndpointBlocks> heldStores() {
    Set<EndpointBlocks> held = Collections.newSetFromMap(new IdentityHashMap<>());
    held.addAll(endpoints.values());
    synchronized (departed) {
      for (Departed d : departed.values()) {
        held.add(d.blocks);
      }
    }
    for (EndpointBlocks b : slots.blocks) {
      if (b != null) {
        held.add(b);
      }
    }
    return held;
  }

  /** The endpoints the table of stores by position references; for tests. */
  List<Endpoint> tableEndpoints() {
    List<Endpoint> out = new ArrayList<>();
    for (Endpoint e : slots.endpoints) {
      if (e != null) {
        out.add(e);
      }
    }
    return out;
  }

  /** Approximate heap bytes of every block store this scorer references; for tests. */
  long footprintBytes() {
    long sum = 0;
    for (EndpointBlocks b : heldStores()) {
      sum += b.footprintBytes();
    }
    return sum;
  }

  /** Whether this index was declared as {@code approx-prefix-cache-producer}. */
  boolean isProducer() {
    return producer;
  }

  @Override
  public String toString() {
    return (producer ? "approx-prefix-cache-producer" : "prefix-cache-scorer")
        + "(blockSizeTokens=" + blockSizeTokens + ")";
  }

  /** Builds a {@link PrefixCacheScorer}; see {@code docs/plugins.md} for the parameters. */
  public static final class Builder {
    private int blockSizeTokens = DEFAULT_BLOCK_SIZE_TOKENS;
    private int maxPrefixBlocksToMatch = DEFAULT_MAX_PREFIX_BLOCKS;
    private int lruCapacityPerServer = DEFAULT_LRU_CAPACITY_PER_SERVER;
    private boolean autoTune = true;
    private boolean refreshOnLookup = true;
    private boolean producer;
    private Ticker ticker = Ticker.system();

    private Builder() {}

    /**
     * The clock that times how long the store of an endpoint that left is kept for its return;
     * default {@link Ticker#system()}. The providers pass the router's.
     */
    public Builder ticker(Ticker t) {
      this.ticker = java.util.Objects.requireNonNull(t, "ticker");
      return this;
    }

    /** Tokens per block (text: four characters per token), 1 to 1,048,576. */
    public Builder blockSizeTokens(int v) {
      // the provider's limit: far larger, a text block of 4 characters a token overflows an int
      // (1 << 30 made every text prompt fail with a division by zero)
      if (v < 1 || v > MAX_BLOCK_SIZE_TOKENS) {
        throw new IllegalArgumentException("blockSizeTokens must be in [1, "
            + MAX_BLOCK_SIZE_TOKENS + "], got " + v);
      }
      this.blockSizeTokens = v;
      return this;
    }

    /** Blocks considered per request. */
    public Builder maxPrefixBlocksToMatch(int v) {
      this.maxPrefixBlocksToMatch = positive("maxPrefixBlocksToMatch", v);
      return this;
    }

    /** Per-endpoint capacity in blocks when the endpoint's {@code num_gpu_blocks} is unknown. */
    public Builder lruCapacityPerServer(int v) {
      if (v < 1 || v > EndpointBlocks.MAX_ENTRIES) {
        throw new IllegalArgumentException("lruCapacityPerServer must be in [1, "
            + EndpointBlocks.MAX_ENTRIES + "], got " + v);
      }
      this.lruCapacityPerServer = v;
      return this;
    }

    /** Whether the capacity follows the endpoint's {@code num_gpu_blocks} (default true). */
    public Builder autoTune(boolean v) {
      this.autoTune = v;
      return this;
    }

    /**
     * Whether a lookup marks the blocks it matches as recently used on every endpoint that holds
     * them (default true). Off, only the endpoints a request is routed to are refreshed, which is
     * closer to what the servers themselves see: a server the request did not go to did not
     * touch its blocks.
     */
    public Builder refreshOnLookup(boolean v) {
      this.refreshOnLookup = v;
      return this;
    }

    /** Marks the index as an {@code approx-prefix-cache-producer} (see its provider). */
    Builder producer(boolean v) {
      this.producer = v;
      return this;
    }

    public PrefixCacheScorer build() {
      return new PrefixCacheScorer(this);
    }

    private static int positive(String name, int v) {
      if (v < 1) {
        throw new IllegalArgumentException(name + " must be >= 1, got " + v);
      }
      return v;
    }
  }

  /** The index parameters a {@code prefix-cache-scorer} and an approximate producer share. */
  static final List<String> INDEX_PARAMETERS = List.of("blockSizeTokens", "hashBlockSize",
      "blockSize", "maxPrefixBlocksToMatch", "maxPrefixTokensToMatch", "lruCapacityPerServer",
      "autoTune", "refreshOnLookup");

  /**
   * Builds an index from {@link #INDEX_PARAMETERS}, read as a {@code prefix-cache-scorer} reads
   * them or, with {@code producer}, as llm-d's {@code approx-prefix-cache-producer} does: there
   * {@code blockSize} is a deprecated name of {@code blockSizeTokens} (GIE's scorer took it in
   * characters, four a token), 0 means not set for the block size and the block limit, and the
   * block size is at least 64 tokens.
   */
  static Builder index(Parameters p, boolean producer) {
    int least = producer ? PRODUCER_MIN_BLOCK_SIZE_TOKENS : 1;
    int block = producer ? PRODUCER_MIN_BLOCK_SIZE_TOKENS : DEFAULT_BLOCK_SIZE_TOKENS;
    String chars = CommonParameters.alias(p, "hashBlockSize", "blockSize");
    String blockName = "blockSizeTokens";
    if (p.has(chars) && !p.has("blockSizeTokens")) {
      blockName = chars;
      int given = p.getInt(chars, 64, 1, 4 << 20);
      block = producer ? Math.min(given, MAX_BLOCK_SIZE_TOKENS) : Math.max(1, given / 4);
    } else {
      int given = p.getInt("blockSizeTokens", block, producer ? 0 : 1, MAX_BLOCK_SIZE_TOKENS);
      block = given == 0 ? block : given;
      if (p.has(chars)) {
        // the same setting under its earlier name: read, so that a second value is not
        // reported as a parameter epp4j does not use, and refused when it says otherwise
        int before = p.errors().size();
        int other = p.getInt(chars, 64, 1, 4 << 20);
        int otherTokens = producer ? Math.min(other, MAX_BLOCK_SIZE_TOKENS)
            : Math.max(1, other / 4);
        if (p.errors().size() == before && otherTokens != block) {
          p.error(chars, "names the same setting as 'blockSizeTokens', which is given too: "
              + other + (producer ? " tokens" : " characters (" + otherTokens + " tokens)")
              + " against " + block + " tokens; give one");
        }
      }
    }
    if (block < least) {
      p.notice(blockName, "is " + block + " tokens; raised to " + least
          + ", the least block size upstream's producer hashes by");
      block = least;
    }
    int maxBlocks = noUpperBound(p, "maxPrefixBlocksToMatch", DEFAULT_MAX_PREFIX_BLOCKS,
        producer ? 0 : 1);
    if (maxBlocks == 0) {
      maxBlocks = DEFAULT_MAX_PREFIX_BLOCKS; // the producer's "no limit": this index's longest
    }
    // upstream: 0 (its default) leaves maxPrefixBlocksToMatch in force; a positive value
    // takes precedence over it
    int maxTokens = noUpperBound(p, "maxPrefixTokensToMatch", 0, 0);
    if (maxTokens > 0) {
      maxBlocks = Math.max(1, maxTokens / block);
    }
    return builder()
        .blockSizeTokens(block)
        .maxPrefixBlocksToMatch(maxBlocks)
        .lruCapacityPerServer(p.getInt("lruCapacityPerServer",
            DEFAULT_LRU_CAPACITY_PER_SERVER, 1, EndpointBlocks.MAX_ENTRIES))
        .autoTune(p.getBoolean("autoTune", true))
        .refreshOnLookup(p.getBoolean("refreshOnLookup", true))
        .producer(producer);
  }

  /**
   * A limit of at least {@code min} with no upper bound, as upstream reads the prefix limits: a
   * prompt's blocks are hashed up to the limit, and nothing is allocated by the limit itself, so
   * a large one only means "the whole prompt". One beyond a 32-bit integer is read as the
   * largest, which no prompt reaches either.
   */
  private static int noUpperBound(Parameters p, String name, int defaultValue, int min) {
    int before = p.errors().size();
    long v = p.getLong(name, defaultValue);
    if (p.errors().size() > before) {
      return defaultValue;
    }
    if (v < min) {
      p.error(name, "must be >= " + min + ", got " + v);
      return defaultValue;
    }
    return (int) Math.min(v, Integer.MAX_VALUE);
  }

  /** Provides {@code prefix-cache-scorer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("prefix-cache-scorer", "prefix-cache");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      if (p.has("mode")) {
        String mode = p.getEnum("mode", "estimate", java.util.Set.of("estimate", "cache_tracking"));
        if (mode.equals("cache_tracking")) {
          return PreciseMode.create(c, p);
        }
      }
      Scorer producer = PrefixMatchScorer.producerOf(c, p);
      if (producer != null) {
        return new PrefixMatchScorer(producer);
      }
      return index(p, false).ticker(c.ticker()).build();
    }
  }

  /**
   * Provides {@code approx-prefix-cache-producer}, llm-d's approximate prefix index split out of
   * its prefix-cache-scorer: the same index as a {@code prefix-cache-scorer}, which the file's
   * {@code prefix-cache-scorer} then reads (see {@link PrefixMatchScorer}). As upstream's, it
   * hashes in blocks of at least 64 tokens (default 64). Public only for
   * {@link java.util.ServiceLoader}.
   */
  public static final class ApproxProducerProvider extends AbstractPluginProvider {
    public ApproxProducerProvider() {
      super("approx-prefix-cache-producer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return index(p, true).ticker(c.ticker()).build();
    }
  }
}
