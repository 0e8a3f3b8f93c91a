package io.epp4j.core;

import static io.epp4j.core.TestPlugins.ep;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * An endpoint that leaves the pool and comes back at the same address (a readiness probe that
 * failed under load, a discovery blip) while requests run there: the router's in-flight count for
 * it must go on counting those requests until they end, and their end must take off only what
 * they added.
 */
class EndpointFlapInFlightTest {
  private static final InferenceRequest REQ =
      InferenceRequest.builder().model("m").prompt("hello").maxTokens(10).build();
  private static final long TOKENS = REQ.estimatedPromptTokens() + 10L;
  private static final Endpoint A = ep("10.0.0.1:80", Map.of());

  private static Router router(AtomicLong now) {
    return Router.builder().registry(TestPlugins.registry()).ticker(now::get)
        .profile(SchedulingProfile.builder("default").build()).endpoint(A).build();
  }

  private static Candidate a(Router r) {
    return r.endpoints().stream().filter(c -> c.id().equals(A.id())).findFirst().orElseThrow();
  }

  @Test
  void requestsRunningThroughARemoveAndAddStayCountedUntilTheyEnd() {
    for (boolean bySet : new boolean[] {false, true}) {
      Router r = router(new AtomicLong(1));
      RoutingDecision before1 = r.route(REQ);
      RoutingDecision before2 = r.route(REQ);
      if (bySet) {
        r.setEndpoints(List.of());
        r.setEndpoints(List.of(A));
      } else {
        assertThat(r.removeEndpoint(A.id())).isTrue();
        assertThat(r.addEndpoint(A)).isTrue();
      }
      assertThat(a(r).inFlightRequests()).as("still running there, by set: " + bySet)
          .isEqualTo(2);
      assertThat(a(r).inFlightTokens()).isEqualTo(2 * TOKENS);
      RoutingDecision after = r.route(REQ);
      assertThat(a(r).inFlightRequests()).isEqualTo(3);
      before1.onComplete(Usage.NONE);
      before2.onFailure(new IllegalStateException("reset"));
      assertThat(a(r).inFlightRequests()).as("the one routed after the return").isEqualTo(1);
      assertThat(a(r).inFlightTokens()).isEqualTo(TOKENS);
      after.onComplete(Usage.NONE);
      assertThat(a(r).inFlightRequests()).isZero();
      assertThat(a(r).inFlightTokens()).isZero();
      r.close();
    }
  }

  @Test
  void requestsThatEndWhileTheEndpointIsAwayAreNotCountedWhenItReturns() {
    Router r = router(new AtomicLong(1));
    RoutingDecision d = r.route(REQ);
    r.removeEndpoint(A.id());
    d.onComplete(Usage.NONE);
    r.addEndpoint(A);
    assertThat(a(r).inFlightRequests()).isZero();
    assertThat(a(r).inFlightTokens()).isZero();
    r.close();
  }

  @Test
  void requestsNeverFinishedExpireFromTheCountTheEndpointCameBackWith() {
    AtomicLong now = new AtomicLong(1);
    Router r = router(now);
    r.route(REQ); // dropped by the gateway
    r.removeEndpoint(A.id());
    r.addEndpoint(A);
    assertThat(a(r).inFlightRequests()).isEqualTo(1);
    now.addAndGet(r.inFlightMaxAge().toNanos() + TimeUnit.SECONDS.toNanos(1));
    r.updateMetrics(A.id(), EndpointMetrics.UNKNOWN);
    assertThat(a(r).inFlightRequests()).isZero();
    assertThat(a(r).inFlightTokens()).isZero();
    r.close();
  }

  /**
   * The endpoint leaves while a request is routed to it, with nothing else running there (so the
   * removal finds its counters idle), and comes back while that request runs: the request counts
   * there until it ends, as one routed before the removal does.
   */
  @Test
  void aRequestRoutedWhileItsIdleEndpointLeftCountsThereWhenItReturns() {
    for (int variant = 0; variant < 3; variant++) {
      int v = variant;
      Router[] self = new Router[1];
      io.epp4j.api.Filter leaving = (request, cycle, candidates) -> {
        self[0].removeEndpoint(A.id()); // the route read the pool before this
        if (v >= 1) {
          self[0].addEndpoint(A); // back, with new counters, before the request counts
        }
        if (v == 2) {
          RoutingDecision other = self[0].route(REQ); // counted on those new counters ...
          assertThat(other.isRouted()).isTrue();
          self[0].removeEndpoint(A.id()); // ... which are kept when A leaves again
        }
        return candidates;
      };
      AtomicLong now = new AtomicLong(1);
      Router r = Router.builder().registry(TestPlugins.registry()).ticker(now::get)
          .profile(SchedulingProfile.builder("default").filter(new io.epp4j.api.Filter() {
            boolean busy;

            @Override
            public List<Candidate> filter(InferenceRequest request, io.epp4j.api.CycleState c,
                List<Candidate> candidates) {
              if (busy) {
                return candidates;
              }
              busy = true;
              try {
                return leaving.filter(request, c, candidates);
              } finally {
                busy = false;
              }
            }
          }).build()).endpoint(A).build();
      self[0] = r;
      RoutingDecision d = r.route(REQ);
      assertThat(d.primary()).isEqualTo(A);
      if (v != 1) {
        r.addEndpoint(A);
      }
      int others = v == 2 ? 1 : 0;
      assertThat(a(r).inFlightRequests()).as("variant " + v).isEqualTo(1 + others);
      assertThat(a(r).inFlightTokens()).isEqualTo((1 + others) * TOKENS);
      d.onComplete(Usage.NONE);
      assertThat(a(r).inFlightRequests()).isEqualTo(others);
      assertThat(a(r).inFlightTokens()).isEqualTo(others * TOKENS);
      r.close();
    }
  }

