package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Parameters;
import io.epp4j.testkit.ContractFixtures;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * no-hit-lru-scorer's {@code lruSize} as upstream reads it (llm-d's NewNoHitLRU): 0 or below is
 * the default, 1024, and there is no upper bound. epp4j refused both ("must be in [1,
 * 16777216]"), so a file upstream loads did not build a router here.
 */
class NoHitLruSizeTest {
  private static NoHitLruScorer built(Object size, List<String> notices) {
    NoHitLruScorer.Provider provider = new NoHitLruScorer.Provider();
    Parameters p = Parameters.of(Map.of("lruSize", size));
    var r = provider.create(ContractFixtures.context(provider.type()), p);
    assertThat(r.errors()).as("%s", size).isEmpty();
    notices.addAll(p.notices());
    return (NoHitLruScorer) r.value();
  }

  /** Whether the scorer still remembers the first of three endpoints that took a cold request. */
  private static boolean remembersTheFirstOfThree(NoHitLruScorer s) {
    List<Candidate> pool = TestCandidates.pool(4);
    TestCandidates.joined(s, pool);
    for (int i = 0; i < 3; i++) {
      UpstreamPluginSemanticsTest.routeCold(s, pool.get(i));
    }
    double[] scores = new double[4];
    s.score(UpstreamPluginSemanticsTest.REQ, TestCandidates.state(), pool, scores);
    return scores[0] < 1.0;
  }

  @Test
  void zeroOrBelowMeansTheDefaultWithANoticeNamingIt() {
    for (int v : new int[] {0, -7}) {
      List<String> notices = new java.util.ArrayList<>();
      NoHitLruScorer s = built(v, notices);
      assertThat(notices).as("%s", v).singleElement().asString()
          .contains("lruSize").contains(String.valueOf(v)).contains("1024");
      assertThat(remembersTheFirstOfThree(s)).as("%s", v).isTrue();
    }
  }

  @Test
  void aSizeAboveTheFormerLimitLoadsAsGiven() {
    for (Object v : new Object[] {100_000_000, 10_000_000_000L}) {
      List<String> notices = new java.util.ArrayList<>();
      NoHitLruScorer s = built(v, notices);
      assertThat(notices).as("%s", v).isEmpty();
      assertThat(remembersTheFirstOfThree(s)).as("%s", v).isTrue();
    }
    // and a small size still forgets: the size is read, not ignored
    assertThat(remembersTheFirstOfThree(built(2, new java.util.ArrayList<>()))).isFalse();
  }
}
