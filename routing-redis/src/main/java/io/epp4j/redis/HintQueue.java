package io.epp4j.redis;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.jspecify.annotations.Nullable;

/**
 * The bounded queue between the routing threads and the publisher: many producers, one
 * consumer, intrusive (each {@link Hint} is its own node) after Vyukov's MPSC queue. A producer
 * never waits and never retries: one increment of the size, one exchange of the tail, one
 * store; when the queue is full it counts the hint as dropped instead.
 */
final class HintQueue {
  // Hint.next, written with no more ordering than each write needs: a volatile store is a full
  // fence, which the routing thread would pay on every route
  private static final VarHandle NEXT;

  static {
    try {
      NEXT = MethodHandles.lookup().findVarHandle(Hint.class, "next", Hint.class);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  private final int capacity;
  private final AtomicInteger size = new AtomicInteger();
  private final AtomicReference<Hint> tail;
  // consumer only: the last node taken (a sentinel at first)
  private Hint head;

  HintQueue(int capacity) {
    this.capacity = capacity;
    Hint sentinel = new Hint(0, "", null, null, null);
    this.head = sentinel;
    this.tail = new AtomicReference<>(sentinel);
  }

  /** Queues {@code h} unless the queue is full; returns whether it was queued. */
  boolean offer(Hint h) {
    // counted before it is linked, so the consumer never finds more than the bound
    if (size.incrementAndGet() > capacity) {
      size.decrementAndGet();
      return false;
    }
    Hint prev = tail.getAndSet(h);
    // release: the consumer's volatile read of next then sees the hint's fields
    NEXT.setRelease(prev, h);
    return true;
  }

  /**
   * The oldest hint, or null when none is linked yet (a producer between its exchange and its
   * store is picked up by the next poll). Consumer thread only; call {@link #taken} after a run
   * of polls.
   */
  @Nullable Hint poll() {
    Hint n = head.next;
    if (n == null) {
      return null;
    }
    // the old head is garbage now: do not let it keep the chain alive; no producer writes it
    // again, so a plain store will do
    NEXT.set(head, null);
    head = n;
    return n;
  }

  /** Gives back {@code n} places after the consumer took that many hints. */
  void taken(int n) {
    if (n > 0) {
      size.addAndGet(-n);
    }
  }

  int size() {
    return size.get();
  }
}
