package io.epp4j.scorers;

import static io.epp4j.scorers.AffinityScorersTest.decision;
import static io.epp4j.scorers.AffinityScorersTest.session;
import static io.epp4j.scorers.TestCandidates.state;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * no-hit-lru-scorer records cold routes from many gateway threads at once. A route takes its
 * tick of the clock and then writes it as its endpoint's stamp; another route to the same
 * endpoint that takes a later tick and writes first must not be undone by the earlier one, or
 * the endpoint that took the latest cold request ranks as less recently used than endpoints it
 * came after, and the next cold request piles onto it.
 */
class NoHitLruConcurrentStampTest {

  @Test
  void anEarlierTickWrittenLastDoesNotSetAnEndpointBackInTime() {
    List<Candidate> pool = TestCandidates.pool(3);
    NoHitLruScorer s = TestCandidates.joined(new NoHitLruScorer(), pool);
    Candidate a = pool.get(0);
    Candidate b = pool.get(1);
    // route 1 to a takes its tick; before it writes, route 2 goes to b and route 3 to a
    boolean[] interleaved = new boolean[1];
    s.stampHook = () -> {
      if (!interleaved[0]) {
        interleaved[0] = true;
        s.afterRouting(session("two"), state(), decision(b));
        s.afterRouting(session("three"), state(), decision(a));
      }
    };
    s.afterRouting(session("one"), state(), decision(a));
    s.stampHook = null;
    assertThat(interleaved[0]).isTrue();

    double[] scores = new double[3];
    s.score(session("four"), state(), pool, scores);
    // c never took a cold request (rank 0), b took one before a's last (rank 1), a is the most
    // recent (rank 2)
    assertThat(scores).containsExactly(0.0, 0.5, 1.0);
  }
}
