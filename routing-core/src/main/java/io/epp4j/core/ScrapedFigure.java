package io.epp4j.core;

import io.epp4j.api.Candidate;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * A figure of an endpoint's scraped metrics that a {@code customMetrics} entry of
 * {@code core-metrics-extractor} may publish as an attribute: only those the scrape itself
 * carries, each read, for each of upstream's built-in engines, from the metric named here as
 * upstream's built-in mapping names it.
 */
enum ScrapedFigure {
  WAITING_REQUESTS(Map.of("vllm", "vllm:num_requests_waiting",
      "sglang", "sglang:num_queue_reqs",
      "trtllm-serve", "trtllm_num_requests_waiting",
      "triton-tensorrt-llm", "nv_trt_llm_request_metrics{request_type=waiting}")),
  RUNNING_REQUESTS(Map.of("vllm", "vllm:num_requests_running",
      "sglang", "sglang:num_running_reqs",
      "trtllm-serve", "trtllm_num_requests_running",
      "triton-tensorrt-llm", "nv_trt_llm_request_metrics{request_type=scheduled}")),
  KV_CACHE_USAGE(Map.of("vllm", "vllm:kv_cache_usage_perc",
      "sglang", "sglang:token_usage",
      "trtllm-serve", "trtllm_kv_cache_utilization",
      "triton-tensorrt-llm", "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}"));

  /** The metric (with its label selector, where upstream's spec has one) by engine. */
  private final Map<String, String> byEngine;

  ScrapedFigure(Map<String, String> byEngine) {
    this.byEngine = byEngine;
  }

  /** The metric of {@code engine} (one of upstream's built-in engines) this figure reads. */
  String family(String engine) {
    String family = byEngine.get(engine);
    return family != null ? family : byEngine.getOrDefault("vllm", "");
  }

  /**
   * The figure of {@code engine} whose metric {@code spec} names (label values with or without
   * quotes, as upstream reads a spec), or null.
   */
  static @Nullable ScrapedFigure ofSpec(String engine, String spec) {
    for (ScrapedFigure f : values()) {
      if (CoreMetricsExtractor.Provider.sameSpec(spec, f.family(engine))) {
        return f;
      }
    }
    return null;
  }

  /** The figure's last scraped value for the candidate. */
  double value(Candidate c) {
    switch (this) {
      case WAITING_REQUESTS:
        return c.waitingRequests();
      case RUNNING_REQUESTS:
        return c.runningRequests();
      default:
        return c.kvCacheUsage();
    }
  }
}
