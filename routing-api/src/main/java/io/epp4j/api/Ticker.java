package io.epp4j.api;

/**
 * A source of monotonic nanoseconds. The router, metrics ages and TTLs read time only through a
 * ticker, so tests and the simulator can drive time by hand.
 */
@FunctionalInterface
public interface Ticker {

  /** Current time in nanoseconds; only differences are meaningful. */
  long nanos();

  /** The system ticker ({@link System#nanoTime()}). */
  static Ticker system() {
    return System::nanoTime;
  }
}
