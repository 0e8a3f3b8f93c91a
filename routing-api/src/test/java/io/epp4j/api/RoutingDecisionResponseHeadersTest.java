package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** Headers plugins ask the gateway to set on its answer, and request attributes of a cycle. */
class RoutingDecisionResponseHeadersTest {

  @Test
  void valuesAreReadWhenTheGatewayAsksSoTheyFollowAFallback() {
    RoutingDecision d = RoutingDecision.routed("decode", RoutingDecisionResultsTest.results());
    assertThat(d.responseHeaders()).isEmpty();
    d.setResponseHeader("X-Token", x -> x.servedBy().id());
    d.setResponseHeader("x-prefill", x -> {
      Endpoint e = x.secondaryEndpoint("prefill");
      return e == null ? null : e.id();
    });
    d.setResponseHeader("x-none", x -> null);
    assertThat(d.responseHeaders()).containsExactly(Map.entry("x-token", "10.0.0.1:8000"),
        Map.entry("x-prefill", "10.0.0.3:8000"));
    d.onFallback(RoutingDecisionResultsTest.FALLBACK);
    assertThat(d.responseHeaders()).containsEntry("x-token", "10.0.0.2:8000");
    // the same name in another case replaces the first
    d.setResponseHeader("x-TOKEN", x -> "t");
    assertThat(d.responseHeaders()).containsExactly(Map.entry("x-token", "t"),
        Map.entry("x-prefill", "10.0.0.3:8000"));
    assertThatThrownBy(() -> d.responseHeaders().put("a", "b"))
        .isInstanceOf(UnsupportedOperationException.class);
  }

  @Test
  void aRejectionCarriesNone() {
    RoutingDecision d = RoutingDecision.rejected(Rejection.Reason.SHED, "busy");
    d.setResponseHeader("x-token", x -> "t");
    assertThat(d.responseHeaders()).isEmpty();
  }

  @Test
  void requestAttributesAreKeptByNameForTheCycle() {
    CycleState s = new CycleState(0, new SplittableRandom(1));
    assertThat(s.requestAttribute("agent-identity/")).isNull();
    s.putRequestAttribute("agent-identity/", "a");
    s.putRequestAttribute("agent-identity/", "b");
    s.putRequestAttribute("SessionIDDataKey/sid", "c");
    assertThat(s.requestAttribute("agent-identity/")).isEqualTo("b");
    assertThat(s.requestAttribute("SessionIDDataKey/sid")).isEqualTo("c");
    assertThat(s.requestAttribute("SessionIDDataKey/")).isNull();
  }
}
