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
import java.util.ArrayList;
import java.util.Set;

/**
 * {@code lora-affinity-filter} (Gateway API Inference Extension 0.5). The adapter is the
 * request's LoRA adapter, else its target model (upstream 0.5 named adapters as models). Splits
 * the candidates into those where the adapter is running or waiting ("affinity") and those with
 * a free adapter slot (running and waiting adapters, each counted once, below {@code maxLoras},
 * "available"). When both
 * groups exist it keeps the affinity group with probability {@code threshold} (default 0.999)
 * and the available group otherwise, drawn from the cycle's random source; when one exists it
 * keeps that one; when neither, none (a decision tree then takes its failure branch, as the GIE
 * 0.5 default profile relies on). Endpoints that report no adapter slots have none free.
 */
final class LoraAffinityFilter implements Filter {
  private final double threshold;

  LoraAffinityFilter(double threshold) {
    this.threshold = threshold;
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    String adapter = request.loraAdapter() != null ? request.loraAdapter() : request.targetModel();
    List<Candidate> affinity = new ArrayList<>();
    List<Candidate> available = new ArrayList<>();
    for (int i = 0, n = candidates.size(); i < n; i++) {
      Candidate c = candidates.get(i);
      Set<String> running = c.metrics().runningLoraAdapters();
      Set<String> waiting = c.metrics().waitingLoraAdapters();
      if (running.contains(adapter) || waiting.contains(adapter)) {
        affinity.add(c);
      } else if (LoraAffinityScorer.adapters(c.metrics()) < c.metrics().maxLoras()) {
        available.add(c);
      }
    }
    if (!affinity.isEmpty() && !available.isEmpty()) {
      return state.random().nextDouble() < threshold ? affinity : available;
    }
    return affinity.isEmpty() ? available : affinity;
  }

  @Override
  public String toString() {
    return "lora-affinity-filter(threshold=" + threshold + ")";
  }

  /** Provides {@code lora-affinity-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("lora-affinity-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new LoraAffinityFilter(p.getDouble("threshold", 0.999, 0.0, 1.0));
    }
  }
}
