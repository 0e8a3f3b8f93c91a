package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * A saturation rule built in code is held to the limits the router builder and the configuration
 * file apply: KV usage is a fraction, so a KV threshold above 1 (or infinite) took KV usage out of
 * the rule without a word, while {@code saturationKvThreshold(1.5)} and
 * {@code kvCacheUtilThreshold: 1.5} were refused.
 */
class SaturationInCodeTest {

  @Test
  void aKvThresholdAboveOneIsRefusedNamingIt() {
    for (double kv : new double[] {1.5, Double.POSITIVE_INFINITY, Double.NaN, 0, -0.1}) {
      assertThatThrownBy(() -> new RouterConfig.Saturation(5, kv, Duration.ofMillis(200)))
          .as("kv " + kv).isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("kvCacheThreshold");
    }
    assertThat(new RouterConfig.Saturation(5, 1.0, Duration.ofMillis(200)).kvCacheThreshold())
        .isEqualTo(1.0);
  }
}