  /**
   * P/D with both profiles picking the same endpoint: the request counts there once per profile.
   * The endpoint leaves while the request is routed and comes back (during the route, with new
   * counters, or after it): both counts are where the endpoint counts after its return, not
   * one there and one on counters nobody reads, and the request's end takes both off.
   */
  @Test
  void bothProfileCountsOfARequestFollowItsEndpointThroughALeaveAndReturn() {
    for (int variant = 0; variant < 3; variant++) {
      int v = variant; // 0: no flap; 1: leaves and returns during the route; 2: returns after it
      Router[] self = new Router[1];
      boolean[] busy = new boolean[1];
      io.epp4j.api.Filter leaving = (request, c, candidates) -> {
        if (v == 0 || busy[0]) {
          return candidates;
        }
        busy[0] = true;
        try {
          self[0].removeEndpoint(A.id()); // the route read the pool before this
          if (v == 1) {
            self[0].addEndpoint(A); // back, with new counters, before the request counts
          }
        } finally {
          busy[0] = false;
        }
        return candidates;
      };
      io.epp4j.api.ProfileHandler pd = (request, state, runner) -> {
        runner.run("decode");
        runner.run("prefill");
        return "decode";
      };
      SchedulingProfile decode = SchedulingProfile.builder("decode").filter(leaving).build();
      SchedulingProfile prefill = SchedulingProfile.builder("prefill").build();
      Router r = Router.builder().registry(TestPlugins.registry()).ticker(new AtomicLong(1)::get)
          .config(new RouterConfig(List.of(prefill, decode), pd, Map.of(), List.of()))
          .endpoint(A).build();
      self[0] = r;
      RoutingDecision d = r.route(REQ);
      assertThat(d.primary()).isEqualTo(A);
      assertThat(d.secondaryEndpoint("prefill")).isEqualTo(A);
      if (v == 2) {
        r.addEndpoint(A);
      }
      assertThat(a(r).inFlightRequests()).as("variant " + v).isEqualTo(2);
      assertThat(a(r).inFlightTokens()).as("variant " + v).isEqualTo(2 * TOKENS);
      d.onComplete(Usage.NONE);
      assertThat(a(r).inFlightRequests()).as("variant " + v).isZero();
      assertThat(a(r).inFlightTokens()).as("variant " + v).isZero();
      r.close();
    }
  }

  /**
   * The gateway falls back to an endpoint that left the pool after the route (it was the
   * decision's fallback, and is still reachable): the request counts there, as a request routed
   * there before it left does, so an endpoint that comes back while the request runs counts it;
   * and once the request ends, nothing is kept for it.
   */
  @Test
  void aFallbackToAnEndpointThatLeftCountsThereWhenItReturns() {
    Endpoint b = ep("10.0.0.2:80", Map.of());
    for (boolean idle : new boolean[] {true, false}) {
      Router r = Router.builder().registry(TestPlugins.registry()).ticker(new AtomicLong(1)::get)
          .profile(SchedulingProfile.builder("default").picker(new MaxScorePicker(2)).build())
          .endpoints(List.of(A, b)).build();
      RoutingDecision d = r.route(REQ);
      assertThat(d.endpoints()).hasSize(2);
      Endpoint primary = d.primary();
      Endpoint fallback = d.endpoints().get(1);
      RoutingDecision other = null;
      if (!idle) {
        other = r.route(REQ, java.util.Set.of(fallback.id())); // still running there as it leaves
      }
      r.removeEndpoint(fallback.id());
      d.onFallback(fallback);
      r.addEndpoint(fallback);
      Candidate back = r.endpoints().stream().filter(c -> c.id().equals(fallback.id()))
          .findFirst().orElseThrow();
      Candidate first = r.endpoints().stream().filter(c -> c.id().equals(primary.id()))
          .findFirst().orElseThrow();
      int others = idle ? 0 : 1;
      assertThat(back.inFlightRequests()).as("idle: " + idle).isEqualTo(1 + others);
      assertThat(back.inFlightTokens()).isEqualTo((1 + others) * TOKENS);
      assertThat(first.inFlightRequests()).isZero();
      d.onComplete(Usage.NONE);
      if (other != null) {
        other.onComplete(Usage.NONE);
      }
      assertThat(back.inFlightRequests()).isZero();
      assertThat(back.inFlightTokens()).isZero();
      r.removeEndpoint(fallback.id());
      assertThat(r.departedCounters()).isZero();
      r.close();
    }
  }

  @Test
  void theCountsOfEndpointsThatLeftAreKeptOnlyWhileTheirRequestsRun() {
    Router r = router(new AtomicLong(1));
    List<RoutingDecision> running = new ArrayList<>();
    for (int i = 0; i < 1000; i++) {
      Endpoint e = ep("10.1." + (i / 250) + "." + (i % 250) + ":80", Map.of());
      r.setEndpoints(List.of(e));
      RoutingDecision d = r.route(REQ);
      assertThat(d.primary()).isEqualTo(e);
      running.add(d);
      r.setEndpoints(List.of(A)); // e leaves with its request running
      if (i >= 2) {
        running.remove(0).onComplete(Usage.NONE); // at most two are running at a time
      }
    }
    assertThat(r.departedCounters()).as("only those of the two endpoints still serving")
        .isLessThanOrEqualTo(3);
    running.forEach(d -> d.onComplete(Usage.NONE));
    r.removeEndpoint(A.id());
    assertThat(r.departedCounters()).isZero();
    r.close();
  }
}
