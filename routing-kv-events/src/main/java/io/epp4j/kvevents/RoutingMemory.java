package io.epp4j.kvevents;

import java.util.concurrent.ConcurrentHashMap;

/**
 * The router's own memory of which block keys it sent to which endpoint, as the approximate
 * prefix cache keeps it: per endpoint a bounded, least-recently-routed-first record, plus a
 * primitive key → last-routed-time table read lock-free. Blocks of one request are recorded tail
 * first, so under pressure the start of a prefix is forgotten last, matching vLLM, which evicts
 * the tail of a freed chain before its head.
 *
 * <p>Each endpoint has its own table (a {@link HolderTable} whose word is the time, offset so that
 * no realistic time is zero), written only under the endpoint's ring lock: a route costs one
 * probe per block and allocates nothing, where a shared map of boxed keys to copied
 * {@code (slot, time)} arrays cost an allocation and a boxed lookup per block.
 *
 * <p>Only endpoints added with {@link #addEndpoint} and not removed since are remembered:
 * recording never creates an endpoint, so a route that finishes after its endpoint left cannot
 * bring it back.
 */
final class RoutingMemory {
  /** Added to a time before it is stored: zero marks an absent key in a {@link HolderTable}. */
  private static final long TIME_OFFSET = Long.MIN_VALUE;

  private final ConcurrentHashMap<String, Ring> rings = new ConcurrentHashMap<>();
  private final int capacity;
  private final long ttlNanos;

  /**
   * Per-endpoint ring of (key, time) records, oldest first, and the table of each key's latest
   * time; guarded by itself (readers of the table excepted).
   */
  private static final class Ring {
    final long[] keys;
    final long[] times;
    /** Replaced on clear, so a reader sees the old contents or none, never a half-emptied table. */
    volatile HolderTable latest = new HolderTable();
    int head;
    int size;
    /** Set once the ring left the map; a recorder still holding it must not add entries. */
    boolean removed;

    Ring(int capacity) {
      this.keys = new long[capacity];
      this.times = new long[capacity];
    }
  }

  RoutingMemory(int capacityPerEndpoint, long ttlNanos) {
    this.capacity = capacityPerEndpoint;
    this.ttlNanos = ttlNanos;
  }

  /** Starts remembering routes to {@code endpointId} (no-op if it is already remembered). */
  void addEndpoint(String endpointId) {
    rings.computeIfAbsent(endpointId, k -> new Ring(capacity));
  }

  /** Records that {@code keys} were sent to {@code endpointId}; ignored for unknown endpoints. */
  void record(String endpointId, long[] keys, long now) {
    Ring r = rings.get(endpointId);
    if (r == null) {
      return;
    }
    long stored = stored(now);
    synchronized (r) {
      if (r.removed) {
        return; // removeEndpoint already swept this ring; entries added now would never go
      }
      HolderTable latest = r.latest;
      for (int i = Math.min(keys.length, capacity) - 1; i >= 0; i--) {
        long key = keys[i];
        if (r.size == capacity) {
          long oldKey = r.keys[r.head];
          long oldTime = r.times[r.head];
          r.head = (r.head + 1) % capacity;
          r.size--;
          forgetLocked(latest, oldKey, oldTime);
        }
        int at = (r.head + r.size) % capacity;
        r.keys[at] = key;
        r.times[at] = now;
        r.size++;
        latest.put(key, stored);
      }
    }
  }

  private static long stored(long time) {
    long v = time + TIME_OFFSET;
    return v == 0 ? 1 : v; // only time Long.MIN_VALUE: kept one nanosecond later
  }

  /** Removes {@code key} unless it was routed again after {@code time}. Ring lock held. */
  private static void forgetLocked(HolderTable latest, long key, long time) {
    long v = latest.get(key);
    if (v != 0 && v - TIME_OFFSET <= time) {
      latest.andNot(key, -1L);
    }
  }

  /** Consecutive blocks from block 0 routed to {@code endpointId} within the TTL. Lock-free. */
  int prefixLength(String endpointId, long[] keys, long now) {
    Ring r = rings.get(endpointId);
    if (r == null) {
      return 0;
    }
    HolderTable latest = r.latest;
    int n = 0;
    for (long key : keys) {
      long v = latest.get(key);
      if (v == 0 || now - (v - TIME_OFFSET) >= ttlNanos) {
        break;
      }
      n++;
    }
    return n;
  }

  /** Forgets that {@code key} was sent to {@code endpointId}, however recently. */
  void forget(String endpointId, long key) {
    Ring r = rings.get(endpointId);
    if (r != null) {
      synchronized (r) {
        r.latest.andNot(key, -1L);
      }
    }
  }

  int endpoints() {
    return rings.size();
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
    }
  }

  private static void clearLocked(Ring r) {
    r.latest = new HolderTable();
    r.size = 0;
    r.head = 0;
  }
}
