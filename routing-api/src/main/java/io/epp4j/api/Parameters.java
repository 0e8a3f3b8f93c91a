package io.epp4j.api;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.jspecify.annotations.Nullable;

/**
 * The {@code parameters} of one plugin, as given in a config file or in code. Typed getters
 * return a default when a parameter is absent and record an error naming the parameter when a
 * value has the wrong type or range, so a provider can report every problem at once through
 * {@link #errors()}. A value a getter refuses is one error: what a provider records later about
 * the same parameter is dropped, since it could only be about the default returned in the
 * value's place. Not thread-safe; used once while a plugin is created.
 */
public final class Parameters {
  private static final java.util.regex.Pattern DECIMAL =
      java.util.regex.Pattern.compile("[+-]?(?:[0-9]+\\.?[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?");

  private final Map<String, Object> values;
  private final List<String> errors = new ArrayList<>();
  private final List<String> notices = new ArrayList<>();
  private final Set<String> read = new HashSet<>();
  /** The names whose value a getter refused (see {@link #error}). */
  private final Set<String> refused = new HashSet<>();

  private Parameters(Map<String, Object> values) {
    this.values = values;
  }

  /** Parameters from a map (values as YAML or JSON would give them). */
  public static Parameters of(Map<String, ?> values) {
    return new Parameters(Collections.unmodifiableMap(new LinkedHashMap<>(values)));
  }

  /** No parameters. */
  public static Parameters empty() {
    return new Parameters(Map.of());
  }

  /** Whether the parameter is present. */
  public boolean has(String name) {
    return values.containsKey(name);
  }

  /** The raw value, or {@code null}. */
  public @Nullable Object raw(String name) {
    read.add(name);
    return values.get(name);
  }

