package io.epp4j.kvevents;

import java.util.Arrays;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The real (event-backed) holders of every block key, by endpoint slot and tier: two bits (GPU,
 * offload) per slot. Slots below {@link HolderTable#INLINE_SLOTS} live packed in one word of the
 * primitive {@link HolderTable}; later slots in a {@link ConcurrentHashMap} on the side (slower,
 * same semantics). Writers are serialised by {@link KvBlockIndex}'s write lock; readers never
 * lock.
 */
final class Holders {
  /** key → holder bits of slots below {@link HolderTable#INLINE_SLOTS}. */
  final HolderTable table = new HolderTable();
  /**
   * key → packed holders {@code slot << 2 | medium bits} of the slots that do not fit inline
   * (more than {@value HolderTable#INLINE_SLOTS} endpoints ever seen). Arrays are replaced, never
   * mutated.
   */
  final ConcurrentHashMap<Long, int[]> wide = new ConcurrentHashMap<>();

  /** Adds tier {@code bit} of {@code slot} to {@code key}. Write lock held. */
  void add(long key, int slot, int bit) {
    if (slot < HolderTable.INLINE_SLOTS) {
      table.or(key, (long) bit << (slot << 1));
    } else {
      addWide(key, slot, bit);
    }
  }

  /**
   * Clears {@code bits} of {@code slot} on {@code key}; returns the bits left for the slot. Write
   * lock held.
   */
  int remove(long key, int slot, int bits) {
    if (slot < HolderTable.INLINE_SLOTS) {
      int shift = slot << 1;
      return (int) (table.andNot(key, (long) bits << shift) >>> shift) & 3;
    }
    return removeWide(key, slot, bits);
  }

  /** The tier bits {@code slot} holds {@code key} on. Lock-free. */
  int bits(long key, int slot) {
    if (slot < HolderTable.INLINE_SLOTS) {
      return (int) (table.get(key) >>> (slot << 1)) & 3;
    }
    int[] arr = wide.get(key);
    return arr == null ? 0 : bitsOf(arr, slot);
  }

  /** Keys some slot holds; consistent only under the write lock. */
  int liveKeys() {
    return table.liveKeys() + wide.size();
  }

  private void addWide(long key, int slot, int bit) {
    Long boxed = key;
    int[] cur = wide.putIfAbsent(boxed, new int[] {slot << 2 | bit});
    if (cur == null || (bitsOf(cur, slot) & bit) == bit) {
      return;
    }
    wide.compute(boxed, (k, arr) -> {
      if (arr == null) {
        return new int[] {slot << 2 | bit};
      }
      for (int i = 0; i < arr.length; i++) {
        if (arr[i] >>> 2 == slot) {
          if ((arr[i] & bit) == bit) {
            return arr;
          }
          int[] c = arr.clone();
          c[i] |= bit;
          return c;
        }
      }
      int[] c = Arrays.copyOf(arr, arr.length + 1);
      c[arr.length] = slot << 2 | bit;
      return c;
    });
  }

  private int removeWide(long key, int slot, int bits) {
    int[] after = wide.computeIfPresent(key, (k, arr) -> {
      for (int i = 0; i < arr.length; i++) {
        if (arr[i] >>> 2 == slot) {
          int left = arr[i] & 3 & ~bits;
          if (left != 0) {
            int[] c = arr.clone();
            c[i] = slot << 2 | left;
            return c;
          }
          if (arr.length == 1) {
            return null;
          }
          int[] c = new int[arr.length - 1];
          System.arraycopy(arr, 0, c, 0, i);
          System.arraycopy(arr, i + 1, c, i, arr.length - i - 1);
          return c;
        }
      }
      return arr;
    });
    return after == null ? 0 : bitsOf(after, slot);
  }

  /** The tier bits of {@code slot} in a packed wide-holder array. */
  static int bitsOf(int[] arr, int slot) {
    for (int v : arr) {
      if (v >>> 2 == slot) {
        return v & 3;
      }
    }
    return 0;
  }
}
