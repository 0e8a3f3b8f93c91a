package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import io.epp4j.core.SchedulingProfile;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Example configurations published by the upstream projects (the Gateway API Inference
 * Extension and llm-d's inference scheduler), quoted verbatim under
 * {@code src/test/resources/upstream} with their source path and commit in each file's header.
 * Each is loaded as written through {@link Router.Builder#configYaml} and checked against what
 * upstream's loader makes of it: which plugins run in which profile, with which weights, which
 * picker and profile handler, and which parameters are refused or noticed as docs/plugins.md
 * says.
 */
class UpstreamExampleConfigsTest {
  final AtomicLong now = new AtomicLong(1_000_000_000L);
  final List<Router> routers = new ArrayList<>();

  @AfterEach
  void close() {
    routers.forEach(Router::close);
  }

  static String upstream(String name) {
    try (InputStream in = Objects.requireNonNull(
        UpstreamExampleConfigsTest.class.getResourceAsStream("/upstream/" + name), name)) {
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  Router load(String name) {
    return load(name, 16);
  }

  /**
   * Loads a file with a shared index, which keeps the precise scorers from binding the files' ZMQ
   * ports in a test; the index is built with the block size the file names, as an application
   * must (a shared index built otherwise refuses the file's block size).
   */
  Router load(String name, int blockSize) {
    Router r = Router.builder().endpoints(pool(3)).configYaml(upstream(name), name)
        .service(KvBlockIndex.class, KvBlockIndex.builder().defaultBlockSize(blockSize).build())
        .ticker(now::get).randomSeed(7).build();
    routers.add(r);
    return r;
  }

  static List<Endpoint> pool(int n) {
    return UpstreamConfigCompatibilityTest.pool(n);
  }

  static String id(int i) {
    return UpstreamConfigCompatibilityTest.id(i);
  }

  void metrics(Router r, int i, int waiting, double kv) {
    assertThat(r.updateMetrics(id(i), EndpointMetrics.builder().waitingRequests(waiting)
        .kvCacheUsage(kv).scrapedAtNanos(now.get()).build())).isTrue();
  }

  /** The profile as upstream would print it: filters, scorers by name with weight, picker. */
  static String shape(SchedulingProfile p) {
    List<String> filters = new ArrayList<>();
    p.filters().forEach(f -> filters.add(f.getClass().getSimpleName()));
    Map<String, Double> scorers = new LinkedHashMap<>();
    p.scorers().forEach(s -> scorers.put(s.name(), s.weight()));
    return "filters=" + filters + " scorers=" + scorers + " picker="
        + p.picker().getClass().getSimpleName();
  }

  static String shape(Router r, String profile) {
    return shape(Objects.requireNonNull(r.config().profiles().get(profile), profile));
  }

  static Map<String, Integer> counts(Router r, InferenceRequest req, int n) {
    return UpstreamConfigCompatibilityTest.counts(r, req, n);
  }

  // ------------------------------------------------------- Gateway API Inference Extension

  @Test
  void gie051ChartDefaultIsTheDecisionTreeWithARandomPicker() {
    Router r = load("gie-v0.5.1-chart-default-plugins.yaml");
    assertThat(r.config().profiles()).containsOnlyKeys("default");
    assertThat(shape(r, "default"))
        .isEqualTo("filters=[DecisionTreeFilter] scorers={} picker=RandomPicker");
    assertThat(r.config().profileHandler()).hasToString("single-profile-handler");
    assertThat(r.config().warnings()).isEmpty();
  }

  @Test
  void gie051ChartPluginsV2LoadsTheFormerScorerNameWithANotice() {
    Router r = load("gie-v0.5.1-chart-plugins-v2.yaml");
    assertThat(shape(r, "default")).isEqualTo("filters=[] scorers={queue-scorer=1.0,"
        + " kv-cache-scorer=1.0, prefix-cache-scorer=1.0} picker=MaxScorePicker");
    assertThat(r.config().profiles().get("default").scorers().get(2).scorer())
        .hasToString("prefix-cache-scorer(blockSizeTokens=16)"); // hashBlockSize 64 characters
    assertThat(r.config().warnings()).singleElement().asString()
        .contains("'kv-cache-scorer' is a former name of 'kv-cache-utilization-scorer'");
  }

  @Test
  void gie100ChartDefaultGivesEveryScorerTheDefaultWeightOfOne() {
    Router r = load("gie-v1.0.0-chart-default-plugins.yaml");
    assertThat(shape(r, "default")).isEqualTo("filters=[] scorers={queue-scorer=1.0,"
        + " kv-cache-utilization-scorer=1.0, prefix-cache-scorer=1.0} picker=MaxScorePicker");
    assertThat(r.config().profiles().get("default").picker()).hasToString("max-score-picker(1)");
    assertThat(r.config().warnings()).isEmpty();
  }

  @Test
  void gie130ChartDefaultIsTheEppDefaultProfile() {
    Router r = load("gie-v1.3.0-chart-default-plugins-rendered.yaml");
    assertThat(shape(r, "default")).isEqualTo("filters=[] scorers={queue-scorer=2.0,"
        + " kv-cache-utilization-scorer=2.0, prefix-cache-scorer=3.0} picker=MaxScorePicker");
    // the shortest queue wins when nothing is cached: 2 has the lowest queue and KV usage
    metrics(r, 1, 8, 0.5);
    metrics(r, 2, 1, 0.1);
    metrics(r, 3, 4, 0.3);
    assertThat(r.route(InferenceRequest.completion("m", "hi")).primary().id()).isEqualTo(id(2));
  }

  @Test
  void gie150DocsExampleSizesThePrefixScorerInTokens() {
    Router r = load("gie-v1.5.0-docs-config-text-example.yaml");
    // "equivalent to ... after defaults": single-profile-handler and max-score-picker added
    assertThat(shape(r, "default")).isEqualTo(
        "filters=[] scorers={prefix-cache-scorer=50.0} picker=MaxScorePicker");
    assertThat(r.config().profileHandler()).hasToString("single-profile-handler");
    assertThat(r.config().profiles().get("default").scorers().get(0).scorer())
        .hasToString("prefix-cache-scorer(blockSizeTokens=5)");
    assertThat(r.config().warnings()).isEmpty();
  }

  @Test
  void chartDefaultLoadsAlthoughItSkipsVerificationOnPlainHttp() {
    // both charts render insecureSkipVerify: true by default ('| default true'), with scheme
    // http, where there is no certificate to verify
    Router r = load("llmd-chart-default-plugins-rendered.yaml");
    assertThat(shape(r, "default")).isEqualTo("filters=[] scorers={queue-scorer=2.0,"
        + " kv-cache-utilization-scorer=2.0, prefix-cache-scorer=3.0} picker=MaxScorePicker");
    assertThat(r.config().plugins().get("metrics-data-source"))
        .hasToString("metrics-data-source(http://<endpoint>/metrics)");
    assertThat(r.config().warnings()).singleElement().asString()
        .contains("'insecureSkipVerify' has no effect");
  }

  @Test
  void chartValuesWithHttpsSkipVerificationAndSayItIsOn() {
    // before, epp4j refused 'insecureSkipVerify: true' with https; the scraper now takes it
    String https = upstream("llmd-chart-default-plugins-rendered.yaml")
        .replace("scheme: \"http\"", "scheme: \"https\"");
    Router r = Router.builder().endpoints(pool(1)).configYaml(https, "https.yaml").build();
    assertThat(r.config().plugins().get("metrics-data-source"))
        .hasToString("metrics-data-source(https://<endpoint>/metrics, insecureSkipVerify)");
    assertThat(r.config().warnings()).singleElement().asString()
        .contains("'insecureSkipVerify' is on");
  }

  // --------------------------------------------------------------- llm-d inference scheduler

  @Test
  void llmdEppConfigRunsTheDecodeFilterAndThePrefixScorerAtWeightTwo() {
    Router r = load("llmd-epp-config.yaml");
    assertThat(shape(r, "default")).isEqualTo(
        "filters=[DecodeFilter] scorers={prefix-cache-scorer=2.0} picker=MaxScorePicker");
    assertThat(r.config().warnings()).isEmpty();
  }

  @Test
  void llmdSimEppConfigIsTheSameWithExplicitPrefixParameters() {
    Router r = load("llmd-sim-epp-config.yaml");
    assertThat(shape(r, "default")).isEqualTo(
        "filters=[DecodeFilter] scorers={prefix-cache-scorer=2.0} picker=MaxScorePicker");
    assertThat(r.config().warnings()).isEmpty();
  }

  @Test
  void llmdDataParallelConfigNoticesPrimaryPort() {
    Router r = load("llmd-dp-epp-config.yaml");
    assertThat(shape(r, "default")).isEqualTo(
        "filters=[DecodeFilter] scorers={prefix-cache-scorer=2.0} picker=MaxScorePicker");
    assertThat(r.config().profileHandler().toString()).contains("data-parallel-profile-handler");
    assertThat(r.config().warnings()).singleElement().asString()
        .contains("'primaryPort' has no effect");
  }

  @Test
  void llmdEstimateConfigTakesDecimalWeights() {
    Router r = load("llmd-epp-estimate-prefix-cache-config.yaml");
    assertThat(shape(r, "default")).isEqualTo("filters=[DecodeFilter] scorers={"
        + "prefix-cache-scorer=1.0, load-aware-scorer=1.0} picker=MaxScorePicker");
    assertThat(r.config().warnings()).isEmpty();
  }

  @Test
  void llmdPreciseConfigLoadsWithItsTokenizerAndDataLayer() {
    Router r = load("llmd-epp-precise-prefix-cache-config.yaml", 64);
    assertThat(shape(r, "default")).isEqualTo("filters=[DecodeFilter] scorers={"
        + "precise-prefix-cache-scorer=2.0, kv-cache-utilization-scorer=1.0, queue-scorer=1.0}"
        + " picker=MaxScorePicker");
    assertThat(r.config().plugins()).containsKeys("token-producer",
        "endpoint-notification-source", "metrics-data-source", "core-metrics-extractor");
    assertThat(r.config().warnings()).singleElement().asString()
        .contains("kvBlockIndexConfig.enableMetrics has no effect");
  }

  @Test
  void llmdSimKvCacheConfigsNoticeTheirMetricsAndHashSeedSettings() {
    Router r = load("llmd-sim-epp-kvcache-config.yaml");
    assertThat(shape(r, "default")).isEqualTo("filters=[DecodeFilter] scorers={"
        + "precise-prefix-cache-scorer=10.0} picker=MaxScorePicker");
    assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
        .contains("metricsLoggingInterval has no effect"));
    Router t = load("llmd-sim-epp-tokenizer-vllm-http-config.yaml");
    assertThat(shape(t, "default")).isEqualTo("filters=[DecodeFilter] scorers={"
        + "precise-prefix-cache-scorer=10.0} picker=MaxScorePicker");
    assertThat(t.config().warnings()).anySatisfy(w -> assertThat(w)
        .contains("hashSeed has no effect"));
  }

  @Test
  void llmdNoHitLruConfigPairsThePreciseScorerWithTheLruScorer() {
    Router r = load("llmd-sim-epp-no-hit-lru.yaml", 5);
    assertThat(shape(r, "default")).isEqualTo("filters=[DecodeFilter] scorers={"
        + "precise-prefix-cache-scorer=2.0, no-hit-lru-scorer=1.0} picker=MaxScorePicker");
    assertThat(r.config().warnings()).isEmpty();
  }

  @Test
  void llmdPdConfigsRunPrefillAndDecodeProfilesUnderTheDisaggHandler() {
    for (String file : List.of("llmd-pd-epp-config.yaml", "llmd-sim-pd-epp-config.yaml")) {
      Router r = load(file);
      assertThat(r.config().profiles()).as(file).containsOnlyKeys("prefill", "decode");
      assertThat(shape(r, "prefill")).as(file).isEqualTo("filters=[PrefillFilter] scorers={"
          + "prefix-cache-scorer=2.0, queue-scorer=1.0} picker=MaxScorePicker");
      assertThat(shape(r, "decode")).as(file).isEqualTo("filters=[DecodeFilter] scorers={"
          + "prefix-cache-scorer=2.0, queue-scorer=1.0} picker=MaxScorePicker");
      assertThat(r.config().profileHandler()).as(file)
          .hasToString("disagg-profile-handler(prefix-based-pd-decider(nonCachedTokens=16))");
      assertThat(r.config().warnings()).as(file).isEmpty();
    }
  }

  @Test
  void llmdProbabilisticAdmitterConfigShedsOnlyThroughTheAdmitter() {
    Router r = load("llmd-probabilistic-admitter-epp-config.yaml");
    assertThat(shape(r, "default")).isEqualTo("filters=[] scorers={} picker=RandomPicker");
    assertThat(r.config().admitters()).hasSize(1);
    // the detector's thresholds from the file: queue 999999999, KV 1.0, staleness default
    assertThat(r.config().saturation()).hasValueSatisfying(s -> {
      assertThat(s.queueThreshold()).isEqualTo(999_999_999);
      assertThat(s.kvCacheThreshold()).isEqualTo(1.0);
      assertThat(s.metricsStaleness()).isEqualTo(java.time.Duration.ofMillis(200));
    });
    // a full pool: the detector does not shed (KV 0.99 < 1.0), the admitter refuses every
    // sheddable request (saturation 0.99 / 0.8 > 0.32) and admits the others
    for (int i = 1; i <= 3; i++) {
      metrics(r, i, 50, 0.99);
    }
    InferenceRequest sheddable = InferenceRequest.completion("m", "hi").toBuilder()
        .priority(-1).build();
    assertThat(r.route(sheddable).isRouted()).isFalse();
    assertThat(r.route(InferenceRequest.completion("m", "hi")).isRouted()).isTrue();
  }

  @Test
  void llmdIntegrationDefaultConfigNoticesTheLegacyMetricsGate() {
    Router r = load("llmd-integration-default-config.yaml");
    assertThat(shape(r, "default")).isEqualTo("filters=[] scorers={queue-scorer=1.0,"
        + " kv-cache-utilization-scorer=1.0, prefix-cache-scorer=1.0, lora-affinity-scorer=1.0}"
        + " picker=MaxScorePicker");
    assertThat(r.config().warnings()).singleElement().asString()
        .contains("'enableLegacyMetrics' has no effect");
  }

  @Test
  void llmdEncodeDisaggregationConfigsAreRefusedNamingEncode() {
    // docs/plugins.md: deciders.encode refused, epp4j has no encode disaggregation
    for (String file : List.of("llmd-sim-e-p-d-epp-config.yaml", "llmd-sim-e-pd-epp-config.yaml")) {
      assertThatThrownBy(() -> load(file)).as(file).isInstanceOf(ConfigException.class)
          .satisfies(e -> assertThat(((ConfigException) e).errors())
              .anySatisfy(m -> assertThat(m).contains("names an encode decider"))
              .anySatisfy(m -> assertThat(m).contains("plugin type 'encode-filter' is"
                  + " upstream's and not in epp4j").contains("multimodal encode")));
    }
  }

  // ------------------------------------------------------------ upstream's defaulting rules

  /**
   * Upstream's loader (ensureSchedulingLayer in pkg/epp/config/loader/defaults.go, llm-d
   * inference scheduler 520af478, GIE v1.5.0 alike; "If one is not defined, a default one named
   * default will be added and will reference all of the instantiated plugins" in
   * site-src/guides/epp-configuration/config-text.md): a file without profiles runs one profile
   * 'default' with every filter, scorer and picker of the file, scorers at weight 1.
   */
  @Test
  void aFileWithoutProfilesRunsEveryPluginInADefaultProfile() {
    String yaml = """
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: decode-filter
        - type: queue-scorer
        - name: kv
          type: kv-cache-utilization-scorer
        - type: random-picker
          parameters:
            maxNumOfEndpoints: 2
        """;
    for (String text : List.of(yaml, yaml + "schedulingProfiles: []\n")) {
      Router r = Router.builder().endpoints(pool(3)).configYaml(text, "no-profiles.yaml").build();
      routers.add(r);
      assertThat(r.config().profiles()).containsOnlyKeys("default");
      assertThat(shape(r, "default")).isEqualTo("filters=[DecodeFilter] scorers={queue-scorer=1.0,"
          + " kv=1.0} picker=RandomPicker");
      assertThat(r.config().profileHandler()).hasToString("single-profile-handler");
      assertThat(r.route(InferenceRequest.completion("m", "hi")).endpoints()).hasSize(2);
    }
  }

  /**
   * Upstream's ensureSaturationDetector and ensureParser (same defaults.go): a section naming
   * {@code utilization-detector} or {@code openai-parser} that the file does not define gets
   * that plugin with its default parameters (the guide: "If a utilization-detector is not
   * explicitly defined in your plugins array, the gateway will automatically instantiate one").
   */
  @Test
  void sectionsNamingTheDefaultDetectorOrParserWorkWithoutDefiningThem() {
    Router r = Router.builder().endpoints(pool(3)).configYaml("""
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: queue-scorer
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: queue-scorer
        saturationDetector:
          pluginRef: utilization-detector
        parser:
          pluginRef: openai-parser
        """, "implicit.yaml").build();
    routers.add(r);
    assertThat(r.config().saturation()).hasValueSatisfying(s -> {
      assertThat(s.queueThreshold()).isEqualTo(5);
      assertThat(s.kvCacheThreshold()).isEqualTo(0.8);
      assertThat(s.metricsStaleness()).isEqualTo(java.time.Duration.ofMillis(200));
    });
    assertThat(shape(r, "default")).isEqualTo(
        "filters=[] scorers={queue-scorer=1.0} picker=MaxScorePicker");
  }
}
