package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** {@code p2p-source-producer}: llm-d's KV cache source header for peer-to-peer pulls. */
class P2pSourceProducerTest {
  static final String A = "10.0.0.1:8000";
  static final String B = "10.0.0.2:8000";
  static final String C = "10.0.0.3:8000";
  static final String PROMPT = "You are a careful assistant for the ACME support desk. "
      .repeat(80);
  final AtomicLong now = new AtomicLong(1_000_000_000L);

  /** The producer records where requests go; the profile places them by queue alone. */
  Router router(String p2pParameters) {
    return Router.builder().endpoints(List.of(Endpoint.parse(A), Endpoint.parse(B),
        Endpoint.parse(C))).ticker(now::get).randomSeed(5).configYaml("""
        plugins:
        - type: approx-prefix-cache-producer
        - type: p2p-source-producer
          parameters: %s
        - type: queue-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
        """.formatted(p2pParameters), "p2p.yaml").build();
  }

  void waiting(Router r, int a, int b, int c) {
    int[] q = {a, b, c};
    String[] ids = {A, B, C};
    for (int i = 0; i < 3; i++) {
      r.updateMetrics(ids[i], EndpointMetrics.builder().waitingRequests(q[i]).kvCacheUsage(0)
          .scrapedAtNanos(now.get()).build());
    }
  }

  static InferenceRequest request(String id, String prompt, Map<String, String> headers) {
    return InferenceRequest.builder().requestId(id).model("m").prompt(prompt).headers(headers)
        .build();
  }

  static RoutingDecision done(RoutingDecision d) {
    d.onComplete(Usage.NONE);
    return d;
  }

  @Test
  void aRequestComputedWhereThePrefixIsNotNamesTheEndpointThatHoldsIt() {
    try (Router r = router("{}")) {
      waiting(r, 0, 3, 6);
      RoutingDecision first = done(r.route(request("r1", PROMPT + "first question", Map.of())));
      assertThat(first.primary().id()).isEqualTo(A);
      assertThat(first.requestHeaders()).isEmpty(); // nobody held anything yet
      assertThat(first.removedRequestHeaders()).containsExactly(P2pSourceProducer.HEADER);
      waiting(r, 6, 0, 3);
      RoutingDecision second = done(r.route(request("r2", PROMPT + "second question",
          Map.of(P2pSourceProducer.HEADER, "10.9.9.9:1"))));
      assertThat(second.primary().id()).isEqualTo(B);
      assertThat(second.requestHeaders()).containsExactly(Map.entry(P2pSourceProducer.HEADER, A));
      // computed where it is held: no pull, and the client's own value is dropped
      waiting(r, 0, 3, 6);
      RoutingDecision third = done(r.route(request("r3", PROMPT + "third question",
          Map.of(P2pSourceProducer.HEADER, "10.9.9.9:1"))));
      assertThat(third.primary().id()).isEqualTo(A);
      assertThat(third.requestHeaders()).isEmpty();
      assertThat(third.removedRequestHeaders()).containsExactly(P2pSourceProducer.HEADER);
    }
  }

  @Test
  void afterAFallbackTheSourceIsChosenForTheEndpointThatComputesThePrompt() {
    try (Router r = Router.builder().endpoints(List.of(Endpoint.parse(A), Endpoint.parse(B),
        Endpoint.parse(C))).ticker(now::get).randomSeed(5).configYaml("""
        plugins:
        - type: approx-prefix-cache-producer
        - type: p2p-source-producer
        - type: queue-scorer
        - type: max-score-picker
          parameters: {maxNumOfEndpoints: 2}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
        """, "p2p.yaml").build()) {
      waiting(r, 0, 3, 6);
      done(r.route(request("r1", PROMPT + "first question", Map.of())));
      // B first, A behind it: A holds the prompt
      waiting(r, 3, 0, 6);
      RoutingDecision d = r.route(request("r2", PROMPT + "second question", Map.of()));
      assertThat(d.endpoints()).extracting(Endpoint::id).containsExactly(B, A);
      assertThat(d.requestHeaders()).containsExactly(Map.entry(P2pSourceProducer.HEADER, A));
      d.onFallback(d.endpoints().get(1)); // B could not be reached: A computes the prompt
      assertThat(d.requestHeaders()).isEmpty();
      assertThat(d.removedRequestHeaders()).containsExactly(P2pSourceProducer.HEADER);
      done(d);
      // C behind B: the source stays A after the fallback
      waiting(r, 6, 0, 3);
      RoutingDecision e = r.route(request("r3", PROMPT + "third question", Map.of()));
      assertThat(e.endpoints()).extracting(Endpoint::id).containsExactly(B, C);
      e.onFallback(e.endpoints().get(1));
      assertThat(e.requestHeaders()).containsExactly(Map.entry(P2pSourceProducer.HEADER, A));
      done(e);
    }
  }

