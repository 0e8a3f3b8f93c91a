package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Candidate;
import io.epp4j.api.Scorer;
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
  static double[] scores(Router r, String plugin, List<Candidate> candidates) {
    Scorer s = (Scorer) r.config().plugins().get(plugin);
    double[] out = new double[candidates.size()];
    s.score(request(), TestCandidates.state(0, 1), candidates, out);
    return out;
  }

  /**
   * Upstream's token-load-scorer (GIE v1.5.0, llm-d): {@code 1 − min(1, tokens /
   * queueThresholdTokens)}, threshold 4194304 unless the parameter sets it; the example of its
   * README, with a smaller threshold.
   */
  @Test
  void tokenLoadScorerNormalizesByQueueThresholdTokensAsUpstream() {
    String yaml = """
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
          - type: token-load-scorer
            name: token-load
            parameters:
              queueThresholdTokens: 2000
        schedulingProfiles:
          - name: default
            plugins:
              - pluginRef: token-load
                weight: 1
        """;
    List<Candidate> c = List.of(TestCandidates.inFlight("a:1", 0, 0),
        TestCandidates.inFlight("b:1", 2, 500), TestCandidates.inFlight("c:1", 8, 1000),
        TestCandidates.inFlight("d:1", 9, 5000));
    try (Router r = Router.builder().endpoints(POOL).configYaml(yaml, "t.yaml").build()) {
      assertThat(r.config().warnings()).noneSatisfy(w -> assertThat(w).contains("queueThresholdTokens"));
      assertThat(scores(r, "token-load", c)).containsExactly(1.0, 0.75, 0.5, 0.0);
    }
    String defaults = yaml.replace("""
            parameters:
              queueThresholdTokens: 2000
        """, "");
    try (Router r = Router.builder().endpoints(POOL).configYaml(defaults, "t.yaml").build()) {
      assertThat(scores(r, "token-load", c)).containsExactly(1.0, 1.0 - 500.0 / 4194304,
          1.0 - 1000.0 / 4194304, 1.0 - 5000.0 / 4194304);
    }
  }
  /**
   * llm-d-inference-scheduler v0.7.1's deploy/config/pd-epp-config.yaml, verbatim (v0.7.0 to
   * v0.8.0 ship it so): the header handler under its current name, {@code disagg-headers-handler}
   * (upstream's {@code prefill-header-handler} is the deprecated alias of it).
   */
  @Test
  void llmd071PdConfigWithTheDisaggHeadersHandlerLoads() {
    String yaml = """
        # Sample EPP configuration for tunning with P/D
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        featureGates:
        - prepareDataPlugins
        plugins:
        - type: disagg-headers-handler
        - type: prefix-cache-scorer
          parameters:
            maxPrefixBlocksToMatch: 256
            lruCapacityPerServer: 31250
        - type: queue-scorer
        - type: prefill-filter
        - type: decode-filter
        - type: max-score-picker
        - type: prefix-based-pd-decider
          parameters:
            nonCachedTokens: 16
        - type: disagg-profile-handler
          parameters:
            deciders:
              prefill: prefix-based-pd-decider
        schedulingProfiles:
        - name: prefill
          plugins:
          - pluginRef: prefill-filter
          - pluginRef: max-score-picker
          - pluginRef: prefix-cache-scorer
            weight: 2
          - pluginRef: queue-scorer
            weight: 1
        - name: decode
          plugins:
          - pluginRef: decode-filter
          - pluginRef: max-score-picker
          - pluginRef: prefix-cache-scorer
            weight: 2
          - pluginRef: queue-scorer
            weight: 1
        """;
    try (Router r = Router.builder().endpoints(POOL).configYaml(yaml, "pd.yaml").build()) {
      assertThat(r.config().profiles()).containsOnlyKeys("prefill", "decode");
      assertThat(r.config().profileHandler().toString()).startsWith("disagg-profile-handler");
      assertThat(r.config().plugins()).containsKey("disagg-headers-handler");
    }
  }
}
