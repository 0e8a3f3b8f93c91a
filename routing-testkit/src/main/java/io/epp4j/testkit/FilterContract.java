package io.epp4j.testkit;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Filter;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Contract of a {@link Filter}: extend it in a JUnit 5 test and implement {@link #createPlugin()}.
 * Checks that the result is a subset of the candidates in their original order without repeats,
 * that an empty pool gives an empty result (also right after a non-empty one), that the candidate
 * list and request are left as they were, and that concurrent calls on shared candidates, on a
 * warmed-up filter and on new ones, give the same result as a single thread.
 *
 * @param <F> the filter type under test
 */
public abstract class FilterContract<F extends Filter> extends PluginContract<F> {

  private static List<Candidate> filter(Filter f, PluginContract.Case c, List<Candidate> passed,
      long seed) {
    return f.filter(c.request(), ContractFixtures.state(seed), passed);
  }

  private static void assertOrderedSubset(PluginContract.Case c, List<Candidate> kept) {
    // the router reads every element: a null list or element is a fault of the filter's, to be
    // reported as such rather than as a NullPointerException from this check
    assertThat(kept).as("%s: filter result (not null, no null candidate)", c.name()).isNotNull().doesNotContainNull();
    int last = -1;
    for (Candidate k : kept) {
      int at = -1;
      for (int i = last + 1; i < c.pool().size(); i++) {
        if (c.pool().get(i) == k) {
          at = i;
          break;
        }
      }
      assertThat(at).as("%s: kept %s must be a later input candidate than the one before it",
          c.name(), k.id()).isGreaterThan(last);
      last = at;
    }
  }

  @Test
  void keepsASubsetInTheOriginalOrder() {
    F f = plugin();
    for (PluginContract.Case c : cases()) {
      assertOrderedSubset(c, filter(f, c, c.pool(), 1));
    }
  }

  /** An empty pool, each time right after a non-empty one, gives an empty result. */
  @Test
  void emptyCandidatesGiveAnEmptyResult() {
    F f = plugin();
    for (PluginContract.Case c : cases()) {
      filter(f, c, c.pool(), 1);
      assertThat(f.filter(c.request(), ContractFixtures.state(1), List.of()))
          .as("%s: result for no candidates, after a call with some", c.name()).isEmpty();
    }
  }

  @Test
  void inputsAreNotModified() {
    F f = plugin();
    for (PluginContract.Case c : cases()) {
      List<Candidate> passed = new ArrayList<>(c.pool());
      int[] tokens = tokens(c.request());
      filter(f, c, passed, 1);
      assertUnchanged(c, passed, tokens);
    }
  }

  /**
   * First the forced interleavings of {@link PluginContract#interleaved} (deterministic: a call
   * held at each of its reads of the candidate list while another thread makes a whole call, and
   * the result of a call checked after another thread's later call), then free-running threads
   * (see {@link PluginContract#concurrently}).
   */
  @Test
  void concurrentCallsOnSharedCandidatesAgreeWithOneThread() throws Exception {
    F f = plugin();
    List<PluginContract.Case> cases = cases();
    List<List<Candidate>> expected = new ArrayList<>();
    for (PluginContract.Case c : cases) {
      expected.add(List.copyOf(filter(f, c, c.pool(), 7)));
    }
    Calls<F, List<Candidate>> calls = new CaseCalls<>(cases) {

      @Override
      public List<Candidate> call(F filter, int k, List<Candidate> candidates) {
        return filter(filter, cases.get(k), candidates, 7);
      }

      @Override
      public void check(int k, List<Candidate> got, String when) {
        PluginContract.Case c = cases.get(k);
        assertOrderedSubset(new PluginContract.Case(c.name() + ", " + when, c.pool(),
            c.request()), got);
        if (deterministic()) {
          assertThat(got).as("%s, %s: result", c.name(), when)
              .containsExactlyElementsOf(expected.get(k));
        }
      }
    };
    interleaved(f, calls);
    concurrently(f, (filter, thread, i) -> {
      int k = (thread + i) % cases.size();
      calls.check(k, calls.call(filter, k, calls.pool(k)), "called concurrently");
    });
  }
}
