package io.epp4j.scorers;

import static io.epp4j.scorers.TestCandidates.cand;
import static io.epp4j.scorers.TestCandidates.inFlight;
import static io.epp4j.scorers.TestCandidates.metrics;
import static io.epp4j.scorers.TestCandidates.withMetrics;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Scorer;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

class LoadScorersTest {
  static final long SECOND = 1_000_000_000L;
  static final InferenceRequest REQ = InferenceRequest.completion("m", "hello");
  static final Staleness TWO_SECONDS = new Staleness(2000);

  static double[] score(Scorer s, List<Candidate> c, long nowNanos) {
    double[] out = new double[c.size()];
    s.score(REQ, TestCandidates.state(nowNanos, 1), c, out);
    return out;
  }

  static double[] score(Scorer s, InferenceRequest r, List<Candidate> c) {
    double[] out = new double[c.size()];
    s.score(r, TestCandidates.state(0, 1), c, out);
    return out;
  }

  @Test
  void queueScorerIsMinMaxOverWaitingRequests() {
    Scorer s = new QueueScorer(TWO_SECONDS);
    List<Candidate> c = List.of(withMetrics("a:1", metrics(0, 9, 0)),
        withMetrics("b:1", metrics(5, 0, 0)), withMetrics("c:1", metrics(10, 0, 0)));
    assertThat(score(s, c, 0)).containsExactly(1.0, 0.5, 0.0);
    Scorer running = new RunningRequestsSizeScorer(TWO_SECONDS);
    assertThat(score(running, c, 0)).containsExactly(0.0, 1.0, 1.0);
  }

  @Test
  void tiesAndEmptyCandidates() {
    Scorer s = new QueueScorer(TWO_SECONDS);
    List<Candidate> c = List.of(withMetrics("a:1", metrics(3, 0, 0)), withMetrics("b:1", metrics(3, 0, 0)));
    assertThat(score(s, c, 0)).containsExactly(1.0, 1.0);
    assertThat(score(s, List.of(), 0)).isEmpty();
    assertThat(score(new KvCacheUtilizationScorer(TWO_SECONDS), List.of(), 0)).isEmpty();
  }

  @Test
  void missingMetricsScoreNeutralAndStaleCannotLookBetterThanNeutral() {
    Scorer s = new QueueScorer(TWO_SECONDS);
    EndpointMetrics oldIdle = EndpointMetrics.builder().waitingRequests(0).scrapedAtNanos(0).build();
    EndpointMetrics oldBusy = EndpointMetrics.builder().waitingRequests(40).scrapedAtNanos(0).build();
    EndpointMetrics fresh = EndpointMetrics.builder().waitingRequests(4).scrapedAtNanos(9 * SECOND).build();
    EndpointMetrics fresh2 = EndpointMetrics.builder().waitingRequests(8).scrapedAtNanos(9 * SECOND).build();
    List<Candidate> c = List.of(cand("new:1"), withMetrics("idle:1", oldIdle),
        withMetrics("busy:1", oldBusy), withMetrics("f1:1", fresh), withMetrics("f2:1", fresh2));
    double[] at10s = score(s, c, 10 * SECOND);
    assertThat(at10s).containsExactly(0.5, 0.5, 0.0, 1.0, 0.0);
    // with the check off (upstream behaviour) the stale idle endpoint would look best
    double[] noCheck = score(new QueueScorer(new Staleness(0)),
        c.subList(1, 5), 10 * SECOND);
    assertThat(noCheck[0]).isEqualTo(1.0);
  }

