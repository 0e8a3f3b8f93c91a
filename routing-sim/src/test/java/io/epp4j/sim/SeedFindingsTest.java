package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.within;

import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The seed experiment's qualitative findings (REFERENCE.md §1), on the default scenarios and
 * the built-in profile, as statements about the load regime they hold in, with margins rather
 * than exact numbers.
 */
class SeedFindingsTest {

  /** Results of the default comparison (seed 1), each scenario run once for all tests. */
  private static final Map<String, Map<String, PolicyResult>> RUNS = new HashMap<>();

  private static synchronized Map<String, PolicyResult> run(Workload w) {
    return RUNS.computeIfAbsent(w.name(), k -> {
      Simulation.Settings s = new Simulation.Settings(HardwareProfile.qwen3H100Mps6(), 6, 1,
          50_000_000L, null);
      Map<String, PolicyResult> m = new LinkedHashMap<>();
      for (Policy p : Policy.presets().values()) {
        m.put(p.name(), new Simulation(s, w, p, null).run());
      }
      return m;
    });
  }

  /**
   * A policy's hit rate, which must be a figure: NaN (no prompt looked up) would pass some
   * comparisons below ({@code isGreaterThan}, {@code isCloseTo} another NaN) without a finding.
   */
  private static double hit(PolicyResult r) {
    assertThat(r.prefixCacheHitRate()).as("%s's hit rate", r.policy()).isNotNaN();
    return r.prefixCacheHitRate();
  }

  @Test
  void aPolicyWithoutAHitRateFailsAFindingRatherThanPassingIt() {
    PolicyResult none = new PolicyResult("sticky", Double.NaN, 10, 20, 40, 5, 100, 200, 1000, 0,
        0, 0, 0, 0, 0, 0, 50, 90, 0, 12, 12, "refused", 60, 0.1, 1000, new double[0]);
    assertThatThrownBy(() -> hit(none)).isInstanceOf(AssertionError.class)
        .hasMessageContaining("sticky's hit rate");
  }

  @Test
  void onCommonSystemPromptsEppApproximateHitsFarMoreOftenAndAnswersSooner() {
    Map<String, PolicyResult> r = run(SharedPrefixWorkload.defaults());
    PolicyResult epp = r.get("epp-approximate");
    PolicyResult rr = r.get("round-robin");
    PolicyResult sticky = r.get("sticky");
    assertThat(hit(epp)).isGreaterThanOrEqualTo(hit(rr) + 0.25);
    assertThat(hit(epp))
        .isGreaterThanOrEqualTo(hit(sticky) + 0.25);
    assertThat(epp.ttftP50Ms()).isLessThan(sticky.ttftP50Ms()).isLessThan(rr.ttftP50Ms());
    assertThat(epp.outputTokensPerSec()).isGreaterThan(sticky.outputTokensPerSec() * 1.05);
  }

  /**
   * At light load (below the KV capacity crossover, and each replica's dialogs fitting in its
   * cache) sticky sessions keep every dialog's history where its next turn goes, so the only hits
   * the ceiling counts that sticky may miss are first turns': a first turn finds the system
   * prompt only where another dialog went before it. Margin: the first turns' share of the
   * prompt tokens.
   */
  @Test
  void atLightLoadStickyIsNearTheHitRateCeiling() {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    MultiTurnWorkload w = MultiTurnWorkload.defaults();
    assertThat(w.capacityCrossover(hw, 6)).as("level 1 is light load").isGreaterThan(1);
    PolicyResult sticky = run(w).get("sticky");
    assertThat((double) sticky.maxSessionsPerReplica()).as("each replica's dialogs fit")
        .isLessThanOrEqualTo(w.dialogsThatFit(hw.kvTokensPerReplica()));
    double turn = w.userLength().mean() + w.replyLength().mean();
    double firstTurn = w.systemPromptLength() + w.userLength().mean();
    double allTurns = 0;
    for (int t = 0; t < w.turns(); t++) {
      allTurns += w.systemPromptLength() + t * turn + w.userLength().mean();
    }
    double ceiling = w.hitRateCeiling(1, hw.blockSize());
    assertThat(hit(sticky)).isLessThanOrEqualTo(ceiling)
        .isGreaterThanOrEqualTo(ceiling - firstTurn / allTurns);
  }

