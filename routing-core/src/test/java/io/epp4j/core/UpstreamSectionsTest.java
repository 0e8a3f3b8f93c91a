package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Result;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The top-level sections and conventions of upstream files beyond plugins and profiles. */
class UpstreamSectionsTest {
  final PluginRegistry registry = PluginRegistry.fromServiceLoader()
      .with(new TestPlugins.LabelScorerProvider(), new TestPlugins.LabelFilterProvider());
  final ConfigLoader loader = new ConfigLoader(registry);

  static final String PROFILE = """
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: s
      """;

  Result<RouterConfig> load(String head) {
    return loader.load(head + """
        - {name: s, type: label-scorer, parameters: {label: x}}
        """ + PROFILE, "f.yaml");
  }

  @Test
  void harmlessGatesAreNoticedFlowControlAndUnknownGatesRefused() {
    Result<RouterConfig> ok = load("featureGates: [dataLayer, prepareDataPlugins]\nplugins:\n");
    assertThat(ok.errors()).isEmpty();
    assertThat(ok.value().warnings()).filteredOn(w -> w.contains("featureGates")).hasSize(2);
    Result<RouterConfig> bad = load("featureGates: [flowControl, warpDrive]\nplugins:\n");
    assertThat(bad.errors()).anySatisfy(e -> assertThat(e).contains("'flowControl'")
        .contains("queueing"));
    assertThat(bad.errors()).anySatisfy(e -> assertThat(e).contains("unknown gate 'warpDrive'"));
  }

  @Test
  void theParserSectionMustNameTheOpenAiParser() {
    assertThat(load("parser: {pluginRef: p}\nplugins:\n- {name: p, type: openai-parser}\n")
        .errors()).isEmpty();
    assertThat(load("parser: {pluginRef: s}\nplugins:\n").errors())
        .anySatisfy(e -> assertThat(e).contains("parser").contains("openai-parser"));
    assertThat(load("parser: {pluginRef: nope}\nplugins:\n").errors())
        .anySatisfy(e -> assertThat(e).contains("parser: field 'pluginRef' 'nope' names no plugin"));
  }

  @Test
  void requestHandlerParsersIsTheCurrentPlaceOfTheParserAndWinsOverTheFormerSection() {
    assertThat(load("requestHandler:\n  parsers: [{pluginRef: openai-parser}]\nplugins:\n")
        .errors()).isEmpty();
    // as upstream, the former section is not read when the new one is given
    Result<RouterConfig> both = load("parser: {pluginRef: s}\nrequestHandler:\n"
        + "  parsers: [{pluginRef: p}]\nplugins:\n- {name: p, type: openai-parser}\n");
    assertThat(both.errors()).isEmpty();
    assertThat(both.value().warnings()).anySatisfy(w -> assertThat(w)
        .contains("section 'parser' is not used"));
    assertThat(load("requestHandler:\n  parsers: [{pluginRef: s}]\nplugins:\n").errors())
        .anySatisfy(e -> assertThat(e).contains("requestHandler: parsers[0]")
            .contains("openai-parser"));
    assertThat(load("requestHandler:\n  parsers: [{pluginRef: openai-parser},"
        + " {pluginRef: passthrough-parser}]\nplugins:\n").errors())
        .anySatisfy(e -> assertThat(e).contains("parsers[1]").contains("'passthrough-parser'")
            .contains("OpenAI bodies only"));
    assertThat(load("requestHandler: {parser: x}\nplugins:\n").errors())
        .anySatisfy(e -> assertThat(e).contains("requestHandler: unknown field 'parser'"));
  }

