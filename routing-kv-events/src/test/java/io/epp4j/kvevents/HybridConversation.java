package io.epp4j.kvevents;

import java.util.Arrays;

/**
 * The conversation the hybrid-model tests ({@link SlidingWindowHitTest}, {@link MambaStateHitTest})
 * store: 8 blocks of {@link #BS} tokens, engine hashes 1000, 1001, … in block order.
 */
final class HybridConversation {
  static final int BS = 4;
  static final int[] TOKENS = new int[8 * BS];

  static {
    for (int i = 0; i < TOKENS.length; i++) {
      TOKENS[i] = 100 + i;
    }
  }

  private HybridConversation() {}

  static long[] keys(int[] tokens) {
    return BlockKeys.chain(BlockKeys.seed("", null, null), tokens, BS, 1 << 10);
  }

  /** The first {@code n} blocks of the conversation, then other tokens. */
  static int[] sharing(int n) {
    int[] t = Arrays.copyOf(TOKENS, TOKENS.length);
    for (int i = n * BS; i < t.length; i++) {
      t[i] = 7;
    }
    return t;
  }

  /** The engine hash of block {@code i} of the conversation (at the attention block size). */
  static long hash(int i) {
    return 1000 + i;
  }

  /** The engine hashes of blocks {@code from} to {@code to} (exclusive). */
  static long[] hashes(int from, int to) {
    long[] h = new long[to - from];
    for (int i = from; i < to; i++) {
      h[i - from] = hash(i);
    }
    return h;
  }
}
