package io.epp4j.api;

import java.util.Objects;

/**
 * The chained block hashes of the current request's prompt as an approximate prefix scorer
 * computed them ({@code prefix-cache-scorer}), published in the cycle's {@link CycleState} under
 * {@link #KEY}. Hash {@code i} stands for the first {@code i + 1} blocks of the prompt, so a
 * router that holds the same hashes for an endpoint believes that endpoint holds the same prefix.
 * A plugin that shares routing state between routers reads them in
 * {@link RequestListener#afterRouting} to tell the other routers where the prompt went, and
 * hands them back to {@link HintListener#onRemotePrefix} on the other side.
 *
 * <p>The hashes depend on the block size, the model and any cache salt or tenant of the request,
 * none of which they reveal; they are meaningful only to a scorer configured with the same block
 * size in a router of the same pool.
 *
 * <p>The value published in a cycle is readable until the cycle ends ({@link CycleState#end()}):
 * the scorer writes the hashes into an array its thread reuses for the next request, so that a
 * route allocates nothing in proportion to the prompt. A plugin that keeps them past the cycle (a
 * replication plugin queueing them for its publisher) keeps {@link #retained()}, which copies them
 * only where they would not stay readable; reading the published value itself after the cycle
 * throws {@link IllegalStateException}. Values made with {@link #of} are immutable and may be
 * kept as they are.
 */
public interface PrefixBlocks {

  /** Where the first prefix scorer of a cycle publishes the prompt's block hashes. */
  AttributeKey<PrefixBlocks> KEY = AttributeKey.of("io.epp4j.api.PrefixBlocks", PrefixBlocks.class);

  /** Tokens per block the hashes were computed with. */
  int blockSizeTokens();

  /** Number of full blocks hashed. */
  int size();

  /** The chained hash of blocks {@code 0..i}. */
  long hash(int i);

  /**
   * The same hashes as a value that stays readable after the cycle: this one when it does (the
   * default, right for an immutable implementation such as {@link #of}'s), else a copy. The
   * prefix scorer's cycle-bound value copies its hashes here.
   */
  default PrefixBlocks retained() {
    return this;
  }

  /** A copy of the hashes. */
  default long[] toArray() {
    long[] a = new long[size()];
    for (int i = 0; i < a.length; i++) {
      a[i] = hash(i);
    }
    return a;
  }

  /**
   * Hashes received from elsewhere, for example from another router. The array is not copied:
   * the caller gives it up.
   *
   * @throws IllegalArgumentException if the block size is below 1
   */
  static PrefixBlocks of(int blockSizeTokens, long[] hashes) {
    if (blockSizeTokens < 1) {
      throw new IllegalArgumentException("blockSizeTokens must be >= 1, got " + blockSizeTokens);
    }
    Objects.requireNonNull(hashes, "hashes");
    return new PrefixBlocks() {
      @Override
      public int blockSizeTokens() {
        return blockSizeTokens;
      }

      @Override
      public int size() {
        return hashes.length;
      }

      @Override
      public long hash(int i) {
        return hashes[i];
      }

      @Override
      public long[] toArray() {
        return hashes.clone();
      }
    };
  }
}
