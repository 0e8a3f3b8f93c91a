package io.epp4j.kvevents;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The routing memory as it was first written (a shared map of boxed keys to copy-on-write
 * {@code (slot, time)} arrays): the model {@link RoutingMemoryTest} checks {@link RoutingMemory}
 * against.
 */
final class RoutingMemoryReference {
  private final ConcurrentHashMap<Long, long[]> routed = new ConcurrentHashMap<>();
  private final ConcurrentHashMap<String, Ring> rings = new ConcurrentHashMap<>();
  private final AtomicInteger nextSlot = new AtomicInteger();
  private final int capacity;
  private final long ttlNanos;

  /** Per-endpoint ring of (key, time) records, oldest first; guarded by itself. */
  private static final class Ring {
    final int slot;
    final long[] keys;
    final long[] times;
    int head;
    int size;
    /** Set once the ring left the map; a recorder still holding it must not add entries. */
    boolean removed;

    Ring(int slot, int capacity) {
      this.slot = slot;
      this.keys = new long[capacity];
      this.times = new long[capacity];
    }
  }

  RoutingMemoryReference(int capacityPerEndpoint, long ttlNanos) {
    this.capacity = capacityPerEndpoint;
    this.ttlNanos = ttlNanos;
  }

  /** Starts remembering routes to {@code endpointId} (no-op if it is already remembered). */
  void addEndpoint(String endpointId) {
    rings.computeIfAbsent(endpointId, k -> new Ring(nextSlot.getAndIncrement(), capacity));
  }

  /** Records that {@code keys} were sent to {@code endpointId}; ignored for unknown endpoints. */
  void record(String endpointId, long[] keys, long now) {
    Ring r = rings.get(endpointId);
    if (r == null) {
      return;
    }
    int slot = r.slot;
    synchronized (r) {
      if (r.removed) {
        return; // removeEndpoint already swept this ring; entries added now would never go
      }
      for (int i = Math.min(keys.length, capacity) - 1; i >= 0; i--) {
        long key = keys[i];
        if (r.size == capacity) {
          long oldKey = r.keys[r.head];
          long oldTime = r.times[r.head];
          r.head = (r.head + 1) % capacity;
          r.size--;
          forget(oldKey, slot, oldTime);
        }
        int at = (r.head + r.size) % capacity;
        r.keys[at] = key;
        r.times[at] = now;
        r.size++;
        routed.compute(key, (k, arr) -> SlotTimes.put(arr, slot, now));
      }
    }
  }

  /** Removes (key, slot) unless it was routed again after {@code time}. */
  private void forget(long key, int slot, long time) {
    routed.computeIfPresent(key, (k, arr) -> SlotTimes.removeUpTo(arr, slot, time));
  }

  /** Consecutive blocks from block 0 routed to {@code endpointId} within the TTL. Lock-free. */
  int prefixLength(String endpointId, long[] keys, long now) {
    Ring r = rings.get(endpointId);
    if (r == null) {
      return 0;
    }
    int slot = r.slot;
    int n = 0;
    outer:
    for (long key : keys) {
      long[] arr = routed.get(key);
      if (arr != null) {
        for (int j = 0; j < arr.length; j += 2) {
          if (arr[j] == slot && now - arr[j + 1] < ttlNanos) {
            n++;
            continue outer;
          }
        }
      }
      break;
    }
    return n;
  }

  /** Forgets that {@code key} was sent to {@code endpointId}, however recently. */
  void forget(String endpointId, long key) {
    Ring r = rings.get(endpointId);
    if (r != null) {
      forget(key, r.slot, Long.MAX_VALUE);
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

  private void clearLocked(Ring r) {
    for (int i = 0; i < r.size; i++) {
      forget(r.keys[(r.head + i) % capacity], r.slot, Long.MAX_VALUE);
    }
    r.size = 0;
    r.head = 0;
  }
}
