package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

/**
 * An endpoint that leaves the pool and comes back at the same address (a readiness probe that
 * failed under load, a discovery blip) while requests the picker sent there still run: they go
 * on counting there until they end, their end takes off only what they added, the sessions at
 * home there keep their home, and the counters of an endpoint that stays away are dropped once
 * nothing counts on them.
 */
class TokenCostPickerEndpointFlapTest {
  private static final Endpoint A = Endpoint.of("10.0.0.1", 8000);
  private static final Endpoint B = Endpoint.of("10.0.0.2", 8000);

  /** A prompt of {@code tokens} tokens that shares no prefix with another {@code fill}'s. */
  private static InferenceRequest request(int fill, int tokens, int maxTokens,
      @Nullable String session) {
    int[] ids = new int[tokens];
    Arrays.fill(ids, fill);
    return InferenceRequest.builder().model("m").tokenIds(ids).maxTokens(maxTokens)
        .sessionKey(session).build();
  }

  private static Router epp4j(List<Endpoint> pool, AtomicLong now) {
    return Router.builder().endpoints(pool).randomSeed(1).ticker(now::get)
        .configYaml(Epp4jPreset.yaml(), Epp4jPreset.NAME).build();
  }

  private static TokenCostPicker picker(Router r) {
    return (TokenCostPicker) r.config().plugins().get(TokenCostPicker.TYPE);
  }

  @Test
  void requestsRunningThroughTheirEndpointsLeaveAndReturnStillCountThere() {
    AtomicLong now = new AtomicLong();
    try (Router r = epp4j(List.of(A), now)) {
      TokenCostPicker p = picker(r);
      RoutingDecision before = r.route(request(1, 700, 50, "s"));
      assertThat(before.primary()).isEqualTo(A);
      assertThat(p.pendingTokens(A.id())).isEqualTo(700);

      r.removeEndpoint(A.id());
      assertThat(p.departedLoads()).isEqualTo(1);
      r.addEndpoint(A);
      assertThat(p.pendingTokens(A.id())).as("still prefilling there").isEqualTo(700);
      assertThat(p.decodeTokens(A.id())).isEqualTo(50);
      assertThat(p.homeOf("s")).as("back within the session's TTL").isEqualTo(A.id());
      assertThat(p.sessions(A.id())).isEqualTo(1);
      assertThat(p.departedLoads()).isZero();

      // one routed after the return adds to the same counters
      RoutingDecision after = r.route(request(2, 300, 20, "t"));
      assertThat(after.primary()).isEqualTo(A);
      assertThat(p.pendingTokens(A.id())).isEqualTo(1000);
      assertThat(p.decodeTokens(A.id())).isEqualTo(70);

      // the one from before ends: it takes off only what it added
      before.onFirstToken();
      assertThat(p.pendingTokens(A.id())).isEqualTo(300);
      before.onComplete(Usage.NONE);
      assertThat(p.decodeTokens(A.id())).isEqualTo(20);

      // a setEndpoints round trip does the same
      r.setEndpoints(List.of());
      r.setEndpoints(List.of(A));
      assertThat(p.pendingTokens(A.id())).isEqualTo(300);
      assertThat(p.decodeTokens(A.id())).isEqualTo(20);
      after.onComplete(Usage.NONE);
      assertThat(p.pendingTokens(A.id())).isZero();
      assertThat(p.decodeTokens(A.id())).isZero();
      assertThat(p.sessions(A.id())).isEqualTo(2);
      assertThat(p.pendingRequests()).isZero();
    }
  }

  @Test
  void requestsThatEndWhileTheirEndpointIsAwayTakeNothingOffTheOnesAfterItsReturn() {
    AtomicLong now = new AtomicLong();
    try (Router r = epp4j(List.of(A), now)) {
      TokenCostPicker p = picker(r);
      RoutingDecision early = r.route(request(1, 400, 40, null));
      r.removeEndpoint(A.id());
      early.onComplete(Usage.NONE); // ends while A is away: nothing kept for it
      assertThat(p.departedLoads()).isZero();
      r.addEndpoint(A);
      RoutingDecision late = r.route(request(2, 300, 30, null));
      assertThat(p.pendingTokens(A.id())).isEqualTo(300);
      early.onComplete(Usage.NONE); // a second end reaches nothing
      assertThat(p.pendingTokens(A.id())).isEqualTo(300);
      assertThat(p.decodeTokens(A.id())).isEqualTo(30);
      late.onComplete(Usage.NONE);
      assertThat(p.pendingTokens(A.id())).isZero();
      assertThat(p.decodeTokens(A.id())).isZero();
    }
  }

