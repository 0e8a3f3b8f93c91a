package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * llm-d's session affinity as its files configure it: {@code session-affinity-scorer} and
 * {@code -filter} with {@code strategy} {@code encoded_endpoint_header} (a token written on the
 * answer and sent back) or {@code session_id} (a binding from an identifier that headers or
 * request attributes carry), {@code session-id-producer} and {@code agent-identity}.
 */
class UpstreamSessionAffinityTest {
  static final String A = "10.0.0.1:8000";
  static final String B = "10.0.0.2:8000";
  static final String C = "10.0.0.3:8000";
  final AtomicLong now = new AtomicLong(1_000_000_000L);

  Router router(String plugins, String profile) {
    String yaml = "plugins:\n" + plugins + "- type: queue-scorer\n- type: max-score-picker\n"
        + "  parameters: {maxNumOfEndpoints: 3}\n"
        + "schedulingProfiles:\n- name: default\n  plugins:\n" + profile
        + "  - pluginRef: queue-scorer\n    weight: 2\n  - pluginRef: max-score-picker\n";
    return Router.builder().endpoints(List.of(Endpoint.parse(A), Endpoint.parse(B),
        Endpoint.parse(C))).configYaml(yaml, "session.yaml").ticker(now::get).randomSeed(3)
        .build();
  }

  /** Queues that make {@code first} the least loaded endpoint, then the others in order. */
  void queues(Router r, String first, String second, String third) {
    int q = 0;
    for (String id : List.of(first, second, third)) {
      assertThat(r.updateMetrics(id, EndpointMetrics.builder().waitingRequests(q).kvCacheUsage(0)
          .scrapedAtNanos(now.get()).build())).isTrue();
      q += 5;
    }
  }

  static InferenceRequest request(Map<String, String> headers) {
    return InferenceRequest.builder().model("m").prompt("hello").headers(headers).build();
  }

  static String token(String id) {
    return Base64.getEncoder().encodeToString(id.getBytes(StandardCharsets.UTF_8));
  }

  static String pinned(Router r, InferenceRequest req) {
    RoutingDecision d = r.route(req);
    String id = d.primary().id();
    d.onComplete(io.epp4j.api.Usage.NONE);
    return id;
  }

  @Test
  void theDefaultStrategyWritesTheServingEndpointsTokenAndAClientSendingItBackStays() {
    try (Router r = router("- type: session-affinity-scorer\n",
        "  - pluginRef: session-affinity-scorer\n    weight: 10\n")) {
      queues(r, B, A, C);
      RoutingDecision first = r.route(request(Map.of()));
      assertThat(first.primary().id()).isEqualTo(B);
      assertThat(first.responseHeaders()).containsExactly(Map.entry("x-session-token", token(B)));
      // the gateway fell back to A: the token names the endpoint that served the request
      first.onFallback(first.endpoints().get(1));
      assertThat(first.endpoints().get(1).id()).isEqualTo(A);
      assertThat(first.responseHeaders()).containsEntry("x-session-token", token(A));
      first.onComplete(io.epp4j.api.Usage.NONE);
      queues(r, A, C, B);
      assertThat(pinned(r, request(Map.of("x-session-token", token(B))))).isEqualTo(B);
      assertThat(pinned(r, request(Map.of()))).isEqualTo(A);
    }
  }

  @Test
  void anExplicitEncodedStrategyUsesItsHeaderAndKeepsNoBinding() {
    try (Router r = router("""
        - type: session-affinity-scorer
          parameters:
            strategy: encoded_endpoint_header
            encodedEndpointHeaderConfig: {header: X-Slot-Token}
        """, "  - pluginRef: session-affinity-scorer\n    weight: 10\n")) {
      queues(r, B, A, C);
      RoutingDecision d = r.route(request(Map.of("x-session-id", "s1")));
      assertThat(d.responseHeaders()).containsExactly(Map.entry("x-slot-token", token(B)));
      d.onComplete(io.epp4j.api.Usage.NONE);
      queues(r, C, A, B);
      // llm-d's encoded strategy is stateless: a session id alone does not pin
      assertThat(pinned(r, request(Map.of("x-session-id", "s1")))).isEqualTo(C);
      assertThat(pinned(r, request(Map.of("x-slot-token", token(B))))).isEqualTo(B);
      // the default header is not read under another name
      assertThat(pinned(r, request(Map.of("x-session-token", token(B))))).isEqualTo(C);
    }
  }

