package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

class EmulatedReplicasPortsTest {

  @Test
  void overlappingOrOutOfRangePortsAreRefusedNamingThemBeforeAnythingStarts() {
    // 2 replicas: HTTP 30000-30001, KV events 30001-30004; before, the start failed as if
    // another process held port 30001
    assertThatThrownBy(() -> EmulatedReplicas.start(2, 30_000, 30_001, false, 1, 1))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("httpPort 30000 and kvEventsPort 30001 overlap");
    assertThatThrownBy(() -> EmulatedReplicas.start(3, 65_534, 30_001, false, 1, 1))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("httpPort 65534 leaves no room for 3 replicas");
    assertThatThrownBy(() -> EmulatedReplicas.start(2, 30_000, 65_533, false, 1, 1))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("kvEventsPort 65533 leaves no room for 2 replicas");
  }
}
