package io.epp4j.core;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.Set;

/**
 * {@code core-metrics-extractor} (upstream data layer): turns a scrape into queue, running,
 * KV-usage, LoRA and cache-size figures. epp4j's {@link PrometheusMetrics} does this and knows
 * the vLLM and SGLang metric names itself, recognising each server's engine by the names it
 * exposes; so {@code engineLabelKey} (a pod label that would name the engine) is accepted with a
 * notice, {@code defaultEngine} must be {@code vllm} or {@code sglang}, and custom metric specs
 * ({@code engineConfigs}, {@code *Spec}) are refused, since the scrape parser cannot follow them.
 */
final class CoreMetricsExtractor implements Plugin {
  @Override
  public String toString() {
    return "core-metrics-extractor";
  }

  /** Provides {@code core-metrics-extractor}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    private static final Set<String> SPECS = Set.of("queuedRequestsSpec", "runningRequestsSpec",
        "kvUsageSpec", "loraSpec", "cacheInfoSpec", "cacheBlockSizeSpec", "cacheNumBlocksSpec",
        "cacheBlockSizeLabelName", "cacheNumBlocksLabelName", "engineConfigs");

    public Provider() {
      super("core-metrics-extractor");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters p) {
      if (p.has("engineLabelKey")) {
        p.notice("engineLabelKey", "has no effect: epp4j recognises vLLM and SGLang servers by"
            + " the metric names they expose, not by a pod label");
      }
      p.getEnum("defaultEngine", "vllm", Set.of("vllm", "sglang"));
      for (String spec : new java.util.TreeSet<>(SPECS)) {
        if (p.has(spec)) {
          p.raw(spec);
          p.error(spec, "is not supported: epp4j reads the standard vLLM and SGLang metric names"
              + " (docs/plugins.md, data layer) and cannot map custom ones");
        }
      }
      return new CoreMetricsExtractor();
    }
  }
}
