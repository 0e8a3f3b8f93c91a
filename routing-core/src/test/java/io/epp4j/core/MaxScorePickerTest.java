package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class MaxScorePickerTest {
  private static final InferenceRequest REQ = InferenceRequest.builder().model("m").prompt("p")
      .build();

  /** The rule as first written: a tie with the best so far draws, in candidate order. */
  private static int reference(double[] scores, SplittableRandom rnd) {
    int best = -1;
    double bestScore = Double.NEGATIVE_INFINITY;
    int ties = 0;
    for (int i = 0; i < scores.length; i++) {
      double s = scores[i];
      if (s > bestScore) {
        bestScore = s;
        best = i;
        ties = 1;
      } else if (s == bestScore) {
        ties++;
        if (rnd.nextInt(ties) == 0) {
          best = i;
        }
      }
    }
    return best;
  }

  @Test
  void picksAsTheRuleSaysAndDrawsTheSameRandomNumbers() {
    double[] values = {0.0, 0.5, 1.0, 2.5, 3.0, Double.NaN, Double.NEGATIVE_INFINITY, -0.0, 7.0};
    SplittableRandom gen = new SplittableRandom(3);
    MaxScorePicker picker = new MaxScorePicker(1);
    for (int round = 0; round < 2000; round++) {
      int n = 1 + gen.nextInt(40);
      double[] scores = new double[n];
      for (int i = 0; i < n; i++) {
        // few distinct values, so ties with the best so far are common
        scores[i] = gen.nextInt(4) == 0 ? gen.nextDouble() : values[gen.nextInt(values.length)];
      }
      List<Candidate> pool = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        pool.add(new EndpointState(Endpoint.of("10.0.0." + i, 8000), EndpointMetrics.UNKNOWN,
            new EndpointState.InFlight("10.0.0." + i + ":8000")));
      }
      long seed = gen.nextLong();
      SplittableRandom mine = new SplittableRandom(seed);
      int expected = reference(scores, mine);
      if (expected < 0) {
        continue; // every score NaN: nothing to pick
      }
      SplittableRandom theirs = new SplittableRandom(seed);
      List<Candidate> picked = picker.pick(REQ, new CycleState(0, theirs), pool, scores);
      assertThat(picked).as("round %d", round).containsExactly(pool.get(expected));
      // the same number of draws: both generators are at the same point of their streams
      assertThat(theirs.nextLong()).as("round %d: the random stream", round)
          .isEqualTo(mine.nextLong());
    }
  }
}
