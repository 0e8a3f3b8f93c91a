package io.epp4j.kvevents;

import io.epp4j.api.AttributeKey;
import io.epp4j.api.PoolOrder;
import io.epp4j.api.PrefixHits;
import java.util.Arrays;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * What the precise scorer found for one request. Per candidate: the request's block keys at that
 * endpoint's block size and model (used after routing to record speculative entries) and the
 * weighted run of consecutive blocks from block 0 the endpoint holds. Published as
 * {@link PrefixHits} for the plugins that act on cache hits (the weighted run is the cached block
 * count), and under {@link #KEY} so that the precise and hybrid scorers of one cycle share it.
 * Public so that a {@code RequestListener} can read what precise mode matched for a decision.
 */
public final class PreciseMatch implements PrefixHits {

  /**
   * Where the precise scorers keep their match for the rest of the cycle. Other plugins should
   * read {@link PrefixHits#KEY}, which every prefix-cache scorer publishes.
   */
  public static final AttributeKey<PreciseMatch> KEY =
      AttributeKey.of("epp4j.precise-prefix-match", PreciseMatch.class);

  private static final long[] NO_KEYS = new long[0];

  private final String[] endpointIds;
  // candidate i's keys: keys[variantOf[i]] (none when that is -1), or keys[i] without variantOf;
  // endpoints of one pool nearly always share one block size and model, so one key array
  private final long[][] keys;
  private final int @Nullable [] variantOf;
  private final double[] weights;
  private final int[] blockSizes;
  // leading keys each endpoint held for real when scored (0 = unknown); saves the speculative
  // record after routing one probe of the index per such block
  private final int[] knownReal;
  // the scored list when it is in the pool's order, which knows its positions by id; else null
  private final @Nullable PoolOrder order;
  // the prompt's length in tokens, which bounds the blocks vLLM may serve from its cache
  // (KvBlockIndex.servableBlocks); MAX_VALUE when not known (every key may be served)
  private final int promptTokens;

  PreciseMatch(String[] endpointIds, long[][] keys, double[] weights, int[] blockSizes) {
    this(endpointIds, keys, weights, blockSizes, new int[endpointIds.length]);
  }

  PreciseMatch(String[] endpointIds, long[][] keys, double[] weights, int[] blockSizes,
      int[] knownReal) {
    this(endpointIds, keys, weights, blockSizes, knownReal, null);
  }

  /**
   * A match of a list in the pool's order, whose {@link #indexOf} asks {@code order} for an
   * endpoint's position instead of comparing ids one after another.
   */
  PreciseMatch(String[] endpointIds, long[][] keys, double[] weights, int[] blockSizes,
      int[] knownReal, @Nullable PoolOrder order) {
    this(endpointIds, keys, null, weights, blockSizes, knownReal, order, Integer.MAX_VALUE);
  }

  /** As above, for a prompt of {@code promptTokens} tokens (see {@link #servableBlocksAt}). */
  PreciseMatch(String[] endpointIds, long[][] keys, double[] weights, int[] blockSizes,
      int[] knownReal, @Nullable PoolOrder order, int promptTokens) {
    this(endpointIds, keys, null, weights, blockSizes, knownReal, order, promptTokens);
  }

  /**
   * A match whose candidate {@code i} has the keys {@code variantKeys[variantOf[i]]}, or none
   * when {@code variantOf[i]} is -1 (it serves another model). {@code endpointIds},
   * {@code variantOf} and {@code blockSizes} may be shared with other matches: nothing writes
   * them.
   */
  PreciseMatch(String[] endpointIds, long[][] variantKeys, int @Nullable [] variantOf,
      double[] weights, int[] blockSizes, int[] knownReal, @Nullable PoolOrder order,
      int promptTokens) {
    this.promptTokens = promptTokens;
    this.endpointIds = endpointIds;
    this.keys = variantKeys;
    this.variantOf = variantOf;
    this.weights = weights;
    this.blockSizes = blockSizes;
    this.knownReal = knownReal;
    this.order = order;
  }

  @Override
  public int indexOf(String endpointId) {
    PoolOrder o = order;
    if (o == null) {
      return PrefixHits.super.indexOf(endpointId);
    }
    int i = o.positionOf(endpointId);
    return i >= 0 && i < endpointIds.length && endpointIds[i].equals(endpointId) ? i : -1;
  }

  /** Candidates in the order they were scored. */
  @Override
  public int size() {
    return endpointIds.length;
  }

  @Override
  public String endpointId(int i) {
    return endpointIds[i];
  }

  @Override
  public int totalBlocks(int i) {
    return totalBlocksAt(i);
  }

  @Override
  public double cachedBlocks(int i) {
    return weights[i];
  }

  @Override
  public int blockSizeTokens(int i) {
    return blockSizes[i];
  }

  /** Whether candidate {@code i} of the scored list is {@code endpointId} (fast path). */
  boolean isAt(int i, String endpointId) {
    return i < endpointIds.length && endpointIds[i].equals(endpointId);
  }

  int totalBlocksAt(int i) {
    long[] k = keysAt(i);
    return k == null ? 0 : k.length;
  }

  double matchedWeightAt(int i) {
    return weights[i];
  }

  /**
   * How many of candidate {@code i}'s keys vLLM may serve from its cache: all of them, but for a
   * prompt that ends exactly at a block's end the last one, since the engine computes a prompt's
   * last token whatever it holds ({@link KvBlockIndex#servableBlocks}).
   */
  int servableBlocksAt(int i) {
    long[] k = keysAt(i);
    return k == null ? 0 : KvBlockIndex.servableBlocks(k, promptTokens, blockSizes[i]);
  }

  long @Nullable [] keysAt(int i) {
    int[] v = variantOf;
    if (v == null) {
      return keys[i];
    }
    return v[i] < 0 ? NO_KEYS : keys[v[i]];
  }

  /**
   * Key variants of a match built by variant (an endpoint's keys depend on its block size and
   * model), or -1 for a match that keeps keys per candidate.
   */
  int variants() {
    return variantOf == null ? -1 : keys.length;
  }

  /** The keys of variant {@code v} ({@link #variants()} >= 0). */
  long[] variantKeys(int v) {
    return keys[v];
  }

  /** The variant of candidate {@code i}, -1 when it serves another model ({@link #variants()} >= 0). */
  int variantAt(int i) {
    int[] v = variantOf;
    return v == null ? i : v[i];
  }

  /** Whether this match was scored over {@code candidates} itself (a list in the pool's order). */
  boolean scoredOver(List<?> candidates) {
    return order != null && order == candidates && endpointIds.length == candidates.size();
  }

  /** Full blocks of the request at this endpoint's block size (0 if the endpoint was not scored). */
  public int totalBlocks(String endpointId) {
    int i = indexOf(endpointId);
    return i < 0 ? 0 : totalBlocksAt(i);
  }

  /** Weighted consecutive matched blocks from block 0 (GPU 1.0, offloaded 0.8 each). */
  public double matchedWeight(String endpointId) {
    int i = indexOf(endpointId);
    return i < 0 ? 0 : weights[i];
  }

  /** The highest matched weight over all scored endpoints. */
  public double bestMatchedWeight() {
    double best = 0;
    for (double w : weights) {
      best = Math.max(best, w);
    }
    return best;
  }

  /** The request's block keys as computed for this endpoint, or {@code null}. */
  long @Nullable [] keys(String endpointId) {
    int i = indexOf(endpointId);
    return i < 0 ? null : keysAt(i);
  }

  /** Leading keys candidate {@code i} held for real (any tier) when it was scored. */
  int knownRealAt(int i) {
    return knownReal[i];
  }

  /** Leading keys the endpoint held for real (any tier) when it was scored; 0 if unknown. */
  int knownReal(String endpointId) {
    int i = indexOf(endpointId);
    return i < 0 ? 0 : knownReal[i];
  }

  /** This match extended with the endpoints of {@code other} it does not describe. */
  PreciseMatch plus(PreciseMatch other) {
    int a = endpointIds.length;
    int n = a + other.endpointIds.length;
    String[] ids = Arrays.copyOf(endpointIds, n);
    long[][] k = new long[n][];
    for (int i = 0; i < a; i++) {
      k[i] = keysAt(i);
    }
    double[] w = Arrays.copyOf(weights, n);
    int[] bs = Arrays.copyOf(blockSizes, n);
    int[] real = Arrays.copyOf(knownReal, n);
    int m = a;
    for (int i = 0; i < other.endpointIds.length; i++) {
      if (indexOf(other.endpointIds[i]) >= 0) {
        continue;
      }
      ids[m] = other.endpointIds[i];
      k[m] = other.keysAt(i);
      w[m] = other.weights[i];
      bs[m] = other.blockSizes[i];
      real[m] = other.knownReal[i];
      m++;
    }
    // both matches are of one request: one prompt length
    return new PreciseMatch(Arrays.copyOf(ids, m), Arrays.copyOf(k, m), Arrays.copyOf(w, m),
        Arrays.copyOf(bs, m), Arrays.copyOf(real, m), null,
        Math.min(promptTokens, other.promptTokens));
  }
}
