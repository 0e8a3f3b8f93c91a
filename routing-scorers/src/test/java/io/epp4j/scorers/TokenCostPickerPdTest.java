package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
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
    String yaml = """
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
    try (Router r = Router.builder().endpoints(eps).randomSeed(1).configYaml(yaml, "pd.yaml")
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
}
