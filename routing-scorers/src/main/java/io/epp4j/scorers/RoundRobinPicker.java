package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Picker;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/** {@code round-robin-picker}: cycles through the candidates in pool order. */
final class RoundRobinPicker implements Picker {
  private final int maxEndpoints;
  private final AtomicLong next = new AtomicLong();

  RoundRobinPicker(int maxEndpoints) {
    this.maxEndpoints = maxEndpoints;
  }

  @Override
  public List<Candidate> pick(InferenceRequest request, CycleState state,
      List<Candidate> candidates, double[] scores) {
    int n = candidates.size();
    if (n == 0) {
      return List.of();
    }
    int start = (int) Long.remainderUnsigned(next.getAndIncrement(), n);
    if (maxEndpoints == 1) {
      return List.of(candidates.get(start));
    }
    int k = Math.min(maxEndpoints, n);
    List<Candidate> out = new ArrayList<>(k);
    for (int i = 0; i < k; i++) {
      out.add(candidates.get((start + i) % n));
    }
    return out;
  }

  @Override
  public String toString() {
    return "round-robin-picker";
  }

  /** Provides {@code round-robin-picker}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("round-robin-picker");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new RoundRobinPicker(CommonParameters.maxEndpoints(p));
    }
  }
}
