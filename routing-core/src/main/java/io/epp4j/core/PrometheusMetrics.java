package io.epp4j.core;

import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Result;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Consumer;
import org.jspecify.annotations.Nullable;

/**
 * Reads a model server's Prometheus text exposition ({@code /metrics}) into
 * {@link EndpointMetrics}. Understands vLLM ({@code vllm:num_requests_waiting},
 * {@code vllm:num_requests_running}, {@code vllm:kv_cache_usage_perc} or the older
 * {@code vllm:gpu_cache_usage_perc}, {@code vllm:cache_config_info{block_size,num_gpu_blocks}},
 * {@code vllm:lora_requests_info}) and SGLang ({@code sglang:num_queue_reqs},
 * {@code sglang:num_running_reqs}, {@code sglang:token_usage}, and the KV cache size from
 * {@code sglang:cache_config_info{page_size,num_pages}} or the later gauges
 * {@code sglang:page_size} and {@code sglang:num_pages}), and TensorRT-LLM with upstream's
 * built-in mappings: {@code trtllm-serve} ({@code trtllm_num_requests_waiting},
 * {@code trtllm_num_requests_running}, {@code trtllm_kv_cache_utilization},
 * {@code trtllm_kv_cache_tokens_per_block}, {@code trtllm_kv_cache_max_blocks}) and Triton's
 * TensorRT-LLM backend ({@code nv_trt_llm_request_metrics{request_type}} {@code waiting} and
 * {@code scheduled}; {@code nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type}}
 * {@code fraction}, {@code tokens_per} and {@code max}). When a family has several series
 * (several models or data-parallel engines) request counts are summed and KV usage takes the
 * maximum, so a hot engine is never averaged away; a negative count (a broken gauge) counts as 0,
 * so it cannot cancel another series' work. SGLang's per-priority series of a queue (a non-empty
 * {@code priority} label) break down the total it writes under {@code priority=""}, so they count
 * only on a page without that total; series of one SGLang queue that differ only in the
 * tensor-parallel rank ({@code tp_rank}, {@code moe_ep_rank}), or waiting-queue series that
 * differ only in the pipeline stage ({@code pp_rank}), are copies of one schedule and count
 * once, the largest, while the stages' running series are added: each is the count of one
 * micro-batch of {@code pp_size + pp_async_batch_depth}, so their sum estimates the running total
 * with the default depth 0 and shows about {@code pp_size / (pp_size + depth)} of it above; the
 * page carries nothing that would make it exact. A series (a metric
 * name with one label set, labels in any order) that the exposition repeats counts once, with the
 * value of its last line, as a
 * later sample of the same series: Prometheus refuses such an exposition, and summed, a repeated
 * queue would double the endpoint's load. A vLLM server none of whose engines is fully awake is
 * {@link EndpointMetrics#asleep() asleep} (put to sleep with {@code POST /sleep}, paused, or woken
 * up in part, weights without KV cache): it serves no inference request, while its queues and KV
 * usage read 0. An engine is not fully awake when {@code
 * vllm:engine_sleep_state{sleep_state="awake"}} or {@code vllm:engine_fully_awake} reads 0, or
 * when {@code vllm:engine_sleep_resource_state} puts its scheduler or a memory resource in a
 * state other than {@code running} or {@code resident}; a page without any of them is awake.
 * What tells a restart is read too: {@code process_start_time_seconds}, which a page served by
 * one process carries (vLLM with one API server), and the counter {@code
 * vllm:prompt_tokens_total} or {@code sglang:prompt_tokens_total}, summed over its series, which
 * a restarted server starts again from 0 (see {@link EndpointMetrics#processStartTimeSeconds()}
 * and {@link EndpointMetrics#promptTokensTotal()}).
 */
public final class PrometheusMetrics {
  private PrometheusMetrics() {}

  /** Prometheus's standard start time of the process that serves the page. */
  private static final String PROCESS_START = "process_start_time_seconds";

