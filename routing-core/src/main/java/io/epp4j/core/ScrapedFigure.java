package io.epp4j.core;

import io.epp4j.api.Candidate;
import org.jspecify.annotations.Nullable;

/**
 * A figure of an endpoint's scraped metrics that a {@code customMetrics} entry of
 * {@code core-metrics-extractor} may publish as an attribute: only those the scrape itself
 * carries, each read from the vLLM or SGLang metric family named here.
 */
enum ScrapedFigure {
  WAITING_REQUESTS("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
  RUNNING_REQUESTS("vllm:num_requests_running", "sglang:num_running_reqs"),
  KV_CACHE_USAGE("vllm:kv_cache_usage_perc", "sglang:token_usage");

  private final String vllmFamily;
  private final String sglangFamily;

  ScrapedFigure(String vllmFamily, String sglangFamily) {
    this.vllmFamily = vllmFamily;
    this.sglangFamily = sglangFamily;
  }

  /** The metric family of {@code engine} ({@code vllm} or {@code sglang}) this figure reads. */
  String family(String engine) {
    return "sglang".equals(engine) ? sglangFamily : vllmFamily;
  }

  /** The figure of {@code engine} whose metric family is {@code family}, or null. */
  static @Nullable ScrapedFigure ofFamily(String engine, String family) {
    for (ScrapedFigure f : values()) {
      if (f.family(engine).equals(family)) {
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
