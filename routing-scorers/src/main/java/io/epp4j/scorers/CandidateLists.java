package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Predicate;
import java.util.random.RandomGenerator;

/** List operations the built-in filters and pickers share; none modifies its input. */
final class CandidateLists {
  private CandidateLists() {}

  /**
   * Keeps the candidates for which {@code keep} holds, in order; returns the input list itself
   * if all are kept, so the common "nothing dropped" case allocates nothing.
   */
  static List<Candidate> retain(List<Candidate> in, Predicate<Candidate> keep) {
    int n = in.size();
    int i = 0;
    while (i < n && keep.test(in.get(i))) {
      i++;
    }
    if (i == n) {
      return in;
    }
    List<Candidate> out = new ArrayList<>(n - 1);
    for (int j = 0; j < i; j++) {
      out.add(in.get(j));
    }
    for (int j = i + 1; j < n; j++) {
      Candidate c = in.get(j);
      if (keep.test(c)) {
        out.add(c);
      }
    }
    return out;
  }

  /** The candidates at the first {@code k} positions of {@code order}. */
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
}
