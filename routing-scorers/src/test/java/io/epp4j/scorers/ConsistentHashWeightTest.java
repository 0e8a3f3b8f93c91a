package io.epp4j.scorers;

import static io.epp4j.scorers.RingHashOffRouteTest.weighted;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.Router;
import io.epp4j.core.RouterConfig;
import io.epp4j.core.SchedulingProfile;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The {@code epp4j.io/weight} label as the sticky pickers read it. */
class ConsistentHashWeightTest {

  static InferenceRequest session(String key) {
    return InferenceRequest.builder().model("m").prompt("p").sessionKey(key).build();
  }

  /**
   * Any integer weight of at least 1 counts as given, as Envoy takes it: a weight above a
   * million used to count as 1, so the heaviest endpoint became the lightest.
   */
  @Test
  void aWeightAboveAMillionCountsAsGiven() {
    MaglevPicker picker = new MaglevPicker(HashKeySource.SESSION,
        MaglevPicker.DEFAULT_TABLE_SIZE, 0, 1);
    List<Endpoint> pool = List.of(weighted("10.6.0.1:8000", 1),
        weighted("10.6.0.2:8000", 3_000_000));
    try (Router router = Router.builder()
        .config(RouterConfig.of(SchedulingProfile.builder("default").picker(picker).build()))
        .endpoints(pool).build()) {
      int heavy = 0;
      for (int i = 0; i < 200; i++) {
        if (router.route(session("user-" + i)).primary().id().equals("10.6.0.2:8000")) {
          heavy++;
        }
      }
      // a 1 : 3,000,000 split of 65,537 slots leaves the light endpoint at most a slot or two
      assertThat(heavy).as("keys on the endpoint weighted 3,000,000 of 200").isGreaterThan(195);
    }
  }

  @Test
  void weightParsing() {
    assertThat(ConsistentHashPicker.weight(weighted("10.6.0.1:8000", Integer.MAX_VALUE)))
        .isEqualTo(Integer.MAX_VALUE);
    assertThat(ConsistentHashPicker.weight(Endpoint.parse("10.6.0.1:8000"))).isEqualTo(1);
    assertThat(ConsistentHashPicker.weight(weighted("10.6.0.1:8000", 0))).isEqualTo(1);
  }

  /**
   * The weight is an integer in ASCII digits; Arabic-Indic or full-width digits and a sign are not
   * one, and count as the default 1, as any other label that is not a weight.
   */
  @Test
  void aWeightInOtherDigitsOrWithASignCountsAsOne() {
    assertThat(weight("\u0663")).isEqualTo(1);
    assertThat(weight("\u0663\u0660\u0660\u0660\u0660\u0660\u0660")).isEqualTo(1);
    assertThat(weight("\uFF13")).isEqualTo(1);
    assertThat(weight("+3")).isEqualTo(1);
    assertThat(weight(" 3 ")).isEqualTo(3);
    assertThat(weight("3")).isEqualTo(3);
  }

  private static int weight(String label) {
    return ConsistentHashPicker.weight(Endpoint.parse("10.6.0.1:8000",
        java.util.Map.of(ConsistentHashPicker.WEIGHT_LABEL, label)));
  }
}
