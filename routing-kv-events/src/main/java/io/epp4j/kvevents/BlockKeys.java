package io.epp4j.kvevents;

import org.jspecify.annotations.Nullable;

/**
 * epp4j's own chained block keys. vLLM's block hashes cannot be recomputed outside the engine
 * (they are salted per process unless {@code PYTHONHASHSEED} is fixed), so both the event side
 * and the request side derive keys from token IDs: a seed from model, LoRA adapter and cache
 * salt, then {@code key_i = mix(key_{i-1}, content(tokens of block i))}. Equal keys mean equal
 * token prefixes under the same model, adapter and salt (up to 64-bit collisions).
 *
 * <p>A block's content hash does not depend on its parent, and it reads two token IDs per
 * multiply in four independent lanes: the CPU overlaps the lanes within a block and the blocks of
 * a chain with each other, leaving only the short chaining step serial. (A single per-token chain
 * cost about five cycles per token with no overlap, several times the approximate scorer's
 * per-block hash.) The event side ({@link KvBlockIndex}) and the request side (the precise and
 * hybrid scorers) both compute keys here, so they always agree; keys are never persisted.
 *
 * <p>Public because {@link KvBlockIndex#prefixWeight} and {@link KvBlockIndex#tiers} take these
 * keys: whoever queries the index (a gateway's diagnostics, the JMH benchmarks) computes them
 * here.
 */
public final class BlockKeys {
  private static final long K1 = 0x9E3779B97F4A7C15L;
  private static final long K2 = 0xC2B2AE3D27D4EB4FL;
  // lane seeds: distinct, so equal pairs in different lanes hash differently
  private static final long L1 = 0x60EA27EEADC0B5D6L;
  private static final long L2 = 0x3C6EF372FE94F82BL;
  private static final long L3 = 0xA54FF53A5F1D36F1L;
  private static final long L4 = 0x510E527FADE682D1L;

  private BlockKeys() {}

  /** The key of the (virtual) parent of a root block. */
  public static long seed(String model, @Nullable String lora, @Nullable String cacheSalt) {
    long h = 0x243F6A8885A308D3L;
    h = mixString(h, model);
    h = mixString(h, lora == null ? "" : lora);
    h = mixString(h, cacheSalt == null ? "" : cacheSalt);
    return fmix(h);
  }

  /** The key of a block holding {@code tokens[from, from+len)} whose parent key is {@code parent}. */
  public static long next(long parent, int[] tokens, int from, int len) {
    return fmix(Long.rotateLeft(parent * K1, 31) ^ content(tokens, from, len));
  }

  /**
   * The hash of {@code tokens[from, from+len)} alone: xxHash64-style rounds over pairs of token
   * IDs in four lanes (eight IDs per step), the IDs that do not fill a step folded in one by one.
   */
  static long content(int[] tokens, int from, int len) {
    long a = L1 + len;
    long b = L2;
    long c = L3;
    long d = L4;
    int i = from;
    int end = from + len;
    for (int stop = end - 7; i < stop; i += 8) {
      a = round(a, pair(tokens[i], tokens[i + 1]));
      b = round(b, pair(tokens[i + 2], tokens[i + 3]));
      c = round(c, pair(tokens[i + 4], tokens[i + 5]));
      d = round(d, pair(tokens[i + 6], tokens[i + 7]));
    }
    long h = Long.rotateLeft(a, 1) + Long.rotateLeft(b, 7) + Long.rotateLeft(c, 12)
        + Long.rotateLeft(d, 18);
    for (; i < end; i++) {
      h = Long.rotateLeft(h ^ (tokens[i] * K1), 29) * K2;
    }
    return h;
  }

  private static long pair(int lo, int hi) {
    return (lo & 0xFFFFFFFFL) | ((long) hi << 32);
  }

  private static long round(long acc, long v) {
    return Long.rotateLeft(acc + v * K2, 31) * K1;
  }

  /**
   * Keys of the full blocks of {@code tokens} (a trailing partial block has none, as in vLLM).
   * At most {@code maxBlocks} keys.
   */
  public static long[] chain(long seed, int[] tokens, int blockSize, int maxBlocks) {
    int n = Math.min(tokens.length / blockSize, maxBlocks);
    long[] keys = new long[n];
    long k = seed;
    for (int i = 0; i < n; i++) {
      k = next(k, tokens, i * blockSize, blockSize);
      keys[i] = k;
    }
    return keys;
  }

  private static long mixString(long h, String s) {
    for (int i = 0; i < s.length(); i++) {
      h = Long.rotateLeft(h ^ (s.charAt(i) * K1), 31) * K2;
    }
    return Long.rotateLeft(h ^ (s.length() * K2), 27) * K1; // length delimits fields
  }

  private static long fmix(long h) {
    h ^= h >>> 33;
    h *= 0xFF51AFD7ED558CCDL;
    h ^= h >>> 33;
    h *= 0xC4CEB9FE1A85EC53L;
    h ^= h >>> 33;
    return h;
  }
}
