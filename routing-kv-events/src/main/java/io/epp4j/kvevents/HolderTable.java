package io.epp4j.kvevents;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * Block key → holder bits, two bits (GPU, offload) for each of the first {@value #INLINE_SLOTS}
 * endpoint slots packed in one {@code long}. Open addressing with linear probing; a key and its
 * bits sit next to each other in one {@code long[]}, so a lookup usually costs one cache miss
 * and no object is allocated per key.
 *
 * <p>One writer at a time (the caller serialises them); any number of readers, which never lock.
 * The argument readers rely on:
 *
 * <ul>
 *   <li>A cell holding a live key (nonzero bits) keeps that key: removing the last holder only
 *       zeroes the bits, leaving a dead cell. So a probe for a live key always finds it, and no
 *       cell of a live key's probe run is ever emptied (dead cells are emptied only after the
 *       last live cell of a run, see {@link #emptyDeadRunEndingAt}).
 *   <li>A new key in an empty cell: bits are written before the key, both with release
 *       semantics; readers read the key, then the bits, with acquire semantics, so a reader that
 *       sees the key sees its bits.
 *   <li>A dead cell may be given to another key: key first, then bits. A reader re-reads the key
 *       after reading the bits; if the key changed in between, the bits may be the newcomer's,
 *       and the reader starts over. The bits of a key that is present throughout a read are
 *       therefore never confused with another key's.
 *   <li>A rehash (when live and dead cells fill 3/4 of the table) fills a fresh table privately
 *       and publishes it through a volatile field. A reader still walking the old table sees the
 *       state as of the swap; writers never touch a table again once it is replaced.
 * </ul>
 *
 * <p>Bits of different endpoints share a word, so writes must be serialised across all endpoints.
 */
final class HolderTable {
  /** Endpoint slots whose bits live inline; higher slots need another structure. */
  static final int INLINE_SLOTS = 32;

  private static final VarHandle CELLS = MethodHandles.arrayElementVarHandle(long[].class);
  private static final int MIN_CAPACITY = 1 << 12;

  /** Cells {@code 2i} (key, 0 = empty) and {@code 2i + 1} (bits, 0 = dead). */
  private static final class Table {
    final long[] cells;
    final int mask;

    Table(int capacity) {
      cells = new long[capacity * 2];
      mask = capacity - 1;
    }
  }

  private volatile Table table = new Table(MIN_CAPACITY);
  /** Bits of key 0, which cannot be stored in a cell (0 marks an empty cell). */
  private volatile long zeroKeyBits;
  /** Writer-only: cells holding a key (live or dead), and cells with nonzero bits. */
  private int used;
  private int live;

  /** The holder bits of {@code key}, 0 when nobody holds it. Lock-free. */
  long get(long key) {
    if (key == 0) {
      return zeroKeyBits;
    }
    retry:
    for (;;) {
      Table t = table;
      long[] c = t.cells;
      int mask = t.mask;
      int i = home(key) & mask;
      for (;;) {
        int at = i << 1;
        long k = (long) CELLS.getAcquire(c, at);
        if (k == key) {
          long v = (long) CELLS.getAcquire(c, at + 1);
          if ((long) CELLS.getAcquire(c, at) == key) {
            return v;
          }
          continue retry; // the dead cell was just given to another key
        }
        if (k == 0) {
          return 0;
        }
        i = (i + 1) & mask;
      }
    }
  }

  /** Sets {@code bits} on {@code key}. Writer only. */
  void or(long key, long bits) {
    write(key, bits, false);
  }

  /** Returns the word before the write (0 when the key was absent or dead). */
  private long write(long key, long bits, boolean replace) {
    if (key == 0) {
      long before = zeroKeyBits;
      zeroKeyBits = replace ? bits : zeroKeyBits | bits;
      return before;
    }
    Table t = table;
    long[] c = t.cells;
    int mask = t.mask;
    int i = home(key) & mask;
    int dead = -1;
    for (;;) {
      int at = i << 1;
      long k = c[at];
      if (k == key) {
        long v = c[at + 1];
        long nv = replace ? bits : v | bits;
        if (nv != v) {
          CELLS.setRelease(c, at + 1, nv);
          if (v == 0) {
            live++;
          }
        }
        return v;
      }
      if (k == 0) {
        live++;
        if (dead >= 0) {
          // key first, then bits: a reader of the dead key that sees the new bits re-reads the
          // new key and retries
          CELLS.setRelease(c, dead, key);
          CELLS.setRelease(c, dead + 1, bits);
          return 0;
        }
        CELLS.setRelease(c, at + 1, bits);
        CELLS.setRelease(c, at, key);
        if (++used > (mask + 1) / 4 * 3) {
          rehash();
        }
        return 0;
      }
      if (dead < 0 && c[at + 1] == 0) {
        dead = at;
      }
      i = (i + 1) & mask;
    }
  }

  /**
   * Sets {@code key}'s word to {@code value} (nonzero), whatever it was: the table as a plain
   * concurrent {@code long → long} map whose zero means absent. One release write of the new
   * word, so a reader sees the old word or the new one, never a mix. Writer only.
   */
  void put(long key, long value) {
    replace(key, value);
  }

  /** {@link #put}, returning the word it replaced (0 when the key was absent). Writer only. */
  long replace(long key, long value) {
    if (value == 0) {
      throw new IllegalArgumentException("value must be nonzero (zero marks a dead cell)");
    }
    return write(key, value, true);
  }

  /** Clears {@code bits} on {@code key}; returns the bits left. Writer only. */
  long andNot(long key, long bits) {
    if (key == 0) {
      long v = zeroKeyBits & ~bits;
      zeroKeyBits = v;
      return v;
    }
    Table t = table;
    long[] c = t.cells;
    int at = cellOf(c, t.mask, key);
    if (at < 0) {
      return 0;
    }
    long v = c[at + 1];
    long nv = v & ~bits;
    if (nv != v) {
      if (nv == 0) {
        kill(c, at, t.mask);
      } else {
        CELLS.setRelease(c, at + 1, nv);
      }
    }
    return nv;
  }

  /**
   * The word of {@code key} (0 when absent), and the key removed in the same probe when that word
   * is at most {@code limit} as an unsigned number. Writer only.
   */
  long removeIfAtMostUnsigned(long key, long limit) {
    if (key == 0) {
      long v = zeroKeyBits;
      if (v != 0 && Long.compareUnsigned(v, limit) <= 0) {
        zeroKeyBits = 0;
      }
      return v;
    }
    Table t = table;
    int at = cellOf(t.cells, t.mask, key);
    long v = at < 0 ? 0 : t.cells[at + 1];
    if (v != 0 && Long.compareUnsigned(v, limit) <= 0) {
      kill(t.cells, at, t.mask);
    }
    return v;
  }

  /** The index of {@code key}'s cell (its key word) in {@code c}, or -1. Writer only. */
  private static int cellOf(long[] c, int mask, long key) {
    int i = home(key) & mask;
    for (;;) {
      int at = i << 1;
      long k = c[at];
      if (k == key) {
        return at;
      }
      if (k == 0) {
        return -1;
      }
      i = (i + 1) & mask;
    }
  }

  /** Zeroes the live word of the cell at {@code at}, leaving a dead cell (see the class doc). */
  private void kill(long[] c, int at, int mask) {
    CELLS.setRelease(c, at + 1, 0L);
    live--;
    int i = at >> 1;
    if (c[((i + 1) & mask) << 1] == 0) {
      emptyDeadRunEndingAt(c, i, mask);
    }
  }

  /**
   * Reads the cell where a probe for {@code key} starts, to pull it into the cache. Any thread:
   * the value is a hint, never trusted.
   */
  long touch(long key) {
    Table t = table;
    return t.cells[(home(key) & t.mask) << 1];
  }

  /**
   * Turns dead cells back into empty ones, from {@code i} backwards while they are dead. The cell
   * after {@code i} is empty, so no probe run of a key still present passes through them: every
   * present key sits before its run's first empty cell, and these cells are all past the last
   * live cell of their run. A reader of a key that just died here re-reads the key, sees it gone
   * and retries. Without this, steady churn would fill the table with dead cells and force a
   * rehash (a full copy) every few hundred thousand stores.
   */
  private void emptyDeadRunEndingAt(long[] c, int i, int mask) {
    for (;;) {
      int at = i << 1;
      if (c[at] == 0 || c[at + 1] != 0) {
        return;
      }
      CELLS.setRelease(c, at, 0L);
      used--;
      i = (i - 1) & mask;
    }
  }

  /** Keys with at least one holder (key 0 not counted). Writer only. */
  int liveKeys() {
    return live;
  }

  /** Bytes of the current table. */
  long tableBytes() {
    return 8L * table.cells.length;
  }

  /**
   * Copies the live entries into a table where they fill at most half of the cells, leaving the
   * dead ones behind, and publishes it. Rehashing at 3/4 use keeps probe runs short.
   */
  private void rehash() {
    int capacity = MIN_CAPACITY;
    while (capacity / 2 < live) {
      capacity <<= 1;
    }
    Table old = table;
    Table fresh = new Table(capacity);
    long[] oc = old.cells;
    long[] nc = fresh.cells;
    int mask = fresh.mask;
    for (int at = 0; at < oc.length; at += 2) {
      long k = oc[at];
      long v = oc[at + 1];
      if (k != 0 && v != 0) {
        int i = home(k) & mask;
        while (nc[i << 1] != 0) {
          i = (i + 1) & mask;
        }
        nc[i << 1] = k;
        nc[(i << 1) + 1] = v;
      }
    }
    used = live;
    table = fresh; // volatile write: publishes the filled cells
  }

  private static int home(long key) {
    long h = key * 0x9E3779B97F4A7C15L;
    return (int) (h ^ (h >>> 32));
  }
}
