package io.epp4j.kvevents;

import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * The routing memory's documented behaviour written the plain way (boxed maps and a deque, one
 * lock over everything): the model {@link RoutingMemoryTest} checks {@link RoutingMemory} against.
 * Per endpoint, at most {@code capacity} distinct keys; a new key takes the place of the oldest
 * entry, and an oldest entry whose key was routed again since it was written goes back at the end
 * with its latest time instead; a forgotten key answers as absent and keeps its entry. A record
 * from block {@code from} on keeps those keys and the first; a lookup from block {@code from}
 * counts the blocks before it as held when the first key is remembered.
 */
final class RoutingMemoryReference {
  private final Map<String, Endpoint> endpoints = new HashMap<>();
  private final int capacity;
  private final long ttlNanos;

  private static final class Endpoint {
    final ArrayDeque<long[]> ring = new ArrayDeque<>(); // {key, time}, oldest first
    final Map<Long, Long> latest = new HashMap<>();
    final Set<Long> forgotten = new HashSet<>();
  }

  RoutingMemoryReference(int capacityPerEndpoint, long ttlNanos) {
    this.capacity = capacityPerEndpoint;
    this.ttlNanos = ttlNanos;
  }

  synchronized void addEndpoint(String endpointId) {
    endpoints.computeIfAbsent(endpointId, k -> new Endpoint());
  }

  synchronized void record(String endpointId, long[] keys, long now) {
    record(endpointId, keys, 0, now);
  }

  /**
   * Keys {@code from} on, the last first, then the first key alone when {@code from} > 0; at most
   * {@code capacity} keys in all.
   */
  synchronized void record(String endpointId, long[] keys, int from, long now) {
    Endpoint e = endpoints.get(endpointId);
    if (e == null || keys.length == 0) {
      return;
    }
    int start = Math.max(0, Math.min(from, keys.length));
    for (int i = Math.min(keys.length, start + capacity - (start > 0 ? 1 : 0)) - 1; i >= start;
        i--) {
      remember(e, keys[i], now);
    }
    if (start > 0) {
      remember(e, keys[0], now);
    }
  }

  /** Each of the first {@code capacity} keys, the last of them first. */
  synchronized void absorb(String endpointId, long[] keys, long now) {
    Endpoint e = endpoints.get(endpointId);
    if (e == null) {
      return;
    }
    for (int i = Math.min(keys.length, capacity) - 1; i >= 0; i--) {
      remember(e, keys[i], now);
    }
  }

  private void remember(Endpoint e, long key, long now) {
    boolean inRing = e.latest.containsKey(key);
    e.latest.put(key, now);
    e.forgotten.remove(key);
    if (inRing) {
      return;
    }
    while (e.ring.size() == capacity) {
      long[] oldest = e.ring.removeFirst();
      long latestTime = e.latest.get(oldest[0]);
      if (!e.forgotten.contains(oldest[0]) && latestTime > oldest[1]) {
        e.ring.addLast(new long[] {oldest[0], latestTime});
      } else {
        e.latest.remove(oldest[0]);
        e.forgotten.remove(oldest[0]);
      }
    }
    e.ring.addLast(new long[] {key, now});
  }

  synchronized int prefixLength(String endpointId, long[] keys, long now) {
    return prefixLength(endpointId, keys, 0, now);
  }

  /**
   * 0 unless the first key is remembered; then {@code from} + the remembered keys from there on
   * ({@code from} 0: the remembered keys from the first).
   */
  synchronized int prefixLength(String endpointId, long[] keys, int from, long now) {
    Endpoint e = endpoints.get(endpointId);
    if (e == null || keys.length == 0 || !remembered(e, keys[0], now)) {
      return 0;
    }
    int n = Math.min(Math.max(from, 0), keys.length);
    while (n < keys.length && remembered(e, keys[n], now)) {
      n++;
    }
    return n;
  }

  private boolean remembered(Endpoint e, long key, long now) {
    Long t = e.latest.get(key);
    return t != null && !e.forgotten.contains(key) && now - t < ttlNanos;
  }

  synchronized void forget(String endpointId, long key) {
    Endpoint e = endpoints.get(endpointId);
    if (e != null && e.latest.containsKey(key)) {
      e.forgotten.add(key);
    }
  }

  synchronized int endpoints() {
    return endpoints.size();
  }

  synchronized void clear(String endpointId) {
    Endpoint e = endpoints.get(endpointId);
    if (e != null) {
      e.ring.clear();
      e.latest.clear();
      e.forgotten.clear();
    }
  }

  synchronized void removeEndpoint(String endpointId) {
    endpoints.remove(endpointId);
  }

  /** Distinct keys remembered for {@code endpointId} (forgotten ones included until evicted). */
  synchronized int size(String endpointId) {
    Endpoint e = endpoints.get(endpointId);
    return e == null ? 0 : e.ring.size();
  }
}
