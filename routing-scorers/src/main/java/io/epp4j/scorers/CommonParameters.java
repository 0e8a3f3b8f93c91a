package io.epp4j.scorers;

import io.epp4j.api.Parameters;

/** Parameters that several built-in plugins accept under the same names and rules. */
final class CommonParameters {
  private CommonParameters() {}

  /**
   * {@code maxNumOfEndpoints} of the pickers: the primary plus fallbacks, default 1. Upstream's
   * pickers read 0 or below as not set (one endpoint), so such a file loads here too, with a
   * notice rather than an error. Upstream sets no upper bound, and a pick returns at most the
   * candidates there are whatever the value, so any larger value loads as given (one beyond a
   * 32-bit integer as the largest, which picks the same endpoints).
   */
  static int maxEndpoints(Parameters p) {
    long v = p.getLong("maxNumOfEndpoints", 1);
    if (v < 1) {
      p.notice("maxNumOfEndpoints", "is " + v + ": as upstream, a value below 1 means the"
          + " default, 1 endpoint");
      return 1;
    }
    return (int) Math.min(v, Integer.MAX_VALUE);
  }

  /**
   * The first of several accepted names of one setting that is present, else the first name. A
   * second name present beside it is an error naming it: one of the two values would be dropped.
   */
  static String alias(Parameters p, String... names) {
    String found = null;
    for (String n : names) {
      if (p.has(n)) {
        if (found == null) {
          found = n;
        } else {
          p.raw(n);
          p.error(n, "names the same setting as '" + found + "', which is given too; give one");
        }
      }
    }
    return found != null ? found : names[0];
  }

  /**
   * {@code balanceFactor} (multiplier, 0 = off) or Envoy's {@code hashBalanceFactor} (percent).
   * The two name one setting in different units: with both, {@code hashBalanceFactor} is refused
   * by name, as a second name of any setting is, rather than one of the two values dropped.
   */
  static double balanceFactor(Parameters p) {
    if (p.has("hashBalanceFactor") && p.has("balanceFactor")) {
      p.raw("hashBalanceFactor");
      p.error("hashBalanceFactor", "names the same setting as 'balanceFactor' (in percent of the"
          + " mean rather than as a multiplier), which is given too; give one");
    } else if (p.has("hashBalanceFactor")) {
      int pct = p.getInt("hashBalanceFactor", 0, 0, 100_000);
      if (pct != 0 && pct < 100) {
        p.error("hashBalanceFactor", "must be 0 (off) or >= 100 (percent of the mean), got " + pct);
        return 0;
      }
      return pct / 100.0;
    }
    double f = p.getDouble("balanceFactor", 0.0);
    if (f != 0 && !(f >= 1.0 && f <= 1000.0)) {
      p.error("balanceFactor", "must be 0 (off) or in [1, 1000], got " + f);
      return 0;
    }
    return f;
  }

  /**
   * What a reference to a plugin the configuration did not give says: the file defines no such
   * plugin, or it does but that plugin refers back (a cycle the loader cannot order).
   */
  static String noSuchPlugin(String name) {
    return "names no plugin of the file (or one that refers back to this one): '" + name + "'";
  }
}
