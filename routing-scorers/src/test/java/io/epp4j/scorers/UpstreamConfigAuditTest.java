package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** Upstream EndpointPickerConfig files that must mean in epp4j what they mean upstream. */
class UpstreamConfigAuditTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"));

  /** A profile running upstream's utilization-detector as a filter (GIE 1.5, llm-d). */
  static final String DETECTOR_IN_PROFILE = """
      apiVersion: llm-d.ai/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: utilization-detector
      - type: queue-scorer
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: utilization-detector
        - pluginRef: queue-scorer
        - pluginRef: max-score-picker
      saturationDetector:
        pluginRef: utilization-detector
      """;

  static InferenceRequest request() {
    return InferenceRequest.builder().model("m").prompt("hello").build();
  }

  /**
   * Upstream's Detector.Filter returns every endpoint when none is under its limits ("Fail open at
   * pool level" in its detector_test.go, GIE v1.5.0 and llm-d-inference-scheduler): a pool where
   * every endpoint is saturated still routes a request that is not sheddable.
   */
  @Test
  void utilizationDetectorInAProfileFailsOpenWhenEveryEndpointIsSaturated() {
    AtomicLong now = new AtomicLong(1_000_000_000L);
    try (Router r = Router.builder().endpoints(POOL).configYaml(DETECTOR_IN_PROFILE, "d.yaml")
        .ticker(now::get).randomSeed(1).build()) {
      for (Endpoint e : POOL) {
        assertThat(r.updateMetrics(e.id(), EndpointMetrics.builder().waitingRequests(20)
            .kvCacheUsage(0.5).scrapedAtNanos(now.get()).build())).isTrue();
      }
      RoutingDecision d = r.route(request());
      assertThat(d.isRouted()).as("upstream routes to one of the saturated endpoints: %s", d)
          .isTrue();
    }
  }

  /** Before the first scrape every endpoint is stale: upstream still routes (fails open). */
  @Test
  void utilizationDetectorInAProfileFailsOpenBeforeAnyMetrics() {
    AtomicLong now = new AtomicLong(1_000_000_000L);
    try (Router r = Router.builder().endpoints(POOL).configYaml(DETECTOR_IN_PROFILE, "d.yaml")
        .ticker(now::get).randomSeed(1).build()) {
      RoutingDecision d = r.route(request());
      assertThat(d.isRouted()).as("upstream routes although no metrics are fresh: %s", d)
          .isTrue();
    }
  }
  /**
   * Upstream's applyStaticDefaults names a plugin after its type when its name is empty
   * ({@code if pluginConfig.Name == ""}), as a chart template rendering {@code name: ""} gives.
   */
  @Test
  void anEmptyPluginNameDefaultsToTheTypeAsUpstream() {
    String yaml = """
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - name: ""
          type: queue-scorer
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: queue-scorer
            weight: 2
        """;
    try (Router r = Router.builder().endpoints(POOL).configYaml(yaml, "n.yaml").build()) {
      assertThat(r.config().plugins()).containsOnlyKeys("queue-scorer");
      assertThat(r.config().profiles().get("default").scorers())
          .extracting(ws -> ws.name() + "=" + ws.weight()).containsExactly("queue-scorer=2.0");
    }
  }
}