  @Test
  void anEndpointThatLeavesForGoodIsForgottenOnceNothingCountsOnIt() {
    AtomicLong now = new AtomicLong();
    try (Router r = epp4j(List.of(A), now)) {
      TokenCostPicker p = picker(r);
      RoutingDecision running = r.route(request(1, 500, 10, null));
      RoutingDecision session = r.route(request(3, 100, 5, "s"));
      r.addEndpoint(B);
      r.removeEndpoint(A.id());
      assertThat(p.departedLoads()).isEqualTo(1);
      running.onComplete(Usage.NONE);
      session.onComplete(Usage.NONE);
      // a session still at home there keeps the counters until it is idle for its TTL (120 s)
      assertThat(p.departedLoads()).isEqualTo(1);
      assertThat(p.homeOf("s")).isEqualTo(A.id());
      now.set(TimeUnit.SECONDS.toNanos(121));
      r.route(request(4, 100, 5, "u")).onComplete(Usage.NONE); // sweeps idle sessions
      assertThat(p.homeOf("s")).isNull();
      assertThat(p.departedLoads()).isZero();
      assertThat(p.pendingRequests()).isZero();

      // many endpoints leave for good while serving: none is kept once its requests end
      for (int i = 0; i < 200; i++) {
        Endpoint e = Endpoint.of("10.1.0." + (i + 1), 8000);
        r.setEndpoints(List.of(e));
        RoutingDecision d = r.route(request(10 + i, 100, 5, null));
        r.setEndpoints(List.of(B));
        assertThat(p.departedLoads()).as("kept while it serves").isEqualTo(1);
        d.onComplete(Usage.NONE);
      }
      assertThat(p.departedLoads()).isZero();
    }
  }

  /**
   * The endpoint leaves between the pick and {@code afterRouting} while an earlier request of
   * its is still running: the router counts the new request on the counters it keeps for the
   * endpoint's return, and so does the picker, so after the return both requests count there and
   * their ends leave nothing behind. When nothing counted on the endpoint as it left, counters are
   * kept for the request alone: it counts there if the endpoint comes back while it runs, and
   * they go when it ends.
   */
  @Test
  void aRouteRecordedAfterItsEndpointLeftCountsOnTheCountersKeptForItsReturn() {
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(2);
    TokenCostPicker p = TestCandidates.joined(TokenCostPicker.create(), pool);
    io.epp4j.api.Candidate a = pool.get(0);
    InferenceRequest earlier = TokenCostPickerTest.request(400, 40, null);
    TokenCostPickerTest.route(p, earlier, TestCandidates.state(), List.of(a));

    InferenceRequest late = TokenCostPickerTest.request(300, 30, "s");
    io.epp4j.api.CycleState s = TestCandidates.state();
    assertThat(p.pick(late, s, List.of(a), new double[1]).get(0)).isEqualTo(a);
    p.onEndpointRemoved(a.endpoint());
    p.afterRouting(late, s, TokenCostPickerTest.decision(a.endpoint()));
    p.onEndpointAdded(a.endpoint());
    assertThat(p.pendingTokens(a.id())).as("both still prefill there").isEqualTo(700);
    assertThat(p.decodeTokens(a.id())).isEqualTo(70);
    assertThat(p.homeOf("s")).isEqualTo(a.id());

    p.onComplete(earlier, a.endpoint(), Usage.NONE);
    p.onComplete(late, a.endpoint(), Usage.NONE);
    assertThat(p.pendingTokens(a.id())).isZero();
    assertThat(p.decodeTokens(a.id())).isZero();
    assertThat(p.pendingRequests()).isZero();

    // nothing counts on it as it leaves: its counters go, and the late request is kept on
    // counters made for the endpoint's return, as the router keeps its count of it
    TokenCostPicker fresh = TestCandidates.joined(TokenCostPicker.create(), pool);
    InferenceRequest alone = TokenCostPickerTest.request(200, 20, null);
    io.epp4j.api.CycleState s2 = TestCandidates.state();
    fresh.pick(alone, s2, List.of(a), new double[1]);
    fresh.onEndpointRemoved(a.endpoint());
    assertThat(fresh.departedLoads()).isZero();
    fresh.afterRouting(alone, s2, TokenCostPickerTest.decision(a.endpoint()));
    assertThat(fresh.pendingRequests()).isOne();
    assertThat(fresh.departedLoads()).isOne();
    fresh.onEndpointAdded(a.endpoint());
    assertThat(fresh.pendingTokens(a.id())).as("prefilling there after its return").isEqualTo(200);
    assertThat(fresh.decodeTokens(a.id())).isEqualTo(20);
    assertThat(fresh.departedLoads()).isZero();
    fresh.onComplete(alone, a.endpoint(), Usage.NONE);
    assertThat(fresh.pendingTokens(a.id())).isZero();
    assertThat(fresh.decodeTokens(a.id())).isZero();
    assertThat(fresh.pendingRequests()).isZero();

    // and when it stays away, those counters go once the request ends
    InferenceRequest gone = TokenCostPickerTest.request(100, 10, null);
    io.epp4j.api.CycleState s3 = TestCandidates.state();
    fresh.pick(gone, s3, List.of(a), new double[1]);
    fresh.onEndpointRemoved(a.endpoint());
    assertThat(fresh.departedLoads()).isZero();
    fresh.afterRouting(gone, s3, TokenCostPickerTest.decision(a.endpoint()));
    assertThat(fresh.departedLoads()).isOne();
    fresh.onFailure(gone, a.endpoint(), new RuntimeException("refused"));
    assertThat(fresh.departedLoads()).isZero();
    assertThat(fresh.pendingRequests()).isZero();
  }

