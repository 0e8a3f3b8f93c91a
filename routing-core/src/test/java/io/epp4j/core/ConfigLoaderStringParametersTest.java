package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/**
 * A plugin's string parameter written as a number or a boolean. Upstream decodes a plugin's
 * parameters into a Go struct, which refuses a JSON number or boolean where a string field is
 * declared, so the file does not load there; here the value was taken as its text and the file
 * loaded.
 */
class ConfigLoaderStringParametersTest {
  final ConfigLoader loader = new ConfigLoader(PluginRegistry.fromServiceLoader());

  private Result<RouterConfig> load(String value) {
    return loader.load("""
        plugins:
        - name: metrics
          type: core-metrics-extractor
          parameters: {engineLabelKey: %s}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: max-score-picker
        """.formatted(value), "c.yaml");
  }

  @Test
  void aNumberOrABooleanForAStringParameterIsOneErrorNamingThePluginAndTheParameter() {
    assertThat(load("5").errors()).singleElement().asString().isEqualTo(
        "c.yaml: plugins[0] (name 'metrics', type 'core-metrics-extractor'): parameter"
            + " 'engineLabelKey' must be a string, got a number ('5') (write it in quotes if it"
            + " is meant as text)");
    assertThat(load("true").errors()).singleElement().asString()
        .contains("parameter 'engineLabelKey' must be a string, got a boolean ('true')");
  }

  @Test
  void theSameValueInQuotesLoads() {
    assertThat(load("'5'").errors()).isEmpty();
  }
}
