package io.epp4j.envoy;

import io.epp4j.api.HeaderChecks;
import io.epp4j.api.HeaderChecks.Refusals.Kind;
import io.epp4j.api.Ticker;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * Keeps out of the server's header mutations what Envoy's ext_proc filter refuses. Envoy checks
 * every name and value of a mutation ({@code MutationUtils::applyHeaderMutations}): a name that
 * is not an HTTP token, or a value holding NUL, CR, LF, another control character or DEL, fails
 * the whole message, and Envoy replies 500 in place of the request (on the request's headers)
 * or of the endpoint's answer (on the response's). So a header a routing plugin asked for with
 * such a name or value is left out, and the request goes on without it, as is one it may not
 * touch ({@link #reserved}: pseudo-headers, {@code host}, the body's framing). The checks of
 * names and values are every gateway's ({@link HeaderChecks}), and so are the count and the
 * throttled reports ({@link HeaderChecks.Refusals}: the header's name escaped, never its value,
 * which may come from the prompt); this class adds Envoy's reserved names. The router's own
 * headers (the pick, the prefill pick) are endpoint ids, which never hold a character Envoy
 * refuses. Thread-safe: one per server, shared by its streams.
 */
final class HeaderRefusals {
  private static final Logger LOG = Logger.getLogger(HeaderRefusals.class.getName());
  private final HeaderChecks.Refusals refusals;

  HeaderRefusals(Ticker ticker) {
    this.refusals = new HeaderChecks.Refusals(LOG, ticker);
  }

  /** Headers left out so far because Envoy would refuse or misapply the mutation. */
  long count() {
    return refusals.count();
  }

  /**
   * {@code asked} without the headers whose name or value Envoy refuses, or that it reserves;
   * each left out is counted and reported. The same map when nothing is left out.
   */
  Map<String, String> settable(Map<String, String> asked, Kind kind) {
    Map<String, String> out = null;
    for (Map.Entry<String, String> e : asked.entrySet()) {
      String name = e.getKey();
      String why = whyNot(name, kind);
      if (why == null) {
        String badValue = HeaderChecks.whyInvalidValue(e.getValue());
        why = badValue == null ? null : " has a value holding " + badValue;
      }
      if (why == null) {
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
      refusals.leftOut(kind, name, why);
    }
    return out == null ? asked : out;
  }

  /** {@code asked} without the names Envoy refuses or reserves; each left out is counted and reported. */
  Set<String> removable(Set<String> asked) {
    Set<String> out = null;
    for (String name : asked) {
      String why = whyNot(name, Kind.REQUEST_REMOVE);
      if (why == null) {
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
      refusals.leftOut(Kind.REQUEST_REMOVE, name, why);
    }
    return out == null ? asked : out;
  }

  /** Why a plugin may not ask for header {@code name} here, or null when it may. */
  private static @Nullable String whyNot(String name, Kind kind) {
    // a pseudo-header is named as such before its ':' is judged as a character of a token
    String reserved = reserved(name, kind);
    if (reserved != null) {
      return reserved;
    }
    String badName = HeaderChecks.whyNotToken(name);
    return badName == null ? null : " is not a valid header name (" + badName + ")";
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
    if (name.startsWith(":") && name.length() > 1) {
      return " is a pseudo-header, which routing plugins may not set or remove (Envoy ignores"
          + " or refuses most such mutations and would apply :path or :status after the pick)";
    }
    // host (Envoy ignores or refuses a change of it) and the body's framing: every gateway's rule
    return HeaderChecks.whyReserved(name, kind);
  }
}
