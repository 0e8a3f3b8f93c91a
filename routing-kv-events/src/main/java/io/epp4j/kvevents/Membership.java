package io.epp4j.kvevents;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.jspecify.annotations.Nullable;

/**
 * The pool as a {@link KvEventSubscriber} sees it, and the one door through which the
 * subscriber writes to its {@link KvBlockIndex}: a batch is applied, and an endpoint resynced,
 * only while the stream it came from belongs to the endpoint's current membership.
 *
 * <p>A membership is an object made fresh for every add, so a stream opened for an earlier
 * membership of the same endpoint id is told apart from the current one.
 *
 * <p>Threading: {@link #add} and {@link #remove} come from any thread (the router's pool
 * listener); {@link #applyIfCurrent} and {@link #resyncIfCurrent} from the subscriber thread.
 * All four hold one lock, from the membership check to the end of the index write, so a removal
 * waits for at most one batch (with the index's drop listeners it calls, which run under the
 * index's own lock anyway) and every write after it sees the endpoint gone. The subscriber
 * holds it per batch only, never through a replay's wait, which keeps that wait short.
 * {@link #isCurrent} reads without the lock and serves only to find or open a stream, never to
 * decide whether a batch is applied.
 */
final class Membership {
  private final KvBlockIndex index;
  private final KvEventMetrics metrics;
  /** Endpoint id → its current membership. Changed only under {@link #lock}. */
  private final Map<String, Object> members = new ConcurrentHashMap<>();
  private final Object lock = new Object();

  Membership(KvBlockIndex index) {
    this.index = index;
    this.metrics = index.metrics();
  }

  /** Adds {@code id} to the pool; its new membership, or null when it is already a member. */
  @Nullable Object add(String id) {
    Object member = new Object();
    synchronized (lock) {
      return members.putIfAbsent(id, member) == null ? member : null;
    }
  }

  /**
   * Takes {@code id} out of the pool and forgets its blocks in the index; the membership it
   * had, or null when it was not a member.
   */
  @Nullable Object remove(String id) {
    synchronized (lock) {
      Object member = members.remove(id);
      if (member != null) {
        // under the lock: no write of this endpoint can come between the two
        index.removeEndpoint(id);
      }
      return member;
    }
  }

  /** The current membership of {@code id}, or null; read without the lock. */
  @Nullable Object current(String id) {
    return members.get(id);
  }

  /** Whether {@code member} is still the current membership of {@code id}; without the lock. */
  boolean isCurrent(String id, Object member) {
    return members.get(id) == member;
  }

  /**
   * Applies {@code batch} for {@code id} when {@code member} is still its membership; otherwise
   * counts it in {@link KvEventMetrics#unknownEndpointMessages()} and drops it.
   */
  void applyIfCurrent(String id, Object member, KvEventBatch batch) {
    synchronized (lock) {
      if (members.get(id) != member) {
        // the endpoint left (perhaps while this batch waited in a queue): applying it would
        // recreate the state its removal freed, and an id that never returns is never freed
        metrics.unknownEndpointMessages.increment();
        return;
      }
      index.apply(id, batch);
    }
  }

  /**
   * Drops the entries of an endpoint whose engine restarted, unless {@code member} has left the
   * pool ({@link KvBlockIndex#engineRestarted}).
   */
  void restartedIfCurrent(String id, Object member) {
    synchronized (lock) {
      if (members.get(id) == member) {
        index.engineRestarted(id);
      }
    }
  }

  /** Drops the endpoint's entries to start over, unless {@code member} has left the pool. */
  void resyncIfCurrent(String id, Object member) {
    synchronized (lock) {
      if (members.get(id) == member) {
        index.resync(id);
      }
    }
  }
}
