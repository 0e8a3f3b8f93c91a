package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/** {@code round-robin-picker}: cycles through the candidates in pool order. */
final class RoundRobinPicker extends SimplePicker {
  static final String TYPE = "round-robin-picker";

  private final AtomicLong next = new AtomicLong();

  RoundRobinPicker(int maxEndpoints) {
    super(TYPE, maxEndpoints);
  }

  @Override
  List<Candidate> choose(CycleState state, List<Candidate> candidates, double[] scores, int n) {
    int start = (int) Long.remainderUnsigned(next.getAndIncrement(), n);
    if (maxEndpoints == 1) {
      return List.of(candidates.get(start));
    }
    int k = Math.min(maxEndpoints, n);
    List<Candidate> out = new ArrayList<>(k);
    for (int i = 0; i < k; i++) {
      out.add(candidates.get((start + i) % n));
    }
    return out;
  }

  /** Provides {@value #TYPE}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends SimplePicker.Provider {
    public Provider() {
      super(TYPE, RoundRobinPicker::new);
    }
  }
}
