package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
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

  @Test
  void aBlockSizeInCharactersBesideAnotherInTokensIsRefused() {
    // 256 characters are 64 tokens, not the 16 blockSizeTokens says: one would be dropped
    refused("prefix-cache-scorer", "{blockSizeTokens: 16, hashBlockSize: 256}", "hashBlockSize");
    refused("prefix-cache-scorer", "{blockSizeTokens: 16, blockSize: 256}", "blockSize");
    // the producer reads its deprecated blockSize in tokens
    refused("approx-prefix-cache-producer", "{blockSizeTokens: 64, blockSize: 128}", "blockSize");
  }

  @Test
  void aBlockSizeInCharactersThatAgreesWithTheOneInTokensLoadsWithoutAWarning() {
    String yaml = """
        plugins:
        - type: prefix-cache-scorer
          parameters: {blockSizeTokens: 16, hashBlockSize: 64}
        - type: random-picker
        """;
    try (Router r = Router.builder().endpoints(POOL).configYaml(yaml, "t.yaml").build()) {
      assertThat(r.config().warnings()).noneMatch(w -> w.contains("hashBlockSize"));
      assertThat(r.config().plugins().get("prefix-cache-scorer").toString())
          .contains("blockSizeTokens=16");
    }
  }
}