  /**
   * The gateway falls back from an endpoint that has just left the pool (it failed its readiness
   * probe, and now refuses the connection): the request's work and its session's home move to
   * the fallback, and nothing is kept for the endpoint that left.
   */
  @Test
  void aFallbackAwayFromAnEndpointThatLeftTakesTheSessionAlong() {
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(2);
    TokenCostPicker p = TestCandidates.joined(TokenCostPicker.create(), pool);
    io.epp4j.api.Candidate a = pool.get(0);
    io.epp4j.api.Candidate b = pool.get(1);
    InferenceRequest r = TokenCostPickerTest.request(300, 30, "s");
    TokenCostPickerTest.route(p, r, TestCandidates.state(), List.of(a));
    p.onEndpointRemoved(a.endpoint());
    assertThat(p.departedLoads()).isEqualTo(1);
    p.onFallback(r, a.endpoint(), b.endpoint());
    assertThat(p.pendingTokens(b.id())).isEqualTo(300);
    assertThat(p.homeOf("s")).isEqualTo(b.id());
    assertThat(p.sessions(b.id())).isEqualTo(1);
    assertThat(p.departedLoads()).as("nothing counts on the one that left").isZero();
    p.onComplete(r, b.endpoint(), Usage.NONE);
    assertThat(p.pendingTokens(b.id())).isZero();
  }

  /**
   * The gateway falls back to an endpoint that left the pool after the route (a readiness flap:
   * still reachable): the request's work counts on the counters kept for that endpoint's
   * return, as the router counts it there, so it counts if the endpoint comes back while the
   * request runs; the session stays where it was, and nothing is kept once the request ends.
   */
  @Test
  void aFallbackToAnEndpointThatLeftCountsThereWhenItReturns() {
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(2);
    TokenCostPicker p = TestCandidates.joined(TokenCostPicker.create(), pool);
    io.epp4j.api.Candidate a = pool.get(0);
    io.epp4j.api.Candidate b = pool.get(1);
    InferenceRequest r = TokenCostPickerTest.request(300, 30, "s");
    TokenCostPickerTest.route(p, r, TestCandidates.state(), List.of(a));
    p.onEndpointRemoved(b.endpoint());
    assertThat(p.departedLoads()).as("nothing counted on it as it left").isZero();
    p.onFallback(r, a.endpoint(), b.endpoint());
    assertThat(p.pendingTokens(a.id())).isZero();
    assertThat(p.decodeTokens(a.id())).isZero();
    assertThat(p.homeOf("s")).as("a session is not placed on an endpoint away").isEqualTo(a.id());
    p.onEndpointAdded(b.endpoint());
    assertThat(p.pendingTokens(b.id())).as("prefilling there after its return").isEqualTo(300);
    assertThat(p.decodeTokens(b.id())).isEqualTo(30);
    p.onComplete(r, b.endpoint(), Usage.NONE);
    assertThat(p.pendingTokens(b.id())).isZero();
    assertThat(p.decodeTokens(b.id())).isZero();
    assertThat(p.pendingRequests()).isZero();

    // when it stays away, its counters go once the request ends
    InferenceRequest gone = TokenCostPickerTest.request(200, 20, null);
    TokenCostPickerTest.route(p, gone, TestCandidates.state(), List.of(a));
    p.onEndpointRemoved(b.endpoint());
    p.onFallback(gone, a.endpoint(), b.endpoint());
    assertThat(p.departedLoads()).isOne();
    p.onFailure(gone, b.endpoint(), new RuntimeException("reset"));
    assertThat(p.departedLoads()).isZero();
    assertThat(p.pendingTokens(a.id())).isZero();
  }

