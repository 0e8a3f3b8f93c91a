package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * {@code balanceFactor} and Envoy's {@code hashBalanceFactor} name one setting of the ring-hash
 * and Maglev pickers in two units. A file that gives both had the percent one dropped, with only
 * the warning an unused parameter gets, so the bound the operator may have meant did not hold;
 * as for every setting read under two names, the second is refused by name.
 */
class BalanceFactorTwoNamesTest {
  private static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"));

  private static String config(String type, String parameters) {
    return """
        plugins:
        - type: %s
          parameters: %s
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: %s
        """.formatted(type, parameters, type);
  }

  @Test
  void bothNamesAreRefusedNamingThePluginAndTheSecondName() {
    for (String type : new String[] {"ring-hash-picker", "maglev-picker"}) {
      assertThatThrownBy(() -> Router.builder().endpoints(POOL)
          .configYaml(config(type, "{balanceFactor: 1.25, hashBalanceFactor: 300}"), "b.yaml")
          .build())
          .as(type)
          .isInstanceOf(ConfigException.class)
          .hasMessageContaining("type '" + type + "'")
          .hasMessageContaining("parameter 'hashBalanceFactor'")
          .hasMessageContaining("'balanceFactor'");
    }
  }

  @Test
  void eitherNameAloneStillLoads() {
    for (String type : new String[] {"ring-hash-picker", "maglev-picker"}) {
      for (String params : new String[] {"{balanceFactor: 1.25}", "{hashBalanceFactor: 125}"}) {
        try (Router r = Router.builder().endpoints(POOL).configYaml(config(type, params), "b.yaml")
            .build()) {
          assertThat(r.config().warnings()).as("%s %s", type, params).isEmpty();
        }
      }
    }
  }
}
