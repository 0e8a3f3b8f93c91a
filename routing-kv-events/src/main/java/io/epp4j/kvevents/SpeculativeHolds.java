package io.epp4j.kvevents;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Holds the index assumes before the engine confirms them: a request just sent to an endpoint
 * will cache its prefix there, so for a short TTL the index counts those blocks as held on GPU
 * and a burst with the same new prefix follows the first request. Entries go when the real
 * {@code BlockStored} arrives, when their TTL passes, or oldest first beyond the cap. Lock-free.
 */
final class SpeculativeHolds {
  private final long ttlNanos;
  private final int maxEntries;
  private final KvEventMetrics metrics;
  /** key → speculative holders: pairs of (slot, expiry nanos). Copy-on-write. */
  final ConcurrentHashMap<Long, long[]> byKey = new ConcurrentHashMap<>();
  private final ConcurrentLinkedQueue<long[]> queue = new ConcurrentLinkedQueue<>();
  private final AtomicInteger count = new AtomicInteger();

  SpeculativeHolds(long ttlNanos, int maxEntries, KvEventMetrics metrics) {
    this.ttlNanos = ttlNanos;
    this.maxEntries = maxEntries;
    this.metrics = metrics;
  }

  /** Whether speculation is switched on (a positive TTL). */
  boolean enabled() {
    return ttlNanos > 0;
  }

  /** Whether any entry may exist; lets readers skip the map when speculation is idle. */
  boolean any() {
    return count.get() > 0;
  }

  /**
   * Records {@code keys} (up to the cap) as held by {@code slot} until {@code nowNanos + ttl},
   * skipping those {@code holders} already has for real, then evicts the oldest beyond the cap.
   */
  void record(Holders holders, int slot, long[] keys, long nowNanos) {
    purge(nowNanos);
    long expiry = nowNanos + ttlNanos;
    int n = Math.min(keys.length, maxEntries);
    for (int i = 0; i < n; i++) {
      long key = keys[i];
      if (holders.bits(key, slot) != 0) {
        continue; // already known for real
      }
      byKey.compute(key, (k, arr) -> SlotTimes.put(arr, slot, expiry));
      queue.add(new long[] {key, slot, expiry});
      count.incrementAndGet();
      metrics.speculativeBlocks.increment();
    }
    while (count.get() > maxEntries) {
      long[] old = queue.poll();
      if (old == null) {
        break;
      }
      count.decrementAndGet();
      remove(old[0], (int) old[1], old[2]);
    }
  }

  /** Drops entries whose TTL has passed. */
  void purge(long nowNanos) {
    for (;;) {
      long[] head = queue.peek();
      if (head == null || head[2] > nowNanos) {
        return;
      }
      if (queue.remove(head)) {
        count.decrementAndGet();
        remove(head[0], (int) head[1], head[2]);
      }
    }
  }

  /** Removes the entry of {@code slot} on {@code key} if it expires by {@code upTo}. */
  void remove(long key, int slot, long upTo) {
    byKey.computeIfPresent(key, (k, arr) -> SlotTimes.removeUpTo(arr, slot, upTo));
  }

  /** Whether {@code slot} holds {@code key} speculatively at {@code nowNanos}. */
  boolean holds(long key, int slot, long nowNanos) {
    if (count.get() > 0) {
      long[] sp = byKey.get(key);
      return sp != null && holds(sp, slot, nowNanos);
    }
    return false;
  }

  /** Whether the (slot, expiry) pairs {@code sp} hold {@code slot} at {@code nowNanos}. */
  static boolean holds(long[] sp, int slot, long nowNanos) {
    for (int j = 0; j < sp.length; j += 2) {
      if (sp[j] == slot && sp[j + 1] > nowNanos) {
        return true;
      }
    }
    return false;
  }
}
