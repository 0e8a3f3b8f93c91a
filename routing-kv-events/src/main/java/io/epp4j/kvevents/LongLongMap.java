package io.epp4j.kvevents;

import java.util.Arrays;
import org.jspecify.annotations.Nullable;

/**
 * A primitive {@code long → long} hash map (open addressing, linear probing, backward-shift
 * deletion) for single-writer state. A key and its value sit side by side in one {@code long[]}
 * (16 bytes per slot, one cache line per probe); load at most 0.5 before growing, so about
 * 32–64 bytes per entry and no boxing. Not thread-safe.
 */
final class LongLongMap {
  private static final long EMPTY = 0L;
  /** Slot {@code i}: key at {@code 2i}, value at {@code 2i + 1}. */
  private long[] cells;
  private boolean hasZeroKey;
  private long zeroValue;
  private int size;
  private int mask;

  LongLongMap(int expected) {
    int cap = Integer.highestOneBit(Math.max(8, expected * 2 - 1)) << 1;
    cells = new long[cap * 2];
    mask = cap - 1;
  }

  int size() {
    return size + (hasZeroKey ? 1 : 0);
  }

  /** Whether {@code key} is present; its value goes to {@code out[0]}. */
  boolean get(long key, long[] out) {
    if (key == EMPTY) {
      out[0] = zeroValue;
      return hasZeroKey;
    }
    long[] c = cells;
    int i = slot(key);
    for (;;) {
      long k = c[i << 1];
      if (k == EMPTY) {
        return false;
      }
      if (k == key) {
        out[0] = c[(i << 1) + 1];
        return true;
      }
      i = (i + 1) & mask;
    }
  }

  /** Reads the slot where a probe for {@code key} starts, to pull it into the cache. */
  long touch(long key) {
    return cells[slot(key) << 1];
  }

  void put(long key, long value) {
    put(key, value, null);
  }

  /**
   * Maps {@code key} to {@code value}; returns whether {@code key} was mapped already, and then
   * puts the value it had into {@code previous[0]} (when {@code previous} is not null).
   */
  boolean put(long key, long value, long @Nullable [] previous) {
    if (key == EMPTY) {
      boolean had = hasZeroKey;
      if (had && previous != null) {
        previous[0] = zeroValue;
      }
      hasZeroKey = true;
      zeroValue = value;
      return had;
    }
    long[] c = cells;
    int i = slot(key);
    for (;;) {
      long k = c[i << 1];
      if (k == EMPTY) {
        c[i << 1] = key;
        c[(i << 1) + 1] = value;
        if (++size * 2 > mask + 1) {
          grow();
        }
        return false;
      }
      if (k == key) {
        if (previous != null) {
          previous[0] = c[(i << 1) + 1];
        }
        c[(i << 1) + 1] = value;
        return true;
      }
      i = (i + 1) & mask;
    }
  }

  boolean remove(long key) {
    if (key == EMPTY) {
      boolean had = hasZeroKey;
      hasZeroKey = false;
      return had;
    }
    long[] c = cells;
    int i = slot(key);
    for (;;) {
      long k = c[i << 1];
      if (k == EMPTY) {
        return false;
      }
      if (k == key) {
        break;
      }
      i = (i + 1) & mask;
    }
    // backward-shift: move later entries of the probe run into the hole
    int hole = i;
    int j = i;
    for (;;) {
      j = (j + 1) & mask;
      long k = c[j << 1];
      if (k == EMPTY) {
        break;
      }
      int home = slot(k);
      boolean movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
      if (movable) {
        c[hole << 1] = k;
        c[(hole << 1) + 1] = c[(j << 1) + 1];
        hole = j;
      }
    }
    c[hole << 1] = EMPTY;
    c[(hole << 1) + 1] = 0;
    size--;
    return true;
  }

  /** Calls {@code visitor} with every value. */
  void forEachValue(java.util.function.LongConsumer visitor) {
    if (hasZeroKey) {
      visitor.accept(zeroValue);
    }
    long[] c = cells;
    for (int i = 0; i < c.length; i += 2) {
      if (c[i] != EMPTY) {
        visitor.accept(c[i + 1]);
      }
    }
  }

  void clear() {
    Arrays.fill(cells, 0);
    size = 0;
    hasZeroKey = false;
  }

  /** Bytes held by the table. */
  long tableBytes() {
    return 8L * cells.length;
  }

  private int slot(long key) {
    long h = key * 0x9E3779B97F4A7C15L;
    return (int) (h ^ (h >>> 32)) & mask;
  }

  private void grow() {
    long[] old = cells;
    cells = new long[old.length * 2];
    mask = (old.length - 1); // new capacity (old.length) slots, minus one
    size = 0;
    for (int i = 0; i < old.length; i += 2) {
      if (old[i] != EMPTY) {
        put(old[i], old[i + 1]);
      }
    }
  }
}
