package io.epp4j.core;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.MetricAttributeSource;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * {@code core-metrics-extractor} (upstream data layer): turns a scrape into queue, running,
 * KV-usage, LoRA and cache-size figures. epp4j's {@link PrometheusMetrics} does this and knows
 * the vLLM and SGLang metric names itself, recognising each server's engine by the names it
 * exposes; so {@code defaultEngine} must be {@code vllm} or {@code sglang}, and custom metric
 * specs are refused, since the scrape parser cannot follow them.
 *
 * <p>One part of {@code engineConfigs} is honoured: an entry for {@code vllm} or {@code sglang}
 * that repeats the engine's built-in specs may list {@code customMetrics} whose
 * {@code metricSpec} is a family the scrape already reads (queue, running, KV usage); each is
 * published under its {@code attributeKey} for the endpoint-attribute plugins
 * ({@link MetricAttributeSource}). An entry replaces the engine's built-in mapping upstream, so
 * a spec it leaves out or changes would stop or change what upstream reads; such an entry is
 * refused naming the spec. As upstream, an endpoint has an engine's custom attributes when its
 * {@code engineLabelKey} label (else the former GIE label) names that engine, or names no engine
 * of the file and {@code defaultEngine} is that engine; that is all {@code engineLabelKey}
 * decides in epp4j.
 */
final class CoreMetricsExtractor implements MetricAttributeSource {
  static final String ENGINE_LABEL = "llm-d.ai/engine-type";
  /** The label upstream falls back to, from the Gateway API Inference Extension. */
  static final String LEGACY_ENGINE_LABEL = "inference.networking.k8s.io/engine-type";
  /** The engines whose entries may publish attributes. */
  private static final Set<String> BUILT_IN_NAMES = Set.of("vllm", "sglang");
  /** Engines upstream has built-in mappings for but epp4j does not read: no custom metrics. */
  private static final Set<String> OTHER_ENGINES =
      Set.of("trtllm-serve", "triton-tensorrt-llm", "triton");

  private final String labelKey;
  private final String defaultEngine;
  /** Attribute key, then engine, then the figure that engine's entry publishes under it. */
  private final Map<String, Map<String, ScrapedFigure>> published;

  CoreMetricsExtractor(String labelKey, String defaultEngine,
      Map<String, Map<String, ScrapedFigure>> published) {
    this.labelKey = labelKey;
    this.defaultEngine = defaultEngine;
    Map<String, Map<String, ScrapedFigure>> copy = new LinkedHashMap<>();
    published.forEach((k, v) -> copy.put(k, Map.copyOf(v)));
    this.published = Map.copyOf(copy);
  }

  @Override
  public @Nullable Reader attribute(String key) {
    Map<String, ScrapedFigure> byEngine = published.get(key);
    return byEngine == null ? null : c -> read(byEngine, c);
  }

  @Override
  public Set<String> attributeKeys() {
    return published.keySet();
  }

  private double read(Map<String, ScrapedFigure> byEngine, Candidate c) {
    if (c.metricsScrapedAtNanos() == EndpointMetrics.UNSET_TIME) {
      return Double.NaN; // upstream publishes the attribute at the first scrape
    }
    ScrapedFigure figure = byEngine.get(engine(c.endpoint()));
    return figure == null ? Double.NaN : figure.value(c);
  }

  /** The engine whose mapping upstream applies to {@code e}. */
  String engine(Endpoint e) {
    String v = e.label(labelKey);
    if (v == null || v.isEmpty()) {
      v = e.label(LEGACY_ENGINE_LABEL);
    }
    if (v == null || v.isEmpty()) {
      return defaultEngine;
    }
    // an engine the file has no mapping for gets the default engine's
    return BUILT_IN_NAMES.contains(v) || OTHER_ENGINES.contains(v) ? v : defaultEngine;
  }

  @Override
  public String toString() {
    return "core-metrics-extractor";
  }

  /** Provides {@code core-metrics-extractor}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    private static final Set<String> SPECS = Set.of("queuedRequestsSpec", "runningRequestsSpec",
        "kvUsageSpec", "loraSpec", "cacheInfoSpec", "cacheBlockSizeSpec", "cacheNumBlocksSpec",
        "cacheBlockSizeLabelName", "cacheNumBlocksLabelName");

    /**
     * Upstream's built-in mapping of each engine epp4j reads, spec by spec (a spec not listed is
     * empty, i.e. not read). An {@code engineConfigs} entry must repeat it.
     */
    private static final Map<String, Map<String, String>> BUILT_IN = Map.of(
        "vllm", Map.of("queuedRequestsSpec", "vllm:num_requests_waiting",
            "runningRequestsSpec", "vllm:num_requests_running",
            "kvUsageSpec", "vllm:kv_cache_usage_perc",
            "loraSpec", "vllm:lora_requests_info",
            "cacheInfoSpec", "vllm:cache_config_info"),
        "sglang", Map.of("queuedRequestsSpec", "sglang:num_queue_reqs",
            "runningRequestsSpec", "sglang:num_running_reqs",
            "kvUsageSpec", "sglang:token_usage",
            "cacheInfoSpec", "sglang:cache_config_info",
            "cacheBlockSizeLabelName", "page_size",
            "cacheNumBlocksLabelName", "num_pages"));

    /** What an empty label name means upstream. */
    private static final Map<String, String> LABEL_DEFAULTS = Map.of(
        "cacheBlockSizeLabelName", "block_size", "cacheNumBlocksLabelName", "num_gpu_blocks");

    private static final Set<String> ENTRY_FIELDS = entryFields();

