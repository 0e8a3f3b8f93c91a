package io.epp4j.kvevents;

import java.util.Arrays;

/**
 * A primitive {@code long → long} hash map (open addressing, linear probing, backward-shift
 * deletion) for single-writer state: 16 bytes per slot, load at most 0.5 before growing, so
 * about 24–48 bytes per entry and no boxing. Not thread-safe.
 */
final class LongLongMap {
  private static final long EMPTY = 0L;
  private long[] keys;
  private long[] values;
  private boolean hasZeroKey;
  private long zeroValue;
  private int size;
  private int mask;

  LongLongMap(int expected) {
    int cap = Integer.highestOneBit(Math.max(8, expected * 2 - 1)) << 1;
    keys = new long[cap];
    values = new long[cap];
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
    int i = slot(key);
    for (;;) {
      long k = keys[i];
      if (k == EMPTY) {
        return false;
      }
      if (k == key) {
        out[0] = values[i];
        return true;
      }
      i = (i + 1) & mask;
    }
  }

  void put(long key, long value) {
    if (key == EMPTY) {
      hasZeroKey = true;
      zeroValue = value;
      return;
    }
    int i = slot(key);
    for (;;) {
      long k = keys[i];
      if (k == EMPTY) {
        keys[i] = key;
        values[i] = value;
        if (++size * 2 > keys.length) {
          grow();
        }
        return;
      }
      if (k == key) {
        values[i] = value;
        return;
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
    int i = slot(key);
    for (;;) {
      long k = keys[i];
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
      long k = keys[j];
      if (k == EMPTY) {
        break;
      }
      int home = slot(k);
      boolean movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
      if (movable) {
        keys[hole] = k;
        values[hole] = values[j];
        hole = j;
      }
    }
    keys[hole] = EMPTY;
    values[hole] = 0;
    size--;
    return true;
  }

  /** Calls {@code visitor} with every value. */
  void forEachValue(java.util.function.LongConsumer visitor) {
    if (hasZeroKey) {
      visitor.accept(zeroValue);
    }
    for (int i = 0; i < keys.length; i++) {
      if (keys[i] != EMPTY) {
        visitor.accept(values[i]);
      }
    }
  }

  void clear() {
    Arrays.fill(keys, EMPTY);
    Arrays.fill(values, 0);
    size = 0;
    hasZeroKey = false;
  }

  /** Bytes held by the tables. */
  long tableBytes() {
    return 16L * keys.length;
  }

  private int slot(long key) {
    long h = key * 0x9E3779B97F4A7C15L;
    return (int) (h ^ (h >>> 32)) & mask;
  }

  private void grow() {
    long[] ok = keys;
    long[] ov = values;
    keys = new long[ok.length * 2];
    values = new long[ok.length * 2];
    mask = keys.length - 1;
    size = 0;
    for (int i = 0; i < ok.length; i++) {
      if (ok[i] != EMPTY) {
        put(ok[i], ov[i]);
      }
    }
  }
}
