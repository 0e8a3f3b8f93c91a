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

  /**
   * The milliseconds part, or -1 when the id is not a stream id or its time is none a clock reads
   * (after the year 9999, see {@link #pastAnyClock}): such a time, in µs, overflows a long.
   */
  static long millis(String id) {
    try {
      long ms = parse(id)[0];
      return ms >= 0 && ms <= MAX_MILLIS ? ms : -1;
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  /** The last millisecond of the year 9999, as {@link HintCodec#MAX_EPOCH_MICROS}. */
  static final long MAX_MILLIS = HintCodec.MAX_EPOCH_MICROS / 1000;

  /**
   * Whether {@code id} is a stream id whose time is after the year 9999. Redis takes such an id
   * from {@code XADD} with an id of the writer's choosing, and then gives every later entry of
   * the stream an id of the same millisecond: the ids stop telling time until the key goes.
   */
  static boolean pastAnyClock(String id) {
    try {
      return Long.compareUnsigned(parse(id)[0], MAX_MILLIS) > 0;
    } catch (NumberFormatException e) {
      return false;
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
