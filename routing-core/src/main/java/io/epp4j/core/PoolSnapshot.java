package io.epp4j.core;

import io.epp4j.api.Candidate;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** An immutable view of the endpoint pool, swapped atomically on every change. */
final class PoolSnapshot {
  static final PoolSnapshot EMPTY = new PoolSnapshot(new EndpointState[0]);

  final EndpointState[] states;
  final List<Candidate> candidates;
  private final Map<String, Integer> index;

  PoolSnapshot(EndpointState[] states) {
    this.states = states;
    this.candidates = Collections.unmodifiableList(Arrays.asList((Candidate[]) states));
    Map<String, Integer> m = new HashMap<>(states.length * 2);
    for (int i = 0; i < states.length; i++) {
      m.put(states[i].endpoint.id(), i);
    }
    this.index = m;
  }

  int indexOf(String id) {
    Integer i = index.get(id);
    return i == null ? -1 : i;
  }

  EndpointState get(String id) {
    int i = indexOf(id);
    return i < 0 ? null : states[i];
  }
}
