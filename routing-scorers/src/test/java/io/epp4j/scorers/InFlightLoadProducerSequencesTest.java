package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * {@code inflight-load-producer}'s output estimate for a request with {@code n} sequences: the
 * engine generates each of them, so one sequence's estimate counts once per sequence, as the
 * router's own in-flight count and {@code token-cost-picker} count {@code max_tokens}.
 */
class InFlightLoadProducerSequencesTest {
  private static InferenceRequest request(String id, int maxTokens, int n) {
    return InferenceRequest.builder().requestId(id).model("m").tokenIds(new int[100])
        .maxTokens(maxTokens).sequences(n).build();
  }

  @Test
  void theOutputEstimateCountsOncePerSequence() {
    InFlightLoadProducer load = new InFlightLoadProducer(true, 1.5, -1, () -> 0L,
        60_000_000_000L);
    List<Candidate> pool = TestCandidates.pool(1);
    String a = pool.get(0).id();
    // 100 prompt tokens; each of 4 sequences: min(150, max_tokens 50)
    InferenceRequest capped = request("capped", 50, 4);
    load.afterRouting(capped, TestCandidates.state(), AffinityScorersTest.decision(pool.get(0)));
    assertThat(load.tokens(a)).isEqualTo(100 + 4 * 50);
    // without max_tokens, each of 3 sequences: 150
    InferenceRequest open = request("open", 0, 3);
    load.afterRouting(open, TestCandidates.state(), AffinityScorersTest.decision(pool.get(0)));
    assertThat(load.tokens(a)).isEqualTo(100 + 4 * 50 + 100 + 3 * 150);
    // the end takes off all of it
    load.onComplete(capped, Endpoint.parse(a), Usage.NONE);
    load.onComplete(open, Endpoint.parse(a), Usage.NONE);
    assertThat(load.tokens(a)).isZero();
    assertThat(load.requests(a)).isZero();
  }

  @Test
  void maxEstimatedOutputTokensCapsTheWholeRequestsEstimate() {
    InFlightLoadProducer load = new InFlightLoadProducer(true, 1.5, 500, () -> 0L,
        60_000_000_000L);
    List<Candidate> pool = TestCandidates.pool(1);
    load.afterRouting(request("r", 0, 8), TestCandidates.state(),
        AffinityScorersTest.decision(pool.get(0)));
    assertThat(load.tokens(pool.get(0).id())).isEqualTo(100 + 500);
  }

  @Test
  void aBodysNIsReadThroughTheRouter() {
    String yaml = """
        plugins:
        - type: inflight-load-producer
          parameters: {addEstimatedOutputTokens: true}
        - type: active-request-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: active-request-scorer}, {pluginRef: max-score-picker}]
        """;
    Endpoint e = Endpoint.parse("10.0.0.1:8000");
    try (Router r = Router.builder().endpoints(List.of(e)).configYaml(yaml, "load.yaml")
        .randomSeed(1).build()) {
      InFlightLoadProducer load =
          (InFlightLoadProducer) r.config().plugins().get("inflight-load-producer");
      RoutingDecision d = r.route("/v1/completions", Map.of(),
          "{\"model\":\"m\",\"prompt\":[1,2,3,4],\"max_tokens\":10,\"n\":3}"
              .getBytes(StandardCharsets.UTF_8));
      assertThat(d.primary()).isEqualTo(e);
      // 4 prompt tokens; each of 3 sequences: min(6, 10)
      assertThat(load.tokens(e.id())).isEqualTo(4 + 3 * 6);
      d.onFirstToken();
      assertThat(load.tokens(e.id())).isEqualTo(3 * 6);
      d.onComplete(Usage.NONE);
      assertThat(load.tokens(e.id())).isZero();
    }
  }
}
