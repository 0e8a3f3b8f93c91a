package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The dominance arithmetic on made-up results, and the parallel runner's determinism. */
class DominanceTest {

  private static PolicyResult result(String policy, double hit, double p95) {
    return new PolicyResult(policy, hit, 10, p95, p95 * 2, 5, 100, 200, 1000, 100, 0, 0, 20, 16.7,
        5, 4.0, 50, 90, 0, 0, 0, "", 60, 0.1, 1000, new double[] {1});
  }

  private static ScenarioResult point(PolicyResult... rs) {
    return new ScenarioResult("multi-turn", "d", List.of(rs), Map.of(), 1.5, 2, 0.9, 1.7);
  }

  private static Dominance.Verdict judge(PolicyResult... rs) {
    return Dominance.judge(point(rs), "epp4j");
  }

  @Test
  void betterOnBothMeasuresThanTheBestOtherIsAWin() {
    Dominance.Verdict v = judge(result("sticky", 0.80, 40), result("epp-approximate", 0.70, 30),
        result("epp4j", 0.85, 25));
    assertThat(v.outcome()).isEqualTo(Dominance.Outcome.WON);
    assertThat(v.bestHit().policy()).isEqualTo("sticky");
    assertThat(v.bestP95().policy()).isEqualTo("epp-approximate");
  }

  @Test
  void theBestHitAndTheBestTailMayComeFromDifferentPolicies() {
    // epp4j beats each rival on one measure but not the best of each measure
    Dominance.Verdict v = judge(result("sticky", 0.90, 500), result("round-robin", 0.30, 30),
        result("epp4j", 0.85, 100));
    assertThat(v.outcome()).isEqualTo(Dominance.Outcome.LOST);
    assertThat(v.hitOk()).isFalse();
    assertThat(v.p95Ok()).isFalse();
  }

  @Test
  void withinTheTolerancesIsATieAndTheBoundariesCount() {
    // exactly one point below and exactly 1.10 × + 10 ms above: the target is met, not beaten
    Dominance.Verdict edge = judge(result("sticky", 0.80, 100), result("epp4j", 0.79, 120));
    assertThat(edge.hitOk()).isTrue();
    assertThat(edge.p95Ok()).isTrue();
    assertThat(edge.outcome()).isEqualTo(Dominance.Outcome.TIED);

    Dominance.Verdict hitShort = judge(result("sticky", 0.80, 100), result("epp4j", 0.7899, 50));
    assertThat(hitShort.outcome()).isEqualTo(Dominance.Outcome.LOST);
    assertThat(hitShort.hitOk()).isFalse();
    assertThat(hitShort.p95Ok()).isTrue();

    Dominance.Verdict tailLong = judge(result("sticky", 0.80, 100), result("epp4j", 0.9, 120.01));
    assertThat(tailLong.outcome()).isEqualTo(Dominance.Outcome.LOST);
    assertThat(tailLong.hitOk()).isTrue();
    assertThat(tailLong.p95Ok()).isFalse();
  }

  @Test
  void theSummaryCountsEveryOutcomeAndNamesWhereItLostAndWhy() {
    List<Dominance.Verdict> vs = List.of(
        judge(result("sticky", 0.80, 40), result("epp4j", 0.85, 25)),
        judge(result("sticky", 0.80, 40), result("epp4j", 0.795, 41)),
        judge(result("sticky", 0.80, 40), result("epp4j", 0.60, 41)));
    String s = Dominance.summary(vs);
    assertThat(s).startsWith("summary: 3 points: won 1, tied 1, lost 1")
        .contains("lost: multi-turn ×1.5 seed 2 (hit 20.0 points below sticky)");
  }

  @Test
  void everyPolicyIsJudgedByTheSameTargetAgainstTheBestOfTheRest() {
    List<Dominance.Verdict> vs = List.of(
        // sticky has the most hits, epp-approximate the shortest tail, epp4j neither: only
        // epp4j is within both tolerances of the others' best
        judge(result("sticky", 0.90, 500), result("epp-approximate", 0.70, 30),
            result("epp4j", 0.895, 32)),
        // sticky best on both: it wins, the others lose
        judge(result("sticky", 0.90, 30), result("epp-approximate", 0.70, 60),
            result("epp4j", 0.85, 100)));
    String s = Dominance.everyPolicy(vs);
    assertThat(s.lines()).containsExactly(
        "every policy against the best of the others (same target, same points):",
        "  sticky               won 1, tied 0, lost 1",
        "  epp-approximate      won 0, tied 0, lost 2",
        "  epp4j                won 0, tied 1, lost 1");
  }

