package io.epp4j.redis;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * At most one record a minute per kind of trouble, saying how many were left out: Redis being
 * away produces one failure per reconnection attempt, and the log must not drown in them.
 */
final class RateLimitedLog {
  static final long INTERVAL_NANOS = 60_000_000_000L;

  private final Logger log;
  private final String prefix;
  private final ConcurrentHashMap<String, long[]> last = new ConcurrentHashMap<>();
  private final AtomicLong records = new AtomicLong();

  RateLimitedLog(Logger log, String prefix) {
    this.log = log;
    this.prefix = prefix;
  }

  void report(Level level, String kind, String message) {
    report(level, kind, message, null);
  }

  /** The same, with the stack trace of {@code thrown} when the record is written. */
  void report(Level level, String kind, String message, @Nullable Throwable thrown) {
    long now = System.nanoTime();
    long[] s = last.computeIfAbsent(kind, k -> new long[] {now - INTERVAL_NANOS - 1, 0});
    long suppressed;
    synchronized (s) {
      if (now - s[0] <= INTERVAL_NANOS) {
        s[1]++;
        return;
      }
      suppressed = s[1];
      s[0] = now;
      s[1] = 0;
    }
    records.incrementAndGet();
    log.log(level, prefix + message + (suppressed > 0
        ? " (" + suppressed + " similar messages left out in the last minute)" : ""), thrown);
  }

  /** Records written so far; for tests. */
  long records() {
    return records.get();
  }
}
