package io.epp4j.core;

import static io.epp4j.core.TestPlugins.ep;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * A scorer's weight in a profile is any finite number, as upstream's {@code weight *float64}
 * (apix/config/v1alpha1 SchedulingPlugin), which its loader passes to the weighted scorer
 * unchecked: a negative weight turns the scorer into a penalty, zero makes it count for nothing.
 */
class NegativeScorerWeightTest {
  static final InferenceRequest REQ =
      InferenceRequest.builder().model("m").prompt("hello").maxTokens(10).build();

  static String config(String weight) {
    return """
        plugins:
        - name: busy
          type: label-scorer
          parameters: {label: busy}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - {pluginRef: busy, weight: %s}
          - {pluginRef: max-score-picker}
        """.formatted(weight);
  }

  @Test
  void negativeWeightLoadsAndPenalisesTheEndpointsTheScorerLikes() {
    Result<RouterConfig> r = new ConfigLoader(TestPlugins.registry()).load(config("-1.5"), "c.yaml");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().profiles().get("default").scorers()).singleElement()
        .satisfies(ws -> assertThat(ws.weight()).isEqualTo(-1.5));
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .configYaml(config("-1.5"), "c.yaml")
        .endpoints(List.of(ep("10.0.0.1:80", Map.of("busy", "1")),
            ep("10.0.0.2:80", Map.of("busy", "0.5")), ep("10.0.0.3:80", Map.of("busy", "0.9"))))
        .build()) {
      for (int i = 0; i < 50; i++) {
        assertThat(router.route(REQ).primary().id()).isEqualTo("10.0.0.2:80");
      }
    }
  }

  @Test
  void profileBuilderTakesANegativeWeightButNotAnInfiniteOrNaNOne() {
    SchedulingProfile p = SchedulingProfile.builder("p")
        .scorer("busy", new TestPlugins.LabelScorer("busy"), -2).build();
    assertThat(p.scorers().get(0).weight()).isEqualTo(-2.0);
    assertThatThrownBy(() -> SchedulingProfile.builder("p")
        .scorer("busy", new TestPlugins.LabelScorer("busy"), Double.NEGATIVE_INFINITY))
        .hasMessageContaining("weight of scorer 'busy' must be a finite number");
    assertThatThrownBy(() -> SchedulingProfile.builder("p")
        .scorer("busy", new TestPlugins.LabelScorer("busy"), Double.NaN))
        .hasMessageContaining("weight of scorer 'busy' must be a finite number");
  }

  @Test
  void aWeightThatIsNotAFiniteNumberIsRefusedNamingTheField() {
    ConfigLoader loader = new ConfigLoader(TestPlugins.registry());
    for (String bad : List.of("heavy", "-1e400", "[1]", "{n: 1}")) {
      Result<RouterConfig> r = loader.load(config(bad), "c.yaml");
      assertThat(r.errors()).as(bad).singleElement().asString()
          .contains("pluginRef 'busy'").contains("field 'weight' must be a finite number");
    }
  }
}
