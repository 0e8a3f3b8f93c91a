package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PrefixHits;

/**
 * {@code prefix-based-pd-decider} (llm-d): prefill runs remotely when the decode pick lacks at
 * least {@code nonCachedTokens} of the prompt. Prompt tokens are estimated as upstream does
 * (characters / 4, or the token count of a token-ID prompt); cached tokens come from the
 * {@link PrefixHits} a prefix-cache scorer of the decode profile published for the decode pick.
 * As upstream: {@code nonCachedTokens} 0 (the default) turns disaggregation off; a prompt shorter
 * than the threshold, or a decode pick without prefix information, stays on the decode endpoint.
 */
final class PrefixBasedPdDecider implements PrefillDecider {
  private final int nonCachedTokens;

  PrefixBasedPdDecider(int nonCachedTokens) {
    this.nonCachedTokens = nonCachedTokens;
  }

  @Override
  public boolean disaggregate(InferenceRequest request, CycleState state, Endpoint decodePick) {
    if (nonCachedTokens == 0) {
      return false;
    }
    long prompt = request.estimatedPromptTokens();
    if (prompt < nonCachedTokens) {
      return false;
    }
    PrefixHits hits = state.get(PrefixHits.KEY);
    if (hits == null || hits.indexOf(decodePick.id()) < 0) {
      return false;
    }
    return prompt - hits.cachedTokens(decodePick.id()) >= nonCachedTokens;
  }

  @Override
  public String toString() {
    return "prefix-based-pd-decider(nonCachedTokens=" + nonCachedTokens + ")";
  }

  /** Provides {@code prefix-based-pd-decider}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("prefix-based-pd-decider");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      if (p.has("prefixMatchInfoProducerName")) {
        p.notice("prefixMatchInfoProducerName", "has no effect: cached tokens come from the"
            + " prefix hits whichever prefix-cache scorer of the decode profile publishes");
      }
      return new PrefixBasedPdDecider(p.getInt("nonCachedTokens", 0, 0, Integer.MAX_VALUE));
    }
  }
}
