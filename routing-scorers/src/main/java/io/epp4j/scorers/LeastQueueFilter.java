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
 * {@code least-queue-filter} (Gateway API Inference Extension 0.5): keeps the endpoints whose
 * waiting queue lies in the lowest band, {@code [min, min + (max − min) / n]} with integer
 * division over the {@code n} candidates, so with equal queues every endpoint stays and with one
 * outlier only the shortest queues do. Never empty for a non-empty input.
 */
final class LeastQueueFilter implements Filter {
  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    int n = candidates.size();
    if (n == 0) {
      return candidates;
    }
    int min = Integer.MAX_VALUE;
    int max = 0;
    for (int i = 0; i < n; i++) {
      int q = candidates.get(i).metrics().waitingRequests();
      min = Math.min(min, q);
      max = Math.max(max, q);
    }
    int limit = min + (max - min) / n;
    return CandidateLists.retain(candidates, c -> c.metrics().waitingRequests() <= limit);
  }

  @Override
  public String toString() {
    return "least-queue-filter";
  }

  /** Provides {@code least-queue-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("least-queue-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new LeastQueueFilter();
    }
  }
}