  @Test
  void sessionIdBindsWhereTheRequestWentAndMovesOnlyWhenItsEndpointIsNoCandidate() {
    try (Router r = router("""
        - type: agent-identity
        - type: session-affinity-scorer
          parameters:
            strategy: session_id
            sessionIdConfig:
              sources:
              - header: x-session-id
              - attribute: agent-identity
              evictionTtlSeconds: 60
        """, "  - pluginRef: session-affinity-scorer\n    weight: 1\n")) {
      SessionAffinityScorer s = (SessionAffinityScorer) r.config().plugins()
          .get("session-affinity-scorer");
      InferenceRequest agent = request(Map.of("x-claude-code-session-id", "conv-7"));
      queues(r, A, B, C);
      RoutingDecision d = r.route(agent);
      assertThat(d.primary().id()).isEqualTo(A);
      assertThat(d.responseHeaders()).isEmpty();
      d.onComplete(io.epp4j.api.Usage.NONE);
      assertThat(s.binding("conv-7")).isEqualTo(A);
      // weight 1 against the queue's 2: the queue wins, and the binding stays where it was
      queues(r, B, C, A);
      assertThat(pinned(r, agent)).isEqualTo(B);
      assertThat(s.binding("conv-7")).isEqualTo(A);
      // with A not a candidate the session moves to where it went
      RoutingDecision moved = r.route(agent, Set.of(B, C));
      assertThat(moved.primary().id()).isEqualTo(B);
      moved.onComplete(io.epp4j.api.Usage.NONE);
      assertThat(s.binding("conv-7")).isEqualTo(B);
      // the header source comes first; it names another session, unbound
      assertThat(s.binding("h-1")).isNull();
      pinned(r, request(Map.of("x-session-id", "h-1", "x-claude-code-session-id", "conv-7")));
      assertThat(s.binding("h-1")).isEqualTo(B);
      // unused for longer than evictionTtlSeconds, the binding ends
      now.addAndGet(61_000_000_000L);
      assertThat(s.binding("conv-7")).isNull();
    }
  }

  /**
   * llm-d renews a {@code session_id} binding only when a request is routed to its endpoint: one
   * routed elsewhere while that endpoint was a candidate leaves it as it was, its idle time
   * included, so it ends {@code evictionTtlSeconds} after the last request that went there.
   */
  @Test
  void aRequestRoutedElsewhereDoesNotRenewTheBinding() {
    try (Router r = router("""
        - type: session-affinity-scorer
          parameters:
            strategy: session_id
            sessionIdConfig: {evictionTtlSeconds: 60}
        """, "  - pluginRef: session-affinity-scorer\n    weight: 1\n")) {
      SessionAffinityScorer s = (SessionAffinityScorer) r.config().plugins()
          .get("session-affinity-scorer");
      InferenceRequest req = request(Map.of("x-session-id", "s-9"));
      queues(r, A, B, C);
      assertThat(pinned(r, req)).isEqualTo(A);
      // requests routed to A renew it: 80 s after it was made, 40 s after its last use, it holds
      for (int i = 0; i < 2; i++) {
        now.addAndGet(40_000_000_000L);
        queues(r, A, B, C);
        assertThat(pinned(r, req)).isEqualTo(A);
      }
      assertThat(s.binding("s-9")).isEqualTo(A);
      // the queue (weight 2) outweighs the binding (weight 1): the session's next request goes
      // to B while A is a candidate, and the binding stays as it was
      now.addAndGet(40_000_000_000L);
      queues(r, B, C, A);
      assertThat(pinned(r, req)).isEqualTo(B);
      assertThat(s.binding("s-9")).isEqualTo(A);
      // 80 s after the last request routed to A the binding has ended, renewed by nothing since:
      // the next request binds the session where it goes
      now.addAndGet(40_000_000_000L);
      queues(r, B, C, A);
      assertThat(pinned(r, req)).isEqualTo(B);
      assertThat(s.binding("s-9")).isEqualTo(B);
    }
  }

  @Test
  void theFilterPinsHardThroughACookieTheProducerPublishes() {
    try (Router r = router("""
        - type: session-id-producer
          name: sid
          parameters: {cookieName: llm-d-session}
        - type: session-affinity-filter
          parameters:
            strategy: session_id
            sessionIdConfig:
              sources:
              - attribute: SessionIDDataKey
                producer: sid
        """, "  - pluginRef: session-affinity-filter\n")) {
      InferenceRequest req = request(Map.of("cookie", "theme=dark; llm-d-session=abc; x=1"));
      queues(r, C, A, B);
      assertThat(pinned(r, req)).isEqualTo(C);
      queues(r, A, B, C);
      // a filter, not a weight: C is kept alone however loaded it is
      assertThat(pinned(r, req)).isEqualTo(C);
      // another session, and a request without the cookie, are placed by load
      assertThat(pinned(r, request(Map.of("cookie", "llm-d-session=other")))).isEqualTo(A);
      assertThat(pinned(r, request(Map.of()))).isEqualTo(A);
      // without C among the candidates every candidate is kept, and the session moves
      RoutingDecision d = r.route(req, Set.of(A, B));
      assertThat(d.primary().id()).isEqualTo(A);
      d.onComplete(io.epp4j.api.Usage.NONE);
      assertThat(pinned(r, req)).isEqualTo(A);
    }
  }

