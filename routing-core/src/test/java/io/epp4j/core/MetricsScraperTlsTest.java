package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsServer;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Scrapes over {@code https} from a server whose certificate the JVM does not trust: self-signed,
 * made by keytool at test time, and issued for a host name, not for the address it is reached at.
 */
class MetricsScraperTlsTest {
  // a loaded machine may take long over a handshake; nothing here waits for the time to pass
  static final Duration UNHURRIED = Duration.ofSeconds(30);

  @TempDir
  Path dir;

  @Test
  void aSelfSignedCertificateFailsTheScrapeUnlessInsecureSkipVerifyIsSet() throws Exception {
    AtomicInteger pages = new AtomicInteger();
    HttpsServer server = httpsServer(pages);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.of("127.0.0.1", server.getAddress().getPort()))).build();
    try {
      try (MetricsScraper verifying = MetricsScraper.builder(router).scheme("https")
          .interval(Duration.ofMillis(20)).timeout(UNHURRIED).start()) {
        await(() -> verifying.failures() >= 2, "two failed scrapes");
        assertThat(verifying.failures()).isEqualTo(verifying.scrapes());
        assertThat(candidate(router, id).metrics().isKnown()).isFalse();
      }
      assertThat(pages.get()).as("pages served to a scraper that refused the certificate")
          .isZero();

      try (MetricsScraper insecure = MetricsScraper.builder(router).scheme("https")
          .insecureSkipVerify(true).interval(Duration.ofMillis(20)).timeout(UNHURRIED).start()) {
        await(() -> candidate(router, id).metrics().isKnown(), "the page's figures published");
        assertThat(candidate(router, id).metrics().waitingRequests()).isEqualTo(5);
        assertThat(candidate(router, id).metrics().runningRequests()).isEqualTo(17);
        assertThat(insecure.failures()).isZero();
      }
      assertThat(pages.get()).isPositive();
    } finally {
      server.stop(0);
      router.close();
    }
  }

  @Test
  void theConfigsMetricsDataSourceSaysWhetherToSkipVerificationUnlessTheCodeSetIt()
      throws Exception {
    // before, 'insecureSkipVerify: true' with https was refused by the loader, so a file could
    // not scrape a self-signed server at all
    AtomicInteger pages = new AtomicInteger();
    HttpsServer server = httpsServer(pages);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    String skipping = """
        plugins:
        - name: src
          type: metrics-data-source
          parameters: {scheme: https, insecureSkipVerify: true}
        - {name: p, type: max-score-picker}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: p}]
        """;
    String verifying = skipping.replace(", insecureSkipVerify: true", "");
    Router router = Router.builder().registry(PluginRegistry.fromServiceLoader())
        .endpoints(List.of(Endpoint.of("127.0.0.1", server.getAddress().getPort())))
        .configYaml(skipping, "skip.yaml").build();
    try {
      assertThat(router.config().plugins().get("src")).hasToString(
          "metrics-data-source(https://<endpoint>/metrics, insecureSkipVerify)");
      assertThat(router.config().warnings()).singleElement().asString()
          .contains("'insecureSkipVerify' is on").contains("not authenticated");
      // set false in code: the code's value stays, the file's does not count
      try (MetricsScraper strict = MetricsScraper.builder(router).insecureSkipVerify(false)
          .interval(Duration.ofMillis(20)).timeout(UNHURRIED).start()) {
        await(() -> strict.failures() >= 2, "two failed scrapes");
        assertThat(strict.failures()).isEqualTo(strict.scrapes());
      }
      assertThat(pages.get()).isZero();
      try (MetricsScraper scraper = MetricsScraper.builder(router)
          .interval(Duration.ofMillis(20)).timeout(UNHURRIED).start()) {
        await(() -> candidate(router, id).metrics().isKnown(), "the page's figures published");
        assertThat(candidate(router, id).metrics().waitingRequests()).isEqualTo(5);
        assertThat(scraper.failures()).isZero();

        // a reload without it checks certificates again: the scrapes from then on fail
        assertThat(router.reconfigure(verifying, "verify.yaml").errors()).isEmpty();
        long failuresBefore = scraper.failures();
        await(() -> scraper.failures() >= failuresBefore + 2, "failed scrapes after the reload");
        int served = pages.get();
        long scrapesBefore = scraper.scrapes();
        await(() -> scraper.scrapes() >= scrapesBefore + 3, "three more scrapes");
        assertThat(pages.get()).as("pages served once verification was back").isEqualTo(served);
      }
    } finally {
      server.stop(0);
      router.close();
    }
  }

  @Test
  void insecureSkipVerifyChangesNothingForPlainHttp() throws Exception {
    java.util.concurrent.atomic.AtomicReference<String> body =
        new java.util.concurrent.atomic.AtomicReference<>(MetricsScraperTest.VLLM);
    com.sun.net.httpserver.HttpServer server = MetricsScraperTest.metricsServer(body);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.of("127.0.0.1", server.getAddress().getPort()))).build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).insecureSkipVerify(true)
        .interval(Duration.ofMillis(20)).timeout(UNHURRIED).start()) {
      await(() -> candidate(router, id).metrics().isKnown(), "the page's figures published");
      assertThat(candidate(router, id).metrics().waitingRequests()).isEqualTo(5);
    } finally {
      server.stop(0);
      router.close();
    }
  }

  /** An HTTPS server of {@link MetricsScraperTest#VLLM} with a new self-signed certificate. */
  private HttpsServer httpsServer(AtomicInteger pages) throws Exception {
    Path store = dir.resolve("metrics.p12");
    List<String> cmd = List.of(
        Path.of(System.getProperty("java.home"), "bin", "keytool").toString(), "-genkeypair",
        "-keystore", store.toString(), "-storetype", "PKCS12", "-storepass", "changeit",
        "-alias", "m", "-keyalg", "EC", "-groupname", "secp256r1",
        // a name only: the certificate does not name 127.0.0.1, where it is reached
        "-dname", "CN=metrics.example", "-ext", "SAN=dns:metrics.example", "-validity", "2");
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    p.getOutputStream().close();
    String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertThat(p.waitFor(60, TimeUnit.SECONDS)).as("keytool finished").isTrue();
    assertThat(p.exitValue()).as("keytool: %s", output).isZero();
    KeyStore ks = KeyStore.getInstance("PKCS12");
    try (InputStream in = Files.newInputStream(store)) {
      ks.load(in, "changeit".toCharArray());
    }
    KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
    kmf.init(ks, "changeit".toCharArray());
    SSLContext tls = SSLContext.getInstance("TLS");
    tls.init(kmf.getKeyManagers(), null, null);
    HttpsServer server = HttpsServer.create(
        new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.setHttpsConfigurator(new HttpsConfigurator(tls));
    server.createContext("/metrics", ex -> {
      pages.incrementAndGet();
      byte[] b = MetricsScraperTest.VLLM.getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(200, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    server.start();
    return server;
  }

  private static Candidate candidate(Router router, String id) {
    for (Candidate c : router.endpoints()) {
      if (c.id().equals(id)) {
        return c;
      }
    }
    throw new AssertionError("no endpoint " + id);
  }

  private static void await(BooleanSupplier condition, String what) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (!condition.getAsBoolean()) {
      assertThat(System.nanoTime()).as(what + " within 60 s").isLessThan(deadline);
      Thread.sleep(10);
    }
  }
}