  /** A very large limit means "never stale", as 0 does; it must not wrap into "always stale". */
  @Test
  void aHugeStalenessLimitKeepsFreshMetricsUsable() {
    var r = new QueueScorer.Provider().create(io.epp4j.testkit.ContractFixtures.context("q"),
        io.epp4j.api.Parameters.of(java.util.Map.of("metricsStalenessMillis", Long.MAX_VALUE)));
    assertThat(r.errors()).isEmpty();
    List<Candidate> c = List.of(withMetrics("a:1", metrics(0, 0, 0)),
        withMetrics("b:1", metrics(10, 0, 0)));
    assertThat(score((Scorer) r.value(), c, 10 * SECOND)).containsExactly(1.0, 0.0);
    assertThat(score(new QueueScorer(new Staleness(Long.MAX_VALUE / 1000)), c, 10 * SECOND))
        .containsExactly(1.0, 0.0);
  }

  @Test
  void kvCacheUtilization() {
    Scorer s = new KvCacheUtilizationScorer(TWO_SECONDS);
    List<Candidate> c = List.of(withMetrics("a:1", metrics(0, 0, 0.25)), cand("b:1"),
        withMetrics("c:1", metrics(0, 0, 0.9)));
    assertThat(score(s, c, 0)).containsExactly(new double[] {0.75, 0.5, 0.1}, org.assertj.core.data.Offset.offset(1e-9));
    // ten seconds later all are stale: 0.75 is capped at 0.5, 0.1 stays
    assertThat(score(s, c, 10 * SECOND)).containsExactly(new double[] {0.5, 0.5, 0.1}, org.assertj.core.data.Offset.offset(1e-9));
  }

  @Test
  void loadAware() {
    Scorer s = new LoadAwareScorer(128, TWO_SECONDS);
    List<Candidate> c = List.of(withMetrics("a:1", metrics(0, 0, 0)),
        withMetrics("b:1", metrics(64, 0, 0)), withMetrics("c:1", metrics(500, 0, 0)), cand("d:1"));
    assertThat(score(s, c, 0)).containsExactly(0.5, 0.25, 0.0, 0.25);
  }

  /**
   * llm-d's NewLoadAware keeps its default threshold, 128, for one that is not positive, so a
   * file with {@code threshold: 0} loads there; epp4j refused it and the router did not build.
   */
  @Test
  void loadAwareThresholdNotPositiveMeansTheDefaultWithANotice() {
    List<Candidate> c = List.of(withMetrics("a:1", metrics(0, 0, 0)),
        withMetrics("b:1", metrics(64, 0, 0)), withMetrics("c:1", metrics(500, 0, 0)));
    for (String name : new String[] {"threshold", "queueThreshold"}) {
      for (int bad : new int[] {0, -3}) {
        var params = io.epp4j.api.Parameters.of(java.util.Map.of(name, bad));
        var created = new LoadAwareScorer.Provider().create(
            io.epp4j.testkit.ContractFixtures.context("load"), params);
        assertThat(created.errors()).as("%s %s", name, bad).isEmpty();
        assertThat(params.notices()).as("%s %s", name, bad).singleElement().asString()
            .contains(name).contains(String.valueOf(bad)).contains("128");
        assertThat(score((Scorer) created.value(), c, 0)).as("%s %s", name, bad)
            .containsExactly(0.5, 0.25, 0.0);
      }
    }
  }

  @Test
  void activeRequestAndTokenLoadUseRouterCounters() {
    List<Candidate> c = List.of(inFlight("a:1", 0, 0), inFlight("b:1", 2, 500), inFlight("c:1", 8, 1000));
    assertThat(score(new ActiveRequestScorer(0), c, 0)).containsExactly(1.0, 0.75, 0.0);
    assertThat(score(new ActiveRequestScorer(2), c, 0)).containsExactly(1.0, 1.0, 0.0);
    assertThat(score(new TokenLoadScorer(2000), c, 0)).containsExactly(1.0, 0.75, 0.5);
    List<Candidate> idle = List.of(inFlight("a:1", 0, 0), inFlight("b:1", 0, 0));
    assertThat(score(new TokenLoadScorer(), idle, 0)).containsExactly(1.0, 1.0);
  }

