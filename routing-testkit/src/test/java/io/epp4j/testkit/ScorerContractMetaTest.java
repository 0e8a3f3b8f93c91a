package io.epp4j.testkit;

import static io.epp4j.testkit.ContractRuns.assertFailsExactly;
import static io.epp4j.testkit.ContractRuns.assertRaceCaught;
import static io.epp4j.testkit.ContractRuns.assertPasses;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Scorer;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * {@link ScorerContract} against scorers that each break one rule: every check must fail for the
 * scorer that breaks its rule, and only for it; a correct scorer passes them all.
 */
class ScorerContractMetaTest {
  static final String RANGE = "scoresAreFiniteAndBetweenZeroAndOne";
  static final String EMPTY = "emptyCandidatesGiveNoScores";
  static final String INPUTS = "inputsAreNotModified";
  static final String CONCURRENT = "concurrentCallsOnSharedCandidatesAgreeWithOneThread";
  static final String CLOSE = "closeIsIdempotent";

  /** The correct rule the fixtures start from: fewer queued and in-flight requests score higher. */
  static double good(Candidate c) {
    return 1.0 / (1.0 + c.waitingRequests() + c.inFlightRequests());
  }

  /** A correct scorer. */
  static class GoodScorer implements Scorer {
    @Override
    public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
        double[] scores) {
      for (int i = 0; i < candidates.size(); i++) {
        scores[i] = good(candidates.get(i));
      }
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class Good extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return new GoodScorer();
    }
  }

  /** Subtracts the queue from 1 without a floor: negative for a queue over 100. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class OutOfRange extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return (request, state, candidates, scores) -> {
        for (int i = 0; i < candidates.size(); i++) {
          scores[i] = 1.0 - candidates.get(i).waitingRequests() / 100.0;
        }
      };
    }
  }

  /** Normalises by the largest queue, which is 0/0 = NaN when no candidate has one. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class NaNWhenNoQueue extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return (request, state, candidates, scores) -> {
        double max = 0;
        for (Candidate c : candidates) {
          max = Math.max(max, c.waitingRequests());
        }
        for (int i = 0; i < candidates.size(); i++) {
          scores[i] = 1.0 - candidates.get(i).waitingRequests() / max;
        }
      };
    }
  }

  /** Fills the whole array as if it had exactly one slot per candidate. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class WritesPastTheCandidates extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return (request, state, candidates, scores) -> {
        Arrays.fill(scores, 0.5);
        for (int i = 0; i < candidates.size(); i++) {
          scores[i] = good(candidates.get(i));
        }
      };
    }
  }

  /** Starts its search for the best candidate from the first one, which an empty pool lacks. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class ThrowsOnEmpty extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return (request, state, candidates, scores) -> {
        double best = good(candidates.get(0));
        for (Candidate c : candidates) {
          best = Math.max(best, good(c));
        }
        for (int i = 0; i < candidates.size(); i++) {
          scores[i] = good(candidates.get(i)) / best;
        }
      };
    }
  }

  /**
   * Sorts the candidate list in place (when it can: the contract's other checks pass immutable
   * lists, on which this would throw and so fail checks that are not about mutation).
   */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class SortsTheCandidates extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return (request, state, candidates, scores) -> {
        try {
          candidates.sort(Comparator.comparing(Candidate::id).reversed());
        } catch (UnsupportedOperationException immutable) {
          // only a mutable list is sorted
        }
        for (int i = 0; i < candidates.size(); i++) {
          scores[i] = good(candidates.get(i));
        }
      };
    }
  }

  /** Sorts the request's token ids in place, e.g. to count distinct tokens. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class SortsTheTokens extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return (request, state, candidates, scores) -> {
        int[] tokens = request.tokenIds();
        if (tokens != null) {
          synchronized (tokens) {
            Arrays.sort(tokens);
          }
        }
        new GoodScorer().score(request, state, candidates, scores);
      };
    }
  }

  /** Keeps its intermediate results in a field that every call shares. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class SharedScratch extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return new Scorer() {
        private final double[] scratch = new double[16];

        @Override
        public void score(InferenceRequest request, CycleState state,
            List<Candidate> candidates, double[] scores) {
          for (int i = 0; i < candidates.size(); i++) {
            scratch[i] = good(candidates.get(i));
          }
          for (int i = 0; i < candidates.size(); i++) {
            scores[i] = scratch[i];
          }
        }
      };
    }
  }

  /**
   * Builds a lookup table on its first call (the work lazy initialisation is for: about a millisecond)
   * and publishes it before it is filled, last entry first, so a call that starts while the first
   * one fills it reads zeros. Once built, the scorer is correct; only a check whose first calls are
   * concurrent can see the race.
   */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class RacyLazyInit extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return new Scorer() {
        private double[] table;

        @Override
        public void score(InferenceRequest request, CycleState state,
            List<Candidate> candidates, double[] scores) {
          double[] t = table;
          if (t == null) {
            t = new double[1 << 15];
            table = t;
            for (int q = t.length - 1; q >= 0; q--) {
              t[q] = Math.exp(-Math.log1p(q));
            }
          }
          for (int i = 0; i < candidates.size(); i++) {
            Candidate c = candidates.get(i);
            scores[i] = t[Math.min(t.length - 1, c.waitingRequests() + c.inFlightRequests())];
          }
        }
      };
    }
  }

  /** Throws when closed a second time. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class CloseTwiceThrows extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      AtomicBoolean closed = new AtomicBoolean();
      return new GoodScorer() {
        @Override
        public void close() {
          if (!closed.compareAndSet(false, true)) {
            throw new IllegalStateException("already closed");
          }
        }
      };
    }
  }

  @Test
  void aCorrectScorerPassesEveryCheck() {
    assertPasses(Good.class);
  }

  /** The message names the candidate by its id, not only by its index in the pool. */
  @Test
  void aScoreBelowZeroFailsTheRangeCheck() {
    java.util.Map<String, ContractRuns.Outcome> outcomes =
        assertFailsExactly(OutOfRange.class, RANGE, CONCURRENT);
    // the only candidate with a queue over 100 (200 waiting)
    org.assertj.core.api.Assertions.assertThat(outcomes.get(RANGE).message())
        .contains("10.0.1.4:8000");
  }

  @Test
  void aNaNScoreFailsTheRangeCheck() {
    assertFailsExactly(NaNWhenNoQueue.class, RANGE, CONCURRENT);
  }

  @Test
  void writingPastTheCandidatesFailsTheRangeAndEmptyChecks() {
    assertFailsExactly(WritesPastTheCandidates.class, RANGE, EMPTY);
  }

  @Test
  void throwingOnAnEmptyPoolFailsTheEmptyCheck() {
    assertFailsExactly(ThrowsOnEmpty.class, EMPTY);
  }

  @Test
  void sortingTheCandidateListFailsTheInputsCheck() {
    assertFailsExactly(SortsTheCandidates.class, INPUTS);
  }

  @Test
  void sortingTheTokenIdsFailsTheInputsCheck() {
    assertFailsExactly(SortsTheTokens.class, INPUTS);
  }

  @Test
  void aSharedScratchArrayFailsTheConcurrencyCheck() {
    ContractRuns.assertCaughtByForcedInterleaving(SharedScratch.class, CONCURRENT);
  }

  @Test
  void aRacyLazyInitialisationFailsTheConcurrencyCheck() {
    assertRaceCaught(RacyLazyInit.class, CONCURRENT);
  }

  @Test
  void closeThatThrowsTheSecondTimeFailsTheCloseCheck() {
    assertFailsExactly(CloseTwiceThrows.class, CLOSE);
  }
}
