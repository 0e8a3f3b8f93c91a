package io.epp4j.scorers;

import io.epp4j.api.Candidate;

/**
 * {@code running-requests-size-scorer}: fewer running requests score higher (min–max over the
 * candidates).
 */
final class RunningRequestsSizeScorer extends MinMaxCountScorer {
  static final String TYPE = "running-requests-size-scorer";

  RunningRequestsSizeScorer(Staleness staleness) {
    super(TYPE, staleness);
  }

  @Override
  int value(Candidate c) {
    return c.runningRequests();
  }

  /** Provides {@value #TYPE}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends MinMaxCountScorer.Provider {
    public Provider() {
      super(TYPE, RunningRequestsSizeScorer::new);
    }
  }
}
