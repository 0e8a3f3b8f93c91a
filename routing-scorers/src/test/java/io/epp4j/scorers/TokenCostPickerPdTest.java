package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.api.Usage;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** token-cost-picker named by both profiles of a prefill/decode configuration. */
class TokenCostPickerPdTest {

  @Test
  void aPickerSharedByTheDecodeAndPrefillProfilesCountsTheDecodePick() {
    List<Endpoint> eps = List.of(
        Endpoint.parse("10.0.1.1:8000", Map.of(Endpoint.ROLE_LABEL, "decode")),
        Endpoint.parse("10.0.1.2:8000", Map.of(Endpoint.ROLE_LABEL, "decode")),
        Endpoint.parse("10.0.1.3:8000", Map.of(Endpoint.ROLE_LABEL, "prefill")));
    try (Router r = Router.builder().endpoints(eps).randomSeed(1).configYaml(PD_YAML, "pd.yaml")
        .build()) {
      TokenCostPicker picker = (TokenCostPicker) r.config().profiles().get("decode").picker();
      InferenceRequest req = InferenceRequest.builder().model("m").tokenIds(new int[320])
          .maxTokens(100).sessionKey("dialog").build();
      RoutingDecision d = r.route(req);
      Endpoint decode = d.primary();
      assertThat(PdProfileHandler.prefillEndpoint(d)).isNotNull(); // prefill ran too

      // the request now decodes on its decode pick: counted there, and its session lives there
      assertThat(picker.pendingRequests()).isEqualTo(1);
      assertThat(picker.decodeTokens(decode.id())).isEqualTo(100);
      assertThat(picker.homeOf("dialog")).isEqualTo(decode.id());
    }
  }

  private static final String PD_YAML = """
      plugins:
      - type: pd-profile-handler
      - type: decode-filter
      - type: prefill-filter
      - type: prefix-cache-scorer
      - type: token-cost-picker
      schedulingProfiles:
      - name: decode
        plugins: [{pluginRef: decode-filter}, {pluginRef: prefix-cache-scorer},
                  {pluginRef: token-cost-picker}]
      - name: prefill
        plugins: [{pluginRef: prefill-filter}, {pluginRef: prefix-cache-scorer},
                  {pluginRef: token-cost-picker}]
      """;

  private static List<Endpoint> twoAndTwo() {
    return List.of(
        Endpoint.parse("10.0.1.1:8000", Map.of(Endpoint.ROLE_LABEL, "decode")),
        Endpoint.parse("10.0.1.2:8000", Map.of(Endpoint.ROLE_LABEL, "decode")),
        Endpoint.parse("10.0.1.3:8000", Map.of(Endpoint.ROLE_LABEL, "prefill")),
        Endpoint.parse("10.0.1.4:8000", Map.of(Endpoint.ROLE_LABEL, "prefill")));
  }

  private static InferenceRequest prompt(int first, int tokens) {
    int[] ids = new int[tokens];
    for (int i = 0; i < tokens; i++) {
      ids[i] = first + i;
    }
    return InferenceRequest.builder().model("m").tokenIds(ids).maxTokens(100).build();
  }

  @Test
  void thePrefillPickIsPendingOnThePrefillEndpointUntilTheFirstToken() {
    try (Router r = Router.builder().endpoints(twoAndTwo()).randomSeed(1)
        .configYaml(PD_YAML, "pd.yaml").build()) {
      TokenCostPicker picker = (TokenCostPicker) r.config().profiles().get("decode").picker();
      RoutingDecision d = r.route(prompt(1_000, 320));
      Endpoint prefill = PdProfileHandler.prefillEndpoint(d);
      assertThat(prefill).isNotNull();
      assertThat(prefill.id()).isNotEqualTo(d.primary().id());

      // the prefill endpoint prefills the whole prompt (nothing of it is cached anywhere yet)
      assertThat(picker.pendingTokens(prefill.id())).isEqualTo(320);

      d.onFirstToken(); // the decode endpoint started: the prefill is done
      assertThat(picker.pendingTokens(prefill.id())).isZero();
      d.onComplete(Usage.NONE);
      assertThat(picker.pendingTokens(prefill.id())).isZero();
      assertThat(picker.pendingRequests()).isZero();
    }
  }

  @Test
  void aPrefillEndpointBusyWithALongPromptIsAvoidedByTheNextOnes() {
    try (Router r = Router.builder().endpoints(twoAndTwo()).randomSeed(1)
        .configYaml(PD_YAML, "pd.yaml").build()) {
      RoutingDecision longOne = r.route(prompt(1, 40_000));
      Endpoint busy = PdProfileHandler.prefillEndpoint(longOne);
      assertThat(busy).isNotNull();
      // unrelated prompts, none finished: a twentieth of the long one's pending prefill each, so
      // (queue weight 0.125) the idle prefill endpoint stays the cheaper for all of them
      for (int i = 0; i < 8; i++) {
        RoutingDecision d = r.route(prompt(100_000 * (i + 1), 2_000));
        Endpoint prefill = PdProfileHandler.prefillEndpoint(d);
        assertThat(prefill).isNotNull();
        assertThat(prefill.id()).as("prefill of request %d", i).isNotEqualTo(busy.id());
      }
    }
  }

  @Test
  void aServingEndpointThatLeavesKeepsThePrefillCountedElsewhereUntilTheRequestEnds() {
    List<Endpoint> eps = twoAndTwo();
    try (Router r = Router.builder().endpoints(eps).randomSeed(1)
        .configYaml(PD_YAML, "pd.yaml").build()) {
      TokenCostPicker picker = (TokenCostPicker) r.config().profiles().get("decode").picker();
      RoutingDecision d = r.route(prompt(1_000, 320));
      Endpoint prefill = PdProfileHandler.prefillEndpoint(d);
      assertThat(prefill).isNotNull();
      assertThat(picker.pendingTokens(prefill.id())).isEqualTo(320);

      Endpoint decode = d.primary();
      r.setEndpoints(eps.stream().filter(e -> !e.id().equals(decode.id())).toList());
      // the request is still served (its endpoint left the pool, not the gateway's connection),
      // so its prompt is still being prefilled there
      assertThat(picker.pendingTokens(prefill.id())).isEqualTo(320);
      d.onFirstToken();
      assertThat(picker.pendingTokens(prefill.id())).isZero();
      d.onComplete(Usage.NONE);
      assertThat(picker.departedLoads()).isZero();
    }
  }
}
