package io.epp4j.scorers;

/**
 * XXH3-64 (seed 0, default secret) of a block of token IDs as their little-endian bytes, read
 * straight from the {@code int[]}: the same value {@code Hashing.xxh3_64().hashBytesToLong} gives
 * for those bytes, without copying the tokens into a byte array first. Covers the 17–128-byte
 * inputs (blocks of 5–32 tokens), XXH3's single-pass range; other sizes go through a copy.
 *
 * <p>On a 100 KB prompt of 16-token blocks the copy cost a third as much as the hashing itself.
 */
final class TokenBlockXxh3 {
  private static final long PRIME64_1 = 0x9E3779B185EBCA87L;
  private static final long PRIME_MX1 = 0x165667919E3779F9L;
  // the first 128 bytes of XXH3's default secret, as little-endian longs
  private static final long S0 = 0xBE4BA423396CFEB8L;
  private static final long S1 = 0x1CAD21F72C81017CL;
  private static final long S2 = 0xDB979083E96DD4DEL;
  private static final long S3 = 0x1F67B3B7A4A44072L;
  private static final long S4 = 0x78E5C0CC4EE679CBL;
  private static final long S5 = 0x2172FFCC7DD05A82L;
  private static final long S6 = 0x8E2443F7744608B8L;
  private static final long S7 = 0x4C263A81E69035E0L;
  private static final long S8 = 0xCB00C391BB52283CL;
  private static final long S9 = 0xA32E531B8B65D088L;
  private static final long S10 = 0x4EF90DA297486471L;
  private static final long S11 = 0xD8ACDEA946EF1938L;
  private static final long S12 = 0x3F349CE33F76FAA8L;
  private static final long S13 = 0x1D4F0BC7C7BBDCF9L;
  private static final long S14 = 0x3159B4CD4BE0518AL;
  private static final long S15 = 0x647378D9C97E9FC8L;

  private TokenBlockXxh3() {}

  /** Whether blocks of {@code blockSizeTokens} tokens are in the range this class hashes. */
  static boolean covers(int blockSizeTokens) {
    return blockSizeTokens >= 5 && blockSizeTokens <= 32;
  }

  /** The hash of {@code tokens[from .. from + count)}; {@code count} must be in 5..32. */
  static long hash(int[] tokens, int from, int count) {
    int len = 4 * count;
    long acc = len * PRIME64_1;
    // offsets below are in tokens (4 bytes each), as XXH3_len_17to128 reads them in bytes
    if (len > 32) {
      if (len > 64) {
        if (len > 96) {
          acc += mix(tokens, from + 12, S12, S13);
          acc += mix(tokens, from + count - 16, S14, S15);
        }
        acc += mix(tokens, from + 8, S8, S9);
        acc += mix(tokens, from + count - 12, S10, S11);
      }
      acc += mix(tokens, from + 4, S4, S5);
      acc += mix(tokens, from + count - 8, S6, S7);
    }
    acc += mix(tokens, from, S0, S1);
    acc += mix(tokens, from + count - 4, S2, S3);
    acc ^= acc >>> 37;
    acc *= PRIME_MX1;
    return acc ^ (acc >>> 32);
  }

  /** XXH3's mix16B of the 16 bytes at token {@code at} with two longs of the secret. */
  private static long mix(int[] t, int at, long s0, long s1) {
    long lo = (t[at] & 0xFFFF_FFFFL) | ((long) t[at + 1] << 32);
    long hi = (t[at + 2] & 0xFFFF_FFFFL) | ((long) t[at + 3] << 32);
    return multiplyFold(lo ^ s0, hi ^ s1);
  }

  /** The 128-bit unsigned product of {@code a} and {@code b}, its halves xored. */
  private static long multiplyFold(long a, long b) {
    long high = Math.multiplyHigh(a, b) + ((a >> 63) & b) + ((b >> 63) & a);
    return (a * b) ^ high;
  }
}
