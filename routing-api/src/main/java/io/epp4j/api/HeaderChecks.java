package io.epp4j.api;

import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * Which headers a gateway may put on the wire for the routing plugins
 * ({@link RoutingDecision#requestHeaders()}, {@link RoutingDecision#removedRequestHeaders()},
 * {@link RoutingDecision#responseHeaders()}): a name that is an HTTP token (RFC 9110 section
 * 5.6.2) and a value without control characters (HTAB aside) or DEL (section 5.5). Anything else
 * is refused by the gateway's HTTP stack (the request failing with a 500) or, written as it is,
 * would add header lines of the value's making (a CR LF in a value taken from the prompt), so a
 * gateway leaves such a header out and reports it with {@link Refusals}. So it does with a
 * header the gateway must set itself ({@link #whyReserved}: pseudo-headers, the body's framing,
 * the request's {@code host}).
 */
public final class HeaderChecks {
  private static final String TCHAR_SYMBOLS = "!#$%&'*+-.^_`|~";
  /** Longest name {@link #quoted} quotes; a longer one is cut, with its length given. */
  public static final int MAX_QUOTED = 64;

  private HeaderChecks() {}

  /**
   * Whether {@code name} is an HTTP token (RFC 9110 section 5.6.2): one or more of the letters,
   * digits and {@code !#$%&'*+-.^_`|~}.
   */
  public static boolean isToken(String name) {
    if (name.isEmpty()) {
      return false;
    }
    for (int i = 0; i < name.length(); i++) {
      if (!isTchar(name.charAt(i))) {
        return false;
      }
    }
    return true;
  }

  /**
   * Whether {@code value} may be sent as a header value: no control character but HTAB (no NUL,
   * CR or LF) and no DEL. Characters above U+007F pass (RFC 9110's obs-text, as Envoy takes them);
   * whether a gateway's HTTP stack can encode them is its own matter.
   */
  public static boolean isValidValue(String value) {
    return refusedInValue(value) < 0;
  }

  /** {@code s} in single quotes, controls and characters past ASCII escaped, cut at {@value #MAX_QUOTED}. */
  public static String quoted(String s) {
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

  /**
   * Why {@code name} is no HTTP token, naming the first character refused by its code, or null
   * when it is one.
   */
  public static @Nullable String whyNotToken(String name) {
    if (name.isEmpty()) {
      return "it is empty";
    }
    for (int i = 0; i < name.length(); i++) {
      if (!isTchar(name.charAt(i))) {
        return String.format("U+%04X at index %d", (int) name.charAt(i), i);
      }
    }
    return null;
  }

  /**
   * Why {@code value} may not be sent, naming the first character refused by its code and index
   * (never quoting the value, which may come from the prompt), or null when it may.
   */
  public static @Nullable String whyInvalidValue(String value) {
    int i = refusedInValue(value);
    return i < 0 ? null : String.format("U+%04X at index %d", (int) value.charAt(i), i);
  }

  /**
   * Why a routing plugin may not ask for header {@code name} (any case) on a header of
   * {@code kind}, or null when it may. A pseudo-header ({@code :path}, {@code :authority},
   * {@code :status}, ...) is the gateway's: it names the request it forwards and the status it
   * judged the endpoint by (and a proxy such as Envoy ignores or refuses most such changes).
   * {@code content-length} and {@code transfer-encoding} frame
   * the body, which a gateway passes on unchanged and frames itself: a plugin's value would
   * misframe the request or the answer. {@code host} on the request is its authority, which the
   * gateway sets for the endpoint it picked.
   */
  public static @Nullable String whyReserved(String name, Refusals.Kind kind) {
    if (name.length() > 1 && name.charAt(0) == ':') {
      return " is a pseudo-header, which routing plugins may not set or remove";
    }
    if (name.equalsIgnoreCase("content-length") || name.equalsIgnoreCase("transfer-encoding")) {
      return " frames the body, which passes unchanged: routing plugins may not set or remove it";
    }
    if (name.equalsIgnoreCase("host") && kind != Refusals.Kind.RESPONSE_SET) {
      return " is the request's authority, which routing plugins may not set or remove";
    }
    return null;
  }

  private static int refusedInValue(String value) {
    for (int i = 0; i < value.length(); i++) {
      char c = value.charAt(i);
      if (c < 0x20 && c != '\t' || c == 0x7F) {
        return i;
      }
    }
    return -1;
  }

  private static boolean isTchar(char c) {
    return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
        || TCHAR_SYMBOLS.indexOf(c) >= 0;
  }

  /**
   * Leaves out of the headers routing plugins ask for those that fail {@link #isToken} or
   * {@link #isValidValue}, counts each one left out and logs it as a warning: the header's name
   * quoted and escaped ({@link #quoted}), never its value. The records are throttled to one per
   * {@link #INTERVAL_NANOS} per kind of header and name (each saying how many were left out since
   * the last), names past the first {@link #MAX_THROTTLED_NAMES} sharing one throttle per kind,
   * so memory stays bounded. Thread-safe: one per gateway.
   */
  public static final class Refusals {
    /** At most one record per kind and header name in this time: one minute. */
    public static final long INTERVAL_NANOS = TimeUnit.MINUTES.toNanos(1);
    /** Header names throttled on their own; further names share their kind's throttle. */
    public static final int MAX_THROTTLED_NAMES = 64;

    /** What was asked for; each kind is throttled on its own. */
    public enum Kind {
      /** {@link RoutingDecision#requestHeaders()}. */
      REQUEST_SET("a request header a routing plugin asked to set"),
      /** {@link RoutingDecision#removedRequestHeaders()}. */
      REQUEST_REMOVE("a request header a routing plugin asked to remove"),
      /** {@link RoutingDecision#responseHeaders()}. */
      RESPONSE_SET("a response header a routing plugin asked to set");

      final String what;

      Kind(String what) {
        this.what = what;
      }
    }

    private final Logger log;
    private final Ticker ticker;
    private final LongAdder count = new LongAdder();
    private final Throttle[] byKind = new Throttle[Kind.values().length];
    private final ConcurrentHashMap<String, Throttle> byName = new ConcurrentHashMap<>();

    /** Reports to {@code log}, throttled by {@code ticker}'s time. */
    public Refusals(Logger log, Ticker ticker) {
      this.log = Objects.requireNonNull(log, "log");
      this.ticker = Objects.requireNonNull(ticker, "ticker");
      for (int i = 0; i < byKind.length; i++) {
        byKind[i] = new Throttle();
      }
    }

    /** Headers left out so far. */
    public long count() {
      return count.sum();
    }

    /**
     * {@code asked} without the headers whose name is no token, is reserved
     * ({@link #whyReserved}) or whose value is not valid, each left out counted and reported
     * ({@code kind} says which ask); the same map when none is left out.
     */
    public Map<String, String> settable(Map<String, String> asked, Kind kind) {
      Map<String, String> out = null;
      for (Map.Entry<String, String> e : asked.entrySet()) {
        String name = e.getKey();
        String reserved = whyReserved(name, kind);
        String badName = reserved == null ? whyNotToken(name) : null;
        String badValue = badName == null && reserved == null ? whyInvalidValue(e.getValue())
            : null;
        if (badName == null && reserved == null && badValue == null) {
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
        leftOut(kind, name, reserved != null ? reserved
            : badName != null ? " is not a valid header name (" + badName + ")"
            : " has a value holding " + badValue);
      }
      return out == null ? asked : out;
    }

    /**
     * {@code asked} without the names that are no token (no header of such a name can be on a
     * request) or are reserved ({@link #whyReserved}), each counted and reported; the same set
     * when none is left out.
     */
    public Set<String> removable(Set<String> asked) {
      Set<String> out = null;
      for (String name : asked) {
        String reserved = whyReserved(name, Kind.REQUEST_REMOVE);
        String badName = reserved == null ? whyNotToken(name) : null;
        if (badName == null && reserved == null) {
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
        leftOut(Kind.REQUEST_REMOVE, name, reserved != null ? reserved
            : " is not a valid header name (" + badName + "); no header of that name can be on"
                + " the request");
      }
      return out == null ? asked : out;
    }

    /**
     * Counts and reports, throttled, one header of {@code kind} left out: {@code why} follows the
     * quoted {@code name} and must not quote the value.
     */
    public void leftOut(Kind kind, String name, String why) {
      count.increment();
      String key = kind.ordinal() + name;
      Throttle t = byName.get(key);
      if (t == null) {
        t = byName.size() < MAX_THROTTLED_NAMES
            ? byName.computeIfAbsent(key, k -> new Throttle()) : byKind[kind.ordinal()];
      }
      t.report(ticker.nanos(), kind.what + ": " + quoted(name) + why
          + "; the header is left out (its value is not logged)");
    }

    private final class Throttle {
      private static final long NEVER = Long.MIN_VALUE;
      private final AtomicLong nextReport = new AtomicLong(NEVER);
      private final AtomicLong suppressed = new AtomicLong();

      void report(long now, String message) {
        long next = nextReport.get();
        if ((next == NEVER || now - next >= 0)
            && nextReport.compareAndSet(next, now + INTERVAL_NANOS)) {
          long left = suppressed.getAndSet(0);
          log.warning(message + (left == 0 ? "" : " (" + left
              + " more like it since the last report were not logged)"));
        } else {
          suppressed.incrementAndGet();
        }
      }
    }
  }
}
