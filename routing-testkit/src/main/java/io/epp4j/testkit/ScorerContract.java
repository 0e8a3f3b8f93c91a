package io.epp4j.testkit;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Scorer;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Contract of a {@link Scorer}: extend it in a JUnit 5 test and implement
 * {@link #createPlugin()}. Checks that scores are finite and in [0, 1] for every fixture pool
 * and request, that nothing is written past the candidates' slots, that the candidate list and
 * request are left as they were, that an empty pool is fine and leaves the array alone, and that
 * concurrent calls on shared candidates, on a warmed-up scorer and on new ones, give the same
 * scores as a single thread.
 *
 * @param <S> the scorer type under test
 */
public abstract class ScorerContract<S extends Scorer> extends PluginContract<S> {

  private static double[] score(Scorer s, PluginContract.Case c, List<Candidate> passed,
      long seed) {
    double[] scores = new double[c.pool().size() + 1];
    s.score(c.request(), ContractFixtures.state(seed), passed, scores);
    return scores;
  }

  @Test
  void scoresAreFiniteAndBetweenZeroAndOne() {
    S s = plugin();
    for (PluginContract.Case c : cases()) {
      double[] scores = score(s, c, c.pool(), 1);
      for (int i = 0; i < c.pool().size(); i++) {
        assertThat(scores[i]).as("%s: score of candidate %d (%s) in %s", c.name(), i,
            c.pool().get(i).id(), describe(scores)).isFinite().isBetween(0.0, 1.0);
      }
      assertThat(scores[c.pool().size()]).as("%s: slot past the last candidate", c.name())
          .isZero();
    }
  }

  /**
   * An empty pool, on a scorer that has just scored a non-empty one: no exception, and nothing
   * written into the slots the array has (the router's array may be longer than the pool).
   */
  @Test
  void emptyCandidatesGiveNoScores() {
    S s = plugin();
    for (PluginContract.Case c : cases()) {
      score(s, c, c.pool(), 1);
      double[] slots = new double[2];
      s.score(c.request(), ContractFixtures.state(1), List.of(), slots);
      assertThat(slots).as("%s: slots after scoring no candidates", c.name())
          .containsExactly(0.0, 0.0);
    }
  }

  @Test
  void inputsAreNotModified() {
    S s = plugin();
    for (PluginContract.Case c : cases()) {
      List<Candidate> passed = new ArrayList<>(c.pool());
      int[] tokens = tokens(c.request());
      score(s, c, passed, 1);
      assertUnchanged(c, passed, tokens);
    }
  }

  /**
   * First the forced interleavings of {@link PluginContract#interleaved} (deterministic: a call
   * held at each of its reads of the candidate list while another thread makes a whole call),
   * then free-running threads (see {@link PluginContract#concurrently}).
   */
  @Test
  void concurrentCallsOnSharedCandidatesAgreeWithOneThread() throws Exception {
    S s = plugin();
    List<PluginContract.Case> cases = cases();
    List<double[]> expected = new ArrayList<>();
    for (PluginContract.Case c : cases) {
      expected.add(score(s, c, c.pool(), 7));
    }
    Calls<S, double[]> calls = new CaseCalls<>(cases) {

      @Override
      public double[] call(S scorer, int k, List<Candidate> candidates) {
        return score(scorer, cases.get(k), candidates, 7);
      }

      @Override
      public void check(int k, double[] got, String when) {
        PluginContract.Case c = cases.get(k);
        for (int j = 0; j < c.pool().size(); j++) {
          assertThat(got[j]).as("%s, %s: score of candidate %d (%s) in %s", c.name(), when, j,
              c.pool().get(j).id(), describe(got)).isFinite().isBetween(0.0, 1.0);
        }
        if (deterministic()) {
          assertThat(got).as("%s, %s: scores", c.name(), when).containsExactly(expected.get(k));
        }
      }
    };
    interleaved(s, calls);
    concurrently(s, (scorer, thread, i) -> {
      int k = (thread + i) % cases.size();
      calls.check(k, calls.call(scorer, k, calls.pool(k)), "called concurrently");
    });
  }
}
