package io.epp4j.kvevents;

import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.candidates;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.testkit.CapturedLog;
import java.util.SplittableRandom;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;

/**
 * A tokenizer that fails may quote what it was given (a Jinja template's error, a server's
 * answer): with the scorer's FINE log turned on for debugging, the failure is logged with its
 * class and frames, and the prompt stays out of the log.
 */
class PreciseTokenizationLogTest {

  @Test
  void aTokenizersFailureIsLoggedWithoutThePrompt() {
    String secret = "my-bank-password-is-hunter2";
    Tokenizer failing = text -> {
      throw new Tokenizer.TokenizationException("cannot tokenize '" + text + "'",
          new IllegalStateException("template saw " + text));
    };
    KvBlockIndex index = KvBlockIndex.builder().build();
    Logger logger = Logger.getLogger(PrecisePrefixCacheScorer.class.getName());
    Level before = logger.getLevel();
    logger.setLevel(Level.FINE);
    try (CapturedLog log = CapturedLog.of(PrecisePrefixCacheScorer.class.getName());
        PrecisePrefixCacheScorer scorer =
            new PrecisePrefixCacheScorer(index, failing, null, 1024, false, true, false)) {
      InferenceRequest request = InferenceRequest.builder().model("m")
          .prompt("please remember " + secret).build();
      double[] scores = new double[PrecisePrefixCacheScorerTest.EPS.size()];
      scorer.score(request, new CycleState(0, new SplittableRandom(1)),
          candidates(PrecisePrefixCacheScorerTest.EPS), scores);
      assertThat(scores).as("scored as uncached").containsOnly(0.0);
      assertThat(log.text()).contains("tokenization failed")
          .contains(Tokenizer.TokenizationException.class.getName())
          .contains("Caused by: java.lang.IllegalStateException")
          .contains("PreciseTokenizationLogTest") // the frame that threw
          .doesNotContain(secret);
    } finally {
      logger.setLevel(before);
    }
  }
}
