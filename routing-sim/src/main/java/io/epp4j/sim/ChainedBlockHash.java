package io.epp4j.sim;

/**
 * The simulator's chained block hash: {@code h_i = H(h_{i-1}, tokens of block i)}, seeded from the
 * model name, so equal prefixes give equal hash chains, as vLLM's prefix cache requires. A
 * 64-bit mix (the murmur3 finalizer over a multiply-xor fold) is plenty for a simulation; this is
 * not vLLM's own hash and need not be.
 */
final class ChainedBlockHash {
  private ChainedBlockHash() {}

  /** The chain's seed for a model (vLLM seeds with a constant; any fixed value works). */
  static long seed(String model) {
    long h = 0x2545F4914F6CDD1DL;
    for (int i = 0; i < model.length(); i++) {
      h = mix(h ^ model.charAt(i));
    }
    return h;
  }

  /** The hash of {@code tokens[from, from + blockSize)} chained to {@code parent}. */
  static long hash(long parent, int[] tokens, int from, int blockSize) {
    long h = parent ^ 0x9E3779B97F4A7C15L;
    int end = from + blockSize;
    for (int i = from; i < end; i++) {
      h = (h ^ (tokens[i] & 0xFFFFFFFFL)) * 0xBF58476D1CE4E5B9L;
      h ^= h >>> 29;
    }
    return mix(h);
  }

  static long mix(long z) {
    z = (z ^ (z >>> 33)) * 0xFF51AFD7ED558CCDL;
    z = (z ^ (z >>> 33)) * 0xC4CEB9FE1A85EC53L;
    return z ^ (z >>> 33);
  }
}