  /** The families {@link #parse} reads; lines of any other family are skipped unparsed. */
  private static final Set<String> FAMILIES = Set.of("vllm:num_requests_waiting",
      "sglang:num_queue_reqs", "vllm:num_requests_running", "sglang:num_running_reqs",
      "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
      "vllm:cache_config_info", "vllm:lora_requests_info", "sglang:cache_config_info",
      "sglang:page_size", "sglang:num_pages", "vllm:engine_sleep_state",
      "vllm:engine_fully_awake", "vllm:engine_sleep_resource_state",
      "trtllm_num_requests_waiting", "trtllm_num_requests_running", "trtllm_kv_cache_utilization",
      "trtllm_kv_cache_tokens_per_block", "trtllm_kv_cache_max_blocks",
      "nv_trt_llm_request_metrics", "nv_trt_llm_kv_cache_block_metrics",
      PROCESS_START, "vllm:prompt_tokens_total", "sglang:prompt_tokens_total");

  /** Labels that tell vLLM's sleep series of one engine apart; the rest identify the engine. */
  private static final Set<String> SLEEP_LABELS = Set.of("sleep_state", "resource", "state");
  /** The resources of {@code vllm:engine_sleep_resource_state} an engine serves only with. */
  private static final Set<String> SERVING_RESOURCES = Set.of("scheduler", "weights", "kv_cache");