  /**
   * Routes and ends on four threads while one endpoint leaves and comes back over and over on
   * another: once everything has ended, no counter is off or negative, no session counts twice
   * and nothing is kept for a departure.
   */
  @Test
  void flappingWhileRoutingLeavesEveryCounterExact() throws Exception {
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(3);
    TokenCostPicker p = TestCandidates.joined(TokenCostPicker.create(), pool);
    Endpoint flapping = pool.get(0).endpoint();
    java.util.concurrent.atomic.AtomicBoolean done = new java.util.concurrent.atomic.AtomicBoolean();
    Thread flapper = new Thread(() -> {
      while (!done.get()) {
        p.onEndpointRemoved(flapping);
        Thread.onSpinWait();
        p.onEndpointAdded(flapping);
      }
    });
    flapper.start();
    try {
      TokenCostPickerTest.onThreads(4, 3000, (seed, k, rnd) -> {
        InferenceRequest r = TokenCostPickerTest.request(64, 4, "s" + rnd.nextInt(40));
        io.epp4j.api.Candidate c = TokenCostPickerTest.route(p, r,
            TestCandidates.state(k, seed * 100_000L + k), pool);
        if (rnd.nextBoolean()) {
          p.onFirstToken(r, c.endpoint());
        }
        p.onComplete(r, c.endpoint(), new Usage(64, 0, 4));
      });
    } finally {
      done.set(true);
      flapper.join();
    }
    int counted = 0;
    for (io.epp4j.api.Candidate c : pool) {
      assertThat(p.pendingTokens(c.id())).isZero();
      assertThat(p.decodeTokens(c.id())).isZero();
      assertThat(p.sessions(c.id())).isNotNegative();
      counted += p.sessions(c.id());
    }
    assertThat(counted).isEqualTo(p.trackedSessions());
    assertThat(p.pendingRequests()).isZero();
    assertThat(p.departedLoads()).isZero();
  }
  /** A P/D decision: decode on {@code decode}, prefill on {@code prefill}. */
  private static RoutingDecision pd(Endpoint decode, Endpoint prefill) {
    return RoutingDecision.routed("decode", java.util.Map.of(
        "decode", new io.epp4j.api.ProfileResult("decode", List.of(decode)),
        PdProfileHandler.PREFILL_PROFILE,
        new io.epp4j.api.ProfileResult(PdProfileHandler.PREFILL_PROFILE, List.of(prefill))));
  }

