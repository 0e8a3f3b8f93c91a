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
 * {@code least-kv-cache-filter} (Gateway API Inference Extension 0.5): keeps the endpoints whose
 * KV-cache usage lies in the lowest band, {@code [min, min + (max − min) / n]} over the {@code n}
 * candidates. Never empty for a non-empty input.
 */
final class LeastKvCacheFilter implements Filter {
  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    int n = candidates.size();
    if (n == 0) {
      return candidates;
    }
    double min = Double.MAX_VALUE;
    double max = 0;
    for (int i = 0; i < n; i++) {
      double kv = candidates.get(i).metrics().kvCacheUsage();
      min = Math.min(min, kv);
      max = Math.max(max, kv);
    }
    double limit = min + (max - min) / n;
    return CandidateLists.retain(candidates, c -> c.metrics().kvCacheUsage() <= limit);
  }

  @Override
  public String toString() {
    return "least-kv-cache-filter";
  }

  /** Provides {@code least-kv-cache-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("least-kv-cache-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new LeastKvCacheFilter();
    }
  }
}
