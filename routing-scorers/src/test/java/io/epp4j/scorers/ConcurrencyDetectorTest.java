package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.within;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Rejection;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** {@code concurrency-detector}: llm-d's saturation detector and filter by in-flight counts. */
class ConcurrencyDetectorTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"));

  static Router router(String detector, boolean asFilter) {
    return Router.builder().endpoints(POOL).randomSeed(3).configYaml("""
        flowControl:
          saturationDetector: {pluginRef: concurrency-detector}
        plugins:
        - type: concurrency-detector
          parameters: %s
        - type: queue-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [%s{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
        """.formatted(detector, asFilter ? "{pluginRef: concurrency-detector}, " : ""),
        "c.yaml").build();
  }

  static InferenceRequest request(int priority, int tokens) {
    return InferenceRequest.builder().model("m").tokenIds(new int[tokens]).priority(priority)
        .build();
  }

  @Test
  void thePoolIsSaturatedWhenItsRequestsInFlightReachTheCapacityAndSheddableOnesAreShed() {
    try (Router r = router("{maxConcurrency: 2}", false)) {
      List<RoutingDecision> open = new ArrayList<>();
      for (int i = 0; i < 4; i++) {
        open.add(r.route(request(0, 100)));
      }
      assertThat(r.poolSaturation()).isCloseTo(1.0, within(1e-12)); // 4 of 2 x 2
      RoutingDecision shed = r.route(request(-1, 100));
      assertThat(shed.rejection()).isNotNull();
      assertThat(shed.rejection().reason()).isEqualTo(Rejection.Reason.SHED);
      // a request that is not sheddable is routed all the same
      RoutingDecision kept = r.route(request(0, 100));
      assertThat(kept.isRouted()).isTrue();
      kept.onComplete(Usage.NONE);
      open.remove(0).onComplete(Usage.NONE);
      assertThat(r.poolSaturation()).isCloseTo(0.75, within(1e-12));
      assertThat(r.route(request(-1, 100)).isRouted()).isTrue();
    }
  }

  @Test
  void anEndpointWhoseEngineSleepsCountsAsFullNotAsIdleCapacity() {
    // the sleeping endpoint takes no request, so both go to the awake one, which is then full;
    // counted as two free slots, the sleeping one kept the pool at half and sheddable requests
    // kept piling onto the full endpoint
    for (String mode : List.of("{maxConcurrency: 2}",
        "{concurrencyMode: tokens, maxTokenConcurrency: 200}",
        "{concurrencyMode: hybrid, maxConcurrency: 2, maxTokenConcurrency: 200}")) {
      try (Router r = router(mode, false)) {
        r.updateMetrics(java.util.Map.of(POOL.get(1).id(),
            io.epp4j.api.EndpointMetrics.builder().asleep(true).build()));
        assertThat(r.poolSaturation()).as(mode).isCloseTo(0.5, within(1e-12));
        RoutingDecision a = r.route(request(0, 100));
        RoutingDecision b = r.route(request(0, 100));
        assertThat(a.primary().id()).isEqualTo(b.primary().id()).isEqualTo(POOL.get(0).id());
        assertThat(r.poolSaturation()).as(mode).isCloseTo(1.0, within(1e-12));
        RoutingDecision shed = r.route(request(-1, 100));
        assertThat(shed.rejection()).as(mode).isNotNull();
        assertThat(shed.rejection().reason()).isEqualTo(Rejection.Reason.SHED);
      }
    }
  }

  @Test
  void tokensModeCountsPromptsUntilTheirFirstToken() {
    try (Router r = router("{concurrencyMode: tokens, maxTokenConcurrency: 1000}", false)) {
      RoutingDecision d = r.route(request(0, 1000));
      assertThat(r.poolSaturation()).isCloseTo(0.5, within(1e-12)); // 1,000 of 2 x 1,000
      d.onFirstToken();
      assertThat(r.poolSaturation()).isZero();
    }
  }

  @Test
  void hybridModeAveragesEachEndpointsLargerRatio() {
    try (Router r = router("{concurrencyMode: hybrid, maxConcurrency: 4,"
        + " maxTokenConcurrency: 1000}", false)) {
      r.route(request(0, 800)); // one endpoint: 1/4 requests, 0.8 tokens
      assertThat(r.poolSaturation()).isCloseTo(0.8 / 2, within(1e-12));
    }
  }

  @Test
  void asAFilterItDropsEndpointsAtTheirLimitWithHeadroom() {
    try (Router r = router("{maxConcurrency: 2, headroom: 0.5}", true)) {
      // limit 3 requests an endpoint; six fill both, the seventh finds none
      for (int i = 0; i < 6; i++) {
        assertThat(r.route(request(0, 10)).isRouted()).isTrue();
      }
      RoutingDecision none = r.route(request(0, 10));
      assertThat(none.rejection()).isNotNull();
      assertThat(none.rejection().reason()).isEqualTo(Rejection.Reason.NO_ENDPOINTS);
    }
  }

  /**
   * Both endpoints leave and come back (a discovery blip, readiness probes failing under load)
   * while four requests run there: those still fill the endpoints, so nothing more is let in
   * until they end, and their end takes off only what they added.
   */
  @Test
  void requestsRunningThroughTheirEndpointsLeaveAndReturnStillCountThere() {
    try (Router r = router("{maxConcurrency: 2}", true)) {
      List<RoutingDecision> before = new ArrayList<>();
      for (int i = 0; i < 4; i++) {
        before.add(r.route(request(0, 10)));
      }
      r.setEndpoints(List.of());
      r.setEndpoints(POOL);
      assertThat(r.poolSaturation()).as("the four are still served").isCloseTo(1.0, within(1e-12));
      RoutingDecision full = r.route(request(0, 10));
      assertThat(full.rejection()).isNotNull();
      assertThat(full.rejection().reason()).isEqualTo(Rejection.Reason.NO_ENDPOINTS);
      // two of them end, two are routed in their place, then the other two end
      before.remove(0).onComplete(Usage.NONE);
      before.remove(0).onComplete(Usage.NONE);
      List<RoutingDecision> after = new ArrayList<>();
      for (int i = 0; i < 2; i++) {
        RoutingDecision d = r.route(request(0, 10));
        assertThat(d.isRouted()).isTrue();
        after.add(d);
      }
      before.forEach(d -> d.onComplete(Usage.NONE));
      assertThat(r.poolSaturation()).as("the two routed since, of 2 x 2")
          .isCloseTo(0.5, within(1e-12));
      for (int i = 0; i < 2; i++) {
        RoutingDecision d = r.route(request(0, 10));
        assertThat(d.isRouted()).isTrue();
        after.add(d);
      }
      assertThat(r.poolSaturation()).isCloseTo(1.0, within(1e-12));
      assertThat(r.route(request(0, 10)).isRouted()).isFalse();
      after.forEach(d -> d.onComplete(Usage.NONE));
      assertThat(r.poolSaturation()).isZero();
    }
  }

  /**
   * An endpoint that leaves for good is forgotten once the requests it was serving end: the
   * producer keeps no counters for endpoints that are gone and idle.
   */
  @Test
  void anEndpointThatLeftIsForgottenOnceItsRequestsEnd() {
    java.util.concurrent.atomic.AtomicLong now = new java.util.concurrent.atomic.AtomicLong();
    InFlightLoadProducer load = new InFlightLoadProducer(false,
        InFlightLoadProducer.DEFAULT_OUTPUT_RATIO, -1, now::get, 8_000);
    try (Router r = Router.builder().endpoints(POOL).ticker(now::get)
        .profile(io.epp4j.core.SchedulingProfile.builder("default").build())
        .listener(load).build()) {
      List<RoutingDecision> open = new ArrayList<>();
      for (int i = 0; i < 4; i++) {
        open.add(r.route(request(0, 10)));
      }
      String gone = open.get(0).primary().id();
      r.removeEndpoint(gone);
      assertThat(load.departedLoads()).isEqualTo(1);
      assertThat(load.requests(gone)).as("still served there").isPositive();
      open.forEach(d -> d.onComplete(Usage.NONE));
      now.addAndGet(1_000); // a sweep is due
      r.route(request(0, 10));
      assertThat(load.departedLoads()).isZero();
      assertThat(load.requests(gone)).isZero();
    }
  }

  @Test
  void requestsTheGatewayNeverFinishesStopFillingTheEndpointsAfterTheMaximumAge() {
    java.util.concurrent.atomic.AtomicLong now = new java.util.concurrent.atomic.AtomicLong();
    try (Router r = Router.builder().endpoints(POOL).randomSeed(3).ticker(now::get)
        .inFlightMaxAge(java.time.Duration.ofSeconds(60)).configYaml("""
            flowControl:
              saturationDetector: {pluginRef: concurrency-detector}
            plugins:
            - type: concurrency-detector
              parameters: {maxConcurrency: 1}
            - type: max-score-picker
            schedulingProfiles:
            - name: default
              plugins: [{pluginRef: concurrency-detector}, {pluginRef: max-score-picker}]
            """, "c.yaml").build()) {
      // two requests whose end the gateway never reports fill both endpoints
      assertThat(r.route(request(0, 10)).isRouted()).isTrue();
      assertThat(r.route(request(0, 10)).isRouted()).isTrue();
      assertThat(r.route(request(0, 10)).rejection()).isNotNull();
      assertThat(r.route(request(-1, 10)).rejection()).isNotNull();
      // past the maximum age they are forgotten, though no route has succeeded since
      now.addAndGet(java.time.Duration.ofSeconds(61).toNanos());
      assertThat(r.poolSaturation()).isZero();
      RoutingDecision d = r.route(request(-1, 10));
      assertThat(d.isRouted()).isTrue();
      d.onComplete(Usage.NONE);
    }
  }

  @Test
  void aFileThatOnlyNamesItGetsOneWithTheDefaults() {
    try (Router r = Router.builder().endpoints(POOL).configYaml("""
        flowControl:
          saturationDetector: {pluginRef: concurrency-detector}
        plugins:
        - type: queue-scorer
        """, "c.yaml").build()) {
      assertThat(r.config().plugins()).containsKey("concurrency-detector");
      r.route(request(0, 10));
      assertThat(r.poolSaturation()).isCloseTo(1 / 200.0, within(1e-12)); // 1 of 2 x 100
    }
  }

  @Test
  void badParametersAreRefusedByName() {
    assertThatThrownBy(() -> router("{maxConcurrency: 0}", false))
        .isInstanceOf(ConfigException.class).hasMessageContaining("'maxConcurrency'");
    assertThatThrownBy(() -> router("{concurrencyMode: bytes}", false))
        .isInstanceOf(ConfigException.class).hasMessageContaining("'concurrencyMode'");
    assertThatThrownBy(() -> router("{headroom: -0.1}", false))
        .isInstanceOf(ConfigException.class).hasMessageContaining("'headroom'");
  }
}
