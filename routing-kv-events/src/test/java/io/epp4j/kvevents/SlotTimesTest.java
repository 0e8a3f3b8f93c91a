package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

class SlotTimesTest {
  @Test
  void putReplacesTheTimeOfAKnownSlotAndAppendsANewOne() {
    long[] one = SlotTimes.put(null, 3, 100);
    long[] replaced = SlotTimes.put(one, 3, 200);
    long[] two = SlotTimes.put(replaced, 5, 300);

    assertThat(one).containsExactly(3, 100);
    assertThat(replaced).containsExactly(3, 200);
    assertThat(two).containsExactly(3, 200, 5, 300);
    assertThat(one).as("published arrays are never written").containsExactly(3, 100);
  }

  @Test
  void removeUpToDropsThePairOfASlotWhoseTimeHasCome() {
    long[] pairs = {1, 10, 2, 20, 3, 30};

    assertThat(SlotTimes.removeUpTo(pairs, 2, 20)).containsExactly(1, 10, 3, 30);
    assertThat(SlotTimes.removeUpTo(pairs, 3, 99)).containsExactly(1, 10, 2, 20);
    assertThat(pairs).as("the input is not written").containsExactly(1, 10, 2, 20, 3, 30);
  }

  @Test
  void removeUpToKeepsASlotPutAgainLaterAndIgnoresAnAbsentOne() {
    long[] pairs = {1, 10, 2, 20};

    assertThat(SlotTimes.removeUpTo(pairs, 2, 19)).isSameAs(pairs);
    assertThat(SlotTimes.removeUpTo(pairs, 7, 99)).isSameAs(pairs);
  }

  @Test
  void removeUpToOfTheLastPairLeavesNothing() {
    assertThat(SlotTimes.removeUpTo(new long[] {4, 40}, 4, 40)).isNull();
  }
}
