package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.ProfileRunner;
import io.epp4j.api.RoutingDecision;
import org.jspecify.annotations.Nullable;

/**
 * {@code pd-profile-handler}: prefill/decode disaggregation. Runs the {@code decode} profile
 * first; then, when the decode pick's uncached prompt tokens (estimated prompt tokens minus the
 * cached tokens the cycle's {@link PrefixHits} credit to that endpoint, as published by whichever
 * prefix-cache scorer the decode profile runs) are at least {@code nonCachedTokens}, runs the
 * {@code prefill} profile. The decode profile is primary; the decision's
 * {@code secondaryEndpoint(PREFILL_PROFILE)} names the prefill pick, which a gateway passes on in
 * {@value #PREFILLER_HEADER}. When the
 * configuration has no {@code decode} profile, the first profile runs alone. The early upstream
 * handler's {@code threshold} counted uncached characters, so it is read as a quarter as many
 * tokens, rounded up.
 *
 * <p>The prefill/decode vocabulary lives here, with the handler that gives it meaning.
 */
public final class PdProfileHandler implements ProfileHandler {
  /** Name of the decode profile, the primary one. */
  public static final String DECODE_PROFILE = "decode";
  /** Name of the prefill profile, run when the decode pick lacks enough of the prompt. */
  public static final String PREFILL_PROFILE = "prefill";
  /**
   * The decode pick, put in the cycle state before the prefill profile runs, for plugins that
   * place the prefill near it (upstream's {@code peer-endpoint} request attribute).
   */
  static final io.epp4j.api.AttributeKey<Endpoint> PEER_ENDPOINT =
      io.epp4j.api.AttributeKey.of("epp4j.pd.peer-endpoint", Endpoint.class);
  /** Header that tells a decode server where its prefill ran. */
  public static final String PREFILLER_HEADER = io.epp4j.api.RoutingDecision.PREFILLER_HEADER;
  static final String DECODE = DECODE_PROFILE;

  private final int nonCachedTokens;
  /** When set (upstream's {@code deciderPluginName}), it decides instead of the threshold. */
  private final @Nullable PrefillDecider decider;

  PdProfileHandler(int nonCachedTokens) {
    this(nonCachedTokens, null);
  }

  PdProfileHandler(int nonCachedTokens, @Nullable PrefillDecider decider) {
    this.nonCachedTokens = nonCachedTokens;
    this.decider = decider;
  }

  @Override
  public String handle(InferenceRequest request, CycleState state, ProfileRunner runner) {
    if (!runner.profileNames().contains(DECODE)) {
      String first = runner.profileNames().iterator().next();
      runner.run(first);
      return first;
    }
    ProfileResult decode = runner.run(DECODE);
    Endpoint d = decode.primary();
    if (d == null || !runner.profileNames().contains(PREFILL_PROFILE)) {
      return DECODE;
    }
    state.put(PEER_ENDPOINT, d);
    if (decider != null) {
      if (decider.disaggregate(request, state, d)) {
        runner.run(PREFILL_PROFILE);
      }
      return DECODE;
    }
    long prompt = request.estimatedPromptTokens();
    PrefixHits hits = state.get(PrefixHits.KEY);
    long cached = hits == null ? 0 : Math.min(prompt, hits.cachedTokens(d.id()));
    if (prompt - cached >= nonCachedTokens) {
      runner.run(PREFILL_PROFILE);
    }
    return DECODE;
  }

  /** The prefill endpoint of a decision this handler made, or null when prefill did not run. */
  public static @Nullable Endpoint prefillEndpoint(RoutingDecision decision) {
    return decision.secondaryEndpoint(PREFILL_PROFILE);
  }

  int nonCachedTokens() {
    return nonCachedTokens;
  }

  @Override
  public String toString() {
    return decider != null ? "pd-profile-handler(" + decider + ")"
        : "pd-profile-handler(nonCachedTokens=" + nonCachedTokens + ")";
  }

  /** Provides {@code pd-profile-handler}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("pd-profile-handler");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      String name = CommonParameters.alias(p, "nonCachedTokens", "threshold");
      int threshold = p.getInt(name, 0, 0, Integer.MAX_VALUE);
      if (name.equals("threshold")) {
        // the early upstream handler compared threshold with the prompt's uncached characters;
        // at the 4 characters per token of the prompt estimate that is a quarter as many tokens
        threshold = (int) ((threshold + 3L) / 4);
      }
      PrefillDecider decider = null;
      // later upstream versions delegate the choice to a decider plugin, by default the one
      // named prefix-based-pd-decider; a file that defines one (or names one) gets it
      String deciderName = p.getString("deciderPluginName", null);
      if (deciderName != null) {
        decider = DisaggProfileHandler.decider(c, p, "deciderPluginName", deciderName);
      } else if (!p.has(name) && c.plugin("prefix-based-pd-decider").isPresent()) {
        decider = DisaggProfileHandler.decider(c, p, "deciderPluginName",
            "prefix-based-pd-decider");
      }
      if (decider != null && p.has(name)) {
        p.error(name, "cannot be combined with a decider plugin, which sets its own threshold");
      }
      for (String[] profile : new String[][] {{"decodeProfile", DECODE_PROFILE},
          {"prefillProfile", PREFILL_PROFILE}}) {
        String given = p.getString(profile[0], profile[1]);
        if (!profile[1].equals(given)) {
          p.error(profile[0], "names profile '" + given + "'; epp4j requires it to be named '"
              + profile[1] + "' (its gateways read the pick under that name): rename the profile");
        }
      }
      for (String prefix : new String[] {"prefixPluginName", "prefixPluginType", "hashBlockSize"}) {
        if (p.has(prefix)) {
          p.notice(prefix, "has no effect: cached tokens come from the prefix hits whichever"
              + " prefix-cache scorer of the decode profile publishes, at its own block size");
        }
      }
      DataParallelProfileHandler.primaryPort(p);
      return new PdProfileHandler(threshold, decider);
    }
  }
}
