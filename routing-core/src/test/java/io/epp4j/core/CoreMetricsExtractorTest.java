package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** What the metrics of an endpoint look like once a core-metrics-extractor entry turns specs off. */
class CoreMetricsExtractorTest {

  static final String VLLM_PLAIN = "10.0.0.1:8000";
  static final String SGLANG = "10.0.0.2:8000";

  static String yaml(String loraSpec, String cacheInfoSpec) {
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
              cacheInfoSpec: %s
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: max-score-picker
        """.formatted(loraSpec, cacheInfoSpec);
  }

  static final EndpointMetrics SCRAPED = EndpointMetrics.builder().waitingRequests(3)
      .runningRequests(2).kvCacheUsage(0.5).kvCapacityBlocks(512).blockSizeTokens(16)
      .runningLoraAdapters(Set.of("a", "b")).waitingLoraAdapters(Set.of("c")).maxLoras(4).build();

  /** The metrics each endpoint is seen with after one scrape reported {@link #SCRAPED}. */
  static Map<String, EndpointMetrics> seen(String yaml) {
    List<Endpoint> pool = List.of(Endpoint.parse(VLLM_PLAIN),
        Endpoint.parse(SGLANG, Map.of("llm-d.ai/engine-type", "sglang")));
    try (Router r = Router.builder().endpoints(pool).configYaml(yaml, "t.yaml").build()) {
      r.updateMetrics(VLLM_PLAIN, SCRAPED);
      r.updateMetrics(Map.of(SGLANG, SCRAPED));
      Map<String, EndpointMetrics> m = new java.util.HashMap<>();
      for (Candidate c : r.endpoints()) {
        m.put(c.id(), c.metrics());
      }
      return m;
    }
  }

  @Test
  void anEmptyLoraSpecLeavesTheEnginesEndpointsWithoutAdaptersAndChangesNothingElse() {
    Map<String, EndpointMetrics> off = seen(yaml("\"\"", "vllm:cache_config_info"));
    EndpointMetrics m = off.get(VLLM_PLAIN);
    assertThat(m.runningLoraAdapters()).isEmpty();
    assertThat(m.waitingLoraAdapters()).isEmpty();
    assertThat(m.maxLoras()).isZero();
    assertThat(m).usingRecursiveComparison()
        .ignoringFields("runningLoraAdapters", "waitingLoraAdapters", "maxLoras", "scrapedAtNanos")
        .isEqualTo(SCRAPED);
    // an endpoint of another engine keeps what its server reported
    assertThat(off.get(SGLANG).runningLoraAdapters()).containsExactlyInAnyOrder("a", "b");
    assertThat(off.get(SGLANG).maxLoras()).isEqualTo(4);
  }

  @Test
  void theBuiltInLoraSpecKeepsTheAdapters() {
    EndpointMetrics m = seen(yaml("vllm:lora_requests_info", "vllm:cache_config_info"))
        .get(VLLM_PLAIN);
    assertThat(m).usingRecursiveComparison().ignoringFields("scrapedAtNanos").isEqualTo(SCRAPED);
  }

  @Test
  void anEmptyCacheInfoSpecLeavesTheCacheSizeUnknown() {
    EndpointMetrics m = seen(yaml("vllm:lora_requests_info", "''")).get(VLLM_PLAIN);
    assertThat(m.kvCapacityBlocks()).isZero();
    assertThat(m.blockSizeTokens()).isZero();
    assertThat(m).usingRecursiveComparison()
        .ignoringFields("kvCapacityBlocks", "blockSizeTokens", "scrapedAtNanos")
        .isEqualTo(SCRAPED);
  }

  @Test
  void anEmptyLoadSpecIsRefusedNamingTheField() {
    String noKv = yaml("\"\"", "\"\"").replace("kvUsageSpec: vllm:kv_cache_usage_perc",
        "kvUsageSpec: \"\"");
    try (Router r = Router.builder().configYaml(noKv, "t.yaml").build()) {
      throw new AssertionError("loaded a file with an empty kvUsageSpec");
    } catch (ConfigException e) {
      assertThat(e.errors()).anySatisfy(msg -> assertThat(msg)
          .contains("'engineConfigs[0].kvUsageSpec' may not be empty"));
      assertThat(e.errors()).noneSatisfy(msg -> assertThat(msg).contains("loraSpec"));
      assertThat(e.errors()).noneSatisfy(msg -> assertThat(msg).contains("cacheInfoSpec"));
    }
  }

  static final String TRTLLM = """
      - name: trtllm-serve
        queuedRequestsSpec: trtllm_num_requests_waiting
        runningRequestsSpec: trtllm_num_requests_running
        kvUsageSpec: trtllm_kv_cache_utilization
        cacheBlockSizeSpec: trtllm_kv_cache_tokens_per_block
        cacheNumBlocksSpec: trtllm_kv_cache_max_blocks
      """;

  static String extractor(String defaultEngine, String entries) {
    return """
        plugins:
        - type: core-metrics-extractor
          parameters:
            defaultEngine: %s
            engineConfigs:
        %s
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: max-score-picker
        """.formatted(defaultEngine, entries.indent(4).stripTrailing());
  }

  /**
   * Upstream's core-metrics-extractor has built-in mappings for trtllm-serve and Triton's
   * TensorRT-LLM backend besides vLLM and SGLang, and takes any of them as defaultEngine and in
   * engineConfigs; a file that said so did not load.
   */
  @Test
  void theTensorRtLlmEnginesAreTakenAsDefaultEngineAndInEngineConfigsAsUpstream() {
    String triton = """
        - name: triton-tensorrt-llm
          queuedRequestsSpec: nv_trt_llm_request_metrics{request_type=waiting}
          runningRequestsSpec: 'nv_trt_llm_request_metrics{request_type="scheduled"}'
          kvUsageSpec: nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}
          cacheBlockSizeSpec: nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=tokens_per}
          customMetrics:
          - {attributeKey: queue, metricSpec: 'nv_trt_llm_request_metrics{request_type="waiting"}'}
        """;
    for (String engine : List.of("trtllm-serve", "triton-tensorrt-llm")) {
      try (Router r = Router.builder().configYaml(extractor(engine, TRTLLM + triton), "t.yaml")
          .build()) {
        assertThat(r.config().plugins()).containsKey("core-metrics-extractor");
      }
    }
    // the Triton entry leaves the block count out: its endpoints' is unknown, as upstream reads
    // nothing then, while the block size and everything else are kept
    Endpoint tritonServer = Endpoint.parse("10.0.0.3:8000",
        Map.of("llm-d.ai/engine-type", "triton-tensorrt-llm"));
    Endpoint trtllmServer = Endpoint.parse("10.0.0.4:8000",
        Map.of("llm-d.ai/engine-type", "trtllm-serve"));
    try (Router r = Router.builder().endpoints(List.of(tritonServer, trtllmServer))
        .configYaml(extractor("trtllm-serve", TRTLLM + triton), "t.yaml").build()) {
      r.updateMetrics(Map.of(tritonServer.id(), SCRAPED, trtllmServer.id(), SCRAPED));
      Map<String, Candidate> seen = new java.util.HashMap<>();
      for (Candidate c : r.endpoints()) {
        seen.put(c.id(), c);
      }
      EndpointMetrics t = seen.get(tritonServer.id()).metrics();
      assertThat(t.kvCapacityBlocks()).isZero();
      assertThat(t).usingRecursiveComparison()
          .ignoringFields("kvCapacityBlocks", "scrapedAtNanos").isEqualTo(SCRAPED);
      assertThat(seen.get(trtllmServer.id()).metrics()).usingRecursiveComparison()
          .ignoringFields("scrapedAtNanos").isEqualTo(SCRAPED);
      CoreMetricsExtractor x =
          (CoreMetricsExtractor) r.config().plugins().get("core-metrics-extractor");
      assertThat(x.attribute("queue").read(seen.get(tritonServer.id()))).isEqualTo(3.0);
      assertThat(x.attribute("queue").read(seen.get(trtllmServer.id()))).isNaN();
    }
  }

  @Test
  void anEngineOrSpecEpp4jCannotReadIsRefusedNamingTheField() {
    assertThat(errors(extractor("my-engine", TRTLLM))).anySatisfy(m -> assertThat(m)
        .contains("'defaultEngine'").contains("my-engine").contains("triton-tensorrt-llm"));
    assertThat(errors(extractor("vllm", """
        - name: my-engine
          queuedRequestsSpec: q
          runningRequestsSpec: r
          kvUsageSpec: k
        """))).anySatisfy(m -> assertThat(m).contains("'engineConfigs[0].name'")
        .contains("'my-engine'").contains("trtllm-serve"));
    assertThat(errors(extractor("vllm", TRTLLM.replace("trtllm_kv_cache_utilization",
        "my_kv_usage")))).anySatisfy(m -> assertThat(m).contains("'engineConfigs[0].kvUsageSpec'")
        .contains("trtllm_kv_cache_utilization").contains("my_kv_usage"));
    assertThat(errors(extractor("vllm", TRTLLM + "  cacheInfoSpec: trtllm_cache_info\n")))
        .anySatisfy(m -> assertThat(m).contains("'engineConfigs[0].cacheInfoSpec'")
            .contains("trtllm_cache_info"));
  }

  private static List<String> errors(String yaml) {
    try (Router r = Router.builder().configYaml(yaml, "t.yaml").build()) {
      throw new AssertionError("loaded " + yaml);
    } catch (ConfigException e) {
      return e.errors();
    }
  }
}
