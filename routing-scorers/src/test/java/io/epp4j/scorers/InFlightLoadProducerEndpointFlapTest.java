package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Usage;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * Routes recorded for an endpoint that is not in the pool (gone since the route read the pool,
 * or a fallback the gateway took outside it) count there while they run and leave nothing
 * behind once they end, however many endpoints come and go.
 */
class InFlightLoadProducerEndpointFlapTest {
  private static final long MAX_AGE = TimeUnit.MINUTES.toNanos(10);

  @Test
  void routesRecordedForEndpointsThatLeftLeaveNoCountersBehind() {
    AtomicLong now = new AtomicLong();
    InFlightLoadProducer p = new InFlightLoadProducer(false, 1.5, -1, now::get, MAX_AGE);
    List<Candidate> stays = TestCandidates.pool(1);
    TestCandidates.joined(p, stays);
    Candidate b = stays.get(0);
    for (int i = 0; i < 200; i++) {
      Candidate gone = TestCandidates.cand("10.4." + (i / 200) + "." + (i % 200 + 1) + ":8000");
      p.onEndpointAdded(gone.endpoint());
      p.onEndpointRemoved(gone.endpoint()); // idle: forgotten at once
      // a route that read the pool before the removal records after it
      InferenceRequest late = TokenCostPickerTest.request(100, 10, null);
      p.afterRouting(late, TestCandidates.state(), TokenCostPickerTest.decision(gone.endpoint()));
      assertThat(p.requests(gone.id())).as("counted while it runs").isEqualTo(1);
      // and a request falls back to an endpoint outside the pool
      InferenceRequest fellBack = TokenCostPickerTest.request(50, 5, null);
      p.afterRouting(fellBack, TestCandidates.state(), TokenCostPickerTest.decision(b.endpoint()));
      Candidate outside = TestCandidates.cand("10.5." + (i / 200) + "." + (i % 200 + 1) + ":8000");
      p.onFallback(fellBack, b.endpoint(), outside.endpoint());
      p.onComplete(late, gone.endpoint(), Usage.NONE);
      p.onComplete(fellBack, outside.endpoint(), Usage.NONE);
    }
    now.addAndGet(MAX_AGE); // a sweep is due
    p.expireOverdue();
    assertThat(p.trackedLoads()).as("only the member's counters").isEqualTo(1);
    assertThat(p.departedLoads()).isZero();
    assertThat(p.requests(b.id())).isZero();
  }

  @Test
  void anEndpointAnnouncedAfterARouteRecordedForItKeepsItsCounters() {
    AtomicLong now = new AtomicLong();
    InFlightLoadProducer p = new InFlightLoadProducer(false, 1.5, -1, now::get, MAX_AGE);
    Candidate a = TestCandidates.pool(1).get(0);
    // the router publishes the pool before it announces the new member
    InferenceRequest early = TokenCostPickerTest.request(100, 10, null);
    p.afterRouting(early, TestCandidates.state(), TokenCostPickerTest.decision(a.endpoint()));
    p.onEndpointAdded(a.endpoint());
    p.onComplete(early, a.endpoint(), Usage.NONE);
    now.addAndGet(MAX_AGE);
    p.expireOverdue();
    InferenceRequest next = TokenCostPickerTest.request(100, 10, null);
    p.afterRouting(next, TestCandidates.state(), TokenCostPickerTest.decision(a.endpoint()));
    assertThat(p.requests(a.id())).isEqualTo(1);
    assertThat(p.departedLoads()).isZero();
  }
}