  /** An integer parameter. */
  public int getInt(String name, int defaultValue) {
    long v = getLong(name, defaultValue);
    if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
      refuse(name, "must fit in a 32-bit integer, got " + v);
      return defaultValue;
    }
    return (int) v;
  }

  /**
   * An integer parameter that must lie in {@code [min, max]}. The range applies to a given value
   * only: an absent parameter, or one already reported as not an integer, gives
   * {@code defaultValue} as it is.
   */
  public int getInt(String name, int defaultValue, int min, int max) {
    int before = errors.size();
    int v = getInt(name, defaultValue);
    if (given(name, before) && (v < min || v > max)) {
      refuse(name, "must be in [" + min + ", " + max + "], got " + v);
      return defaultValue;
    }
    return v;
  }

  /** A long parameter. */
  public long getLong(String name, long defaultValue) {
    Object v = raw(name);
    if (v == null) {
      return defaultValue;
    }
    if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte) {
      return ((Number) v).longValue();
    }
    if (v instanceof java.math.BigInteger) {
      refuse(name, "is too large: " + v);
      return defaultValue;
    }
    if (v instanceof Number n && n.doubleValue() == Math.rint(n.doubleValue())
        && Math.abs(n.doubleValue()) < 9.0e15) {
      return (long) n.doubleValue();
    }
    if (v instanceof String s && isInteger(s.trim())) {
      try {
        return Long.parseLong(s.trim());
      } catch (NumberFormatException e) {
        refuse(name, "is too large: " + s.trim());
        return defaultValue;
      }
    }
    refuse(name, "must be an integer, got '" + v + "'");
    return defaultValue;
  }

  /**
   * An optional sign and ASCII digits, as YAML and JSON write an integer: Long.parseLong alone
   * also reads other scripts' digits (Arabic-Indic {@code ٣}, full-width {@code ３}).
   */
  private static boolean isInteger(String s) {
    int from = s.startsWith("+") || s.startsWith("-") ? 1 : 0;
    if (s.length() == from) {
      return false;
    }
    for (int i = from; i < s.length(); i++) {
      if (!isDigit(s.charAt(i))) {
        return false;
      }
    }
    return true;
  }

  /**
   * A number parameter. Text is read as a decimal number as YAML or JSON writes one
   * ({@code 0.5}, {@code -3}, {@code 1e3}); Java's literal spellings ({@code 5d}, {@code 0.5f},
   * {@code 0x1p3}), {@code NaN} and {@code Infinity} are errors, and so is a number beyond the
   * range of a double ({@code 1e400}), which upstream's JSON decoding refuses too.
   */
  public double getDouble(String name, double defaultValue) {
    Object v = raw(name);
    if (v == null) {
      return defaultValue;
    }
    double d = Double.NaN;
    if (v instanceof Number n) {
      d = n.doubleValue();
    } else if (v instanceof String s && DECIMAL.matcher(s.trim()).matches()) {
      d = Double.parseDouble(s.trim());
    } else {
      refuse(name, "must be a number, got '" + v + "'");
      return defaultValue;
    }
    if (!Double.isFinite(d)) {
      refuse(name, "must be a finite number, got '" + v + "'");
      return defaultValue;
    }
    return d;
  }

  /**
   * A number parameter that must lie in {@code [min, max]} (NaN does not). The range applies to
   * a given value only: an absent parameter, or one already reported as not a number, gives
   * {@code defaultValue} as it is.
   */
  public double getDouble(String name, double defaultValue, double min, double max) {
    int before = errors.size();
    double v = getDouble(name, defaultValue);
    if (given(name, before) && !(v >= min && v <= max)) {
      refuse(name, "must be in [" + min + ", " + max + "], got " + v);
      return defaultValue;
    }
    return v;
  }

  /** A boolean parameter ({@code true}/{@code false}, also as strings). */
  public boolean getBoolean(String name, boolean defaultValue) {
    Object v = raw(name);
    if (v == null) {
      return defaultValue;
    }
    if (v instanceof Boolean b) {
      return b;
    }
    // compared in lower case rather than with equalsIgnoreCase, which takes the long s (ſ) for
    // an s and would read "falſe" as false
    String text = String.valueOf(v).toLowerCase(java.util.Locale.ROOT);
    if (text.equals("true")) {
      return true;
    }
    if (text.equals("false")) {
      return false;
    }
    refuse(name, "must be true or false, got '" + v + "'");
    return defaultValue;
  }

  /**
   * A string parameter. A number or a boolean is an error, as in the upstream EPP, which decodes
   * parameters into typed fields and refuses a number or a boolean where a string is declared:
   * read as its text, {@code 5} or {@code 1e3} or {@code 0x1F} would stand for a text that
   * differs from what the file shows ({@code 1000.0}, {@code 31}); written in quotes it is text.
   */
  public @Nullable String getString(String name, @Nullable String defaultValue) {
    Object v = raw(name);
    if (v == null) {
      return defaultValue;
    }
    if (v instanceof String s) {
      return s;
    }
    refuse(name, "must be a string, got " + describe(v) + quoteHint(v));
    return defaultValue;
  }

  /** For a number or a boolean where text is expected: how to write it as text. */
  private static String quoteHint(Object v) {
    return v instanceof Number || v instanceof Boolean
        ? " (write it in quotes if it is meant as text)" : "";
  }

  /**
   * A string parameter restricted to {@code allowed} values. An absent parameter, or one already
   * reported as not a string, gives {@code defaultValue} as it is.
   */
  public String getEnum(String name, String defaultValue, Set<String> allowed) {
    int before = errors.size();
    String v = getString(name, defaultValue);
    if (v == null) {
      return defaultValue;
    }
    if (given(name, before) && !allowed.contains(v)) {
      refuse(name, "must be one of " + new TreeSet<>(allowed) + ", got '" + v + "'");
      return defaultValue;
    }
    return v;
  }

  /** Whether {@code name} has a value that its getter read without recording an error. */
  private boolean given(String name, int errorsBefore) {
    return values.get(name) != null && errors.size() == errorsBefore && !refused.contains(name);
  }

  /**
   * A list of strings. A number or a boolean in the list is an error, as {@link #getString}
   * refuses one; so is a single string in place of the list, as the upstream EPP's JSON decoding
   * refuses a string for a {@code []string} field (the error shows the one-item list to write).
   */
  public List<String> getStringList(String name, List<String> defaultValue) {
    Object v = raw(name);
    if (v == null) {
      return defaultValue;
    }
    if (v instanceof String s) {
      refuse(name, "must be a list of strings, got a single string " + describe(s)
          + " (write a one-item list: ['" + s + "'])");
      return defaultValue;
    }
    if (v instanceof List<?> list) {
      List<String> out = new ArrayList<>(list.size());
      for (int i = 0; i < list.size(); i++) {
        if (!(list.get(i) instanceof String s)) {
          Object o = list.get(i);
          refuse(name, "must be a list of strings, found " + describe(o) + " at [" + i + "]"
              + quoteHint(o));
          return defaultValue;
        }
        out.add(s);
      }
      return List.copyOf(out);
    }
    refuse(name, "must be a list of strings, got " + describe(v));
    return defaultValue;
  }

  /**
   * A nested object as its own {@link Parameters} (empty when absent; an error here when the
   * value is not an object). The nested object keeps its own errors and unread names: the caller
   * passes them on under {@code name}, e.g. {@code p.error(name, e)} for each of
   * {@code nested.errors()}.
   */
  public Parameters getNested(String name) {
    Object v = raw(name);
    if (v == null) {
      return empty();
    }
    if (v instanceof Map<?, ?> map) {
      Map<String, Object> m = new LinkedHashMap<>();
      map.forEach((k, val) -> m.put(String.valueOf(k), val));
      return new Parameters(Collections.unmodifiableMap(m));
    }
    refuse(name, "must be an object, got " + describe(v));
    return empty();
  }

  /**
   * A duration in the upstream EPP's (Go's) notation, read as Go's {@code time.ParseDuration}
   * reads it: one or more number-unit pairs such as {@code 200ms}, {@code 5s}, {@code 1m30s} or
   * {@code 1.5h}, units {@code ns us µs ms s m h}, up to the largest 64-bit count of nanoseconds.
   * Whole numbers are exact and a fraction is exact to the nanosecond ({@code 1.005s} is 1005
   * ms), as in Go; {@code .5s}, {@code 5.s}, a leading {@code +} and the bare {@code 0} are
   * accepted as Go accepts them, and so is a negative zero ({@code -0}, {@code -0s}). Any other
   * bare number is an error, as its unit would be a guess, and so is a negative duration (its
   * error says so).
   */
  public java.time.Duration getDuration(String name, java.time.Duration defaultValue) {
    Object v = raw(name);
    if (v == null) {
      return defaultValue;
    }
    String t = v instanceof String s ? s.trim() : "";
    long nanos = v instanceof String ? parseGoDuration(t) : -1;
    long unsigned = nanos < 0 && t.startsWith("-") ? parseGoDuration(t.substring(1)) : -1;
    if (unsigned == 0) {
      nanos = 0; // "-0s" is zero, as Go reads it
    }
    if (nanos < 0) {
      // a duration with a minus sign is a duration: "not a duration" would send the user looking
      // for the wrong mistake
      refuse(name, unsigned > 0
          ? "must not be a negative duration, got '" + v + "'"
          : "must be a duration with a unit such as '200ms', '5s' or '1m30s', got '" + v + "'");
      return defaultValue;
    }
    return java.time.Duration.ofNanos(nanos);
  }

  /**
   * Go's {@code time.ParseDuration} for non-negative durations: the nanoseconds, or -1 when
   * {@code s} is not a duration or exceeds {@link Long#MAX_VALUE} nanoseconds. Like Go, it reads
   * the whole part of each number as an integer and adds the fraction's nanoseconds rounded down.
   */
  private static long parseGoDuration(String s) {
    int at = s.startsWith("+") ? 1 : 0;
    if (s.length() - at == 1 && s.charAt(at) == '0') {
      return 0;
    }
    if (at == s.length()) {
      return -1;
    }
    long total = 0;
    try {
      while (at < s.length()) {
        int intStart = at;
        long whole = 0;
        while (at < s.length() && isDigit(s.charAt(at))) {
          whole = Math.addExact(Math.multiplyExact(whole, 10), s.charAt(at++) - '0');
        }
        boolean digits = at > intStart;
        long fraction = 0;
        double scale = 1;
        if (at < s.length() && s.charAt(at) == '.') {
          at++;
          boolean full = false;
          int fracStart = at;
          for (; at < s.length() && isDigit(s.charAt(at)); at++) {
            // as Go: digits past what a long holds no longer change the fraction
            if (!full && fraction <= (Long.MAX_VALUE - 9) / 10) {
              fraction = fraction * 10 + (s.charAt(at) - '0');
              scale *= 10;
            } else {
              full = true;
            }
          }
          digits |= at > fracStart;
        }
        if (!digits) {
          return -1;
        }
        int unitStart = at;
        while (at < s.length() && s.charAt(at) != '.' && !isDigit(s.charAt(at))) {
          at++;
        }
        long unit = switch (s.substring(unitStart, at)) {
          case "ns" -> 1L;
          case "us", "\u00b5s", "\u03bcs" -> 1_000L;
          case "ms" -> 1_000_000L;
          case "s" -> 1_000_000_000L;
          case "m" -> 60_000_000_000L;
          case "h" -> 3_600_000_000_000L;
          default -> -1L;
        };
        if (unit < 0) {
          return -1;
        }
        long pair = Math.multiplyExact(whole, unit);
        if (fraction > 0) {
          // at most 3.6e12 (an hour's nanoseconds): a double holds it to the nanosecond
          pair = Math.addExact(pair, (long) (fraction * (unit / scale)));
        }
        total = Math.addExact(total, pair);
      }
    } catch (ArithmeticException overflow) {
      return -1;
    }
    return total;
  }

  private static boolean isDigit(char c) {
    return c >= '0' && c <= '9';
  }

  /**
   * Records that a parameter was read and accepted although it changes nothing here, and why
   * (for example a deployment setting that another component honours). The config loader reports
   * it as a warning; unlike an unread name it is not a likely typo.
   */
  public void notice(String name, String why) {
    read.add(name);
    notices.add("parameter '" + name + "' " + why);
  }

  /** Notices recorded so far, each naming its parameter. */
  public List<String> notices() {
    return List.copyOf(notices);
  }

  /**
   * Records an error about a parameter, unless a getter refused its value: then the getter's
   * error is the one, and this one, about the default the getter returned instead (a "required"
   * check finding it empty, a range check quoting it), is dropped.
   */
  public void error(String name, String problem) {
    if (!refused.contains(name)) {
      errors.add("parameter '" + name + "' " + problem);
    }
  }

  /** A getter's error: the value given cannot be read, and the getter returns its default. */
  private void refuse(String name, String problem) {
    error(name, problem);
    refused.add(name);
  }

  /** Errors recorded so far, each naming its parameter. */
  public List<String> errors() {
    return List.copyOf(errors);
  }

  /** Names present but never read by the provider: likely typos or unsupported options. */
  public Set<String> unreadNames() {
    Set<String> s = new TreeSet<>(values.keySet());
    s.removeAll(read);
    return s;
  }

  /** The names present. */
  public Set<String> names() {
    return values.keySet();
  }

  private static String describe(@Nullable Object v) {
    if (v instanceof Map) {
      return "an object";
    }
    if (v instanceof List) {
      return "a list";
    }
    if (v instanceof Number) {
      return "a number ('" + v + "')";
    }
    if (v instanceof Boolean) {
      return "a boolean ('" + v + "')";
    }
    return v == null ? "nothing" : "'" + v + "'";
  }

  @Override
  public String toString() {
    return "Parameters" + values.keySet();
  }
}
