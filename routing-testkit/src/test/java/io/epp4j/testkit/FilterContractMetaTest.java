package io.epp4j.testkit;

import static io.epp4j.testkit.ContractRuns.assertFailsExactly;
import static io.epp4j.testkit.ContractRuns.assertPasses;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * {@link FilterContract} against filters that each break one rule: every check must fail for the
 * filter that breaks its rule, and only for it; a correct filter passes them all.
 */
class FilterContractMetaTest {
  static final String SUBSET = "keepsASubsetInTheOriginalOrder";
  static final String EMPTY = "emptyCandidatesGiveAnEmptyResult";
  static final String INPUTS = "inputsAreNotModified";
  static final String CONCURRENT = "concurrentCallsOnSharedCandidatesAgreeWithOneThread";

  /** The correct rule the fixtures start from: keep candidates with at most 5 queued requests. */
  static boolean keep(Candidate c) {
    return c.waitingRequests() <= 5;
  }

  static List<Candidate> good(List<Candidate> candidates) {
    List<Candidate> out = new ArrayList<>();
    for (Candidate c : candidates) {
      if (keep(c)) {
        out.add(c);
      }
    }
    return out;
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class Good extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return (request, state, candidates) -> good(candidates);
    }
  }

  /** Returns what it keeps in reverse order. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class Reorders extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return (request, state, candidates) -> {
        List<Candidate> out = good(candidates);
        Collections.reverse(out);
        return out;
      };
    }
  }

  /** Adds its first kept candidate again at the end. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class Repeats extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return (request, state, candidates) -> {
        List<Candidate> out = good(candidates);
        if (!out.isEmpty()) {
          out.add(out.get(0));
        }
        return out;
      };
    }
  }

  /** Keeps a copy of a candidate instead of the candidate given. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class ReturnsCopies extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return (request, state, candidates) -> {
        List<Candidate> out = new ArrayList<>();
        for (Candidate c : good(candidates)) {
          out.add(new ContractFixtures.TestCandidate(c.endpoint(), c.metrics(),
              c.inFlightRequests() + 1, c.inFlightTokens()));
        }
        return out;
      };
    }
  }

  /** Finds the smallest queue with {@code getAsInt()}, which an empty pool does not have. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class ThrowsOnEmpty extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return (request, state, candidates) -> {
        int least = candidates.stream().mapToInt(Candidate::waitingRequests).min().getAsInt();
        return good(candidates).stream().filter(c -> c.waitingRequests() >= least).toList();
      };
    }
  }

  /**
   * Never strands a request: given no candidates, it returns the last non-empty result it gave.
   * A check that starts from a fresh filter and calls it only with empty pools cannot see this.
   */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class FallsBackToItsLastResult extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return new Filter() {
        private volatile List<Candidate> last = List.of();

        @Override
        public List<Candidate> filter(InferenceRequest request, CycleState state,
            List<Candidate> candidates) {
          if (candidates.isEmpty()) {
            return last;
          }
          List<Candidate> out = good(candidates);
          last = out;
          return out;
        }
      };
    }
  }

  /**
   * Removes what it drops from the given list and returns that list (when it can: the
   * contract's other checks pass immutable lists, on which this would throw).
   */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class RemovesInPlace extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return (request, state, candidates) -> {
        try {
          candidates.removeIf(c -> !keep(c));
          return candidates;
        } catch (UnsupportedOperationException immutable) {
          return good(candidates);
        }
      };
    }
  }

  /** Collects what it keeps in a list field that every call shares. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class SharedScratch extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return new Filter() {
        private final List<Candidate> scratch = new ArrayList<>();

        @Override
        public List<Candidate> filter(InferenceRequest request, CycleState state,
            List<Candidate> candidates) {
          scratch.clear();
          for (Candidate c : candidates) {
            if (keep(c)) {
              scratch.add(c);
            }
          }
          return List.copyOf(scratch);
        }
      };
    }
  }

  /** Adds a null after what it keeps, as a filter with an unset slot in its result would. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class ReturnsANullCandidate extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return (request, state, candidates) -> {
        List<Candidate> out = good(candidates);
        if (!candidates.isEmpty()) {
          out.add(null);
        }
        return out;
      };
    }
  }

  /** Returns null instead of a list for a non-empty pool. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class ReturnsNull extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return (request, state, candidates) -> candidates.isEmpty() ? List.of() : null;
    }
  }

  @Test
  void aCorrectFilterPassesEveryCheck() {
    assertPasses(Good.class);
  }

  @Test
  void reorderingFailsTheSubsetCheck() {
    assertFailsExactly(Reorders.class, SUBSET, CONCURRENT);
  }

  @Test
  void aRepeatedCandidateFailsTheSubsetCheck() {
    assertFailsExactly(Repeats.class, SUBSET, CONCURRENT);
  }

  @Test
  void aCandidateThatWasNotGivenFailsTheSubsetCheck() {
    assertFailsExactly(ReturnsCopies.class, SUBSET, CONCURRENT);
  }

  @Test
  void throwingOnAnEmptyPoolFailsTheEmptyCheck() {
    assertFailsExactly(ThrowsOnEmpty.class, EMPTY);
  }

  @Test
  void candidatesFromAnEarlierCallForAnEmptyPoolFailTheEmptyCheck() {
    assertFailsExactly(FallsBackToItsLastResult.class, EMPTY);
  }

  @Test
  void removingFromTheGivenListFailsTheInputsCheck() {
    assertFailsExactly(RemovesInPlace.class, INPUTS);
  }

  @Test
  void aSharedScratchListFailsTheConcurrencyCheck() {
    ContractRuns.assertCaughtByForcedInterleaving(SharedScratch.class, CONCURRENT);
  }

  @Test
  void aNullCandidateFailsTheSubsetCheckWithAnAssertionNamingIt() {
    // before: a NullPointerException from inside the contract ("k" is null)
    Map<String, ContractRuns.Outcome> outcomes =
        assertFailsExactly(ReturnsANullCandidate.class, SUBSET, CONCURRENT);
    assertThat(outcomes.get(SUBSET).message()).startsWith("AssertionError").contains("null");
  }

  @Test
  void aNullResultFailsTheSubsetCheckWithAnAssertionNamingIt() {
    Map<String, ContractRuns.Outcome> outcomes =
        assertFailsExactly(ReturnsNull.class, SUBSET, CONCURRENT);
    assertThat(outcomes.get(SUBSET).message()).startsWith("AssertionError").contains("null");
  }
}
