package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Picker;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.List;

/**
 * {@code power-of-two-picker}: draws two distinct candidates at random and takes the one with
 * fewer router-tracked in-flight requests (ties: fewer waiting requests, then the first
 * drawn). The other one is the first fallback; further fallbacks are random.
 */
final class PowerOfTwoPicker implements Picker {
  private final int maxEndpoints;

  PowerOfTwoPicker(int maxEndpoints) {
    this.maxEndpoints = maxEndpoints;
  }

  @Override
  public List<Candidate> pick(InferenceRequest request, CycleState state,
      List<Candidate> candidates, double[] scores) {
    int n = candidates.size();
    if (n == 0) {
      return List.of();
    }
    if (n == 1) {
      return List.of(candidates.get(0));
    }
    int k = Math.min(maxEndpoints, n);
    int[] order = CandidateLists.sample(n, Math.max(2, k), state.random());
    Candidate a = candidates.get(order[0]);
    Candidate b = candidates.get(order[1]);
    if (b.inFlightRequests() < a.inFlightRequests()
        || (b.inFlightRequests() == a.inFlightRequests()
            && b.metrics().waitingRequests() < a.metrics().waitingRequests())) {
      int t = order[0];
      order[0] = order[1];
      order[1] = t;
    }
    return CandidateLists.select(candidates, order, k);
  }

  @Override
  public String toString() {
    return "power-of-two-picker";
  }

  /** Provides {@code power-of-two-picker}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("power-of-two-picker");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new PowerOfTwoPicker(CommonParameters.maxEndpoints(p));
    }
  }
}
