package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * The token {@code session-affinity-scorer} writes on answers ({@code x-session-token}, base64 of
 * the endpoint that served) is what every client of that endpoint sends back, and the request
 * parser takes it as the session key of a client that sends no other session header. The
 * pickers that key by session must not take it for one session's key: the clients of one
 * endpoint would be merged into one session.
 */
class EndpointTokenSessionKeyTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parse("10.5.0.1:8000"),
      Endpoint.parse("10.5.0.2:8000"), Endpoint.parse("10.5.0.3:8000"));
  static final byte[] BODY = "{\"model\":\"m\",\"prompt\":\"hello there\",\"max_tokens\":4}"
      .getBytes(StandardCharsets.UTF_8);

  static String yaml(String picker) {
    return """
        plugins:
        - type: session-affinity-scorer
        - type: %s
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: session-affinity-scorer
          - pluginRef: %s
        """.formatted(picker, picker);
  }

  /** A client's request carrying {@code header: value} as its only session header. */
  static RoutingDecision route(Router r, String header, String value) {
    RoutingDecision d = r.route("/v1/completions", Map.of(header, value), BODY);
    assertThat(d.isRouted()).isTrue();
    return d;
  }

  @Test
  void ringHashDoesNotSendEveryClientOfOneEndpointToOnePlace() {
    String tokenOfFirst = SessionAffinityScorer.encodeEndpoint(POOL.get(0).id());
    try (Router r = Router.builder().endpoints(POOL).randomSeed(7)
        .configYaml(yaml("ring-hash-picker"), "ring-hash").build()) {
      // 60 clients the first endpoint served, each sending its token back: a token names an
      // endpoint, not a session, so each is placed as a request without a key (at random)
      Set<String> placed = new HashSet<>();
      for (int i = 0; i < 60; i++) {
        RoutingDecision d = route(r, "x-session-token", tokenOfFirst);
        assertThat(d.responseHeaders()).containsKey("x-session-token");
        placed.add(d.primary().id());
        d.onComplete(new Usage(2, 0, 4));
      }
      assertThat(placed).as("where 60 clients of one endpoint went").hasSizeGreaterThan(1);
      // a real session key is still hashed: one client stays in one place
      Set<String> session = new HashSet<>();
      for (int i = 0; i < 20; i++) {
        RoutingDecision d = route(r, "x-session-id", "user-42");
        session.add(d.primary().id());
        d.onComplete(new Usage(2, 0, 4));
      }
      assertThat(session).hasSize(1);
    }
  }

  @Test
  void tokenCostPickerCountsNoSessionForAnEndpointToken() {
    String tokenOfFirst = SessionAffinityScorer.encodeEndpoint(POOL.get(0).id());
    try (Router r = Router.builder().endpoints(POOL).randomSeed(7)
        .configYaml(yaml("token-cost-picker"), "token-cost").build()) {
      TokenCostPicker picker = (TokenCostPicker) r.config().plugins().get("token-cost-picker");
      for (int i = 0; i < 10; i++) {
        route(r, "x-session-token", tokenOfFirst).onComplete(new Usage(2, 0, 4));
      }
      // ten clients, not one session homed where the last of them went
      assertThat(picker.homeOf(tokenOfFirst)).isNull();
      assertThat(picker.trackedSessions()).isZero();
      // another router's hint of the same token is no session either
      picker.onRemoteSession(tokenOfFirst, POOL.get(1).id(), System.nanoTime());
      assertThat(picker.trackedSessions()).isZero();
      // a session key is a session as before
      RoutingDecision d = route(r, "x-session-id", "dialog-1");
      d.onComplete(new Usage(2, 0, 4));
      assertThat(picker.homeOf("dialog-1")).isEqualTo(d.primary().id());
      assertThat(picker.trackedSessions()).isEqualTo(1);
    }
  }
}
