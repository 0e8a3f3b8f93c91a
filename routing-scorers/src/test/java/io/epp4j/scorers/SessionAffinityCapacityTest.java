package io.epp4j.scorers;

import static io.epp4j.scorers.AffinityScorersTest.decision;
import static io.epp4j.scorers.AffinityScorersTest.session;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** session-affinity-scorer at its maxSessions bound (docs: least recently used dropped first). */
class SessionAffinityCapacityTest {

  @Test
  void atTheBoundTheLeastRecentlyUsedBindingGoesNotTheNewest() {
    AtomicLong now = new AtomicLong();
    List<Candidate> pool = TestCandidates.pool(2);
    SessionAffinityScorer s = TestCandidates.joined(new SessionAffinityScorer(
        HashKeySource.SESSION, null, Duration.ofSeconds(300), 100, now::get), pool);
    // 100 dialogs of three requests each fill the bound
    for (int turn = 0; turn < 3; turn++) {
      for (int k = 0; k < 100; k++) {
        now.addAndGet(1_000_000);
        s.score(session("old" + k), TestCandidates.state(), pool, new double[2]);
        s.afterRouting(session("old" + k), TestCandidates.state(), decision(pool.get(k % 2)));
      }
    }
    // five new dialogs start, one after the other: theirs are the most recently used bindings
    for (int k = 0; k < 5; k++) {
      now.addAndGet(1_000_000);
      s.afterRouting(session("new" + k), TestCandidates.state(), decision(pool.get(1)));
    }
    for (int k = 0; k < 5; k++) {
      assertThat(s.binding("new" + k)).as("new" + k).isEqualTo(pool.get(1).id());
    }
    assertThat(s.binding("old0")).as("the least recently used").isNull();
  }
}
