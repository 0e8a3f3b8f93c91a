package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * llm-d's disagg-profile-handler reads its parameters into Go strings, where an empty value is
 * the unset one: an empty profile name takes the default, an empty decider name configures no
 * decider (no request is disaggregated), and empty values count for neither the nested nor the
 * flat format. A chart that renders an unset value writes exactly that. epp4j refused such a
 * file ("names profile ''", "names no plugin of the file ... ''"), so it did not load here.
 */
class DisaggEmptyParametersTest {
  private static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"));

  private static String config(String parameters) {
    return """
        plugins:
        - type: prefix-based-pd-decider
          parameters: {nonCachedTokens: 16}
        - type: max-score-picker
        - type: disagg-profile-handler
          parameters: %s
        schedulingProfiles:
        - name: prefill
          plugins:
          - pluginRef: max-score-picker
        - name: decode
          plugins:
          - pluginRef: max-score-picker
        """.formatted(parameters);
  }

  @Test
  void emptyValuesAreUnsetAsUpstream() {
    for (String params : new String[] {
        "{profiles: {decode: '', prefill: '', encode: ''}, deciders: {prefill: ''}}",
        "{decodeProfile: '', prefillProfile: '', prefillDeciderPluginName: ''}",
        "{deciderPluginName: ''}",
        // empty flat values beside nested ones are not a mix of the two formats
        "{profiles: {decode: decode}, deciders: {prefill: prefix-based-pd-decider},"
            + " prefillProfile: '', deciderPluginName: ''}"}) {
      try (Router r = Router.builder().endpoints(POOL).configYaml(config(params), "d.yaml")
          .build()) {
        assertThat(r.config().profileHandler().toString()).as(params)
            .startsWith("disagg-profile-handler");
        assertThat(r.route(io.epp4j.api.InferenceRequest.builder().model("m").prompt("p")
            .build()).isRouted()).as(params).isTrue();
      }
    }
  }

  @Test
  void anEmptyDeciderNameDisaggregatesNothing() {
    try (Router r = Router.builder().endpoints(POOL)
        .configYaml(config("{deciders: {prefill: ''}}"), "d.yaml").build()) {
      assertThat(r.config().profileHandler().toString()).isEqualTo(
          "disagg-profile-handler(null)");
    }
  }

  @Test
  void nonEmptyValuesAreCheckedAsBefore() {
    assertThatThrownBy(() -> Router.builder().endpoints(POOL)
        .configYaml(config("{deciders: {prefill: nope}}"), "d.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("type 'disagg-profile-handler'").hasMessageContaining("'nope'");
    assertThatThrownBy(() -> Router.builder().endpoints(POOL)
        .configYaml(config("{profiles: {decode: d}}"), "d.yaml").build())
        .isInstanceOf(ConfigException.class).hasMessageContaining("profiles");
    assertThatThrownBy(() -> Router.builder().endpoints(POOL)
        .configYaml(config("{deciders: {prefill: prefix-based-pd-decider},"
            + " deciderPluginName: prefix-based-pd-decider}"), "d.yaml").build())
        .isInstanceOf(ConfigException.class).hasMessageContaining("cannot be mixed");
  }
}
