package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import java.util.List;
import java.util.random.RandomGenerator;

/**
 * {@code weighted-random-picker}: weighted sampling without replacement by A-Res (Efraimidis
 * and Spirakis): each candidate with score w > 0 draws key {@code u^(1/w)} (computed as
 * {@code ln(u)/w}, same order), the largest keys win. Candidates with score 0 come only after
 * all positive ones; when every score is 0 the choice is uniform.
 */
final class WeightedRandomPicker extends SimplePicker {
  static final String TYPE = "weighted-random-picker";

  WeightedRandomPicker(int maxEndpoints) {
    super(TYPE, maxEndpoints);
  }

  @Override
  List<Candidate> choose(CycleState state, List<Candidate> candidates, double[] scores, int n) {
    RandomGenerator rnd = state.random();
    int k = Math.min(maxEndpoints, n);
    double[] keys = new double[n];
    for (int i = 0; i < n; i++) {
      double w = scores[i];
      // ln(u)/w orders like u^(1/w) without overflow; zero weights rank below every positive one
      keys[i] = w > 0 ? Math.log(rnd.nextDouble()) / w : Double.NEGATIVE_INFINITY;
    }
    // random starting order, so equal keys (all-zero scores) are taken in random order
    int[] order = CandidateLists.sample(n, n, rnd);
    for (int i = 0; i < k; i++) {
      int best = i;
      for (int j = i + 1; j < n; j++) {
        if (keys[order[j]] > keys[order[best]]) {
          best = j;
        }
      }
      int t = order[i];
      order[i] = order[best];
      order[best] = t;
    }
    return CandidateLists.select(candidates, order, k);
  }

  /** Provides {@value #TYPE}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends SimplePicker.Provider {
    public Provider() {
      super(TYPE, WeightedRandomPicker::new);
    }
  }
}
