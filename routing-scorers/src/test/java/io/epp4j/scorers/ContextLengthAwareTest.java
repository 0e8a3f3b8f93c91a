package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.within;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** {@code context-length-aware}: llm-d's scores by declared prompt-length range, and its filter. */
class ContextLengthAwareTest {
  static final String LABEL = ContextLengthAware.DEFAULT_LABEL;
  static final List<Endpoint> POOL = List.of(
      Endpoint.of("10.0.0.1", 8000, Map.of(LABEL, "0-2048")),
      Endpoint.of("10.0.0.2", 8000, Map.of(LABEL, "2049-32768")),
      Endpoint.of("10.0.0.3", 8000, Map.of(LABEL, "not a range")));

  static String yaml(boolean filtering) {
    return """
        plugins:
        - type: context-length-aware
          parameters: {enableFiltering: %s}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: context-length-aware
          - pluginRef: max-score-picker
        """.formatted(filtering);
  }

  static InferenceRequest tokens(int n) {
    return InferenceRequest.builder().model("m").tokenIds(new int[n]).build();
  }

  @Test
  void scoresFollowUpstreamsFormula() {
    // inside a range: 0.3 + 0.7 x (0.7 x width score + 0.3 x room above the prompt)
    assertThat(ContextLengthAware.rangeScore(1024, 0, 2048))
        .isCloseTo(0.3 + 0.7 * (0.7 / (1 + 0.2048) + 0.3 * 0.5), within(1e-12));
    assertThat(ContextLengthAware.rangeScore(7, 7, 7)).isEqualTo(1.0);
    // outside: 0.3 / (1 + distance / 1000), the nearer range scoring higher
    assertThat(ContextLengthAware.rangeScore(3048, 0, 2048)).isCloseTo(0.15, within(1e-12));
    assertThat(ContextLengthAware.rangeScore(9000, 0, 8192))
        .isGreaterThan(ContextLengthAware.rangeScore(9000, 0, 2048));
    assertThat(ContextLengthAware.range("0-2048")).containsExactly(0, 2048);
    assertThat(ContextLengthAware.range(" 10 - 20 ")).containsExactly(10, 20);
    assertThat(ContextLengthAware.range("20-10")).isNull();
    assertThat(ContextLengthAware.range("1-2-3")).isNull();
  }

  @Test
  void shortAndLongPromptsGoToTheEndpointsDeclaredForThem() {
    try (Router r = Router.builder().endpoints(POOL).configYaml(yaml(false), "c.yaml").build()) {
      assertThat(r.route(tokens(500)).primary().id()).isEqualTo("10.0.0.1:8000");
      assertThat(r.route(tokens(10_000)).primary().id()).isEqualTo("10.0.0.2:8000");
    }
  }

  @Test
  void theFilterDropsEndpointsWhoseRangeMissesThePromptOrIsNoRange() {
    List<Endpoint> pool = List.of(POOL.get(0), POOL.get(2), Endpoint.of("10.0.0.4", 8000));
    try (Router r = Router.builder().endpoints(pool).configYaml(yaml(true), "c.yaml").build()) {
      // 10,000 tokens: the 0-2048 endpoint and the unreadable label are dropped; the endpoint
      // without the label stays (score 0.5)
      for (int i = 0; i < 5; i++) {
        assertThat(r.route(tokens(10_000)).primary().id()).isEqualTo("10.0.0.4:8000");
      }
    }
  }

  /**
   * A range is ASCII digits: other scripts' digits (Arabic-Indic, full-width) and a sign make a
   * label that is not a range, as upstream's reading refuses them, so the filter drops it rather
   * than reading {@code "٠-٢٠٤٨"} as 0-2048.
   */
  @Test
  void aRangeInOtherDigitsOrWithASignIsNoRange() {
    assertThat(ContextLengthAware.range("\u0660-\u0662\u0660\u0664\u0668")).isNull();
    assertThat(ContextLengthAware.range("\uFF10-\uFF12\uFF10\uFF14\uFF18")).isNull();
    assertThat(ContextLengthAware.range("0-2\u0660\u0664\u0668")).isNull();
    assertThat(ContextLengthAware.range("+0-2048")).isNull();
    assertThat(ContextLengthAware.range("0-+2048")).isNull();
    assertThat(ContextLengthAware.range("0-99999999999999999999")).isNull();
    List<Endpoint> pool = List.of(
        Endpoint.of("10.0.0.1", 8000, Map.of(LABEL, "\u0660-\u0662\u0660\u0664\u0668")),
        Endpoint.of("10.0.0.4", 8000));
    try (Router r = Router.builder().endpoints(pool).configYaml(yaml(true), "c.yaml").build()) {
      for (int i = 0; i < 5; i++) {
        assertThat(r.route(tokens(500)).primary().id()).isEqualTo("10.0.0.4:8000");
      }
    }
  }

  @Test
  void aParameterThatWouldChangeTheLengthIsRefusedByName() {
    String yaml = yaml(false).replace("{enableFiltering: false}",
        "{enableFiltering: false, reusableTokensProducerName: p2p}");
    assertThatThrownBy(() -> Router.builder().endpoints(POOL).configYaml(yaml, "c.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("reusableTokensProducerName");
  }
}
