package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Scorer;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * {@code active-request-scorer} (llm-d): router-tracked in-flight requests (counted from the
 * routing decision until {@code onComplete}/{@code onFailure}); 1.0 at or below
 * {@code idleThreshold}, else {@code (maxCount − count) / maxCount × maxBusyScore} over the
 * candidates. A {@code maxBusyScore} below 1 keeps every busy endpoint below every idle one.
 * Needs no metrics, so staleness does not apply. When the file has an
 * {@code inflight-load-producer} (or names one in {@code inFlightLoadProducerName}), its request
 * count is read instead, as upstream's scorer reads its producer.
 */
final class ActiveRequestScorer implements Scorer {
  private final int idleThreshold;
  private final double maxBusyScore;
  private final @Nullable InFlightLoadProducer load;

  ActiveRequestScorer(int idleThreshold) {
    this(idleThreshold, 1.0, null);
  }

  ActiveRequestScorer(int idleThreshold, double maxBusyScore,
      @Nullable InFlightLoadProducer load) {
    this.idleThreshold = idleThreshold;
    this.maxBusyScore = maxBusyScore;
    this.load = load;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    long max = 0;
    for (int i = 0; i < n; i++) {
      max = Math.max(max, count(candidates.get(i)));
    }
    for (int i = 0; i < n; i++) {
      long c = count(candidates.get(i));
      scores[i] = c <= idleThreshold || max == 0 ? 1.0 : (double) (max - c) / max * maxBusyScore;
    }
  }

  /** The file's in-flight producer's count when there is one (as upstream), else the router's. */
  private long count(Candidate c) {
    InFlightLoadProducer l = load;
    return l != null ? l.requests(c.id()) : c.inFlightRequests();
  }

  @Override
  public String toString() {
    return "active-request-scorer";
  }

  /** Provides {@code active-request-scorer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("active-request-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      // as llm-d's NewActiveRequest: a value out of range is not set, and the default holds
      int idle = p.getInt("idleThreshold", 0);
      if (idle < 0) {
        p.notice("idleThreshold", "is " + idle + ": as upstream, a value below 0 means the"
            + " default, 0");
        idle = 0;
      }
      double busy = p.getDouble("maxBusyScore", 1.0);
      if (!(busy >= 0 && busy <= 1.0)) {
        p.notice("maxBusyScore", "is " + busy + ": as upstream, a value outside [0, 1] means"
            + " the default, 1.0");
        busy = 1.0;
      }
      return new ActiveRequestScorer(idle, busy,
          InFlightLoadProducer.find(c, p, "inFlightLoadProducerName"));
    }
  }
}
