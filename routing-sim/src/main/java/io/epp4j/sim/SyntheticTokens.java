package io.epp4j.sim;

/**
 * Deterministic synthetic token IDs: token {@code i} of stream {@code key} is a hash of both,
 * mapped into Qwen3's ordinary vocabulary. Equal keys give equal token sequences (a shared system
 * prompt, a trace block), different keys give unrelated ones.
 */
final class SyntheticTokens {
  /** Qwen3's vocabulary holds 151,643 ordinary tokens before the special ones. */
  static final int VOCAB = 151_643;

  private SyntheticTokens() {}

  static int token(long key, int i) {
    return token(key, i, VOCAB);
  }

  /** Token {@code i} of stream {@code key} in a vocabulary of {@code vocab} ordinary tokens. */
  static int token(long key, int i, int vocab) {
    long h = ChainedBlockHash.mix(key * 0x9E3779B97F4A7C15L + i);
    return (int) Math.floorMod(h, (long) vocab);
  }

  /** Fills {@code out[from, from + len)} with tokens {@code 0..len-1} of stream {@code key}. */
  static void fill(long key, int[] out, int from, int len) {
    fill(key, out, from, len, VOCAB);
  }

  /** As {@link #fill(long, int[], int, int)}, in a vocabulary of {@code vocab} tokens. */
  static void fill(long key, int[] out, int from, int len, int vocab) {
    for (int i = 0; i < len; i++) {
      out[from + i] = token(key, i, vocab);
    }
  }

  /**
   * A session key as a client would generate it: a random UUID-shaped string drawn from
   * {@code rng}, so ring-hash placement varies with the seed like it does between real runs.
   */
  static String sessionKey(java.util.random.RandomGenerator rng) {
    return new java.util.UUID(rng.nextLong(), rng.nextLong()).toString();
  }

  /** A stream key from parts, e.g. {@code key(seed, kind, index)}. */
  static long key(long... parts) {
    long h = 0x632BE59BD9B4E019L;
    for (long p : parts) {
      h = ChainedBlockHash.mix(h ^ p) + 0x9E3779B97F4A7C15L;
    }
    return h;
  }
}