  @Test
  void flowControlSaturationDetectorIsHonouredWithoutTheGateAndWinsOverTheFormerSection() {
    Result<RouterConfig> r = load("""
        flowControl:
          saturationDetector: {pluginRef: strict}
        saturationDetector: {pluginRef: lax}
        plugins:
        - {name: strict, type: utilization-detector, parameters: {queueDepthThreshold: 3}}
        - {name: lax, type: utilization-detector, parameters: {queueDepthThreshold: 300}}
        """);
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().saturation().orElseThrow().queueThreshold()).isEqualTo(3);
    assertThat(r.value().warnings()).anySatisfy(w -> assertThat(w)
        .contains("section 'saturationDetector' is not used"));
    // a flowControl section with only the detector has nothing else to ignore
    assertThat(r.value().warnings()).noneSatisfy(w -> assertThat(w)
        .contains("section 'flowControl' has no effect"));
    Result<RouterConfig> more = load("""
        flowControl:
          saturationDetector: {pluginRef: strict}
          maxBytes: 1Gi
        plugins:
        - {name: strict, type: utilization-detector, parameters: {queueDepthThreshold: 3}}
        """);
    assertThat(more.value().saturation().orElseThrow().queueThreshold()).isEqualTo(3);
    assertThat(more.value().warnings()).anySatisfy(w -> assertThat(w)
        .contains("section 'flowControl' has no effect but for its saturationDetector"));
    assertThat(load("flowControl:\n  saturationDetector: {pluginRef: s}\nplugins:\n")
        .errors()).anySatisfy(e -> assertThat(e).contains("flowControl: saturationDetector")
            .contains("utilization-detector"));
  }

  @Test
  void aMetricsDataSourcePathThatIsNoUriPathIsAnError() {
    // before, only the leading '/' was checked: '/a b' loaded, then every scrape failed
    Result<RouterConfig> bad = load("""
        plugins:
        - {name: m, type: metrics-data-source, parameters: {path: '/a b'}}
        """);
    assertThat(bad.errors()).anySatisfy(e -> assertThat(e).contains("path").contains("'/a b'"));
  }

  @Test
  void dataLayerReferencesAreChecked() {
    Result<RouterConfig> ok = load("""
        dataLayer:
          discovery: {pluginRef: k8s}
          sources:
          - pluginRef: m
            extractors: [{pluginRef: x}]
        plugins:
        - {name: m, type: metrics-data-source}
        - {name: x, type: core-metrics-extractor}
        """);
    assertThat(ok.errors()).isEmpty();
    assertThat(ok.value().warnings()).anySatisfy(w -> assertThat(w).contains("discovery"));
    Result<RouterConfig> bad = load("""
        dataLayer:
          sources:
          - pluginRef: s
            extractors: [{pluginRef: missing}]
          - {pluginRef: m, extra: 1}
        plugins:
        - {name: m, type: metrics-data-source}
        """);
    assertThat(bad.errors()).anySatisfy(e -> assertThat(e).contains("sources[0]")
        .contains("metrics-data-source or an endpoint-notification-source"));
    assertThat(bad.errors()).anySatisfy(e -> assertThat(e).contains("extractors[0]")
        .contains("'missing' names no plugin"));
    assertThat(bad.errors()).anySatisfy(e -> assertThat(e).contains("sources[1]")
        .contains("unknown field 'extra'"));
  }

  @Test
  void saturationDetectorSectionIsHonouredOrRefusedByField() {
    Result<RouterConfig> ref = load("""
        saturationDetector: {pluginRef: d}
        plugins:
        - {name: d, type: utilization-detector, parameters: {queueDepthThreshold: 7, metricsStalenessThreshold: 1m30s}}
        """);
    assertThat(ref.errors()).isEmpty();
    assertThat(ref.value().saturation()).hasValue(
        new RouterConfig.Saturation(7, 0.8, Duration.ofSeconds(90)));
    Result<RouterConfig> inline = load("""
        saturationDetector: {queueDepthThreshold: 0, metricsStalenessThreshold: 200, color: red}
        plugins:
        """);
    assertThat(inline.errors()).anySatisfy(e -> assertThat(e).contains("field 'queueDepthThreshold'"));
    assertThat(inline.errors()).anySatisfy(e -> assertThat(e)
        .contains("field 'metricsStalenessThreshold' must be a duration"));
    assertThat(inline.errors()).anySatisfy(e -> assertThat(e).contains("unknown field 'color'"));
    assertThat(load("saturationDetector: {pluginRef: s}\nplugins:\n").errors())
        .anySatisfy(e -> assertThat(e).contains("must name a saturation detector (utilization-detector, concurrency-detector)"));
  }

  @Test
  void aFormerTypeNameLoadsTheCurrentTypeWithOneNoticePerFile() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - {name: a, type: max-score}
        - {name: b, type: max-score}
        - {name: s, type: label-scorer, parameters: {label: x}}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: s}, {pluginRef: a}]
        """, "f.yaml");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().profiles().get("default").picker()).isInstanceOf(MaxScorePicker.class);
    assertThat(r.value().warnings()).filteredOn(w -> w.contains("former name"))
        .singleElement().satisfies(w -> assertThat(w).contains("'max-score'")
            .contains("'max-score-picker'"));
    assertThat(registry.currentName("max-score")).isEqualTo("max-score-picker");
    assertThat(registry.currentName("max-score-picker")).isNull();
  }

  /** A provider whose alias is also a real type elsewhere. */
  static final class ShadowingProvider extends AbstractPluginProvider {
    ShadowingProvider() {
      super("shadowing-picker", "max-score-picker");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new MaxScorePicker(1);
    }
  }

  @Test
  void aRealTypeWinsOverAnAliasOfTheSameName() {
    PluginRegistry r = PluginRegistry.of(List.of(new ShadowingProvider(),
        new CorePluginProviders.MaxScorePickerProvider()));
    assertThat(r.currentName("max-score-picker")).isNull();
    assertThat(r.provider("max-score-picker"))
        .isInstanceOf(CorePluginProviders.MaxScorePickerProvider.class);
    assertThat(r.conflicts()).anySatisfy(c -> assertThat(c).contains("alias 'max-score-picker'"));
  }

  @Test
  void llmdApiVersionIsKnownAndAnotherOneIsNoticed() {
    assertThat(load("apiVersion: llm-d.ai/v1alpha1\nplugins:\n").value().warnings())
        .noneSatisfy(w -> assertThat(w).contains("apiVersion"));
    assertThat(load("apiVersion: example.com/v9\nplugins:\n").value().warnings())
        .anySatisfy(w -> assertThat(w).contains("apiVersion").contains("example.com/v9"));
  }

  @Test
  void anApiVersionThatIsNotAStringIsRefusedAsAWrongTypedKindIs() {
    // upstream decodes it into a string field, which refuses a number
    assertThat(load("apiVersion: 1\nplugins:\n").errors()).containsExactly("f.yaml: field"
        + " 'apiVersion' must be a string (such as inference.networking.x-k8s.io/v1alpha1), got a"
        + " number '1'");
    assertThat(load("apiVersion: [llm-d.ai/v1alpha1]\nplugins:\n").errors()).singleElement()
        .asString().contains("field 'apiVersion' must be a string").contains("got a list");
    assertThat(load("apiVersion: '1'\nplugins:\n").isOk()).isTrue();
  }

  @Test
  void theScraperUsesThePathOfTheConfigsMetricsDataSource() throws Exception {
    HttpServer server = HttpServer.create(
        new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.createContext("/custom/metrics", ex -> {
      byte[] b = "vllm:num_requests_waiting 3\n".getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(200, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    server.start();
    try (Router router = Router.builder().registry(registry)
        .endpoints(List.of(Endpoint.of("127.0.0.1", server.getAddress().getPort())))
        .configYaml("""
            plugins:
            - {name: src, type: metrics-data-source, parameters: {path: /custom/metrics}}
            - {name: s, type: label-scorer, parameters: {label: x}}
            """ + PROFILE, "f.yaml").build();
        MetricsScraper scraper = MetricsScraper.builder(router)
            .interval(Duration.ofMillis(20)).timeout(MetricsScraperTest.UNHURRIED).start()) {
      long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
      while (router.endpoints().get(0).metrics().waitingRequests() != 3) {
        assertThat(System.nanoTime()).as("scraped /custom/metrics in time").isLessThan(deadline);
        Thread.sleep(10);
      }
      assertThat(scraper.failures()).isZero();
    } finally {
      server.stop(0);
    }
  }
  @Test
  void aReloadThatChangesTheMetricsDataSourceMovesTheScraperThereUnlessItsPathWasSetInCode()
      throws Exception {
    // the scraper read the file's path once, when it was built: a reload that changed it was
    // accepted and then had no effect, and the router kept the old path's figures or none
    HttpServer server = HttpServer.create(
        new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    java.util.concurrent.atomic.AtomicLong hitsOnB = new java.util.concurrent.atomic.AtomicLong();
    java.util.concurrent.atomic.AtomicLong hitsOnA = new java.util.concurrent.atomic.AtomicLong();
    server.createContext("/a/metrics", ex -> answer(ex, "vllm:num_requests_waiting 3\n", hitsOnA));
    server.createContext("/b/metrics", ex -> answer(ex, "vllm:num_requests_waiting 7\n", hitsOnB));
    server.start();
    String body = """
        - {name: s, type: label-scorer, parameters: {label: x}}
        """ + PROFILE;
    try (Router router = Router.builder().registry(registry)
        .endpoints(List.of(Endpoint.of("127.0.0.1", server.getAddress().getPort())))
        .configYaml("plugins:\n- {name: src, type: metrics-data-source, parameters: {path: /a/metrics}}\n"
            + body, "f.yaml").build()) {
      try (MetricsScraper scraper = MetricsScraper.builder(router)
          .interval(Duration.ofMillis(20)).timeout(MetricsScraperTest.UNHURRIED).start()) {
        awaitWaiting(router, 3);
        assertThat(router.reconfigure("plugins:\n"
            + "- {name: src, type: metrics-data-source, parameters: {path: /b/metrics}}\n" + body,
            "f.yaml").errors()).isEmpty();
        awaitWaiting(router, 7);
        assertThat(scraper.failures()).isZero();
      }
      // a path given in code stays, whatever the file says
      router.reconfigure("plugins:\n"
          + "- {name: src, type: metrics-data-source, parameters: {path: /a/metrics}}\n" + body,
          "f.yaml");
      try (MetricsScraper scraper = MetricsScraper.builder(router).path("/b/metrics")
          .interval(Duration.ofMillis(20)).timeout(MetricsScraperTest.UNHURRIED).start()) {
        long before = hitsOnB.get();
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (hitsOnB.get() < before + 3) {
          assertThat(System.nanoTime()).as("scraped /b/metrics in time").isLessThan(deadline);
          Thread.sleep(10);
        }
        long onA = hitsOnA.get();
        router.reconfigure("plugins:\n"
            + "- {name: src, type: metrics-data-source, parameters: {path: /c/metrics}}\n" + body,
            "f.yaml");
        before = hitsOnB.get();
        while (hitsOnB.get() < before + 3) {
          assertThat(System.nanoTime()).as("still scraped /b/metrics").isLessThan(deadline);
          Thread.sleep(10);
        }
        assertThat(hitsOnA.get()).isEqualTo(onA);
        assertThat(scraper.failures()).isZero();
      }
    } finally {
      server.stop(0);
    }
  }

  private static void answer(com.sun.net.httpserver.HttpExchange ex, String text,
      java.util.concurrent.atomic.AtomicLong hits) throws java.io.IOException {
    hits.incrementAndGet();
    byte[] b = text.getBytes(StandardCharsets.UTF_8);
    ex.sendResponseHeaders(200, b.length);
    ex.getResponseBody().write(b);
    ex.close();
  }

  private static void awaitWaiting(Router router, int waiting) throws InterruptedException {
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (router.endpoints().get(0).metrics().waitingRequests() != waiting) {
      assertThat(System.nanoTime()).as("scraped %s waiting requests in time", waiting)
          .isLessThan(deadline);
      Thread.sleep(10);
    }
  }
}
