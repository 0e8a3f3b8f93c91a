package io.epp4j.kvevents;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The router's own memory of which block keys it sent to which endpoint, as the approximate
 * prefix cache keeps it: per endpoint at most {@code capacity} distinct blocks, about the least
 * recently routed first out (see below), plus a primitive key → last-routed-time table read
 * lock-free. Blocks of one request are recorded tail first, so under pressure the start of a
 * prefix is forgotten last, matching vLLM, which evicts the tail of a freed chain before its
 * head. A record may start past the blocks the endpoint reports holding (the caller counts those
 * from the engine's report at lookup); it then keeps the chain's first key too, which the
 * lookups and the directory below go by.
 *
 * <p>Each endpoint has its own table (a {@link HolderTable} whose word is the time, offset so that
 * no realistic time is zero) and a ring holding each remembered key once, in the order it was
 * first routed; both are written only under the endpoint's ring lock. A key routed again only
 * has its time replaced in the table, in place (one probe). When a new key needs room, the ring's
 * oldest entry goes unless its key was routed again since the entry was written: such a key gets
 * a second chance at the ring's end with its latest time (the CLOCK approximation of LRU). So a
 * prefix that every request repeats takes its blocks' worth of room once, not once per request,
 * and a route of a prompt already remembered costs one table probe per block.
 *
 * <p>{@link #forget} (the engine reported the block removed) marks the key's word as forgotten
 * instead of deleting it, so that its ring entry stays the only one: routed again, the key is
 * remembered in place; reached at the ring's head, it goes.
 *
 * <p>A lookup on an endpoint that was never sent a chain starting with the prompt's first key
 * reads one byte instead of probing the table: each ring counts, in a small filter, the entries
 * that were the first key of a recorded chain (written under the ring lock, read without it).
 * A count is exact until it saturates, after which it stays positive, so a zero never hides a
 * remembered first key. Chained keys make a chain's first key a first key in every chain that
 * holds it.
 *
 * <p>Across rings, a directory answers which rings may hold a chain's first key without reading
 * any ring: each ring has a number (a removed ring's number goes to the next ring added), and for
 * every filter slot one bit per ring number says whether that ring's count there is positive. The
 * bits follow the counts under each ring's lock (atomic updates of words shared by 64 rings), so
 * a clear bit is as certain as a zero count.
 *
 * <p>Only endpoints added with {@link #addEndpoint} and not removed since are remembered:
 * recording never creates an endpoint, so a route that finishes after its endpoint left cannot
 * bring it back.
 */
final class RoutingMemory {
  /** Added to a time before it is stored: zero marks an absent key in a {@link HolderTable}. */
  private static final long TIME_OFFSET = Long.MIN_VALUE;
  /** The word of a key the engine reported removed while its ring entry is still there. */
  private static final long FORGOTTEN = 1;
  private static final VarHandle COUNT = MethodHandles.arrayElementVarHandle(byte[].class);
  private static final VarHandle WORD = MethodHandles.arrayElementVarHandle(long[].class);
  private static final ThreadLocal<Ring[]> FOUND = ThreadLocal.withInitial(() -> new Ring[8]);
  private static final int MIN_FIRST_COUNTERS = 256;
  private static final int MAX_FIRST_COUNTERS = 1 << 14;
  /** Entries a ring has room for before it first grows (towards the capacity). */
  static final int INITIAL_RING = 64;

  private final ConcurrentHashMap<String, Ring> rings = new ConcurrentHashMap<>();
  private final int capacity;
  private final long ttlNanos;
  /** Filter slots per ring: the same for every ring of this memory. */
  private final int firstsCount;
  /** Guards the ring numbers, {@link #byNumber} and {@link #groups}. */
  private final Object numbering = new Object();
  private final java.util.BitSet numbersInUse = new java.util.BitSet();
  /** The ring holding each number, null for a free one; copied on write. */
  private volatile Ring[] byNumber = new Ring[0];
  /**
   * The directory: {@code groups[g][slot]} has bit {@code b} set while ring number
   * {@code 64g + b} counts a first key in filter slot {@code slot}. Groups are added, never
   * dropped; the array is copied on write.
   */
  private volatile long[][] groups = new long[0][];

  /**
   * Per-endpoint ring of (key, time) entries, each key at most once, oldest first, and the
   * table of each key's latest time; guarded by itself (readers of the table excepted).
   */
  private static final class Ring {
    final String endpointId;
    /** This ring's number in the directory, its group's words and its bit there. */
    final int number;
    final long[] dirWords;
    final long dirBit;
    // grown by doubling up to the capacity, as entries come: a capacity of millions must not be
    // allocated for every endpoint before anything is routed there
    long[] keys;
    long[] times;
    /** Bit per ring position: the entry there is counted in {@link #firsts}. */
    long[] firstBits;
    /** Replaced on clear, so a reader sees the old contents or none, never a half-emptied table. */
    volatile HolderTable latest = new HolderTable();
    /** Counts per slot of the entries that were a chain's first key; replaced on clear. */
    volatile byte[] firsts;
    final int firstsMask;
    int head;
    int size;
    /** Set once the ring left the map; a recorder still holding it must not add entries. */
    boolean removed;

    Ring(String endpointId, int capacity, int counters, int number, long[] dirWords) {
      this.endpointId = endpointId;
      this.number = number;
      this.dirWords = dirWords;
      this.dirBit = 1L << (number & 63);
      int length = Math.min(capacity, INITIAL_RING);
      this.keys = new long[length];
      this.times = new long[length];
      this.firstBits = new long[(length + 63) >>> 6];
      this.firsts = new byte[counters];
      this.firstsMask = counters - 1;
    }

    int firstSlot(long key) {
      return (int) (key >>> 40) & firstsMask;
    }

    /** Whether a chain starting with {@code key} may be remembered; false is certain. */
    boolean mayHoldFirst(long key) {
      return (byte) COUNT.getAcquire(firsts, firstSlot(key)) != 0;
    }

    /**
     * Makes room for one more entry, up to {@code capacity}: the entries move to the start of
     * arrays twice as long, in order. Ring lock held; called only when the ring is full.
     */
    void grow(int capacity) {
      int length = keys.length;
      int grown = (int) Math.min(capacity, 2L * length);
      long[] k = new long[grown];
      long[] t = new long[grown];
      long[] f = new long[(grown + 63) >>> 6];
      for (int i = 0; i < size; i++) {
        int at = head + i < length ? head + i : head + i - length;
        k[i] = keys[at];
        t[i] = times[at];
        if ((firstBits[at >>> 6] & (1L << at)) != 0) {
          f[i >>> 6] |= 1L << i;
        }
      }
      keys = k;
      times = t;
      firstBits = f;
      head = 0;
    }

    /** Adds (+1) or removes (-1) {@code key} from the counts. Ring lock held. */
    void countFirst(long key, int delta) {
      byte[] f = firsts;
      int slot = firstSlot(key);
      int c = f[slot] & 0xFF;
      if (c < 0xFF) { // a saturated count no longer knows its size; it stays
        if (c == 0 && delta > 0) {
          WORD.getAndBitwiseOr(dirWords, slot, dirBit); // before the count: never hides it
        }
        COUNT.setRelease(f, slot, (byte) (c + delta));
        if (c + delta == 0) {
          WORD.getAndBitwiseAnd(dirWords, slot, ~dirBit);
        }
      }
    }

    /** Clears this ring's directory bits for the counts of {@code f}. Ring lock held. */
    void clearDirectory(byte[] f) {
      for (int slot = 0; slot < f.length; slot++) {
        if (f[slot] != 0) {
          WORD.getAndBitwiseAnd(dirWords, slot, ~dirBit);
        }
      }
    }
  }

  RoutingMemory(int capacityPerEndpoint, long ttlNanos) {
    this.capacity = capacityPerEndpoint;
    this.ttlNanos = ttlNanos;
    this.firstsCount = Integer.highestOneBit(Math.max(MIN_FIRST_COUNTERS,
        Math.min(MAX_FIRST_COUNTERS, capacityPerEndpoint / 8)) * 2 - 1);
  }

  /** Starts remembering routes to {@code endpointId} (no-op if it is already remembered). */
  void addEndpoint(String endpointId) {
    rings.computeIfAbsent(endpointId, this::newRing);
  }

  /** A ring under the lowest free number, its directory group created if need be. */
  private Ring newRing(String endpointId) {
    synchronized (numbering) {
      int number = numbersInUse.nextClearBit(0);
      numbersInUse.set(number);
      int g = number >>> 6;
      long[][] gs = groups;
      if (g >= gs.length) {
        gs = java.util.Arrays.copyOf(gs, g + 1);
        gs[g] = new long[firstsCount];
        groups = gs;
      }
      Ring r = new Ring(endpointId, capacity, firstsCount, number, gs[g]);
      Ring[] bn = byNumber;
      if (number >= bn.length) {
        bn = java.util.Arrays.copyOf(bn, Math.max(number + 1, bn.length * 2));
      } else {
        bn = bn.clone();
      }
      bn[number] = r;
      byNumber = bn;
      return r;
    }
  }

  /** Frees a removed ring's number; its directory bits are already clear. */
  private void freeNumber(Ring r) {
    synchronized (numbering) {
      Ring[] bn = byNumber.clone();
      if (bn[r.number] == r) {
        bn[r.number] = null;
      }
      byNumber = bn;
      numbersInUse.clear(r.number);
    }
  }

  /**
   * Finds the endpoints that may remember a chain whose first key is {@code firstKey} (every one
   * that does, perhaps others) and returns how many; {@link #foundEndpoint} and
   * {@link #foundPrefixLength} read them, on this thread, until the next call. Reads one
   * directory word per 64 endpoints and nothing of theirs. Lock-free.
   */
  int ringsThatMayHoldFirst(long firstKey) {
    int slot = (int) (firstKey >>> 40) & (firstsCount - 1);
    long[][] gs = groups;
    Ring[] bn = byNumber;
    Ring[] out = FOUND.get();
    int n = 0;
    for (int g = 0; g < gs.length; g++) {
      long w = (long) WORD.getAcquire(gs[g], slot);
      while (w != 0) {
        int number = (g << 6) + Long.numberOfTrailingZeros(w);
        w &= w - 1;
        Ring r = number < bn.length ? bn[number] : null;
        if (r != null) {
          if (n == out.length) {
            out = java.util.Arrays.copyOf(out, n * 2);
            FOUND.set(out);
          }
          out[n++] = r;
        }
      }
    }
    for (int i = n; i < out.length && out[i] != null; i++) {
      out[i] = null; // an earlier lookup's rings, perhaps removed since, are not kept alive
    }
    return n;
  }

  /** The endpoint of the {@code i}-th ring the last {@link #ringsThatMayHoldFirst} found. */
  static String foundEndpoint(int i) {
    return FOUND.get()[i].endpointId;
  }

  /**
   * {@link #prefixLength(String, long[], int, long)} of the {@code i}-th endpoint the last
   * {@link #ringsThatMayHoldFirst} found on this thread, without looking it up: 0 once it left.
   */
  int foundPrefixLength(int i, long[] keys, int from, long now) {
    return prefixLength(FOUND.get()[i], keys, from, now);
  }

  /** Records that {@code keys} were sent to {@code endpointId}; ignored for unknown endpoints. */
  void record(String endpointId, long[] keys, long now) {
    record(endpointId, keys, 0, now);
  }

  /**
   * Records that {@code keys} were sent to {@code endpointId}, except the first {@code from},
   * which the endpoint reports holding already: only the chain's first key of those is kept, so
   * that the directory still names this endpoint for the chain. A lookup counts the held keys
   * from the engine's own report ({@link #prefixLength(String, long[], int, long)}), so remembering
   * them too would only cost room. Ignored for unknown endpoints.
   */
  void record(String endpointId, long[] keys, int from, long now) {
    Ring r = rings.get(endpointId);
    if (r == null || keys.length == 0) {
      return;
    }
    long stored = stored(now);
    int start = Math.max(0, Math.min(from, keys.length));
    synchronized (r) {
      if (r.removed) {
        return; // removeEndpoint already swept this ring; entries added now would never go
      }
      HolderTable latest = r.latest;
      // the tail first, so under pressure the chain's start goes last; at most capacity keys
      int last = Math.min(keys.length, start + capacity - (start > 0 ? 1 : 0)) - 1;
      for (int i = last; i >= start; i--) {
        rememberLocked(r, latest, keys[i], stored, now, i == 0);
      }
      if (start > 0) {
        rememberLocked(r, latest, keys[0], stored, now, true);
      }
    }
  }

  /**
   * Remembers {@code keys} as held by {@code endpointId} at {@code now}, each counted as a chain's
   * first key (which of them start a chain is not known, and the filter may only err towards
   * positive): blocks the index stopped knowing there without the engine's word, which the memory
   * vouches for from then on. At most {@code capacity} of them, in the order given.
   */
  void absorb(String endpointId, long[] keys, long now) {
    Ring r = rings.get(endpointId);
    if (r == null || keys.length == 0) {
      return;
    }
    long stored = stored(now);
    synchronized (r) {
      if (r.removed) {
        return;
      }
      HolderTable latest = r.latest;
      for (int i = Math.min(keys.length, capacity) - 1; i >= 0; i--) {
        rememberLocked(r, latest, keys[i], stored, now, true);
      }
    }
  }

  private void rememberLocked(Ring r, HolderTable latest, long key, long stored, long now,
      boolean first) {
    if (latest.replace(key, stored) != 0) {
      return; // remembered (or forgotten but still in the ring): its entry stays
    }
    while (r.size == capacity) {
      evictOrRequeue(r, latest);
    }
    if (r.size == r.keys.length) {
      r.grow(capacity);
    }
    push(r, key, now, first);
  }

  /**
   * Takes the ring's oldest entry: its key goes, unless it was routed again after the entry was
   * written, in which case it goes back at the end with its latest time. Ring lock held.
   */
  private void evictOrRequeue(Ring r, HolderTable latest) {
    int at = r.head;
    long key = r.keys[at];
    long time = r.times[at];
    boolean first = (r.firstBits[at >>> 6] & (1L << at)) != 0;
    r.firstBits[at >>> 6] &= ~(1L << at);
    r.head = at + 1 == r.keys.length ? 0 : at + 1;
    r.size--;
    // one probe: the key goes if it was forgotten or not routed since this entry was written
    // (stored words order as unsigned numbers the way times order as signed ones, and
    // FORGOTTEN is below every stored word)
    long entry = stored(time);
    long v = latest.removeIfAtMostUnsigned(key, entry);
    if (Long.compareUnsigned(v, entry) > 0) {
      pushCounted(r, key, v - TIME_OFFSET, first);
    } else if (first) {
      r.countFirst(key, -1);
    }
  }

  /** Appends an entry; a chain's first key is counted in the ring's filter. Ring lock held. */
  private void push(Ring r, long key, long time, boolean first) {
    if (first) {
      r.countFirst(key, +1);
    }
    pushCounted(r, key, time, first);
  }

  private void pushCounted(Ring r, long key, long time, boolean first) {
    int at = r.head + r.size;
    if (at >= r.keys.length) {
      at -= r.keys.length;
    }
    r.keys[at] = key;
    r.times[at] = time;
    if (first) {
      r.firstBits[at >>> 6] |= 1L << at;
    }
    r.size++;
  }

  private static long stored(long time) {
    long v = time + TIME_OFFSET;
    // only times Long.MIN_VALUE and MIN_VALUE + 1: kept a nanosecond or two later
    return v == 0 || v == FORGOTTEN ? FORGOTTEN + 1 : v;
  }

  /** Consecutive blocks from block 0 routed to {@code endpointId} within the TTL. Lock-free. */
  int prefixLength(String endpointId, long[] keys, long now) {
    return prefixLength(endpointId, keys, 0, now);
  }

  /**
   * For a prompt whose first {@code from} blocks {@code endpointId} holds (as its engine reports):
   * 0 unless the prompt's first block was routed there within the TTL (and not reported removed
   * since); else {@code from} + the consecutive blocks from block {@code from} routed there within
   * the TTL. With {@code from} 0, the consecutive blocks from block 0 routed there. Lock-free.
   */
  int prefixLength(String endpointId, long[] keys, int from, long now) {
    Ring r = rings.get(endpointId);
    if (r == null) {
      return 0;
    }
    return prefixLength(r, keys, from, now);
  }

  private int prefixLength(Ring r, long[] keys, int from, long now) {
    if (keys.length == 0 || !r.mayHoldFirst(keys[0])) {
      return 0;
    }
    HolderTable latest = r.latest;
    int n = 0;
    if (from > 0) {
      if (!remembered(latest.get(keys[0]), now)) {
        return 0;
      }
      n = Math.min(from, keys.length);
    }
    while (n < keys.length && remembered(latest.get(keys[n]), now)) {
      n++;
    }
    return n;
  }

  /** Whether a table word is a key routed within the TTL and not reported removed since. */
  private boolean remembered(long word, long now) {
    return word != 0 && word != FORGOTTEN && now - (word - TIME_OFFSET) < ttlNanos;
  }

  /** Forgets that {@code key} was sent to {@code endpointId}, however recently. */
  void forget(String endpointId, long key) {
    Ring r = rings.get(endpointId);
    if (r != null) {
      synchronized (r) {
        HolderTable latest = r.latest;
        if (latest.get(key) != 0) {
          latest.put(key, FORGOTTEN); // its ring entry removes it when reached
        }
      }
    }
  }

  /** Entries in {@code endpointId}'s ring (distinct keys); for tests. */
  int size(String endpointId) {
    Ring r = rings.get(endpointId);
    if (r == null) {
      return 0;
    }
    synchronized (r) {
      return r.size;
    }
  }

  int endpoints() {
    return rings.size();
  }

  /** Entries {@code endpointId}'s ring has room for now (it grows up to the capacity); for tests. */
  int allocated(String endpointId) {
    Ring r = rings.get(endpointId);
    if (r == null) {
      return 0;
    }
    synchronized (r) {
      return r.keys.length;
    }
  }

  /** Forgets everything sent to {@code endpointId} but keeps remembering new routes to it. */
  void clear(String endpointId) {
    Ring r = rings.get(endpointId);
    if (r != null) {
      synchronized (r) {
        clearLocked(r);
      }
    }
  }

  /** Forgets {@code endpointId} entirely (it left the pool). */
  void removeEndpoint(String endpointId) {
    Ring r = rings.remove(endpointId);
    if (r != null) {
      synchronized (r) {
        r.removed = true;
        clearLocked(r);
      }
      freeNumber(r);
    }
  }

  private static void clearLocked(Ring r) {
    r.clearDirectory(r.firsts);
    r.latest = new HolderTable();
    r.firsts = new byte[r.firsts.length];
    java.util.Arrays.fill(r.firstBits, 0L);
    r.size = 0;
    r.head = 0;
  }
}
