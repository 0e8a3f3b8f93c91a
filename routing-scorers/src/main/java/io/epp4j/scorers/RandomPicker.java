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

/** {@code random-picker}: uniform choice, ignoring scores. */
final class RandomPicker implements Picker {
  private final int maxEndpoints;

  RandomPicker(int maxEndpoints) {
    this.maxEndpoints = maxEndpoints;
  }

  @Override
  public List<Candidate> pick(InferenceRequest request, CycleState state,
      List<Candidate> candidates, double[] scores) {
    int n = candidates.size();
    if (n == 0) {
      return List.of();
    }
    if (maxEndpoints == 1) {
      return List.of(candidates.get(state.random().nextInt(n)));
    }
    int k = Math.min(maxEndpoints, n);
    return CandidateLists.select(candidates, CandidateLists.sample(n, k, state.random()), k);
  }

  @Override
  public String toString() {
    return "random-picker";
  }

  /** Provides {@code random-picker}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("random-picker");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new RandomPicker(CommonParameters.maxEndpoints(p));
    }
  }
}
