package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Picker;
import java.util.ArrayList;
import java.util.List;
import java.util.random.RandomGenerator;

/**
 * {@code max-score-picker}: the highest total score wins; ties are broken at random (the
 * upstream shuffles then sorts stably); returns up to {@code maxNumOfEndpoints} endpoints in
 * descending score order.
 */
final class MaxScorePicker implements Picker {
  private final int maxEndpoints;

  MaxScorePicker(int maxNumOfEndpoints) {
    if (maxNumOfEndpoints < 1) {
      throw new IllegalArgumentException("maxNumOfEndpoints must be >= 1, got " + maxNumOfEndpoints);
    }
    this.maxEndpoints = maxNumOfEndpoints;
  }

  int maxNumOfEndpoints() {
    return maxEndpoints;
  }

  @Override
  public List<Candidate> pick(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    if (n == 0) {
      return List.of();
    }
    RandomGenerator rnd = state.random();
    if (maxEndpoints == 1) {
      // single pass, reservoir-style random choice among ties; no sorting, no boxing
      int best = -1;
      double bestScore = Double.NEGATIVE_INFINITY;
      int ties = 0;
      for (int i = 0; i < n; i++) {
        double s = scores[i];
        if (s > bestScore) {
          bestScore = s;
          best = i;
          ties = 1;
        } else if (s == bestScore) {
          ties++;
          if (rnd.nextInt(ties) == 0) {
            best = i;
          }
        }
      }
      return List.of(candidates.get(best));
    }
    // shuffle indices, then stable selection of the top k by score
    int[] order = new int[n];
    for (int i = 0; i < n; i++) {
      order[i] = i;
    }
    for (int i = n - 1; i > 0; i--) {
      int j = rnd.nextInt(i + 1);
      int t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    int k = Math.min(maxEndpoints, n);
    // insertion sort prefix: O(n*k), k is small
    for (int i = 0; i < k; i++) {
      int bestPos = i;
      for (int j = i + 1; j < n; j++) {
        if (scores[order[j]] > scores[order[bestPos]]) {
          bestPos = j;
        }
      }
      int chosen = order[bestPos];
      System.arraycopy(order, i, order, i + 1, bestPos - i);
      order[i] = chosen;
    }
    List<Candidate> out = new ArrayList<>(k);
    for (int i = 0; i < k; i++) {
      out.add(candidates.get(order[i]));
    }
    return out;
  }

  @Override
  public String toString() {
    return "max-score-picker(" + maxEndpoints + ")";
  }
}
