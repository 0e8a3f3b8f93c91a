package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * A setting taken under two names (the current one and upstream's or an earlier release's) is
 * given under one: with both, one value was used and the other reported as "not used by epp4j",
 * which it is, under its other name.
 */
class ParameterAliasesTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"));

  static void refused(String plugin, String params, String named) {
    String yaml = """
        plugins:
        - type: %s
          parameters: %s
        - type: random-picker
        """.formatted(plugin, params);
    assertThatThrownBy(() -> Router.builder().endpoints(POOL).configYaml(yaml, "t.yaml").build())
        .as(plugin + " " + params)
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("'" + named + "'");
  }

  @Test
  void bothNamesOfAQueueThresholdAreRefused() {
    refused("low-queue-filter", "{threshold: 5, queueThreshold: 500}", "queueThreshold");
    refused("utilization-filter", "{queueThreshold: 5, threshold: 500}", "threshold");
    refused("load-aware-scorer", "{queueThreshold: 5, threshold: 500}", "threshold");
  }

  @Test
  void bothNamesOfThePrefixBlockSizeInCharactersAreRefused() {
    refused("prefix-cache-scorer", "{hashBlockSize: 64, blockSize: 128}", "blockSize");
  }
}
