package io.epp4j.sim;

import java.util.ArrayDeque;

/**
 * Bytes of request bodies the emulator may hold at once, over every connection of every replica
 * of one {@code serve}. A request reserves its body's bytes (its {@code Content-Length}, or the
 * largest body for a chunked one) before the body is read, and gives them back once the body has
 * been parsed (a request pipelined behind others on its connection is parsed as soon as it is
 * read, not when its turn comes). A request that does not fit waits, first come first served, its connection not
 * read meanwhile (TCP's flow control then holds its client back): vLLM's server reads any body
 * and refuses none for this, so waiting is the answer closest to it, and the heap stays bounded
 * however many clients send large bodies at once.
 *
 * <p>Thread-safe: connections on different I/O threads share it. Reservations are whole bodies,
 * never parts, so no two half-read bodies can wait for each other.
 */
final class BodyBudget {
  /** The default bound: four bodies of the largest size. */
  static final long DEFAULT_BYTES = 4L * EmulatedServer.MAX_BODY_BYTES;
  /** The smallest bound: one body of the largest size, which must always fit. */
  static final long MIN_BYTES = EmulatedServer.MAX_BODY_BYTES;

  /** A request waiting for its reservation. */
  interface Waiter {
    /** The bytes it waits for. */
    long need();

    /** Its bytes are reserved now; called under the budget's lock, so it must not block. */
    void granted();
  }

  private final long limit;
  private final ArrayDeque<Waiter> waiters = new ArrayDeque<>();
  private long held;

  BodyBudget(long limit) {
    if (limit < MIN_BYTES) {
      throw new IllegalArgumentException("a body budget below one largest body ("
          + MIN_BYTES + " bytes) would leave such a body waiting forever, got " + limit);
    }
    this.limit = limit;
  }

  long limit() {
    return limit;
  }

  /** Bytes reserved now. */
  synchronized long held() {
    return held;
  }

  /**
   * Reserves {@code waiter.need()} bytes if they fit and no one waits before it; else queues it,
   * to be {@link Waiter#granted() granted} when they do.
   *
   * @return whether the bytes are reserved now
   */
  synchronized boolean reserveOrWait(Waiter waiter) {
    long need = waiter.need();
    if (waiters.isEmpty() && held + need <= limit) {
      held += need;
      return true;
    }
    waiters.add(waiter);
    return false;
  }

  /**
   * Forgets a waiter whose connection closed.
   *
   * @return false when it was granted already (its reservation is then its own to release)
   */
  synchronized boolean cancel(Waiter waiter) {
    boolean removed = waiters.remove(waiter);
    if (removed) {
      grant();
    }
    return removed;
  }

  /** Gives back {@code bytes} reserved before, and grants the waiters that fit now, in order. */
  synchronized void release(long bytes) {
    if (bytes <= 0) {
      return;
    }
    held -= bytes;
    grant();
  }

  private void grant() {
    while (!waiters.isEmpty() && held + waiters.peek().need() <= limit) {
      Waiter w = waiters.poll();
      held += w.need();
      w.granted();
    }
  }
}
