package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.kvevents.KvEvent;
import io.epp4j.kvevents.KvEventBatch;
import io.epp4j.kvevents.PreciseMatch;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiConsumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class SimulationTest {
  private static final HardwareProfile HW = HardwareProfile.qwen3H100Mps6();

  private static Simulation.Settings settings(long seed) {
    return new Simulation.Settings(HW, 6, seed, 50_000_000L, null);
  }

  private static SharedPrefixWorkload smallSharedPrefix() {
    return new SharedPrefixWorkload(12, 4, LengthDist.fixed(3000), LengthDist.parse("100-300"),
        LengthDist.parse("20-60"), 300, 24, 0);
  }

  private static MultiTurnWorkload smallMultiTurn() {
    return new MultiTurnWorkload(12, 4, 500, LengthDist.parse("100-200"), LengthDist.fixed(100),
        0.5, 1.0);
  }

  private static String runJson(long seed) {
    List<ScenarioResult> out = new ArrayList<>();
    for (Workload w : List.of(smallSharedPrefix(), smallMultiTurn())) {
      List<PolicyResult> rs = new ArrayList<>();
      for (Policy p : Policy.presets().values()) {
        rs.add(new Simulation(settings(seed), w, p, null).run());
      }
      out.add(new ScenarioResult(w.name(), w.describe(HW, 6), rs));
    }
    return Report.toDeterministicJson(out);
  }

  /**
   * A replica whose KV cache holds 2,048 tokens cannot start a prompt longer than that, which
   * vLLM's context limit (far larger) lets through: such requests wait in the queue for ever, and
   * the closed-loop clients behind them never send their next request.
   */
  @Test
  void requestsStillQueuedAtTheEndAreCountedAndReported() throws Exception {
    HardwareProfile tiny = new HardwareProfile(HW.name(), HW.model(), HW.nonEmbeddingParams(),
        HW.weightBytes(), HW.kvBytesPerToken(), HW.layers(), HW.queryWidth(), HW.hidden(),
        HW.vocab(), HW.maxModelLen(),
        (HW.weightBytes() + HW.runtimeOverheadBytes() + 2048.0 * HW.kvBytesPerToken())
            / HW.gpuMemoryUtilization(),
        HW.gpuMemoryUtilization(), HW.runtimeOverheadBytes(), HW.peakFlops(),
        HW.peakBandwidth(), HW.computeEfficiency(), HW.bandwidthEfficiency(),
        HW.replicasPerGpu(), HW.blockSize(), HW.maxNumBatchedTokens(), HW.maxNumSeqs(),
        HW.stepOverheadSeconds(), HW.perSequenceOverheadSeconds());
    assertThat(tiny.kvTokensPerReplica()).isLessThan(3000);
    assertThat(tiny.maxModelLen()).isGreaterThan(3000 + 300 + 60);
    SharedPrefixWorkload w = new SharedPrefixWorkload(12, 4, LengthDist.fixed(3000),
        LengthDist.parse("100-300"), LengthDist.parse("20-60"), 300, 24, 0);
    int total = w.start(3).totalRequests();
    PolicyResult r = new Simulation(new Simulation.Settings(tiny, 6, 3, 50_000_000L, null), w,
        Policy.ROUND_ROBIN, null).run();

    assertThat(r.requests()).isZero();
    assertThat(r.rejectedRequests()).isZero();
    assertThat(r.unservedRequests()).isEqualTo(total);
    ScenarioResult s = new ScenarioResult(w.name(), "tiny caches", List.of(r));
    java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
    Report.printTable(s, new java.io.PrintStream(b, true, java.nio.charset.StandardCharsets.UTF_8));
    assertThat(b.toString(java.nio.charset.StandardCharsets.UTF_8))
        .contains("round-robin: " + total + " requests never served");
    assertThat(new com.fasterxml.jackson.databind.ObjectMapper().readTree(Report.toJson(List.of(s)))
        .path("scenarios").path(0).path("results").path(0).path("unservedRequests").asInt(-1))
        .isEqualTo(total);
    List<String> csv = Report.toCsv(List.of(s)).lines().toList();
    int column = List.of(csv.get(0).split(",")).indexOf("unservedRequests");
    assertThat(column).isNotNegative();
    assertThat(csv.get(1).split(",", -1)[column]).isEqualTo(Integer.toString(total));
  }

  @Test
  void aRunThatServesEveryRequestReportsNoneUnserved() {
    PolicyResult r = new Simulation(settings(3), smallSharedPrefix(), Policy.ROUND_ROBIN, null)
        .run();
    assertThat(r.unservedRequests()).isZero();
    assertThat(r.requests() + r.rejectedRequests())
        .isEqualTo(smallSharedPrefix().start(3).totalRequests());
    java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
    Report.printTable(new ScenarioResult("s", "d", List.of(r)),
        new java.io.PrintStream(b, true, java.nio.charset.StandardCharsets.UTF_8));
    assertThat(b.toString(java.nio.charset.StandardCharsets.UTF_8)).doesNotContain("never served");
  }

  @Test
  void theSameSeedGivesTheSameReport() {
    String a = runJson(7);
    String b = runJson(7);
    assertThat(a).isEqualTo(b);
    assertThat(a).contains("\"policy\" : \"sticky\"", "\"prefixCacheHitRate\"");
    assertThat(runJson(8)).as("another seed draws other requests").isNotEqualTo(a);
  }

  @Test
  void warmRoutingTimesCoverOnlyTheSecondHalfOfTheRun() {
    int total = new Simulation(settings(5), smallSharedPrefix(), Policy.ROUND_ROBIN, null).run()
        .requests();
    long slowNanos = 2_000_000;
    AtomicInteger routed = new AtomicInteger();
    // the listener runs inside Router.route, so it stands for a cold router: every decision of
    // the first half takes at least 2 ms, none of the second half does
    RequestListener coldFirstHalf = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest r, CycleState s, RoutingDecision d) {
        if (routed.getAndIncrement() < total / 2) {
          long end = System.nanoTime() + slowNanos;
          while (System.nanoTime() < end) {
            Thread.onSpinWait();
          }
        }
      }
    };
    PolicyResult r = new Simulation(settings(5), smallSharedPrefix(), Policy.ROUND_ROBIN, null,
        coldFirstHalf).run();
    assertThat(r.requests()).isEqualTo(total);
    assertThat(r.routingMeanMicros()).as("half of the decisions took 2 ms or more")
        .isGreaterThanOrEqualTo(slowNanos / 2 / 1e3 * (total - 1) / total);
    assertThat(r.routingWarmMeanMicros()).as("the warm half excludes every slow decision")
        .isLessThan(slowNanos / 2 / 1e3);
    assertThat(r.routingWarmMeanMicros()).isPositive();
  }

  @Test
  void everyRequestIsServedAndReportedThroughTheDecisionLifecycle() {
    AtomicInteger routed = new AtomicInteger();
    AtomicInteger firstTokens = new AtomicInteger();
    AtomicInteger completed = new AtomicInteger();
    AtomicLong cached = new AtomicLong();
    AtomicLong prompt = new AtomicLong();
    Set<String> sessionsSeen = new HashSet<>();
    RequestListener listener = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest r, CycleState s, RoutingDecision d) {
        routed.incrementAndGet();
        assertThat(r.kind()).isEqualTo(InferenceRequest.Kind.TOKENS);
        assertThat(r.model()).isEqualTo("qwen3-1.7b");
        assertThat(r.sessionKey()).isNotBlank();
        sessionsSeen.add(r.sessionKey());
      }

      @Override
      public void onFirstToken(InferenceRequest r, Endpoint e) {
        firstTokens.incrementAndGet();
      }

      @Override
      public void onComplete(InferenceRequest r, Endpoint e, Usage u) {
        completed.incrementAndGet();
        assertThat(u.promptTokens()).isEqualTo(r.tokenIds().length);
        assertThat(u.cachedTokens()).isLessThan(u.promptTokens());
        assertThat(u.completionTokens()).isEqualTo(r.maxTokens());
        cached.addAndGet(u.cachedTokens());
        prompt.addAndGet(u.promptTokens());
      }
    };
    MultiTurnWorkload w = smallMultiTurn();
    PolicyResult r = new Simulation(settings(3), w, Policy.EPP_APPROXIMATE, null, listener).run();
    assertThat(r.requests()).isEqualTo(48);
    assertThat(routed).hasValue(48);
    assertThat(firstTokens).hasValue(48);
    assertThat(completed).hasValue(48);
    assertThat(sessionsSeen).hasSize(12);
    assertThat(cached.get()).isPositive();
    assertThat(r.prefixCacheHitRate()).isBetween(0.0, 1.0).isPositive();
    assertThat(r.ttftP50Ms()).isPositive().isLessThanOrEqualTo(r.ttftP95Ms());
    assertThat(r.ttftP95Ms()).isLessThanOrEqualTo(r.ttftP99Ms());
    assertThat(r.e2eP50Ms()).isGreaterThan(r.ttftP50Ms());
  }

  @Test
  void kvEventsFormConsistentChainsPerReplica() {
    Map<String, Set<Long>> stored = new HashMap<>();
    AtomicInteger storedEvents = new AtomicInteger();
    AtomicInteger removedBlocks = new AtomicInteger();
    double[] lastTime = {Double.NEGATIVE_INFINITY};
    BiConsumer<String, KvEventBatch> listener = (endpointId, batch) -> {
      assertThat(batch.timestampSeconds()).isGreaterThanOrEqualTo(lastTime[0]);
      lastTime[0] = batch.timestampSeconds();
      Set<Long> held = stored.computeIfAbsent(endpointId, k -> new HashSet<>());
      for (KvEvent e : batch.events()) {
        if (e instanceof KvEvent.BlockStored s) {
          storedEvents.incrementAndGet();
          assertThat(s.tokenIds()).hasSize(s.blockHashes().length * s.blockSize());
          if (s.hasParent()) {
            assertThat(held).as("parent of a stored block is cached on the same replica")
                .contains(s.parentHash());
          }
          for (long h : s.blockHashes()) {
            assertThat(held.add(h)).as("a block is stored once until removed").isTrue();
          }
        } else if (e instanceof KvEvent.BlockRemoved rm) {
          for (long h : rm.blockHashes()) {
            assertThat(held.remove(h)).as("only stored blocks are removed").isTrue();
            removedBlocks.incrementAndGet();
          }
        }
      }
    };
    PolicyResult r = new Simulation(settings(5), smallSharedPrefix(), Policy.ROUND_ROBIN, listener)
        .run();
    assertThat(storedEvents.get()).isPositive();
    assertThat((long) removedBlocks.get()).isEqualTo(r.evictions());
    assertThat(stored.keySet()).hasSize(6);
  }

  @Test
  void preciseModeSeesAStepsEventsOnlyFromTheInstantTheStepEnds() {
    // one log of (kind, simulated time) in call order: routing decisions and event batches
    List<long[]> log = new ArrayList<>();
    AtomicInteger routedWithHits = new AtomicInteger();
    BiConsumer<String, KvEventBatch> events = (endpointId, batch) ->
        log.add(new long[] {1, Math.round(batch.timestampSeconds() * 1e9)});
    RequestListener routing = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest r, CycleState state, RoutingDecision d) {
        log.add(new long[] {0, state.nowNanos()});
        PreciseMatch m = state.get(PreciseMatch.KEY);
        assertThat(m).as("the precise scorer ran").isNotNull();
        if (m.bestMatchedWeight() > 0) {
          routedWithHits.incrementAndGet();
        }
      }
    };
    PolicyResult r = new Simulation(settings(3), smallMultiTurn(), Policy.EPP_PRECISE, events,
        routing).run();
    assertThat(r.requests()).isEqualTo(48);
    long last = Long.MIN_VALUE;
    int batches = 0;
    for (long[] entry : log) {
      assertThat(entry[1]).as("simulated time never goes back between routing and events")
          .isGreaterThanOrEqualTo(last);
      last = entry[1];
      batches += (int) entry[0];
    }
    assertThat(batches).isPositive();
    // every request after a dialog's first turn shares at least the system prompt with one
    assertThat(routedWithHits.get()).as("the router's index was fed").isGreaterThan(36);
  }

  @Test
  void stepEventsGoOutOnceWhenTheStepEnds() {
    // vLLM publishes one batch per engine step after the step ran; a batch at the instant a
    // step starts would show the scheduler's evictions to the router too early
    Map<String, Double> lastBatch = new HashMap<>();
    BiConsumer<String, KvEventBatch> listener = (endpointId, batch) -> {
      double t = batch.timestampSeconds();
      Double prev = lastBatch.put(endpointId, t);
      assertThat(prev == null || prev < t).as("one batch per replica and step").isTrue();
    };
    new Simulation(settings(5), smallSharedPrefix(), Policy.ROUND_ROBIN, listener).run();
    assertThat(lastBatch).hasSize(6);
  }

  @Test
  void aMooncakeTraceReplaysWithSharedBlocksAndClipsOverlongRequests(@TempDir Path dir)
      throws IOException {
    Path trace = dir.resolve("t.jsonl");
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < 40; i++) {
      // every request shares blocks 0-3 (2,048 tokens), then has its own
      sb.append("{\"timestamp\": ").append(i * 100).append(", \"input_length\": 3000, ")
          .append("\"output_length\": 10, \"hash_ids\": [0, 1, 2, 3, ").append(100 + i)
          .append(", ").append(200 + i).append("]}\n");
    }
    sb.append("{\"timestamp\": 5000, \"input_length\": 40000, \"output_length\": 5, \"hash_ids\": [")
        .append("1000");
    for (int b = 1; b < 79; b++) {
      sb.append(", ").append(1000 + b);
    }
    sb.append("]}\n");
    Files.writeString(trace, sb.toString());
    MooncakeTraceWorkload w = MooncakeTraceWorkload.load(trace, 0, 1.0, HW.maxModelLen());
    PolicyResult r = new Simulation(settings(1), w, Policy.EPP_APPROXIMATE, null).run();
    assertThat(r.requests()).isEqualTo(41);
    assertThat(r.clippedRequests()).isEqualTo(1);
    // 39 of the 40 short requests can hit the 2,048 shared tokens of their 3,000
    assertThat(r.prefixCacheHitRate()).isNotNaN().isGreaterThan(0.3);
    assertThat(r.simulatedSeconds()).isGreaterThan(5.0);
  }

  @Test
  void dialogsThatOutgrowTheContextAreRejectedAndTheRunStillEnds() {
    MultiTurnWorkload w = new MultiTurnWorkload(2, 10, 30_000, LengthDist.fixed(500),
        LengthDist.fixed(300), 0.1, 0.1);
    PolicyResult r = new Simulation(settings(1), w, Policy.ROUND_ROBIN, null).run();
    // turns 1-3 fit in 32,768 tokens (30,800 / 31,600 / 32,400 with the reply); turn 4 does not,
    // and turns 5-10 would carry it: the dialog ends and all seven count as rejected
    assertThat(r.requests()).isEqualTo(6);
    assertThat(r.rejectedRequests()).isEqualTo(14);
  }

  /** A policy whose only filter keeps no replica: the router refuses every request. */
  private static final Policy REFUSES_ALL = new Policy("refuses-all", """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: label-selector-filter
        parameters:
          matchLabels:
            zone: nowhere
      - type: round-robin-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: label-selector-filter
        - pluginRef: round-robin-picker
      """, null);

  @Test
  void closedLoopClientsGoOnAfterTheRouterRefusesThem() {
    SharedPrefixWorkload w = new SharedPrefixWorkload(2, 2, LengthDist.fixed(500),
        LengthDist.fixed(100), LengthDist.fixed(20), 40, 4, 0);
    PolicyResult r = new Simulation(settings(1), w, REFUSES_ALL, null).run();
    // a refused client sends its next request, as a benchmark client does: all 40 are offered
    assertThat(r.requests()).isZero();
    assertThat(r.rejectedRequests()).isEqualTo(40);
    assertThat(r.routerRejectedRequests()).isEqualTo(40);
  }

  @Test
  void aPolicyThatLookedUpNoPromptHasNoHitRateRatherThanZero() throws Exception {
    // every request refused: no replica looked a prompt up, so there is no hit rate to show
    SharedPrefixWorkload w = new SharedPrefixWorkload(2, 2, LengthDist.fixed(500),
        LengthDist.fixed(100), LengthDist.fixed(20), 12, 4, 0);
    PolicyResult r = new Simulation(settings(1), w, REFUSES_ALL, null).run();
    assertThat(r.rejectedRequests()).isEqualTo(12);
    assertThat(r.prefixCacheHitRate()).isNaN();

    List<ScenarioResult> s = List.of(new ScenarioResult(w.name(), w.describe(HW, 6), List.of(r)));
    java.io.ByteArrayOutputStream table = new java.io.ByteArrayOutputStream();
    Report.printTable(s.get(0),
        new java.io.PrintStream(table, true, java.nio.charset.StandardCharsets.UTF_8));
    String row = table.toString(java.nio.charset.StandardCharsets.UTF_8).lines()
        .map(String::trim).filter(l -> l.startsWith(r.policy() + " ")).findFirst().orElseThrow();
    assertThat(row.substring(r.policy().length()).trim().split("\\s+")[0])
        .isEqualTo(Report.NO_FIGURE);
    var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(Report.toJson(s));
    assertThat(json.at("/scenarios/0/results/0/prefixCacheHitRate").isNull()).isTrue();
    String csvRow = Report.toCsv(s).lines().skip(1).findFirst().orElseThrow();
    assertThat(csvRow.split(",", -1)[2]).isEmpty();
  }

  @Test
  void dialogsGoOnAfterTheRouterRefusesATurn() {
    MultiTurnWorkload w = new MultiTurnWorkload(3, 4, 500, LengthDist.fixed(100),
        LengthDist.fixed(50), 0.5, 1.0);
    PolicyResult r = new Simulation(settings(1), w, REFUSES_ALL, null).run();
    assertThat(r.rejectedRequests()).isEqualTo(12);
    assertThat(r.routerRejectedRequests()).isEqualTo(12);
  }

  @Test
  void closedLoopClientsGoOnAfterARequestLongerThanTheContext() {
    // questions of 1-60,000 tokens: about half of the requests exceed the 32,768-token context
    SharedPrefixWorkload w = new SharedPrefixWorkload(2, 2, LengthDist.fixed(500),
        LengthDist.parse("1-60000"), LengthDist.fixed(10), 60, 3, 0);
    PolicyResult r = new Simulation(settings(1), w, Policy.ROUND_ROBIN, null).run();
    assertThat(r.rejectedRequests()).isPositive();
    assertThat(r.routerRejectedRequests()).isZero();
    assertThat(r.requests() + r.rejectedRequests()).isEqualTo(60);
  }

  @Test
  void theSharedMooncakeTraceReplays() throws IOException {
    // the same places the command line looks: shared/ beside the repository, not part of it
    List<Path> looked = Main.defaultTraceCandidates();
    Path trace = looked.stream().filter(Files::isReadable).findFirst().orElse(null);
    org.junit.jupiter.api.Assumptions.assumeTrue(trace != null, () -> "skipped: the shared Mooncake"
        + " trace is not beside this clone; looked at " + looked);
    MooncakeTraceWorkload w = MooncakeTraceWorkload.load(trace, 300, 1.0, HW.maxModelLen());
    Simulation.Settings eight = new Simulation.Settings(HW, 8, 1, 50_000_000L, null);
    PolicyResult r = new Simulation(eight, w, Policy.EPP_APPROXIMATE, null).run();
    assertThat(r.requests() + r.rejectedRequests()).isEqualTo(300);
    assertThat(r.clippedRequests()).isPositive();
    assertThat(r.prefixCacheHitRate()).isNotNaN().isPositive();
  }

  @Test
  void traceBlocksWithEqualHashIdsHaveEqualTokens() {
    int[] a = MooncakeTraceWorkload.tokens(new long[] {7, 8}, 700, 3, 1);
    int[] b = MooncakeTraceWorkload.tokens(new long[] {7, 9}, 700, 3, 2);
    assertThat(java.util.Arrays.copyOf(a, 512)).isEqualTo(java.util.Arrays.copyOf(b, 512));
    assertThat(java.util.Arrays.copyOfRange(a, 512, 700))
        .isNotEqualTo(java.util.Arrays.copyOfRange(b, 512, 700));
  }
}