  /**
   * llm-d's {@code maxBusyScore} caps what a busy endpoint (above {@code idleThreshold}) can
   * score, so idle endpoints stand out: it used to be read as an unknown parameter and ignored.
   */
  @Test
  void activeRequestMaxBusyScoreScalesBusyEndpointsOnly() {
    var created = new ActiveRequestScorer.Provider().create(
        io.epp4j.testkit.ContractFixtures.context("active"),
        io.epp4j.api.Parameters.of(java.util.Map.of("idleThreshold", 1, "maxBusyScore", 0.5)));
    assertThat(created.errors()).isEmpty();
    Scorer s = (Scorer) created.value();
    List<Candidate> c = List.of(inFlight("a:1", 1, 0), inFlight("b:1", 2, 0), inFlight("c:1", 8, 0));
    // idle stays 1.0; busy: (8 - 2) / 8 × 0.5 and (8 - 8) / 8 × 0.5
    assertThat(score(s, c, 0)).containsExactly(1.0, 0.375, 0.0);
  }

  /**
   * llm-d's NewActiveRequest keeps its defaults for a negative {@code idleThreshold} and a
   * {@code maxBusyScore} outside [0, 1], so such a file loads there. epp4j refused both, and the
   * router did not build; they now load with the defaults and a notice naming the parameter.
   */
  @Test
  void activeRequestValuesOutOfRangeMeanTheDefaultsWithANotice() {
    List<Candidate> c = List.of(inFlight("a:1", 0, 0), inFlight("b:1", 2, 0), inFlight("c:1", 8, 0));
    for (double bad : new double[] {-0.1, 1.5}) {
      var params = io.epp4j.api.Parameters.of(java.util.Map.of("idleThreshold", -3,
          "maxBusyScore", bad));
      var created = new ActiveRequestScorer.Provider().create(
          io.epp4j.testkit.ContractFixtures.context("active"), params);
      assertThat(created.errors()).as("maxBusyScore %s", bad).isEmpty();
      assertThat(params.notices()).as("maxBusyScore %s", bad).hasSize(2)
          .anyMatch(n -> n.contains("idleThreshold") && n.contains("-3"))
          .anyMatch(n -> n.contains("maxBusyScore") && n.contains(String.valueOf(bad)));
      // the defaults: idle at 0 in flight, busy (8 - count) / 8 × 1.0
      assertThat(score((Scorer) created.value(), c, 0)).as("maxBusyScore %s", bad)
          .containsExactly(1.0, 0.75, 0.0);
    }
  }

  @Test
  void loraAffinity() {
    Scorer s = new LoraAffinityScorer(TWO_SECONDS);
    EndpointMetrics active = EndpointMetrics.builder().runningLoraAdapters(Set.of("x"))
        .maxLoras(1).scrapedAtNanos(0).build();
    EndpointMetrics free = EndpointMetrics.builder().runningLoraAdapters(Set.of("y"))
        .maxLoras(2).scrapedAtNanos(0).build();
    EndpointMetrics waiting = EndpointMetrics.builder().runningLoraAdapters(Set.of("y"))
        .waitingLoraAdapters(Set.of("x")).maxLoras(2).scrapedAtNanos(0).build();
    EndpointMetrics full = EndpointMetrics.builder().runningLoraAdapters(Set.of("y", "z"))
        .maxLoras(2).scrapedAtNanos(0).build();
    List<Candidate> c = List.of(withMetrics("a:1", active), withMetrics("b:1", free),
        withMetrics("c:1", waiting), withMetrics("d:1", full), cand("e:1"));
    InferenceRequest lora = InferenceRequest.builder().model("m").prompt("p").loraAdapter("x").build();
    assertThat(score(s, lora, c)).containsExactly(1.0, 0.8, 0.6, 0.0, 0.5);
  }

