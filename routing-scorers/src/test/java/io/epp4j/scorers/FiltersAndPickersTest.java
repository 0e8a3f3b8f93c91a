package io.epp4j.scorers;

import static io.epp4j.scorers.TestCandidates.cand;
import static io.epp4j.scorers.TestCandidates.inFlight;
import static io.epp4j.scorers.TestCandidates.metrics;
import static io.epp4j.scorers.TestCandidates.state;
import static io.epp4j.scorers.TestCandidates.withMetrics;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Picker;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

class FiltersAndPickersTest {
  static final InferenceRequest REQ = InferenceRequest.completion("m", "hello");

  @Test
  void labelSelector() {
    LabelSelectorFilter f = new LabelSelectorFilter(Map.of("pool", "a"),
        List.of(new LabelSelectorFilter.Requirement("zone", "In", Set.of("z1", "z2")),
            new LabelSelectorFilter.Requirement("draining", "DoesNotExist", Set.of())));
    Candidate ok = cand("a:1", Map.of("pool", "a", "zone", "z1"));
    Candidate wrongPool = cand("b:1", Map.of("pool", "b", "zone", "z1"));
    Candidate wrongZone = cand("c:1", Map.of("pool", "a", "zone", "z9"));
    Candidate draining = cand("d:1", Map.of("pool", "a", "zone", "z2", "draining", "1"));
    assertThat(f.filter(REQ, state(), List.of(ok, wrongPool, wrongZone, draining))).containsExactly(ok);
    List<Candidate> all = List.of(ok);
    assertThat(f.filter(REQ, state(), all)).isSameAs(all);
    assertThat(f.filter(REQ, state(), List.of())).isEmpty();
    assertThat(new LabelSelectorFilter.Requirement("k", "NotIn", Set.of("v")).matches(Endpoint.parse("x:1"))).isTrue();
    assertThat(new LabelSelectorFilter.Requirement("k", "Exists", Set.of()).matches(Endpoint.parse("x:1"))).isFalse();
  }

  /**
   * A label value is a string: a list, an object or nothing (YAML {@code app:}) used to become
   * its text ("[a, b]", "null"), a selector that silently matched no endpoint.
   */
  @Test
  void labelSelectorRefusesValuesThatAreNotLabelValues() {
    Map<String, Object> noValue = new HashMap<>();
    noValue.put("app", null);
    Map<String, Map<String, ?>> bad = Map.of(
        "matchLabels.app", Map.of("matchLabels", noValue),
        "matchLabels.zone", Map.of("matchLabels", Map.of("zone", List.of("z1", "z2"))),
        "matchExpressions[0].values", Map.of("matchExpressions", List.of(Map.of("key", "zone",
            "operator", "In", "values", List.of("z1", Map.of("z2", "z3"))))));
    bad.forEach((field, params) -> {
      var r = new LabelSelectorFilter.Provider().create(
          io.epp4j.testkit.ContractFixtures.context("selector"), io.epp4j.api.Parameters.of(params));
      assertThat(r.isOk()).as("%s accepted", params).isFalse();
      assertThat(r.errors()).as("errors for %s", params)
          .anyMatch(e -> e.contains("parameter '" + field + "'"));
    });
    var ok = new LabelSelectorFilter.Provider().create(
        io.epp4j.testkit.ContractFixtures.context("selector"), io.epp4j.api.Parameters.of(
            Map.of("matchLabels", Map.of("version", "2", "canary", "false"))));
    assertThat(ok.errors()).isEmpty();
    Candidate labelled = cand("a:1", Map.of("version", "2", "canary", "false"));
    assertThat(((LabelSelectorFilter) ok.value()).filter(REQ, state(), List.of(labelled)))
        .containsExactly(labelled);
  }

  @Test
  void roleFilters() {
    Candidate p = cand("p:1", Map.of(Endpoint.ROLE_LABEL, "prefill"));
    Candidate d = cand("d:1", Map.of(Endpoint.ROLE_LABEL, "decode"));
    Candidate both = cand("b:1", Map.of(Endpoint.ROLE_LABEL, "both"));
    Candidate plain = cand("n:1");
    List<Candidate> all = List.of(p, d, both, plain);
    var prefill = new PrefillFilter();
    var decode = new DecodeFilter();
    assertThat(prefill.filter(REQ, state(), all)).containsExactly(p, both);
    assertThat(decode.filter(REQ, state(), all)).containsExactly(d, both, plain);
  }

  /**
   * llm-d's role filters (since 0.7) know the combined roles: an endpoint labelled
   * {@code both}, {@code prefill-decode} or {@code encode-prefill-decode} serves either phase,
   * {@code encode-prefill} prefill only, {@code encode} neither. A P/D pool of {@code both}
   * endpoints used to get no prefill pick at all.
   */
  @Test
  void roleFiltersAcceptTheCombinedRolesUpstreamDefines() {
    Map<String, Candidate> byRole = new java.util.LinkedHashMap<>();
    for (String role : List.of("prefill", "decode", "both", "prefill-decode", "encode-prefill",
        "encode-prefill-decode", "encode", "other")) {
      byRole.put(role, cand(role + ":1", Map.of(Endpoint.ROLE_LABEL, role)));
    }
    Candidate plain = cand("plain:1");
    List<Candidate> all = new java.util.ArrayList<>(byRole.values());
    all.add(plain);
    assertThat(new PrefillFilter().filter(REQ, state(), all)).containsExactly(
        byRole.get("prefill"), byRole.get("both"), byRole.get("prefill-decode"),
        byRole.get("encode-prefill"), byRole.get("encode-prefill-decode"));
    assertThat(new DecodeFilter().filter(REQ, state(), all)).containsExactly(
        byRole.get("decode"), byRole.get("both"), byRole.get("prefill-decode"),
        byRole.get("encode-prefill-decode"), plain);
  }

