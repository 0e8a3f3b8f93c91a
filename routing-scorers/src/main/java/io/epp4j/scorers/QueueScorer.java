package io.epp4j.scorers;

import io.epp4j.api.Candidate;

/** {@code queue-scorer}: fewer waiting requests score higher (min–max over the candidates). */
final class QueueScorer extends MinMaxCountScorer {
  static final String TYPE = "queue-scorer";

  QueueScorer(Staleness staleness) {
    super(TYPE, staleness);
  }

  @Override
  int value(Candidate c) {
    return c.waitingRequests();
  }

  /** Provides {@value #TYPE}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends MinMaxCountScorer.Provider {
    public Provider() {
      super(TYPE, QueueScorer::new);
    }
  }
}
