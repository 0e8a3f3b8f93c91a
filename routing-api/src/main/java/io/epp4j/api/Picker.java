package io.epp4j.api;

import java.util.List;

/**
 * Chooses the endpoints of a profile from the scored candidates: the primary first, then
 * fallbacks in order of preference.
 */
public interface Picker extends Plugin {

  /**
   * Returns the picked candidates, primary first; empty only when {@code candidates} is empty.
   *
   * @param scores total weighted score of {@code candidates.get(i)} at index {@code i}; valid
   *     during this call only (the router reuses the array for later cycles)
   */
  List<Candidate> pick(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores);
}
