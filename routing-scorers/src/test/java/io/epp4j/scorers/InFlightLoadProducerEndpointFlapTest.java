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
  /**
   * The endpoint leaves, idle, after {@code afterRouting} found its counters and before it counted
   * the request on them (the hook runs the removal in exactly that gap, as the pool's thread
   * can): before, the request counted on counters the removal had dropped, so when the endpoint
   * came back while the request ran it showed no request and none of its tokens.
   */
  @Test
  void aRouteRecordedAsItsIdleEndpointLeavesCountsThereWhenItComesBack() {
    AtomicLong now = new AtomicLong();
    InFlightLoadProducer p = new InFlightLoadProducer(false, 1.5, -1, now::get, MAX_AGE);
    List<Candidate> pool = TestCandidates.pool(2);
    TestCandidates.joined(p, pool);
    Candidate a = pool.get(0);
    InferenceRequest r = TokenCostPickerTest.request(100, 10, null);
    p.lookupHook = () -> {
      p.lookupHook = null;
      p.onEndpointRemoved(a.endpoint());
    };
    p.afterRouting(r, TestCandidates.state(), TokenCostPickerTest.decision(a.endpoint()));
    assertThat(p.lookupHook).as("the removal ran in the gap").isNull();
    assertThat(p.departedLoads()).as("kept for its return").isOne();
    p.onEndpointAdded(a.endpoint());
    assertThat(p.requests(a.id())).as("counted there after its return").isEqualTo(1);
    assertThat(p.tokens(a.id())).isEqualTo(100);
    p.onComplete(r, a.endpoint(), Usage.NONE);
    assertThat(p.requests(a.id())).isZero();
    assertThat(p.tokens(a.id())).isZero();

    // the same for a P/D request's prefill pick
    Candidate b = pool.get(1);
    InferenceRequest pd = TokenCostPickerTest.request(200, 10, null);
    p.lookupHook = () -> {
      p.lookupHook = null;
      p.onEndpointRemoved(b.endpoint()); // the prefill pick, looked up first
    };
    p.afterRouting(pd, TestCandidates.state(), pdDecision(a, b));
    assertThat(p.lookupHook).isNull();
    p.onEndpointAdded(b.endpoint());
    assertThat(p.requests(b.id())).as("prefilling there after its return").isEqualTo(1);
    assertThat(p.tokens(b.id())).isEqualTo(200);
    p.onFirstToken(pd, a.endpoint());
    assertThat(p.requests(b.id())).isZero();
    p.onComplete(pd, a.endpoint(), Usage.NONE);
    assertThat(p.requests(a.id())).isZero();
  }

  /**
   * A route recorded for an endpoint that left, idle, before it: its counters are made, marked
   * away, and another thread's sweep drops them, idle still, before the request counts on them.
   * Before, the request counted on counters nobody reads; now on the endpoint's kept ones.
   */
  @Test
  void aRouteRecordedForAnEndpointThatLeftCountsThereWhenASweepRunsAsItsCountersAreMade() {
    AtomicLong now = new AtomicLong();
    InFlightLoadProducer p = new InFlightLoadProducer(false, 1.5, -1, now::get, MAX_AGE);
    List<Candidate> pool = TestCandidates.pool(1);
    TestCandidates.joined(p, pool);
    Candidate a = pool.get(0);
    p.onEndpointRemoved(a.endpoint());
    assertThat(p.trackedLoads()).isZero();
    InferenceRequest r = TokenCostPickerTest.request(100, 10, null);
    p.lookupHook = () -> {
      p.lookupHook = null;
      now.addAndGet(MAX_AGE); // a sweep is due, and runs on another thread
      p.expireOverdue();
    };
    p.afterRouting(r, TestCandidates.state(), TokenCostPickerTest.decision(a.endpoint()));
    assertThat(p.lookupHook).isNull();
    assertThat(p.requests(a.id())).as("counted while it runs").isEqualTo(1);
    p.onEndpointAdded(a.endpoint());
    assertThat(p.requests(a.id())).as("counted there after its return").isEqualTo(1);
    p.onComplete(r, a.endpoint(), Usage.NONE);
    assertThat(p.requests(a.id())).isZero();
  }

  /** A P/D decision: decode on {@code decode}, prefill on {@code prefill}. */
  private static io.epp4j.api.RoutingDecision pdDecision(Candidate decode, Candidate prefill) {
    return io.epp4j.api.RoutingDecision.routed("decode", java.util.Map.of(
        "decode", new io.epp4j.api.ProfileResult("decode", List.of(decode.endpoint())),
        PdProfileHandler.PREFILL_PROFILE, new io.epp4j.api.ProfileResult(
            PdProfileHandler.PREFILL_PROFILE, List.of(prefill.endpoint()))));
  }
}
