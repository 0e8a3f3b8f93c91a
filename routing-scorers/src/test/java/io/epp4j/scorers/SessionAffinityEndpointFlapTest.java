package io.epp4j.scorers;

import static io.epp4j.scorers.AffinityScorersTest.decision;
import static io.epp4j.scorers.AffinityScorersTest.session;
import static io.epp4j.scorers.TestCandidates.state;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * An endpoint that leaves the pool and comes back at the same address (a readiness probe that
 * failed under load, a discovery blip): the sessions bound there and idle meanwhile are bound
 * there again, as the router keeps the endpoint's in-flight counts; bindings of endpoints that
 * leave for good stay within {@code maxSessions} and expire with their TTL.
 */
class SessionAffinityEndpointFlapTest {
  private static SessionAffinityScorer scorer(AtomicLong now, long maxSessions) {
    return new SessionAffinityScorer(HashKeySource.SESSION, null, Duration.ofSeconds(300),
        maxSessions, now::get);
  }

  private static double[] scores(SessionAffinityScorer s, String session, List<Candidate> c) {
    double[] out = new double[c.size()];
    s.score(session(session), state(), c, out);
    return out;
  }

  @Test
  void sessionsIdleWhileTheirEndpointIsAwayAreBoundThereAgainWhenItReturns() {
    AtomicLong now = new AtomicLong();
    List<Candidate> pool = TestCandidates.pool(3);
    List<Candidate> without = pool.subList(1, 3);
    SessionAffinityScorer s = TestCandidates.joined(scorer(now, 1000), pool);
    s.afterRouting(session("idle"), state(), decision(pool.get(0)));
    s.afterRouting(session("busy"), state(), decision(pool.get(0)));

    s.onEndpointRemoved(pool.get(0).endpoint());
    assertThat(scores(s, "idle", without)).as("away: binds nothing").containsOnly(0.0);
    // a session that sends a request meanwhile goes elsewhere and is bound there
    s.afterRouting(session("busy"), state(), decision(pool.get(2)));
    // a route that read the pool before the removal and records after it changes nothing
    s.afterRouting(session("idle"), state(), decision(pool.get(0)));
    now.addAndGet(Duration.ofSeconds(5).toNanos());

    s.onEndpointAdded(pool.get(0).endpoint());
    assertThat(scores(s, "idle", pool)).containsExactly(1.0, 0.0, 0.0);
    assertThat(scores(s, "busy", pool)).containsExactly(0.0, 0.0, 1.0);
  }

  @Test
  void theFilterPinsAgainAfterAReturn() {
    AtomicLong now = new AtomicLong();
    List<Candidate> pool = TestCandidates.pool(3);
    SessionAffinityFilter f = TestCandidates.joined(new SessionAffinityFilter(scorer(now, 1000)),
        pool);
    f.afterRouting(session("u"), state(), decision(pool.get(1)));
    f.onEndpointRemoved(pool.get(1).endpoint());
    List<Candidate> without = List.of(pool.get(0), pool.get(2));
    assertThat(f.filter(session("u"), state(), without)).isEqualTo(without);
    f.onEndpointAdded(pool.get(1).endpoint());
    assertThat(f.filter(session("u"), state(), pool)).containsExactly(pool.get(1));
  }

  @Test
  void bindingsOfEndpointsThatLeaveForGoodStayWithinTheBoundAndExpire() {
    AtomicLong now = new AtomicLong();
    List<Candidate> stays = TestCandidates.pool(1);
    SessionAffinityScorer s = TestCandidates.joined(scorer(now, 100), stays);
    for (int i = 0; i < 500; i++) {
      Candidate c = TestCandidates.cand("10.2." + (i / 200) + "." + (i % 200 + 1) + ":8000");
      Endpoint e = c.endpoint();
      s.onEndpointAdded(e);
      for (int k = 0; k < 20; k++) {
        s.afterRouting(session("e" + i + "-" + k), state(), decision(c));
      }
      s.onEndpointRemoved(e);
      now.addAndGet(Duration.ofMillis(100).toNanos());
      assertThat(s.boundSessions()).isLessThanOrEqualTo(100);
    }
    assertThat(s.binding("e499-19")).as("the latest are kept for a return").isNotNull();
    s.afterRouting(session("live"), state(), decision(stays.get(0)));
    now.addAndGet(Duration.ofSeconds(301).toNanos());
    assertThat(s.boundSessions()).as("expired after their TTL").isZero();
  }
}
