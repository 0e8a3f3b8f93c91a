package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/**
 * The {@code epp4j} preset on the multi-turn workload past the load where the active dialogs no
 * longer fit in the cluster's KV cache. There sticky sessions keep every dialog on its hashed
 * replica whether or not that replica's cache can hold them, and the replicas that the hash gave
 * more dialogs evict and queue; a policy that weighs misses against load should do better on
 * both hits and tail. At the default load, where the dialogs fit, it must not let one replica
 * collect the new dialogs either.
 */
class Epp4jPolicyTest {

  @Test
  void atDefaultLoadNoReplicaCollectsMoreThanItsShareOfDialogs() {
    // the pile-up bound: at most ceil(1.25 × the mean) dialogs on any replica, the mean
    // counting each dialog once (a dialog that moved counts on every replica it visited, so
    // moving dialogs around cannot hide a pile-up)
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    int replicas = 6;
    MultiTurnWorkload w = MultiTurnWorkload.defaults();
    int bound = (int) Math.ceil(1.25 * w.dialogs() / (double) replicas);
    for (long seed = 1; seed <= 3; seed++) {
      Simulation.Settings s = new Simulation.Settings(hw, replicas, seed, 50_000_000L, null);
      PolicyResult epp4j = new Simulation(s, w, Policy.EPP4J, null).run();
      assertThat(epp4j.requests()).isEqualTo(w.dialogs() * w.turns());
      assertThat(epp4j.maxSessionsPerReplica()).as("seed %d", seed).isLessThanOrEqualTo(bound);
    }
  }

  @Test
  void pastTheCacheCapacityEpp4jHitsAtLeastAsOftenAsStickyAndHasNoWorseTail() {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    int replicas = 6;
    MultiTurnWorkload d = MultiTurnWorkload.defaults();
    // the dialogs the cluster's KV cache holds at their final length, the system prompt once per
    // replica (the scenario header prints the same figure)
    double dialogEnd = d.turns() * (d.userLength().mean() + d.replyLength().mean());
    double perReplica = (hw.kvTokensPerReplica() - d.systemPromptLength()) / dialogEnd;
    // 20% past that capacity: clearly in the regime, not on its edge
    int dialogs = (int) Math.ceil(1.2 * perReplica * replicas);
    MultiTurnWorkload w = new MultiTurnWorkload(dialogs, d.turns(), d.systemPromptLength(),
        d.userLength(), d.replyLength(), d.thinkTimeSeconds(), d.startSpreadSeconds());
    Simulation.Settings s = new Simulation.Settings(hw, replicas, 1, 50_000_000L, null);

    PolicyResult epp4j = new Simulation(s, w, Policy.EPP4J, null).run();
    PolicyResult sticky = new Simulation(s, w, Policy.STICKY, null).run();

    assertThat(epp4j.requests()).isEqualTo(sticky.requests()).isEqualTo(dialogs * d.turns());
    assertThat(epp4j.prefixCacheHitRate()).isGreaterThanOrEqualTo(sticky.prefixCacheHitRate());
    assertThat(epp4j.ttftP95Ms()).isLessThanOrEqualTo(sticky.ttftP95Ms());
  }
}
