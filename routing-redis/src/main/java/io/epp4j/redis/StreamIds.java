package io.epp4j.redis;

/** Redis stream ids ({@code <ms>-<seq>}) compared as the server orders them. */
final class StreamIds {
  private StreamIds() {}

  static int compare(String a, String b) {
    long[] x = parse(a);
    long[] y = parse(b);
    int c = Long.compareUnsigned(x[0], y[0]);
    return c != 0 ? c : Long.compareUnsigned(x[1], y[1]);
  }

  /** The milliseconds part, or -1 when the id is not a stream id. */
  static long millis(String id) {
    try {
      return parse(id)[0];
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  private static long[] parse(String id) {
    int dash = id.indexOf('-');
    if (dash < 0) {
      return new long[] {Long.parseUnsignedLong(id), 0};
    }
    return new long[] {Long.parseUnsignedLong(id.substring(0, dash)),
        Long.parseUnsignedLong(id.substring(dash + 1))};
  }
}
