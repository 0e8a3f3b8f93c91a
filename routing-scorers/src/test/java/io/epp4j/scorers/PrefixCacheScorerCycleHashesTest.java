package io.epp4j.scorers;

import static io.epp4j.scorers.PrefixCacheScorerTest.decision;
import static io.epp4j.scorers.PrefixCacheScorerTest.tok;
import static io.epp4j.scorers.PrefixCacheScorerTest.tokens;
import static io.epp4j.scorers.TestCandidates.state;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixBlocks;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * A cycle's block hashes live in an array the routing thread reuses once the cycle has ended, so
 * that a route allocates nothing in proportion to its prompt; they cannot be read after that.
 */
class PrefixCacheScorerCycleHashesTest {
  private final PrefixCacheScorer scorer = PrefixCacheScorer.create();
  private final List<Candidate> pool = TestCandidates.pool(4);

  PrefixCacheScorerCycleHashesTest() {
    TestCandidates.joined(scorer, pool);
  }

  private CycleState scored(InferenceRequest r) {
    CycleState st = state();
    scorer.score(r, st, pool, new double[pool.size()]);
    return st;
  }

  private static long[] arrayOf(CycleState st) {
    return st.get(BlockHasher.SHARED).hashes();
  }

  @Test
  void aCycleAfterAnEndedOneWritesItsHashesIntoTheSameArray() {
    CycleState first = scored(tok(tokens(1600 * 16, 0)));
    long[] used = arrayOf(first);
    first.end();
    CycleState second = scored(tok(tokens(1200 * 16, 7)));
    assertThat(arrayOf(second)).as("the array the ended cycle gave back").isSameAs(used);
    assertThat(second.get(PrefixBlocks.KEY).size()).isEqualTo(1200);
    assertThat(second.get(PrefixBlocks.KEY).toArray())
        .as("the second prompt's hashes, not the first's tail")
        .containsExactly(scorer.blockHashes(tok(tokens(1200 * 16, 7))));
  }

  @Test
  void aCycleThatHasNotEndedKeepsItsArrayFromTheNextOne() {
    CycleState first = scored(tok(tokens(64 * 16, 0)));
    long[] expected = scorer.blockHashes(tok(tokens(64 * 16, 0)));
    CycleState second = scored(tok(tokens(64 * 16, 3)));
    long[] a1 = arrayOf(first);
    long[] a2 = arrayOf(second);
    assertThat(a2).isNotSameAs(a1);
    assertThat(first.get(PrefixBlocks.KEY).toArray()).as("not overwritten by the second cycle")
        .containsExactly(expected);
    second.end();
    first.end();
    long[] third = arrayOf(scored(tok(tokens(64 * 16, 5))));
    assertThat(third == a1 || third == a2).as("the next cycle reuses one of the two").isTrue();
  }

  @Test
  void theHashesPublishedInACycleCannotBeReadOnceItEndedButACopyStays() {
    InferenceRequest r = tok(tokens(40 * 16, 0));
    CycleState st = scored(r);
    PrefixBlocks published = st.get(PrefixBlocks.KEY);
    long[] copy = published.toArray();
    PrefixBlocks kept = published.retained();
    scorer.afterRouting(r, st, decision(pool.get(0).endpoint()));
    st.end();
    assertThatThrownBy(() -> published.hash(0)).isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("after the cycle ended");
    assertThatThrownBy(published::toArray).isInstanceOf(IllegalStateException.class);
    scored(tok(tokens(40 * 16, 9))).end(); // the next cycle overwrites the array
    assertThat(copy).containsExactly(scorer.blockHashes(r));
    assertThat(kept.toArray()).as("retained() stays readable").containsExactly(copy);
    assertThat(kept.blockSizeTokens()).isEqualTo(16);
  }

  @Test
  void aRouteRecordedBeforeItsCycleEndedIsFoundByTheNextRoute() {
    InferenceRequest r = tok(tokens(100 * 16, 0));
    CycleState st = scored(r);
    scorer.afterRouting(r, st, decision(pool.get(2).endpoint()));
    st.end();
    scored(tok(tokens(100 * 16, 11))).end();
    double[] scores = new double[pool.size()];
    CycleState again = state();
    scorer.score(r, again, pool, scores);
    assertThat(scores).containsExactly(0.0, 0.0, 1.0, 0.0);
  }

  @Test
  void aPromptOfMoreBlocksThanAThreadKeepsGetsAnArrayOfItsOwn() {
    PrefixCacheScorer longer = PrefixCacheScorer.builder()
        .maxPrefixBlocksToMatch(BlockHasher.MAX_KEPT_HASHES + 10).build();
    TestCandidates.joined(longer, pool);
    InferenceRequest r = tok(tokens((BlockHasher.MAX_KEPT_HASHES + 10) * 16, 0));
    CycleState first = state();
    longer.score(r, first, pool, new double[pool.size()]);
    long[] big = arrayOf(first);
    assertThat(big).hasSize(BlockHasher.MAX_KEPT_HASHES + 10);
    first.end();
    CycleState second = state();
    longer.score(r, second, pool, new double[pool.size()]);
    assertThat(arrayOf(second)).as("not kept for reuse").isNotSameAs(big);
    assertThat(second.get(PrefixBlocks.KEY).toArray()).containsExactly(longer.blockHashes(r));
  }
}
