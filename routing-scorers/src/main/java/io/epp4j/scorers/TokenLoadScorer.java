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
 * {@code max_tokens} of every request in flight) against {@code queueThresholdTokens}, as
 * upstream's scorer (GIE v1.5.0, llm-d): {@code 1 − min(1, t / queueThresholdTokens)}, 1.0 when
 * nothing is in flight, 0.0 at or above the threshold (default 4194304, 128 requests of 32K).
 */
final class TokenLoadScorer implements Scorer {
  /** Upstream's {@code tokenQueueThresholdDefault}. */
  static final long DEFAULT_QUEUE_THRESHOLD_TOKENS = 4_194_304L;

  private final double queueThresholdTokens;

  TokenLoadScorer() {
    this(DEFAULT_QUEUE_THRESHOLD_TOKENS);
  }

  TokenLoadScorer(long queueThresholdTokens) {
    this.queueThresholdTokens = queueThresholdTokens;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    for (int i = 0, n = candidates.size(); i < n; i++) {
      long t = candidates.get(i).inFlightTokens();
      scores[i] = t <= 0 ? 1.0 : 1.0 - Math.min(t, queueThresholdTokens) / queueThresholdTokens;
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
      long threshold = p.getLong("queueThresholdTokens", DEFAULT_QUEUE_THRESHOLD_TOKENS);
      if (threshold <= 0) {
        // upstream replaces a value that is not positive by its default
        p.notice("queueThresholdTokens", "is " + threshold + ", not positive: the default "
            + DEFAULT_QUEUE_THRESHOLD_TOKENS + " is used, as upstream does");
        threshold = DEFAULT_QUEUE_THRESHOLD_TOKENS;
      }
      return new TokenLoadScorer(threshold);
    }
  }
}
