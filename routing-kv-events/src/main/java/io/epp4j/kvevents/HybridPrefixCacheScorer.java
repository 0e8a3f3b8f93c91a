package io.epp4j.kvevents;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PoolListener;
import io.epp4j.api.PoolOrder;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.PrefixHitsProducer;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import java.util.Arrays;
import java.util.List;

/**
 * {@code hybrid-prefix-cache-scorer}: the engine's truth plus the router's memory.
 *
 * <p>Rule, per candidate {@code e}: {@code score(e) = max(precise(e), d × memory(e))}, where
 * {@code precise(e)} is the {@code precise-prefix-cache-scorer} score (consecutive blocks from
 * block 0 held per KV events, GPU 1.0 / offloaded 0.8, ÷ total blocks), {@code memory(e)} is the
 * share of the prompt covered by the run of blocks {@code e}'s engine reports holding from block 0
 * followed by the consecutive blocks after it this router sent to {@code e} recently (within
 * {@code memoryTtlMs}, bounded per endpoint like the approximate index), counted only when this
 * router sent {@code e} the prompt's first block (and, as for {@code precise(e)}, never past the
 * blocks vLLM may serve), and {@code d} is {@code memoryDiscount} (0.8). A
 * remembered block is forgotten as soon as {@code e}'s engine reports it removed (or clears its
 * cache): the memory fills the engine's silence and never contradicts its word. With
 * {@code fallbackOnly}, memory counts only when no candidate has any precise hit.
 *
 * <p>A route records only the prompt's first block and the blocks past the run the chosen
 * endpoint reported holding: that run is counted from the index at lookup, so a prompt the engine
 * holds costs the memory one probe and no room. What the index stops knowing on its own (a resync,
 * an overflow) it hands over ({@link KvBlockIndex.DropListener#lostTrack}), and the memory
 * vouches for it from then on.
 *
 * <p>Why: the engine's events are exact while they arrive, but a router can be blind to an
 * endpoint for a while (it joined late, a gap forced a resync, blocks are still being computed
 * past the speculative TTL); there the memory of where a prefix was sent is the best evidence
 * left, as in the approximate scorer. What the engine did report, though, outranks the memory:
 * a block it evicted is gone, and steering a dialog back to the replica that evicted it piles
 * work onto the replica under the most cache pressure (in the simulator a memory that outlived
 * evictions cost 5-10 points of hit rate on multi-turn chats). The discount keeps a real hit of
 * the same length (1.0) ahead of a remembered one (0.8).
 *
 * <p>Published {@link PrefixHits}: per candidate {@code max(precise run, d × remembered run)}
 * blocks, so the plugins acting on hits see what the memory supplies.
 *
 * <p>The memory, like the precise scorer's speculative entries, covers only endpoints the pool
 * announced and has not removed since; a route that outlives its endpoint's removal records
 * nothing.
 */
