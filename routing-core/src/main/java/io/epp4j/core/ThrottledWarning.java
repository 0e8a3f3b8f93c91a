package io.epp4j.core;

import io.epp4j.api.RedactedException;
import io.epp4j.api.Ticker;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * One source of a warning that can repeat on every request (a plugin that keeps throwing, a
 * gateway that keeps dropping decisions). The first occurrence is logged, then at most one
 * record per {@link #INTERVAL_NANOS} saying how many were left out since the last one, so a
 * broken plugin on a busy router costs a stack trace a minute instead of one per request.
 * The cause is logged as a {@link RedactedException}: its class and stack frames, not its message,
 * which a plugin may have written from the request (a prompt).
 * Lock-free: losers of the race to log only bump a counter.
 */
final class ThrottledWarning {
  static final long INTERVAL_NANOS = TimeUnit.MINUTES.toNanos(1);
  private static final long NEVER = Long.MIN_VALUE;

  private final Logger log;
  private final Ticker ticker;
  private final String source;
  private final AtomicLong nextReport = new AtomicLong(NEVER);
  private final AtomicLong suppressed = new AtomicLong();

  /**
   * @param source names the culprit in every record, e.g. {@code scorer 'prefix-cache-scorer'};
   *     it must not carry request content
   */
  ThrottledWarning(Logger log, Ticker ticker, String source) {
    this.log = log;
    this.ticker = ticker;
    this.source = source;
  }

  String source() {
    return source;
  }

  /** Logs {@code source + " " + what} unless a record went out less than an interval ago. */
  void report(String what, @Nullable Throwable cause) {
    long now = ticker.nanos();
    long next = nextReport.get();
    // the router's ticker, not the wall clock: a simulator's virtual minute throttles as well
    if ((next == NEVER || now - next >= 0) && nextReport.compareAndSet(next, now + INTERVAL_NANOS)) {
      long left = suppressed.getAndSet(0);
      String msg = source + " " + what
          + (left == 0 ? "" : " (" + left + " more since the last report were not logged)");
      log.log(Level.WARNING, msg, cause == null ? null : RedactedException.of(cause));
    } else {
      suppressed.incrementAndGet();
    }
  }
}