  /**
   * P/D: the prefill endpoint's counters are dropped, idle, between their lookup and the count of
   * the request's prefill on them (the hook runs a pool change or another route's sweep in
   * exactly that gap, as another thread can). Before, the prefill was counted on counters nobody
   * read: when the prefill endpoint came back while it computed the prompt, the picker saw no
   * pending prefill there. Now the count is made again on the endpoint's counters as they are.
   */
  @Test
  void thePrefillOfARequestCountsOnItsEndpointWhenItsCountersAreDroppedAsTheyAreLookedUp() {
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(2);
    io.epp4j.api.Candidate a = pool.get(0);
    io.epp4j.api.Candidate b = pool.get(1);

    // the prefill endpoint leaves, idle, right after its counters were looked up
    TokenCostPicker p = TestCandidates.joined(TokenCostPicker.create(), pool);
    InferenceRequest r = TokenCostPickerTest.request(300, 30, null);
    io.epp4j.api.CycleState s = TestCandidates.state();
    p.pick(r, s, List.of(b), new double[1]); // prefill profile
    p.pick(r, s, List.of(a), new double[1]); // decode profile
    int[] lookups = new int[1];
    p.lookupHook = () -> {
      if (++lookups[0] == 1) { // the prefill endpoint's, looked up first
        p.onEndpointRemoved(b.endpoint());
      }
    };
    p.afterRouting(r, s, pd(a.endpoint(), b.endpoint()));
    p.lookupHook = null;
    assertThat(lookups[0]).as("both endpoints were looked up").isGreaterThanOrEqualTo(2);
    p.onEndpointAdded(b.endpoint());
    assertThat(p.pendingTokens(b.id())).as("prefilling there after its return").isEqualTo(300);
    p.onFirstToken(r, a.endpoint());
    assertThat(p.pendingTokens(b.id())).isZero();
    p.onComplete(r, a.endpoint(), Usage.NONE);
    assertThat(p.pendingRequests()).isZero();
  }

  /**
   * The same when the prefill endpoint left idle before the route: counters are made for its
   * return, and another route's sweep drops them, idle still, before the prefill is counted on
   * them.
   */
  @Test
  void thePrefillOfARequestCountsOnCountersKeptForItsEndpointWhenASweepDropsThemAsTheyAreMade() {
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(2);
    io.epp4j.api.Candidate a = pool.get(0);
    io.epp4j.api.Candidate b = pool.get(1);
    TokenCostPicker q = TestCandidates.joined(TokenCostPicker.create(), pool);
    q.onEndpointRemoved(b.endpoint());
    assertThat(q.departedLoads()).isZero();
    InferenceRequest first = TokenCostPickerTest.request(100, 10, null);
    TokenCostPickerTest.route(q, first, TestCandidates.state(0, 1), List.of(a)); // starts sweeps
    // r2's own sweep runs at late, before its lookups; the other route's is due an eighth of
    // the maximum age after that
    long late = q.pendingMaxAgeNanos;
    InferenceRequest other = TokenCostPickerTest.request(100, 10, null);
    io.epp4j.api.CycleState os = TestCandidates.state(2 * late, 2);
    q.pick(other, os, List.of(a), new double[1]);
    InferenceRequest r2 = TokenCostPickerTest.request(300, 30, null);
    io.epp4j.api.CycleState s2 = TestCandidates.state(late, 3);
    q.pick(r2, s2, List.of(b), new double[1]);
    q.pick(r2, s2, List.of(a), new double[1]);
    int[] calls = new int[1];
    q.lookupHook = () -> {
      if (++calls[0] == 1) { // the prefill endpoint's, looked up first
        q.lookupHook = null;
        q.afterRouting(other, os, TokenCostPickerTest.decision(a.endpoint()));
      }
    };
    q.afterRouting(r2, s2, pd(a.endpoint(), b.endpoint()));
    q.lookupHook = null;
    assertThat(calls[0]).isOne();
    assertThat(q.departedLoads()).as("kept for the prefill endpoint's return").isOne();
    q.onEndpointAdded(b.endpoint());
    assertThat(q.pendingTokens(b.id())).as("prefilling there after its return").isEqualTo(300);
    q.onComplete(r2, a.endpoint(), Usage.NONE);
    assertThat(q.pendingTokens(b.id())).isZero();
  }

