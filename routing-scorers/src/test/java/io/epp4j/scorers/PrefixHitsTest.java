package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.CycleState;
import io.epp4j.api.PrefixHits;
import org.junit.jupiter.api.Test;

class PrefixHitsTest {

  @Test
  void valuesReportTokensAndHits() {
    PrefixHits h = PrefixHits.of(new String[] {"a:1", "b:1"}, new int[] {10, 10},
        new double[] {0, 2.4}, 16);
    assertThat(h.size()).isEqualTo(2);
    assertThat(h.indexOf("b:1")).isEqualTo(1);
    assertThat(h.indexOf("c:1")).isEqualTo(-1);
    assertThat(h.cachedTokens("b:1")).isEqualTo(38); // 2.4 × 16, rounded down
    assertThat(h.cachedTokens("a:1")).isZero();
    assertThat(h.cachedTokens("c:1")).isZero();
    assertThat(h.anyHit()).isTrue();
    assertThat(PrefixHits.of(new String[] {"a:1"}, new int[] {3}, new double[] {0}, 16).anyHit())
        .isFalse();
  }

  @Test
  void invalidValuesNameTheField() {
    assertThatThrownBy(() -> PrefixHits.of(new String[] {"a:1"}, new int[] {2},
        new double[] {3}, 16)).hasMessageContaining("cachedBlocks[0]");
    assertThatThrownBy(() -> PrefixHits.of(new String[] {"a:1"}, new int[] {-1},
        new double[] {0}, 16)).hasMessageContaining("totalBlocks[0]");
    assertThatThrownBy(() -> PrefixHits.of(new String[] {"a:1"}, new int[] {2},
        new double[] {Double.NaN}, 16)).hasMessageContaining("cachedBlocks[0]");
    assertThatThrownBy(() -> PrefixHits.of(new String[] {"a:1"}, new int[] {2, 3},
        new double[] {0}, 16)).hasMessageContaining("same length");
    assertThatThrownBy(() -> PrefixHits.of(new String[0], new int[0], new double[0], 0))
        .hasMessageContaining("blockSizeTokens");
  }

  @Test
  void aSecondPublisherAddsItsEndpointsAndTheFirstKeepsItsOwn() {
    CycleState st = TestCandidates.state();
    PrefixHits decode = PrefixHits.of(new String[] {"d:1", "x:1"}, new int[] {8, 8},
        new double[] {8, 1}, 16);
    PrefixHits prefill = PrefixHits.of(new String[] {"x:1", "p:1"}, new int[] {4, 4},
        new double[] {4, 3}, 32);
    PrefixHits.publish(st, decode);
    assertThat(st.get(PrefixHits.KEY)).isSameAs(decode);
    PrefixHits.publish(st, decode); // the same scorer in a second profile: nothing to add
    assertThat(st.get(PrefixHits.KEY)).isSameAs(decode);
    PrefixHits.publish(st, prefill);
    PrefixHits both = st.get(PrefixHits.KEY);
    assertThat(both.size()).isEqualTo(3);
    assertThat(both.cachedTokens("d:1")).isEqualTo(128);
    assertThat(both.cachedTokens("x:1")).as("earlier figures win").isEqualTo(16);
    assertThat(both.cachedTokens("p:1")).isEqualTo(96);
    int p = both.indexOf("p:1");
    assertThat(both.totalBlocks(p)).isEqualTo(4);
    assertThat(both.blockSizeTokens(p)).isEqualTo(32);
  }

  @Test
  void aLaterMatchOverTheSameOrFewerEndpointsKeepsTheEarlierHits() {
    // an affinity filter's match of every candidate, then the scorer's over those it kept
    CycleState st = TestCandidates.state();
    PrefixHits all = PrefixHits.of(new String[] {"a:1", "b:1", "c:1"}, new int[] {8, 8, 8},
        new double[] {8, 2, 0}, 16);
    PrefixHits kept = PrefixHits.of(new String[] {"a:1"}, new int[] {8}, new double[] {7}, 16);
    PrefixHits.publish(st, all);
    PrefixHits.publish(st, kept);
    assertThat(st.get(PrefixHits.KEY)).isSameAs(all);
    PrefixHits.publish(st, PrefixHits.of(new String[] {"c:1", "b:1", "a:1"},
        new int[] {8, 8, 8}, new double[] {1, 1, 1}, 16));
    assertThat(st.get(PrefixHits.KEY)).isSameAs(all);
    assertThat(st.get(PrefixHits.KEY).cachedTokens("a:1")).isEqualTo(128);
  }
}
