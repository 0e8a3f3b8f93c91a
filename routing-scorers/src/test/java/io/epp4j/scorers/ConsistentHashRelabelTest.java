package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.core.RouterConfig;
import io.epp4j.core.SchedulingProfile;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The sticky pickers' tables are made of the endpoints' addresses and weights only: a label
 * change that touches neither (a zone, a version, a role a discovery adds) keeps the table, and
 * every session its endpoint; a weight change rebuilds it.
 */
class ConsistentHashRelabelTest {
  private static final List<Endpoint> POOL = List.of(Endpoint.parse("10.7.0.1:8000"),
      Endpoint.parse("10.7.0.2:8000"), Endpoint.parse("10.7.0.3:8000"));

  private static InferenceRequest session(String key) {
    return InferenceRequest.builder().model("m").prompt("p").sessionKey(key).build();
  }

  /** The pool with {@code labels} on its second endpoint. */
  private static List<Endpoint> relabelled(Map<String, String> labels) {
    return List.of(POOL.get(0), Endpoint.parse("10.7.0.2:8000", labels), POOL.get(2));
  }

  private static void check(ConsistentHashPicker picker) {
    try (Router router = Router.builder()
        .config(RouterConfig.of(SchedulingProfile.builder("default").picker(picker).build()))
        .endpoints(POOL).build()) {
      Map<String, String> before = new HashMap<>();
      for (int i = 0; i < 50; i++) {
        before.put("s" + i, router.route(session("s" + i)).primary().id());
      }
      assertThat(picker.routeBuilds.get()).isEqualTo(1);

      router.setEndpoints(relabelled(Map.of("topology.kubernetes.io/zone", "eu-1")));
      for (int i = 0; i < 50; i++) {
        RoutingDecision d = router.route(session("s" + i));
        assertThat(d.primary().id()).as("s" + i).isEqualTo(before.get("s" + i));
        if (d.primary().id().equals("10.7.0.2:8000")) {
          assertThat(d.primary().labels()).as("the endpoint as the pool has it now")
              .containsEntry("topology.kubernetes.io/zone", "eu-1");
        }
      }
      assertThat(picker.routeBuilds.get()).as("tables built after a label no table reads changed")
          .isEqualTo(1);

      router.setEndpoints(relabelled(Map.of("topology.kubernetes.io/zone", "eu-1",
          ConsistentHashPicker.WEIGHT_LABEL, "5")));
      router.route(session("s0"));
      assertThat(picker.routeBuilds.get()).as("a new weight makes a new table").isEqualTo(2);
    }
  }

  @Test
  void ringHashKeepsItsRingWhenALabelItDoesNotReadChanges() {
    check(RingHashPicker.create());
  }

  @Test
  void maglevKeepsItsTableWhenALabelItDoesNotReadChanges() {
    check(new MaglevPicker(HashKeySource.SESSION, MaglevPicker.DEFAULT_TABLE_SIZE, 0, 1));
  }
}
