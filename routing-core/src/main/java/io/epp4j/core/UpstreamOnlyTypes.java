package io.epp4j.core;

import java.util.HashMap;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * Plugin types of the upstream EPP and llm-d that epp4j does not have, with the reason: a file
 * that names one is refused saying why, rather than as a misspelt type. A plugin of that type
 * found on the class path (an application's own) is used as any other.
 */
final class UpstreamOnlyTypes {
  private static final Map<String, String> WHY = new HashMap<>();

  static {
    why("it needs llm-d's latency predictor (models trained on the cluster's own requests by"
        + " sidecars), which epp4j does not have", "predicted-latency-producer", "latency-scorer",
        "latency-slo-admitter", "slo-headroom-tier-filter");
    why("it belongs to upstream's flow control, which queues requests; epp4j routes each request"
        + " when it comes (its saturation detector is utilization-detector)",
        "edf-ordering-policy", "fcfs-ordering-policy",
        "global-strict-fairness-policy", "round-robin-fairness-policy",
        "static-usage-limit-policy", "priority-then-time-eviction-order-policy",
        "slo-deadline-ordering-policy", "sheddable-eviction-filter",
        "soft-reflective-ceiling-policy", "priority-holdback-policy", "program-aware-fairness");
    why("epp4j routes text and token prompts; multimodal encode disaggregation and embedding"
        + " caches are not in it", "encode-filter", "always-disagg-multimodal-decider",
        "mm-embeddings-cache-producer", "mm-embeddings-cache-scorer");
    why("epp4j reads OpenAI bodies only (openai-parser); a gateway can route other APIs by"
        + " their headers with Router.routeHeaders", "passthrough-parser", "vertexai-parser",
        "vllmgrpc-parser", "vllmhttp-parser", "sglanghttp-parser", "anthropic-parser");
    why("the application tells the router its endpoints (Router.setEndpoints); epp4j discovers"
        + " none itself", "k8s-notification-source", "file-discovery",
        "multicluster-file-discovery", "disaggregatedset-rollout-pod-extractor",
        "disaggregatedset-rollout-screener");
    why("epp4j routes within one pool; multi-cluster routing is not in it",
        "multicluster-approx-prefix-cache-producer", "multicluster-kv-cache-utilization-scorer",
        "multicluster-metrics-data-source", "multicluster-metrics-extractor",
        "multicluster-prefix-cache-scorer", "multicluster-queue-scorer",
        "multicluster-session-affinity-filter");
    why("routers share what they know through routing-redis (replication), not through"
        + " upstream's syncer", "cross-replica-publisher", "local-syncer");
    why("epp4j scrapes the model servers' /metrics only", "dcgm-data-source", "dcgm-extractor",
        "models-data-source", "models-data-extractor");
    why("it holds each request for a batch window to place requests that share a prompt"
        + " together; epp4j's router decides each request when it comes, without waiting",
        "burst-prefix-cache-producer");
    why("it reports expressions over the answer's usage to Envoy; epp4j's Envoy server reports"
        + " the served endpoint only", "request-attribute-reporter");
  }

  private UpstreamOnlyTypes() {}

  private static void why(String reason, String... types) {
    for (String t : types) {
      WHY.put(t, reason);
    }
  }

  /** Why epp4j lacks {@code type}, or null when it is not a known upstream type. */
  static @Nullable String why(String type) {
    return WHY.get(type);
  }
}
