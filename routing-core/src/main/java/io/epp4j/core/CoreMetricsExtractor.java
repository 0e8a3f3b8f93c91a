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
 * the vLLM, SGLang and TensorRT-LLM (trtllm-serve, Triton) metric names itself, recognising each
 * server's engine by the names it exposes; so {@code defaultEngine} must name one of upstream's
 * built-in engines ({@code vllm}, {@code sglang}, {@code trtllm-serve},
 * {@code triton-tensorrt-llm}), and custom metric specs are refused, since the scrape parser
 * cannot follow them.
 *
 * <p>One part of {@code engineConfigs} is honoured: an entry for a built-in engine that repeats
 * its built-in specs may list {@code customMetrics} whose
 * {@code metricSpec} is a figure the scrape already reads (queue, running, KV usage); each is
 * published under its {@code attributeKey} for the endpoint-attribute plugins
 * ({@link MetricAttributeSource}). An entry replaces the engine's built-in mapping upstream, so
 * a spec it leaves out or changes would stop or change what upstream reads; such an entry is
 * refused naming the spec. As upstream, an endpoint has an engine's custom attributes when its
 * {@code engineLabelKey} label (else the former GIE label) names that engine, or names no engine
 * of the file and {@code defaultEngine} is that engine; that, and which endpoints the figures
 * turned off below apply to, is all {@code engineLabelKey} decides in epp4j.
 *
 * <p>As upstream, an entry may set {@code loraSpec} or {@code cacheInfoSpec} to the empty string
 * (or leave it out) to stop reading that figure for its engine: the router then publishes the
 * metrics of each endpoint of that engine without LoRA adapters ({@code maxLoras} 0) or without
 * KV-cache size (block size and block count 0, i.e. unknown), which is what upstream's plugins
 * see. The TensorRT-LLM engines read the cache size from two gauges instead,
 * {@code cacheBlockSizeSpec} and {@code cacheNumBlocksSpec}, each of which may be left empty to
 * leave its figure unknown. The masking runs when metrics are published ({@link #mask}, from
 * {@code Router.updateMetrics}), not on the request path. Empty queue, running and KV-usage
 * specs, which would give every endpoint of the engine a load of 0, are refused.
 */
final class CoreMetricsExtractor implements MetricAttributeSource {
  static final String ENGINE_LABEL = "llm-d.ai/engine-type";
  /** The label upstream falls back to, from the Gateway API Inference Extension. */
  static final String LEGACY_ENGINE_LABEL = "inference.networking.k8s.io/engine-type";
  /** The engines upstream has built-in mappings for, each of which epp4j reads. */
  static final Set<String> BUILT_IN_NAMES =
      Set.of("vllm", "sglang", "trtllm-serve", "triton-tensorrt-llm");

  private final String labelKey;
  private final String defaultEngine;
  /** Attribute key, then engine, then the figure that engine's entry publishes under it. */
  private final Map<String, Map<String, ScrapedFigure>> published;
  /** Engines whose entry sets {@code loraSpec: ""}: their endpoints publish no adapters. */
  private final Set<String> loraOff;
  /** Engines whose entry does not read the block size: their endpoints' is unknown. */
  private final Set<String> blockSizeOff;
  /** Engines whose entry does not read the block count: their endpoints' is unknown. */
  private final Set<String> blockCountOff;

  CoreMetricsExtractor(String labelKey, String defaultEngine,
      Map<String, Map<String, ScrapedFigure>> published) {
    this(labelKey, defaultEngine, published, Set.of(), Set.of(), Set.of());
  }

  CoreMetricsExtractor(String labelKey, String defaultEngine,
      Map<String, Map<String, ScrapedFigure>> published, Set<String> loraOff,
      Set<String> blockSizeOff, Set<String> blockCountOff) {
    this.labelKey = labelKey;
    this.defaultEngine = defaultEngine;
    this.loraOff = Set.copyOf(loraOff);
    this.blockSizeOff = Set.copyOf(blockSizeOff);
    this.blockCountOff = Set.copyOf(blockCountOff);
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

  /** Whether an entry turns off a figure, so that {@link #mask} may change metrics. */
  boolean masks() {
    return !loraOff.isEmpty() || !blockSizeOff.isEmpty() || !blockCountOff.isEmpty();
  }

  /**
   * {@code m} without the figures the entry of {@code e}'s engine turns off (an empty
   * {@code loraSpec}, {@code cacheInfoSpec}, {@code cacheBlockSizeSpec} or
   * {@code cacheNumBlocksSpec}); {@code m} itself when it turns none off. Called
   * by the router as metrics are published, off the request path.
   */
  EndpointMetrics mask(Endpoint e, EndpointMetrics m) {
    String engine = engine(e);
    boolean lora = loraOff.contains(engine)
        && (m.maxLoras() != 0 || !m.runningLoraAdapters().isEmpty()
            || !m.waitingLoraAdapters().isEmpty());
    boolean blocks = blockCountOff.contains(engine) && m.kvCapacityBlocks() != 0;
    boolean blockSize = blockSizeOff.contains(engine) && m.blockSizeTokens() != 0;
    if (!lora && !blocks && !blockSize) {
      return m;
    }
    return new EndpointMetrics(m.waitingRequests(), m.runningRequests(), m.kvCacheUsage(),
        blocks ? 0 : m.kvCapacityBlocks(), blockSize ? 0 : m.blockSizeTokens(),
        lora ? Set.of() : m.runningLoraAdapters(), lora ? Set.of() : m.waitingLoraAdapters(),
        lora ? 0 : m.maxLoras(), m.scrapedAtNanos(), m.asleep(), m.processStartTimeSeconds(),
        m.promptTokensTotal());
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
    return BUILT_IN_NAMES.contains(v) ? v : defaultEngine;
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
    static final Map<String, Map<String, String>> BUILT_IN = Map.of(
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
            "cacheNumBlocksLabelName", "num_pages"),
        "trtllm-serve", Map.of("queuedRequestsSpec", "trtllm_num_requests_waiting",
            "runningRequestsSpec", "trtllm_num_requests_running",
            "kvUsageSpec", "trtllm_kv_cache_utilization",
            "cacheBlockSizeSpec", "trtllm_kv_cache_tokens_per_block",
            "cacheNumBlocksSpec", "trtllm_kv_cache_max_blocks"),
        "triton-tensorrt-llm", Map.of(
            "queuedRequestsSpec", "nv_trt_llm_request_metrics{request_type=waiting}",
            "runningRequestsSpec", "nv_trt_llm_request_metrics{request_type=scheduled}",
            "kvUsageSpec", "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}",
            "cacheBlockSizeSpec",
            "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=tokens_per}",
            "cacheNumBlocksSpec", "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max}"));

    /** Specs an entry may set to "" to stop reading the figure, as upstream. */
    private static final Set<String> MAY_BE_OFF =
        Set.of("loraSpec", "cacheInfoSpec", "cacheBlockSizeSpec", "cacheNumBlocksSpec");

    /** Specs that only say how to read {@code cacheInfoSpec}'s family. */
    private static final Set<String> CACHE_LABELS =
        Set.of("cacheBlockSizeLabelName", "cacheNumBlocksLabelName");

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
      String engine = p.getEnum("defaultEngine", "vllm", BUILT_IN_NAMES);
      for (String spec : new java.util.TreeSet<>(SPECS)) {
        if (p.has(spec)) {
          p.raw(spec);
          p.error(spec, "is not supported: epp4j reads the standard vLLM, SGLang and"
              + " TensorRT-LLM metric names (docs/plugins.md, data layer) and cannot map custom"
              + " ones");
        }
      }
      Map<String, Map<String, ScrapedFigure>> published = new LinkedHashMap<>();
      Set<String> loraOff = new HashSet<>();
      Set<String> blockSizeOff = new HashSet<>();
      Set<String> blockCountOff = new HashSet<>();
      Object configs = p.raw("engineConfigs");
      if (configs instanceof List<?> list) {
        Set<String> engines = new HashSet<>();
        for (int i = 0; i < list.size(); i++) {
          engineConfig(p, "engineConfigs[" + i + "]", list.get(i), engines, published, loraOff,
              blockSizeOff, blockCountOff);
        }
      } else if (configs != null) {
        p.error("engineConfigs", "must be a list of engine configurations");
      }
      if (p.has("engineLabelKey") && published.isEmpty() && loraOff.isEmpty()
          && blockSizeOff.isEmpty() && blockCountOff.isEmpty()) {
        p.notice("engineLabelKey", "has no effect without customMetrics or an empty loraSpec or"
            + " cache spec: epp4j recognises vLLM, SGLang"
            + " and TensorRT-LLM servers by the metric names they expose, not by a pod label");
      }
      return new CoreMetricsExtractor(labelKey == null || labelKey.isEmpty() ? ENGINE_LABEL
          : labelKey, engine, published, loraOff, blockSizeOff, blockCountOff);
    }

    private static void engineConfig(Parameters p, String where, @Nullable Object node,
        Set<String> engines, Map<String, Map<String, ScrapedFigure>> published,
        Set<String> loraOff, Set<String> blockSizeOff, Set<String> blockCountOff) {
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
        p.error(where + ".name", "must be one of " + new java.util.TreeSet<>(BUILT_IN_NAMES)
            + ", got " + describe(name) + ": epp4j recognises each engine by its metric names"
            + " and takes entries (custom metrics, figures turned off) only for upstream's"
            + " built-in engines, not for an engine of custom specs");
        return;
      }
      if (!engines.add(engine)) {
        p.error(where + ".name", "configures engine '" + engine + "' a second time");
      }
      // upstream: a spec written as "" (or left out) is not read for this engine
      boolean cacheOff = isEmpty(entry.get("cacheInfoSpec"));
      if (isEmpty(entry.get("loraSpec")) && builtIn.containsKey("loraSpec")) {
        loraOff.add(engine);
      }
      if (cacheOff && builtIn.containsKey("cacheInfoSpec")) {
        blockSizeOff.add(engine);
        blockCountOff.add(engine);
      }
      // the TensorRT-LLM engines: the cache size from two gauges, each read or not on its own
      if (isEmpty(entry.get("cacheBlockSizeSpec")) && builtIn.containsKey("cacheBlockSizeSpec")) {
        blockSizeOff.add(engine);
      }
      if (isEmpty(entry.get("cacheNumBlocksSpec")) && builtIn.containsKey("cacheNumBlocksSpec")) {
        blockCountOff.add(engine);
      }
      for (String spec : new java.util.TreeSet<>(SPECS)) {
        String expected = builtIn.getOrDefault(spec, "");
        Object given = entry.get(spec);
        String text = given == null ? "" : String.valueOf(given);
        if (MAY_BE_OFF.contains(spec) && text.isEmpty()
            || cacheOff && CACHE_LABELS.contains(spec)) {
          continue; // turned off, or describes a family that is no longer read
        }
        if ("".equals(given) && !expected.isEmpty()) {
          p.error(where + "." + spec, "may not be empty: upstream would then read 0 for every "
              + engine + " endpoint, which the load-aware plugins would take for an idle server;"
              + " write '" + expected + "', or leave the engine out of engineConfigs");
          continue;
        }
        String dflt = LABEL_DEFAULTS.get(spec);
        boolean same = sameSpec(text, expected)
            || dflt != null && (text.isEmpty() ? dflt : text)
                .equals(expected.isEmpty() ? dflt : expected);
        if (!same && expected.isEmpty()) {
          p.error(where + "." + spec, "is not read for " + engine + " (upstream's built-in"
              + " mapping leaves it empty), got '" + text + "': epp4j reads " + engine
              + " servers by its built-in names and cannot map custom ones; leave it out");
        } else if (!same) {
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
      ScrapedFigure figure = spec instanceof String s ? ScrapedFigure.ofSpec(engine, s) : null;
      if (figure == null) {
        p.error(where + ".metricSpec", "must be one of the " + engine + " metrics epp4j scrapes"
            + " (" + families(engine) + "), got " + describe(spec)
            + ": epp4j's scrape reads only those, summed over their series");
        return;
      }
      published.computeIfAbsent(k, x -> new LinkedHashMap<>()).put(engine, figure);
    }

    /**
     * Whether a spec names the same metric and label values as upstream's built-in one: upstream
     * reads a spec as a PromQL selector and takes a label value with or without its quotes, and
     * blanks around the parts.
     */
    static boolean sameSpec(String given, String builtIn) {
      return normalSpec(given).equals(normalSpec(builtIn));
    }

    /** A spec without blanks and without the quotes around its label values. */
    static String normalSpec(String spec) {
      StringBuilder b = new StringBuilder(spec.length());
      for (int i = 0; i < spec.length(); i++) {
        char c = spec.charAt(i);
        if (c != '"' && c != ' ' && c != '\t') {
          b.append(c);
        }
      }
      return b.toString();
    }

    private static boolean isEmpty(@Nullable Object spec) {
      return spec == null || "".equals(spec);
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
