package io.epp4j.kvevents;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.Arrays;
import org.jspecify.annotations.Nullable;

/**
 * Holds the index assumes before the engine confirms them: a request just sent to an endpoint
 * will cache its prefix there, so for a short TTL the index counts those blocks as held on GPU
 * and a burst with the same new prefix follows the first request. Entries go when the real
 * {@code BlockStored} arrives, when their TTL passes, or oldest first beyond the cap.
 *
 * <p>Layout: per endpoint slot a primitive {@link HolderTable} of key → expiry (read lock-free,
 * like the holder planes), a ring of every recorded (key, slot, expiry) in the order recorded
 * (which is expiry order: the TTL is fixed), and counters of ring entries by a hash of the key,
 * so that a walk asks an endpoint's table only about keys some endpoint may hold speculatively.
 * A counter is never below the live holders of the keys that share it (it counts ring entries,
 * refreshed and confirmed ones included, and falls as they leave the ring), so a zero is
 * certain. Writers (routes recording, events confirming, purges) take one lock for a batch of
 * keys: a record costs a probe of the endpoint's own table and of its speculative table, and a
 * counter, per block, and allocates nothing.
 */
final class SpeculativeHolds {
  /** Added to an expiry before it is stored: zero marks an absent key in a {@link HolderTable}. */
  private static final long TIME_OFFSET = Long.MIN_VALUE;
  private static final int MIN_RING = 1024;
  private static final VarHandle COUNT = MethodHandles.arrayElementVarHandle(int[].class);

  private final long ttlNanos;
  private final int maxEntries;
  private final KvEventMetrics metrics;
  private final Object lock = new Object();
  /** Each slot's key → stored expiry; null until the slot records. Copied on write. */
  private volatile @Nullable HolderTable[] bySlot = new HolderTable[0];
  /** Ring entries by a hash of their key; written under {@link #lock}, read lock-free. */
  private final int[] counts;
  private final int countsMask;
  // the ring, oldest at head; written under the lock
  private long[] ringKeys = new long[0];
  private int[] ringSlots = new int[0];
  private long[] ringExpiries = new long[0];
  private int head;
  /** Ring entries; read without the lock by {@link #any()}. */
  private volatile int size;

  SpeculativeHolds(long ttlNanos, int maxEntries, KvEventMetrics metrics) {
    this.ttlNanos = ttlNanos;
    this.maxEntries = maxEntries;
    this.metrics = metrics;
    // as many counters as entries up to 65,536 (256 KiB, kept in the caches by the walks)
    int n = Integer.highestOneBit(Math.max(64, Math.min(1 << 16, maxEntries)) * 2 - 1);
    this.counts = new int[n];
    this.countsMask = n - 1;
  }

  private int counter(long key) {
    long h = key * 0x9E3779B97F4A7C15L;
    return (int) (h >>> 40) & countsMask;
  }

  /** Whether speculation is switched on (a positive TTL). */
  boolean enabled() {
    return ttlNanos > 0;
  }

  /** Whether any entry may exist; lets readers skip the tables when speculation is idle. */
  boolean any() {
    return size > 0;
  }

  /** Whether some slot may hold {@code key} speculatively; false is certain. Lock-free. */
  boolean mayHold(long key) {
    return (int) COUNT.getAcquire(counts, counter(key)) != 0;
  }

  /**
   * Records {@code keys[from, to)} as held by {@code slot} until {@code nowNanos + ttl},
   * skipping those the endpoint holds for real ({@code own}: its own key → tier table), evicting
   * the oldest entries beyond the cap.
   */
  void record(HolderTable own, int slot, long[] keys, int from, int to, long nowNanos) {
    record(own, null, slot, keys, from, to, nowNanos);
  }

  /**
   * {@link #record(HolderTable, int, long[], int, int, long)} for an endpoint with window groups
   * ({@code windows}, or null): a key it holds for real is recorded unless they all hold it too.
   */
  void record(HolderTable own, @Nullable WindowGroups windows, int slot, long[] keys, int from,
      int to, long nowNanos) {
    long expiry = nowNanos + ttlNanos;
    long stored = stored(expiry);
    int recorded = 0;
    synchronized (lock) {
      purgeLocked(nowNanos);
      HolderTable t = tableForWrite(slot);
      for (int i = from; i < to; i++) {
        long key = keys[i];
        if (own.get(key) != 0 && (windows == null || windows.allHold(key))) {
          continue; // already known for real, by the window groups too
        }
        if (size == maxEntries) {
          popLocked(); // the oldest goes, expired or not
        }
        push(key, slot, expiry); // counted first: a zero counter never hides an entry
        t.put(key, stored);
        recorded++;
      }
    }
    metrics.speculativeBlocks.add(recorded);
  }

