package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.Router;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * As upstream's random and weighted random pickers, every built-in picker that takes
 * {@code maxNumOfEndpoints} reads 0 or below as the default, one endpoint, with a notice.
 */
class PickerMaxEndpointsBelowOneTest {
  static final InferenceRequest REQ =
      InferenceRequest.builder().model("m").prompt("hello").maxTokens(10).build();

  @Test
  void zeroLoadsAsOneEndpointForEveryPicker() {
    for (String type : List.of("random-picker", "weighted-random-picker", "round-robin-picker",
        "power-of-two-picker", "ring-hash-picker", "maglev-picker")) {
      String yaml = """
          plugins:
          - type: %s
            parameters: {maxNumOfEndpoints: 0}
          schedulingProfiles:
          - name: default
            plugins: [{pluginRef: %s}]
          """.formatted(type, type);
      try (Router router = Router.builder().configYaml(yaml, "c.yaml")
          .endpoints(List.of(Endpoint.parse("10.0.0.1:80"), Endpoint.parse("10.0.0.2:80"),
              Endpoint.parse("10.0.0.3:80")))
          .build()) {
        assertThat(router.config().warnings()).as(type).singleElement().asString()
            .contains("parameter 'maxNumOfEndpoints'");
        assertThat(router.route(REQ).endpoints()).as(type).hasSize(1);
      }
    }
  }

  /**
   * Upstream sets no upper bound on {@code maxNumOfEndpoints}; every built-in picker refused a
   * value above 1024 ("must be in [1, 1024]"), so such a file did not build a router. It now
   * loads as given, without a notice, and a pick returns every candidate there is.
   */
  @Test
  void aValueAboveTheFormerLimitLoadsAndPicksEveryCandidate() {
    for (String type : List.of("random-picker", "weighted-random-picker", "round-robin-picker",
        "power-of-two-picker", "ring-hash-picker", "maglev-picker")) {
      String yaml = """
          plugins:
          - type: %s
            parameters: {maxNumOfEndpoints: 2000}
          schedulingProfiles:
          - name: default
            plugins: [{pluginRef: %s}]
          """.formatted(type, type);
      List<Endpoint> pool = List.of(Endpoint.parse("10.0.0.1:80"), Endpoint.parse("10.0.0.2:80"),
          Endpoint.parse("10.0.0.3:80"));
      try (Router router = Router.builder().configYaml(yaml, "c.yaml").endpoints(pool).build()) {
        assertThat(router.config().warnings()).as(type).isEmpty();
        assertThat(router.route(REQ).endpoints()).as(type).containsExactlyInAnyOrderElementsOf(pool);
      }
    }
  }
}
