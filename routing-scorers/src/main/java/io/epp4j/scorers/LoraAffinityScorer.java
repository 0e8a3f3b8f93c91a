package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Scorer;
import java.util.List;
import java.util.Set;

/**
 * {@code lora-affinity-scorer}: 1.0 where the request's adapter is running, 0.8 where an adapter
 * slot is free (fewer adapters running or waiting, each counted once, than {@code maxLoras};
 * {@code maxLoras} unknown counts as free), 0.6 where it is waiting to load, else
 * 0. The adapter is the request's LoRA adapter, else its target model, as upstream looks the
 * target model up (a client names an adapter in the {@code model} field). A base-model request
 * thus scores 0.8 wherever a slot is free or none is reported and 0 where every slot is taken,
 * as upstream.
 */
final class LoraAffinityScorer implements Scorer {
  private final Staleness staleness;

  LoraAffinityScorer(Staleness staleness) {
    this.staleness = staleness;
  }

  static double affinity(EndpointMetrics m, String adapter) {
    if (m.runningLoraAdapters().contains(adapter)) {
      return 1.0;
    }
    if (m.maxLoras() == 0 || adapters(m) < m.maxLoras()) {
      return 0.8;
    }
    if (m.waitingLoraAdapters().contains(adapter)) {
      return 0.6;
    }
    return 0.0;
  }

  /**
   * How many adapters the endpoint holds or is loading: those of its running and its waiting
   * requests, each adapter once. vLLM lists an adapter under both when it has requests running
   * and others waiting, and it takes one slot; counted twice, an endpoint with a free slot would
   * look full. Upstream counts the union too.
   */
  static int adapters(EndpointMetrics m) {
    Set<String> running = m.runningLoraAdapters();
    int n = running.size();
    for (String w : m.waitingLoraAdapters()) {
      if (!running.contains(w)) {
        n++;
      }
    }
    return n;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    String adapter = request.loraAdapter() != null ? request.loraAdapter() : request.targetModel();
    long now = state.nowNanos();
    for (int i = 0, n = candidates.size(); i < n; i++) {
      Candidate c = candidates.get(i);
      double s = affinity(c.metrics(), adapter);
      scores[i] = staleness.usable(c, now) ? s : Staleness.unusableScore(c, s);
    }
  }

  @Override
  public String toString() {
    return "lora-affinity-scorer";
  }

  /** Provides {@code lora-affinity-scorer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("lora-affinity-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new LoraAffinityScorer(Staleness.from(p));
    }
  }
}
