package io.epp4j.scorers;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

/**
 * The first-block filters of a whole pool, laid out by filter slot: the row of a slot holds one
 * count per endpoint position, so a request reads which endpoints may hold its first block from
 * one row of {@code ⌈n / 8⌉} words instead of one filter per endpoint. Each endpoint's store
 * writes its own column (under its monitor, {@link EndpointBlocks#attach}); readers take no lock.
 *
 * <p>A count is the number of chains the endpoint holds whose first block falls into the slot,
 * exact until it saturates at 255 (then it stays positive for good), so a zero count never hides
 * a held chain. Memory: {@code slots × ⌈n / 8⌉ × 8} bytes, 4 KiB per endpoint with the default
 * 4,096 slots.
 */
final class HeadDirectory {
  private static final VarHandle COUNT = MethodHandles.arrayElementVarHandle(byte[].class);
  private static final VarHandle WORD =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  static final int DEFAULT_SLOTS = 4096;

  private final int positions;
  private final int stride; // bytes per row: positions rounded up to whole words
  private final int mask;
  private final byte[] counts;

  HeadDirectory(int positions, int slots) {
    if (Integer.bitCount(slots) != 1) {
      throw new IllegalArgumentException("slots must be a power of two, got " + slots);
    }
    this.positions = positions;
    this.stride = (positions + 7) & ~7;
    this.mask = slots - 1;
    this.counts = new byte[Math.multiplyExact(stride, slots)];
  }

  int positions() {
    return positions;
  }

  /** The row offset of {@code key}'s slot: other bits than the stores' home slots. */
  int row(long key) {
    return ((int) (key >>> 40) & mask) * stride;
  }

  /** Counts one more chain starting with {@code key} at {@code position}. Under its store's monitor. */
  void increment(long key, int position) {
    int i = row(key) + position;
    int c = counts[i] & 0xFF;
    if (c < 0xFF) {
      COUNT.setRelease(counts, i, (byte) (c + 1));
    }
  }

  /** Counts one chain fewer; a saturated count stays. Under its store's monitor. */
  void decrement(long key, int position) {
    int i = row(key) + position;
    int c = counts[i] & 0xFF;
    if (c > 0 && c < 0xFF) {
      COUNT.setRelease(counts, i, (byte) (c - 1));
    }
  }

  /**
   * Writes into {@code out} the positions whose count for {@code key}'s slot is not zero, in
   * ascending order, and returns how many; {@code out} has room for {@link #positions()}.
   */
  int mayHold(long key, int[] out) {
    int base = row(key);
    int found = 0;
    for (int w = 0; w < stride; w += 8) {
      // plain reads: an aligned atomic access mode would throw where the JVM's array header
      // leaves the row's words unaligned; a count read stale is one a concurrent record is
      // writing, which this route may miss as it would if it had started a moment earlier
      long v = (long) WORD.get(counts, base + w);
      while (v != 0) {
        int b = Long.numberOfTrailingZeros(v) >>> 3;
        int p = w + b;
        if (p < positions) {
          out[found++] = p;
        }
        v &= ~(0xFFL << (b << 3));
      }
    }
    return found;
  }

  /** Bytes held. */
  long memoryBytes() {
    return counts.length;
  }
}
