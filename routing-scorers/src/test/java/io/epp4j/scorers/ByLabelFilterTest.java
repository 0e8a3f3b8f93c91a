package io.epp4j.scorers;

import static io.epp4j.scorers.RouterIntegrationTest.profile;
import static io.epp4j.scorers.RouterIntegrationTest.tokens;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.api.Rejection;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;

/**
 * llm-d's deprecated {@code by-label} filter: one label, a list of accepted values, and whether an
 * endpoint without the label passes ({@code allowsNoLabel}). Files that still use it must load and
 * route as llm-d routes them.
 */
class ByLabelFilterTest {

  static final List<Endpoint> POOL = List.of(
      Endpoint.parse("10.0.5.1:8000", Map.of("gpu.type", "a100")),
      Endpoint.parse("10.0.5.2:8000", Map.of("gpu.type", "h100")),
      Endpoint.parse("10.0.5.3:8000", Map.of("gpu.type", "l4")),
      Endpoint.parse("10.0.5.4:8000", Map.of("zone", "z1")), // no gpu.type
      Endpoint.parse("10.0.5.5:8000", Map.of("gpu.type", ""))); // present, empty

  static String config(String parameters) {
    return profile("""
        - type: by-label
          parameters: %s
        - type: random-picker
          parameters: {maxNumOfEndpoints: 5}
        """.formatted(parameters), "{pluginRef: by-label}, {pluginRef: random-picker}");
  }

  /** The endpoints a router with this by-label configuration keeps, over the pool above. */
  static Set<String> kept(String parameters) {
    try (Router r = Router.builder().endpoints(POOL).configYaml(config(parameters), "l.yaml")
        .randomSeed(3).build()) {
      RoutingDecision d = r.route(tokens(16, 1));
      Set<String> ids = new TreeSet<>();
      if (d.isRouted()) {
        d.endpoints().forEach(e -> ids.add(e.id()));
      }
      return ids;
    }
  }

  @Test
  void keepsEndpointsWhoseLabelHasOneOfTheValidValues() {
    assertThat(kept("{label: gpu.type, validValues: [a100, h100]}"))
        .containsExactly("10.0.5.1:8000", "10.0.5.2:8000");
  }

  @Test
  void allowsNoLabelAlsoKeepsEndpointsWithoutTheLabel() {
    assertThat(kept("{label: gpu.type, validValues: [a100], allowsNoLabel: true}"))
        .containsExactly("10.0.5.1:8000", "10.0.5.4:8000");
    assertThat(kept("{label: gpu.type, allowsNoLabel: true}"))
        .containsExactly("10.0.5.4:8000");
  }

  /**
   * llm-d reads a missing label as the empty value, so an empty string among the valid values
   * keeps endpoints without the label as well as those whose value is empty.
   */
  @Test
  void anEmptyValidValueAlsoMatchesAMissingLabelAsLlmdReadsIt() {
    assertThat(kept("{label: gpu.type, validValues: ['']}"))
        .containsExactly("10.0.5.4:8000", "10.0.5.5:8000");
  }

  @Test
  void noEndpointWithAValidValueLeavesNoCandidate() {
    try (Router r = Router.builder().endpoints(POOL)
        .configYaml(config("{label: gpu.type, validValues: [b200]}"), "l.yaml").build()) {
      RoutingDecision d = r.route(tokens(16, 1));
      assertThat(d.isRouted()).isFalse();
      assertThat(d.rejection().reason()).isEqualTo(Rejection.Reason.NO_ENDPOINTS);
    }
  }

  @Test
  void theFileLoadsWithANoticeNamingTheCurrentFilters() {
    try (Router r = Router.builder().endpoints(POOL)
        .configYaml(config("{label: gpu.type, validValues: [a100]}"), "l.yaml").build()) {
      assertThat(r.config().warnings()).singleElement().asString()
          .contains("by-label").contains("label-selector-filter");
    }
  }

  @Test
  void badParametersAreRefusedByName() {
    Map<String, String> bad = Map.of(
        "{validValues: [a100]}", "parameter 'label'",
        "{label: '', validValues: [a100]}", "parameter 'label'",
        "{label: gpu.type}", "parameter 'validValues'",
        "{label: gpu.type, validValues: []}", "parameter 'validValues'",
        "{label: gpu.type, validValues: [{a: 1}]}", "parameter 'validValues'",
        "{label: gpu.type, validValues: [a100], allowsNoLabel: maybe}", "parameter 'allowsNoLabel'",
        "{label: [gpu.type], validValues: [a100]}", "parameter 'label'",
        // upstream's []string refuses a string
        "{label: gpu.type, validValues: a100}",
        "parameter 'validValues' must be a list of strings, got a single string 'a100'");
    bad.forEach((params, named) ->
        assertThatThrownBy(() -> Router.builder().endpoints(POOL)
            .configYaml(config(params), "bad.yaml").build())
            .as(params)
            .isInstanceOf(ConfigException.class)
            .hasMessageContaining("type 'by-label'")
            .hasMessageContaining(named));
  }
}
