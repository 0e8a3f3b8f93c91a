package io.epp4j.testkit;

import static io.epp4j.testkit.ContractRuns.assertFailsExactly;
import static io.epp4j.testkit.ContractRuns.assertPasses;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Picker;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.random.RandomGenerator;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * {@link PickerContract} against pickers that each break one rule: every check must fail for the
 * picker that breaks its rule, and only for it; a correct picker passes them all.
 */
class PickerContractMetaTest {
  static final String PICKS = "picksGivenCandidatesWithoutRepeats";
  static final String EMPTY = "emptyCandidatesGiveNoPick";
  static final String INPUTS = "inputsAreNotModified";
  static final String CONCURRENT = "concurrentCallsOnSharedCandidatesAgreeWithOneThread";

  /** The index of the highest score, ties broken with {@code random}; -1 for no candidates. */
  static int best(double[] scores, int n, RandomGenerator random) {
    int best = -1;
    int ties = 0;
    for (int i = 0; i < n; i++) {
      if (best < 0 || scores[i] > scores[best]) {
        best = i;
        ties = 1;
      } else if (scores[i] == scores[best] && random.nextInt(++ties) == 0) {
        best = i;
      }
    }
    return best;
  }

  /** A correct picker: the best candidate, ties broken with the cycle's random source. */
  static class GoodPicker implements Picker {
    @Override
    public List<Candidate> pick(InferenceRequest request, CycleState state,
        List<Candidate> candidates, double[] scores) {
      int b = best(scores, candidates.size(), state.random());
      return b < 0 ? List.of() : List.of(candidates.get(b));
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class Good extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return new GoodPicker();
    }
  }

