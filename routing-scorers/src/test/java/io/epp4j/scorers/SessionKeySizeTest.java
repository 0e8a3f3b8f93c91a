package io.epp4j.scorers;

import static io.epp4j.scorers.TestCandidates.state;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * Session keys come from clients: a binding must not keep a key of whatever size a client sends
 * (100,000 bindings of 8 KB keys, what one header line holds in common gateways, are 800 MB).
 */
class SessionKeySizeTest {

  @Test
  void aLongSessionKeyIsHeldAsABoundedDigestAndStillSticks() {
    AtomicLong now = new AtomicLong();
    List<Candidate> pool = TestCandidates.pool(3);
    SessionAffinityScorer s = TestCandidates.joined(new SessionAffinityScorer(
        HashKeySource.SESSION, null, Duration.ofSeconds(300), 1000, now::get), pool);
    String longKey = "k".repeat(8 * 1024);
    String otherLongKey = "k".repeat(8 * 1024 - 1) + "j";
    s.afterRouting(AffinityScorersTest.session(longKey), state(),
        AffinityScorersTest.decision(pool.get(2)));
    assertThat(s.storedKeyChars()).as("characters held for the binding")
        .isLessThanOrEqualTo(SessionKeys.MAX_KEY_CHARS);
    double[] scores = new double[3];
    s.score(AffinityScorersTest.session(longKey), state(), pool, scores);
    assertThat(scores).containsExactly(0.0, 0.0, 1.0);
    scores = new double[3];
    s.score(AffinityScorersTest.session(otherLongKey), state(), pool, scores);
    assertThat(scores).as("another long key").containsOnly(0.0);
    s.onRemoteSession(longKey, pool.get(0).id(), now.get());
    assertThat(s.binding(longKey)).isEqualTo(pool.get(0).id());
  }

  @Test
  void aShortKeyIsHeldAsItIs() {
    List<Candidate> pool = TestCandidates.pool(2);
    SessionAffinityScorer s = TestCandidates.joined(new SessionAffinityScorer(
        HashKeySource.SESSION, null, Duration.ofSeconds(300), 1000, () -> 0L), pool);
    s.afterRouting(AffinityScorersTest.session("alice"), state(),
        AffinityScorersTest.decision(pool.get(1)));
    assertThat(s.storedKeyChars()).isEqualTo(5);
    assertThat(s.binding("alice")).isEqualTo(pool.get(1).id());
  }

  /** token-cost-picker remembers each session's endpoint too: the same bound holds there. */
  @Test
  void tokenCostPickerHoldsALongSessionKeyAsADigestAndStillKnowsItsHome() {
    List<Candidate> pool = TokenCostPickerTest.POOL;
    TokenCostPicker p = TestCandidates.joined(
        new TokenCostPicker(1.0, 0.1, 0.0, 0, 1.25, 60), pool);
    String longKey = "k".repeat(8 * 1024);
    Candidate home = TokenCostPickerTest.route(p, TokenCostPickerTest.request(64, 4, longKey),
        TestCandidates.state(), pool);
    assertThat(p.sessionKeyChars()).as("characters held for the session")
        .isLessThanOrEqualTo(SessionKeys.MAX_KEY_CHARS);
    assertThat(p.homeOf(longKey)).isEqualTo(home.id());
  }
}
