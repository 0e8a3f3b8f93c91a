package io.epp4j.api;

import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * How a request header given more than once reads as the one value the router sees, the same on
 * every gateway: the values joined in the order they came, with {@value #SEPARATOR}
 * ({@value #COOKIE_SEPARATOR} for {@code cookie}), as Envoy joins a repeated header it keeps as
 * one ({@code x-request-id}, {@code user-agent}, {@code cookie}) and as its header matchers and
 * hash policies read one it keeps as several lines. RFC 9110 section 5.3 allows this for list
 * headers; for a header meant to hold one value (a session id, a priority) the joined value is
 * a value of its own, never one of the two picked: two session ids are a session key of their
 * own, and two priorities are not an integer, so the request is refused naming the header.
 * Nothing is dropped, and a request reads the same however its gateway hands the lines over.
 */
public final class RepeatedHeaders {
  /** Between the values of a repeated header, as Envoy joins them. */
  public static final String SEPARATOR = ",";
  /** Between the values of a repeated {@code cookie} header (RFC 9113 section 8.2.3). */
  public static final String COOKIE_SEPARATOR = "; ";

  private RepeatedHeaders() {}

  /** What goes between two values of the header {@code name} (any case). */
  public static String separator(String name) {
    return "cookie".equalsIgnoreCase(name) ? COOKIE_SEPARATOR : SEPARATOR;
  }

  /** The value of the header {@code name} that came as {@code earlier}, then {@code later}. */
  public static String join(String name, String earlier, String later) {
    return earlier + separator(name) + later;
  }

  /**
   * One value per header from a gateway's header lines ({@code HttpHeaders} of Spring, the
   * JDK's {@code Headers}): names in lower case, each name's values {@link #join joined} in their
   * order (names that differ only in case in the map's order), an empty list as an empty value.
   * Null names and values count as not sent, as {@code OpenAiRequestParser} takes them.
   */
  public static Map<String, String> of(Map<String, ? extends Collection<String>> lines) {
    Objects.requireNonNull(lines, "lines");
    Map<String, StringBuilder> joined = new HashMap<>();
    Set<String> bare = new HashSet<>();
    lines.forEach((name, values) -> {
      if (name == null || values == null) {
        return;
      }
      String lower = name.toLowerCase(Locale.ROOT);
      if (values.isEmpty()) {
        bare.add(lower); // sent without a value
      }
      String sep = separator(lower);
      for (String v : values) {
        if (v != null) {
          add(joined, lower, v, sep);
        }
      }
    });
    Map<String, String> out = new HashMap<>((joined.size() + bare.size()) * 2);
    joined.forEach((k, v) -> out.put(k, v.toString()));
    bare.forEach(k -> out.putIfAbsent(k, ""));
    return out;
  }

  /**
   * {@code headers} with names in lower case. Two names that differ only in case are one header
   * given twice (header names are case-insensitive): their values are {@link #join joined} in
   * the map's iteration order, not one of them kept. Entries with a null name or value count as
   * not sent and are left out. {@code headers} itself when its names are in lower case already and
   * it holds no null.
   */
  public static Map<String, String> lowerCased(Map<String, String> headers) {
    Objects.requireNonNull(headers, "headers");
    boolean clean = true;
    for (Map.Entry<String, String> e : headers.entrySet()) {
      String k = e.getKey();
      if (k == null || e.getValue() == null || !k.equals(k.toLowerCase(Locale.ROOT))) {
        clean = false;
        break;
      }
    }
    if (clean) {
      return headers;
    }
    Map<String, StringBuilder> joined = new HashMap<>();
    headers.forEach((k, v) -> {
      if (k != null && v != null) {
        String lower = k.toLowerCase(Locale.ROOT);
        add(joined, lower, v, separator(lower));
      }
    });
    Map<String, String> out = new HashMap<>(joined.size() * 2);
    joined.forEach((k, v) -> out.put(k, v.toString()));
    return out;
  }

  private static void add(Map<String, StringBuilder> joined, String name, String value,
      String sep) {
    StringBuilder sb = joined.get(name);
    if (sb == null) {
      joined.put(name, new StringBuilder(value));
    } else {
      sb.append(sep).append(value);
    }
  }
}
