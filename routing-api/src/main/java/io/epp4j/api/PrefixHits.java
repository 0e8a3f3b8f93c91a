package io.epp4j.api;

/**
 * How much of the current request's prompt each scored endpoint is believed to hold in its
 * prefix cache: the one contract between the plugins that compute cache locality and the ones
 * that act on it. Every prefix-cache scorer ({@code prefix-cache-scorer},
 * {@code precise-prefix-cache-scorer}, {@code hybrid-prefix-cache-scorer}, or a custom one)
 * publishes its hits in the cycle's {@link CycleState} under {@link #KEY} through
 * {@link #publish}; the plugins that depend on them ({@code pd-profile-handler},
 * {@code no-hit-lru-scorer}, or a custom one) read {@code state.get(PrefixHits.KEY)} and so work
 * with whichever prefix scorer a configuration uses. {@code null} means no prefix scorer ran
 * before the reader in this cycle.
 *
 * <p>Per described endpoint {@code i} ({@code 0 <= i < size()}, in the order the producer scored
 * its candidates): {@link #totalBlocks} full blocks of the prompt at that endpoint's block size
 * (a partial last block is never cached; producers may stop at a maximum prompt length),
 * {@link #cachedBlocks} of them held consecutively from the first block, and the block size in
 * tokens. The cached count is an effective one: a producer that weighs storage tiers counts an
 * offloaded block as less than one (the precise scorers: {@code cpuWeight}), and the hybrid
 * scorer counts what it only remembers sending at its {@code memoryDiscount}. For every built-in
 * producer, the score it gave endpoint {@code i} is {@code cachedBlocks(i) / totalBlocks(i)}.
 *
 * <p>Values are immutable, belong to one cycle and are read on its thread; index access allocates
 * nothing. Implementations provide the five indexed methods; the rest have defaults.
 */
public interface PrefixHits {

  /** Where prefix-cache scorers publish their hits in the cycle state. */
  AttributeKey<PrefixHits> KEY = AttributeKey.of("io.epp4j.api.PrefixHits", PrefixHits.class);

  /** Number of endpoints described. */
  int size();

  /** The id of described endpoint {@code i}. */
  String endpointId(int i);

  /** Full blocks of the prompt considered at endpoint {@code i}'s block size. */
  int totalBlocks(int i);

  /**
   * Blocks of the prompt endpoint {@code i} holds consecutively from the first one, in
   * {@code [0, totalBlocks(i)]}; fractional when tiers or memory are weighted (see above).
   */
  double cachedBlocks(int i);

  /** Tokens per block at endpoint {@code i}. */
  int blockSizeTokens(int i);

  /** Position of {@code endpointId} among the described endpoints, or -1. */
  default int indexOf(String endpointId) {
    for (int i = 0, n = size(); i < n; i++) {
      if (endpointId(i).equals(endpointId)) {
        return i;
      }
    }
    return -1;
  }

  /** Prompt tokens endpoint {@code i} is believed to have cached (rounded down). */
  default long cachedTokens(int i) {
    return (long) (cachedBlocks(i) * blockSizeTokens(i));
  }

  /** Prompt tokens {@code endpointId} is believed to have cached; 0 if it is not described. */
  default long cachedTokens(String endpointId) {
    int i = indexOf(endpointId);
    return i < 0 ? 0 : cachedTokens(i);
  }

  /** Whether any described endpoint holds at least part of the prompt. */
  default boolean anyHit() {
    for (int i = 0, n = size(); i < n; i++) {
      if (cachedBlocks(i) > 0) {
        return true;
      }
    }
    return false;
  }

  /**
   * Hits of endpoints with one block size, e.g. for a custom producer or a test. The arrays are
   * copied.
   *
   * @throws IllegalArgumentException if the arrays differ in length, a count is out of range or
   *     the block size is below 1
   */
  static PrefixHits of(String[] endpointIds, int[] totalBlocks, double[] cachedBlocks,
      int blockSizeTokens) {
    int n = endpointIds.length;
    if (totalBlocks.length != n || cachedBlocks.length != n) {
      throw new IllegalArgumentException(
          "endpointIds, totalBlocks and cachedBlocks must have the same length");
    }
    if (blockSizeTokens < 1) {
      throw new IllegalArgumentException("blockSizeTokens must be >= 1, got " + blockSizeTokens);
    }
    int[] sizes = new int[n];
    for (int i = 0; i < n; i++) {
      java.util.Objects.requireNonNull(endpointIds[i], "endpointIds[" + i + "]");
      if (totalBlocks[i] < 0) {
        throw new IllegalArgumentException("totalBlocks[" + i + "] must be >= 0, got "
            + totalBlocks[i]);
      }
      if (!(cachedBlocks[i] >= 0 && cachedBlocks[i] <= totalBlocks[i])) {
        throw new IllegalArgumentException("cachedBlocks[" + i + "] must be in [0, "
            + totalBlocks[i] + "], got " + cachedBlocks[i]);
      }
      sizes[i] = blockSizeTokens;
    }
    return new PrefixHitsValue(endpointIds.clone(), totalBlocks.clone(), cachedBlocks.clone(),
        sizes);
  }

  /**
   * Publishes {@code hits} under {@link #KEY}. When the cycle already has hits (a prefix scorer
   * in an earlier profile, or a second one in the same profile), the result describes every
   * endpoint of both; an endpoint described by both keeps the earlier figures. Allocates only when
   * the new hits describe an endpoint the earlier ones do not.
   */
  static void publish(CycleState state, PrefixHits hits) {
    PrefixHits earlier = state.get(KEY);
    if (earlier == null) {
      state.put(KEY, hits);
    } else if (earlier != hits) {
      PrefixHits both = PrefixHitsValue.combine(earlier, hits);
      if (both != earlier) {
        state.put(KEY, both);
      }
    }
  }
}