  /** Picks nothing when no candidate scores above zero. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class NothingWhenAllScoreZero extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return (request, state, candidates, scores) -> {
        for (int i = 0; i < candidates.size(); i++) {
          if (scores[i] > 0) {
            return new GoodPicker().pick(request, state, candidates, scores);
          }
        }
        return List.of();
      };
    }
  }

  /** Adds a fallback, the first candidate, without checking it is not the primary. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class RepeatsThePrimary extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return (request, state, candidates, scores) -> {
        List<Candidate> out = new ArrayList<>(
            new GoodPicker().pick(request, state, candidates, scores));
        if (!out.isEmpty()) {
          out.add(candidates.get(0));
        }
        return out;
      };
    }
  }

  /**
   * Keeps a session on the candidate it first picked for it, without checking that the
   * candidate is still among those given.
   */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class StaleSessionPick extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return new Picker() {
        private final Map<String, Candidate> sessions = new ConcurrentHashMap<>();

        @Override
        public List<Candidate> pick(InferenceRequest request, CycleState state,
            List<Candidate> candidates, double[] scores) {
          List<Candidate> picked = new GoodPicker().pick(request, state, candidates, scores);
          String session = request.sessionKey();
          if (session == null || picked.isEmpty()) {
            return picked;
          }
          return List.of(sessions.computeIfAbsent(session, s -> picked.get(0)));
        }
      };
    }
  }

  /** Starts from the first candidate, which an empty pool lacks. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class ThrowsOnEmpty extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return (request, state, candidates, scores) -> {
        Candidate first = candidates.get(0);
        int b = best(scores, candidates.size(), state.random());
        return List.of(b < 0 ? first : candidates.get(b));
      };
    }
  }

  /**
   * Never strands a request: given no candidates, it returns the last candidate it picked. A
   * check that starts from a fresh picker and calls it only with empty pools cannot see this.
   */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class FallsBackToItsLastPick extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return new Picker() {
        private volatile List<Candidate> last = List.of();

        @Override
        public List<Candidate> pick(InferenceRequest request, CycleState state,
            List<Candidate> candidates, double[] scores) {
          if (candidates.isEmpty()) {
            return last;
          }
          List<Candidate> picked = new GoodPicker().pick(request, state, candidates, scores);
          last = picked;
          return picked;
        }
      };
    }
  }

  /** Finds a fallback by knocking the primary's score out of the given array. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class OverwritesScores extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return (request, state, candidates, scores) -> {
        int b = best(scores, candidates.size(), state.random());
        if (b < 0) {
          return List.of();
        }
        if (candidates.size() == 1) {
          return List.of(candidates.get(b));
        }
        scores[b] = Double.NEGATIVE_INFINITY;
        int fallback = best(scores, candidates.size(), state.random());
        return List.of(candidates.get(b), candidates.get(fallback));
      };
    }
  }

  /**
   * Sorts the candidate list by score in place (when it can: the contract's other checks pass
   * immutable lists, on which this would throw).
   */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class SortsTheCandidates extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return (request, state, candidates, scores) -> {
        List<Candidate> picked = new GoodPicker().pick(request, state, candidates, scores);
        try {
          candidates.sort(Comparator.comparing(Candidate::id).reversed());
        } catch (UnsupportedOperationException immutable) {
          // only a mutable list is sorted
        }
        return picked;
      };
    }
  }

  /** Breaks ties with its own random source instead of the cycle's seeded one. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class UnseededTieBreak extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return (request, state, candidates, scores) -> {
        int b = best(scores, candidates.size(), ThreadLocalRandom.current());
        return b < 0 ? List.of() : List.of(candidates.get(b));
      };
    }
  }

  /**
   * Returns a list field that every call reuses; meant to vary (deterministic() is false), so
   * only the validity of concurrent picks is checked, and that fails when another call refills
   * the list under the caller.
   */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class ReturnsASharedList extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return new Picker() {
        private final List<Candidate> out = new ArrayList<>();

        @Override
        public List<Candidate> pick(InferenceRequest request, CycleState state,
            List<Candidate> candidates, double[] scores) {
          out.clear();
          int b = best(scores, candidates.size(), state.random());
          if (b >= 0) {
            out.add(candidates.get(b));
          }
          return out;
        }
      };
    }

    @Override
    protected boolean deterministic() {
      return false;
    }
  }

  @Test
  void aCorrectPickerPassesEveryCheck() {
    assertPasses(Good.class);
  }

  @Test
  void noPickFromANonEmptyPoolFailsThePicksCheck() {
    // the concurrency check calls it with zero scores too
    assertFailsExactly(NothingWhenAllScoreZero.class, PICKS, CONCURRENT);
  }

  @Test
  void aRepeatedPickFailsThePicksCheck() {
    assertFailsExactly(RepeatsThePrimary.class, PICKS, CONCURRENT);
  }

  @Test
  void aPickThatWasNotGivenFailsThePicksCheck() {
    assertFailsExactly(StaleSessionPick.class, PICKS, CONCURRENT);
  }

  @Test
  void throwingOnAnEmptyPoolFailsTheEmptyCheck() {
    assertFailsExactly(ThrowsOnEmpty.class, EMPTY);
  }

  @Test
  void aPickFromAnEarlierCallForAnEmptyPoolFailsTheEmptyCheck() {
    assertFailsExactly(FallsBackToItsLastPick.class, EMPTY);
  }

  @Test
  void overwritingTheScoresFailsTheInputsCheck() {
    assertFailsExactly(OverwritesScores.class, INPUTS);
  }

  @Test
  void sortingTheCandidateListFailsTheInputsCheck() {
    assertFailsExactly(SortsTheCandidates.class, INPUTS);
  }

  @Test
  void anUnseededTieBreakFailsTheConcurrencyCheck() {
    assertFailsExactly(UnseededTieBreak.class, CONCURRENT);
  }

  @Test
  void aSharedResultListFailsTheConcurrencyCheckEvenWhenNotDeterministic() {
    ContractRuns.assertCaughtByForcedInterleaving(ReturnsASharedList.class, CONCURRENT);
  }
}
