package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.List;

/**
 * {@code low-queue-filter} (Gateway API Inference Extension 0.5): keeps the endpoints whose
 * waiting queue is at most {@code threshold} (default 128). Unlike {@code utilization-filter} it
 * does not fail open: when every endpoint is over the threshold it keeps none, which is what
 * sends a {@code decision-tree-filter} down its {@code nextOnFailure} branch. Endpoints never
 * scraped count as an empty queue, as upstream's zero-valued metrics do.
 */
final class LowQueueFilter implements Filter {
  private final int threshold;

  LowQueueFilter(int threshold) {
    this.threshold = threshold;
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    return CandidateLists.retain(candidates, c -> c.metrics().waitingRequests() <= threshold);
  }

  @Override
  public String toString() {
    return "low-queue-filter(threshold=" + threshold + ")";
  }

  /** Provides {@code low-queue-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("low-queue-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      // queueThreshold is the name an earlier epp4j release took for this type
      int threshold = p.getInt(CommonParameters.alias(p, "threshold", "queueThreshold"), 128, 0,
          Integer.MAX_VALUE);
      for (String other : new String[] {"kvCacheThreshold", "metricsStalenessMillis"}) {
        if (p.has(other)) {
          p.raw(other);
          p.error(other, "is not a low-queue-filter parameter: this filter is upstream's (queue"
              + " only, not failing open); use utilization-filter for KV and staleness limits");
        }
      }
      return new LowQueueFilter(threshold);
    }
  }
}
