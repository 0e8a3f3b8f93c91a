package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

class GatewayOptionsTest {
  @Test
  void gatewaysAndSharedStateAreParsed() throws Exception {
    Main.Options o = Main.Options.parse(new String[] {"--gateways", "4", "--shared-state",
        "replicated", "--replication-delay-ms", "0.5"});
    assertThat(o.gateways).isEqualTo(4);
    assertThat(o.replicated).isTrue();
    assertThat(o.replicationDelayMs).isEqualTo(0.5);
    Main.Options d = Main.Options.parse(new String[0]);
    assertThat(d.gateways).isEqualTo(1);
    assertThat(d.replicated).isFalse();
    assertThat(d.replicationDelayMs).isEqualTo(Main.Options.DEFAULT_REPLICATION_DELAY_MS);
  }

  @Test
  void badValuesNameTheOption() {
    assertThatThrownBy(() -> Main.Options.parse(new String[] {"--shared-state", "gossip"}))
        .hasMessageContaining("--shared-state").hasMessageContaining("none or replicated");
    assertThatThrownBy(() -> Main.Options.parse(new String[] {"--gateways", "0"}))
        .hasMessageContaining("--gateways");
  }
}
