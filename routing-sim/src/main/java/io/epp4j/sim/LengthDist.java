package io.epp4j.sim;

import java.util.Locale;
import java.util.random.RandomGenerator;

/**
 * A token-length distribution given on the command line: {@code N} (fixed), {@code A-B}
 * (uniform integers in [A, B]) or {@code exp:M} (exponential with mean M, at least 1).
 */
public record LengthDist(String text, int min, int max, double expMean) {

  /**
   * Parses a distribution.
   *
   * @throws IllegalArgumentException naming the text when it is not one of the forms
   */
  public static LengthDist parse(String text) {
    String t = text.trim().toLowerCase(Locale.ROOT);
    try {
      if (t.startsWith("exp:")) {
        double m = Double.parseDouble(t.substring(4));
        if (!(m >= 1)) {
          throw new IllegalArgumentException("mean must be >= 1");
        }
        return new LengthDist(text, 1, Integer.MAX_VALUE, m);
      }
      int dash = t.indexOf('-');
      if (dash > 0) {
        int a = Integer.parseInt(t.substring(0, dash).trim());
        int b = Integer.parseInt(t.substring(dash + 1).trim());
        if (a < 1 || b < a) {
          throw new IllegalArgumentException("need 1 <= A <= B");
        }
        return new LengthDist(text, a, b, 0);
      }
      int v = Integer.parseInt(t);
      if (v < 1) {
        throw new IllegalArgumentException("must be >= 1");
      }
      return new LengthDist(text, v, v, 0);
    } catch (RuntimeException e) {
      throw new IllegalArgumentException("bad length '" + text
          + "': use N, A-B (uniform) or exp:MEAN (" + e.getMessage() + ")");
    }
  }

  /** A fixed length. */
  public static LengthDist fixed(int n) {
    return parse(Integer.toString(n));
  }

  /** Draws one length. */
  public int sample(RandomGenerator rng) {
    if (expMean > 0) {
      double u = rng.nextDouble();
      return (int) Math.max(1, Math.round(-Math.log(1 - u) * expMean));
    }
    return min == max ? min : min + rng.nextInt(max - min + 1);
  }

  /** The mean. */
  public double mean() {
    return expMean > 0 ? expMean : (min + max) / 2.0;
  }

  /** The largest value (for sizing), the 99.9th percentile for exponentials. */
  public int typicalMax() {
    return expMean > 0 ? (int) Math.ceil(expMean * 6.9) : max;
  }

  @Override
  public String toString() {
    return text;
  }
}
