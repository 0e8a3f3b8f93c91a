package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Picker;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.random.RandomGenerator;

/** Pickers that ignore or barely use scores: random, weighted random, round robin, power of two. */
final class SimplePickers {
  private SimplePickers() {}

  static List<Candidate> select(List<Candidate> candidates, int[] order, int k) {
    if (k == 1) {
      return List.of(candidates.get(order[0]));
    }
    List<Candidate> out = new ArrayList<>(k);
    for (int i = 0; i < k; i++) {
      out.add(candidates.get(order[i]));
    }
    return out;
  }

  /** A partial Fisher–Yates shuffle: the first {@code k} slots are a uniform sample. */
  static int[] sample(int n, int k, RandomGenerator rnd) {
    int[] order = new int[n];
    for (int i = 0; i < n; i++) {
      order[i] = i;
    }
    for (int i = 0; i < k; i++) {
      int j = i + rnd.nextInt(n - i);
      int t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    return order;
  }

  /** {@code random-picker}: uniform choice, ignoring scores. */
  static final class RandomPicker implements Picker {
    private final int maxEndpoints;

    RandomPicker(int maxEndpoints) {
      this.maxEndpoints = maxEndpoints;
    }

    @Override
    public List<Candidate> pick(InferenceRequest request, CycleState state,
        List<Candidate> candidates, double[] scores) {
      int n = candidates.size();
      if (n == 0) {
        return List.of();
      }
      if (maxEndpoints == 1) {
        return List.of(candidates.get(state.random().nextInt(n)));
      }
      int k = Math.min(maxEndpoints, n);
      return select(candidates, sample(n, k, state.random()), k);
    }

    @Override
    public String toString() {
      return "random-picker";
    }
  }

  /**
   * {@code weighted-random-picker}: weighted sampling without replacement by A-Res (Efraimidis
   * and Spirakis): each candidate with score w > 0 draws key {@code u^(1/w)} (computed as
   * {@code ln(u)/w}, same order), the largest keys win. Candidates with score 0 come only after
   * all positive ones; when every score is 0 the choice is uniform.
   */
  static final class WeightedRandomPicker implements Picker {
    private final int maxEndpoints;

    WeightedRandomPicker(int maxEndpoints) {
      this.maxEndpoints = maxEndpoints;
    }

    @Override
    public List<Candidate> pick(InferenceRequest request, CycleState state,
        List<Candidate> candidates, double[] scores) {
      int n = candidates.size();
      if (n == 0) {
        return List.of();
      }
      RandomGenerator rnd = state.random();
      int k = Math.min(maxEndpoints, n);
      double[] keys = new double[n];
      for (int i = 0; i < n; i++) {
        double w = scores[i];
        // ln(u)/w orders like u^(1/w) without overflow; zero weights rank below every positive one
        keys[i] = w > 0 ? Math.log(rnd.nextDouble()) / w : Double.NEGATIVE_INFINITY;
      }
      // random starting order, so equal keys (all-zero scores) are taken in random order
      int[] order = sample(n, n, rnd);
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
      return select(candidates, order, k);
    }

    @Override
    public String toString() {
      return "weighted-random-picker";
    }
  }

  /** {@code round-robin-picker}: cycles through the candidates in pool order. */
  static final class RoundRobinPicker implements Picker {
    private final int maxEndpoints;
    private final AtomicLong next = new AtomicLong();

    RoundRobinPicker(int maxEndpoints) {
      this.maxEndpoints = maxEndpoints;
    }

    @Override
    public List<Candidate> pick(InferenceRequest request, CycleState state,
        List<Candidate> candidates, double[] scores) {
      int n = candidates.size();
      if (n == 0) {
        return List.of();
      }
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

    @Override
    public String toString() {
      return "round-robin-picker";
    }
  }

  /**
   * {@code power-of-two-picker}: draws two distinct candidates at random and takes the one with
   * fewer router-tracked in-flight requests (ties: fewer waiting requests, then the first
   * drawn). The other one is the first fallback; further fallbacks are random.
   */
  static final class PowerOfTwoPicker implements Picker {
    private final int maxEndpoints;

    PowerOfTwoPicker(int maxEndpoints) {
      this.maxEndpoints = maxEndpoints;
    }

    @Override
    public List<Candidate> pick(InferenceRequest request, CycleState state,
        List<Candidate> candidates, double[] scores) {
      int n = candidates.size();
      if (n == 0) {
        return List.of();
      }
      if (n == 1) {
        return List.of(candidates.get(0));
      }
      int k = Math.min(maxEndpoints, n);
      int[] order = sample(n, Math.max(2, k), state.random());
      Candidate a = candidates.get(order[0]);
      Candidate b = candidates.get(order[1]);
      if (b.inFlightRequests() < a.inFlightRequests()
          || (b.inFlightRequests() == a.inFlightRequests()
              && b.metrics().waitingRequests() < a.metrics().waitingRequests())) {
        int t = order[0];
        order[0] = order[1];
        order[1] = t;
      }
      return select(candidates, order, k);
    }

    @Override
    public String toString() {
      return "power-of-two-picker";
    }
  }
}
