package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.MetricAttributeSource;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import io.epp4j.api.Scorer;
import io.epp4j.core.ConfigException;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import io.epp4j.testkit.ContractFixtures;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.ToDoubleFunction;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

/**
 * llm-d's endpoint-attribute-filter and endpoint-attribute-scorer over the attributes a
 * core-metrics-extractor's customMetrics publish.
 */
class EndpointAttributePluginsTest {

  /**
   * A core-metrics-extractor as the plugins see it: three published attributes, present on every
   * scraped endpoint.
   */
  static final MetricAttributeSource SOURCE = new MetricAttributeSource() {
    final Map<String, ToDoubleFunction<Candidate>> attributes = Map.of(
        "queue", Candidate::waitingRequests,
        "num_requests_running", Candidate::runningRequests,
        "kv", Candidate::kvCacheUsage);

    @Override
    public @Nullable Reader attribute(String key) {
      ToDoubleFunction<Candidate> f = attributes.get(key);
      return f == null ? null : c -> c.metrics().isKnown() ? f.applyAsDouble(c) : Double.NaN;
    }

    @Override
    public Set<String> attributeKeys() {
      return attributes.keySet();
    }
  };

  static PluginContext context(String name) {
    return ContractFixtures.context(name, Map.of("core-metrics-extractor", SOURCE));
  }

  static Result<? extends Plugin> create(PluginProvider provider, Map<String, ?> params) {
    return provider.create(context(provider.type()), Parameters.of(params));
  }

  static Candidate scraped(int i, int waiting, double kv) {
    return TestCandidates.withMetrics("10.0.0." + i + ":8000", EndpointMetrics.builder()
        .waitingRequests(waiting).kvCacheUsage(kv).scrapedAtNanos(0).build());
  }

  // queues 0, 5, 10 and an endpoint never scraped, which lacks the attribute
  static final List<Candidate> POOL = List.of(scraped(1, 0, 0.1), scraped(2, 5, 0.5),
      scraped(3, 10, 0.9), TestCandidates.cand("10.0.0.4:8000"));

