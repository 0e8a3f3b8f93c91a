package io.epp4j.sim;

import java.util.Locale;
import java.util.random.RandomGenerator;

/**
 * A token-length distribution given on the command line: {@code N} (fixed), {@code A-B}
 * (uniform integers in [A, B]) or {@code exp:M} (exponential with mean M, at least 1); every
 * length at most {@value #MAX_TOKENS}.
 */
public record LengthDist(String text, int min, int max, double expMean) {

  /**
   * Longest length, in tokens: as {@code --mt-system-len} allows, far past any model's context
   * (a request longer than the context is rejected anyway). A length near {@code int}'s range
   * overflowed the sum of a prompt's parts, and a multi-turn request's tokens are held in one
   * array: two billion of them do not fit in a heap.
   */
  public static final int MAX_TOKENS = 10_000_000;

  /**
   * Parses a distribution.
   *
   * @throws IllegalArgumentException quoting the text and the expected forms when it is not one
   */
  public static LengthDist parse(String text) {
    String t = text.trim().toLowerCase(Locale.ROOT);
    String problem;
    if (t.startsWith("exp:")) {
      double m = number(t.substring(4));
      if (m >= 1 && m <= MAX_TOKENS) {
        return new LengthDist(text, 1, MAX_TOKENS, m);
      }
      problem = Double.isNaN(m) ? "MEAN must be a number"
          : m < 1 ? "MEAN must be >= 1" : "MEAN must be at most " + MAX_TOKENS;
    } else if (t.indexOf('-') > 0) {
      int dash = t.indexOf('-');
      long a = integer(t.substring(0, dash));
      long b = integer(t.substring(dash + 1));
      if (a >= 1 && b >= a && b <= MAX_TOKENS) {
        return new LengthDist(text, (int) a, (int) b, 0);
      }
      problem = a < 0 || b < 0 ? "A and B must be whole numbers"
          : a < 1 || b < a ? "need 1 <= A <= B" : "B must be at most " + MAX_TOKENS;
    } else {
      long v = integer(t);
      if (v >= 1 && v <= MAX_TOKENS) {
        return new LengthDist(text, (int) v, (int) v, 0);
      }
      problem = v < 0 ? "N must be a whole number"
          : v < 1 ? "N must be >= 1" : "N must be at most " + MAX_TOKENS;
    }
    // the parser's own wording (for example "For input string") would not say what to type
    throw new IllegalArgumentException("'" + text + "' is not a length: use N, A-B (uniform"
        + " between A and B) or exp:MEAN (" + problem + ")");
  }

  /** A non-negative integer, or -1 when {@code s} is not one. */
  private static long integer(String s) {
    String t = s.trim();
    if (t.isEmpty() || t.length() > 10 || !t.chars().allMatch(c -> c >= '0' && c <= '9')) {
      return -1;
    }
    return Long.parseLong(t);
  }

  /** A plain decimal number, else NaN (no type suffix or hexadecimal, which parseDouble takes). */
  private static double number(String s) {
    String t = s.trim();
    return Serve.isDecimal(t) ? Double.parseDouble(t) : Double.NaN;
  }

  /** A fixed length. */
  public static LengthDist fixed(int n) {
    return parse(Integer.toString(n));
  }

  /** Draws one length (an exponential's tail is cut at {@link #MAX_TOKENS}). */
  public int sample(RandomGenerator rng) {
    if (expMean > 0) {
      double u = rng.nextDouble();
      return (int) Math.min(MAX_TOKENS, Math.max(1, Math.round(-Math.log(1 - u) * expMean)));
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