  /** Drops entries whose TTL has passed. */
  void purge(long nowNanos) {
    if (size == 0) {
      return;
    }
    synchronized (lock) {
      purgeLocked(nowNanos);
    }
  }

  /**
   * The engine confirmed {@code keys[0, n)} on {@code slot}: their speculative entries there go
   * (their ring entries leave in turn, finding nothing to remove).
   */
  void confirm(int slot, long[] keys, int n) {
    HolderTable[] bs = bySlot;
    if (slot >= bs.length || bs[slot] == null) {
      return;
    }
    synchronized (lock) {
      HolderTable t = bySlot[slot];
      if (t == null) {
        return;
      }
      for (int i = 0; i < n; i++) {
        t.andNot(keys[i], -1L);
      }
    }
  }

  /** {@code slot}'s endpoint is gone: its entries go now (their ring entries leave in turn). */
  void dropSlot(int slot) {
    synchronized (lock) {
      HolderTable[] bs = bySlot;
      if (slot < bs.length && bs[slot] != null) {
        HolderTable[] c = bs.clone();
        c[slot] = null;
        bySlot = c;
      }
    }
  }

  /** Whether {@code slot} holds {@code key} speculatively at {@code nowNanos}. Lock-free. */
  boolean holds(long key, int slot, long nowNanos) {
    HolderTable[] bs = bySlot;
    HolderTable t = slot >= 0 && slot < bs.length ? bs[slot] : null;
    if (t == null) {
      return false;
    }
    long v = t.get(key);
    return v != 0 && v - TIME_OFFSET > nowNanos;
  }

  private HolderTable tableForWrite(int slot) {
    HolderTable[] bs = bySlot;
    if (slot < bs.length && bs[slot] != null) {
      return bs[slot];
    }
    HolderTable[] c = Arrays.copyOf(bs, Math.max(bs.length, slot + 1));
    HolderTable t = new HolderTable();
    c[slot] = t;
    bySlot = c;
    return t;
  }

  private void purgeLocked(long nowNanos) {
    while (size > 0 && ringExpiries[head] <= nowNanos) {
      popLocked();
    }
  }

  private void push(long key, int slot, long expiry) {
    if (size == ringKeys.length) {
      grow();
    }
    int at = head + size;
    if (at >= ringKeys.length) {
      at -= ringKeys.length;
    }
    ringKeys[at] = key;
    ringSlots[at] = slot;
    ringExpiries[at] = expiry;
    size++;
    int c = counter(key);
    COUNT.setRelease(counts, c, counts[c] + 1);
  }

  /**
   * Takes the oldest ring entry: its slot's entry for the key goes unless it was recorded again
   * since (a later expiry), and the key's count falls by one.
   */
  private void popLocked() {
    int at = head;
    long key = ringKeys[at];
    int slot = ringSlots[at];
    long expiry = ringExpiries[at];
    head = at + 1 == ringKeys.length ? 0 : at + 1;
    size--;
    HolderTable[] bs = bySlot;
    HolderTable t = slot < bs.length ? bs[slot] : null;
    if (t != null) {
      // stored words order as unsigned numbers the way expiries order as signed ones
      t.removeIfAtMostUnsigned(key, stored(expiry));
    }
    int c = counter(key);
    COUNT.setRelease(counts, c, counts[c] - 1);
  }

  private void grow() {
    int n = ringKeys.length;
    int cap = Math.min(maxEntries, Math.max(MIN_RING, n * 2));
    long[] k = new long[cap];
    int[] s = new int[cap];
    long[] e = new long[cap];
    for (int i = 0; i < size; i++) {
      int from = head + i < n ? head + i : head + i - n;
      k[i] = ringKeys[from];
      s[i] = ringSlots[from];
      e[i] = ringExpiries[from];
    }
    ringKeys = k;
    ringSlots = s;
    ringExpiries = e;
    head = 0;
  }

  private static long stored(long expiry) {
    long v = expiry + TIME_OFFSET;
    return v == 0 ? 1 : v; // only the expiry Long.MIN_VALUE: kept a nanosecond later
  }
}
