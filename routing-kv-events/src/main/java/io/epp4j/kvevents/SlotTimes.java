package io.epp4j.kvevents;

import java.util.Arrays;
import org.jspecify.annotations.Nullable;

/**
 * Copy-on-write arrays of {@code (endpoint slot, time)} pairs, the per-block form shared by
 * speculative entries and the hybrid's routing memory. Arrays are never mutated once
 * published, so readers need no lock.
 */
final class SlotTimes {
  private SlotTimes() {}

  /** A new array with {@code slot}'s time set to {@code time}, added if absent. */
  static long[] put(long @Nullable [] pairs, long slot, long time) {
    if (pairs != null) {
      for (int j = 0; j < pairs.length; j += 2) {
        if (pairs[j] == slot) {
          long[] c = pairs.clone();
          c[j + 1] = time;
          return c;
        }
      }
    }
    long[] c = pairs == null ? new long[2] : Arrays.copyOf(pairs, pairs.length + 2);
    c[c.length - 2] = slot;
    c[c.length - 1] = time;
    return c;
  }

  /**
   * A new array without {@code slot}'s pair if its time is at most {@code upTo}; null when that
   * was the last pair; {@code pairs} itself when there is nothing to remove (absent, or put again
   * later than {@code upTo}).
   */
  static long @Nullable [] removeUpTo(long[] pairs, long slot, long upTo) {
    for (int j = 0; j < pairs.length; j += 2) {
      if (pairs[j] == slot) {
        if (pairs[j + 1] > upTo) {
          return pairs;
        }
        if (pairs.length == 2) {
          return null;
        }
        long[] c = new long[pairs.length - 2];
        System.arraycopy(pairs, 0, c, 0, j);
        System.arraycopy(pairs, j + 2, c, j, pairs.length - j - 2);
        return c;
      }
    }
    return pairs;
  }
}