  /**
   * The gateway falls back to an endpoint whose counters are dropped, idle, between their lookup
   * and the move of the request's work onto them (the hook runs the pool change in exactly that
   * gap, as another thread can). Before, the work was moved onto counters nobody read and then
   * taken off altogether: the request counted nowhere although the fallback served it, and its
   * session stayed on the endpoint that had failed. Now the move is made again on the
   * fallback's counters as they are.
   */
  @Test
  void aFallbackCountsOnItsEndpointWhenItsCountersAreDroppedAsTheyAreLookedUp() {
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(3);
    io.epp4j.api.Candidate a = pool.get(0);
    io.epp4j.api.Candidate b = pool.get(1);
    io.epp4j.api.Candidate c = pool.get(2);

    // the fallback flaps (leaves idle and comes back with new counters) in the gap
    TokenCostPicker p = TestCandidates.joined(TokenCostPicker.create(), pool);
    InferenceRequest r = TokenCostPickerTest.request(300, 30, "t");
    TokenCostPickerTest.route(p, r, TestCandidates.state(), List.of(b));
    int[] lookups = new int[1];
    p.lookupHook = () -> {
      if (++lookups[0] == 1) {
        p.onEndpointRemoved(c.endpoint());
        p.onEndpointAdded(c.endpoint());
      }
    };
    p.onFallback(r, b.endpoint(), c.endpoint());
    p.lookupHook = null;
    assertThat(lookups[0]).as("the fallback's counters were looked up").isPositive();
    assertThat(p.pendingTokens(c.id())).as("prefilling on the fallback").isEqualTo(300);
    assertThat(p.decodeTokens(c.id())).isEqualTo(30);
    assertThat(p.pendingTokens(b.id())).isZero();
    assertThat(p.decodeTokens(b.id())).isZero();
    assertThat(p.homeOf("t")).as("the session goes with it").isEqualTo(c.id());
    assertThat(p.sessions(c.id())).isOne();
    assertThat(p.sessions(b.id())).isZero();
    p.onFirstToken(r, c.endpoint());
    assertThat(p.pendingTokens(c.id())).isZero();
    p.onComplete(r, c.endpoint(), Usage.NONE);
    assertThat(p.decodeTokens(c.id())).isZero();
    assertThat(p.pendingRequests()).isZero();
    assertThat(p.departedLoads()).isZero();

    // the fallback leaves idle in the gap and stays away: counters are kept for its return
    TokenCostPicker q = TestCandidates.joined(TokenCostPicker.create(), pool);
    InferenceRequest r2 = TokenCostPickerTest.request(200, 20, "u");
    TokenCostPickerTest.route(q, r2, TestCandidates.state(), List.of(a));
    q.lookupHook = () -> q.onEndpointRemoved(c.endpoint());
    q.onFallback(r2, a.endpoint(), c.endpoint());
    q.lookupHook = null;
    assertThat(q.pendingRequests()).isOne();
    assertThat(q.pendingTokens(a.id())).isZero();
    assertThat(q.departedLoads()).as("kept for the fallback's return").isOne();
    assertThat(q.homeOf("u")).as("not placed on an endpoint away").isEqualTo(a.id());
    q.onEndpointAdded(c.endpoint());
    assertThat(q.pendingTokens(c.id())).as("prefilling there after its return").isEqualTo(200);
    assertThat(q.decodeTokens(c.id())).isEqualTo(20);
    q.onComplete(r2, c.endpoint(), Usage.NONE);
    assertThat(q.pendingTokens(c.id())).isZero();
    assertThat(q.decodeTokens(c.id())).isZero();
  }

  /**
   * The same when the fallback left idle before: counters are made for its return, and another
   * route's sweep drops them, idle still, before the work is moved onto them.
   */
  @Test
  void aFallbackCountsOnCountersKeptForItsEndpointWhenASweepDropsThemAsTheyAreMade() {
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(3);
    io.epp4j.api.Candidate a = pool.get(0);
    io.epp4j.api.Candidate b = pool.get(1);
    io.epp4j.api.Candidate c = pool.get(2);
    TokenCostPicker q = TestCandidates.joined(TokenCostPicker.create(), pool);
    q.onEndpointRemoved(c.endpoint());
    assertThat(q.departedLoads()).isZero();
    // the first route arms the sweeps; the other route's is due an eighth of the maximum age on
    long late = q.pendingMaxAgeNanos;
    InferenceRequest r = TokenCostPickerTest.request(300, 30, null);
    TokenCostPickerTest.route(q, r, TestCandidates.state(0, 1), List.of(b));
    InferenceRequest other = TokenCostPickerTest.request(100, 10, null);
    io.epp4j.api.CycleState os = TestCandidates.state(late, 2);
    q.pick(other, os, List.of(a), new double[1]);
    int[] calls = new int[1];
    q.lookupHook = () -> {
      if (++calls[0] == 1) {
        q.afterRouting(other, os, TokenCostPickerTest.decision(a.endpoint()));
      }
    };
    q.onFallback(r, b.endpoint(), c.endpoint());
    q.lookupHook = null;
    assertThat(calls[0]).isPositive();
    assertThat(q.pendingTokens(b.id())).isZero();
    assertThat(q.departedLoads()).as("kept for the fallback's return").isOne();
    q.onEndpointAdded(c.endpoint());
    assertThat(q.pendingTokens(c.id())).as("prefilling there after its return").isEqualTo(300);
    assertThat(q.decodeTokens(c.id())).isEqualTo(30);
    q.onComplete(r, c.endpoint(), Usage.NONE);
    assertThat(q.pendingTokens(c.id())).isZero();
    assertThat(q.pendingRequests()).as("the other route's still runs").isOne();
  }

