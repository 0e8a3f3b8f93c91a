package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * The token {@code session-affinity-scorer} writes names an endpoint, so every client served
 * there carries the same one; the request parser also takes it as the session key when the
 * client sends no other session header. Were that key bound like a session's, the clients of an
 * endpoint that left the pool would all be pinned to wherever the first of them went.
 */
class SessionTokenOfAnEndpointTest {
  static final String A = "10.0.0.1:8000";
  static final String B = "10.0.0.2:8000";
  static final String C = "10.0.0.3:8000";
  final AtomicLong now = new AtomicLong(1_000_000_000L);

  void queues(Router r, Map<String, Integer> waiting) {
    waiting.forEach((id, q) -> r.updateMetrics(id, EndpointMetrics.builder().waitingRequests(q)
        .kvCacheUsage(0).scrapedAtNanos(now.get()).build()));
  }

  /** A request as the parser makes it of a client that sends back only the token. */
  static InferenceRequest withToken(String token) {
    return InferenceRequest.builder().model("m").prompt("p").sessionKey(token)
        .headers(Map.of("x-session-token", token)).build();
  }

  static String served(Router r, InferenceRequest req) {
    RoutingDecision d = r.route(req);
    String id = d.primary().id();
    d.onComplete(Usage.NONE);
    return id;
  }

  @Test
  void theClientsOfAnEndpointThatLeftAreSpreadNotPinnedTogether() {
    String yaml = """
        plugins:
        - type: session-affinity-filter
        - type: queue-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: session-affinity-filter
          - pluginRef: queue-scorer
          - pluginRef: max-score-picker
        """;
    try (Router r = Router.builder().endpoints(List.of(Endpoint.parse(A), Endpoint.parse(B),
        Endpoint.parse(C))).configYaml(yaml, "t.yaml").ticker(now::get).randomSeed(1).build()) {
      queues(r, Map.of(A, 5, B, 0, C, 9));
      RoutingDecision first = r.route(InferenceRequest.builder().model("m").prompt("p").build());
      assertThat(first.primary().id()).isEqualTo(B);
      String tokenOfB = first.responseHeaders().get("x-session-token");
      first.onComplete(Usage.NONE);
      assertThat(new String(Base64.getDecoder().decode(tokenOfB), StandardCharsets.UTF_8))
          .isEqualTo(B);
      // while B serves, its token pins there
      queues(r, Map.of(A, 0, B, 5, C, 9));
      assertThat(served(r, withToken(tokenOfB))).isEqualTo(B);

      r.setEndpoints(List.of(Endpoint.parse(A), Endpoint.parse(C)));
      queues(r, Map.of(A, 0, C, 9));
      assertThat(served(r, withToken(tokenOfB))).isEqualTo(A);
      // another of B's clients: the shortest queue is C's now, and nothing ties it to A
      queues(r, Map.of(A, 9, C, 0));
      assertThat(served(r, withToken(tokenOfB))).isEqualTo(C);
      assertThat(served(r, withToken(tokenOfB))).isEqualTo(C);
    }
  }

  @Test
  void onlyWhatCouldBeAnEndpointTokenIsDecoded() {
    String token = SessionAffinityScorer.encodeEndpoint(A);
    assertThat(SessionAffinityScorer.decodeEndpoint(token)).isEqualTo(A);
    assertThat(SessionAffinityScorer.decodeEndpoint(A)).as("a plain id").isEqualTo(A);
    // opaque tokens: a UUID, text with a space, a base64 value longer than any endpoint id
    assertThat(SessionAffinityScorer.decodeEndpoint("3f2b8c1e-9d4a-4e6f-8a7b-1c2d3e4f5a6b"))
        .isNull();
    assertThat(SessionAffinityScorer.decodeEndpoint("not a token")).isNull();
    String longOne = Base64.getEncoder().encodeToString(
        ("10.0.0.1:8000" + "x".repeat(400)).getBytes(StandardCharsets.UTF_8));
    assertThat(SessionAffinityScorer.mayBeEndpointToken(longOne)).isFalse();
    assertThat(SessionAffinityScorer.decodeEndpoint(longOne)).isNull();
    assertThat(SessionAffinityScorer.mayBeEndpointToken(token)).isTrue();
    assertThat(SessionAffinityScorer.decodeEndpoint("")).isNull();
  }
}
