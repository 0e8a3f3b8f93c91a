package io.epp4j.kvevents;

import java.util.Arrays;
import org.jspecify.annotations.Nullable;

/**
 * The real (event-backed) holders of every block key, by endpoint slot and tier: two bits (GPU,
 * offload) per slot. Slots live in planes of {@value HolderTable#INLINE_SLOTS}: slot {@code s}
 * in plane {@code s / 32}, a primitive {@link HolderTable} of its own, so a lookup for any slot is
 * one probe of one table with no boxing. Most pools fit in plane 0 ({@link #table}); the others
 * exist only while some slot of theirs holds a key (slots are never reused, so after endpoint
 * churn most planes would otherwise sit empty). Writers are serialised by {@link KvBlockIndex}'s
 * write lock; readers never lock.
 */
final class Holders {
  /** Plane 0: key → holder bits of slots below {@link HolderTable#INLINE_SLOTS}. */
  final HolderTable table = new HolderTable();
  /**
   * Planes 1, 2, …: {@code wide[p - 1]} holds slots {@code [32p, 32p + 32)}, null while none of
   * them holds a key. Replaced (copied), never mutated, and published through the volatile field,
   * so a reader sees either the old or the new array, both complete.
   */
  private volatile @Nullable HolderTable[] wide = new HolderTable[0];

  /** Adds tier {@code bit} of {@code slot} to {@code key}. Write lock held. */
  void add(long key, int slot, int bit) {
    HolderTable t = slot < HolderTable.INLINE_SLOTS ? table : widePlaneForWrite(slot);
    t.or(key, (long) bit << shift(slot));
  }

  /**
   * Clears {@code bits} of {@code slot} on {@code key}; returns the bits left for the slot. Write
   * lock held.
   */
  int remove(long key, int slot, int bits) {
    HolderTable t = plane(slot);
    if (t == null) {
      return 0;
    }
    int shift = shift(slot);
    int left = (int) (t.andNot(key, (long) bits << shift) >>> shift) & 3;
    if (t != table && t.liveKeys() == 0 && t.get(0) == 0) {
      dropWidePlane(slot);
    }
    return left;
  }

  /** The tier bits {@code slot} holds {@code key} on. Lock-free. */
  int bits(long key, int slot) {
    HolderTable t = plane(slot);
    return t == null ? 0 : (int) (t.get(key) >>> shift(slot)) & 3;
  }

  /** The table of {@code slot}'s plane, null when no slot of that plane holds anything. Lock-free. */
  @Nullable HolderTable plane(int slot) {
    if (slot < HolderTable.INLINE_SLOTS) {
      return table;
    }
    HolderTable[] w = wide;
    int p = slot / HolderTable.INLINE_SLOTS - 1;
    return p < w.length ? w[p] : null;
  }

  /** Where {@code slot}'s two bits sit in its plane's word. */
  static int shift(int slot) {
    return (slot & (HolderTable.INLINE_SLOTS - 1)) << 1;
  }

  /** Keys some slot holds, counted once per plane; consistent only under the write lock. */
  int liveKeys() {
    int n = table.liveKeys();
    for (HolderTable t : wide) {
      if (t != null) {
        n += t.liveKeys();
      }
    }
    return n;
  }

  /** Planes other than plane 0 that exist now (for tests). */
  int widePlanes() {
    int n = 0;
    for (HolderTable t : wide) {
      if (t != null) {
        n++;
      }
    }
    return n;
  }

  private HolderTable widePlaneForWrite(int slot) {
    HolderTable[] w = wide;
    int p = slot / HolderTable.INLINE_SLOTS - 1;
    if (p < w.length && w[p] != null) {
      return w[p];
    }
    HolderTable[] c = Arrays.copyOf(w, Math.max(w.length, p + 1));
    HolderTable t = new HolderTable();
    c[p] = t;
    wide = c;
    return t;
  }

  private void dropWidePlane(int slot) {
    HolderTable[] c = wide.clone();
    c[slot / HolderTable.INLINE_SLOTS - 1] = null;
    wide = c;
  }
}
