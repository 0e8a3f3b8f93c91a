package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import java.util.List;

/**
 * {@code power-of-two-picker}: draws two distinct candidates at random and takes the one with
 * fewer router-tracked in-flight requests (ties: fewer waiting requests, then the first
 * drawn). The other one is the first fallback; further fallbacks are random.
 */
final class PowerOfTwoPicker extends SimplePicker {
  static final String TYPE = "power-of-two-picker";

  PowerOfTwoPicker(int maxEndpoints) {
    super(TYPE, maxEndpoints);
  }

  @Override
  List<Candidate> choose(CycleState state, List<Candidate> candidates, double[] scores, int n) {
    if (n == 1) {
      return List.of(candidates.get(0));
    }
    int k = Math.min(maxEndpoints, n);
    int[] order = CandidateLists.sample(n, Math.max(2, k), state.random());
    Candidate a = candidates.get(order[0]);
    Candidate b = candidates.get(order[1]);
    if (b.inFlightRequests() < a.inFlightRequests()
        || (b.inFlightRequests() == a.inFlightRequests()
            && b.metrics().waitingRequests() < a.metrics().waitingRequests())) {
      int t = order[0];
      order[0] = order[1];
      order[1] = t;
    }
    return CandidateLists.select(candidates, order, k);
  }

  /** Provides {@value #TYPE}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends SimplePicker.Provider {
    public Provider() {
      super(TYPE, PowerOfTwoPicker::new);
    }
  }
}
