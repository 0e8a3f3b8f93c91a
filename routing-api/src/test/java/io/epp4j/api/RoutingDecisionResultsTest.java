package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The profile results a routed decision holds are its own: neither the caller nor a reader changes them. */
class RoutingDecisionResultsTest {
  static final Endpoint DECODE = Endpoint.parse("10.0.0.1:8000");
  static final Endpoint FALLBACK = Endpoint.parse("10.0.0.2:8000");
  static final Endpoint PREFILL = Endpoint.parse("10.0.0.3:8000");

  static Map<String, ProfileResult> results() {
    Map<String, ProfileResult> r = new LinkedHashMap<>();
    r.put("decode", new ProfileResult("decode", List.of(DECODE, FALLBACK)));
    r.put("prefill", new ProfileResult("prefill", List.of(PREFILL)));
    return r;
  }

  @Test
  void changingTheGivenMapAfterwardsDoesNotChangeTheDecision() {
    Map<String, ProfileResult> given = results();
    RoutingDecision d = RoutingDecision.routed("decode", given);
    given.clear();
    given.put("other", new ProfileResult("other", List.of(PREFILL)));

    assertThat(d.primary()).isEqualTo(DECODE);
    assertThat(d.endpoints()).containsExactly(DECODE, FALLBACK);
    assertThat(d.secondaryEndpoint("prefill")).isEqualTo(PREFILL);
    assertThat(d.profileResults().keySet()).containsExactly("decode", "prefill");
  }

  @Test
  void theProfileResultsCannotBeChangedThroughTheDecisionAndKeepTheirOrder() {
    for (Map<String, ProfileResult> given : List.of(results(),
        Map.of("decode", new ProfileResult("decode", List.of(DECODE))))) {
      RoutingDecision d = RoutingDecision.routed("decode", given);
      Map<String, ProfileResult> seen = d.profileResults();
      assertThat(seen.keySet()).containsExactlyElementsOf(given.keySet());
      assertThatThrownBy(() -> seen.remove("decode"))
          .isInstanceOf(UnsupportedOperationException.class);
      assertThatThrownBy(() -> seen.put("x", new ProfileResult("x", List.of())))
          .isInstanceOf(UnsupportedOperationException.class);
      assertThat(d.primary()).isEqualTo(DECODE);
    }
  }
}
