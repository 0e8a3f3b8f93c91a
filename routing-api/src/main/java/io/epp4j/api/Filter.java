package io.epp4j.api;

import java.util.List;

/**
 * Narrows the candidates of a profile. Filters run in configuration order; when one returns no
 * candidates the profile picks nothing.
 */
public interface Filter extends Plugin {

  /**
   * Returns the candidates to keep, in their original order. May return {@code candidates}
   * itself when nothing is dropped. Must not modify the given list.
   */
  List<Candidate> filter(InferenceRequest request, CycleState state, List<Candidate> candidates);
}
