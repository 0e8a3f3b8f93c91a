package io.epp4j.envoy;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.testkit.LoopbackHttps;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The upstream endpoint picker's flags, as a Deployment copied from its chart passes them. */
class UpstreamFlagsTest extends MainWithCapturedOutput {

  @Test
  void upstreamNamesOfMetricsOptionsMapOntoThemWithGoDurations() {
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1",
        "--model-server-metrics-path", "/vllm/metrics", "--model-server-metrics-scheme", "https",
        "--refresh-metrics-interval", "50ms")) {
      assertThat(r.scraper).isNotNull();
    }
    // each upstream name is read as the option it stands for
    assertThat(Main.parse(new String[] {"--model-server-metrics-path", "/vllm/metrics",
        "--model-server-metrics-scheme=https", "--refresh-metrics-interval", "50ms"}))
        .containsEntry("metrics-path", "/vllm/metrics").containsEntry("scheme", "https")
        .containsEntry("metrics-interval", "50ms")
        .doesNotContainKeys("model-server-metrics-path", "model-server-metrics-scheme",
            "refresh-metrics-interval");
    assertThat(Main.duration("x", "1m30s")).isEqualTo(Duration.ofSeconds(90));
    assertThat(Main.duration("x", "1.5s")).isEqualTo(Duration.ofMillis(1500));
    assertThat(Main.duration("x", "250us")).isEqualTo(Duration.ofNanos(250_000));
    assertThat(Main.duration("x", "1h0m0s")).isEqualTo(Duration.ofHours(1));
  }

  /**
   * A replica serving its metrics over https with a self-signed certificate: the upstream picker
   * scrapes it by default; here it takes the flag (either name), and without it the scrapes fail.
   */
  @Test
  void insecureSkipVerifyScrapesAReplicaWithASelfSignedCertificate() throws Exception {
    com.sun.net.httpserver.HttpsServer replica = httpsMetrics();
    String id = "127.0.0.1:" + replica.getAddress().getPort();
    try {
      for (String flag : new String[] {"--model-server-metrics-https-insecure-skip-verify",
          "--metrics-insecure-skip-verify=true"}) {
        out.reset();
        try (Main.Running r = start("--endpoints", id, "--port=0", "--grpc-health-port=0",
            "--host=127.0.0.1", "--scheme", "https", "--metrics-interval", "20ms", flag)) {
          await(() -> metricsKnown(r, id), flag + ": the replica's figures published");
          assertThat(r.router.endpoints().get(0).metrics().waitingRequests()).isEqualTo(3);
        }
        assertThat(out.toString(StandardCharsets.UTF_8))
            .contains("https metrics taken without checking certificates");
      }
      for (String[] verifying : new String[][] {{},
          {"--model-server-metrics-https-insecure-skip-verify=false"}}) {
        java.util.List<String> args = new java.util.ArrayList<>(java.util.List.of("--endpoints",
            id, "--port=0", "--grpc-health-port=0", "--host=127.0.0.1", "--scheme", "https",
            "--metrics-interval", "20ms"));
        args.addAll(java.util.List.of(verifying));
        try (Main.Running r = start(args.toArray(new String[0]))) {
          await(() -> r.scraper.failures() >= 2, "two failed scrapes");
          assertThat(metricsKnown(r, id)).isFalse();
        }
      }
    } finally {
      replica.stop(0);
    }
    // over http there is no certificate to check: the start line does not say one goes unchecked
    out.reset();
    try (Main.Running r = start("--endpoints", "127.0.0.1:9", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--scheme", "http",
        "--metrics-insecure-skip-verify")) {
      assertThat(r.scraper).isNotNull();
    }
    assertThat(out.toString(StandardCharsets.UTF_8)).contains("routing to 127.0.0.1:9")
        .doesNotContain("without checking certificates");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--model-server-metrics-https-insecure-skip-verify=maybe")).isEqualTo(2);
    assertThat(err()).contains("--model-server-metrics-https-insecure-skip-verify: 'maybe'");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--model-server-metrics-https-insecure-skip-verify", "false")).isEqualTo(2);
    assertThat(err()).contains("unexpected argument 'false'");
  }

  /**
   * Without the flag, the configuration's metrics-data-source says whether certificates are
   * checked; the flag, false included, wins over it.
   */
  @Test
  void withoutTheFlagTheConfigsInsecureSkipVerifyScrapesASelfSignedReplica() throws Exception {
    // before, the server always gave the scraper the flag's value, false when it was absent, so
    // the file's 'insecureSkipVerify: true' loaded and every https scrape still failed
    String yaml = """
        plugins:
        - type: metrics-data-source
          parameters: {scheme: https, insecureSkipVerify: true}
        - type: queue-scorer
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: queue-scorer
        """;
    com.sun.net.httpserver.HttpsServer replica = httpsMetrics();
    String id = "127.0.0.1:" + replica.getAddress().getPort();
    try {
      try (Main.Running r = start("--endpoints", id, "--port=0", "--grpc-health-port=0",
          "--host=127.0.0.1", "--metrics-interval", "20ms", "--config-text", yaml)) {
        await(() -> metricsKnown(r, id), "the replica's figures published");
        assertThat(r.router.endpoints().get(0).metrics().waitingRequests()).isEqualTo(3);
        assertThat(r.scraper.failures()).isZero();
      }
      // the start line says so whether the flag or the file turned the check off
      assertThat(out.toString(StandardCharsets.UTF_8))
          .contains("https metrics taken without checking certificates");
      out.reset();
      try (Main.Running r = start("--endpoints", id, "--port=0", "--grpc-health-port=0",
          "--host=127.0.0.1", "--metrics-interval", "20ms", "--config-text", yaml,
          "--metrics-insecure-skip-verify=false")) {
        await(() -> r.scraper.failures() >= 2, "two failed scrapes");
        assertThat(metricsKnown(r, id)).isFalse();
      }
      assertThat(out.toString(StandardCharsets.UTF_8)).contains("routing to " + id)
          .doesNotContain("without checking certificates");
    } finally {
      replica.stop(0);
    }
  }

  @Test
  void modelServerMetricsPortReadsTheMetricsAtThatPortOfEachReplica() throws Exception {
    // before, upstream's flag was an unknown option: a Deployment passing it did not start
    com.sun.net.httpserver.HttpServer metrics = com.sun.net.httpserver.HttpServer.create(
        new java.net.InetSocketAddress(java.net.InetAddress.getLoopbackAddress(), 0), 0);
    metrics.createContext("/metrics", ex -> {
      byte[] b = "vllm:num_requests_waiting 4\n".getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(200, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    metrics.start();
    int requestPort;
    try (java.net.ServerSocket unused = new java.net.ServerSocket(0, 1,
        java.net.InetAddress.getLoopbackAddress())) {
      requestPort = unused.getLocalPort(); // closed again: nothing answers there
    }
    String id = "127.0.0.1:" + requestPort;
    try (Main.Running r = start("--endpoints", id, "--port=0", "--grpc-health-port=0",
        "--host=127.0.0.1", "--metrics-interval", "20ms",
        "--model-server-metrics-port", String.valueOf(metrics.getAddress().getPort()))) {
      await(() -> metricsKnown(r, id), "the replica's figures published");
      assertThat(r.router.endpoints().get(0).metrics().waitingRequests()).isEqualTo(4);
      assertThat(r.scraper.failures()).isZero();
    } finally {
      metrics.stop(0);
    }
    assertThat(err()).doesNotContain("model-server-metrics-port");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--model-server-metrics-port", "http")).isEqualTo(2);
    assertThat(err()).contains("--model-server-metrics-port: 'http' is not a port");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--model-server-metrics-port=70000")).isEqualTo(2);
    assertThat(err()).contains("--model-server-metrics-port: '70000' is not a port");
  }

  private static boolean metricsKnown(Main.Running r, String id) {
    return r.router.endpoints().stream()
        .anyMatch(c -> c.id().equals(id) && c.metrics().isKnown());
  }

  /** A vLLM metrics page over https, with a new self-signed certificate (for 127.0.0.1). */
  private static com.sun.net.httpserver.HttpsServer httpsMetrics() throws Exception {
    ServerTls tls = ServerTls.selfSigned();
    return LoopbackHttps.start(tls.key, tls.chain, "/metrics", ex -> {
      byte[] b = ("vllm:num_requests_waiting 3\nvllm:num_requests_running 1\n"
          + "vllm:kv_cache_usage_perc 0.5\n").getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(200, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
  }

  private static void await(java.util.function.BooleanSupplier condition, String what)
      throws InterruptedException {
    long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(60);
    while (!condition.getAsBoolean()) {
      assertThat(System.nanoTime()).as(what + " within 60 s").isLessThan(deadline);
      Thread.sleep(10);
    }
  }

  /**
   * Upstream's --disable-endpoint-subset-filter: a hint naming no replica of the pool (503 when
   * followed) or a malformed one (INVALID_ARGUMENT) is not read, and the request is routed.
   */
  @Test
  void disableEndpointSubsetFilterRoutesAmongEveryReplicaWhateverTheHint() throws Exception {
    io.envoyproxy.envoy.config.core.v3.Metadata foreign =
        FakeEnvoy.subsetHint(java.util.List.of("10.9.9.9:1"));
    io.envoyproxy.envoy.config.core.v3.Metadata malformed =
        io.envoyproxy.envoy.config.core.v3.Metadata.newBuilder().putFilterMetadata(
            ExtProcMessages.SUBSET_HINT_NAMESPACE, com.google.protobuf.Struct.newBuilder()
                .putFields(ExtProcMessages.SUBSET_KEY, com.google.protobuf.Value.newBuilder()
                    .setNumberValue(3).build()).build()).build();
    for (String flag : new String[] {"--disable-endpoint-subset-filter",
        "--disable-endpoint-subset-filter=true"}) {
      out.reset();
      try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
          "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false", flag)) {
        for (io.envoyproxy.envoy.config.core.v3.Metadata hint : java.util.List.of(foreign,
            malformed)) {
          io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse answer = route(r, hint);
          assertThat(answer.getRequestHeaders().getResponse().getHeaderMutation()
              .getSetHeadersList()).as(flag)
              .anyMatch(h -> h.getHeader().getKey().equals("x-gateway-destination-endpoint")
                  && h.getHeader().getRawValue().toStringUtf8().equals("10.0.0.1:8000"));
        }
      }
      assertThat(out.toString(StandardCharsets.UTF_8)).contains("subset hints not read");
    }
    // the default, and =false: the hint limits the pick
    for (String[] args : new String[][] {{}, {"--disable-endpoint-subset-filter=false"}}) {
      java.util.List<String> a = new java.util.ArrayList<>(java.util.List.of("--endpoints",
          "10.0.0.1:8000", "--port=0", "--grpc-health-port=0", "--host=127.0.0.1",
          "--metrics-enabled=false"));
      a.addAll(java.util.List.of(args));
      try (Main.Running r = start(a.toArray(new String[0]))) {
        assertThat(route(r, foreign).getImmediateResponse().getStatus().getCodeValue())
            .isEqualTo(503);
      }
    }
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--disable-endpoint-subset-filter=yes")).isEqualTo(2);
    assertThat(err()).contains("--disable-endpoint-subset-filter: 'yes'");
  }

  /** Sends one completion with {@code hint} to the running server; its first answer. */
  private static io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse route(Main.Running r,
      io.envoyproxy.envoy.config.core.v3.Metadata hint) throws Exception {
    io.grpc.ManagedChannel ch = io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder
        .forAddress("127.0.0.1", r.server.port()).usePlaintext().build();
    try {
      FakeEnvoy envoy = FakeEnvoy.open(ch);
      io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode duplex =
          io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode
              .FULL_DUPLEX_STREAMED;
      envoy.send(FakeEnvoy.postHeaders(FakeEnvoy.modes(duplex, duplex)).toBuilder()
          .setMetadataContext(hint).build());
      envoy.send(FakeEnvoy.requestBody(FakeEnvoy.completion("p"), true));
      // a generous wait: the first call of a new channel is slow on a loaded machine
      long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(60);
      while (true) {
        try {
          return envoy.next();
        } catch (AssertionError e) {
          if (System.nanoTime() > deadline || envoy.closed.isDone()) {
            throw e;
          }
        }
      }
    } finally {
      ch.shutdownNow().awaitTermination(5, java.util.concurrent.TimeUnit.SECONDS);
    }
  }

  @Test
  void aBadValueOfAnAliasNamesTheFlagAsTyped() {
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--grpc-port", "abc")).isEqualTo(2);
    assertThat(err()).contains("--grpc-port: 'abc'").doesNotContain("--port:");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--model-server-metrics-scheme", "ftp")).isEqualTo(2);
    assertThat(err()).contains("--model-server-metrics-scheme: 'ftp'");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--model-server-metrics-path", "metrics")).isEqualTo(2);
    assertThat(err()).contains("--model-server-metrics-path: 'metrics'");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--refresh-metrics-interval", "1x")).isEqualTo(2);
    assertThat(err()).contains("--refresh-metrics-interval: '1x'");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--model-server-metrics-path=/a", "--metrics-path=/b")).isEqualTo(2);
    assertThat(err()).contains("--metrics-path is given twice (--model-server-metrics-path and "
        + "--metrics-path)");
  }

  @Test
  void flagsWithoutEffectHereStartAndAreNamedOnceInOneWarning() {
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false",
        "--zap-encoder", "json", "-v", "4", "--tracing=false", "--metrics-endpoint-auth=false",
        "--ha-enable-leader-election", "--enable-pprof", "--metrics-port", "9090",
        "--zap-log-level=debug", "--zap-devel=false", "--health-checking")) {
      assertThat(r.server.port()).isPositive();
    }
    String e = err();
    assertThat(e.lines().filter(l -> l.contains("warning"))).hasSize(1);
    String warning = e.lines().filter(l -> l.contains("warning")).findFirst().orElseThrow();
    assertThat(warning).contains("have no effect here");
    for (String flag : new String[] {"--zap-encoder", "--v ", "--tracing", "--metrics-endpoint-auth",
        "--ha-enable-leader-election", "--enable-pprof", "--metrics-port", "--zap-log-level",
        "--zap-devel", "--health-checking"}) {
      assertThat(warning.split(java.util.regex.Pattern.quote(flag), -1)).as(flag).hasSize(2);
    }
    assertThat(warning).contains("--metrics-port (no Prometheus metrics endpoint is served here)")
        .contains("--ha-enable-leader-election (there is no leader election: every replica "
            + "serves");
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false", "--v=2")) {
      assertThat(r.server.port()).isPositive();
    }
  }

  @Test
  void upstreamsPrometheusGaugeFlagsStartAndAreNamedInTheWarningWithWhatTheyDidThere() {
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false",
        "--refresh-prometheus-metrics-interval", "5s", "--metrics-staleness-threshold=2s")) {
      assertThat(r.server.port()).isPositive();
    }
    java.util.List<String> warnings = err().lines().filter(l -> l.contains("warning")).toList();
    assertThat(warnings).hasSize(1);
    assertThat(warnings.get(0)).contains("--refresh-prometheus-metrics-interval (it is how often "
        + "upstream refreshes the pool gauges of its own Prometheus metrics endpoint")
        .contains("--metrics-staleness-threshold (upstream leaves replicas with older metrics "
            + "out of those pool gauges");
    // Go's forms, and a threshold of 0
    assertThat(Main.parse(new String[] {"--refresh-prometheus-metrics-interval=1m30s"}))
        .containsEntry("refresh-prometheus-metrics-interval", "1m30s");
    err.reset();
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false",
        "--refresh-prometheus-metrics-interval=1m30s", "--metrics-staleness-threshold", "0")) {
      assertThat(r.server.port()).isPositive();
    }
    for (String[] bad : new String[][] {{"--refresh-prometheus-metrics-interval", "0"},
        {"--refresh-prometheus-metrics-interval", "often"},
        {"--metrics-staleness-threshold", "-1s"}, {"--metrics-staleness-threshold", "2 s x"}}) {
      assertThat(exitOf("--endpoints=10.0.0.1:8000", "--port=0", "--metrics-enabled=false",
          bad[0], bad[1])).as(bad[0] + " " + bad[1]).isEqualTo(2);
      assertThat(err()).contains(bad[0] + ": '" + bad[1] + "'").doesNotContain("warning");
    }
  }

  @Test
  void metricNameFlagsNamingAMetricReadHereStartAndOthersAreRefusedNamingTheFlag() {
    // upstream's defaults (v1.0 to v1.3), another engine's names, a label spec with quotes
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false",
        "--total-queued-requests-metric", "vllm:num_requests_waiting",
        "--total-running-requests-metric=sglang:num_running_reqs",
        "--kv-cache-usage-percentage-metric", "vllm:gpu_cache_usage_perc",
        "--lora-info-metric=vllm:lora_requests_info", "--cache-info-metric",
        "sglang:cache_config_info")) {
      assertThat(r.server.port()).isPositive();
    }
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false",
        "--total-queued-requests-metric",
        "nv_trt_llm_request_metrics{request_type=\"waiting\"}")) {
      assertThat(r.server.port()).isPositive();
    }
    assertThat(err()).doesNotContain("warning");

    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--total-queued-requests-metric", "my_engine:queue")).isEqualTo(2);
    assertThat(err()).contains("--total-queued-requests-metric: 'my_engine:queue' is not a "
        + "metric this server reads for waiting requests")
        .contains("vllm:num_requests_waiting, sglang:num_queue_reqs");
    // a metric of another figure is no more read for this one
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--kv-cache-usage-percentage-metric=vllm:num_requests_running")).isEqualTo(2);
    assertThat(err()).contains("--kv-cache-usage-percentage-metric: 'vllm:num_requests_running'");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--total-running-requests-metric=")).isEqualTo(2);
    assertThat(err()).contains("--total-running-requests-metric: '': an empty spec made "
        + "upstream read 0 for every replica");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0", "--lora-info-metric="))
        .isEqualTo(2);
    assertThat(err()).contains("--lora-info-metric").contains("loraSpec: \"\"");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0", "--cache-info-metric", ""))
        .isEqualTo(2);
    assertThat(err()).contains("--cache-info-metric").contains("cacheInfoSpec: \"\"");
  }

  /** Every metric a metric-name flag takes is one the scrape reads for that figure. */
  @Test
  void eachMetricAMetricNameFlagTakesIsReadForItsFigure() {
    Map<String, java.util.function.ToDoubleFunction<io.epp4j.api.EndpointMetrics>> figure = Map.of(
        "total-queued-requests-metric", m -> m.waitingRequests(),
        "total-running-requests-metric", m -> m.runningRequests(),
        "kv-cache-usage-percentage-metric", m -> m.kvCacheUsage());
    figure.forEach((flag, read) -> {
      for (String spec : Main.METRIC_FLAGS.get(flag).specs()) {
        // a spec's label block as an exposition writes it: name{label="value"}
        String line = spec.replaceAll("\\{(\\w+)=(\\w+)}", "{$1=\"$2\"}") + " 1\n";
        io.epp4j.api.Result<io.epp4j.api.EndpointMetrics> m =
            io.epp4j.core.PrometheusMetrics.parse(line);
        assertThat(m.isOk()).as(flag + " " + spec).isTrue();
        assertThat(read.applyAsDouble(m.value())).as(flag + " " + spec).isPositive();
      }
    });
    io.epp4j.api.EndpointMetrics lora = io.epp4j.core.PrometheusMetrics.parse(
        "vllm:num_requests_waiting 0\n" + Main.METRIC_FLAGS.get("lora-info-metric").specs().get(0)
        + "{max_lora=\"4\",running_lora_adapters=\"sql\",waiting_lora_adapters=\"\"} 1\n")
        .value();
    assertThat(lora.maxLoras()).isEqualTo(4);
    for (String spec : Main.METRIC_FLAGS.get("cache-info-metric").specs()) {
      String labels = spec.startsWith("vllm") ? "{block_size=\"16\",num_gpu_blocks=\"100\"}"
          : "{page_size=\"16\",num_pages=\"100\"}";
      io.epp4j.api.EndpointMetrics cache = io.epp4j.core.PrometheusMetrics.parse(
          (spec.startsWith("vllm") ? "vllm:num_requests_waiting 0\n" : "sglang:num_queue_reqs 0\n")
          + spec + labels + " 1\n").value();
      assertThat(cache.kvCapacityBlocks()).as(spec).isEqualTo(100);
    }
  }

  @Test
  void flagsWithoutEffectHaveTheirValuesCheckedAsUpstream() {
    String[][] bad = {{"--tracing", "false"}, {"--tracing=maybe"}, {"--zap-encoder", "xml"},
        {"--v", "high"}, {"-v=x"}, {"--metrics-port", "http"}, {"--zap-log-level", "loud"},
        {"--zap-log-level", "0"}, {"--zap-time-encoding", "unix"},
        {"--zap-stacktrace-level", "debug"}, {"--enable-pprof=1x"}};
    String[] named = {"unexpected argument 'false'", "--tracing: 'maybe'", "--zap-encoder: 'xml'",
        "--v: 'high'", "--v: 'x'", "--metrics-port: 'http'", "--zap-log-level: 'loud'",
        "--zap-log-level: '0'", "--zap-time-encoding: 'unix'", "--zap-stacktrace-level: 'debug'",
        "--enable-pprof: '1x'"};
    for (int i = 0; i < bad.length; i++) {
      String[] args = new String[bad[i].length + 3];
      args[0] = "--endpoints=10.0.0.1:8000";
      args[1] = "--port=0";
      args[2] = "--metrics-enabled=false";
      System.arraycopy(bad[i], 0, args, 3, bad[i].length);
      assertThat(exitOf(args)).as(named[i]).isEqualTo(2);
      assertThat(err()).as(named[i]).contains(named[i]).doesNotContain("warning");
    }
  }

  @Test
  void configTextIsAnInlineConfigurationAndNotWithConfigOrPreset() {
    String yaml = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: queue-scorer
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: queue-scorer
        """;
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false",
        "--config-text", yaml)) {
      assertThat(out.toString(StandardCharsets.UTF_8)).contains("the --config-text configuration");
    }
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0", "--config-text",
        yaml.replace("queue-scorer", "no-such-scorer"))).isEqualTo(2);
    assertThat(err()).contains("--config-text is not valid").contains("no-such-scorer");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0", "--config-text", yaml,
        "--preset", "epp4j")).isEqualTo(2);
    assertThat(err()).contains("--config-text and --preset are both given");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0", "--config-file", "x.yaml",
        "--config-text", yaml)).isEqualTo(2);
    assertThat(err()).contains("--config-file and --config-text are both given");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0", "--config-text", " "))
        .isEqualTo(2);
    assertThat(err()).contains("--config-text is empty");
  }
}
