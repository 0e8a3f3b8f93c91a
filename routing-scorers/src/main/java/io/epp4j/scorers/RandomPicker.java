package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import java.util.List;

/** {@code random-picker}: uniform choice, ignoring scores. */
final class RandomPicker extends SimplePicker {
  static final String TYPE = "random-picker";

  RandomPicker(int maxEndpoints) {
    super(TYPE, maxEndpoints);
  }

  @Override
  List<Candidate> choose(CycleState state, List<Candidate> candidates, double[] scores, int n) {
    if (maxEndpoints == 1) {
      return List.of(candidates.get(state.random().nextInt(n)));
    }
    int k = Math.min(maxEndpoints, n);
    return CandidateLists.select(candidates, CandidateLists.sample(n, k, state.random()), k);
  }

  /** Provides {@value #TYPE}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends SimplePicker.Provider {
    public Provider() {
      super(TYPE, RandomPicker::new);
    }
  }
}
