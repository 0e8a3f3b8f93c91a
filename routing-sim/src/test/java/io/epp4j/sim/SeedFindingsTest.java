package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.Disabled;
import org.junit.jupiter.api.Test;

/**
 * The seed experiment's qualitative findings (REFERENCE.md §1), on the default scenarios and
 * the built-in profile, with margins rather than exact numbers.
 */
class SeedFindingsTest {

  private static Map<String, PolicyResult> run(Workload w) {
    Simulation.Settings s = new Simulation.Settings(HardwareProfile.qwen3H100Mps6(), 6, 1,
        50_000_000L, null);
    Map<String, PolicyResult> m = new LinkedHashMap<>();
    for (Policy p : Policy.presets().values()) {
      m.put(p.name(), new Simulation(s, w, p, null).run());
    }
    return m;
  }

  @Test
  void onCommonSystemPromptsEppApproximateHitsFarMoreOftenAndAnswersSooner() {
    Map<String, PolicyResult> r = run(SharedPrefixWorkload.defaults());
    PolicyResult epp = r.get("epp-approximate");
    PolicyResult rr = r.get("round-robin");
    PolicyResult sticky = r.get("sticky");
    assertThat(epp.prefixCacheHitRate()).isGreaterThanOrEqualTo(rr.prefixCacheHitRate() + 0.25);
    assertThat(epp.prefixCacheHitRate())
        .isGreaterThanOrEqualTo(sticky.prefixCacheHitRate() + 0.25);
    assertThat(epp.ttftP50Ms()).isLessThan(sticky.ttftP50Ms()).isLessThan(rr.ttftP50Ms());
    assertThat(epp.outputTokensPerSec()).isGreaterThan(sticky.outputTokensPerSec() * 1.05);
  }

  @Disabled("not reproduced by the model: with 36 uniformly hashed session keys the ring puts at"
      + " most 8-12 dialogs on a replica, which its cache nearly holds, so sticky keeps the"
      + " higher hit rate and the lower TTFT p95; see 'Gaps' in routing-sim/README.md")
  @Test
  void inMultiTurnChatEppApproximateBeatsStickyOnHitsAndOnTheTail() {
    Map<String, PolicyResult> r = run(MultiTurnWorkload.defaults());
    PolicyResult epp = r.get("epp-approximate");
    PolicyResult sticky = r.get("sticky");
    assertThat(epp.prefixCacheHitRate()).isGreaterThan(sticky.prefixCacheHitRate());
    assertThat(epp.ttftP95Ms()).isLessThanOrEqualTo(sticky.ttftP95Ms() / 2);
  }

  @Test
  void inMultiTurnChatSessionAwarePoliciesKeepMostOfTheHistoryCached() {
    Map<String, PolicyResult> r = run(MultiTurnWorkload.defaults());
    PolicyResult rr = r.get("round-robin");
    assertThat(r.get("sticky").prefixCacheHitRate())
        .isGreaterThanOrEqualTo(rr.prefixCacheHitRate() + 0.25);
    assertThat(r.get("epp-approximate").prefixCacheHitRate())
        .isGreaterThanOrEqualTo(rr.prefixCacheHitRate() + 0.25);
  }
}