  static Map<String, Object> filterParams(String operator, double value) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("attribute", "queue");
    m.put("algorithm", Map.of("type", "threshold",
        "threshold", Map.of("operator", operator, "value", value)));
    return m;
  }

  static List<String> kept(Map<String, ?> params) {
    Result<? extends Plugin> r = create(new EndpointAttributeFilter.Provider(), params);
    assertThat(r.errors()).as("%s", params).isEmpty();
    List<String> ids = new ArrayList<>();
    ((Filter) r.value()).filter(InferenceRequest.completion("m", "p"), TestCandidates.state(),
        POOL).forEach(c -> ids.add(c.id().substring("10.0.0.".length(), 8)));
    return ids;
  }

  @Test
  void theFilterComparesEachOperatorAndKeepsAMissingAttributeByDefault() {
    assertThat(kept(filterParams("LessThan", 5))).containsExactly("1", "4");
    assertThat(kept(filterParams("LessThanOrEqual", 5))).containsExactly("1", "2", "4");
    assertThat(kept(filterParams("GreaterThan", 5))).containsExactly("3", "4");
    assertThat(kept(filterParams("GreaterThanOrEqual", 5))).containsExactly("2", "3", "4");
    assertThat(kept(filterParams("Equal", 5))).containsExactly("2", "4");
    assertThat(kept(filterParams("NotEqual", 5))).containsExactly("1", "3", "4");
  }

  /**
   * A number in quotes is that number, as in every number parameter (docs/plugins.md, upstream
   * compatibility); the threshold's {@code value: '5'} was refused as no number. Quoted text that
   * is no decimal number, NaN among it, is still refused naming the field.
   */
  @Test
  void aQuotedThresholdIsTheNumberItSpells() {
    Map<String, Object> p = filterParams("LessThan", 0);
    p.put("algorithm", Map.of("type", "threshold",
        "threshold", Map.of("operator", "LessThan", "value", "5")));
    assertThat(kept(p)).containsExactly("1", "4");
    for (Object bad : List.<Object>of("five", "NaN", "5d", Double.NaN)) {
      p.put("algorithm", Map.of("type", "threshold",
          "threshold", Map.of("operator", "LessThan", "value", bad)));
      assertThat(create(new EndpointAttributeFilter.Provider(), p).errors()).as("%s", bad)
          .singleElement().satisfies(e -> assertThat(e)
              .startsWith("parameter 'algorithm.threshold.value' must be a number"));
    }
  }

  @Test
  void onMissingFailDropsEndpointsWithoutTheAttribute() {
    Map<String, Object> p = filterParams("LessThan", 5);
    p.put("onMissing", "Fail");
    assertThat(kept(p)).containsExactly("1");
    p.put("onMissing", "Pass");
    assertThat(kept(p)).containsExactly("1", "4");
  }

  @Test
  void fallbackOnEmptyGivesBackEveryCandidateOnlyWhenNoneIsKept() {
    Map<String, Object> p = filterParams("GreaterThan", 100);
    p.put("onMissing", "Fail");
    assertThat(kept(p)).isEmpty();
    p.put("fallbackOnEmpty", true);
    assertThat(kept(p)).containsExactly("1", "2", "3", "4");
    p.put("algorithm", Map.of("type", "threshold",
        "threshold", Map.of("operator", "GreaterThan", "value", 7)));
    assertThat(kept(p)).containsExactly("3");
  }

  static double[] scores(Map<String, ?> params) {
    Result<? extends Plugin> r = create(new EndpointAttributeScorer.Provider(), params);
    assertThat(r.errors()).as("%s", params).isEmpty();
    double[] s = new double[POOL.size()];
    ((Scorer) r.value()).score(InferenceRequest.completion("m", "p"), TestCandidates.state(),
        POOL, s);
    return s;
  }

  @Test
  void theAdaptiveRangeSpansTheCandidatesWithTheAttributeAndAMissingOneScoresZero() {
    assertThat(scores(Map.of("attributeKey", "queue",
        "algorithm", Map.of("type", "linear_lower_is_better"))))
        .containsExactly(1.0, 0.5, 0.0, 0.0);
    assertThat(scores(Map.of("attributeKey", "queue",
        "algorithm", Map.of("type", "linear_higher_is_better",
            "normalization", Map.of("adaptiveRange", Map.of())))))
        .containsExactly(0.0, 0.5, 1.0, 0.0);
  }

  @Test
  void equalValuesAllScoreOneInTheAdaptiveRange() {
    // every scraped endpoint runs no request
    assertThat(scores(Map.of("attributeKey", "num_requests_running",
        "algorithm", Map.of("type", "linear_lower_is_better"))))
        .containsExactly(1.0, 1.0, 1.0, 0.0);
  }

  @Test
  void aFixedRangeIsClampedAndInvertedForLowerIsBetter() {
    assertThat(scores(Map.of("attributeKey", "kv", "algorithm", Map.of(
        "type", "linear_lower_is_better",
        "normalization", Map.of("fixedRange", Map.of("min", 0.0, "max", 1.0))))))
        .containsExactly(0.9, 0.5, 0.09999999999999998, 0.0);
    // 0.1 below the range, 0.9 above it
    assertThat(scores(Map.of("attributeKey", "kv", "algorithm", Map.of(
        "type", "linear_higher_is_better",
        "normalization", Map.of("fixedRange", Map.of("min", 0.3, "max", 0.7))))))
        .containsExactly(0.0, 0.5000000000000001, 1.0, 0.0);
  }

  static List<String> errors(PluginProvider provider, Map<String, ?> params) {
    Result<? extends Plugin> r = create(provider, params);
    assertThat(r.isOk()).as("%s accepted", params).isFalse();
    return r.errors();
  }

  @Test
  void anAttributeNothingPublishesIsRefusedNamingItAndWhatIsPublished() {
    Map<String, Object> p = filterParams("LessThan", 5);
    p.put("attribute", "WaitingQueueSize");
    assertThat(errors(new EndpointAttributeFilter.Provider(), p)).singleElement()
        .satisfies(e -> assertThat(e).startsWith("parameter 'attribute' 'WaitingQueueSize'")
            .contains("[kv, num_requests_running, queue]").contains("onMissing"));
    assertThat(errors(new EndpointAttributeScorer.Provider(), Map.of("attributeKey", "gpu",
        "algorithm", Map.of("type", "linear_lower_is_better")))).singleElement()
        .satisfies(e -> assertThat(e).startsWith("parameter 'attributeKey' 'gpu'")
            .contains("score every endpoint 0"));
    // without a core-metrics-extractor in the file nothing is published at all
    var none = new EndpointAttributeFilter.Provider().create(ContractFixtures.context("f"),
        Parameters.of(filterParams("LessThan", 5)));
    assertThat(none.errors()).singleElement().satisfies(e -> assertThat(e)
        .startsWith("parameter 'attribute' 'queue'").contains("(published: [])"));
  }

  @Test
  void aProducerEpp4jDoesNotHaveIsRefusedNamingIt() {
    for (String producer : List.of("dcgm-extractor", "", "my-extractor")) {
      Map<String, Object> p = filterParams("LessThan", 5);
      p.put("producer", producer);
      assertThat(errors(new EndpointAttributeFilter.Provider(), p)).as(producer)
          .singleElement().satisfies(e -> assertThat(e).startsWith("parameter 'producer'"));
    }
    Map<String, Object> p = filterParams("LessThan", 5);
    p.put("producer", "core-metrics-extractor");
    assertThat(kept(p)).containsExactly("1", "4");
  }

  @Test
  void anAttributeWithASlashNeedsAnExplicitProducer() {
    Map<String, Object> p = filterParams("LessThan", 5);
    p.put("attribute", "queue/core-metrics-extractor");
    assertThat(errors(new EndpointAttributeFilter.Provider(), p)).singleElement()
        .satisfies(e -> assertThat(e).startsWith("parameter 'attribute'")
            .contains("attribute: 'queue', producer: 'core-metrics-extractor'"));
  }

  @Test
  void badFilterParametersAreRefusedNamingTheField() {
    Map<String, Object> p = filterParams("LessThan", 5);
    p.put("onMissing", "pass");
    assertThat(errors(new EndpointAttributeFilter.Provider(), p)).singleElement()
        .satisfies(e -> assertThat(e).startsWith("parameter 'onMissing'"));
    Map<String, Map<String, ?>> bad = Map.of(
        "algorithm.type", Map.of("type", "percentile",
            "threshold", Map.of("operator", "LessThan", "value", 1)),
        "algorithm.threshold.operator", Map.of("type", "threshold",
            "threshold", Map.of("operator", "<", "value", 1)),
        "algorithm.threshold.value", Map.of("type", "threshold",
            "threshold", Map.of("operator", "LessThan")),
        "algorithm.threshold", Map.of("type", "threshold"));
    bad.forEach((field, algorithm) -> {
      Map<String, Object> q = filterParams("LessThan", 5);
      q.put("algorithm", algorithm);
      assertThat(errors(new EndpointAttributeFilter.Provider(), q)).as(field).singleElement()
          .satisfies(e -> assertThat(e).startsWith("parameter '" + field + "'"));
    });
    assertThat(errors(new EndpointAttributeFilter.Provider(), Map.of("attribute", "queue")))
        .singleElement().satisfies(e -> assertThat(e).startsWith("parameter 'algorithm'"));
  }

  @Test
  void badScorerParametersAreRefusedNamingTheField() {
    Map<String, Map<String, ?>> bad = Map.of(
        "algorithm.type", Map.of("type", "linear"),
        "algorithm.normalization", Map.of("type", "linear_lower_is_better",
            "normalization", Map.of("fixedRange", Map.of("max", 1), "adaptiveRange", Map.of())),
        "algorithm.normalization.fixedRange", Map.of("type", "linear_lower_is_better",
            "normalization", Map.of("fixedRange", Map.of("min", 1, "max", 1))));
    bad.forEach((field, algorithm) -> assertThat(errors(new EndpointAttributeScorer.Provider(),
        Map.of("attributeKey", "queue", "algorithm", algorithm))).as(field).singleElement()
        .satisfies(e -> assertThat(e).startsWith("parameter '" + field + "'")));
    // a bound left out is 0, as upstream: min 0 below max 1 is a valid range
    Result<? extends Plugin> r = create(new EndpointAttributeScorer.Provider(), Map.of(
        "attributeKey", "kv", "algorithm", Map.of("type", "linear_lower_is_better",
            "normalization", Map.of("fixedRange", Map.of("max", 1)))));
    assertThat(r.errors()).isEmpty();
  }

  @Test
  void fieldsOfTheAlgorithmNeitherPluginReadsAreNoticed() {
    Map<String, Object> p = filterParams("LessThan", 5);
    p.put("algorithm", Map.of("type", "threshold", "topK", 3,
        "threshold", Map.of("operator", "LessThan", "value", 5)));
    Parameters params = Parameters.of(p);
    assertThat(new EndpointAttributeFilter.Provider().create(context("f"), params).errors())
        .isEmpty();
    assertThat(params.notices()).singleElement().satisfies(n -> assertThat(n)
        .startsWith("parameter 'algorithm.topK'"));
  }

  // ------------------------------------------------- the core-metrics-extractor's customMetrics

  static final String VLLM = """
        - name: vllm
          queuedRequestsSpec: vllm:num_requests_waiting
          runningRequestsSpec: vllm:num_requests_running
          kvUsageSpec: vllm:kv_cache_usage_perc
          loraSpec: vllm:lora_requests_info
          cacheInfoSpec: vllm:cache_config_info
        """;

  static String yaml(String engineConfigs) {
    return """
        plugins:
        - type: endpoint-attribute-filter
          name: short-queue
          parameters:
            attribute: queue
            algorithm: {type: threshold, threshold: {operator: LessThan, value: 3}}
        - type: core-metrics-extractor
          parameters:
            engineConfigs:
        %s
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: short-queue
          - pluginRef: max-score-picker
        """.formatted(engineConfigs.indent(4).stripTrailing());
  }

  static List<String> loadErrors(String yaml) {
    try (Router r = Router.builder().endpoints(List.of(Endpoint.parse("10.0.0.1:8000")))
        .configYaml(yaml, "t.yaml").build()) {
      return List.of();
    } catch (ConfigException e) {
      return e.errors();
    }
  }

  @Test
  void aCustomMetricOnTheQueueFamilyPublishesTheAttributeTheFilterReads() {
    String ok = yaml(VLLM + """
          customMetrics:
          - {attributeKey: queue, metricSpec: vllm:num_requests_waiting}
        """);
    List<Endpoint> pool = List.of(Endpoint.parse("10.0.0.1:8000"),
        Endpoint.parse("10.0.0.2:8000"));
    try (Router r = Router.builder().endpoints(pool).configYaml(ok, "t.yaml").build()) {
      r.updateMetrics("10.0.0.1:8000", EndpointMetrics.builder().waitingRequests(9).build());
      r.updateMetrics("10.0.0.2:8000", EndpointMetrics.builder().waitingRequests(1).build());
      for (int i = 0; i < 5; i++) {
        var d = r.route(InferenceRequest.completion("m", "p" + i));
        assertThat(d.primary().id()).isEqualTo("10.0.0.2:8000");
        d.onComplete(io.epp4j.api.Usage.NONE);
      }
    }
  }

  @Test
  void anEngineEntryThatDropsABuiltInSpecIsRefusedNamingIt() {
    String dropped = yaml("""
        - name: vllm
          customMetrics:
          - {attributeKey: queue, metricSpec: vllm:num_requests_waiting}
        """);
    assertThat(loadErrors(dropped)).anySatisfy(e -> assertThat(e)
        .contains("parameter 'engineConfigs[0].queuedRequestsSpec' must be"
            + " 'vllm:num_requests_waiting'").contains("upstream would stop reading it"));
  }

  @Test
  void customMetricsEpp4jCannotReadAreRefusedNamingTheField() {
    String labelled = yaml(VLLM + """
          customMetrics:
          - {attributeKey: queue, metricSpec: 'vllm:num_requests_waiting{model_name=a}'}
        """);
    assertThat(loadErrors(labelled)).anySatisfy(e -> assertThat(e)
        .contains("'engineConfigs[0].customMetrics[0].metricSpec'"));
    // an engine upstream has no built-in mapping for (it would need every spec spelled out,
    // which epp4j cannot read) is refused naming the field
    String otherEngine = yaml("""
        - name: tgi
          customMetrics:
          - {attributeKey: queue, metricSpec: tgi_queue_size}
        """);
    assertThat(loadErrors(otherEngine)).anySatisfy(e -> assertThat(e)
        .contains("'engineConfigs[0].name' must be one of"));
  }

  static final Map<String, ?> SGLANG = Map.of("name", "sglang",
      "queuedRequestsSpec", "sglang:num_queue_reqs",
      "runningRequestsSpec", "sglang:num_running_reqs", "kvUsageSpec", "sglang:token_usage",
      "cacheInfoSpec", "sglang:cache_config_info", "cacheBlockSizeLabelName", "page_size",
      "cacheNumBlocksLabelName", "num_pages");

  static final Map<String, ?> VLLM_ENTRY = Map.of("name", "vllm",
      "queuedRequestsSpec", "vllm:num_requests_waiting",
      "runningRequestsSpec", "vllm:num_requests_running",
      "kvUsageSpec", "vllm:kv_cache_usage_perc", "loraSpec", "vllm:lora_requests_info",
      "cacheInfoSpec", "vllm:cache_config_info");

  static Map<String, Object> entry(Map<String, ?> engine, String key, String spec) {
    Map<String, Object> m = new LinkedHashMap<>(engine);
    m.put("customMetrics", List.of(Map.of("attributeKey", key, "metricSpec", spec)));
    return m;
  }

  static MetricAttributeSource extractor(Map<String, ?> params) {
    Result<? extends Plugin> r = PluginRegistry.fromServiceLoader().create(
        "core-metrics-extractor", ContractFixtures.context("core-metrics-extractor"),
        Parameters.of(params));
    assertThat(r.errors()).isEmpty();
    return (MetricAttributeSource) r.value();
  }

  /** A scraped endpoint with queue 4, running 6 and the given labels. */
  static Candidate labelled(Map<String, String> labels) {
    return new TestCandidates.Cand(Endpoint.parse("10.0.0.9:8000", labels),
        EndpointMetrics.builder().waitingRequests(4).runningRequests(6).scrapedAtNanos(0)
            .build(), 0, 0);
  }

  @Test
  void anEnginesAttributesApplyToTheEndpointsUpstreamGivesThatEngine() {
    MetricAttributeSource.Reader queue = extractor(Map.of("engineConfigs",
        List.of(entry(VLLM_ENTRY, "queue", "vllm:num_requests_waiting")))).attribute("queue");
    assertThat(queue).isNotNull();
    // no label, or a label naming no engine: the default engine, vllm
    assertThat(queue.read(labelled(Map.of()))).isEqualTo(4.0);
    assertThat(queue.read(labelled(Map.of("llm-d.ai/engine-type", "my-engine")))).isEqualTo(4.0);
    assertThat(queue.read(labelled(Map.of("llm-d.ai/engine-type", "vllm")))).isEqualTo(4.0);
    // another engine's mapping has no such attribute; the former GIE label counts too
    assertThat(queue.read(labelled(Map.of("llm-d.ai/engine-type", "sglang")))).isNaN();
    assertThat(queue.read(labelled(Map.of("llm-d.ai/engine-type", "trtllm-serve")))).isNaN();
    assertThat(queue.read(labelled(Map.of("inference.networking.k8s.io/engine-type",
        "sglang")))).isNaN();
    // never scraped: not yet published
    assertThat(queue.read(TestCandidates.cand("10.0.0.8:8000"))).isNaN();
  }

  @Test
  void theDefaultEngineAndEngineLabelKeyDecideAsUpstream() {
    MetricAttributeSource.Reader queue = extractor(Map.of("defaultEngine", "sglang",
        "engineLabelKey", "engine", "engineConfigs",
        List.of(entry(SGLANG, "queue", "sglang:num_queue_reqs")))).attribute("queue");
    assertThat(queue).isNotNull();
    assertThat(queue.read(labelled(Map.of()))).isEqualTo(4.0);
    assertThat(queue.read(labelled(Map.of("engine", "vllm")))).isNaN();
    // the configured label replaces llm-d's
    assertThat(queue.read(labelled(Map.of("llm-d.ai/engine-type", "vllm")))).isEqualTo(4.0);
  }

  @Test
  void oneKeyMayReadADifferentFigureForEachEngine() {
    MetricAttributeSource.Reader load = extractor(Map.of("engineConfigs", List.of(
        entry(VLLM_ENTRY, "load", "vllm:num_requests_waiting"),
        entry(SGLANG, "load", "sglang:num_running_reqs")))).attribute("load");
    assertThat(load).isNotNull();
    assertThat(load.read(labelled(Map.of()))).isEqualTo(4.0);
    assertThat(load.read(labelled(Map.of("llm-d.ai/engine-type", "sglang")))).isEqualTo(6.0);
  }

  /** Upstream's shape for turning LoRA off: the vLLM entry with {@code loraSpec: ""}. */
  static String loraYaml(String loraSpec) {
    return """
        plugins:
        - type: core-metrics-extractor
          parameters:
            defaultEngine: vllm
            engineConfigs:
            - name: vllm
              queuedRequestsSpec: vllm:num_requests_waiting
              runningRequestsSpec: vllm:num_requests_running
              kvUsageSpec: vllm:kv_cache_usage_perc
              loraSpec: %s
              cacheInfoSpec: vllm:cache_config_info
        - type: lora-affinity-scorer
        - type: queue-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - {pluginRef: lora-affinity-scorer, weight: 10}
          - {pluginRef: queue-scorer, weight: 1}
          - pluginRef: max-score-picker
        """.formatted(loraSpec);
  }

  /**
   * Where the server serving adapter {@code sql} has a queue and the other none: the adapter's
   * affinity (10 x 1.0 against 10 x 0.8) outweighs the queue (1 x 0 against 1 x 1) only while the
   * LoRA plugins see the adapter.
   */
  static String routeSql(String loraSpec) {
    List<Endpoint> pool = List.of(Endpoint.parse("10.0.0.1:8000"),
        Endpoint.parse("10.0.0.2:8000"));
    try (Router r = Router.builder().endpoints(pool).configYaml(loraYaml(loraSpec), "t.yaml")
        .build()) {
      r.updateMetrics("10.0.0.1:8000", EndpointMetrics.builder().waitingRequests(5)
          .runningLoraAdapters(Set.of("sql")).maxLoras(4).build());
      r.updateMetrics("10.0.0.2:8000", EndpointMetrics.builder().maxLoras(4).build());
      var d = r.route(InferenceRequest.completion("sql", "p"));
      d.onComplete(io.epp4j.api.Usage.NONE);
      return d.primary().id();
    }
  }

  @Test
  void anEmptyLoraSpecLoadsAndHidesTheServersAdaptersFromTheLoraPlugins() {
    assertThat(loadErrors(loraYaml("\"\""))).isEmpty();
    assertThat(routeSql("vllm:lora_requests_info")).isEqualTo("10.0.0.1:8000");
    assertThat(routeSql("\"\"")).isEqualTo("10.0.0.2:8000");
  }

  @Test
  void anEmptyLoadSpecIsRefusedNamingTheField() {
    String noQueue = loraYaml("vllm:lora_requests_info")
        .replace("queuedRequestsSpec: vllm:num_requests_waiting", "queuedRequestsSpec: ''");
    assertThat(loadErrors(noQueue)).anySatisfy(e -> assertThat(e)
        .contains("'engineConfigs[0].queuedRequestsSpec' may not be empty"));
  }
}
