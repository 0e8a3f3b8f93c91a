package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * Label values written as whole numbers or booleans. llm-d decodes label-selector-filter's
 * parameters into a Kubernetes LabelSelector and by-label's {@code validValues} into a
 * {@code []string}: a number or a boolean there fails the plugin's creation, so the file does not
 * load. Here they were read as their text and the file loaded.
 */
class LabelValueTypeTest {

  private static Router build(String type, String parameters) {
    return Router.builder()
        .endpoints(List.of(Endpoint.parse("10.0.0.1:8000", Map.of("gpus", "8"))))
        .configYaml(OneFilterConfig.yaml(type, parameters), "l.yaml")
        .build();
  }

  private static void refused(String type, String parameters, String field, String value) {
    assertThatThrownBy(() -> build(type, parameters).close())
        .isInstanceOf(ConfigException.class)
        .satisfies(e -> assertThat(((ConfigException) e).errors()).singleElement().asString()
            .contains("parameter '" + field + "'").contains("'" + value + "'")
            .contains("quote"));
  }

  @Test
  void aWholeNumberOrABooleanAsALabelSelectorValueIsRefusedNamingTheField() {
    refused("label-selector-filter", "{matchLabels: {gpus: 8}}", "matchLabels.gpus", "8");
    refused("label-selector-filter", "{matchLabels: {spot: true}}", "matchLabels.spot", "true");
    refused("label-selector-filter",
        "{matchExpressions: [{key: gpus, operator: In, values: ['4', 8]}]}",
        "matchExpressions[0].values", "8");
  }

  @Test
  void aWholeNumberOrABooleanAmongByLabelsValidValuesIsRefusedNamingTheField() {
    refused("by-label", "{label: gpus, validValues: [8]}", "validValues", "8");
    refused("by-label", "{label: spot, validValues: ['yes', false]}", "validValues", "false");
  }

  @Test
  void theSameValuesInQuotesLoad() {
    for (String[] ok : new String[][] {
        {"label-selector-filter", "{matchLabels: {gpus: '8'}}"},
        {"label-selector-filter",
            "{matchExpressions: [{key: gpus, operator: In, values: ['8']}]}"},
        {"by-label", "{label: gpus, validValues: ['8']}"}}) {
      try (Router r = build(ok[0], ok[1])) {
        // the endpoint labelled gpus=8 is selected
        assertThat(r.route(RouterIntegrationTest.tokens(64, 1)).primary().id())
            .isEqualTo("10.0.0.1:8000");
      }
    }
  }
}
