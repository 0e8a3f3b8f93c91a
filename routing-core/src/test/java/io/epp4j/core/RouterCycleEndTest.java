package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Rejection;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import io.epp4j.api.Usage;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The router ends each cycle's state when route returns, after every listener has run. */
class RouterCycleEndTest {
  private static final InferenceRequest REQ = RouterTest.REQ;
  private final List<String> events = new ArrayList<>();

  /** A scorer that registers an end action in every cycle it scores. */
  private final Scorer registering = new Scorer() {
    @Override
    public void score(InferenceRequest r, CycleState s, List<Candidate> c, double[] scores) {
      s.onEnd(() -> events.add("end"));
    }
  };

  @Test
  void aRoutedCycleEndsAfterEveryListenerAndBeforeRouteReturns() {
    RequestListener first = new RequestListener() {
      @Override public void afterRouting(InferenceRequest q, CycleState s, RoutingDecision d) {
        events.add("first:" + (s.ended() ? "ended" : "open"));
      }
    };
    RequestListener second = new RequestListener() {
      @Override public void afterRouting(InferenceRequest q, CycleState s, RoutingDecision d) {
        events.add("second:" + (s.ended() ? "ended" : "open"));
      }
    };
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").scorer(registering).build())
        .endpoint(Endpoint.parse("10.0.0.1:80")).listener(first).listener(second).build();
    RoutingDecision d = r.route(REQ);
    assertThat(events).hasSize(3).endsWith("end");
    assertThat(events.subList(0, 2)).as("both listeners ran while the cycle was open")
        .containsExactlyInAnyOrder("first:open", "second:open");
    d.onComplete(Usage.NONE);
    r.close();
  }

  @Test
  void aCycleThatFindsNoEndpointEndsToo() {
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").filter((q, s, c) -> {
          s.onEnd(() -> events.add("end"));
          return List.of();
        }).build())
        .endpoint(Endpoint.parse("10.0.0.1:80")).build();
    RoutingDecision d = r.route(REQ);
    assertThat(d.isRouted()).isFalse();
    assertThat(d.rejection().reason()).isEqualTo(Rejection.Reason.NO_ENDPOINTS);
    assertThat(events).containsExactly("end");
    r.close();
  }

  @Test
  void aThrowingEndActionLeavesTheDecisionRoutedAndCounted() {
    Scorer throwing = new Scorer() {
      @Override
      public void score(InferenceRequest q, CycleState s, List<Candidate> c, double[] scores) {
        s.onEnd(() -> {
          throw new IllegalStateException("end action bug");
        });
        s.onEnd(() -> events.add("end"));
      }
    };
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").scorer(throwing).build())
        .endpoint(Endpoint.parse("10.0.0.1:80")).build();
    RoutingDecision d = r.route(REQ);
    assertThat(d.isRouted()).isTrue();
    assertThat(events).as("the later action still ran").containsExactly("end");
    assertThat(r.endpoints().get(0).inFlightRequests()).isEqualTo(1);
    d.onComplete(Usage.NONE);
    assertThat(r.endpoints().get(0).inFlightRequests()).isZero();
    r.close();
  }
}