  @Test
  void utilizationFilterDropsSaturatedButFailsOpen() {
    var f = new UtilizationFilter("utilization-filter", 10, 0.9, new Staleness(2000));
    Candidate busy = withMetrics("a:1", metrics(20, 0, 0.2));
    Candidate full = withMetrics("b:1", metrics(0, 0, 0.95));
    Candidate fine = withMetrics("c:1", metrics(2, 0, 0.5));
    Candidate unknown = cand("d:1");
    assertThat(f.filter(REQ, state(), List.of(busy, full, fine, unknown))).containsExactly(fine, unknown);
    List<Candidate> allBad = List.of(busy, full);
    assertThat(f.filter(REQ, state(), allBad)).isSameAs(allBad);
    // stale saturation is not trusted: ten seconds later the busy endpoint is kept
    assertThat(f.filter(REQ, state(10_000_000_000L, 1), List.of(busy, fine))).containsExactly(busy, fine);
  }

  static Map<String, Integer> histogram(Picker p, List<Candidate> c, double[] scores, int runs) {
    Map<String, Integer> h = new HashMap<>();
    for (int i = 0; i < runs; i++) {
      h.merge(p.pick(REQ, state(0, i), c, scores).get(0).id(), 1, Integer::sum);
    }
    return h;
  }

  @Test
  void randomPickerIsUniformAndReturnsDistinctFallbacks() {
    List<Candidate> c = TestCandidates.pool(4);
    Map<String, Integer> h = histogram(new RandomPicker(1), c, new double[4], 4000);
    assertThat(h).hasSize(4);
    assertThat(h.values()).allMatch(v -> v > 800 && v < 1200);
    assertThat(new RandomPicker(3).pick(REQ, state(), c, new double[4]))
        .hasSize(3).doesNotHaveDuplicates();
    assertThat(new RandomPicker(9).pick(REQ, state(), c, new double[4])).hasSize(4);
    assertThat(new RandomPicker(1).pick(REQ, state(), List.of(), new double[0])).isEmpty();
  }

  @Test
  void weightedRandomFollowsScores() {
    List<Candidate> c = TestCandidates.pool(3);
    double[] scores = {3.0, 1.0, 0.0};
    Map<String, Integer> h = histogram(new WeightedRandomPicker(1), c, scores, 8000);
    assertThat(h.get(c.get(0).id()) / 8000.0).isBetween(0.72, 0.78);
    assertThat(h.get(c.get(1).id()) / 8000.0).isBetween(0.22, 0.28);
    assertThat(h).doesNotContainKey(c.get(2).id());
    // zero score comes only after every positive one; all zero is uniform
    assertThat(new WeightedRandomPicker(3).pick(REQ, state(), c, scores).get(2))
        .isSameAs(c.get(2));
    Map<String, Integer> zeros = histogram(new WeightedRandomPicker(1), c, new double[3], 3000);
    assertThat(zeros).hasSize(3);
  }

  /**
   * A scorer with a negative weight can make totals negative: as upstream's picker, a total at or
   * below 0 is never drawn while one is positive, and none positive is uniform.
   */
  @Test
  void weightedRandomTreatsNegativeTotalsAsZero() {
    List<Candidate> c = TestCandidates.pool(3);
    Map<String, Integer> h =
        histogram(new WeightedRandomPicker(1), c, new double[] {-2.0, 0.5, -0.1}, 2000);
    assertThat(h).containsOnlyKeys(c.get(1).id());
    Map<String, Integer> negatives =
        histogram(new WeightedRandomPicker(1), c, new double[] {-2.0, -0.5, -0.1}, 3000);
    assertThat(negatives).hasSize(3);
    assertThat(negatives.values()).allSatisfy(n -> assertThat(n).isBetween(800, 1200));
  }

  @Test
  void roundRobinCycles() {
    List<Candidate> c = TestCandidates.pool(3);
    Picker p = new RoundRobinPicker(1);
    StringBuilder order = new StringBuilder();
    for (int i = 0; i < 6; i++) {
      order.append(c.indexOf(p.pick(REQ, state(), c, new double[3]).get(0)));
    }
    assertThat(order.toString()).isEqualTo("012012");
    assertThat(new RoundRobinPicker(2).pick(REQ, state(), c, new double[3]))
        .containsExactly(c.get(0), c.get(1));
  }

  @Test
  void powerOfTwoPrefersFewerInFlight() {
    Candidate idle = inFlight("a:1", 0, 0);
    Candidate busy = inFlight("b:1", 5, 0);
    Picker p = new PowerOfTwoPicker(2);
    for (int i = 0; i < 20; i++) {
      assertThat(p.pick(REQ, state(0, i), List.of(busy, idle), new double[2])).containsExactly(idle, busy);
    }
    // with many endpoints the busiest can only win when drawn against an equally busy one
    List<Candidate> many = List.of(inFlight("a:1", 9, 0), inFlight("b:1", 0, 0),
        inFlight("c:1", 1, 0), inFlight("d:1", 2, 0));
    Map<String, Integer> h = histogram(new PowerOfTwoPicker(1), many, new double[4], 2000);
    assertThat(h).doesNotContainKey("a:1");
    assertThat(new PowerOfTwoPicker(1).pick(REQ, state(), List.of(idle), new double[1]))
        .containsExactly(idle);
  }
}
