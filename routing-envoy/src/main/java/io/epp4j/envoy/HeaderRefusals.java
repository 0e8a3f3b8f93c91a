package io.epp4j.envoy;

import io.epp4j.api.Ticker;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * Keeps out of the server's header mutations what Envoy's ext_proc filter refuses. Envoy checks
 * every name and value of a mutation ({@code MutationUtils::applyHeaderMutations}): a name that
 * is not an HTTP token, or a value holding NUL, CR, LF, another control character or DEL, fails
 * the whole message, and Envoy replies 500 in place of the request (on the request's headers)
 * or of the endpoint's answer (on the response's). So a header a routing plugin asked for with
 * such a name or value is left out, and the request goes on without it, as is one it may not
 * touch ({@link #reserved}: pseudo-headers, {@code host}, the body's framing); the router's own
 * headers (the pick, the prefill pick) are endpoint ids that cannot be left out, so the request
 * is refused instead ({@link ProcessStream}). Each one is counted ({@link #count()}) and
 * reported, the header's name escaped and never its value, which may come from the prompt; the
 * reports are throttled to one a minute per kind and header name (per kind alone past
 * {@link #MAX_THROTTLED_NAMES} names), each saying how many were left out since.
 * Thread-safe: one per server, shared by its streams.
 */
final class HeaderRefusals {
  static final long INTERVAL_NANOS = TimeUnit.MINUTES.toNanos(1);
  /** Longest name quoted in a report; a longer one is cut, with its length given. */
  static final int MAX_QUOTED = 64;
  private static final Logger LOG = Logger.getLogger(HeaderRefusals.class.getName());
  private static final String TCHAR_SYMBOLS = "!#$%&'*+-.^_`|~";

  /** What a refusal was about; each kind is throttled on its own. */
  enum Kind {
    REQUEST_SET("a request header a routing plugin asked to set"),
    REQUEST_REMOVE("a request header a routing plugin asked to remove"),
    RESPONSE_SET("a response header a routing plugin asked to set");

    final String what;

    Kind(String what) {
      this.what = what;
    }
  }

  private final Ticker ticker;
  private final LongAdder count = new LongAdder();
  private final Throttle[] throttles = new Throttle[Kind.values().length];
  /**
   * A throttle per kind and header name, so that each header asked for wrongly is reported;
   * bounded at {@link #MAX_THROTTLED_NAMES}, past which a name shares its kind's throttle.
   */
  private final ConcurrentHashMap<String, Throttle> byName = new ConcurrentHashMap<>();
  static final int MAX_THROTTLED_NAMES = 64;

  HeaderRefusals(Ticker ticker) {
    this.ticker = ticker;
    for (int i = 0; i < throttles.length; i++) {
      throttles[i] = new Throttle();
    }
  }

  /** Headers left out or requests refused so far because Envoy would refuse the mutation. */
  long count() {
    return count.sum();
  }

  /**
   * {@code asked} without the headers whose name or value Envoy refuses; each left out is
   * counted and reported. The same map when nothing is left out.
   */
  Map<String, String> settable(Map<String, String> asked, Kind kind) {
    Map<String, String> out = null;
    for (Map.Entry<String, String> e : asked.entrySet()) {
      String name = e.getKey();
      boolean nameOk = nameIsValid(name);
      boolean valueOk = valueIsValid(e.getValue());
      String reserved = nameOk ? reserved(name, kind) : null;
      if (nameOk && valueOk && reserved == null) {
        if (out != null) {
          out.put(name, e.getValue());
        }
        continue;
      }
      if (out == null) {
        out = new LinkedHashMap<>();
        for (Map.Entry<String, String> before : asked.entrySet()) {
          if (before.getKey().equals(name)) {
            break;
          }
          out.put(before.getKey(), before.getValue());
        }
      }
      String why = !nameOk ? " is not a valid header name (" + badInName(name) + ")"
          : reserved != null ? reserved : " has a value holding " + badInValue(e.getValue());
      refused(kind, name, quoted(name) + why + "; the header is left out (its value is not"
          + " logged)");
    }
    return out == null ? asked : out;
  }

  /** {@code asked} without the names Envoy refuses; each left out is counted and reported. */
  Set<String> removable(Set<String> asked) {
    Set<String> out = null;
    for (String name : asked) {
      boolean nameOk = nameIsValid(name);
      String reserved = nameOk ? reserved(name, Kind.REQUEST_REMOVE) : null;
      if (nameOk && reserved == null) {
        if (out != null) {
          out.add(name);
        }
        continue;
      }
      if (out == null) {
        out = new LinkedHashSet<>();
        for (String before : asked) {
          if (before.equals(name)) {
            break;
          }
          out.add(before);
        }
      }
      refused(Kind.REQUEST_REMOVE, name, quoted(name) + (reserved != null
          ? reserved + "; the ask is left out"
          : " is not a valid header name (" + badInName(name) + "); no header of that name can"
              + " be on the request, the ask is left out"));
    }
    return out == null ? asked : out;
  }

  private void refused(Kind kind, String name, String message) {
    count.increment();
    String key = kind.ordinal() + name;
    Throttle t = byName.get(key);
    if (t == null) {
      t = byName.size() < MAX_THROTTLED_NAMES
          ? byName.computeIfAbsent(key, k -> new Throttle()) : throttles[kind.ordinal()];
    }
    t.report(ticker.nanos(), kind.what + ": " + message);
  }

  /**
   * Why a routing plugin may not set or remove header {@code name} (lower case), or null when it
   * may. Pseudo-headers: Envoy's mutation rules ignore a change of {@code :authority},
   * {@code :method} and {@code :scheme} (and of {@code host}), never remove a pseudo-header or
   * {@code host}, and fail the request with a 500 for either under {@code disallow_is_error};
   * {@code :path} they apply, which would send the request on to another path than the one it
   * was routed for, and {@code :status} would change the status of the answer the server has
   * judged the endpoint by. {@code content-length} and {@code transfer-encoding} frame the body,
   * which passes unchanged: the server restores its length itself, and a plugin's value would
   * misframe it.
   */
  static @Nullable String reserved(String name, Kind kind) {
    if (name.startsWith(":")) {
      return " is a pseudo-header, which routing plugins may not set or remove (Envoy ignores"
          + " or refuses most such mutations and would apply :path or :status after the pick)";
    }
    if (name.equals("host") && kind != Kind.RESPONSE_SET) {
      return " is the request's authority, which routing plugins may not set or remove (Envoy"
          + " ignores or refuses such a mutation)";
    }
    if (name.equals("content-length") || name.equals("transfer-encoding")) {
      return " frames the body, which passes unchanged: routing plugins may not set or remove it";
    }
    return null;
  }

  /**
   * Whether Envoy takes {@code name} in a mutation: an HTTP token (RFC 9110 section 5.6.2),
   * after the ':' of a pseudo-header ({@code HeaderUtility::headerNameIsValid}).
   */
  static boolean nameIsValid(String name) {
    String token = name.startsWith(":") ? name.substring(1) : name;
    if (token.isEmpty()) {
      return false;
    }
    for (int i = 0; i < token.length(); i++) {
      if (!isTchar(token.charAt(i))) {
        return false;
      }
    }
    return true;
  }

  /**
   * Whether Envoy takes {@code value}, sent as its UTF-8 bytes: HTAB, SP, visible ASCII and any
   * byte above 0x7F ({@code HeaderUtility::headerValueIsValid}, obs-text allowed), so every
   * character but the controls and DEL; a character above U+007F is bytes above 0x7F in UTF-8.
   */
  static boolean valueIsValid(String value) {
    for (int i = 0; i < value.length(); i++) {
      if (isRefusedInValue(value.charAt(i))) {
        return false;
      }
    }
    return true;
  }

  private static boolean isRefusedInValue(char c) {
    return c < 0x20 && c != '\t' || c == 0x7F;
  }

  private static boolean isTchar(char c) {
    return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
        || TCHAR_SYMBOLS.indexOf(c) >= 0;
  }

  /** Names the first character Envoy refuses in value {@code s}, by its code, never quoting it. */
  private static String badInValue(String s) {
    for (int i = 0; i < s.length(); i++) {
      if (isRefusedInValue(s.charAt(i))) {
        return String.format("U+%04X at index %d", (int) s.charAt(i), i);
      }
    }
    return "nothing refused";
  }

  /** Names the first character Envoy refuses in name {@code s}, by its code. */
  private static String badInName(String s) {
    if (s.isEmpty() || s.equals(":")) {
      return "it is empty";
    }
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (!isTchar(c) && !(i == 0 && c == ':')) {
        return String.format("U+%04X at index %d", (int) c, i);
      }
    }
    return "nothing refused";
  }

  /** {@code s} in quotes, controls and characters past ASCII escaped, cut at MAX_QUOTED. */
  static String quoted(String s) {
    StringBuilder b = new StringBuilder("'");
    int n = Math.min(s.length(), MAX_QUOTED);
    for (int i = 0; i < n; i++) {
      char c = s.charAt(i);
      if (c < 0x20 || c > 0x7E) {
        b.append(String.format("\\u%04X", (int) c));
      } else if (c == '\'' || c == '\\') {
        b.append('\\').append(c);
      } else {
        b.append(c);
      }
    }
    b.append('\'');
    if (s.length() > MAX_QUOTED) {
      b.append(" (cut, ").append(s.length()).append(" characters)");
    }
    return b.toString();
  }

  /** The first report, then at most one per {@link #INTERVAL_NANOS}, saying how many were left out. */
  private static final class Throttle {
    private static final long NEVER = Long.MIN_VALUE;
    private final AtomicLong nextReport = new AtomicLong(NEVER);
    private final AtomicLong suppressed = new AtomicLong();

    void report(long now, String message) {
      long next = nextReport.get();
      if ((next == NEVER || now - next >= 0)
          && nextReport.compareAndSet(next, now + INTERVAL_NANOS)) {
        long left = suppressed.getAndSet(0);
        LOG.warning(message + (left == 0 ? "" : " (" + left
            + " more like it since the last report were not logged)"));
      } else {
        suppressed.incrementAndGet();
      }
    }
  }
}
