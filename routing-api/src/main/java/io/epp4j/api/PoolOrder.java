package io.epp4j.api;

/**
 * A candidate list in the pool's own order. The router hands its plugins such a list while no
 * filter has narrowed the pool. Two lists with the same {@link #poolOrder()} object hold the same
 * {@link Endpoint} objects at the same positions, whatever their metrics and in-flight figures:
 * the token changes when endpoints join, leave or change labels, not when metrics arrive. A
 * plugin that keeps per-endpoint state by position can compare the token once per list instead of
 * checking every candidate. Lists that filters return do not implement it.
 */
public interface PoolOrder {

  /** The token of this order; compared by identity. */
  Object poolOrder();

  /**
   * The position in this list of the endpoint with id {@code endpointId}, or -1 when it is not
   * in the list. The pool knows its positions by id, so this takes no scan of the candidates.
   */
  int positionOf(String endpointId);
}
