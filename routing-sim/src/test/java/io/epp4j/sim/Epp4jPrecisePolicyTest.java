package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.kvevents.KvEventsPresets;
import org.junit.jupiter.api.Test;

/**
 * The {@code epp4j-precise} preset in the simulator: selectable by name, fed the replicas' KV
 * events, and bound by the same pile-up and past-capacity expectations as {@code epp4j}
 * (see {@link Epp4jPolicyTest} for the reasoning behind each bound).
 */
class Epp4jPrecisePolicyTest {

  @Test
  void isAPresetThatReadsKvEvents() {
    Policy p = Policy.presets().get(KvEventsPresets.EPP4J_PRECISE);
    assertThat(p).isNotNull();
    assertThat(p.kvEvents()).as("the simulation feeds it the engines' KV events").isTrue();
    assertThat(p.yaml()).isEqualTo(KvEventsPresets.yaml(KvEventsPresets.EPP4J_PRECISE));
  }

  @Test
  void atDefaultLoadNoReplicaCollectsMoreThanItsShareOfDialogs() {
    // ceil(1.25 × the mean) dialogs per replica, a dialog counted on every replica it visited
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    int replicas = 6;
    MultiTurnWorkload w = MultiTurnWorkload.defaults();
    int bound = (int) Math.ceil(1.25 * w.dialogs() / (double) replicas);
    for (long seed = 1; seed <= 3; seed++) {
      Simulation.Settings s = new Simulation.Settings(hw, replicas, seed, 50_000_000L, null);
      PolicyResult r = new Simulation(s, w, Policy.EPP4J_PRECISE, null).run();
      assertThat(r.requests()).isEqualTo(w.dialogs() * w.turns());
      assertThat(r.maxSessionsPerReplica()).as("seed %d", seed).isLessThanOrEqualTo(bound);
    }
  }

  @Test
  void pastTheCacheCapacityItHitsAtLeastAsOftenAsStickyAndHasNoWorseTail() {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    int replicas = 6;
    MultiTurnWorkload d = MultiTurnWorkload.defaults();
    // dialogs the cluster's KV holds at their final length (the system prompt once per replica),
    // then 20% more: clearly past the crossover, not on its edge
    double dialogEnd = d.turns() * (d.userLength().mean() + d.replyLength().mean());
    double perReplica = (hw.kvTokensPerReplica() - d.systemPromptLength()) / dialogEnd;
    int dialogs = (int) Math.ceil(1.2 * perReplica * replicas);
    MultiTurnWorkload w = new MultiTurnWorkload(dialogs, d.turns(), d.systemPromptLength(),
        d.userLength(), d.replyLength(), d.thinkTimeSeconds(), d.startSpreadSeconds());
    Simulation.Settings s = new Simulation.Settings(hw, replicas, 1, 50_000_000L, null);

    PolicyResult precise = new Simulation(s, w, Policy.EPP4J_PRECISE, null).run();
    PolicyResult sticky = new Simulation(s, w, Policy.STICKY, null).run();

    assertThat(precise.requests()).isEqualTo(sticky.requests()).isEqualTo(dialogs * d.turns());
    assertThat(precise.prefixCacheHitRate()).isGreaterThanOrEqualTo(sticky.prefixCacheHitRate());
    assertThat(precise.ttftP95Ms()).isLessThanOrEqualTo(sticky.ttftP95Ms());
  }

  /**
   * Independent gateways each remember only their own quarter of the traffic, so {@code epp4j}
   * sends a group's prompt to replicas that never saw it; every gateway reads the same KV events,
   * so for {@code epp4j-precise} independence costs only what the events have not yet shown. Like
   * sharing hints between routers ({@link GatewaysTest}), the events must keep more than half of
   * what independence costs {@code epp4j}.
   */
  @Test
  void independentGatewaysCostItLessThanHalfOfWhatTheyCostEpp4j() {
    // 12 groups of 4 users, 3000-token system prompts, 24 clients (GatewaysTest's workload)
    SharedPrefixWorkload w = new SharedPrefixWorkload(12, 4, LengthDist.fixed(3000),
        LengthDist.parse("100-300"), LengthDist.parse("20-60"), 300, 24, 0);
    Simulation.Settings s = new Simulation.Settings(HardwareProfile.qwen3H100Mps6(), 6, 1,
        50_000_000L, null);
    double epp4jLoss = new Simulation(s, w, Policy.EPP4J, null).run().prefixCacheHitRate()
        - new Simulation(s, w, Policy.EPP4J, null).gateways(4, false, 0).run()
            .prefixCacheHitRate();
    double preciseLoss = new Simulation(s, w, Policy.EPP4J_PRECISE, null).run()
        .prefixCacheHitRate()
        - new Simulation(s, w, Policy.EPP4J_PRECISE, null).gateways(4, false, 0).run()
            .prefixCacheHitRate();
    assertThat(epp4jLoss).as("epp4j's loss to independent gateways").isPositive();
    assertThat(preciseLoss).isLessThan(epp4jLoss / 2);
  }
}
