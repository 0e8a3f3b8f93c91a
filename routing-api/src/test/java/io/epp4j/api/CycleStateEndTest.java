package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class CycleStateEndTest {
  private final CycleState state = new CycleState(0, new SplittableRandom(1));
  private final List<String> ran = new ArrayList<>();

  @Test
  void endRunsTheActionsOnceInTheOrderTheyWereRegistered() {
    state.onEnd(() -> ran.add("a"));
    state.onEnd(() -> ran.add("b"));
    state.onEnd(() -> ran.add("c"));
    assertThat(ran).isEmpty();
    assertThat(state.ended()).isFalse();
    state.end();
    assertThat(ran).containsExactly("a", "b", "c");
    assertThat(state.ended()).isTrue();
    state.end();
    assertThat(ran).as("a second end runs nothing").containsExactly("a", "b", "c");
  }

  @Test
  void anActionRegisteredAfterTheEndRunsAtOnce() {
    state.end();
    state.onEnd(() -> ran.add("late"));
    assertThat(ran).containsExactly("late");
  }

  @Test
  void everyActionRunsWhenOneThrowsAndTheFirstFailureIsRethrownWithTheOthersSuppressed() {
    state.onEnd(() -> {
      throw new IllegalStateException("first");
    });
    state.onEnd(() -> ran.add("b"));
    state.onEnd(() -> {
      throw new IllegalArgumentException("third");
    });
    state.onEnd(() -> ran.add("d"));
    assertThatThrownBy(state::end).isInstanceOf(IllegalStateException.class).hasMessage("first")
        .satisfies(e -> assertThat(e.getSuppressed()).singleElement()
            .isInstanceOf(IllegalArgumentException.class));
    assertThat(ran).containsExactly("b", "d");
    assertThat(state.ended()).isTrue();
  }

  @Test
  void aNullActionIsRefused() {
    assertThatThrownBy(() -> state.onEnd(null)).isInstanceOf(NullPointerException.class)
        .hasMessageContaining("action");
  }
}