  /**
   * The engines whose figures every page should carry (waiting, running, KV usage), with the
   * names a missing figure is reported by and the families that carry them. Triton's TensorRT-LLM
   * backend writes all three figures in two families, told apart by a label.
   */
  private enum Engine {
    VLLM("vllm:num_requests_waiting", "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc (nor the older vllm:gpu_cache_usage_perc)",
        Set.of("vllm:num_requests_waiting", "vllm:num_requests_running",
            "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
    SGLANG("sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage",
        Set.of("sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage")),
    TRTLLM_SERVE("trtllm_num_requests_waiting", "trtllm_num_requests_running",
        "trtllm_kv_cache_utilization", Set.of("trtllm_num_requests_waiting",
            "trtllm_num_requests_running", "trtllm_kv_cache_utilization")),
    TRITON_TRTLLM("nv_trt_llm_request_metrics{request_type=\"waiting\"}",
        "nv_trt_llm_request_metrics{request_type=\"scheduled\"}",
        "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\"}",
        Set.of("nv_trt_llm_request_metrics", "nv_trt_llm_kv_cache_block_metrics"));

    final String waiting;
    final String running;
    final String kvUsage;
    final Set<String> figureFamilies;

    Engine(String waiting, String running, String kvUsage, Set<String> figureFamilies) {
      this.waiting = waiting;
      this.running = running;
      this.kvUsage = kvUsage;
      this.figureFamilies = figureFamilies;
    }
  }

  /** The families of the figures of every engine. */
  private static final Set<String> FIGURES = figures();

  private static Set<String> figures() {
    Set<String> u = new java.util.HashSet<>();
    for (Engine e : Engine.values()) {
      u.addAll(e.figureFamilies);
    }
    return Set.copyOf(u);
  }

  /** What a sample is a figure of: 'w' waiting, 'r' running, 'k' KV usage, or 0 none. */
  private static char figureOf(Sample s) {
    switch (s.name) {
      case "vllm:num_requests_waiting", "sglang:num_queue_reqs", "trtllm_num_requests_waiting":
        return 'w';
      case "vllm:num_requests_running", "sglang:num_running_reqs", "trtllm_num_requests_running":
        return 'r';
      case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
          "trtllm_kv_cache_utilization":
        return 'k';
      case "nv_trt_llm_request_metrics": {
        String type = s.labels.get("request_type");
        return "waiting".equals(type) ? 'w' : "scheduled".equals(type) ? 'r' : 0;
      }
      case "nv_trt_llm_kv_cache_block_metrics":
        return "fraction".equals(s.labels.get("kv_cache_block_type")) ? 'k' : 0;
      default:
        return 0;
    }
  }

  private static boolean hasFigure(Map<String, Sample> samples, char figure) {
    for (Sample s : samples.values()) {
      if (figureOf(s) == figure) {
        return true;
      }
    }
    return false;
  }

  /**
   * The engine the page is from, to name a missing figure in its words: an engine other than
   * vLLM whose figures the page has and vLLM's not, or, on a page without any figure, whose
   * families it declares and vLLM's not; else vLLM.
   */
  private static Engine engineOf(Map<String, Sample> samples, Set<String> declared, boolean any) {
    for (Engine e : Engine.values()) {
      if (e != Engine.VLLM && (any ? hasAny(samples, e.figureFamilies)
              && !hasAny(samples, Engine.VLLM.figureFamilies)
          : !java.util.Collections.disjoint(declared, e.figureFamilies)
              && java.util.Collections.disjoint(declared, Engine.VLLM.figureFamilies))) {
        return e;
      }
    }
    return Engine.VLLM;
  }

  /** The family a {@code # HELP name ...} or {@code # TYPE name ...} line is about, or null. */
  private static @Nullable String declaredFamily(String comment) {
    String[] words = comment.substring(1).strip().split("[ \t]+", 3);
    return words.length >= 2 && (words[0].equals("HELP") || words[0].equals("TYPE"))
        ? words[1] : null;
  }

  private static boolean hasAny(Map<String, Sample> samples, Set<String> families) {
    for (Sample s : samples.values()) {
      if (families.contains(s.name)) {
        return true;
      }
    }
    return false;
  }

  /** An SGLang queue series: running or waiting, a priority's share or a total, its count. */
  private record SglangQueue(boolean running, boolean breakdown, double count) {}

  /** One parsed sample. */
  record Sample(String name, Map<String, String> labels, double value) {}

  /**
   * What identifies a series: {@code name{k="v",...}} with the labels sorted (so label order does
   * not count) and escaped as in the exposition format, as a String. Strings rather than a record of
   * name and label map: a map's hash is the sum of its entries', so label values an exporter builds
   * from colliding blocks ({@code "Aa"}, {@code "BB"}) would put every series in one bucket and make
   * the parse quadratic; colliding Strings are still ordered within a bucket (they are
   * comparable), so a lookup stays logarithmic. Also the form a log line names a series by.
   */
  static String seriesKey(String name, Map<String, String> labels) {
    if (labels.isEmpty()) {
      return name;
    }
    StringBuilder b = new StringBuilder(name).append('{');
    for (Map.Entry<String, String> e : new TreeMap<>(labels).entrySet()) {
      if (b.charAt(b.length() - 1) != '{') {
        b.append(',');
      }
      b.append(e.getKey()).append("=\"");
      String v = e.getValue();
      for (int i = 0; i < v.length(); i++) {
        char c = v.charAt(i);
        if (c == '\n') {
          b.append("\\n");
          continue;
        }
        if (c == '"' || c == '\\') {
          b.append('\\');
        }
        b.append(c);
      }
      b.append('"');
    }
    return b.append('}').toString();
  }

  /**
   * Parses an exposition. Fails (naming the line) only on malformed sample lines of the families
   * above; unknown families are skipped. A body whose samples are all of other families is an
   * error, so a wrong URL is noticed instead of reading as an idle server; but a body with no
   * sample at all, or whose {@code # HELP}/{@code # TYPE} lines declare a queue or KV family it
   * has no sample of, is a server that has not written its gauges yet (SGLang before its first
   * batch) and reads as idle, each figure named as missing. Never throws: {@code NaN}
   * samples are skipped, and counts read from labels are kept within {@code [0, 2^31)}. A series
   * the text repeats counts once, with its last value.
   */
  public static Result<EndpointMetrics> parse(String text) {
    return parse(text, repeated -> { }, missing -> { });
  }

  /**
   * {@link #parse(String)}, telling {@code repeated} of the first series the text repeats (as
   * {@code name{labels}}), if any, so the caller can warn about a server that breaks the format;
   * and telling {@code missing} of the figures (waiting, running, KV usage) a parsed page has no
   * sample of, by the metric names that were looked for (in the names of the engine the page is
   * from), so the caller can say why a figure reads 0.
   */
  static Result<EndpointMetrics> parse(String text, Consumer<String> repeated,
      Consumer<String> missing) {
    // by series, in the order of their last lines: a repeated series keeps its last sample
    Map<String, Sample> samples = new LinkedHashMap<>();
    @Nullable String firstRepeated = null;
    // whether the page has a sample line at all, and which figure families its HELP/TYPE lines
    // declare: a server that has not written its gauges yet shows them without samples, or
    // (prometheus_client's multiprocess mode, SGLang's) shows an empty page
    boolean anySample = false;
    Set<String> declared = new java.util.HashSet<>();
    String[] lines = text.split("\n");
    for (int i = 0; i < lines.length; i++) {
      String line = lines[i].strip();
      if (line.isEmpty()) {
        continue;
      }
      if (line.charAt(0) == '#') {
        String family = declaredFamily(line);
        if (family != null) {
          declared.add(family);
        }
        continue;
      }
      anySample = true;
      // only the families read below may fail the scrape: an odd line of another one (a
      // histogram, a metric a newer server adds) must not cost the queue and KV figures
      if (!(line.startsWith("vllm:") || line.startsWith("sglang:")
              || line.startsWith("trtllm_") || line.startsWith("nv_trt_llm_")
              || line.startsWith(PROCESS_START))
          || !FAMILIES.contains(line.substring(0, nameEnd(line)))) {
        continue;
      }
      Sample s = parseLine(line);
      if (s == null) {
        return Result.error("metrics line " + (i + 1) + " is not a valid sample: "
            + (line.length() > 120 ? line.substring(0, 120) + "..." : line));
      }
      String key = seriesKey(s.name, s.labels);
      if (samples.remove(key) != null && firstRepeated == null) {
        firstRepeated = key;
      }
      samples.put(key, s);
    }
    if (firstRepeated != null) {
      repeated.accept(firstRepeated);
    }
    double waiting = 0;
    double running = 0;
    // SGLang's per-priority breakdown of a queue whose total it also writes (under priority="")
    double waitingByPriority = 0;
    double runningByPriority = 0;
    boolean waitingTotal = false;
    boolean runningTotal = false;
    // SGLang's queue series by what they count, apart from the rank that wrote them
    Map<String, SglangQueue> sglangQueues = new HashMap<>();
    double kv = -1;
    long blocks = 0;
    int blockSize = 0;
    Set<String> runningLoras = new LinkedHashSet<>();
    Set<String> waitingLoras = new LinkedHashSet<>();
    int maxLoras = 0;
    double loraStamp = Double.NEGATIVE_INFINITY;
    boolean loraNamed = false; // whether the LoRA series kept names an adapter
    boolean any = false;
    // what tells a restart: the serving process's start time, the prompt tokens counted since
    double startTime = 0;
    double promptTokens = 0;
    boolean promptTokensCounted = false;
    // vLLM's sleep state by engine: whether every sleep series of the engine says it serves
    Map<String, Boolean> engineAwake = new HashMap<>();
    for (Sample s : samples.values()) {
      // NaN: a gauge with no value yet; the family is there, but summed or compared the sample
      // would wipe out the other series
      boolean nan = Double.isNaN(s.value);
      // a count below zero is a broken gauge: summed, it would cancel other series' real work
      double count = nan || s.value < 0 ? 0 : s.value;
      switch (s.name) {
        case "vllm:num_requests_waiting", "trtllm_num_requests_waiting" -> {
          waiting += count;
          waitingTotal = true;
          any = true;
        }
        case "vllm:num_requests_running", "trtllm_num_requests_running" -> {
          running += count;
          runningTotal = true;
          any = true;
        }
        // Triton's TensorRT-LLM backend: requests by request_type (also active, max, context)
        case "nv_trt_llm_request_metrics" -> {
          char figure = figureOf(s);
          if (figure == 'w') {
            waiting += count;
            waitingTotal = true;
            any = true;
          } else if (figure == 'r') {
            running += count;
            runningTotal = true;
            any = true;
          }
        }
        // its KV cache blocks by kv_cache_block_type (also used and free)
        case "nv_trt_llm_kv_cache_block_metrics" -> {
          String type = s.labels.get("kv_cache_block_type");
          if ("fraction".equals(type)) {
            kv = nan ? kv : Math.max(kv, s.value);
            any = true;
          } else if ("max".equals(type)) {
            blocks = Math.max(blocks, count(s.value, Long.MAX_VALUE));
          } else if ("tokens_per".equals(type)) {
            blockSize = (int) Math.max(blockSize, count(s.value, Integer.MAX_VALUE));
          }
        }
        case "sglang:num_queue_reqs", "sglang:num_running_reqs" -> {
          // the ranks of one tensor-parallel group run one schedule: each rank that reports
          // (all of them with --enable-metrics-for-all-schedulers) writes the same queues under
          // its own tp_rank and moe_ep_rank; copies count once, the largest (ranks read a step
          // apart), while data-parallel ranks (dp_rank) hold queues of their own. The stages of
          // a pipeline (pp_rank; each stage's first tensor-parallel rank reports by default)
          // differ by figure: every stage receives each request from the one before and keeps
          // the same waiting queue, a copy; but a stage runs its requests in micro-batches
          // (pp_size + pp_async_batch_depth of them), each with its own running batch, and
          // writes the running count of one: the micro-batch whose decode step it logged last
          // (every decode_log_interval steps). The stages run one schedule a step apart, so they
          // mostly write the same micro-batch, and pp_size of them added make pp_size times one
          // micro-batch: the running total when micro-batches are even and the depth is 0 (the
          // default), about pp_size / (pp_size + depth) of it otherwise. One stage's series would
          // show a single micro-batch; the depth is on no series, so nothing here can scale up
          boolean runningSeries = s.name.equals("sglang:num_running_reqs");
          Map<String, String> group = new HashMap<>(s.labels);
          group.remove("tp_rank");
          group.remove("moe_ep_rank");
          if (!runningSeries) {
            group.remove("pp_rank");
          }
          sglangQueues.merge(seriesKey(s.name, group),
              new SglangQueue(runningSeries, priorityBreakdown(s), count),
              (a, b) -> a.count >= b.count ? a : b);
          any = true;
        }
        case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
            "trtllm_kv_cache_utilization" -> {
          kv = nan ? kv : Math.max(kv, s.value);
          any = true;
        }
        case "vllm:cache_config_info" -> {
          blocks = Math.max(blocks, labelCount(s.labels.get("num_gpu_blocks"), Long.MAX_VALUE));
          blockSize = (int) Math.max(blockSize, labelCount(s.labels.get("block_size"), Integer.MAX_VALUE));
        }
        // SGLang's KV cache size: labels of an info gauge up to 0.5.10 (what upstream reads),
        // gauges of their own since; a page is SGLang's block (1 token unless --page-size)
        case "sglang:cache_config_info" -> {
          blocks = Math.max(blocks, labelCount(s.labels.get("num_pages"), Long.MAX_VALUE));
          blockSize = (int) Math.max(blockSize, labelCount(s.labels.get("page_size"), Integer.MAX_VALUE));
        }
        case "vllm:engine_sleep_state", "vllm:engine_fully_awake",
            "vllm:engine_sleep_resource_state" -> {
          Boolean serves = nan ? null : servesBySleepSeries(s);
          if (serves != null) {
            Map<String, String> engine = new HashMap<>(s.labels);
            engine.keySet().removeAll(SLEEP_LABELS);
            engineAwake.merge(seriesKey("", engine), serves, Boolean::logicalAnd);
          }
        }
        // a page served by one process (vLLM with one API server) carries its start time;
        // prometheus_client's multiprocess mode (SGLang, vLLM with several API servers) does not
        case PROCESS_START -> startTime = nan ? startTime : Math.max(startTime, s.value);
        case "vllm:prompt_tokens_total", "sglang:prompt_tokens_total" -> {
          promptTokens += count;
          promptTokensCounted |= !nan;
        }
        case "sglang:num_pages", "trtllm_kv_cache_max_blocks" ->
            blocks = Math.max(blocks, count(s.value, Long.MAX_VALUE));
        case "sglang:page_size", "trtllm_kv_cache_tokens_per_block" ->
            blockSize = (int) Math.max(blockSize, count(s.value, Integer.MAX_VALUE));
        case "vllm:lora_requests_info" -> {
          // one series per change; the value is the time it was set: keep the newest that names
          // an adapter. vLLM writes one with both lists empty whenever it has no adapter request;
          // the adapters it last served are still loaded, which is what affinity is about (so
          // upstream skips such series too). Only a server that never named one has none.
          Set<String> run = split(s.labels.get("running_lora_adapters"));
          Set<String> wait = split(s.labels.get("waiting_lora_adapters"));
          boolean names = !run.isEmpty() || !wait.isEmpty();
          if (!nan && (names ? !loraNamed || s.value >= loraStamp : !loraNamed && s.value >= loraStamp)) {
            loraNamed = names;
            loraStamp = s.value;
            runningLoras = run;
            waitingLoras = wait;
            maxLoras = (int) labelCount(s.labels.get("max_lora"), Integer.MAX_VALUE);
          }
        }
        default -> { }
      }
    }
    // a page without a sample (SGLang in multiprocess mode before its scheduler first logs its
    // stats) or that declares a figure family without a sample of it (the same in single-process
    // mode) is a server that has not reported yet: an idle one, as upstream reads it. A page
    // whose samples are all of other families is something else (a wrong path or port)
    boolean fresh = !anySample || !java.util.Collections.disjoint(declared, FIGURES);
    if (!any && !fresh) {
      return Result.error(
          "no vLLM or SGLang (nor TensorRT-LLM) queue/KV metrics found in the exposition");
    }
    // a family with only NaN samples is there; one without a sample is not, and its figure
    // reads 0: named, so that a server which renamed or hid a metric does not go unnoticed
    Engine engine = engineOf(samples, declared, any);
    StringBuilder lacking = new StringBuilder();
    if (!hasFigure(samples, 'w')) {
      lacking.append(engine.waiting);
    }
    if (!hasFigure(samples, 'r')) {
      lacking.append(lacking.length() == 0 ? "" : ", ").append(engine.running);
    }
    if (!hasFigure(samples, 'k')) {
      lacking.append(lacking.length() == 0 ? "" : ", ").append(engine.kvUsage);
    }
    if (!anySample) {
      missing.accept("any metric (the page is empty; SGLang writes none before its first batch)");
    } else if (lacking.length() > 0) {
      missing.accept(lacking.toString());
    }
    for (SglangQueue q : sglangQueues.values()) {
      if (q.running && q.breakdown) {
        runningByPriority += q.count;
      } else if (q.running) {
        running += q.count;
        runningTotal = true;
      } else if (q.breakdown) {
        waitingByPriority += q.count;
      } else {
        waiting += q.count;
        waitingTotal = true;
      }
    }
    // the breakdown stands in for a total only where the page has no total series
    waiting = waitingTotal ? waiting : waitingByPriority;
    running = runningTotal ? running : runningByPriority;
    double usage = kv < 0 ? 0 : Math.min(1.0, Math.max(0.0, kv));
    return Result.ok(EndpointMetrics.builder()
        .waitingRequests((int) Math.min(Integer.MAX_VALUE, Math.max(0, waiting)))
        .runningRequests((int) Math.min(Integer.MAX_VALUE, Math.max(0, running)))
        .kvCacheUsage(usage)
        .kvCapacityBlocks(blocks)
        .blockSizeTokens(blockSize)
        .runningLoraAdapters(runningLoras)
        .waitingLoraAdapters(waitingLoras)
        .maxLoras(maxLoras)
        .asleep(!engineAwake.isEmpty() && !engineAwake.containsValue(Boolean.TRUE))
        .processStartTimeSeconds(startTime < Double.POSITIVE_INFINITY ? startTime : 0)
        .promptTokensTotal(promptTokensCounted ? count(promptTokens, Long.MAX_VALUE)
            : EndpointMetrics.NO_COUNT)
        .build());
  }

  /**
   * What one of vLLM's sleep series says of its engine: true that it serves, false that it does
   * not, null nothing. vLLM writes three forms. {@code vllm:engine_sleep_state{sleep_state}}: 1
   * under {@code awake} for an engine that serves, else 0 (with 1 under {@code weights_offloaded}
   * or {@code discard_all} for sleep levels 1 and 2); since vLLM tracks the scheduler and each
   * memory resource apart, {@code awake} reads 0 also while the scheduler is paused or after a
   * partial wake-up (weights back, KV cache not). {@code vllm:engine_fully_awake}: 1 only while the
   * scheduler runs and weights and KV cache are resident. {@code
   * vllm:engine_sleep_resource_state{resource,state}}: 1 under each resource's current state
   * ({@code running} or {@code paused} for the scheduler; {@code resident}, {@code offloaded},
   * {@code discarded}, {@code released} or {@code unknown} for weights and KV cache). A frontend
   * may write only the two later forms, so each is read on its own.
   */
  private static @Nullable Boolean servesBySleepSeries(Sample s) {
    switch (s.name) {
      case "vllm:engine_sleep_state":
        // weights_offloaded and discard_all only tell a sleeping engine's level: awake says it
        return "awake".equals(s.labels.get("sleep_state")) ? s.value != 0 : null;
      case "vllm:engine_fully_awake":
        return s.value != 0;
      default: {
        // a state a resource is not in (0) says nothing; the one it is in says whether it serves.
        // Only the resources a served request needs count, not one a later version may add
        String state = s.labels.get("state");
        if (s.value == 0 || state == null || !SERVING_RESOURCES.contains(s.labels.get("resource"))) {
          return null;
        }
        return state.equals("running") || state.equals("resident");
      }
    }
  }

  /**
   * Whether {@code s} is one priority's share of an SGLang queue: with priority scheduling on,
   * SGLang writes each queue's total with an empty {@code priority} label and, beside it, the
   * same requests once more per priority ({@code priority="0"}, ...). Added to the total, they
   * would count every request twice.
   */
  private static boolean priorityBreakdown(Sample s) {
    if (!s.name.startsWith("sglang:")) {
      return false;
    }
    String priority = s.labels.get("priority");
    return priority != null && !priority.isEmpty();
  }

  private static Set<String> split(@Nullable String csv) {
    Set<String> out = new LinkedHashSet<>();
    if (csv != null) {
      for (String p : csv.split(",")) {
        if (!p.isBlank()) {
          out.add(p.strip());
        }
      }
    }
    return out;
  }

  /**
   * A count from a label value, within {@code [0, max]}: a negative, huge or unreadable value must
   * not reach {@link EndpointMetrics}, whose constructor refuses negative counts.
   */
  private static long labelCount(@Nullable String s, long max) {
    if (s == null) {
      return 0;
    }
    Double parsed = value(s.strip());
    return parsed == null ? 0 : count(parsed, max);
  }

  /** A count within {@code [0, max]} from a sample or label value; NaN is 0. */
  private static long count(double v, long max) {
    return v > 0 ? Math.min(max, (long) v) : 0;
  }

  /** Where the metric name of a sample line ends: at its labels or the first blank or tab. */
  private static int nameEnd(String line) {
    int i = 0;
    int n = line.length();
    while (i < n && line.charAt(i) != '{' && !blank(line.charAt(i))) {
      i++;
    }
    return i;
  }

  // the text format separates tokens by any number of blanks and/or tabs
  private static boolean blank(char c) {
    return c == ' ' || c == '\t';
  }

  /**
   * {@code name{k="v",...} value [timestamp]}, or null when malformed. Tokens may be separated by
   * blanks or tabs, also between the name and its labels, as Prometheus's own parser allows.
   */
  static @Nullable Sample parseLine(String line) {
    int n = line.length();
    int i = nameEnd(line);
    String name = line.substring(0, i);
    while (i < n && blank(line.charAt(i))) {
      i++;
    }
    Map<String, String> labels = Map.of();
    if (i < n && line.charAt(i) == '{') {
      labels = new HashMap<>();
      i++;
      while (true) {
        while (i < n && (blank(line.charAt(i)) || line.charAt(i) == ',')) {
          i++;
        }
        if (i >= n) {
          return null;
        }
        if (line.charAt(i) == '}') {
          i++;
          break;
        }
        int eq = line.indexOf('=', i);
        if (eq < 0 || eq + 1 >= n || line.charAt(eq + 1) != '"') {
          return null;
        }
        String key = line.substring(i, eq).strip();
        StringBuilder val = new StringBuilder();
        int j = eq + 2;
        boolean closed = false;
        while (j < n) {
          char c = line.charAt(j++);
          if (c == '\\' && j < n) {
            char e = line.charAt(j++);
            val.append(e == 'n' ? '\n' : e);
          } else if (c == '"') {
            closed = true;
            break;
          } else {
            val.append(c);
          }
        }
        if (!closed) {
          return null;
        }
        labels.put(key, val.toString());
        i = j;
      }
    }
    while (i < n && blank(line.charAt(i))) {
      i++;
    }
    int end = i;
    while (end < n && !blank(line.charAt(end))) {
      end++;
    }
    if (end == i) {
      return null;
    }
    Double value = value(line.substring(i, end));
    return value == null ? null : new Sample(name, labels, value);
  }

  /**
   * A sample value as Go's {@code ParseFloat} reads it, which the text format prescribes: besides
   * numbers, {@code Inf}, {@code Infinity} and {@code NaN} in any case, infinities with an
   * optional sign; null when unreadable.
   */
  private static @Nullable Double value(String v) {
    String unsigned = v.startsWith("+") || v.startsWith("-") ? v.substring(1) : v;
    if (unsigned.equalsIgnoreCase("inf") || unsigned.equalsIgnoreCase("infinity")) {
      return v.startsWith("-") ? Double.NEGATIVE_INFINITY : Double.POSITIVE_INFINITY;
    }
    if (v.equalsIgnoreCase("nan")) {
      return Double.NaN;
    }
    if (v.isEmpty() || javaOnly(v)) {
      return null;
    }
    try {
      return Double.parseDouble(v);
    } catch (NumberFormatException e) {
      return null;
    }
  }

  /**
   * Whether Java would read {@code v} as a number where Go does not: with a type suffix
   * ({@code 5d}, {@code 1.5F}) or with the control characters and blanks around it that {@link
   * Double#parseDouble} trims.
   */
  private static boolean javaOnly(String v) {
    char last = v.charAt(v.length() - 1);
    return last == 'd' || last == 'D' || last == 'f' || last == 'F'
        || v.charAt(0) <= ' ' || last <= ' ';
  }
}
