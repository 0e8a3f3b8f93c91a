package io.epp4j.api;

import java.util.List;

/**
 * Rates each candidate between 0 (worst) and 1 (best). The router combines scorers as
 * {@code Σ weight × clamp(score, 0, 1)}; values outside [0,1] are clamped and NaN counts as 0.
 */
public interface Scorer extends Plugin {

  /**
   * Writes the score of {@code candidates.get(i)} into {@code scores[i]}. The array is zeroed
   * before the call and has at least {@code candidates.size()} slots.
   */
  void score(InferenceRequest request, CycleState state, List<Candidate> candidates, double[] scores);
}
