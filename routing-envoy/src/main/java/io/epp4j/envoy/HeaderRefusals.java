package io.epp4j.envoy;

import io.epp4j.api.HeaderChecks;
import io.epp4j.api.HeaderChecks.Refusals.Kind;
import io.epp4j.api.Ticker;
import java.util.Map;
import java.util.Set;
import java.util.logging.Logger;

/**
 * Keeps out of the server's header mutations what Envoy's ext_proc filter refuses or misapplies.
 * Envoy checks every name and value of a mutation ({@code MutationUtils::applyHeaderMutations}):
 * a name that is not an HTTP token, or a value holding NUL, CR, LF, another control character or
 * DEL, fails the whole message, and Envoy replies 500 in place of the request (on the request's
 * headers) or of the endpoint's answer (on the response's). Its mutation rules ignore a change of
 * {@code :authority}, {@code :method}, {@code :scheme} or {@code host}, never remove a
 * pseudo-header or {@code host} (and fail the request with a 500 for either under
 * {@code disallow_is_error}), and apply {@code :path}, which would send the request on to another
 * path than the one it was routed for; a {@code :status} would change the status the server
 * judged the endpoint by, and a {@code content-length} or {@code transfer-encoding} would misframe
 * the body, which passes unchanged (the server restores the request's length itself). Every
 * gateway leaves these out by the same rules ({@link HeaderChecks}: names, values and the
 * reserved names), counts them and reports each, the header's name escaped and never its value,
 * which may come from the prompt, throttled to one a minute per kind and header name
 * ({@link HeaderChecks.Refusals}); this class gives that the server's logger. The router's own
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

  /** {@code asked} without what Envoy refuses or misapplies; each left out counted and reported. */
  Map<String, String> settable(Map<String, String> asked, Kind kind) {
    return refusals.settable(asked, kind);
  }

  /** {@code asked} without what Envoy refuses or misapplies; each left out counted and reported. */
  Set<String> removable(Set<String> asked) {
    return refusals.removable(asked);
  }
}
