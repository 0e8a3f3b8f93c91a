package io.epp4j.sim;

import java.util.Arrays;

/**
 * An open-addressing map from {@code long} to non-negative {@code int} with linear probing and
 * backward-shift deletion, so the KV-cache lookups of a long simulation neither box nor
 * leave tombstones behind.
 */
final class LongIntMap {
  private static final int EMPTY = -1;
  private long[] keys;
  private int[] values;
  private int mask;
  private int size;

  LongIntMap(int expected) {
    int cap = Integer.highestOneBit(Math.max(16, expected * 2 - 1)) << 1;
    keys = new long[cap];
    values = new int[cap];
    Arrays.fill(values, EMPTY);
    mask = cap - 1;
  }

  int size() {
    return size;
  }

  /** The value for {@code key}, or -1. */
  int get(long key) {
    int i = slot(key);
    while (values[i] != EMPTY) {
      if (keys[i] == key) {
        return values[i];
      }
      i = (i + 1) & mask;
    }
    return EMPTY;
  }

  /** Maps {@code key} to {@code value} (>= 0), replacing any earlier value. */
  void put(long key, int value) {
    if (value < 0) {
      throw new IllegalArgumentException("value must be >= 0");
    }
    if ((size + 1) * 2 > keys.length) {
      grow();
    }
    int i = slot(key);
    while (values[i] != EMPTY) {
      if (keys[i] == key) {
        values[i] = value;
        return;
      }
      i = (i + 1) & mask;
    }
    keys[i] = key;
    values[i] = value;
    size++;
  }

  /** Removes {@code key}; returns its value or -1. */
  int remove(long key) {
    int i = slot(key);
    while (values[i] != EMPTY) {
      if (keys[i] == key) {
        int old = values[i];
        shiftBack(i);
        size--;
        return old;
      }
      i = (i + 1) & mask;
    }
    return EMPTY;
  }

  void clear() {
    Arrays.fill(values, EMPTY);
    size = 0;
  }

  private void shiftBack(int hole) {
    int i = hole;
    for (;;) {
      i = (i + 1) & mask;
      if (values[i] == EMPTY) {
        values[hole] = EMPTY;
        return;
      }
      int home = slot(keys[i]);
      // move entry i into the hole unless its home lies cyclically in (hole, i]
      boolean stays = hole <= i ? (hole < home && home <= i) : (hole < home || home <= i);
      if (!stays) {
        keys[hole] = keys[i];
        values[hole] = values[i];
        hole = i;
      }
    }
  }

  private void grow() {
    long[] oldKeys = keys;
    int[] oldValues = values;
    keys = new long[oldKeys.length * 2];
    values = new int[oldKeys.length * 2];
    Arrays.fill(values, EMPTY);
    mask = keys.length - 1;
    size = 0;
    for (int i = 0; i < oldKeys.length; i++) {
      if (oldValues[i] != EMPTY) {
        put(oldKeys[i], oldValues[i]);
      }
    }
  }

  private int slot(long key) {
    long h = key * 0x9E3779B97F4A7C15L;
    return (int) (h ^ (h >>> 32)) & mask;
  }
}
