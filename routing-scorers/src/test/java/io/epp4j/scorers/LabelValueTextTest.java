package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * label-selector-filter values written as YAML numbers: {@code 1.10} is parsed as the number 1.1,
 * whose text is not what the file says.
 */
class LabelValueTextTest {

  static final List<Endpoint> EPS = List.of(
      Endpoint.parse("10.0.0.1:8000", Map.of("version", "1.10")),
      Endpoint.parse("10.0.0.2:8000", Map.of("version", "1.1")));

  /**
   * The endpoints a file with this filter routes to, or null when the file is refused naming
   * {@code field}.
   */
  static Set<String> routedTo(String selector, String field) {
    return routedTo("label-selector-filter", selector, field);
  }

  static Set<String> routedTo(String type, String parameters, String field) {
    try (Router r = Router.builder().endpoints(EPS).randomSeed(1)
        .configYaml(OneFilterConfig.yaml(type, parameters), "l.yaml").build()) {
      Set<String> seen = new HashSet<>();
      for (int i = 0; i < 20; i++) {
        seen.add(r.route(RouterIntegrationTest.tokens(64, i)).primary().id());
      }
      return seen;
    } catch (ConfigException refused) {
      assertThat(refused).hasMessageContaining("'" + field + "'");
      return null;
    }
  }

  @Test
  void aDecimalNumberSelectsTheLabelAsWrittenOrIsRefused() {
    // version 1.10 must not select the endpoint labelled 1.1
    Set<String> matchLabels = routedTo("{matchLabels: {version: 1.10}}", "matchLabels.version");
    if (matchLabels != null) {
      assertThat(matchLabels).containsExactly("10.0.0.1:8000");
    }
    Set<String> in = routedTo(
        "{matchExpressions: [{key: version, operator: In, values: [1.10]}]}",
        "matchExpressions[0].values");
    if (in != null) {
      assertThat(in).containsExactly("10.0.0.1:8000");
    }
    // quoted, it is the text as written
    assertThat(routedTo("{matchLabels: {version: '1.10'}}", "-")).containsExactly("10.0.0.1:8000");
  }

  @Test
  void byLabelReadsDecimalValidValuesAsWrittenOrRefusesThem() {
    Set<String> seen = routedTo("by-label", "{label: version, validValues: [1.10]}",
        "validValues");
    if (seen != null) {
      assertThat(seen).containsExactly("10.0.0.1:8000");
    }
    assertThat(routedTo("by-label", "{label: version, validValues: ['1.10']}", "-"))
        .containsExactly("10.0.0.1:8000");
  }
}