final class HybridPrefixCacheScorer implements PrefixHitsProducer, RequestListener, PoolListener,
    KvBlockIndex.DropListener {

  // PdProfileHandler.PREFILL_PROFILE: spelled out because this module does not compile against
  // routing-scorers, where the prefill/decode handler lives
  private static final String PREFILL_PROFILE = "prefill";
  private final PrecisePrefixCacheScorer precise;
  private final RoutingMemory memory;
  private final double discount;
  private final boolean fallbackOnly;
  /**
   * The router's clock at a recent decision (written at most once per millisecond, so routing
   * threads do not contend for the line); dates the blocks the memory absorbs.
   */
  private final java.util.concurrent.atomic.AtomicLong lastNanos =
      new java.util.concurrent.atomic.AtomicLong(NO_DECISION);
  /** {@link #lastNanos} before the first decision: no router time to date anything with. */
  private static final long NO_DECISION = Long.MIN_VALUE;

  HybridPrefixCacheScorer(PrecisePrefixCacheScorer precise, double discount,
      long memoryTtlNanos, int memoryBlocksPerEndpoint, boolean fallbackOnly) {
    this.precise = precise;
    this.discount = discount;
    this.fallbackOnly = fallbackOnly;
    this.memory = new RoutingMemory(memoryBlocksPerEndpoint, memoryTtlNanos);
    precise.index().addDropListener(this);
  }

  /** The engine's word overrides the memory: a block it reports dropped is forgotten there. */
  @Override
  public void dropped(String endpointId, long key) {
    memory.forget(endpointId, key);
  }

  @Override
  public void cleared(String endpointId) {
    memory.clear(endpointId);
  }

  /**
   * The index lost track of what {@code endpointId} holds (a resync, an overflow) while the engine
   * said nothing: the memory vouches for those blocks from now on, as for blocks routed there.
   * They are dated by a recent routing decision's time, the router's clock as last seen.
   */
  @Override
  public void lostTrack(String endpointId, long[] keys) {
    long at = lastNanos.get();
    if (at != NO_DECISION) { // before the first decision there is no router time to date them by
      memory.absorb(endpointId, keys, at);
    }
  }

  KvBlockIndex index() {
    return precise.index();
  }

  /** See {@link PrecisePrefixCacheScorer#lendTokenizer}. */
  void lendTokenizer(Tokenizer lent) {
    precise.lendTokenizer(lent);
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    PreciseMatch m = precise.match(request, state, candidates);
    if (m == null) {
      return;
    }
    boolean useMemory = !fallbackOnly || m.bestMatchedWeight() == 0;
    long now = state.nowNanos();
    long last = lastNanos.get();
    if (last == NO_DECISION || now - last > 1_000_000L || now < last) {
      lastNanos.lazySet(now);
    }
    if (m.scoredOver(candidates) && m.variants() >= 0) {
      scoreInPoolOrder(m, (PoolOrder) candidates, useMemory, now, state, scores);
      return;
    }
    int n = candidates.size();
    int[] totals = new int[n];
    double[] cached = new double[n];
    int[] blockSizes = new int[n];
    for (int i = 0; i < n; i++) {
      String id = candidates.get(i).id();
      boolean same = m.isAt(i, id);
      int at = same ? i : m.indexOf(id);
      int total = at < 0 ? 0 : m.totalBlocksAt(at);
      totals[i] = total;
      blockSizes[i] = at < 0 ? index().defaultBlockSize() : m.blockSizeTokens(at);
      if (total == 0) {
        continue;
      }
      double c = m.matchedWeightAt(at);
      if (useMemory) {
        long[] keys = m.keysAt(at);
        if (keys != null) {
          // no more than the engine may serve: it computes a prompt's last token whatever it holds
          c = Math.max(c, discount * Math.min(m.servableBlocksAt(at),
              memory.prefixLength(id, keys, m.knownRealAt(at), now)));
        }
      }
      cached[i] = c;
      scores[i] = c / total;
    }
    PrefixHits.publish(state, new Hits(candidates, totals, cached, blockSizes));
  }

  /**
   * {@link #score} of the list the precise match was scored over, in the pool's order: the
   * precise holders from the match, and the memory read only at the endpoints the memory's
   * directory names for the prompt's first key, found in the list by {@link PoolOrder#positionOf}.
   * The published hits are the match with those endpoints' credits raised.
   */
  private void scoreInPoolOrder(PreciseMatch m, PoolOrder order, boolean useMemory, long now,
      CycleState state, double[] scores) {
    int n = m.size();
    for (int i = 0; i < n; i++) {
      double matched = m.matchedWeightAt(i);
      if (matched > 0) {
        scores[i] = matched / m.totalBlocksAt(i);
      }
    }
    int[] raised = NONE;
    double[] credits = NO_CREDITS;
    int count = 0;
    for (int v = 0, variants = useMemory ? m.variants() : 0; v < variants; v++) {
      long[] keys = m.variantKeys(v);
      if (keys.length == 0) {
        continue;
      }
      int found = memory.ringsThatMayHoldFirst(keys[0]);
      for (int f = 0; f < found; f++) {
        int i = order.positionOf(RoutingMemory.foundEndpoint(f));
        if (i < 0 || i >= n || m.variantAt(i) != v
            || m.matchedWeightAt(i) >= discount * m.servableBlocksAt(i)) {
          continue; // not a candidate, or its precise run beats any discounted memory
        }
        double c = discount * Math.min(m.servableBlocksAt(i),
            memory.foundPrefixLength(f, keys, m.knownRealAt(i), now));
        if (c > m.matchedWeightAt(i)) {
          if (count == raised.length) {
            raised = Arrays.copyOf(raised, Math.max(4, count * 2));
            credits = Arrays.copyOf(credits, raised.length);
          }
          raised[count] = i;
          credits[count++] = c;
          scores[i] = c / keys.length;
        }
      }
    }
    PrefixHits.publish(state, count == 0 ? m : new RaisedHits(m, raised, credits, count));
  }

  private static final int[] NONE = new int[0];
  private static final double[] NO_CREDITS = new double[0];

  /** A precise match with the memory's credit at a few candidates. */
  private static final class RaisedHits implements PrefixHits {
    private final PreciseMatch match;
    private final int[] raised;
    private final double[] credits;
    private final int count;

    RaisedHits(PreciseMatch match, int[] raised, double[] credits, int count) {
      this.match = match;
      this.raised = raised;
      this.credits = credits;
      this.count = count;
    }

    @Override
    public int size() {
      return match.size();
    }

    @Override
    public String endpointId(int i) {
      return match.endpointId(i);
    }

    @Override
    public int indexOf(String endpointId) {
      return match.indexOf(endpointId);
    }

    @Override
    public int totalBlocks(int i) {
      return match.totalBlocks(i);
    }

    @Override
    public double cachedBlocks(int i) {
      for (int r = 0; r < count; r++) {
        if (raised[r] == i) {
          return credits[r];
        }
      }
      return match.cachedBlocks(i);
    }

    @Override
    public int blockSizeTokens(int i) {
      return match.blockSizeTokens(i);
    }
  }

  /** What this scorer credits each candidate with: the precise run or the discounted memory. */
  private static final class Hits implements PrefixHits {
    private final List<Candidate> candidates;
    private final int[] totals;
    private final double[] cached;
    private final int[] blockSizes;

    Hits(List<Candidate> candidates, int[] totals, double[] cached, int[] blockSizes) {
      this.candidates = candidates;
      this.totals = totals;
      this.cached = cached;
      this.blockSizes = blockSizes;
    }

    @Override
    public int size() {
      return totals.length;
    }

    @Override
    public String endpointId(int i) {
      return candidates.get(i).id();
    }

    @Override
    public int totalBlocks(int i) {
      return totals[i];
    }

    @Override
    public double cachedBlocks(int i) {
      return cached[i];
    }

    @Override
    public int blockSizeTokens(int i) {
      return blockSizes[i];
    }
  }

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    precise.afterRouting(request, state, decision);
    PreciseMatch m = state.get(PreciseMatch.KEY);
    if (m == null) {
      return;
    }
    remember(m, decision.primary(), state.nowNanos());
    Endpoint prefill = decision.secondaryEndpoint(PREFILL_PROFILE);
    if (prefill != null) {
      remember(m, prefill, state.nowNanos());
    }
  }

  private void remember(PreciseMatch m, Endpoint e, long now) {
    long[] keys = m.keys(e.id());
    if (keys != null && keys.length > 0) {
      memory.record(e.id(), keys, m.knownReal(e.id()), now);
    }
  }

  @Override
  public void onEndpointAdded(Endpoint endpoint) {
    memory.addEndpoint(endpoint.id());
    precise.onEndpointAdded(endpoint);
  }

  @Override
  public void onEndpointChanged(Endpoint previous, Endpoint current) {
    precise.onEndpointChanged(previous, current);
  }

  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    precise.onEndpointRemoved(endpoint);
    memory.removeEndpoint(endpoint.id());
  }

  /**
   * The engine fell asleep and discarded its KV cache: the memory of what was routed there goes
   * too. The index learns the same from the engine's {@code AllBlocksCleared}.
   */
  @Override
  public void onEndpointCacheDropped(Endpoint endpoint) {
    memory.clear(endpoint.id());
    precise.onEndpointCacheDropped(endpoint);
  }

  /** Distinct keys the routing memory holds for {@code endpointId}; for tests. */
  int rememberedKeys(String endpointId) {
    return memory.size(endpointId);
  }

  /** Endpoints the routing memory has state for; for tests. */
  int rememberedEndpoints() {
    return memory.endpoints();
  }

  @Override
  public void close() {
    precise.index().removeDropListener(this);
    precise.close();
  }
}
