package io.epp4j.redis;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.jspecify.annotations.Nullable;

/**
 * The bounded queue between the routing threads and the publisher: many producers, one
 * consumer, intrusive (each {@link Hint} is its own node) after Vyukov's MPSC queue. A producer
 * never waits and never retries: one increment of the size, one exchange of the tail, one
 * store; when the queue is full it counts the hint as dropped instead.
 *
 * <p>Two bounds, kept in one atomic word so that a producer still pays one increment: the number
 * of hints, and the number of block hashes they hold (a hint holds its prompt's hashes, up to
 * thousands for a long prompt, so a count of hints alone would bound memory only at the longest
 * prompts' size: gigabytes while Redis is away). The word holds the hints above bit
 * {@value #COUNT_SHIFT} and the blocks below it.
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

  /**
   * The count of hints takes the word's top 25 bits: twice the largest capacity, 2^24, so that
   * neither a full queue nor the producers past it between their increment and their decrement
   * carry out of the word (with 24 bits, a count of 2^24 read as 0 and the queue took hints
   * without bound).
   */
  static final int COUNT_SHIFT = 39;
  private static final long BLOCKS_MASK = (1L << COUNT_SHIFT) - 1;
  /**
   * Largest bound on blocks: far enough below the word's {@value #COUNT_SHIFT} bits that the
   * producers between their increment and their decrement cannot carry into the count.
   */
  static final long MAX_BLOCKS = 1L << 36;

  private final int capacity;
  private final long maxBlocks;
  // hints << COUNT_SHIFT | blocks, of the hints counted in and not yet taken
  private final AtomicLong size = new AtomicLong();
  private final AtomicReference<Hint> tail;
  // consumer only: the last node taken (a sentinel at first)
  private Hint head;

  HintQueue(int capacity) {
    this(capacity, MAX_BLOCKS);
  }

  /**
   * A queue of at most {@code capacity} hints (≤ 2^24) holding at most {@code maxBlocks} block
   * hashes in all (≤ {@link #MAX_BLOCKS}).
   */
  HintQueue(int capacity, long maxBlocks) {
    if (capacity < 1 || capacity > 1 << 24 || maxBlocks < 1 || maxBlocks > MAX_BLOCKS) {
      throw new IllegalArgumentException("capacity " + capacity + ", maxBlocks " + maxBlocks);
    }
    this.capacity = capacity;
    this.maxBlocks = maxBlocks;
    Hint sentinel = new Hint(0, "", null, null, null);
    this.head = sentinel;
    this.tail = new AtomicReference<>(sentinel);
  }

  /** The block hashes a hint holds, as the queue counts them. */
  static int blocksOf(Hint h) {
    return h.blocks == null ? 0 : h.blocks.size();
  }

  /**
   * Queues {@code h} unless the queue is full, by hints or by block hashes; returns whether it
   * was queued.
   */
  boolean offer(Hint h) {
    // counted before it is linked, so the consumer never finds more than the bounds
    long delta = (1L << COUNT_SHIFT) | blocksOf(h);
    long v = size.addAndGet(delta);
    if ((v >>> COUNT_SHIFT) > capacity || (v & BLOCKS_MASK) > maxBlocks) {
      size.addAndGet(-delta);
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

  /**
   * The newest hint queued so far (the last one taken, or a sentinel, when none is waiting): a
   * mark for {@link #poll(Hint)}, which takes no hint queued after this call.
   */
  Hint newest() {
    return java.util.Objects.requireNonNull(tail.get()); // never null: a sentinel at first
  }

  /**
   * As {@link #poll()}, but null once {@code upTo}, a {@link #newest()} of this queue, has been
   * taken: the hints queued after the mark wait for a later call. Consumer thread only.
   */
  @Nullable Hint poll(Hint upTo) {
    return head == upTo ? null : poll();
  }

  /**
   * Gives back {@code n} places and {@code blocks} block hashes after the consumer took that many
   * hints holding that many ({@link #blocksOf} of each).
   */
  void taken(int n, long blocks) {
    if (n > 0) {
      size.addAndGet(-(((long) n << COUNT_SHIFT) + blocks));
    }
  }

  /** Most hints the queue holds. */
  int capacity() {
    return capacity;
  }

  /** Most block hashes the queued hints may hold in all. */
  long maxBlocks() {
    return maxBlocks;
  }

  /** Hints queued. */
  int size() {
    return (int) (size.get() >>> COUNT_SHIFT);
  }

  /** Block hashes the queued hints hold. */
  long blocks() {
    return size.get() & BLOCKS_MASK;
  }
}