    private static Set<String> entryFields() {
      Set<String> s = new HashSet<>(SPECS);
      s.add("name");
      s.add("customMetrics");
      return Set.copyOf(s);
    }

    public Provider() {
      super("core-metrics-extractor");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters p) {
      String labelKey = p.getString("engineLabelKey", "");
      String engine = p.getEnum("defaultEngine", "vllm", Set.of("vllm", "sglang"));
      for (String spec : new java.util.TreeSet<>(SPECS)) {
        if (p.has(spec)) {
          p.raw(spec);
          p.error(spec, "is not supported: epp4j reads the standard vLLM and SGLang metric names"
              + " (docs/plugins.md, data layer) and cannot map custom ones");
        }
      }
      Map<String, Map<String, ScrapedFigure>> published = new LinkedHashMap<>();
      Object configs = p.raw("engineConfigs");
      if (configs instanceof List<?> list) {
        Set<String> engines = new HashSet<>();
        for (int i = 0; i < list.size(); i++) {
          engineConfig(p, "engineConfigs[" + i + "]", list.get(i), engines, published);
        }
      } else if (configs != null) {
        p.error("engineConfigs", "must be a list of engine configurations");
      }
      if (p.has("engineLabelKey") && published.isEmpty()) {
        p.notice("engineLabelKey", "has no effect without customMetrics: epp4j recognises vLLM"
            + " and SGLang servers by the metric names they expose, not by a pod label");
      }
      return new CoreMetricsExtractor(labelKey == null || labelKey.isEmpty() ? ENGINE_LABEL
          : labelKey, engine, published);
    }

    private static void engineConfig(Parameters p, String where, @Nullable Object node,
        Set<String> engines, Map<String, Map<String, ScrapedFigure>> published) {
      if (!(node instanceof Map<?, ?> entry)) {
        p.error(where, "must be an engine configuration (a mapping with 'name')");
        return;
      }
      for (Object k : entry.keySet()) {
        if (!ENTRY_FIELDS.contains(String.valueOf(k))) {
          p.error(where + "." + k, "is not a field of an engine configuration");
        }
      }
      Object name = entry.get("name");
      String engine = name instanceof String n ? n : "";
      Map<String, String> builtIn = BUILT_IN.get(engine);
      if (builtIn == null) {
        p.error(where + ".name", "must be 'vllm' or 'sglang', got " + describe(name) + ": epp4j"
            + " reads only those engines' metrics and recognises them by their metric names");
        return;
      }
      if (!engines.add(engine)) {
        p.error(where + ".name", "configures engine '" + engine + "' a second time");
      }
      for (String spec : new java.util.TreeSet<>(SPECS)) {
        String expected = builtIn.getOrDefault(spec, "");
        Object given = entry.get(spec);
        String text = given == null ? "" : String.valueOf(given);
        String dflt = LABEL_DEFAULTS.get(spec);
        boolean same = text.equals(expected)
            || dflt != null && (text.isEmpty() ? dflt : text)
                .equals(expected.isEmpty() ? dflt : expected);
        if (!same) {
          p.error(where + "." + spec, "must be '" + expected + "', upstream's built-in value for"
              + " " + engine + ", got '" + text + "': an engineConfigs entry replaces the built-in"
              + " mapping, and epp4j cannot read " + engine + " servers otherwise"
              + (text.isEmpty() ? " (left out, upstream would stop reading it)" : ""));
        }
      }
      Object custom = entry.get("customMetrics");
      if (custom instanceof List<?> metrics) {
        Set<String> keys = new HashSet<>();
        for (int j = 0; j < metrics.size(); j++) {
          customMetric(p, where + ".customMetrics[" + j + "]", engine, metrics.get(j), keys,
              published);
        }
      } else if (custom != null) {
        p.error(where + ".customMetrics", "must be a list of {attributeKey, metricSpec}");
      }
    }

    private static void customMetric(Parameters p, String where, String engine,
        @Nullable Object node, Set<String> keys,
        Map<String, Map<String, ScrapedFigure>> published) {
      if (!(node instanceof Map<?, ?> m)) {
        p.error(where, "must be a mapping with attributeKey and metricSpec");
        return;
      }
      for (Object k : m.keySet()) {
        if (!"attributeKey".equals(k) && !"metricSpec".equals(k)) {
          p.error(where + "." + k, "is not a field of a custom metric");
        }
      }
      Object key = m.get("attributeKey");
      Object spec = m.get("metricSpec");
      if (!(key instanceof String k) || k.isEmpty()) {
        p.error(where + ".attributeKey", "is required: the attribute name the figure is"
            + " published under");
        return;
      }
      if (!keys.add(k)) {
        p.error(where + ".attributeKey", "'" + k + "' is listed twice for " + engine);
        return;
      }
      ScrapedFigure figure =
          spec instanceof String s ? ScrapedFigure.ofFamily(engine, s.strip()) : null;
      if (figure == null) {
        p.error(where + ".metricSpec", "must be one of the " + engine + " metrics epp4j scrapes"
            + " (" + families(engine) + "), without label selectors, got " + describe(spec)
            + ": epp4j's scrape reads only those families, summed over their series");
        return;
      }
      published.computeIfAbsent(k, x -> new LinkedHashMap<>()).put(engine, figure);
    }

    private static String families(String engine) {
      StringBuilder b = new StringBuilder();
      for (ScrapedFigure a : ScrapedFigure.values()) {
        b.append(b.length() == 0 ? "" : ", ").append(a.family(engine));
      }
      return b.toString();
    }

    private static String describe(@Nullable Object v) {
      return v == null ? "nothing" : v instanceof Map ? "an object" : v instanceof List ? "a list"
          : "'" + v + "'";
    }
  }
}
