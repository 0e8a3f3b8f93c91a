package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Scorer;
import java.util.List;

/**
 * {@code token-load-scorer}: router-tracked in-flight tokens (estimated prompt plus
 * {@code max_tokens} of every request in flight); {@code (max − t) / max}, all 1.0 when nothing
 * is in flight.
 */
final class TokenLoadScorer implements Scorer {
  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    long max = 0;
    for (int i = 0; i < n; i++) {
      max = Math.max(max, candidates.get(i).inFlightTokens());
    }
    for (int i = 0; i < n; i++) {
      long t = Math.max(0, candidates.get(i).inFlightTokens());
      scores[i] = max <= 0 ? 1.0 : (double) (max - t) / max;
    }
  }

  @Override
  public String toString() {
    return "token-load-scorer";
  }

  /** Provides {@code token-load-scorer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("token-load-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new TokenLoadScorer();
    }
  }
}
