package io.epp4j.envoy;

/**
 * How many {@code Process} streams are open, so that a shutdown can wait until the requests in
 * flight have been answered. Health-check streams are not counted: a {@code Watch} never ends by
 * itself and must not hold a drain up. Thread-safe.
 */
final class LiveStreams {
  private int open;
  /** The streams open now, for the renewal of their decisions. */
  private final java.util.Set<ProcessStream> streams =
      java.util.concurrent.ConcurrentHashMap.newKeySet();

  synchronized void opened(ProcessStream stream) {
    open++;
    streams.add(stream);
  }

  /** Called exactly once per opened stream. */
  synchronized void closed(ProcessStream stream) {
    streams.remove(stream);
    if (--open == 0) {
      notifyAll();
    }
  }

  /**
   * Tells the decision of every open stream that its request is still being served (see
   * {@link ProcessStream#renewWhileOpen}).
   */
  void renewOpen() {
    for (ProcessStream s : streams) {
      s.renewWhileOpen();
    }
  }

  /**
   * Fails the decision of every stream still open (see {@link ProcessStream#abandon}): the
   * server has stopped and their answers cannot come through it.
   */
  void abandonOpen() {
    for (ProcessStream s : streams) {
      s.abandon();
    }
  }

  synchronized int open() {
    return open;
  }

  /**
   * Waits until no stream is open or {@code nanos} have passed; whether none is open. Any
   * {@code nanos} up to {@code Long.MAX_VALUE} works: the deadline is compared by difference.
   */
  synchronized boolean awaitNone(long nanos) throws InterruptedException {
    long deadline = System.nanoTime() + nanos;
    while (open > 0) {
      long left = deadline - System.nanoTime();
      if (left <= 0) {
        return false;
      }
      wait(Math.max(1, left / 1_000_000));
    }
    return true;
  }
}