  /**
   * Another router places a session on an endpoint that leaves idle and comes back with new
   * counters between their lookup and the record (the hook runs the flap in exactly that gap).
   * Before, the session was recorded on the dropped counters and then forgotten, although its
   * endpoint was in the pool; now it is placed on the endpoint's counters as they are.
   */
  @Test
  void aRemoteSessionIsPlacedOnItsEndpointWhenItsCountersAreDroppedAsTheyAreLookedUp() {
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(2);
    io.epp4j.api.Candidate a = pool.get(0);
    io.epp4j.api.Candidate b = pool.get(1);
    TokenCostPicker p = TestCandidates.joined(TokenCostPicker.create(), pool);
    // the session's home was b: it moves to a, and is counted once
    TokenCostPickerTest.route(p, TokenCostPickerTest.request(100, 10, "w"),
        TestCandidates.state(), List.of(b));
    assertThat(p.homeOf("w")).isEqualTo(b.id());
    int[] lookups = new int[1];
    p.lookupHook = () -> {
      if (++lookups[0] == 1) {
        p.onEndpointRemoved(a.endpoint());
        p.onEndpointAdded(a.endpoint());
      }
    };
    p.onRemoteSession("w", a.id(), 1);
    p.lookupHook = null;
    assertThat(lookups[0]).isPositive();
    assertThat(p.homeOf("w")).isEqualTo(a.id());
    assertThat(p.sessions(a.id())).isOne();
    assertThat(p.sessions(b.id())).isZero();
    assertThat(p.trackedSessions()).isOne();
  }

  /**
   * A fallback of a request this picker holds no work for (it ended, or another picker chose)
   * still takes the session's home along; the fallback flaps in the gap between the lookup of
   * its counters and the move. Before, the session stayed on the endpoint that had failed,
   * although the fallback was back in the pool; it now moves to the fallback's counters as they
   * are, and stays where it was when the fallback stays away.
   */
  @Test
  void aSessionFollowsAFallbackWhoseCountersAreDroppedAsTheyAreLookedUp() {
    List<io.epp4j.api.Candidate> pool = TestCandidates.pool(3);
    io.epp4j.api.Candidate a = pool.get(0);
    io.epp4j.api.Candidate c = pool.get(2);
    TokenCostPicker p = TestCandidates.joined(TokenCostPicker.create(), pool);
    InferenceRequest first = TokenCostPickerTest.request(100, 10, "s");
    TokenCostPickerTest.route(p, first, TestCandidates.state(), List.of(a));
    p.onComplete(first, a.endpoint(), Usage.NONE);
    InferenceRequest next = TokenCostPickerTest.request(100, 10, "s");
    int[] lookups = new int[1];
    p.lookupHook = () -> {
      if (++lookups[0] == 1) {
        p.onEndpointRemoved(c.endpoint());
        p.onEndpointAdded(c.endpoint());
      }
    };
    p.onFallback(next, a.endpoint(), c.endpoint());
    p.lookupHook = null;
    assertThat(lookups[0]).isPositive();
    assertThat(p.homeOf("s")).isEqualTo(c.id());
    assertThat(p.sessions(c.id())).isOne();
    assertThat(p.sessions(a.id())).isZero();
    assertThat(p.pendingRequests()).isZero();

    // the fallback leaves in the gap and stays away: the session stays where it was
    p.lookupHook = () -> p.onEndpointRemoved(a.endpoint());
    p.onFallback(next, c.endpoint(), a.endpoint());
    p.lookupHook = null;
    assertThat(p.homeOf("s")).isEqualTo(c.id());
    assertThat(p.sessions(c.id())).isOne();
    assertThat(p.trackedSessions()).isOne();
    assertThat(p.departedLoads()).isZero();
  }
}