  @Test
  void theJsonReportCarriesEveryPolicysCounts() throws Exception {
    Dominance.Verdict v = judge(result("sticky", 0.90, 30), result("epp4j", 0.85, 100));
    var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(
        Report.toJson(null, List.of(v.point()), List.of(v)));
    var every = json.get("dominance").get("everyPolicy");
    assertThat(every.get("sticky").get("won").asInt()).isEqualTo(1);
    assertThat(every.get("epp4j").get("lost").asInt()).isEqualTo(1);
    assertThat(every.get("epp4j").get("tied").asInt()).isZero();
  }

  @Test
  void aPolicyWithoutAFigureNeverWinsOnThatMeasureAndIsNoRivalOnIt() throws Exception {
    double none = Double.NaN;
    // the subject with no hit rate (it looked no prompt up) misses the target and says why
    Dominance.Verdict noHit = judge(result("sticky", 0.5, 40), result("epp4j", none, 25));
    assertThat(noHit.hitOk()).isFalse();
    assertThat(noHit.outcome()).isEqualTo(Dominance.Outcome.LOST);
    assertThat(Dominance.summary(List.of(noHit))).contains("no hit rate");
    // nor does it win when no rival has one either
    assertThat(judge(result("sticky", none, 40), result("epp4j", none, 25)).outcome())
        .isEqualTo(Dominance.Outcome.LOST);
    // no TTFT p95 (no request served) is no short tail
    Dominance.Verdict noP95 = judge(result("sticky", 0.5, 40), result("epp4j", 0.9, none));
    assertThat(noP95.p95Ok()).isFalse();
    assertThat(noP95.outcome()).isEqualTo(Dominance.Outcome.LOST);
    assertThat(Dominance.summary(List.of(noP95))).contains("no TTFT p95");

    // a rival without figures, wherever it stands, hides neither the best hit nor the best tail
    Dominance.Verdict v = judge(result("round-robin", none, none), result("sticky", 0.8, 40),
        result("epp4j", 0.85, 30));
    assertThat(v.bestHit().policy()).isEqualTo("sticky");
    assertThat(v.bestP95().policy()).isEqualTo("sticky");
    assertThat(v.outcome()).isEqualTo(Dominance.Outcome.WON);
    Dominance.Verdict short_ = judge(result("round-robin", none, none), result("sticky", 0.8, 40),
        result("epp4j", 0.6, 30));
    assertThat(short_.outcome()).isEqualTo(Dominance.Outcome.LOST);
    assertThat(short_.bestHit().policy()).isEqualTo("sticky");
    // the subject's figures against rivals that have none meet the target
    Dominance.Verdict alone = judge(result("sticky", none, none), result("epp4j", 0.3, 30));
    assertThat(alone.hitOk()).isTrue();
    assertThat(alone.p95Ok()).isTrue();

    // the JSON shows a missing figure as null, not as NaN
    var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(
        Report.toJson(null, List.of(noHit.point()), List.of(noHit)));
    assertThat(json.at("/dominance/points/0/hitRate").isNull()).isTrue();
    assertThat(json.at("/dominance/points/0/bestOtherHitRate").asDouble()).isEqualTo(0.5);
  }

  @Test
  void aPointWithoutTheSubjectOrWithoutRivalsIsRefused() {
    assertThatThrownBy(() -> judge(result("sticky", 0.8, 40)))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("epp4j");
    assertThatThrownBy(() -> judge(result("epp4j", 0.8, 40)))
        .isInstanceOf(IllegalArgumentException.class);
  }

  @Test
  void twoThreadsGiveTheSameOutcomesAsOne() {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    List<Dominance.Scenario> scenarios = List.of(
        new Dominance.Scenario(new SharedPrefixWorkload(4, 3, LengthDist.fixed(1000),
            LengthDist.fixed(100), LengthDist.fixed(20), 60, 6, 0), hw, 3),
        new Dominance.Scenario(new MultiTurnWorkload(4, 3, 200, LengthDist.fixed(50),
            LengthDist.fixed(30), 0.2, 0.5), hw, 3));
    List<Policy> policies = List.of(Policy.ROUND_ROBIN, Policy.STICKY, Policy.EPP4J);
    List<ScenarioResult> one = Dominance.run(scenarios, List.of(1.0, 2.0), List.of(1L, 2L),
        policies, 50_000_000L, 1, null);
    List<ScenarioResult> two = Dominance.run(scenarios, List.of(1.0, 2.0), List.of(1L, 2L),
        policies, 50_000_000L, 2, null);
    assertThat(one).hasSize(2 * 2 * 2);
    assertThat(one.get(1).seed()).isEqualTo(2);
    assertThat(one.get(2).loadLevel()).isEqualTo(2.0);
    assertThat(Report.toDeterministicJson(two)).isEqualTo(Report.toDeterministicJson(one));
  }
}
