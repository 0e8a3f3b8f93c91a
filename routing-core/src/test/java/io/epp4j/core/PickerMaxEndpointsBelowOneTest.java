package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/**
 * Upstream's pickers (pkg/epp/framework/plugins/scheduling/picker, NewMaxScorePicker) take a
 * {@code maxNumOfEndpoints} of 0 or below as "not set" and pick one endpoint, so a file that
 * says {@code maxNumOfEndpoints: 0} loads there; here it loads too, with one endpoint and a
 * notice naming the parameter. Upstream sets no upper bound either, and neither does epp4j now.
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

  /**
   * Upstream sets no upper bound: a file with 2000 (a pool's size, or "all of them") loads there.
   * epp4j refused anything above 1024 ("must be in [1, 1024]"); it now loads as given, and the
   * pick returns every candidate there is.
   */
  @Test
  void aValueAboveTheFormerLimitLoadsAsGivenAndPicksEveryCandidate() {
    for (String v : new String[] {"2000", "5000000000"}) {
      Result<RouterConfig> r = loader.load(config(v), "c.yaml");
      assertThat(r.errors()).as(v).isEmpty();
      assertThat(r.value().warnings()).as(v).isEmpty();
      MaxScorePicker picker = (MaxScorePicker) r.value().profiles().get("default").picker();
      assertThat(picker.maxNumOfEndpoints()).as(v).isEqualTo((int) Math.min(
          Long.parseLong(v), Integer.MAX_VALUE));
      java.util.List<io.epp4j.api.Candidate> pool = new java.util.ArrayList<>();
      for (int i = 0; i < 5; i++) {
        pool.add(new EndpointState(io.epp4j.api.Endpoint.of("10.0.0." + i, 8000),
            io.epp4j.api.EndpointMetrics.UNKNOWN, new EndpointState.InFlight("10.0.0." + i + ":8000")));
      }
      assertThat(picker.pick(io.epp4j.api.InferenceRequest.builder().model("m").prompt("p")
              .build(), new io.epp4j.api.CycleState(0, new java.util.SplittableRandom(1)), pool,
          new double[] {0.1, 0.5, 0.2, 0.4, 0.3}))
          .as(v).containsExactly(pool.get(1), pool.get(3), pool.get(4), pool.get(2), pool.get(0));
    }
  }

  @Test
  void aValueThatIsNoIntegerIsStillRefusedNamingTheParameter() {
    Result<RouterConfig> r = loader.load(config("many"), "c.yaml");
    assertThat(r.errors()).singleElement().asString()
        .contains("parameter 'maxNumOfEndpoints' must be an integer, got 'many'");
  }
}
