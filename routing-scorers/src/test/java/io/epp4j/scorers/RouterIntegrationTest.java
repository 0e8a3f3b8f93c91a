package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.ConfigException;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import io.epp4j.core.SchedulingProfile;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class RouterIntegrationTest {
  static final List<Endpoint> ENDPOINTS = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"), Endpoint.parse("10.0.0.3:8000"));

  static InferenceRequest tokens(int n, int salt) {
    int[] ids = new int[n];
    for (int i = 0; i < n; i++) {
      ids[i] = salt * 100_000 + i;
    }
    return InferenceRequest.builder().model("qwen3-1.7b").tokenIds(ids).sessionKey("s" + salt).build();
  }

  @Test
  void zeroConfigRouterUsesTheEppDefaultProfile() {
    try (Router router = Router.builder().endpoints(ENDPOINTS).randomSeed(1).build()) {
      SchedulingProfile p = router.config().profiles().values().iterator().next();
      assertThat(p.scorers()).extracting(ws -> ws.name() + "=" + ws.weight())
          .containsExactly("prefix-cache-scorer=3.0", "queue-scorer=2.0",
              "kv-cache-utilization-scorer=2.0");
      assertThat(p.scorers().get(0).scorer()).isInstanceOf(PrefixCacheScorer.class);
      assertThat(p.picker().toString()).startsWith("max-score-picker");

      // the prefix index learns from decisions: the same prompt sticks to its first endpoint
      RoutingDecision first = router.route(tokens(256, 1));
      assertThat(first.isRouted()).isTrue();
      for (int i = 0; i < 10; i++) {
        RoutingDecision again = router.route(tokens(256, 1));
        assertThat(again.primary()).isEqualTo(first.primary());
        again.onComplete(new Usage(256, 240, 10));
      }
    }
  }

  @Test
  void prefixAffinityYieldsToAQueue() {
    AtomicLong now = new AtomicLong(1_000_000_000L);
    try (Router router = Router.builder().endpoints(ENDPOINTS).randomSeed(3).ticker(now::get).build()) {
      for (Endpoint e : ENDPOINTS) {
        router.updateMetrics(e.id(), EndpointMetrics.builder().kvCacheUsage(0.1).build());
      }
      Endpoint home = router.route(tokens(64, 7)).primary();
      // a deep queue at home: prefix 3×1 loses against queue 2×1 + kv 2×0.9 elsewhere
      router.updateMetrics(home.id(), EndpointMetrics.builder().waitingRequests(50)
          .kvCacheUsage(0.95).build());
      assertThat(router.route(tokens(64, 7)).primary()).isNotEqualTo(home);
    }
  }

  @Test
  void everyTypeLoadsFromConfigWithItsParameters() {
    String yaml = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: pd-profile-handler
          parameters: {nonCachedTokens: 64}
        - type: prefix-cache-scorer
          parameters: {blockSizeTokens: 16, maxPrefixBlocksToMatch: 256, lruCapacityPerServer: 1000, autoTune: false}
        - {type: queue-scorer, parameters: {metricsStalenessMillis: 500}}
        - type: running-requests-size-scorer
        - type: kv-cache-utilization-scorer
        - {type: load-aware-scorer, parameters: {threshold: 64}}
        - {type: active-request-scorer, parameters: {idleThreshold: 2}}
        - type: token-load-scorer
        - type: lora-affinity-scorer
        - {type: session-affinity-scorer, parameters: {ttlSeconds: 60, sessionKeyFrom: "header:x-user"}}
        - type: no-hit-lru-scorer
        - type: label-selector-filter
          parameters:
            matchLabels: {pool: a}
            matchExpressions: [{key: zone, operator: In, values: [z1, z2]}]
        - type: prefill-filter
        - type: decode-filter
        - {type: utilization-filter, parameters: {queueThreshold: 64, kvCacheThreshold: 0.9}}
        - type: low-queue-filter
        - type: random-picker
        - {type: weighted-random-picker, parameters: {maxNumOfEndpoints: 2}}
        - type: round-robin-picker
        - type: power-of-two-picker
        - {type: ring-hash-picker, parameters: {hashOn: "header:x-user", minimumRingSize: 2048, balanceFactor: 1.25}}
        - {type: maglev-picker, parameters: {tableSize: 65537, hashBalanceFactor: 150}}
        - type: max-score-picker
        schedulingProfiles:
        - name: decode
          plugins:
          - pluginRef: decode-filter
          - {pluginRef: prefix-cache-scorer, weight: 3}
          - {pluginRef: queue-scorer, weight: 2}
          - pluginRef: max-score-picker
        - name: prefill
          plugins:
          - pluginRef: prefill-filter
          - pluginRef: queue-scorer
          - pluginRef: max-score-picker
        """;
    try (Router r = Router.builder().endpoints(ENDPOINTS).configYaml(yaml, "test.yaml").build()) {
      assertThat(r.config().profiles()).containsKeys("decode", "prefill");
      assertThat(r.config().profileHandler()).isInstanceOf(PdProfileHandler.class);
      assertThat(((PdProfileHandler) r.config().profileHandler()).nonCachedTokens()).isEqualTo(64);
    }
    assertThat(PluginRegistry.fromServiceLoader().types()).contains("prefix-cache-scorer",
        "queue-scorer", "running-requests-size-scorer", "kv-cache-utilization-scorer",
        "load-aware-scorer", "active-request-scorer", "token-load-scorer", "lora-affinity-scorer",
        "session-affinity-scorer", "no-hit-lru-scorer", "label-selector-filter", "prefill-filter",
        "decode-filter", "utilization-filter", "low-queue-filter", "random-picker",
        "weighted-random-picker", "round-robin-picker", "power-of-two-picker", "ring-hash-picker",
        "maglev-picker", "pd-profile-handler", "max-score-picker", "single-profile-handler");
  }

  // ------------------------------------------------ parameters from YAML reach their plugin
  // Each test sets a parameter to a value whose behaviour differs from the default's and checks
  // the behaviour through routing.

  static String profile(String plugins, String refs) {
    return """
        plugins:
        %s
        schedulingProfiles:
        - name: default
          plugins: [%s]
        """.formatted(plugins.strip().indent(0).strip(), refs);
  }

  /** Keeps the prefix hits each routing cycle published. */
  static final class HitsRecorder implements RequestListener {
    final List<PrefixHits> hits = new ArrayList<>();

    @Override
    public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision d) {
      hits.add(state.get(PrefixHits.KEY));
    }
  }

  @Test
  void prefixCacheParametersReachTheScorer() {
    String yaml = profile("""
        - type: prefix-cache-scorer
          parameters: {blockSizeTokens: 32, maxPrefixBlocksToMatch: 3, lruCapacityPerServer: 4, autoTune: false}
        - type: max-score-picker
        """, "{pluginRef: prefix-cache-scorer}, {pluginRef: max-score-picker}");
    HitsRecorder recorder = new HitsRecorder();
    Endpoint only = ENDPOINTS.get(0);
    try (Router r = Router.builder().endpoints(List.of(only)).configYaml(yaml, "p.yaml")
        .listener(recorder).build()) {
      // the server reports room for 1000 blocks; autoTune false keeps the configured 4
      r.updateMetrics(only.id(), EndpointMetrics.builder().kvCapacityBlocks(1000)
          .blockSizeTokens(16).build());
      r.route(tokens(320, 1));
      r.route(tokens(320, 2)); // three more blocks: with room for 4, two of the first go
      r.route(tokens(320, 1));
    }
    PrefixHits first = recorder.hits.get(0);
    assertThat(first.blockSizeTokens(0)).as("blockSizeTokens").isEqualTo(32);
    assertThat(first.totalBlocks(0)).as("maxPrefixBlocksToMatch caps 10 blocks").isEqualTo(3);
    assertThat(recorder.hits.get(2).cachedBlocks(0)).as("lruCapacityPerServer, autoTune")
        .isEqualTo(1.0);
  }

  /**
   * A router over one decode and one prefill endpoint with {@code pd-profile-handler} given
   * {@code parameters} (the body of a YAML flow mapping) and a profile per role.
   */
  private static Router pdRouter(String parameters) {
    List<Endpoint> eps = List.of(
        Endpoint.parse("10.0.1.1:8000", Map.of(Endpoint.ROLE_LABEL, "decode")),
        Endpoint.parse("10.0.1.2:8000", Map.of(Endpoint.ROLE_LABEL, "prefill")));
    String yaml = """
        plugins:
        - {type: pd-profile-handler, parameters: {%s}}
        - type: decode-filter
        - type: prefill-filter
        - type: max-score-picker
        schedulingProfiles:
        - name: decode
          plugins: [{pluginRef: decode-filter}, {pluginRef: max-score-picker}]
        - name: prefill
          plugins: [{pluginRef: prefill-filter}, {pluginRef: max-score-picker}]
        """.formatted(parameters);
    return Router.builder().endpoints(eps).configYaml(yaml, "pd.yaml").build();
  }

  @Test
  void pdNonCachedTokensReachesTheHandler() {
    try (Router r = pdRouter("nonCachedTokens: 200")) {
      // the default threshold (0) runs prefill for every prompt
      assertThat(PdProfileHandler.prefillEndpoint(r.route(tokens(199, 1)))).isNull();
      assertThat(PdProfileHandler.prefillEndpoint(r.route(tokens(200, 2)))).isNotNull();
    }
  }

  /**
   * The early llm-d {@code pd-profile-handler} compared its {@code threshold} with the uncached
   * characters of the prompt, not tokens; it used to be read as tokens, so a migrated file
   * disaggregated only prompts four times longer than upstream did.
   */
  @Test
  void pdThresholdCountsCharactersAsTheEarlyUpstreamHandlerDid() {
    try (Router r = pdRouter("threshold: 400")) {
      // nothing cached: 400 uncached characters reach the threshold, 396 do not
      assertThat(PdProfileHandler.prefillEndpoint(
          r.route(InferenceRequest.completion("m", "a".repeat(400))))).isNotNull();
      assertThat(PdProfileHandler.prefillEndpoint(
          r.route(InferenceRequest.completion("m", "b".repeat(396))))).isNull();
    }
  }

  @Test
  void sessionAffinityParametersReachTheScorer() {
    String yaml = profile("""
        - {type: session-affinity-scorer, parameters: {ttlSeconds: 60, sessionKeyFrom: "header:x-user"}}
        - type: queue-scorer
        - type: max-score-picker
        """, "{pluginRef: session-affinity-scorer, weight: 2}, {pluginRef: queue-scorer},"
        + " {pluginRef: max-score-picker}");
    AtomicLong now = new AtomicLong(1_000_000_000L);
    try (Router r = Router.builder().endpoints(ENDPOINTS).configYaml(yaml, "s.yaml")
        .ticker(now::get).randomSeed(2).build()) {
      Endpoint home = r.route(user("u1", "first")).primary();
      // home now has the deepest queue: only the binding (weight 2 against 1) keeps u1 there
      now.addAndGet(30_000_000_000L);
      queues(r, home, 10);
      assertThat(r.route(user("u1", "another-session")).primary())
          .as("bound by the x-user header, not the session key").isEqualTo(home);
      now.addAndGet(61_000_000_000L);
      queues(r, home, 10);
      assertThat(r.route(user("u1", "third")).primary())
          .as("binding expired after 60 s (default 300 s)").isNotEqualTo(home);
    }
  }

  static InferenceRequest user(String user, String session) {
    return InferenceRequest.builder().model("m").prompt("p").sessionKey(session)
        .headers(Map.of("x-user", user)).build();
  }

  /** Fresh metrics: {@code deep} has {@code waiting} queued requests, the others none. */
  static void queues(Router r, Endpoint deep, int waiting) {
    for (Endpoint e : ENDPOINTS) {
      r.updateMetrics(e.id(), EndpointMetrics.builder()
          .waitingRequests(e.equals(deep) ? waiting : 0).build());
    }
  }

  @Test
  void queueScorerStalenessReachesTheScorer() {
    String yaml = profile("""
        - {type: queue-scorer, parameters: {metricsStalenessMillis: 500}}
        - type: max-score-picker
        """, "{pluginRef: queue-scorer}, {pluginRef: max-score-picker}");
    AtomicLong now = new AtomicLong(10_000_000_000L);
    Endpoint idle = ENDPOINTS.get(0);
    try (Router r = Router.builder().endpoints(ENDPOINTS.subList(0, 2)).configYaml(yaml, "q.yaml")
        .ticker(now::get).randomSeed(4).build()) {
      r.updateMetrics(idle.id(), EndpointMetrics.builder().waitingRequests(0).build());
      now.addAndGet(1_000_000_000L);
      r.updateMetrics(ENDPOINTS.get(1).id(), EndpointMetrics.builder().waitingRequests(5).build());
      // the idle endpoint's metrics are 1 s old: usable under the default 2 s, not under 500 ms,
      // where the fresh endpoint wins (1.0) over the stale one (neutral 0.5)
      assertThat(r.route(tokens(16, 1)).primary()).isEqualTo(ENDPOINTS.get(1));
    }
  }

  @Test
  void labelSelectorParametersReachTheFilter() {
    String yaml = profile("""
        - type: label-selector-filter
          parameters:
            matchLabels: {pool: a}
            matchExpressions: [{key: zone, operator: In, values: [z1, z2]}]
        - type: random-picker
        """, "{pluginRef: label-selector-filter}, {pluginRef: random-picker}");
    List<Endpoint> eps = List.of(
        Endpoint.parse("10.0.3.1:8000", Map.of("pool", "a", "zone", "z1")),
        Endpoint.parse("10.0.3.2:8000", Map.of("pool", "a", "zone", "z3")),
        Endpoint.parse("10.0.3.3:8000", Map.of("pool", "b", "zone", "z1")),
        Endpoint.parse("10.0.3.4:8000", Map.of("pool", "a", "zone", "z2")));
    Set<String> picked = new TreeSet<>();
    try (Router r = Router.builder().endpoints(eps).configYaml(yaml, "l.yaml").randomSeed(5)
        .build()) {
      for (int i = 0; i < 60; i++) {
        picked.add(r.route(tokens(16, i)).primary().id());
      }
    }
    assertThat(picked).containsExactly("10.0.3.1:8000", "10.0.3.4:8000");
  }

  @Test
  void llmdFormerLabelSelectorTypeNameLoadsTheLabelSelectorFilter() {
    // llm-d named the filter by-label-selector from mid-2025 until 2026, and still accepts it
    String yaml = profile("""
        - type: by-label-selector
          parameters:
            matchLabels: {pool: a}
        - type: random-picker
        """, "{pluginRef: by-label-selector}, {pluginRef: random-picker}");
    List<Endpoint> eps = List.of(
        Endpoint.parse("10.0.3.1:8000", Map.of("pool", "a")),
        Endpoint.parse("10.0.3.2:8000", Map.of("pool", "b")));
    Set<String> picked = new TreeSet<>();
    try (Router r = Router.builder().endpoints(eps).configYaml(yaml, "l.yaml").randomSeed(5)
        .build()) {
      assertThat(r.config().warnings()).singleElement().asString()
          .contains("'by-label-selector' is a former name of 'label-selector-filter'");
      for (int i = 0; i < 20; i++) {
        picked.add(r.route(tokens(16, i)).primary().id());
      }
    }
    assertThat(picked).containsExactly("10.0.3.1:8000");
  }

  @Test
  void utilizationFilterThresholdReachesTheFilter() {
    String yaml = profile("""
        - {type: utilization-filter, parameters: {kvCacheThreshold: 0.9}}
        - type: random-picker
        """, "{pluginRef: utilization-filter}, {pluginRef: random-picker}");
    Set<String> picked = new TreeSet<>();
    try (Router r = Router.builder().endpoints(ENDPOINTS.subList(0, 2)).configYaml(yaml, "u.yaml")
        .randomSeed(6).build()) {
      // 0.92 passes the default threshold (0.95) but not 0.9
      r.updateMetrics(ENDPOINTS.get(0).id(), EndpointMetrics.builder().kvCacheUsage(0.92).build());
      r.updateMetrics(ENDPOINTS.get(1).id(), EndpointMetrics.builder().kvCacheUsage(0.1).build());
      for (int i = 0; i < 40; i++) {
        picked.add(r.route(tokens(16, i)).primary().id());
      }
    }
    assertThat(picked).containsExactly(ENDPOINTS.get(1).id());
  }

  @Test
  void pickerParametersReachThePicker() {
    String yaml = profile("""
        - {type: weighted-random-picker, parameters: {maxNumOfEndpoints: 2}}
        """, "{pluginRef: weighted-random-picker}");
    try (Router r = Router.builder().endpoints(ENDPOINTS).configYaml(yaml, "w.yaml").build()) {
      assertThat(r.route(tokens(16, 1)).endpoints()).as("default 1").hasSize(2)
          .doesNotHaveDuplicates();
    }
    String ring = profile("""
        - {type: ring-hash-picker, parameters: {hashOn: "header:x-user"}}
        """, "{pluginRef: ring-hash-picker}");
    Set<String> oneUser = new TreeSet<>();
    Set<String> sessions = new TreeSet<>();
    try (Router byUser = Router.builder().endpoints(ENDPOINTS).configYaml(ring, "r.yaml").build();
        Router bySession = Router.builder().endpoints(ENDPOINTS)
            .configYaml(ring.replace("{hashOn: \"header:x-user\"}", "{}"), "r2.yaml").build()) {
      for (int i = 0; i < 30; i++) {
        oneUser.add(byUser.route(user("u7", "session-" + i)).primary().id());
        sessions.add(bySession.route(user("u7", "session-" + i)).primary().id());
      }
    }
    assertThat(oneUser).as("hashed on x-user").hasSize(1);
    assertThat(sessions).as("the default hashes the session key").hasSizeGreaterThan(1);
  }

  static String single(String pluginYaml) {
    return """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - %s
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: p
        """.formatted(pluginYaml);
  }

  @Test
  void invalidParametersNameThePluginAndTheParameter() {
    Map<String, String> cases = Map.of(
        "{name: p, type: prefix-cache-scorer, parameters: {blockSizeTokens: 0}}", "blockSizeTokens",
        "{name: p, type: maglev-picker, parameters: {tableSize: 65536}}", "tableSize",
        "{name: p, type: ring-hash-picker, parameters: {hashOn: \"body:x\"}}", "hashOn",
        "{name: p, type: ring-hash-picker, parameters: {balanceFactor: 0.5}}", "balanceFactor",
        "{name: p, type: queue-scorer, parameters: {metricsStalenessMillis: -1}}", "metricsStalenessMillis",
        "{name: p, type: label-selector-filter, parameters: {matchExpressions: [{key: a, operator: Near}]}}",
        "matchExpressions[0].operator",
        "{name: p, type: random-picker, parameters: {maxNumOfEndpoints: many}}", "maxNumOfEndpoints",
        "{name: p, type: pd-profile-handler, parameters: {nonCachedTokens: -5}}", "nonCachedTokens");
    cases.forEach((plugin, param) -> {
      assertThatThrownBy(() -> Router.builder().endpoints(ENDPOINTS)
          .configYaml(single(plugin), "bad.yaml").build())
          .as(plugin)
          .isInstanceOf(ConfigException.class)
          .hasMessageContaining("name 'p'")
          .hasMessageContaining("parameter '" + param + "'");
    });
  }

  @Test
  void prefillDecodeDisaggregationThroughTheRouter() {
    List<Endpoint> eps = List.of(
        Endpoint.parse("10.0.1.1:8000", Map.of(Endpoint.ROLE_LABEL, "decode")),
        Endpoint.parse("10.0.1.2:8000", Map.of(Endpoint.ROLE_LABEL, "prefill")));
    String yaml = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - {type: pd-profile-handler, parameters: {nonCachedTokens: 100}}
        - type: prefix-cache-scorer
        - type: decode-filter
        - type: prefill-filter
        - type: max-score-picker
        schedulingProfiles:
        - name: decode
          plugins: [{pluginRef: decode-filter}, {pluginRef: prefix-cache-scorer}, {pluginRef: max-score-picker}]
        - name: prefill
          plugins: [{pluginRef: prefill-filter}, {pluginRef: max-score-picker}]
        """;
    try (Router r = Router.builder().endpoints(eps).configYaml(yaml, "pd.yaml").build()) {
      RoutingDecision cold = r.route(tokens(320, 9));
      assertThat(cold.primary().id()).isEqualTo("10.0.1.1:8000");
      assertThat(PdProfileHandler.prefillEndpoint(cold)).isNotNull();
      assertThat(PdProfileHandler.prefillEndpoint(cold).id()).isEqualTo("10.0.1.2:8000");
      // the decode endpoint now holds the prompt: 320 tokens cached, 0 uncached < 100
      RoutingDecision warm = r.route(tokens(320, 9));
      assertThat(warm.primary().id()).isEqualTo("10.0.1.1:8000");
      assertThat(PdProfileHandler.prefillEndpoint(warm)).isNull();
      // short prompts never reach the threshold
      assertThat(PdProfileHandler.prefillEndpoint(r.route(tokens(50, 10)))).isNull();
    }
  }
}
