package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

/**
 * HTTP ports {@code P..P+N-1} that overlap the KV-event ports {@code K..K+2N-1}: the emulator's
 * own KV publisher takes the port first, and the start failed with "HTTP port ... is already in
 * use", sending the user to look for another process. The options are refused naming both.
 */
class ServePortOverlapTest {

  @Test
  void httpPortsOverlappingTheKvEventPortsAreRefusedNamingBothOptions() {
    // replica 0's HTTP port is the default KV-event port
    assertThatThrownBy(() -> Serve.parse(new String[] {"--replicas", "1", "--port", "25557"}))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("--port").hasMessageContaining("--kv-events-port");
    // replica 1's HTTP port is replica 0's replay port
    assertThatThrownBy(() -> Serve.parse(new String[] {"--replicas", "2", "--port", "8000",
        "--kv-events-port", "7999"}))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("--port").hasMessageContaining("--kv-events-port");
    // adjacent ranges are fine
    assertThat(Serve.parse(new String[] {"--replicas", "2", "--port", "8000",
        "--kv-events-port", "8002"}).kvEventsPort()).isEqualTo(8002);
    assertThat(Serve.parse(new String[] {"--replicas", "2", "--port", "8000",
        "--kv-events-port", "7996"}).kvEventsPort()).isEqualTo(7996);
  }
}
