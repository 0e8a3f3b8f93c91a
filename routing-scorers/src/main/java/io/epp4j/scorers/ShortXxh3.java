package io.epp4j.scorers;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import org.jspecify.annotations.Nullable;

/**
 * XXH3-64 (seed 0, default secret) of inputs of 17–128 bytes, XXH3's single-pass range, which is
 * where prompt blocks fall (16-token blocks: 64 bytes of token IDs, 64 narrow or 128 UTF-16
 * text bytes). Gives the same value as {@code Hashing.xxh3_64().hashBytesToLong} for the same
 * bytes, in two forms:
 *
 * <ul>
 *   <li>a block of token IDs as their little-endian bytes, read straight from the {@code int[]}
 *       without copying the tokens into a byte array first (blocks of 5–32 tokens; on a 100 KB
 *       prompt of 16-token blocks the copy cost a third as much as the hashing itself);
 *   <li>a range of a {@code byte[]}, with none of a general hasher's dispatch on the length: on
 *       100 KB of 64-byte text blocks that dispatch made the hashing about a fifth slower.
 * </ul>
 *
 * <p>Each 16 bytes cost a 64 × 64 → 128-bit unsigned multiplication. Java 17 has only the signed
 * high half, and correcting it costs as much again as the multiplication; on Java 18 and later
 * {@code Math.unsignedMultiplyHigh} is used, and the same 100 KB hash about a quarter faster.
 */
final class ShortXxh3 {
  private static final VarHandle LONG_LE =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  /**
   * {@code Math.unsignedMultiplyHigh} (Java 18+) or null. A constant, so the JIT inlines the call
   * and compiles it to the CPU's unsigned multiply; on Java 17 the branch folds away. The system
   * property {@code epp4j.portableMultiply=true} forces the Java 17 form (for benchmarks).
   */
  private static final @Nullable MethodHandle UNSIGNED_MULTIPLY_HIGH = findUnsignedMultiplyHigh();
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

  private ShortXxh3() {}

  /** Whether blocks of {@code blockSizeTokens} tokens are in the range this class hashes. */
  static boolean coversTokens(int blockSizeTokens) {
    return blockSizeTokens >= 5 && blockSizeTokens <= 32;
  }

  /** Whether inputs of {@code length} bytes are in the range this class hashes. */
  static boolean coversBytes(int length) {
    return length >= 17 && length <= 128;
  }

  /** The hash of {@code bytes[from .. from + len)}; {@code len} must be in 17..128. */
  static long hash(byte[] bytes, int from, int len) {
    long acc = len * PRIME64_1;
    if (len > 32) {
      if (len > 64) {
        if (len > 96) {
          acc += mix(bytes, from + 48, S12, S13);
          acc += mix(bytes, from + len - 64, S14, S15);
        }
        acc += mix(bytes, from + 32, S8, S9);
        acc += mix(bytes, from + len - 48, S10, S11);
      }
      acc += mix(bytes, from + 16, S4, S5);
      acc += mix(bytes, from + len - 32, S6, S7);
    }
    acc += mix(bytes, from, S0, S1);
    acc += mix(bytes, from + len - 16, S2, S3);
    return avalanche(acc);
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
    return avalanche(acc);
  }

  private static long avalanche(long acc) {
    acc ^= acc >>> 37;
    acc *= PRIME_MX1;
    return acc ^ (acc >>> 32);
  }

  /** XXH3's mix16B of the 16 bytes at {@code at} with two longs of the secret. */
  private static long mix(byte[] b, int at, long s0, long s1) {
    return multiplyFold((long) LONG_LE.get(b, at) ^ s0, (long) LONG_LE.get(b, at + 8) ^ s1);
  }

  /** XXH3's mix16B of the 16 bytes at token {@code at} with two longs of the secret. */
  private static long mix(int[] t, int at, long s0, long s1) {
    long lo = (t[at] & 0xFFFF_FFFFL) | ((long) t[at + 1] << 32);
    long hi = (t[at + 2] & 0xFFFF_FFFFL) | ((long) t[at + 3] << 32);
    return multiplyFold(lo ^ s0, hi ^ s1);
  }

  /** The 128-bit unsigned product of {@code a} and {@code b}, its halves xored. */
  private static long multiplyFold(long a, long b) {
    return (a * b) ^ unsignedMultiplyHigh(a, b);
  }

  /**
   * The high half of the 128-bit unsigned product: {@code Math.unsignedMultiplyHigh} where the
   * runtime has it (Java 18 and later, one instruction there), else the signed high half
   * corrected by hand, which costs six more operations per product. Both give the same value.
   */
  static long unsignedMultiplyHigh(long a, long b) {
    MethodHandle intrinsic = UNSIGNED_MULTIPLY_HIGH;
    if (intrinsic != null) {
      try {
        return (long) intrinsic.invokeExact(a, b);
      } catch (Throwable e) {
        throw new AssertionError(e); // Math.unsignedMultiplyHigh throws nothing
      }
    }
    return unsignedMultiplyHighPortable(a, b);
  }

  /** The high half of the 128-bit unsigned product, from Java 17's signed one. */
  static long unsignedMultiplyHighPortable(long a, long b) {
    return Math.multiplyHigh(a, b) + ((a >> 63) & b) + ((b >> 63) & a);
  }

  /** Whether this runtime multiplies with {@code Math.unsignedMultiplyHigh}; for tests. */
  static boolean usesRuntimeUnsignedMultiplyHigh() {
    return UNSIGNED_MULTIPLY_HIGH != null;
  }

  private static @Nullable MethodHandle findUnsignedMultiplyHigh() {
    if (Boolean.getBoolean("epp4j.portableMultiply")) {
      return null;
    }
    try {
      return MethodHandles.publicLookup().findStatic(Math.class, "unsignedMultiplyHigh",
          MethodType.methodType(long.class, long.class, long.class));
    } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
      // Java 17 (no such method), or a runtime that refuses method handles (an ahead-of-time
      // image without them): the portable form gives the same values
      return null;
    }
  }
}
