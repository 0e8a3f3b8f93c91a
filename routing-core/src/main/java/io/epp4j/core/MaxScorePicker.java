package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Picker;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.RouterHints;
import java.util.ArrayList;
import java.util.List;
import java.util.random.RandomGenerator;
import org.jspecify.annotations.Nullable;

/**
 * {@code max-score-picker}: the highest total score wins; ties are broken at random (the
 * upstream shuffles then sorts stably); returns up to {@code maxNumOfEndpoints} endpoints in
 * descending score order.
 *
 * <p>When the router shares its state with other routers ({@link RouterHints#sharesState}) and
 * one endpoint is picked, a tie goes instead to the endpoint whose hash with the prompt's first
 * block ({@link PrefixBlocks}) is highest: routers that have not heard of each other's choice
 * yet then agree on where an unknown prefix goes, as one router would have kept it in one place.
 */
final class MaxScorePicker implements Picker {
  private final int maxEndpoints;
  private final @Nullable RouterHints hints;

  MaxScorePicker(int maxNumOfEndpoints) {
    this(maxNumOfEndpoints, null);
  }

  MaxScorePicker(int maxNumOfEndpoints, @Nullable RouterHints hints) {
    if (maxNumOfEndpoints < 1) {
      throw new IllegalArgumentException("maxNumOfEndpoints must be >= 1, got " + maxNumOfEndpoints);
    }
    this.maxEndpoints = maxNumOfEndpoints;
    this.hints = hints;
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
      boolean sawTie = false;
      for (int i = 0; i < n; i++) {
        double s = scores[i];
        // one comparison for the usual candidate, below the best (NaN fails it too); the
        // JIT's code for two comparisons in a row took about twice as long per candidate
        if (s >= bestScore) {
          if (s > bestScore) {
            bestScore = s;
            best = i;
            ties = 1;
          } else {
            sawTie = true;
            ties++;
            if (rnd.nextInt(ties) == 0) {
              best = i;
            }
          }
        }
      }
      if (sawTie && hints != null && hints.sharesState()) {
        PrefixBlocks blocks = state.get(PrefixBlocks.KEY);
        if (blocks != null && blocks.size() > 0) {
          // the random draws above still happen, so the cycle's random stream is as before
          best = rendezvous(candidates, scores, bestScore, blocks.hash(0));
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

  /** The tied candidate whose hash with {@code key} is highest; the same on every router. */
  private static int rendezvous(List<Candidate> candidates, double[] scores, double top,
      long key) {
    int best = -1;
    long bestHash = 0;
    for (int i = 0; i < scores.length && i < candidates.size(); i++) {
      if (scores[i] != top) {
        continue;
      }
      long h = mix(key ^ (candidates.get(i).id().hashCode() * 0x9E3779B97F4A7C15L));
      if (best < 0 || h > bestHash) {
        best = i;
        bestHash = h;
      }
    }
    return best;
  }

  /** SplitMix64's finalizer. */
  private static long mix(long z) {
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    return z ^ (z >>> 31);
  }

  @Override
  public String toString() {
    return "max-score-picker(" + maxEndpoints + ")";
  }
}