  /**
   * The seed's multi-turn finding is a load regime: once the active dialogs no longer fit in the
   * cluster's KV cache, sticky sessions keep dialogs on replicas that cannot hold them (they
   * evict and queue) while EPP's load scorers move work away. At 1.2 × the crossover, clearly
   * in the regime, not on its edge (at level 1 the finding is reversed, see the test above).
   * Only the tail is asserted: on vLLM's prefix-cache counters, which leave out recomputations
   * after preemption, EPP's lead in hits does not hold here.
   */
  @Test
  void pastTheKvCapacityCrossoverEppApproximateBeatsStickyOnTheTail() {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    MultiTurnWorkload base = MultiTurnWorkload.defaults();
    MultiTurnWorkload w = base.atLoad(1.2 * base.capacityCrossover(hw, 6));
    Simulation.Settings s = new Simulation.Settings(hw, 6, 1, 50_000_000L, null);
    PolicyResult epp = new Simulation(s, w, Policy.EPP_APPROXIMATE, null).run();
    PolicyResult sticky = new Simulation(s, w, Policy.STICKY, null).run();
    assertThat(epp.ttftP95Ms()).isLessThan(sticky.ttftP95Ms());
  }

  @Test
  void inMultiTurnChatSessionAwarePoliciesKeepMostOfTheHistoryCached() {
    Map<String, PolicyResult> r = run(MultiTurnWorkload.defaults());
    PolicyResult rr = r.get("round-robin");
    assertThat(hit(r.get("sticky")))
        .isGreaterThanOrEqualTo(hit(rr) + 0.25);
    assertThat(hit(r.get("epp-approximate")))
        .isGreaterThanOrEqualTo(hit(rr) + 0.25);
  }

  // ---- issue 6: precise mode and the hybrid

  @Test
  void onCommonSystemPromptsPreciseIsWithinTwoPointsOfApproximate() {
    Map<String, PolicyResult> r = run(SharedPrefixWorkload.defaults());
    assertThat(hit(r.get("epp-precise")))
        .isCloseTo(hit(r.get("epp-approximate")), within(0.02));
  }

  @Test
  void inMultiTurnChatPreciseDoesNotFallBehindApproximateAsInTheSeed() {
    // the seed measured precise 5 points behind approximate (78% vs 83%), which lost and late
    // events explain; in the model, whose events are never lost or late, precise knows at least
    // what approximate guesses, so it is not more than two points behind (it may lead: exact
    // knowledge of evictions is the point of precise mode)
    Map<String, PolicyResult> r = run(MultiTurnWorkload.defaults());
    assertThat(hit(r.get("epp-precise")))
        .isGreaterThanOrEqualTo(hit(r.get("epp-approximate")) - 0.02);
  }

  @Test
  void theHybridsHitRateIsWithinAPointOfTheBetterOfApproximateAndPrecise() {
    // it knows at least what precise knows, but one different decision changes the rest of a
    // run, so the hit rates are compared as --dominance compares them: within 1 point. Its tail
    // is held to precise's (next test), not to approximate's: with the gauges changing once per
    // step, as vLLM computes them, approximate's multi-turn TTFT p95 is below precise's on seeds
    // 1, 2, 4 and 5 of 1-5, a matter of where dialogs were placed that exact knowledge of the
    // caches does not remove
    for (Workload w : new Workload[] {SharedPrefixWorkload.defaults(),
        MultiTurnWorkload.defaults()}) {
      Map<String, PolicyResult> r = run(w);
      PolicyResult approx = r.get("epp-approximate");
      PolicyResult precise = r.get("epp-precise");
      PolicyResult hybrid = r.get("epp-precise-hybrid");
      assertThat(hit(hybrid)).as(w.name()).isGreaterThanOrEqualTo(
          Math.max(hit(approx), hit(precise)) - 0.01);
    }
  }

  @Test
  void theHybridsMemoryNeverCostsWhatTheEngineAlreadyKnows() {
    // a remembered block the engine reported evicted is forgotten, so the hybrid is never worse
    // than precise alone (with a memory that outlives evictions it lost 5-10 points here)
    for (Workload w : new Workload[] {SharedPrefixWorkload.defaults(),
        MultiTurnWorkload.defaults()}) {
      Map<String, PolicyResult> r = run(w);
      assertThat(hit(r.get("epp-precise-hybrid"))).as(w.name())
          .isGreaterThanOrEqualTo(hit(r.get("epp-precise")) - 0.005);
      assertThat(r.get("epp-precise-hybrid").ttftP95Ms()).as(w.name())
          .isLessThanOrEqualTo(r.get("epp-precise").ttftP95Ms() * 1.1);
    }
  }
}
