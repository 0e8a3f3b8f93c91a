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
}
