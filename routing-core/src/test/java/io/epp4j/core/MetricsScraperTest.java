package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Result;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class MetricsScraperTest {
  // for tests that count any failed scrape of a healthy server: the default 1 s can run out on a
  // loaded machine without anything being wrong
  static final Duration UNHURRIED = Duration.ofSeconds(30);

  static final String VLLM = """
      # HELP vllm:num_requests_waiting Number of requests waiting to be processed.
      # TYPE vllm:num_requests_waiting gauge
      vllm:num_requests_waiting{engine="0",model_name="qwen3"} 3.0
      vllm:num_requests_waiting{engine="1",model_name="qwen3"} 2.0
      vllm:num_requests_running{engine="0",model_name="qwen3"} 17.0
      vllm:kv_cache_usage_perc{engine="0",model_name="qwen3"} 0.42
      vllm:kv_cache_usage_perc{engine="1",model_name="qwen3"} 0.61
      vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="4521"} 1.0
      vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters=""} 1.7e9
      vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql",waiting_lora_adapters="math"} 1.6e9
      vllm:prefix_cache_hits_total{model_name="qwen3"} 12345
      """;

  @Test
  void parsesVllmExposition() {
    EndpointMetrics m = PrometheusMetrics.parse(VLLM).value();
    assertThat(m.waitingRequests()).isEqualTo(5);
    assertThat(m.runningRequests()).isEqualTo(17);
    assertThat(m.kvCacheUsage()).isEqualTo(0.61);
    assertThat(m.kvCapacityBlocks()).isEqualTo(4521);
    assertThat(m.blockSizeTokens()).isEqualTo(16);
    assertThat(m.runningLoraAdapters()).isEqualTo(Set.of("sql", "chat"));
    assertThat(m.waitingLoraAdapters()).isEmpty();
    assertThat(m.maxLoras()).isEqualTo(4);
  }

  @Test
  void parsesSglangAndOlderVllmNames() {
    EndpointMetrics s = PrometheusMetrics.parse("sglang:num_queue_reqs 4\nsglang:num_running_reqs 9\nsglang:token_usage 0.3\n").value();
    assertThat(s.waitingRequests()).isEqualTo(4);
    assertThat(s.runningRequests()).isEqualTo(9);
    assertThat(s.kvCacheUsage()).isEqualTo(0.3);
    EndpointMetrics old = PrometheusMetrics.parse("vllm:gpu_cache_usage_perc{model_name=\"a\"} 0.25\n").value();
    assertThat(old.kvCacheUsage()).isEqualTo(0.25);
  }

  @Test
  void rejectsBodiesWithoutModelServerMetricsAndMalformedLines() {
    Result<EndpointMetrics> none = PrometheusMetrics.parse("process_cpu_seconds_total 3\n");
    assertThat(none.errors().get(0)).contains("no vLLM or SGLang");
    Result<EndpointMetrics> bad = PrometheusMetrics.parse("vllm:num_requests_waiting{model=\"x 3\n");
    assertThat(bad.errors().get(0)).contains("line 1");
  }

  /**
   * SGLang writes its scheduler gauges at its first batch. Before that its /metrics, served by
   * prometheus_client in multiprocess mode, is empty, and in single-process mode declares the
   * families without a sample. Both failed the scrape, so a fresh replica counted as saturated
   * for shedding until a request reached it; upstream reads it as idle. A page whose samples are
   * all of other families is still refused.
   */
  @Test
  void aServerThatHasNotWrittenItsGaugesYetReadsIdleNotFailed() {
    java.util.List<String> missing = new java.util.ArrayList<>();
    Result<EndpointMetrics> empty = PrometheusMetrics.parse("", s -> { }, missing::add);
    assertThat(empty.isOk()).isTrue();
    assertThat(empty.value().waitingRequests()).isZero();
    assertThat(empty.value().kvCacheUsage()).isZero();
    assertThat(missing).singleElement().asString().contains("empty");

    missing.clear();
    String declaredOnly = """
        # HELP sglang:num_queue_reqs The number of requests in the waiting queue.
        # TYPE sglang:num_queue_reqs gauge
        # HELP sglang:num_running_reqs The number of running requests.
        # TYPE sglang:num_running_reqs gauge
        # HELP sglang:token_usage The token usage.
        # TYPE sglang:token_usage gauge
        # HELP python_gc_objects_collected_total Objects collected during gc
        # TYPE python_gc_objects_collected_total counter
        python_gc_objects_collected_total{generation="0"} 312.0
        """;
    Result<EndpointMetrics> fresh = PrometheusMetrics.parse(declaredOnly, s -> { }, missing::add);
    assertThat(fresh.isOk()).isTrue();
    assertThat(fresh.value().runningRequests()).isZero();
    assertThat(missing).singleElement().asString().contains("sglang:num_queue_reqs")
        .contains("sglang:token_usage").doesNotContain("vllm:");

    // samples of other families only, nothing of a model server declared: a wrong target
    assertThat(PrometheusMetrics.parse("# TYPE node_load1 gauge\nnode_load1 0.5\n").isOk())
        .isFalse();
    assertThat(PrometheusMetrics.parse("<html><body>Not here</body></html>\n").isOk()).isFalse();
  }

  @Test
  void aPortSetOnTheBuilderReadsTheMetricsThereOnEachEndpointsHost() throws Exception {
    // before, the metrics were always read at the endpoint's own port: a model server whose
    // metrics sit behind another port could not be scraped
    AtomicReference<String> body = new AtomicReference<>(VLLM);
    HttpServer server = metricsServer(body);
    int metricsPort = server.getAddress().getPort();
    int requestPort;
    try (java.net.ServerSocket unused = new java.net.ServerSocket(0, 1,
        java.net.InetAddress.getLoopbackAddress())) {
      requestPort = unused.getLocalPort(); // closed again: nothing answers there
    }
    String id = "127.0.0.1:" + requestPort;
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.parse(id))).build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).port(metricsPort)
        .interval(Duration.ofMillis(20)).timeout(UNHURRIED).start()) {
      Candidate c = awaitMetrics(router, id, EndpointMetrics::isKnown);
      assertThat(c.metrics().waitingRequests()).isEqualTo(5);
      assertThat(scraper.failures()).isZero();
    } finally {
      server.stop(0);
      router.close();
    }
    assertThatThrownBy(() -> MetricsScraper.builder(router).port(65536))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("port")
        .hasMessageContaining("65536");
    assertThatThrownBy(() -> MetricsScraper.builder(router).port(-1))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("port");
  }

  @Test
  void anEmptyMetricsPageIsPublishedAsAnIdleServer() throws Exception {
    AtomicReference<String> body = new AtomicReference<>("");
    HttpServer server = metricsServer(body);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.parse(id))).build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .timeout(UNHURRIED).start()) {
      Candidate c = awaitMetrics(router, id, EndpointMetrics::isKnown);
      assertThat(c.metrics().waitingRequests()).isZero();
      assertThat(scraper.failures()).isZero();
      body.set("sglang:num_queue_reqs{model_name=\"m\"} 4\n");
      awaitMetrics(router, id, m -> m.waitingRequests() == 4);
    } finally {
      server.stop(0);
    }
  }

  @Test
  void nanSamplesAndOutOfRangeLabelCountsGiveMetricsNotAnException() {
    // NaN is a valid sample value (a gauge with nothing to report yet); before, a NaN KV usage
    // or a negative or overflowing label count made parse throw, and the scraper lost the
    // exception in its future: the endpoint's metrics silently stopped updating
    EndpointMetrics m = PrometheusMetrics.parse("""
        vllm:num_requests_waiting{engine="0"} 4
        vllm:num_requests_waiting{engine="1"} NaN
        vllm:kv_cache_usage_perc{engine="0"} NaN
        vllm:kv_cache_usage_perc{engine="1"} 0.5
        vllm:cache_config_info{block_size="1e10",num_gpu_blocks="-3"} 1.0
        vllm:lora_requests_info{max_lora="-1",running_lora_adapters="a",waiting_lora_adapters=""} 1.7e9
        """).value();
    assertThat(m.waitingRequests()).isEqualTo(4);
    assertThat(m.kvCacheUsage()).isEqualTo(0.5);
    assertThat(m.blockSizeTokens()).isEqualTo(Integer.MAX_VALUE);
    assertThat(m.kvCapacityBlocks()).isZero();
    assertThat(m.maxLoras()).isZero();
    assertThat(m.runningLoraAdapters()).containsExactly("a");
    EndpointMetrics onlyNan = PrometheusMetrics.parse("vllm:kv_cache_usage_perc NaN\n"
        + "vllm:num_requests_running NaN\n").value();
    assertThat(onlyNan.kvCacheUsage()).isZero();
    assertThat(onlyNan.runningRequests()).isZero();
    assertThat(PrometheusMetrics.parse("vllm:num_requests_waiting 1\n"
        + "vllm:lora_requests_info{max_lora=\"3e9\"} 1\n").value().maxLoras())
        .isEqualTo(Integer.MAX_VALUE);
  }

  @Test
  void numbersOnlyJavaReadsAreNotNumbers() {
    // Double.parseDouble takes a type suffix and surrounding control characters; the text format
    // reads values as Go's ParseFloat does, which refuses both
    for (String v : List.of("5d", "5D", "1.5f", "2F")) {
      Result<EndpointMetrics> r = PrometheusMetrics.parse("vllm:num_requests_waiting " + v + "\n");
      assertThat(r.isOk()).as(v).isFalse();
      assertThat(r.errors().get(0)).as(v).contains("line 1");
    }
    assertThat(PrometheusMetrics.parse("vllm:num_requests_waiting 1\n"
        + "vllm:lora_requests_info{max_lora=\"4d\"} 1\n").value().maxLoras()).isZero();
    assertThat(PrometheusMetrics.parse("vllm:num_requests_waiting 1\n"
        + "vllm:lora_requests_info{max_lora=\" 4 \"} 1\n").value().maxLoras())
        .as("blanks around a label value are stripped, as before").isEqualTo(4);
    assertThat(PrometheusMetrics.parse("vllm:num_requests_waiting 0x1p3\n").value()
        .waitingRequests()).as("a hexadecimal float, which Go reads too").isEqualTo(8);
  }

  @Test
  void aNegativeCountInOneSeriesDoesNotHideTheOtherSeriesWork() {
    // a count below zero is a broken gauge (a decrement without its increment); summed as it was,
    // engine 1's -6 cancelled the 6 requests engine 0 really has waiting, and the endpoint looked
    // idle to the queue scorers and to shedding
    EndpointMetrics m = PrometheusMetrics.parse("""
        vllm:num_requests_waiting{engine="0"} 6
        vllm:num_requests_waiting{engine="1"} -6
        vllm:num_requests_running{engine="0"} -Inf
        vllm:num_requests_running{engine="1"} 9
        sglang:num_queue_reqs{dp="0"} -1
        """).value();
    assertThat(m.waitingRequests()).isEqualTo(6);
    assertThat(m.runningRequests()).isEqualTo(9);
    assertThat(PrometheusMetrics.parse("vllm:num_requests_running{engine=\"0\"} +Inf\n"
        + "vllm:num_requests_running{engine=\"1\"} -Inf\n").value().runningRequests())
        .isEqualTo(Integer.MAX_VALUE);
  }

  @Test
  void tabsAndBlanksBetweenTokensGoStyleInfinitiesAndOddLinesOfUnreadFamiliesAreAccepted() {
    // the text format separates tokens by blanks and/or tabs (value and timestamp included) and
    // reads values with Go's ParseFloat ("Inf", "inf"); a line of a family the parser does not
    // read must not cost the families it does
    Result<EndpointMetrics> r = PrometheusMetrics.parse(
        "vllm:num_requests_waiting{engine=\"0\"}\t3\t1700000000000\r\n"
        + "vllm:num_requests_waiting {engine=\"1\"} 2\n"
        + "vllm:num_requests_running\t\t7 1700000000000\n"
        + "vllm:kv_cache_usage_perc{engine=\"0\"} Inf\n"
        + "vllm:some_future_metric{phase=\"x\"} ?\n");
    assertThat(r.isOk()).as("%s", r).isTrue();
    assertThat(r.value().waitingRequests()).isEqualTo(5);
    assertThat(r.value().runningRequests()).isEqualTo(7);
    assertThat(r.value().kvCacheUsage()).isEqualTo(1.0);
    assertThat(PrometheusMetrics.parse("vllm:num_requests_waiting -inf\n"
        + "vllm:num_requests_running +Inf\n").value().runningRequests())
        .isEqualTo(Integer.MAX_VALUE);
  }

  @Test
  void aRepeatedSeriesCountsOnceWithItsLastValueAndSeriesDifferingInALabelAreStillSummed() {
    // Prometheus refuses an exposition that repeats a series; summed as it was, a repeated
    // waiting count doubled the endpoint's queue for the scorers and for shedding
    EndpointMetrics m = PrometheusMetrics.parse("""
        vllm:num_requests_waiting{model_name="m"} 3
        vllm:num_requests_waiting{model_name="m"} 4
        vllm:num_requests_waiting{model_name="m",engine="1"} 2
        vllm:num_requests_running{engine="0",model_name="m"} 5
        vllm:num_requests_running{model_name="m",engine="0"} 6
        vllm:num_requests_running{model_name="n",engine="0"} 1
        vllm:num_requests_running 10
        vllm:num_requests_running{} 7
        sglang:num_queue_reqs{model_name="m"} 1
        vllm:kv_cache_usage_perc{engine="0"} 0.9
        vllm:kv_cache_usage_perc{engine="0"} 0.3
        vllm:kv_cache_usage_perc{engine="1"} 0.4
        """).value();
    // the last of 3 and 4, plus the series with another label set, plus another family
    assertThat(m.waitingRequests()).isEqualTo(4 + 2 + 1);
    // label order does not make another series, nor do empty braces
    assertThat(m.runningRequests()).isEqualTo(6 + 1 + 7);
    // a later sample of the same series replaces the earlier one, for the maximum too
    assertThat(m.kvCacheUsage()).isEqualTo(0.4);
  }

  @Test
  void sglangPerPriorityBreakdownsAreNotAddedToTheQueueTotals() {
    // with --enable-priority-scheduling SGLang writes each queue's total under priority="" and,
    // beside it, the same requests broken down under priority="<n>"; summed with the total,
    // every queued and running request counted twice
    EndpointMetrics m = PrometheusMetrics.parse("""
        sglang:num_queue_reqs{model_name="m",priority="",tp_rank="0"} 5
        sglang:num_queue_reqs{model_name="m",priority="0",tp_rank="0"} 2
        sglang:num_queue_reqs{model_name="m",priority="1",tp_rank="0"} 3
        sglang:num_running_reqs{dp_rank="0",model_name="m",priority=""} 4
        sglang:num_running_reqs{dp_rank="0",model_name="m",priority="1"} 4
        sglang:num_running_reqs{dp_rank="1",model_name="m",priority=""} 6
        sglang:num_running_reqs{dp_rank="1",model_name="m",priority="-2"} 6
        sglang:token_usage{model_name="m",priority=""} 0.2
        """).value();
    assertThat(m.waitingRequests()).isEqualTo(5);
    assertThat(m.runningRequests()).as("the totals of both data-parallel ranks").isEqualTo(4 + 6);
    // a page with only the breakdown (no total series) still counts its requests
    assertThat(PrometheusMetrics.parse("sglang:num_queue_reqs{priority=\"0\"} 2\n"
        + "sglang:num_queue_reqs{priority=\"1\"} 3\n").value().waitingRequests()).isEqualTo(5);
  }

  @Test
  void sglangTensorParallelRanksReportingOneQueueCountItOnce() {
    // with --enable-metrics-for-all-schedulers every tensor-parallel rank of SGLang writes the
    // queues it shares with the others, under its own tp_rank (and moe_ep_rank); summed, a
    // server with TP 4 had four times its queue. Data-parallel ranks hold queues of their own.
    EndpointMetrics m = PrometheusMetrics.parse("""
        sglang:num_queue_reqs{dp_rank="0",model_name="m",moe_ep_rank="0",tp_rank="0"} 3
        sglang:num_queue_reqs{dp_rank="0",model_name="m",moe_ep_rank="1",tp_rank="1"} 3
        sglang:num_queue_reqs{dp_rank="0",model_name="m",moe_ep_rank="2",tp_rank="2"} 3
        sglang:num_queue_reqs{dp_rank="1",model_name="m",moe_ep_rank="0",tp_rank="0"} 5
        sglang:num_queue_reqs{dp_rank="1",model_name="m",moe_ep_rank="1",tp_rank="1"} 5
        sglang:num_running_reqs{model_name="m",tp_rank="0"} 7
        sglang:num_running_reqs{model_name="m",tp_rank="1"} 6
        sglang:token_usage{model_name="m",tp_rank="0"} 0.4
        """).value();
    assertThat(m.waitingRequests()).isEqualTo(3 + 5);
    assertThat(m.runningRequests()).as("ranks caught a step apart: the larger").isEqualTo(7);
  }

  @Test
  void sglangPipelineStagesReportingOneQueueCountItOnce() {
    // with pipeline parallelism every stage's scheduler receives each request from the stage
    // before and schedules the same queue; its first tensor-parallel rank reports it, by default,
    // under its own pp_rank: summed, a server with PP 2 had twice its queue
    EndpointMetrics m = PrometheusMetrics.parse("""
        sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 4
        sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="1",tp_rank="0"} 4
        sglang:token_usage{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.3
        sglang:token_usage{engine_type="unified",model_name="m",pp_rank="1",tp_rank="0"} 0.5
        """).value();
    assertThat(m.waitingRequests()).isEqualTo(4);
    assertThat(m.kvCacheUsage()).as("each stage's own KV pool: the fuller").isEqualTo(0.5);
    // data-parallel ranks, each a pipeline of two stages, still add up
    EndpointMetrics dp = PrometheusMetrics.parse("""
        sglang:num_queue_reqs{dp_rank="0",model_name="m",pp_rank="0",tp_rank="0"} 4
        sglang:num_queue_reqs{dp_rank="0",model_name="m",pp_rank="1",tp_rank="0"} 4
        sglang:num_queue_reqs{dp_rank="1",model_name="m",pp_rank="0",tp_rank="0"} 2
        sglang:num_queue_reqs{dp_rank="1",model_name="m",pp_rank="1",tp_rank="0"} 2
        """).value();
    assertThat(dp.waitingRequests()).isEqualTo(4 + 2);
  }

  @Test
  void sglangPipelineStagesEachReportingTheMicroBatchTheyRanAddUpTheirRunningRequests() {
    // a stage runs its requests in micro-batches (as many as stages by default), each with its
    // own running batch, and writes the running count of the micro-batch it just ran: taken
    // once, a server with PP 2 showed half the requests it was running
    EndpointMetrics m = PrometheusMetrics.parse("""
        sglang:num_queue_reqs{model_name="m",pp_rank="0",tp_rank="0"} 4
        sglang:num_queue_reqs{model_name="m",pp_rank="1",tp_rank="0"} 4
        sglang:num_running_reqs{model_name="m",pp_rank="0",tp_rank="0"} 6
        sglang:num_running_reqs{model_name="m",pp_rank="0",tp_rank="1"} 6
        sglang:num_running_reqs{model_name="m",pp_rank="1",tp_rank="0"} 5
        sglang:num_running_reqs{model_name="m",pp_rank="1",tp_rank="1"} 5
        """).value();
    assertThat(m.waitingRequests()).as("the queue every stage keeps: once").isEqualTo(4);
    assertThat(m.runningRequests())
        .as("each stage's micro-batch added; a stage's tensor-parallel copies once")
        .isEqualTo(6 + 5);
    // data-parallel ranks, each a pipeline of two stages, add up too
    EndpointMetrics dp = PrometheusMetrics.parse("""
        sglang:num_running_reqs{dp_rank="0",model_name="m",pp_rank="0",tp_rank="0"} 3
        sglang:num_running_reqs{dp_rank="0",model_name="m",pp_rank="1",tp_rank="0"} 2
        sglang:num_running_reqs{dp_rank="1",model_name="m",pp_rank="0",tp_rank="0"} 1
        sglang:num_running_reqs{dp_rank="1",model_name="m",pp_rank="1",tp_rank="0"} 1
        """).value();
    assertThat(dp.runningRequests()).isEqualTo(3 + 2 + 1 + 1);
  }

  @Test
  void tensorRtLlmPagesAreReadWithUpstreamsBuiltInMappings() {
    // upstream's core-metrics-extractor has built-in mappings for trtllm-serve and Triton's
    // TensorRT-LLM backend; their pages failed to parse here ("no vLLM or SGLang metrics"), so
    // such an endpoint only ever had stale metrics
    EndpointMetrics serve = PrometheusMetrics.parse("""
        # TYPE trtllm_num_requests_waiting gauge
        trtllm_num_requests_waiting{engine_type="trtllm",model_name="m"} 3.0
        trtllm_num_requests_running{engine_type="trtllm",model_name="m"} 7.0
        trtllm_kv_cache_utilization{engine_type="trtllm",model_name="m"} 0.42
        trtllm_kv_cache_tokens_per_block{engine_type="trtllm",model_name="m"} 32.0
        trtllm_kv_cache_max_blocks{engine_type="trtllm",model_name="m"} 4096.0
        trtllm_kv_cache_hit_rate{engine_type="trtllm",model_name="m"} 0.9
        """).value();
    assertThat(serve.waitingRequests()).isEqualTo(3);
    assertThat(serve.runningRequests()).isEqualTo(7);
    assertThat(serve.kvCacheUsage()).isEqualTo(0.42);
    assertThat(serve.blockSizeTokens()).isEqualTo(32);
    assertThat(serve.kvCapacityBlocks()).isEqualTo(4096);
    EndpointMetrics triton = PrometheusMetrics.parse("""
        nv_trt_llm_request_metrics{model="ensemble",request_type="active",version="1"} 9
        nv_trt_llm_request_metrics{model="ensemble",request_type="max",version="1"} 64
        nv_trt_llm_request_metrics{model="ensemble",request_type="scheduled",version="1"} 5
        nv_trt_llm_request_metrics{model="ensemble",request_type="context",version="1"} 1
        nv_trt_llm_request_metrics{model="ensemble",request_type="waiting",version="1"} 4
        nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="ensemble",version="1"} 2048
        nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="ensemble",version="1"} 1024
        nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="ensemble",version="1"} 1024
        nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="ensemble",version="1"} 64
        nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="ensemble",version="1"} 0.5
        """).value();
    assertThat(triton.waitingRequests()).isEqualTo(4);
    assertThat(triton.runningRequests()).isEqualTo(5);
    assertThat(triton.kvCacheUsage()).isEqualTo(0.5);
    assertThat(triton.blockSizeTokens()).isEqualTo(64);
    assertThat(triton.kvCapacityBlocks()).isEqualTo(2048);
    // a figure such a page lacks is named in its engine's words
    AtomicReference<String> missing = new AtomicReference<>();
    PrometheusMetrics.parse("trtllm_num_requests_waiting 1\n", r -> { }, missing::set);
    assertThat(missing.get()).isEqualTo("trtllm_num_requests_running, trtllm_kv_cache_utilization");
    PrometheusMetrics.parse(
        "nv_trt_llm_request_metrics{request_type=\"waiting\"} 1\n", r -> { }, missing::set);
    assertThat(missing.get()).contains("request_type=\"scheduled\"")
        .contains("kv_cache_block_type=\"fraction\"").doesNotContain("vllm:");
  }

  @Test
  void sglangKvCacheSizeIsReadFromItsCacheConfigInfoAndFromItsPageGauges() {
    // SGLang up to 0.5.10 carries the KV cache size as labels of sglang:cache_config_info (what
    // upstream's built-in SGLang mapping reads), later versions as the gauges sglang:page_size and
    // sglang:num_pages; neither was read, so an SGLang server's capacity stayed unknown and the
    // prefix-cache scorer and token-cost picker fell back to their configured defaults
    EndpointMetrics info = PrometheusMetrics.parse("""
        sglang:num_queue_reqs{model_name="m"} 1
        sglang:cache_config_info{num_pages="8192",page_size="64"} 1.0
        """).value();
    assertThat(info.blockSizeTokens()).isEqualTo(64);
    assertThat(info.kvCapacityBlocks()).isEqualTo(8192);
    EndpointMetrics gauges = PrometheusMetrics.parse("""
        sglang:num_queue_reqs{model_name="m"} 1
        sglang:page_size{dp_rank="0",model_name="m"} 1.0
        sglang:num_pages{dp_rank="0",model_name="m"} 524288.0
        sglang:page_size{dp_rank="1",model_name="m"} 1.0
        sglang:num_pages{dp_rank="1",model_name="m"} 500000.0
        """).value();
    assertThat(gauges.blockSizeTokens()).isEqualTo(1);
    assertThat(gauges.kvCapacityBlocks()).isEqualTo(524288);
  }

  @Test
  void anIdleLoraServerKeepsTheAdaptersItLastServed() {
    // vLLM writes a lora_requests_info series with both lists empty whenever it has no request
    // of any adapter; as the newest, it wiped out the adapters the server had just served (and
    // still holds), so lora-affinity-scorer saw every idle server alike and sent the next request
    // for an adapter anywhere, loading it again. Upstream skips such series for that reason.
    EndpointMetrics idle = PrometheusMetrics.parse("""
        vllm:num_requests_waiting 0
        vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 1.71e9
        vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql",waiting_lora_adapters="math"} 1.70e9
        vllm:lora_requests_info{max_lora="4",running_lora_adapters="chat",waiting_lora_adapters=""} 1.60e9
        """).value();
    assertThat(idle.runningLoraAdapters()).containsExactly("sql");
    assertThat(idle.waitingLoraAdapters()).containsExactly("math");
    assertThat(idle.maxLoras()).isEqualTo(4);
    // a server that has served no adapter yet has none, and still tells its slots
    EndpointMetrics fresh = PrometheusMetrics.parse("""
        vllm:num_requests_waiting 0
        vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.71e9
        """).value();
    assertThat(fresh.runningLoraAdapters()).isEmpty();
    assertThat(fresh.waitingLoraAdapters()).isEmpty();
    assertThat(fresh.maxLoras()).isEqualTo(2);
  }

  @Test
  void aLabelValueHoldingQuotesIsNotTakenForTwoLabels() {
    // a="x\",b=\"y" is one label; a series key that did not escape it would equal {a="x",b="y"}
    // and the second line would replace the first as a repeat
    EndpointMetrics m = PrometheusMetrics.parse("""
        vllm:num_requests_waiting{a="x\\",b=\\"y"} 2
        vllm:num_requests_waiting{a="x",b="y"} 3
        vllm:num_requests_waiting{a="x\\\\",b="y"} 4
        """).value();
    assertThat(m.waitingRequests()).isEqualTo(2 + 3 + 4);
  }

  @Test
  void labelValuesWhoseHashesCollideDoNotMakeTheParseQuadratic() {
    // "Aa" and "BB" have one String hash, so all 2^13 values built from 13 of them collide; a
    // series key whose hash is the sum of its labels' collided with them, and each line compared
    // against every earlier series (seconds for this body, minutes near the 4 MiB limit)
    int n = 1 << 13;
    StringBuilder colliding = new StringBuilder();
    StringBuilder ordinary = new StringBuilder();
    for (int i = 0; i < n; i++) {
      StringBuilder v = new StringBuilder();
      for (int bit = 12; bit >= 0; bit--) {
        v.append((i >> bit & 1) == 0 ? "Aa" : "BB");
      }
      colliding.append("vllm:num_requests_waiting{model_name=\"").append(v).append("\"} 1\n");
      ordinary.append("vllm:num_requests_waiting{model_name=\"")
          .append(String.format("m%025d", i)).append("\"} 1\n");
    }
    // ratio against the same-sized body with ordinary labels, parsed in the same run (best of 3)
    long ordinaryNanos = Long.MAX_VALUE;
    long collidingNanos = Long.MAX_VALUE;
    for (int round = 0; round < 3; round++) {
      long t0 = System.nanoTime();
      assertThat(PrometheusMetrics.parse(ordinary.toString()).value().waitingRequests()).isEqualTo(n);
      long t1 = System.nanoTime();
      assertThat(PrometheusMetrics.parse(colliding.toString()).value().waitingRequests()).isEqualTo(n);
      long t2 = System.nanoTime();
      ordinaryNanos = Math.min(ordinaryNanos, t1 - t0);
      collidingNanos = Math.min(collidingNanos, t2 - t1);
    }
    // a quadratic parse is hundreds of times slower here; a logarithmic one a few times
    assertThat(collidingNanos).as("colliding %d ns vs ordinary %d ns", collidingNanos, ordinaryNanos)
        .isLessThan(25 * ordinaryNanos + 100_000_000L);
  }

  @Test
  void aScrapeWhoseAnswerIsStillBeingHandledIsNotStartedAgain() throws Exception {
    // handling an answer (parsing a large exposition, publishing it) can outlast the interval;
    // the endpoint's in-flight mark was cleared before it, so every round started another
    // scrape of it and the handlings piled up. The router's clock is read once per published
    // answer: a clock that takes 300 ms there stands for a slow handling, and counts how many
    // run at once.
    Thread testThread = Thread.currentThread();
    java.util.concurrent.atomic.AtomicInteger running = new java.util.concurrent.atomic.AtomicInteger();
    java.util.concurrent.atomic.AtomicInteger mostAtOnce = new java.util.concurrent.atomic.AtomicInteger();
    java.util.concurrent.atomic.AtomicInteger handled = new java.util.concurrent.atomic.AtomicInteger();
    io.epp4j.api.Ticker slowOffTheTestThread = () -> {
      if (Thread.currentThread() != testThread && !Thread.currentThread().getName().startsWith("epp4j")) {
        mostAtOnce.accumulateAndGet(running.incrementAndGet(), Math::max);
        java.util.concurrent.locks.LockSupport.parkNanos(300_000_000L);
        running.decrementAndGet();
        handled.incrementAndGet();
      }
      return System.nanoTime();
    };
    AtomicReference<String> body = new AtomicReference<>(VLLM);
    HttpServer server = metricsServer(body);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    Router router = Router.builder().registry(TestPlugins.registry()).ticker(slowOffTheTestThread)
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.parse(id))).build();
    try (router; MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(10)).start()) {
      awaitCount(handled::get, 3);
      assertThat(mostAtOnce.get()).as("handlings of one endpoint's answers at once").isEqualTo(1);
    } finally {
      server.stop(0);
    }
  }

  @Test
  void aPathThatIsNoUriPathIsRefusedNamingIt() {
    // before, only the leading '/' was checked: '/a b' was taken, then every scrape failed
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build()).build();
    try (router) {
      for (String path : new String[] {"/a b", "/metrics%", "/a\\b", "/m{x}", "metrics"}) {
        assertThatThrownBy(() -> MetricsScraper.builder(router).path(path)).as(path)
            .isInstanceOf(IllegalArgumentException.class)
            .hasMessageContaining("path").hasMessageContaining("'" + path + "'");
      }
      MetricsScraper.builder(router).path("/m%20etrics/v1?format=text"); // URI-encoded: taken
    }
  }

  @Test
  void aRepeatedSeriesIsLoggedOncePerEndpointNotOncePerScrape() throws Exception {
    AtomicReference<String> body = new AtomicReference<>(
        "vllm:num_requests_waiting{model_name=\"m\"} 3\n"
        + "vllm:num_requests_waiting{model_name=\"m\"} 3\n");
    HttpServer server = metricsServer(body);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    ScraperLog log = new ScraperLog(m -> m.contains(id) && m.contains("repeat series"));
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.parse(id))).build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .timeout(UNHURRIED).start()) {
      awaitMetrics(router, id, m -> m.waitingRequests() == 3);
      long seen = scraper.scrapes();
      awaitCount(() -> scraper.scrapes(), seen + 3);
      assertThat(scraper.failures()).isZero(); // the figures are usable: not a failed scrape
      assertThat(log.messages).hasSize(1);
      assertThat(log.messages.get(0)).contains("vllm:num_requests_waiting{model_name=\"m\"}");
    } finally {
      log.close();
      server.stop(0);
    }
  }

  @Test
  void aMissingFigureIsWarnedOfAgainAfterPagesThatCarriedEveryFigure() throws Exception {
    // a restarting server writes an empty page for a moment (SGLang before its first batch):
    // that warning used up the endpoint's only one, so a metric the restarted server went
    // without for good (a version that renamed it) was never named
    AtomicReference<String> body = new AtomicReference<>("");
    HttpServer server = metricsServer(body);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    ScraperLog log = new ScraperLog(m -> m.contains(id) && m.contains("no sample of"));
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.parse(id))).build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .timeout(UNHURRIED).start()) {
      awaitMetrics(router, id, EndpointMetrics::isKnown);
      body.set(VLLM);
      awaitMetrics(router, id, m -> m.waitingRequests() == 5);
      long seen = scraper.scrapes();
      awaitCount(scraper::scrapes, seen + 3);
      assertThat(log.messages).hasSize(1);
      assertThat(log.messages.get(0)).contains("the page is empty");
      body.set("vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2\n"
          + "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1\n");
      awaitMetrics(router, id, m -> m.waitingRequests() == 2);
      seen = scraper.scrapes();
      awaitCount(scraper::scrapes, seen + 3);
      assertThat(log.messages).hasSize(2);
      assertThat(log.messages.get(1)).contains("vllm:kv_cache_usage_perc");
    } finally {
      log.close();
      server.stop(0);
    }
  }

  @Test
  void aFigureWhoseMetricIsMissingIsLoggedOncePerEndpointNamingTheMetric() throws Exception {
    // a page with the queue but no KV-usage family (a server that renamed or hid it) read as
    // 0 % KV usage for good, and nothing said so: the endpoint looked empty to the KV scorer
    // and to shedding
    AtomicReference<String> partial = new AtomicReference<>("""
        vllm:num_requests_waiting{engine="0",model_name="m"} 3
        vllm:num_requests_running{engine="0",model_name="m"} 2
        """);
    AtomicReference<String> sglang = new AtomicReference<>("sglang:num_queue_reqs 1\n");
    AtomicReference<String> complete = new AtomicReference<>(VLLM);
    HttpServer partialServer = metricsServer(partial);
    HttpServer sglangServer = metricsServer(sglang);
    HttpServer completeServer = metricsServer(complete);
    String partialId = "127.0.0.1:" + partialServer.getAddress().getPort();
    String sglangId = "127.0.0.1:" + sglangServer.getAddress().getPort();
    String completeId = "127.0.0.1:" + completeServer.getAddress().getPort();
    ScraperLog log = new ScraperLog(m -> m.contains("127.0.0.1:"));
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.parse(partialId), Endpoint.parse(sglangId),
            Endpoint.parse(completeId))).build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .timeout(UNHURRIED).start()) {
      awaitMetrics(router, partialId, m -> m.waitingRequests() == 3);
      awaitMetrics(router, sglangId, m -> m.waitingRequests() == 1);
      awaitMetrics(router, completeId, m -> m.waitingRequests() == 5);
      long seen = scraper.scrapes();
      awaitCount(scraper::scrapes, seen + 9);
      assertThat(scraper.failures()).as("the figures that are there are used").isZero();
      List<String> aboutPartial = log.messages.stream().filter(m -> m.contains(partialId)).toList();
      assertThat(aboutPartial).hasSize(1);
      assertThat(aboutPartial.get(0)).contains("vllm:kv_cache_usage_perc")
          .contains("vllm:gpu_cache_usage_perc").doesNotContain("vllm:num_requests");
      List<String> aboutSglang = log.messages.stream().filter(m -> m.contains(sglangId)).toList();
      assertThat(aboutSglang).hasSize(1);
      assertThat(aboutSglang.get(0)).contains("sglang:num_running_reqs")
          .contains("sglang:token_usage").doesNotContain("vllm:");
      assertThat(log.messages).noneMatch(m -> m.contains(completeId));
    } finally {
      log.close();
      partialServer.stop(0);
      sglangServer.stop(0);
      completeServer.stop(0);
    }
  }

  @Test
  void aVllmEngineWhoseAwakeGaugeReadsZeroIsAsleep() {
    String figures = "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0\n"
        + "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0\n"
        + "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0\n";
    String level1 = figures
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"awake\"} 0.0\n"
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"weights_offloaded\"} 1.0\n"
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"discard_all\"} 0.0\n";
    assertThat(PrometheusMetrics.parse(level1).value().asleep()).isTrue();
    String level2 = level1.replace("weights_offloaded\"} 1.0", "weights_offloaded\"} 0.0")
        .replace("discard_all\"} 0.0", "discard_all\"} 1.0");
    assertThat(PrometheusMetrics.parse(level2).value().asleep()).isTrue();
    String awake = figures
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"awake\"} 1.0\n"
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"weights_offloaded\"} 0.0\n"
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"discard_all\"} 0.0\n";
    assertThat(PrometheusMetrics.parse(awake).value().asleep()).isFalse();
    // a data-parallel engine still awake serves requests
    String oneOfTwo = level1
        + "vllm:engine_sleep_state{engine=\"1\",model_name=\"m\",sleep_state=\"awake\"} 1.0\n";
    assertThat(PrometheusMetrics.parse(oneOfTwo).value().asleep()).isFalse();
    // a server without the gauge (an older vLLM, SGLang) is taken as awake
    assertThat(PrometheusMetrics.parse(figures).value().asleep()).isFalse();
    assertThat(PrometheusMetrics.parse(VLLM).value().asleep()).isFalse();
  }

  @Test
  void aVllmEngineNotFullyAwakeByItsNewerSleepGaugesIsAsleep() {
    // vLLM tracks the scheduler and each memory resource apart and writes
    // vllm:engine_fully_awake and vllm:engine_sleep_resource_state; a frontend may write them
    // without the older vllm:engine_sleep_state, and such a sleeping engine read as awake
    String figures = "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0\n"
        + "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0\n"
        + "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0\n";
    String fullyAwake0 = "vllm:engine_fully_awake{engine=\"0\",model_name=\"m\"} %s\n";
    assertThat(PrometheusMetrics.parse(figures + fullyAwake0.formatted("0.0")).value().asleep())
        .isTrue();
    assertThat(PrometheusMetrics.parse(figures + fullyAwake0.formatted("1.0")).value().asleep())
        .isFalse();
    // woken up in part: weights back, KV cache not yet, scheduler still paused
    String partial = figures + resources("0", "paused", "resident", "released");
    assertThat(PrometheusMetrics.parse(partial).value().asleep()).isTrue();
    // the KV cache alone released (release_kv_cache_memory), the rest as when serving
    assertThat(PrometheusMetrics.parse(figures + resources("0", "running", "resident", "released"))
        .value().asleep()).isTrue();
    assertThat(PrometheusMetrics.parse(figures + resources("0", "running", "unknown", "resident"))
        .value().asleep()).isTrue();
    assertThat(PrometheusMetrics.parse(figures + resources("0", "running", "resident", "resident"))
        .value().asleep()).isFalse();
    // the three forms together, as vLLM's Python frontend writes them after a partial wake-up:
    // every legacy flag 0
    String allForms = partial + fullyAwake0.formatted("0.0")
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"awake\"} 0.0\n"
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"weights_offloaded\"} 0.0\n"
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"discard_all\"} 0.0\n";
    assertThat(PrometheusMetrics.parse(allForms).value().asleep()).isTrue();
    // a data-parallel engine that is fully awake still serves the endpoint's requests
    String oneOfTwo = partial + fullyAwake0.formatted("0.0")
        + resources("1", "running", "resident", "resident")
        + "vllm:engine_fully_awake{engine=\"1\",model_name=\"m\"} 1.0\n";
    assertThat(PrometheusMetrics.parse(oneOfTwo).value().asleep()).isFalse();
  }

  /** vLLM's {@code vllm:engine_sleep_resource_state} series of one engine, 1 under each state. */
  private static String resources(String engine, String scheduler, String weights, String kv) {
    StringBuilder b = new StringBuilder();
    String[][] all = {{"scheduler", "running", "paused"},
        {"weights", "resident", "offloaded", "discarded", "unknown"},
        {"kv_cache", "resident", "released", "unknown"}};
    String[] current = {scheduler, weights, kv};
    for (int r = 0; r < all.length; r++) {
      for (int i = 1; i < all[r].length; i++) {
        b.append("vllm:engine_sleep_resource_state{engine=\"").append(engine)
            .append("\",model_name=\"m\",resource=\"").append(all[r][0])
            .append("\",state=\"").append(all[r][i]).append("\"} ")
            .append(all[r][i].equals(current[r]) ? "1.0" : "0.0").append('\n');
      }
    }
    return b.toString();
  }

  @Test
  void anEngineFallingAsleepAndWakingUpIsPublishedAndLoggedOnceEach() throws Exception {
    String asleep = VLLM
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"awake\"} 0.0\n"
        + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"weights_offloaded\"} 1.0\n";
    AtomicReference<String> body = new AtomicReference<>(asleep);
    HttpServer server = metricsServer(body);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    ScraperLog log = new ScraperLog(m -> m.contains(id));
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.parse(id))).build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .timeout(UNHURRIED).start()) {
      awaitMetrics(router, id, EndpointMetrics::asleep);
      long seen = scraper.scrapes();
      awaitCount(scraper::scrapes, seen + 3);
      assertThat(log.messages).hasSize(1);
      assertThat(log.messages.get(0)).contains("asleep");
      body.set(asleep.replace("sleep_state=\"awake\"} 0.0", "sleep_state=\"awake\"} 1.0"));
      awaitMetrics(router, id, m -> !m.asleep());
      seen = scraper.scrapes();
      awaitCount(scraper::scrapes, seen + 3);
      assertThat(log.messages).hasSize(2);
      assertThat(log.messages.get(1)).contains("awake again");
      assertThat(scraper.failures()).isZero();
    } finally {
      log.close();
      server.stop(0);
    }
  }

  @Test
  void theServersStartTimeAndPromptTokenCounterAreReadToTellARestart() {
    // vLLM serving its page from one process: prometheus_client's default registry adds the
    // process collector, so the page has process_start_time_seconds
    EndpointMetrics vllm = PrometheusMetrics.parse(VLLM + """
        # HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
        # TYPE process_start_time_seconds gauge
        process_start_time_seconds 1.76543210123e+09
        vllm:prompt_tokens_total{engine="0",model_name="qwen3"} 4096.0
        vllm:prompt_tokens_total{engine="1",model_name="qwen3"} 1024.0
        vllm:prompt_tokens_created{engine="0",model_name="qwen3"} 1.7654321e+09
        """).value();
    assertThat(vllm.processStartTimeSeconds()).isEqualTo(1.76543210123e9);
    assertThat(vllm.promptTokensTotal()).isEqualTo(4096 + 1024);
    // SGLang (multiprocess mode): no process metrics, its counter once it has served
    EndpointMetrics sglang = PrometheusMetrics.parse("""
        sglang:num_queue_reqs{model_name="m"} 0
        sglang:prompt_tokens_total{model_name="m"} 8.128902e+06
        """).value();
    assertThat(sglang.processStartTimeSeconds()).isZero();
    assertThat(sglang.promptTokensTotal()).isEqualTo(8_128_902);
    EndpointMetrics none = PrometheusMetrics.parse(VLLM).value();
    assertThat(none.processStartTimeSeconds()).isZero();
    assertThat(none.promptTokensTotal()).isEqualTo(EndpointMetrics.NO_COUNT);
    // neither makes a page of something else a model server's
    assertThat(PrometheusMetrics.parse("process_start_time_seconds 1.7e9\n").isOk()).isFalse();
  }

  /**
   * A server that stops answering for a while and then answers again as the same process keeps
   * its cache: listeners hear nothing. One that comes back restarted (another start time) is
   * heard once, however often it is scraped after.
   */
  @Test
  void aScrapeThatFailsForAWhileIsNoRestartButANewProcessStartTimeIs() throws Exception {
    String page = VLLM + "process_start_time_seconds 1.76e+09\n"
        + "vllm:prompt_tokens_total{engine=\"0\",model_name=\"qwen3\"} 5000.0\n";
    AtomicReference<String> body = new AtomicReference<>(page);
    java.util.concurrent.atomic.AtomicBoolean down =
        new java.util.concurrent.atomic.AtomicBoolean();
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.createContext("/metrics", ex -> {
      byte[] b = body.get().getBytes(StandardCharsets.UTF_8);
      if (down.get()) {
        ex.sendResponseHeaders(503, -1);
      } else {
        ex.sendResponseHeaders(200, b.length);
        ex.getResponseBody().write(b);
      }
      ex.close();
    });
    server.start();
    String id = "127.0.0.1:" + server.getAddress().getPort();
    List<String> dropped = new java.util.concurrent.CopyOnWriteArrayList<>();
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .listener(new io.epp4j.api.PoolListener() {
          @Override
          public void onEndpointCacheDropped(Endpoint endpoint) {
            dropped.add(endpoint.id());
          }
        })
        .endpoints(List.of(Endpoint.parse(id))).build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .timeout(UNHURRIED).start()) {
      awaitMetrics(router, id, m -> m.processStartTimeSeconds() == 1.76e9);
      down.set(true);
      awaitCount(scraper::failures, 3);
      down.set(false);
      body.set(page.replace("5000.0", "5600.0"));
      awaitMetrics(router, id, m -> m.promptTokensTotal() == 5600);
      assertThat(dropped).as("the same process, answering again").isEmpty();
      // restarted: another start time, a counter back near 0
      body.set(page.replace("1.76e+09", "1.7600009e+09").replace("5000.0", "0.0"));
      awaitMetrics(router, id, m -> m.processStartTimeSeconds() == 1.7600009e9);
      long seen = scraper.scrapes();
      awaitCount(scraper::scrapes, seen + 3);
      assertThat(dropped).containsExactly(id);
    } finally {
      server.stop(0);
    }
  }

  /** A started loopback server whose {@code /metrics} answers {@code body}'s current text. */
  static HttpServer metricsServer(AtomicReference<String> body) throws java.io.IOException {
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.createContext("/metrics", ex -> {
      byte[] b = body.get().getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(200, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    server.start();
    return server;
  }

  @Test
  void scrapesEndpointsAndPublishesToTheRouter() throws Exception {
    AtomicReference<String> body = new AtomicReference<>(VLLM);
    HttpServer server = metricsServer(body);
    int port = server.getAddress().getPort();
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.of("127.0.0.1", port), Endpoint.of("127.0.0.1", 1))) // port 1: refused
        .build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20)).start()) {
      Candidate live = awaitMetrics(router, "127.0.0.1:" + port, m -> m.waitingRequests() == 5);
      assertThat(live.metrics().kvCapacityBlocks()).isEqualTo(4521);
      body.set(VLLM.replace("} 3.0", "} 30.0"));
      awaitMetrics(router, "127.0.0.1:" + port, m -> m.waitingRequests() == 32);
      assertThat(scraper.failures()).isPositive(); // the refused endpoint
      Candidate dead = router.endpoints().stream().filter(c -> c.id().equals("127.0.0.1:1")).findFirst().orElseThrow();
      assertThat(dead.metrics().isKnown()).isFalse();
    } finally {
      server.stop(0);
    }
  }

  @Test
  void aScrapeIsPlainHttp11WithoutAnUpgradeToHttp2() throws Exception {
    // servers that refuse an h2c upgrade (older uvicorn, as some engines ship) fail such a
    // request; a scrape asks for nothing but the page
    java.util.concurrent.CompletableFuture<com.sun.net.httpserver.Headers> seen =
        new java.util.concurrent.CompletableFuture<>();
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.createContext("/metrics", ex -> {
      seen.complete(ex.getRequestHeaders());
      byte[] b = VLLM.getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(200, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    server.start();
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.of("127.0.0.1", server.getAddress().getPort()))).build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20)).start()) {
      com.sun.net.httpserver.Headers h = seen.get(10, java.util.concurrent.TimeUnit.SECONDS);
      assertThat(h.containsKey("Upgrade")).as("request headers %s", h.keySet()).isFalse();
      assertThat(h.containsKey("Http2-settings")).isFalse();
    } finally {
      server.stop(0);
    }
  }

  @Test
  void aTimeoutOrIntervalTooLongForNanosecondsStillScrapes() throws Exception {
    // a timeout past ~292 years made every round throw ArithmeticException after the request was
    // sent: nothing was ever published, the endpoint stayed marked as being scraped, and a
    // warning was logged every interval; such an interval made start() throw. (Only the first
    // round is awaited: without a time limit a later one may wait on the server for good.)
    AtomicReference<String> body = new AtomicReference<>(VLLM);
    HttpServer server = metricsServer(body);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    Duration forever = java.time.temporal.ChronoUnit.FOREVER.getDuration();
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.parse(id))).build();
    try {
      try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
          .timeout(forever).start()) {
        awaitMetrics(router, id, m -> m.waitingRequests() == 5);
        assertThat(scraper.failures()).isZero();
      }
      body.set(VLLM.replace("} 3.0", "} 1.0"));
      try (MetricsScraper scraper = MetricsScraper.builder(router).interval(forever).start()) {
        awaitMetrics(router, id, m -> m.waitingRequests() == 3); // the first round runs at once
        assertThat(scraper.failures()).isZero();
      }
    } finally {
      server.stop(0);
    }
  }

  @Test
  void anEndpointWhoseIdMakesNoUrlIsAFailureAndTheOthersAreStillScraped() throws Exception {
    AtomicReference<String> body = new AtomicReference<>(VLLM);
    HttpServer server = metricsServer(body);
    int port = server.getAddress().getPort();
    // a host name with '_' (a Docker Compose service, say) is no URI host; listed first, so its
    // scrape is attempted before the good endpoint's in every round
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.of("vllm_1", 8000), Endpoint.of("127.0.0.1", port)))
        .build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20)).start()) {
      awaitMetrics(router, "127.0.0.1:" + port, m -> m.waitingRequests() == 5);
      body.set(VLLM.replace("} 3.0", "} 30.0"));
      // a later round: the bad endpoint did not stop the scraper
      awaitMetrics(router, "127.0.0.1:" + port, m -> m.waitingRequests() == 32);
      assertThat(scraper.failures()).isPositive();
    } finally {
      server.stop(0);
    }
  }

  @Test
  void anEndpointThatLeavesThePoolIsForgottenAndWarnedAboutAgainWhenItReturnsAndFails() throws Exception {
    // a port nothing listens on: every scrape of it fails
    int deadPort;
    try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      deadPort = s.getLocalPort();
    }
    String dead = "127.0.0.1:" + deadPort;
    ScraperLog log = new ScraperLog(m -> m.startsWith("scraping metrics of " + dead + " failed"));
    java.util.List<String> warnings = log.messages;
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.of("127.0.0.1", deadPort)))
        .build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .timeout(Duration.ofMillis(500)).start()) {
      awaitCount(() -> scraper.failures(), 3);
      assertThat(warnings).hasSize(1); // once while it keeps failing
      router.removeEndpoint(dead);
      // a round that began after the removal has ended: the one under way at the removal may
      // still have seen the endpoint, the next one cannot (a fixed wait is not enough on a busy
      // machine, where the scraper's thread may not run at all meanwhile)
      awaitCount(scraper::rounds, scraper.rounds() + 2);
      router.addEndpoint(Endpoint.of("127.0.0.1", deadPort));
      long failuresBack = scraper.failures();
      awaitCount(() -> scraper.failures(), failuresBack + 2);
      // before, the mark of the departed endpoint stayed for good (one entry per endpoint that
      // ever failed, with pods coming and going), so its return went unreported
      assertThat(warnings).hasSize(2);
    } finally {
      log.close();
    }
  }

  @Test
  void aScrapeUnderWayWhenItsEndpointLeftFailsWithoutMarkingItSoItsReturnIsWarnedAbout()
      throws Exception {
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    java.util.concurrent.ExecutorService handlers = java.util.concurrent.Executors.newCachedThreadPool();
    server.setExecutor(handlers);
    java.util.concurrent.atomic.AtomicInteger requests = new java.util.concurrent.atomic.AtomicInteger();
    java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
    // every answer is a 500; the second waits until the test releases it
    server.createContext("/metrics", ex -> {
      try {
        if (requests.incrementAndGet() == 2) {
          release.await(20, java.util.concurrent.TimeUnit.SECONDS);
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } finally {
        ex.sendResponseHeaders(500, -1);
        ex.close();
      }
    });
    server.start();
    String id = "127.0.0.1:" + server.getAddress().getPort();
    ScraperLog log = new ScraperLog(m -> m.startsWith("scraping metrics of " + id + " failed"));
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.of("127.0.0.1", server.getAddress().getPort())))
        .build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .timeout(Duration.ofSeconds(30)).start()) {
      awaitCount(scraper::failures, 1);
      // the failure is counted just before it is logged
      awaitCount(() -> log.messages.size(), 1);
      awaitCount(requests::get, 2); // the second scrape is under way
      router.removeEndpoint(id);
      // rounds that dropped the endpoint's mark have ended; they also ended the held scrape,
      // whose answer could no longer be used: neither a failure nor a mark
      awaitCount(scraper::rounds, scraper.rounds() + 2);
      awaitCount(() -> scraper.scrapesUnderWay() == 0 ? 1 : 0, 1);
      release.countDown();
      assertThat(scraper.failures()).isEqualTo(1);
      // before, a late failure marked the departed endpoint again (and warned about it): back
      // in the pool before the next round, its failures went unreported
      assertThat(log.messages).hasSize(1);
      router.addEndpoint(Endpoint.of("127.0.0.1", server.getAddress().getPort()));
      awaitCount(scraper::failures, 2);
      awaitCount(() -> log.messages.size(), 2); // counted just before it is logged
      assertThat(log.messages).hasSize(2);
    } finally {
      release.countDown();
      log.close();
      server.stop(0);
      handlers.shutdownNow();
    }
  }

  /** The messages the scraper logs that {@code wanted} accepts, from creation to close. */
  private static final class ScraperLog extends java.util.logging.Handler {
    final java.util.List<String> messages = new java.util.concurrent.CopyOnWriteArrayList<>();
    private final java.util.function.Predicate<String> wanted;
    private final java.util.logging.Logger logger =
        java.util.logging.Logger.getLogger(MetricsScraper.class.getName());

    ScraperLog(java.util.function.Predicate<String> wanted) {
      this.wanted = wanted;
      logger.addHandler(this);
    }

    @Override
    public void publish(java.util.logging.LogRecord r) {
      if (wanted.test(r.getMessage())) {
        messages.add(r.getMessage());
      }
    }

    @Override
    public void flush() {}

    @Override
    public void close() {
      logger.removeHandler(this);
    }
  }

  private static void awaitCount(java.util.function.LongSupplier count, long atLeast) {
    long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
    while (count.getAsLong() < atLeast && System.nanoTime() < deadline) {
      java.util.concurrent.locks.LockSupport.parkNanos(10_000_000L);
    }
    assertThat(count.getAsLong()).isGreaterThanOrEqualTo(atLeast);
  }

  @Test
  void aResponseThatNeverEndsIsAFailedScrapeWithinTheTimeoutAndTheNextScrapeFollows() throws Exception {
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    java.util.concurrent.ExecutorService handlers = java.util.concurrent.Executors.newCachedThreadPool();
    server.setExecutor(handlers);
    java.util.concurrent.atomic.AtomicInteger requests = new java.util.concurrent.atomic.AtomicInteger();
    // headers at once, then a comment line every 50 ms for as long as the client listens
    server.createContext("/metrics", ex -> {
      requests.incrementAndGet();
      ex.sendResponseHeaders(200, 0);
      try {
        for (int i = 0; i < 1200; i++) {
          ex.getResponseBody().write("# still here\n".getBytes(StandardCharsets.UTF_8));
          ex.getResponseBody().flush();
          Thread.sleep(50);
        }
      } catch (java.io.IOException | InterruptedException e) {
        // the client gave up
      } finally {
        ex.close();
      }
    });
    server.start();
    int port = server.getAddress().getPort();
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.of("127.0.0.1", port)))
        .build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .timeout(Duration.ofMillis(200)).start()) {
      // before, the scrape waited for the end of the body, which never came: no failure was
      // counted and the endpoint was never scraped again
      long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
      while ((scraper.failures() < 2 || requests.get() < 2) && System.nanoTime() < deadline) {
        java.util.concurrent.locks.LockSupport.parkNanos(10_000_000L);
      }
      assertThat(scraper.failures()).isGreaterThanOrEqualTo(2);
      assertThat(requests.get()).isGreaterThanOrEqualTo(2);
    } finally {
      server.stop(0);
      handlers.shutdownNow();
    }
  }

  @Test
  void aResponseAboveTheSizeLimitIsAFailure() throws Exception {
    AtomicReference<String> body = new AtomicReference<>("# padding\n".repeat(200) + VLLM);
    HttpServer server = metricsServer(body);
    int port = server.getAddress().getPort();
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.of("127.0.0.1", port)))
        .build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .maxResponseBytes(1024).start()) {
      long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
      while (scraper.failures() < 2 && System.nanoTime() < deadline) {
        java.util.concurrent.locks.LockSupport.parkNanos(10_000_000L);
      }
      assertThat(scraper.failures()).isGreaterThanOrEqualTo(2);
      assertThat(router.endpoints().get(0).metrics().isKnown()).isFalse();
      body.set(VLLM); // within the limit
      awaitMetrics(router, "127.0.0.1:" + port, m -> m.waitingRequests() == 5);
    } finally {
      server.stop(0);
    }
    assertThatThrownBy(() -> MetricsScraper.builder(router).maxResponseBytes(0))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("maxResponseBytes");
  }

  @Test
  void aScrapeThatEndsAfterCloseNeitherUpdatesTheRouterNorWarns() throws Exception {
    // two replicas whose metrics answers are held until the scraper has been closed, as at a
    // gateway's shutdown or a pool's reload: one then answers with metrics, one with a 503
    java.util.concurrent.CountDownLatch arrived = new java.util.concurrent.CountDownLatch(2);
    java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.CountDownLatch answered = new java.util.concurrent.CountDownLatch(2);
    java.util.concurrent.ExecutorService handlers =
        java.util.concurrent.Executors.newCachedThreadPool();
    HttpServer[] servers = new HttpServer[2];
    for (int i = 0; i < 2; i++) {
      boolean healthy = i == 0;
      servers[i] = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
      servers[i].setExecutor(handlers);
      servers[i].createContext("/metrics", ex -> {
        arrived.countDown();
        try {
          release.await(10, TimeUnit.SECONDS);
          byte[] b = (healthy ? VLLM : "stopping").getBytes(StandardCharsets.UTF_8);
          ex.sendResponseHeaders(healthy ? 200 : 503, b.length);
          ex.getResponseBody().write(b);
        } catch (InterruptedException | java.io.IOException e) {
          // the client gave up
        } finally {
          ex.close();
          answered.countDown();
        }
      });
      servers[i].start();
    }
    ScraperLog log = new ScraperLog(m -> true);
    java.util.List<String> warnings = log.messages;
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.of("127.0.0.1", servers[0].getAddress().getPort()),
            Endpoint.of("127.0.0.1", servers[1].getAddress().getPort())))
        .build();
    try {
      MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
          .timeout(Duration.ofSeconds(5)).start();
      assertThat(arrived.await(10, TimeUnit.SECONDS)).isTrue();
      scraper.close();
      release.countDown();
      assertThat(answered.await(10, TimeUnit.SECONDS)).isTrue();
      // what a late answer would do happens within milliseconds; give it ample time
      long until = System.nanoTime() + Duration.ofMillis(500).toNanos();
      while (System.nanoTime() < until) {
        assertThat(router.endpoints()).as("metrics published after close")
            .allSatisfy(c -> assertThat(c.metrics().isKnown()).isFalse());
        assertThat(warnings).as("warnings after close").isEmpty();
        java.util.concurrent.locks.LockSupport.parkNanos(10_000_000L);
      }
      assertThat(scraper.failures()).isZero();
    } finally {
      log.close();
      for (HttpServer server : servers) {
        server.stop(0);
      }
      handlers.shutdownNow();
    }
  }

  private static Candidate awaitMetrics(Router router, String id,
      java.util.function.Predicate<EndpointMetrics> cond) throws InterruptedException {
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (System.nanoTime() < deadline) {
      for (Candidate c : router.endpoints()) {
        if (c.id().equals(id) && c.metrics().isKnown() && cond.test(c.metrics())) {
          return c;
        }
      }
      java.util.concurrent.locks.LockSupport.parkNanos(2_000_000L); // poll until the condition holds
    }
    throw new AssertionError("metrics of " + id + " never satisfied the condition");
  }
}
