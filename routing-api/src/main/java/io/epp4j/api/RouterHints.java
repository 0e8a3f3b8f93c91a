package io.epp4j.api;

/**
 * Where a plugin that shares routing state between the routers of one pool delivers what the
 * other routers did, and where it reads what this router has in flight to tell them. Every
 * router offers one: a plugin gets it with {@code context.service(RouterHints.class)}, embedding
 * code with {@code Router.hints()}.
 *
 * <p>Prefix and session hints reach every plugin of the running configuration that implements
 * {@link HintListener}. In-flight figures are per remote router ({@code origin}): each call
 * replaces that router's previous figure for the endpoint, and the candidates' in-flight counts
 * that scorers read are this router's own plus every remote figure. A figure not refreshed
 * within the router's {@code inFlightMaxAge} is dropped, as an unfinished local request is.
 * Remote figures for an endpoint end with its removal from the pool.
 *
 * <p>Thread-safe; meant for a background thread, not the routing path. Unknown endpoints are
 * ignored.
 */
public interface RouterHints {

  /** Another router sent a prompt with these block hashes to {@code endpointId}. */
  void prefixSent(String endpointId, PrefixBlocks blocks);

  /** Another router sent a request of session {@code sessionKey} to {@code endpointId}. */
  void sessionBound(String sessionKey, String endpointId);

  /**
   * Router {@code origin} has {@code requests} requests of {@code tokens} estimated tokens in
   * flight on {@code endpointId} (negative values count as 0; a figure above 2^20 requests or
   * 2^40 tokens, which no engine carries, counts as that bound, so that no sum of remote figures
   * can overflow the counters).
   */
  void inFlight(String origin, String endpointId, int requests, long tokens);

  /** Drops every in-flight figure of router {@code origin}, e.g. one that stopped or went silent. */
  void forget(String origin);

  /** Visits this router's own in-flight figures (remote ones excluded), one call per endpoint. */
  void forEachLocalInFlight(InFlightVisitor visitor);

  /**
   * Says that this router shares its routing state with other routers of its pool; a replication
   * plugin calls it once when it starts, and {@link #stopSharingState} once when it closes. While
   * it is set the router breaks exact ties between endpoints by the prompt's first block
   * (rendezvous hashing) instead of at random, so that routers deciding on the same unknown
   * prefix before any hint can reach them (a burst that arrives at all gateways at once) still
   * choose the same endpoint and the prefix is not prefilled and cached once per router. A router
   * that shares nothing keeps the random tie-break. The calls are counted: the router shares
   * while more calls of this method than of {@link #stopSharingState} were made, so that the two
   * instances of a plugin that a reload runs side by side hand over without a gap. The default
   * does nothing.
   */
  default void shareState() {}

  /**
   * Undoes one call of {@link #shareState}: a plugin that called it calls this once when it closes
   * (also when its construction fails after the call), so that a reload that drops it gives the
   * router its random tie-break back. A call without a matching {@link #shareState} is ignored.
   * The default does nothing.
   */
  default void stopSharingState() {}

  /** Whether more calls of {@link #shareState} than of {@link #stopSharingState} were made. */
  default boolean sharesState() {
    return false;
  }

  /** Receives one endpoint's in-flight figures. */
  @FunctionalInterface
  interface InFlightVisitor {
    void visit(String endpointId, int requests, long tokens);
  }
}
