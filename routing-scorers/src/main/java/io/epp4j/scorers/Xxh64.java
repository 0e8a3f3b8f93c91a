package io.epp4j.scorers;

import java.nio.charset.StandardCharsets;

/**
 * XXH64 (the 64-bit xxHash), needed because Envoy places hosts and requests on its ring-hash and
 * Maglev tables with XXH64 and hash4j offers only XXH3. Written from the algorithm description
 * (xxHash specification, "XXH64 algorithm"); verified against published test vectors.
 */
final class Xxh64 {
  private static final long P1 = 0x9E3779B185EBCA87L;
  private static final long P2 = 0xC2B2AE3D27D4EB4FL;
  private static final long P3 = 0x165667B19E3779F9L;
  private static final long P4 = 0x85EBCA77C2B2AE63L;
  private static final long P5 = 0x27D4EB2F165667C5L;

  private Xxh64() {}

  /** XXH64 of the UTF-8 bytes of {@code s}. */
  static long hash(String s, long seed) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    return hash(b, 0, b.length, seed);
  }

  static long hash(byte[] in, int off, int len, long seed) {
    int p = off;
    int end = off + len;
    long h;
    if (len >= 32) {
      long v1 = seed + P1 + P2;
      long v2 = seed + P2;
      long v3 = seed;
      long v4 = seed - P1;
      int limit = end - 32;
      do {
        v1 = round(v1, le64(in, p));
        v2 = round(v2, le64(in, p + 8));
        v3 = round(v3, le64(in, p + 16));
        v4 = round(v4, le64(in, p + 24));
        p += 32;
      } while (p <= limit);
      h = Long.rotateLeft(v1, 1) + Long.rotateLeft(v2, 7) + Long.rotateLeft(v3, 12)
          + Long.rotateLeft(v4, 18);
      h = merge(h, v1);
      h = merge(h, v2);
      h = merge(h, v3);
      h = merge(h, v4);
    } else {
      h = seed + P5;
    }
    h += len;
    while (p + 8 <= end) {
      h ^= round(0, le64(in, p));
      h = Long.rotateLeft(h, 27) * P1 + P4;
      p += 8;
    }
    if (p + 4 <= end) {
      h ^= (le32(in, p) & 0xFFFFFFFFL) * P1;
      h = Long.rotateLeft(h, 23) * P2 + P3;
      p += 4;
    }
    while (p < end) {
      h ^= (in[p] & 0xFFL) * P5;
      h = Long.rotateLeft(h, 11) * P1;
      p++;
    }
    h ^= h >>> 33;
    h *= P2;
    h ^= h >>> 29;
    h *= P3;
    h ^= h >>> 32;
    return h;
  }

  private static long round(long acc, long input) {
    acc += input * P2;
    acc = Long.rotateLeft(acc, 31);
    return acc * P1;
  }

  private static long merge(long acc, long v) {
    acc ^= round(0, v);
    return acc * P1 + P4;
  }

  private static long le64(byte[] b, int i) {
    return (b[i] & 0xFFL) | (b[i + 1] & 0xFFL) << 8 | (b[i + 2] & 0xFFL) << 16
        | (b[i + 3] & 0xFFL) << 24 | (b[i + 4] & 0xFFL) << 32 | (b[i + 5] & 0xFFL) << 40
        | (b[i + 6] & 0xFFL) << 48 | (b[i + 7] & 0xFFL) << 56;
  }

  private static int le32(byte[] b, int i) {
    return (b[i] & 0xFF) | (b[i + 1] & 0xFF) << 8 | (b[i + 2] & 0xFF) << 16 | (b[i + 3] & 0xFF) << 24;
  }
}
