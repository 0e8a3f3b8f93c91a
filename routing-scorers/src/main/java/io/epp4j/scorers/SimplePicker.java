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
import java.util.function.IntFunction;

/**
 * The frame of the pickers whose only parameter is {@code maxEndpoints} ({@link RandomPicker},
 * {@link RoundRobinPicker}, {@link PowerOfTwoPicker}, {@link WeightedRandomPicker}): the empty
 * pool, the name and the provider are the same; only the choice among the candidates differs.
 */
abstract class SimplePicker implements Picker {
  private final String type;
  /** How many candidates a pick returns at most: the first is the target, the rest fallbacks. */
  final int maxEndpoints;

  SimplePicker(String type, int maxEndpoints) {
    this.type = type;
    this.maxEndpoints = maxEndpoints;
  }

  @Override
  public final List<Candidate> pick(InferenceRequest request, CycleState state,
      List<Candidate> candidates, double[] scores) {
    int n = candidates.size();
    return n == 0 ? List.of() : choose(state, candidates, scores, n);
  }

  /** Up to {@link #maxEndpoints} of the {@code n ≥ 1} candidates, the chosen one first. */
  abstract List<Candidate> choose(CycleState state, List<Candidate> candidates, double[] scores,
      int n);

  @Override
  public String toString() {
    return type;
  }

  /** Builds a subclass from {@code maxEndpoints}, its only parameter. */
  abstract static class Provider extends AbstractPluginProvider {
    private final IntFunction<SimplePicker> make;

    Provider(String type, IntFunction<SimplePicker> make) {
      super(type);
      this.make = make;
    }

    @Override
    protected final Plugin build(PluginContext c, Parameters p) {
      return make.apply(CommonParameters.maxEndpoints(p));
    }
  }
}
