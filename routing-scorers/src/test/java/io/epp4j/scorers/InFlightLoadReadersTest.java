package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * {@code token-load-scorer} and {@code active-request-scorer} beside an
 * {@code inflight-load-producer}: they read the producer, as current llm-d's scorers do.
 */
class InFlightLoadReadersTest {
  static InferenceRequest tokens(String id, int n, int maxTokens) {
    return InferenceRequest.builder().requestId(id).model("m").tokenIds(new int[n])
        .maxTokens(maxTokens).build();
  }

  @Test
  void tokenLoadIsWhatIsInFlightPlusWhatTheRequestWouldAddThere() {
    InFlightLoadProducer load = new InFlightLoadProducer(false, 1.5, -1, () -> 0L,
        60_000_000_000L);
    TokenLoadScorer scorer = new TokenLoadScorer(4000, load);
    List<Candidate> pool = TestCandidates.pool(2);
    String a = pool.get(0).id();
    String b = pool.get(1).id();
    InferenceRequest first = tokens("r1", 1000, 50);
    load.afterRouting(first, TestCandidates.state(), AffinityScorersTest.decision(pool.get(0)));
    // the second request's prefix: a holds 600 of its 1,000 tokens
    CycleState state = TestCandidates.state();
    PrefixHits.publish(state, PrefixHits.of(new String[] {a, b}, new int[] {10, 10},
        new double[] {6, 0}, 100));
    double[] scores = new double[2];
    scorer.score(tokens("r2", 1000, 50), state, pool, scores);
    // a: 1,000 in flight + 400 uncached; b: 1,000 uncached; 1 - t / 4,000
    assertThat(scores[0]).isCloseTo(1 - 1400 / 4000.0, within(1e-12));
    assertThat(scores[1]).isCloseTo(1 - 1000 / 4000.0, within(1e-12));
    // the producer lets the prompt go at the first token; max_tokens never counted
    load.onFirstToken(first, Endpoint.parse(a));
    scorer.score(tokens("r2", 1000, 50), state, pool, scores);
    assertThat(scores[0]).isCloseTo(1 - 400 / 4000.0, within(1e-12));
  }

  static InferenceRequest distinct(String id, int n, int seed) {
    int[] ids = new int[n];
    for (int i = 0; i < n; i++) {
      ids[i] = seed * 1_000_003 + i;
    }
    return InferenceRequest.builder().requestId(id).model("m").tokenIds(ids).maxTokens(10)
        .build();
  }

  @Test
  void aDisaggregatedRequestCountsOnItsPrefillEndpointUntilTheFirstToken() {
    // llm-d's P/D guide in shape: the prefill profile takes the least token load
    String yaml = """
        plugins:
        - type: always-disagg-pd-decider
        - type: disagg-profile-handler
          parameters: {deciders: {prefill: always-disagg-pd-decider}}
        - type: prefill-filter
        - type: decode-filter
        - type: inflight-load-producer
        - type: token-load-scorer
        - type: active-request-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: prefill
          plugins: [{pluginRef: prefill-filter}, {pluginRef: token-load-scorer},
            {pluginRef: max-score-picker}]
        - name: decode
          plugins: [{pluginRef: decode-filter}, {pluginRef: active-request-scorer},
            {pluginRef: max-score-picker}]
        """;
    List<Endpoint> pool = List.of(Endpoint.parseWithRole("10.0.1.1:8000=prefill"),
        Endpoint.parseWithRole("10.0.1.2:8000=prefill"),
        Endpoint.parseWithRole("10.0.2.1:8000=decode"));
    try (Router r = Router.builder().endpoints(pool).configYaml(yaml, "pd.yaml").randomSeed(5)
        .build()) {
      InFlightLoadProducer load =
          (InFlightLoadProducer) r.config().plugins().get("inflight-load-producer");
      RoutingDecision first = r.route(distinct("a", 4000, 1));
      Endpoint prefill = PdProfileHandler.prefillEndpoint(first);
      assertThat(prefill).isNotNull();
      String decode = first.primary().id();
      // the prompt is computed on the prefill endpoint: it holds the request until then
      assertThat(load.requests(prefill.id())).isEqualTo(1);
      assertThat(load.tokens(prefill.id())).isEqualTo(4000);
      assertThat(load.requests(decode)).isEqualTo(1);
      // so the next prompt's prefill goes to the idle prefill endpoint
      RoutingDecision second = r.route(distinct("b", 4000, 2));
      assertThat(PdProfileHandler.prefillEndpoint(second)).isNotNull()
          .isNotEqualTo(prefill);
      // the first token ends the prefill; the decode endpoint holds the request until its end
      first.onFirstToken();
      assertThat(load.requests(prefill.id())).isZero();
      assertThat(load.tokens(prefill.id())).isZero();
      assertThat(load.requests(decode)).isEqualTo(2);
      first.onComplete(Usage.NONE);
      second.onFailure(new java.io.IOException("reset"));
      for (Endpoint e : pool) {
        assertThat(load.requests(e.id())).as(e.id()).isZero();
        assertThat(load.tokens(e.id())).as(e.id()).isZero();
      }
    }
  }

  @Test
  void throughTheRouterTheScorersFindTheFilesProducer() {
    String yaml = """
        plugins:
        - type: inflight-load-producer
        - type: token-load-scorer
          parameters: {queueThresholdTokens: 1000000}
        - type: active-request-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: token-load-scorer}, {pluginRef: max-score-picker}]
        """;
    try (Router r = Router.builder().endpoints(List.of(Endpoint.parse("10.0.0.1:8000"),
        Endpoint.parse("10.0.0.2:8000"), Endpoint.parse("10.0.0.3:8000")))
        .configYaml(yaml, "load.yaml").randomSeed(11).build()) {
      // a long generation: the router's own count keeps its max_tokens until it ends, the
      // producer lets its prompt go at the first token
      RoutingDecision longOne = r.route(tokens("long", 1000, 500_000));
      longOne.onFirstToken();
      String busy = longOne.primary().id();
      int there = 0;
      for (int i = 0; i < 30; i++) {
        RoutingDecision d = r.route(tokens("q" + i, 1000, 10));
        if (d.primary().id().equals(busy)) {
          there++;
        }
        d.onComplete(Usage.NONE);
      }
      // every endpoint scores alike by the producer's count: the ties are drawn at random
      assertThat(there).isBetween(1, 29);
      Map<String, io.epp4j.api.Plugin> plugins = r.config().plugins();
      ActiveRequestScorer active = (ActiveRequestScorer) plugins.get("active-request-scorer");
      double[] scores = new double[3];
      active.score(tokens("x", 10, 1), TestCandidates.state(), r.endpoints(), scores);
      // the producer counts the long request on its endpoint until it ends
      for (int i = 0; i < 3; i++) {
        assertThat(scores[i]).isEqualTo(r.endpoints().get(i).id().equals(busy) ? 0.0 : 1.0);
      }
      longOne.onComplete(Usage.NONE);
    }
  }
}
