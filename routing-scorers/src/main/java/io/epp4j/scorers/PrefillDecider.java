package io.epp4j.scorers;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Plugin;

/**
 * Decides, once the decode profile has picked, whether the prompt's prefill runs on a separate
 * prefill endpoint: llm-d's "decider" plugins, which {@code disagg-profile-handler} (and
 * {@code pd-profile-handler} given {@code deciderPluginName}) name.
 */
interface PrefillDecider extends Plugin {
  boolean disaggregate(InferenceRequest request, CycleState state, Endpoint decodePick);
}
