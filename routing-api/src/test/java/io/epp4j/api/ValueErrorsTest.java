package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

/**
 * A value type that refuses a figure says which one and what it got, so that a custom metrics
 * source or usage reader can be fixed from the message alone.
 */
class ValueErrorsTest {

  @Test
  void endpointMetricsNameTheNegativeFieldAndItsValue() {
    assertThatThrownBy(() -> EndpointMetrics.builder().kvCapacityBlocks(-3).build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("kvCapacityBlocks must be >= 0, got -3");
    assertThatThrownBy(() -> EndpointMetrics.builder().blockSizeTokens(-16).build())
        .hasMessage("blockSizeTokens must be >= 0, got -16");
    assertThatThrownBy(() -> EndpointMetrics.builder().maxLoras(-1).build())
        .hasMessage("maxLoras must be >= 0, got -1");
  }

  @Test
  void usageNamesTheNegativeCountAndItsValue() {
    assertThatThrownBy(() -> new Usage(-1, 0, 0))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("promptTokens must be >= 0, got -1");
    assertThatThrownBy(() -> new Usage(10, -2, 0)).hasMessage("cachedTokens must be >= 0, got -2");
    assertThatThrownBy(() -> new Usage(10, 0, -5))
        .hasMessage("completionTokens must be >= 0, got -5");
  }
}