  @Test
  void anAttributeUnderAnotherProducersNameIsNotRead() {
    // upstream keys the attribute by the producer's name: "sid" publishes nothing under
    // SessionIDDataKey/session-id-producer
    try (Router r = router("""
        - type: session-id-producer
          name: sid
          parameters: {headerName: X-Conv}
        - type: session-affinity-filter
          parameters:
            strategy: session_id
            sessionIdConfig:
              sources:
              - {attribute: SessionIDDataKey, producer: session-id-producer}
        """, "  - pluginRef: session-affinity-filter\n")) {
      InferenceRequest req = request(Map.of("x-conv", "c1"));
      queues(r, C, A, B);
      assertThat(pinned(r, req)).isEqualTo(C);
      queues(r, A, B, C);
      assertThat(pinned(r, req)).isEqualTo(A);
    }
  }

  @Test
  void theProfileNameWritesThatProfilesPick() {
    SessionAffinityScorer s = TestCandidates.joined(SessionAffinityScorer.fromParameters(
        io.epp4j.testkit.ContractFixtures.context("s"), io.epp4j.api.Parameters.of(Map.of("profileName", "prefill",
            "encodedEndpointHeaderConfig", Map.of("header", "x-session-token-prefill")))),
        TestCandidates.pool(3));
    Map<String, io.epp4j.api.ProfileResult> results = new java.util.LinkedHashMap<>();
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(3);
    results.put("decode", new io.epp4j.api.ProfileResult("decode", List.of(pool.get(0)
        .endpoint())));
    results.put("prefill", new io.epp4j.api.ProfileResult("prefill", List.of(pool.get(2)
        .endpoint())));
    RoutingDecision d = RoutingDecision.routed("decode", results);
    s.afterRouting(request(Map.of()), TestCandidates.state(), d);
    assertThat(d.responseHeaders()).containsExactly(Map.entry("x-session-token-prefill",
        token(pool.get(2).id())));
    RoutingDecision decodeOnly = RoutingDecision.routed("decode", Map.of("decode",
        results.get("decode")));
    s.afterRouting(request(Map.of()), TestCandidates.state(), decodeOnly);
    assertThat(decodeOnly.responseHeaders()).isEmpty();
  }

  @Test
  void aSessionIdSourceNameWrittenAsANumberIsRefusedByName() {
    // llm-d decodes the sources into string fields, which refuse a number or a boolean
    for (String source : new String[] {"{header: 5}", "{attribute: true}",
        "{attribute: SessionIDDataKey, producer: 7}"}) {
      assertThatThrownBy(() -> router("""
          - type: session-affinity-scorer
            parameters:
              strategy: session_id
              sessionIdConfig:
                sources: [%s]
          """.formatted(source), "")).as(source).isInstanceOf(ConfigException.class)
          .hasMessageContaining("'sessionIdConfig'").hasMessageContaining("sources[0]")
          .hasMessageContaining("must be a string");
    }
  }

  @Test
  void parametersThatCannotApplyAreRefusedByName() {
    assertThatThrownBy(() -> router("""
        - type: session-affinity-scorer
          parameters: {strategy: sticky}
        """, "")).isInstanceOf(ConfigException.class).hasMessageContaining("'strategy'")
        .hasMessageContaining("encoded_endpoint_header or session_id");
    assertThatThrownBy(() -> router("""
        - type: session-affinity-scorer
          parameters:
            strategy: session_id
            sessionIdConfig:
              sources: [{header: x-a, attribute: agent-identity}]
        """, "")).isInstanceOf(ConfigException.class).hasMessageContaining("'sessionIdConfig'")
        .hasMessageContaining("sources[0]").hasMessageContaining("exactly one of header or");
    assertThatThrownBy(() -> router("""
        - type: session-affinity-filter
          parameters: {strategy: session_id, ttlSeconds: 30}
        """, "")).isInstanceOf(ConfigException.class).hasMessageContaining("'ttlSeconds'")
        .hasMessageContaining("epp4j's own parameter");
    assertThatThrownBy(() -> router("""
        - type: session-affinity-scorer
          parameters:
            strategy: session_id
            sessionIdConfig: {evictionTtlSeconds: -1}
        """, "")).isInstanceOf(ConfigException.class)
        .hasMessageContaining("'evictionTtlSeconds' must be > 0");
    assertThatThrownBy(() -> router("- type: session-id-producer\n", ""))
        .isInstanceOf(ConfigException.class).hasMessageContaining("'headerName'");
    assertThatThrownBy(() -> router("""
        - type: session-id-producer
          parameters: {headerName: a, cookieName: b}
        """, "")).isInstanceOf(ConfigException.class).hasMessageContaining("'cookieName'")
        .hasMessageContaining("exactly one");
  }

  @Test
  void theOtherStrategysBlockIsNoticedNotRead() {
    try (Router r = router("""
        - type: session-affinity-scorer
          parameters:
            strategy: session_id
            encodedEndpointHeaderConfig: {header: x-t}
            sessionIdConfig: {evictionSweepSeconds: 5}
        """, "  - pluginRef: session-affinity-scorer\n")) {
      assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
          .contains("encodedEndpointHeaderConfig").contains("not used with strategy session_id"));
      assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
          .contains("evictionSweepSeconds"));
    }
  }
}
