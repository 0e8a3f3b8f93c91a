package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;

import io.epp4j.api.Candidate;
import io.epp4j.api.InferenceRequest;
import java.util.List;
import org.junit.jupiter.api.Test;

/** PrefixCacheScorer.Builder and block sizes whose text block (4 characters a token) overflows. */
class PrefixCacheScorerBlockSizeTest {

  @Test
  void aBlockSizeTheBuilderAcceptsScoresTextPrompts() {
    PrefixCacheScorer s;
    try {
      s = PrefixCacheScorer.builder().blockSizeTokens(1 << 30).build();
    } catch (IllegalArgumentException refused) {
      assertThat(refused).hasMessageContaining("blockSizeTokens");
      return;
    }
    List<Candidate> pool = TestCandidates.pool(2);
    TestCandidates.joined(s, pool);
    InferenceRequest r = InferenceRequest.completion("m", "hello world");
    PrefixCacheScorer accepted = s;
    assertThatCode(() -> accepted.score(r, TestCandidates.state(), pool, new double[2]))
        .doesNotThrowAnyException();
  }
}
