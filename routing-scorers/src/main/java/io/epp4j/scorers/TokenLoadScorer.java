package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Scorer;
import io.epp4j.api.PrefixHits;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * {@code token-load-scorer}: router-tracked in-flight tokens (estimated prompt plus
 * {@code max_tokens} of every request in flight) against {@code queueThresholdTokens}, as
 * upstream's scorer (GIE v1.5.0, llm-d): {@code 1 − min(1, t / queueThresholdTokens)}, 1.0 when
 * nothing is in flight, 0.0 at or above the threshold (default 4194304, 128 requests of 32K).
 * When the file has an {@code inflight-load-producer} (or names one in
 * {@code inFlightLoadProducerName}), {@code t} is what current llm-d's scorer reads from it: the
 * producer's in-flight tokens on the endpoint plus the tokens this request would add there (its
 * prompt less what the cycle's prefix hits say the endpoint holds, and the output estimate).
 */
final class TokenLoadScorer implements Scorer {
  /** Upstream's {@code tokenQueueThresholdDefault}. */
  static final long DEFAULT_QUEUE_THRESHOLD_TOKENS = 4_194_304L;

  private final double queueThresholdTokens;
  /** The file's in-flight producer, whose count this scorer reads when there is one. */
  private final @Nullable InFlightLoadProducer load;

  TokenLoadScorer() {
    this(DEFAULT_QUEUE_THRESHOLD_TOKENS);
  }

  TokenLoadScorer(long queueThresholdTokens) {
    this(queueThresholdTokens, null);
  }

  TokenLoadScorer(long queueThresholdTokens, @Nullable InFlightLoadProducer load) {
    this.queueThresholdTokens = queueThresholdTokens;
    this.load = load;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    InFlightLoadProducer l = load;
    PrefixHits hits = l == null ? null : state.get(PrefixHits.KEY);
    for (int i = 0, n = candidates.size(); i < n; i++) {
      long t;
      if (l == null) {
        t = candidates.get(i).inFlightTokens();
      } else {
        // as upstream's scorer reads the producer: what is in flight there, and what this
        // request would add there
        String id = candidates.get(i).id();
        t = l.tokens(id) + l.requestTokens(request, hits, id);
      }
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
      return new TokenLoadScorer(threshold,
          InFlightLoadProducer.find(c, p, "inFlightLoadProducerName"));
    }
  }
}