  @Test
  void aDeltaBelowTheMinimumSetsNoHeader() {
    try (Router r = router("{minCachedTokenDelta: 1000000}")) {
      waiting(r, 0, 3, 6);
      done(r.route(request("r1", PROMPT + "first", Map.of())));
      waiting(r, 6, 0, 3);
      RoutingDecision d = done(r.route(request("r2", PROMPT + "second", Map.of())));
      assertThat(d.primary().id()).isEqualTo(B);
      assertThat(d.requestHeaders()).isEmpty();
    }
  }

  @Test
  void sourcesWithinOneBlockOfTheMostCachedShareThePullsByQueue() {
    // A holds 1,024 tokens, B one 64-token block fewer (in the band), C 512 (out of it)
    io.epp4j.api.Scorer producer = (request, state, candidates, scores) ->
        io.epp4j.api.PrefixHits.publish(state, io.epp4j.api.PrefixHits.of(
            new String[] {A, B, C}, new int[] {16, 16, 16}, new double[] {16, 15, 8}, 64));
    P2pSourceProducer p2p = new P2pSourceProducer(producer, 1, "prefill");
    List<io.epp4j.api.Candidate> pool = List.of(TestCandidates.withMetrics(A,
        TestCandidates.metrics(6, 0, 0)), TestCandidates.withMetrics(B,
        TestCandidates.metrics(3, 0, 0)), TestCandidates.withMetrics(C,
        TestCandidates.metrics(0, 0, 0)));
    int fromA = 0;
    int fromB = 0;
    for (int i = 0; i < 200; i++) {
      io.epp4j.api.CycleState state = TestCandidates.state();
      p2p.prepare(request("s" + i, "p", Map.of()), state, pool);
      String src = p2p.chosen(state);
      if (A.equals(src)) {
        fromA++;
      } else if (B.equals(src)) {
        fromB++;
      }
    }
    // weights 1/(1+6) and 1/(1+3): A is drawn with p = 0.36, never C; 200 draws of A below 45
    // or above 100 happen with probability under 1e-4
    assertThat(fromA + fromB).isEqualTo(200);
    assertThat(fromA).isBetween(45, 100);
  }

  @Test
  void theSpreadOfARequestIdIsFnv1aOverTwoToThe32() {
    // FNV-1a of "" is the offset basis 0x811c9dc5; of "a" 0xe40c292c
    assertThat(P2pSourceProducer.spread("")).isEqualTo(0x811c9dc5L / 4294967296.0);
    assertThat(P2pSourceProducer.spread("a")).isEqualTo(0xe40c292cL / 4294967296.0);
  }

  @Test
  void withoutAProducerOrWithABadDeltaTheFileIsRefusedByName() {
    assertThatThrownBy(() -> Router.builder().endpoints(List.of(Endpoint.parse(A)))
        .configYaml("plugins:\n- type: p2p-source-producer\n", "p.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("'prefixMatchInfoProducerName' is needed");
    assertThatThrownBy(() -> router("{minCachedTokenDelta: 0}"))
        .isInstanceOf(ConfigException.class).hasMessageContaining("'minCachedTokenDelta'");
  }
}
