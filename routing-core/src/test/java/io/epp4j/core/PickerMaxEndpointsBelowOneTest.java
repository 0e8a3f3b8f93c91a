package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/**
 * Upstream's pickers (pkg/epp/framework/plugins/scheduling/picker, NewMaxScorePicker) take a
 * {@code maxNumOfEndpoints} of 0 or below as "not set" and pick one endpoint, so a file that
 * says {@code maxNumOfEndpoints: 0} loads there; here it loads too, with one endpoint and a
 * notice naming the parameter.
 */
class PickerMaxEndpointsBelowOneTest {
  final ConfigLoader loader = new ConfigLoader(TestPlugins.registry());

  static String config(String value) {
    return """
        plugins:
        - type: max-score-picker
          parameters: {maxNumOfEndpoints: %s}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: max-score-picker}]
        """.formatted(value);
  }

  @Test
  void zeroOrNegativeMeansOneEndpointWithANotice() {
    for (String v : new String[] {"0", "-3"}) {
      Result<RouterConfig> r = loader.load(config(v), "c.yaml");
      assertThat(r.errors()).as(v).isEmpty();
      assertThat(((MaxScorePicker) r.value().profiles().get("default").picker())
          .maxNumOfEndpoints()).as(v).isEqualTo(1);
      assertThat(r.value().warnings()).as(v).singleElement().asString()
          .contains("type 'max-score-picker'").contains("parameter 'maxNumOfEndpoints'")
          .contains(v).contains("1");
    }
  }

  @Test
  void aValueAboveTheLimitIsStillRefusedNamingTheParameter() {
    Result<RouterConfig> r = loader.load(config("2000"), "c.yaml");
    assertThat(r.errors()).singleElement().asString()
        .contains("parameter 'maxNumOfEndpoints' must be in [1, 1024], got 2000");
  }
}
