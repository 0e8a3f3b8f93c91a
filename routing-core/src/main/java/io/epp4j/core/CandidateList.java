package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.PoolOrder;
import java.util.AbstractList;
import java.util.Map;
import java.util.RandomAccess;

/**
 * The pool's candidates as an immutable list over the snapshot's array. Every scorer, filter and
 * picker walks the list with {@code get(i)}; a wrapped {@code Arrays.asList} put a call through
 * {@code Collections.unmodifiableList}, whose call site the whole JVM shares, in front of every
 * element, and the JIT could not inline it. One final class here keeps those call sites
 * monomorphic, so {@code get(i)} compiles to an array load. Its {@link PoolOrder} token is the
 * snapshot's, kept across snapshots that differ only in metrics.
 */
final class CandidateList extends AbstractList<Candidate> implements RandomAccess, PoolOrder {
  private final Candidate[] elements;
  private final Object order;
  private final Map<String, Integer> positions;

  /** {@code positions}: each element's position by endpoint id, shared with the snapshot. */
  CandidateList(Candidate[] elements, Object order, Map<String, Integer> positions) {
    this.elements = elements;
    this.order = order;
    this.positions = positions;
  }

  @Override
  public Object poolOrder() {
    return order;
  }

  @Override
  public int positionOf(String endpointId) {
    Integer i = positions.get(endpointId);
    return i == null ? -1 : i;
  }

  @Override
  public Candidate get(int index) {
    return elements[index];
  }

  @Override
  public int size() {
    return elements.length;
  }
}
