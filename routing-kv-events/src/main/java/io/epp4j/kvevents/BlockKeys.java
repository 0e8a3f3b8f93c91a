package io.epp4j.kvevents;

import org.jspecify.annotations.Nullable;

/**
 * epp4j's own chained block keys. vLLM's block hashes cannot be recomputed outside the engine
 * (they are salted per process unless {@code PYTHONHASHSEED} is fixed), so both the event side
 * and the request side derive keys from token IDs: a seed from model, LoRA adapter and cache
 * salt, then {@code key_i = mix(key_{i-1}, tokens of block i)}. Equal keys mean equal token
 * prefixes under the same model, adapter and salt (up to 64-bit collisions).
 *
 * <p>Public because {@link KvBlockIndex#prefixWeight} and {@link KvBlockIndex#tiers} take these
 * keys: whoever queries the index (a gateway's diagnostics, the JMH benchmarks) computes them
 * here.
 */
public final class BlockKeys {
  private static final long K1 = 0x9E3779B97F4A7C15L;
  private static final long K2 = 0xC2B2AE3D27D4EB4FL;

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
    long h = parent ^ (len * K2);
    for (int i = from, end = from + len; i < end; i++) {
      h = Long.rotateLeft(h ^ (tokens[i] * K1), 29) * K2;
    }
    return fmix(h);
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
