package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Result;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import io.epp4j.core.Router;
import io.epp4j.testkit.ContractFixtures;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** llm-d's header-label-affinity-scorer: 1 where the endpoint's label equals the header. */
class HeaderLabelAffinityScorerTest {
  static final String SLICE = "disaggregatedset.x-k8s.io/slice";

  static final List<Candidate> POOL = List.of(
      TestCandidates.cand("10.0.0.1:8000", Map.of(SLICE, "0")),
      TestCandidates.cand("10.0.0.2:8000", Map.of(SLICE, "1")),
      TestCandidates.cand("10.0.0.3:8000", Map.of("zone", "1")),
      TestCandidates.cand("10.0.0.4:8000", Map.of(SLICE, "")));

  static Result<? extends io.epp4j.api.Plugin> create(Map<String, ?> params) {
    return new HeaderLabelAffinityScorer.Provider().create(
        ContractFixtures.context("slice-affinity"), Parameters.of(params));
  }

  static double[] score(Map<String, String> headers) {
    Scorer s = (Scorer) create(Map.of("headerName", "X-Disagg-Slice", "labelKey", SLICE))
        .value();
    double[] scores = new double[POOL.size()];
    s.score(InferenceRequest.builder().model("m").prompt("p").headers(headers).build(),
        TestCandidates.state(), POOL, scores);
    return scores;
  }

  @Test
  void scoresOneWhereTheLabelEqualsTheHeaderAndZeroElsewhere() {
    // the header name is matched whatever its case in the file
    assertThat(score(Map.of("x-disagg-slice", "1"))).containsExactly(0, 1, 0, 0);
    assertThat(score(Map.of("x-disagg-slice", "0"))).containsExactly(1, 0, 0, 0);
  }

  @Test
  void aMissingEmptyOrUnknownHeaderValueScoresZeroEverywhere() {
    assertThat(score(Map.of())).containsExactly(0, 0, 0, 0);
    // an empty header does not match the endpoint whose label is empty
    assertThat(score(Map.of("x-disagg-slice", ""))).containsExactly(0, 0, 0, 0);
    assertThat(score(Map.of("x-disagg-slice", "7"))).containsExactly(0, 0, 0, 0);
  }

  @Test
  void theValueIsComparedAsWrittenNeitherTrimmedNorCaseFolded() {
    assertThat(score(Map.of("x-disagg-slice", " 1"))).containsExactly(0, 0, 0, 0);
    Scorer zone = (Scorer) create(Map.of("headerName", "x-zone", "labelKey", "zone")).value();
    double[] scores = new double[1];
    zone.score(InferenceRequest.builder().model("m").prompt("p")
            .headers(Map.of("x-zone", "EU")).build(), TestCandidates.state(),
        List.of(TestCandidates.cand("10.0.0.5:8000", Map.of("zone", "eu"))), scores);
    assertThat(scores).containsExactly(0);
  }

  @Test
  void headerNameAndLabelKeyAreRequiredAndNamedWhenMissing() {
    assertThat(create(Map.of()).errors()).containsExactlyInAnyOrder(
        "parameter 'headerName' is required: the request header that holds the preferred label"
            + " value",
        "parameter 'labelKey' is required: the endpoint label compared with the header");
    assertThat(create(Map.of("headerName", "", "labelKey", SLICE)).errors())
        .singleElement().satisfies(e -> assertThat(e).startsWith("parameter 'headerName'"));
    assertThat(create(Map.of("headerName", "x-slice ", "labelKey", SLICE)).errors())
        .singleElement().satisfies(e -> assertThat(e).startsWith("parameter 'headerName'")
            .contains("whitespace"));
    assertThat(create(Map.of("headerName", "x", "labelKey", List.of("a", "b"))).errors())
        .singleElement().satisfies(e -> assertThat(e).startsWith("parameter 'labelKey'"));
  }

  @Test
  void theWeightDecidesHowStronglyTheSliceCompetesWithLoad() {
    String yaml = """
        plugins:
        - type: header-label-affinity-scorer
          name: slice-affinity
          parameters:
            headerName: x-disagg-slice
            labelKey: disaggregatedset.x-k8s.io/slice
        - type: queue-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: decode
          plugins:
          - pluginRef: slice-affinity
            weight: 3
          - pluginRef: queue-scorer
            weight: %s
          - pluginRef: max-score-picker
        """;
    List<Endpoint> pool = List.of(Endpoint.of("10.0.0.1", 8000, Map.of(SLICE, "0")),
        Endpoint.of("10.0.0.2", 8000, Map.of(SLICE, "1")));
    InferenceRequest slice1 = InferenceRequest.builder().model("m").prompt("p")
        .headers(Map.of("x-disagg-slice", "1")).build();
    for (String weight : List.of("1", "5")) {
      try (Router r = Router.builder().endpoints(pool).configYaml(yaml.formatted(weight), "t.yaml")
          .build()) {
        // slice 1's endpoint has the longer queue: the slice wins against a queue weight of 1,
        // not of 5
        r.updateMetrics("10.0.0.1:8000", EndpointMetrics.builder().waitingRequests(0).build());
        r.updateMetrics("10.0.0.2:8000", EndpointMetrics.builder().waitingRequests(10).build());
        RoutingDecision d = r.route(slice1);
        assertThat(d.primary().id()).as("weight %s", weight)
            .isEqualTo(weight.equals("1") ? "10.0.0.2:8000" : "10.0.0.1:8000");
        d.onComplete(io.epp4j.api.Usage.NONE);
      }
    }
  }
}
