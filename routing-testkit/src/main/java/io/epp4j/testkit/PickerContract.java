package io.epp4j.testkit;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Picker;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * Contract of a {@link Picker}: extend it in a JUnit 5 test and implement {@link #createPlugin()}.
 * Checks that a non-empty pool gives at least one pick, that picks are given candidates without
 * repeats, that an empty pool gives none (also right after a non-empty one), that the candidate
 * list, scores and request are left as they were, and that concurrent calls on shared candidates
 * (each with its own seeded cycle state, with distinct, equal and zero scores), on a warmed-up
 * picker and on new ones, pick what a single thread picks; when {@link #deterministic()} is false
 * only validity is checked.
 *
 * @param <P> the picker type under test
 */
public abstract class PickerContract<P extends Picker> extends PluginContract<P> {

  /** Score patterns tried per pool: distinct, all equal, all zero. */
  private static List<double[]> scorePatterns(int n) {
    double[] distinct = new double[n];
    double[] equal = new double[n];
    for (int i = 0; i < n; i++) {
      distinct[i] = (i + 1.0) / n;
      equal[i] = 1.0;
    }
    return List.of(distinct, equal, new double[n]);
  }

  private static void assertValid(PluginContract.Case c, List<Candidate> picked) {
    assertThat(picked).as("%s: picks", c.name()).isNotEmpty();
    Set<String> seen = new HashSet<>();
    for (Candidate p : picked) {
      assertThat(c.pool()).as("%s: picked candidate", c.name()).contains(p);
      assertThat(seen.add(p.id())).as("%s: %s picked twice", c.name(), p.id()).isTrue();
    }
  }

  @Test
  void picksGivenCandidatesWithoutRepeats() {
    P p = plugin();
    for (PluginContract.Case c : cases()) {
      for (double[] scores : scorePatterns(c.pool().size())) {
        assertValid(c, p.pick(c.request(), ContractFixtures.state(1), c.pool(), scores));
      }
    }
  }

  /** An empty pool, each time right after a non-empty one, gives no pick. */
  @Test
  void emptyCandidatesGiveNoPick() {
    P p = plugin();
    for (PluginContract.Case c : cases()) {
      p.pick(c.request(), ContractFixtures.state(1), c.pool(),
          scorePatterns(c.pool().size()).get(0));
      assertThat(p.pick(c.request(), ContractFixtures.state(1), List.of(), new double[0]))
          .as("%s: picks from no candidates, after a pick from some", c.name()).isEmpty();
    }
  }

  @Test
  void inputsAreNotModified() {
    P p = plugin();
    for (PluginContract.Case c : cases()) {
      for (double[] scores : scorePatterns(c.pool().size())) {
        List<Candidate> passed = new ArrayList<>(c.pool());
        double[] before = scores.clone();
        int[] tokens = tokens(c.request());
        p.pick(c.request(), ContractFixtures.state(1), passed, scores);
        assertUnchanged(c, passed, tokens);
        assertThat(scores).as("%s: scores after the call", c.name()).containsExactly(before);
      }
    }
  }

  /**
   * Every case with every score pattern, ties included (a tie-break must use the cycle state's
   * seeded random source to be reproducible). First the forced interleavings of {@link
   * PluginContract#interleaved} (deterministic: a call held at each of its reads of the candidate
   * list while another thread makes a whole call, and the picks of a call checked after another
   * thread's later call), then free-running threads (see {@link PluginContract#concurrently}).
   */
  @Test
  void concurrentCallsOnSharedCandidatesAgreeWithOneThread() throws Exception {
    P p = plugin();
    List<PluginContract.Case> cases = cases();
    int patterns = 3;
    List<List<Candidate>> expected = new ArrayList<>();
    for (PluginContract.Case c : cases) {
      for (double[] scores : scorePatterns(c.pool().size())) {
        expected.add(List.copyOf(p.pick(c.request(), ContractFixtures.state(7), c.pool(),
            scores)));
      }
    }
    // input k: case k / patterns with score pattern k % patterns
    Calls<P, List<Candidate>> calls = new Calls<>() {
      @Override
      public int size() {
        return cases.size() * patterns;
      }

      @Override
      public String name(int k) {
        return cases.get(k / patterns).name() + ", score pattern " + k % patterns;
      }

      @Override
      public List<Candidate> pool(int k) {
        return cases.get(k / patterns).pool();
      }

      @Override
      public List<Candidate> call(P picker, int k, List<Candidate> candidates) {
        PluginContract.Case c = cases.get(k / patterns);
        return picker.pick(c.request(), ContractFixtures.state(7), candidates,
            scorePatterns(c.pool().size()).get(k % patterns));
      }

      @Override
      public void check(int k, List<Candidate> got, String when) {
        PluginContract.Case c = cases.get(k / patterns);
        assertValid(new PluginContract.Case(name(k) + ", " + when, c.pool(), c.request()), got);
        if (deterministic()) {
          assertThat(got).as("%s, %s: picks", name(k), when)
              .containsExactlyElementsOf(expected.get(k));
        }
      }
    };
    interleaved(p, calls);
    concurrently(p, (picker, thread, i) -> {
      int k = (thread + i) % cases.size();
      int pattern = (i / cases.size()) % patterns;
      int input = k * patterns + pattern;
      calls.check(input, calls.call(picker, input, calls.pool(input)), "called concurrently");
    });
  }
}
