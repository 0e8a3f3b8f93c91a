package io.epp4j.kvevents;

import java.net.UnknownHostException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A DNS lookup that hangs until the test answers it: {@link #hold} blocks the looking-up thread
 * until {@link #answer}, and fails the lookup as unanswered after 60 s.
 */
final class HeldLookup {
  /** Counted down once a lookup is held. */
  final CountDownLatch started = new CountDownLatch(1);
  private final CountDownLatch answered = new CountDownLatch(1);

  /** Holds the calling lookup of {@code host} until {@link #answer}. */
  void hold(String host) throws UnknownHostException {
    started.countDown();
    try {
      if (!answered.await(60, TimeUnit.SECONDS)) {
        throw new UnknownHostException(host + ": no answer");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new UnknownHostException(host + ": interrupted");
    }
  }

  /** Whether the held lookup is still waiting for its answer. */
  boolean waiting() {
    return answered.getCount() > 0;
  }

  /** Lets the held lookup go on. */
  void answer() {
    answered.countDown();
  }
}