  /**
   * vLLM lists an adapter among the running adapters while some of its requests run and among
   * the waiting ones while others wait: it takes one slot, not two. Counted twice, an endpoint
   * with a free slot looked full, and a request for another adapter scored 0 there (the
   * filter dropped it from the endpoints with room) instead of 0.8.
   */
  @Test
  void anAdapterBothRunningAndWaitingTakesOneSlot() {
    EndpointMetrics busyA = EndpointMetrics.builder().runningLoraAdapters(Set.of("a"))
        .waitingLoraAdapters(Set.of("a")).maxLoras(2).scrapedAtNanos(0).build();
    EndpointMetrics full = EndpointMetrics.builder().runningLoraAdapters(Set.of("a"))
        .waitingLoraAdapters(Set.of("a", "c")).maxLoras(2).scrapedAtNanos(0).build();
    List<Candidate> c = List.of(withMetrics("a:1", busyA), withMetrics("b:1", full));
    InferenceRequest other = InferenceRequest.builder().model("m").prompt("p").loraAdapter("b")
        .build();
    assertThat(score(new LoraAffinityScorer(TWO_SECONDS), other, c)).containsExactly(0.8, 0.0);
    // the filter of GIE 0.5: the endpoint with a free slot is the one with room for "b"
    LoraAffinityFilter f = new LoraAffinityFilter(0.999);
    assertThat(f.filter(other, TestCandidates.state(0, 1), c)).containsExactly(c.get(0));
  }

  /**
   * A client names an adapter in the request's {@code model} field, as vLLM expects; upstream's
   * scorer looks up the target model. The request parser sets no separate adapter, so the scorer
   * used to see none and gave 1.0 everywhere: it never steered a parsed request.
   */
  @Test
  void loraAffinityReadsTheAdapterFromTheTargetModel() {
    Scorer s = new LoraAffinityScorer(TWO_SECONDS);
    EndpointMetrics running = EndpointMetrics.builder().runningLoraAdapters(Set.of("sql"))
        .maxLoras(1).scrapedAtNanos(0).build();
    EndpointMetrics free = EndpointMetrics.builder().runningLoraAdapters(Set.of("chat"))
        .maxLoras(2).scrapedAtNanos(0).build();
    EndpointMetrics full = EndpointMetrics.builder().runningLoraAdapters(Set.of("chat"))
        .maxLoras(1).scrapedAtNanos(0).build();
    List<Candidate> c = List.of(withMetrics("a:1", running), withMetrics("b:1", free),
        withMetrics("c:1", full));
    InferenceRequest byModel = InferenceRequest.completion("sql", "select");
    assertThat(score(s, byModel, c)).containsExactly(1.0, 0.8, 0.0);
    // an explicit adapter still wins over the model name
    InferenceRequest explicit = InferenceRequest.builder().model("base").prompt("p")
        .loraAdapter("chat").build();
    assertThat(score(s, explicit, c)).containsExactly(0.0, 1.0, 1.0);
  }

  @Test
  void scorersAreSafeUnderConcurrentUse() throws Exception {
    Scorer[] scorers = {new QueueScorer(TWO_SECONDS),
        new KvCacheUtilizationScorer(TWO_SECONDS), new TokenLoadScorer()};
    List<Candidate> c = List.of(withMetrics("a:1", metrics(1, 0, 0.5)), withMetrics("b:1", metrics(3, 0, 0.1)));
    double[][] expected = new double[scorers.length][];
    for (int i = 0; i < scorers.length; i++) {
      expected[i] = score(scorers[i], c, 0);
    }
    Thread[] ts = new Thread[4];
    java.util.concurrent.atomic.AtomicInteger bad = new java.util.concurrent.atomic.AtomicInteger();
    for (int t = 0; t < ts.length; t++) {
      ts[t] = new Thread(() -> {
        for (int k = 0; k < 10_000; k++) {
          int i = k % scorers.length;
          if (!java.util.Arrays.equals(score(scorers[i], c, 0), expected[i])) {
            bad.incrementAndGet();
          }
        }
      });
      ts[t].start();
    }
    for (Thread t : ts) {
      t.join(30_000);
      assertThat(t.isAlive()).as("scoring thread finished").isFalse();
    }
    assertThat(bad).hasValue(0);
  }

  static CycleState unused() {
    return TestCandidates.state();
  }
}
