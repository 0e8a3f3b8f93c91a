package io.epp4j.sim;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import io.epp4j.api.Scorer;
import java.util.List;

/**
 * {@code throwing-scorer}: a buggy plugin for tests of how the simulator reports a policy that
 * routes nothing. Every call throws, as the custom-plugin example once did for an endpoint
 * without its label.
 */
public final class ThrowingScorerProvider implements PluginProvider {
  static final String TYPE = "throwing-scorer";

  @Override
  public String type() {
    return TYPE;
  }

  @Override
  public Result<? extends Plugin> create(PluginContext context, Parameters parameters) {
    return Result.ok(new Scorer() {
      @Override
      public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
          double[] scores) {
        throw new IllegalStateException("throwing-scorer always fails");
      }
    });
  }
}
