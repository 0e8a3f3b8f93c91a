package io.epp4j.api;

/**
 * A figure of an endpoint's scraped {@link EndpointMetrics} that a {@code core-metrics-extractor}
 * publishes as a numeric endpoint attribute under a key of the configuration's choosing (its
 * {@code customMetrics}), and that {@code endpoint-attribute-filter} and
 * {@code endpoint-attribute-scorer} read. Only the figures the scrape itself carries can be
 * published this way: each constant names the vLLM and SGLang metric families it comes from.
 */
public enum MetricAttribute {
  /** Requests waiting in the server's queue. */
  WAITING_REQUESTS("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
  /** Requests in the server's running batch. */
  RUNNING_REQUESTS("vllm:num_requests_running", "sglang:num_running_reqs"),
  /** The fraction of the KV cache in use, 0 to 1. */
  KV_CACHE_USAGE("vllm:kv_cache_usage_perc", "sglang:token_usage");

  private final String vllmFamily;
  private final String sglangFamily;

  MetricAttribute(String vllmFamily, String sglangFamily) {
    this.vllmFamily = vllmFamily;
    this.sglangFamily = sglangFamily;
  }

  /** The metric family of {@code engine} ({@code vllm} or {@code sglang}) this figure reads. */
  public String family(String engine) {
    return "sglang".equals(engine) ? sglangFamily : vllmFamily;
  }

  /** The figure of {@code engine} whose metric family is {@code family}, or null. */
  public static @org.jspecify.annotations.Nullable MetricAttribute ofFamily(String engine,
      String family) {
    for (MetricAttribute a : values()) {
      if (a.family(engine).equals(family)) {
        return a;
      }
    }
    return null;
  }

  /**
   * Whether the candidate carries the attribute: it does once its server has been scraped, as
   * upstream's extractor publishes the attribute at the first scrape and keeps the last value.
   */
  public static boolean present(Candidate c) {
    return c.metricsScrapedAtNanos() != EndpointMetrics.UNSET_TIME;
  }

  /** The figure's value for the candidate (its last scraped one). */
  public double value(Candidate c) {
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
