package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.epp4j.core.Router;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.util.TestPropertyValues;
import org.springframework.cloud.context.environment.EnvironmentChangeEvent;

/**
 * Where the scrapers of the auto-configuration scrape: the config file's
 * {@code metrics-data-source} unless {@code epp4j.metrics.path} / {@code epp4j.scheme} are set.
 */
class Epp4jMetricsSourceTest {
  private static final Duration WAIT = Duration.ofSeconds(20);

  private final ApplicationContextRunner runner = new ApplicationContextRunner()
      .withConfiguration(AutoConfigurations.of(Epp4jAutoConfiguration.class))
      .withPropertyValues("epp4j.metrics.interval=20ms");

  @TempDir
  Path dir;

  private HttpServer server;
  private final AtomicLong onDefault = new AtomicLong();
  private final AtomicLong onCustom = new AtomicLong();
  private final AtomicLong onOther = new AtomicLong();
  /** Requests on any other path: a scrape sent where it should not go. */
  private final AtomicLong onUnexpected = new AtomicLong();

  @BeforeEach
  void startReplica() throws IOException {
    server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    // each path tells its figures apart, so the router's metrics show which one was scraped
    server.createContext("/metrics", ex -> answer(ex, 3, onDefault));
    server.createContext("/custom-metrics", ex -> answer(ex, 7, onCustom));
    server.createContext("/other-metrics", ex -> answer(ex, 9, onOther));
    server.createContext("/", ex -> {
      onUnexpected.incrementAndGet();
      ex.sendResponseHeaders(404, -1);
      ex.close();
    });
    server.start();
  }

  @AfterEach
  void stopReplica() {
    server.stop(0);
  }

  @Test
  void theConfigFilesMetricsDataSourceDecidesTheDefaultScrapersPathAndARefreshMovesIt()
      throws Exception {
    // the scraper was always given epp4j.metrics.path (default /metrics), which wins over the
    // file: the file's path never took effect
    Path custom = config("custom.yaml", "path: /custom-metrics");
    Path other = config("other.yaml", "path: /other-metrics");
    runner.withPropertyValues("epp4j.endpoints=" + endpoint(), "epp4j.config-file=" + custom)
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          Router router = ctx.getBean(Router.class);
          awaitWaiting(router, 7);

          TestPropertyValues.of("epp4j.config-file=" + other).applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.config-file")));
          awaitWaiting(router, 9);

          // no scrape went to the default path or any other (a failure count would also count
          // scrapes that time out on a loaded machine)
          assertThat(onDefault.get()).isZero();
          assertThat(onUnexpected.get()).isZero();
        });
  }

  @Test
  void anExplicitMetricsPathPropertyWinsOverTheConfigFile() throws Exception {
    Path custom = config("custom.yaml", "path: /custom-metrics");
    runner.withPropertyValues("epp4j.endpoints=" + endpoint(), "epp4j.config-file=" + custom,
            "epp4j.metrics.path=/metrics")
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          awaitWaiting(ctx.getBean(Router.class), 3);
          awaitAtLeast(onDefault::get, onDefault.get() + 3, "/metrics scraped again");
          assertThat(onCustom.get()).isZero();
        });
  }

  @Test
  void aNamedPoolFollowsItsConfigFileUnlessAMetricsPathPropertyReachesIt() throws Exception {
    Path custom = config("custom.yaml", "path: /custom-metrics");
    Path other = config("other.yaml", "path: /other-metrics");
    runner.withPropertyValues("epp4j.metrics.enabled=false",
            "epp4j.pools.llama.endpoints=" + endpoint(),
            "epp4j.pools.llama.config-file=" + custom, "epp4j.pools.llama.metrics.enabled=true",
            "epp4j.pools.qwen.endpoints=" + endpoint(),
            "epp4j.pools.qwen.config-file=" + custom, "epp4j.pools.qwen.metrics.enabled=true",
            "epp4j.pools.qwen.metrics.path=/metrics")
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          Epp4jPools pools = ctx.getBean(Epp4jPools.class);
          awaitWaiting(pools.router("llama"), 7);
          awaitWaiting(pools.router("qwen"), 3);

          TestPropertyValues.of("epp4j.pools.llama.config-file=" + other).applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx,
              Set.of("epp4j.pools.llama.config-file")));
          awaitWaiting(pools.router("llama"), 9);
        });
    // inherited from epp4j.metrics.path, set explicitly there: it wins as well
    runner.withPropertyValues("epp4j.metrics.path=/metrics",
            "epp4j.pools.llama.endpoints=" + endpoint(),
            "epp4j.pools.llama.config-file=" + custom)
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          awaitWaiting(ctx.getBean(Epp4jPools.class).router("llama"), 3);
        });
  }

  @Test
  void theConfigFilesSchemeIsUsedUnlessEpp4jSchemeIsSet() throws Exception {
    Path https = config("https.yaml", "path: /custom-metrics, scheme: https");
    // the replica speaks plain HTTP behind a front that counts the connections opening with a
    // TLS handshake: scraping with https never reaches the replica
    try (TlsCountingFront front = new TlsCountingFront(server.getAddress().getPort())) {
      runner.withPropertyValues("epp4j.endpoints=" + front.endpoint(),
              "epp4j.config-file=" + https)
          .run(ctx -> {
            assertThat(ctx).hasNotFailed();
            awaitAtLeast(front.tls::get, 2, "https scrapes");
            assertThat(onCustom.get()).isZero();
          });
      front.tls.set(0);
      runner.withPropertyValues("epp4j.endpoints=" + front.endpoint(),
              "epp4j.config-file=" + https, "epp4j.scheme=http")
          .run(ctx -> {
            assertThat(ctx).hasNotFailed();
            awaitWaiting(ctx.getBean(Router.class), 7);
            // no scrape opened with TLS (a failure count would also count scrapes that time
            // out on a loaded machine)
            assertThat(front.tls.get()).isZero();
            assertThat(onUnexpected.get()).isZero();
          });
    }
  }

  /**
   * A TCP front on loopback that relays connections to the replica, except those whose first
   * byte opens a TLS handshake record (0x16), which it counts and closes.
   */
  private static final class TlsCountingFront implements AutoCloseable {
    final AtomicLong tls = new AtomicLong();
    private final int target;
    private final ServerSocket socket;
    private final ExecutorService threads = Executors.newCachedThreadPool();
    private final List<Socket> open = new CopyOnWriteArrayList<>();

    TlsCountingFront(int target) throws IOException {
      this.target = target;
      socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
      threads.execute(this::accept);
    }

    String endpoint() {
      return "127.0.0.1:" + socket.getLocalPort();
    }

    private void accept() {
      try {
        while (true) {
          Socket client = socket.accept();
          open.add(client);
          threads.execute(() -> relay(client));
        }
      } catch (IOException closed) {
        // the front was closed
      }
    }

    private void relay(Socket client) {
      try {
        int first = client.getInputStream().read();
        if (first == 0x16) {
          tls.incrementAndGet();
          client.close();
          return;
        }
        if (first < 0) {
          client.close();
          return;
        }
        Socket replica = new Socket(InetAddress.getLoopbackAddress(), target);
        open.add(replica);
        replica.getOutputStream().write(first);
        threads.execute(() -> pump(client, replica));
        pump(replica, client);
      } catch (IOException e) {
        // a connection that ends
      }
    }

    private static void pump(Socket from, Socket to) {
      try {
        from.getInputStream().transferTo(to.getOutputStream());
      } catch (IOException e) {
        // either side closed
      } finally {
        try {
          from.close();
          to.close();
        } catch (IOException ignored) {
          // closing
        }
      }
    }

    @Override
    public void close() throws IOException {
      socket.close();
      for (Socket s : open) {
        s.close();
      }
      threads.shutdownNow();
    }
  }

  @Test
  @SuppressWarnings("deprecation") // SelfSignedCertificate: Netty's successor is not on this path
  void insecureSkipVerifyPropertiesScrapeASelfSignedReplicaAndWinOverTheConfigFile()
      throws Exception {
    // before, no property let the gateway's scrapers take a certificate the JVM does not trust,
    // and a config file saying so was refused
    io.netty.handler.ssl.util.SelfSignedCertificate cert =
        new io.netty.handler.ssl.util.SelfSignedCertificate("metrics.example");
    AtomicLong pages = new AtomicLong();
    // the pages read at /metrics/refused: only the context whose property says false scrapes
    // there, so a page of an earlier context served late (its scrape sent before that context
    // closed) is not counted as read by it
    AtomicLong refusedPages = new AtomicLong();
    com.sun.net.httpserver.HttpsServer replica = io.epp4j.testkit.LoopbackHttps.start(cert.key(),
        new java.security.cert.Certificate[] {cert.cert()}, "/metrics",
        ex -> answer(ex, 5,
            ex.getRequestURI().getPath().equals("/metrics/refused") ? refusedPages : pages));
    String id = "127.0.0.1:" + replica.getAddress().getPort();
    Path verifying = config("https.yaml", "scheme: https");
    Path skipping = config("skip.yaml", "scheme: https, insecureSkipVerify: true");
    Path skippingElsewhere = config("skip-refused.yaml",
        "scheme: https, insecureSkipVerify: true, path: /metrics/refused");
    try {
      // the property alone
      runner.withPropertyValues("epp4j.endpoints=" + id, "epp4j.config-file=" + verifying,
              "epp4j.metrics.insecure-skip-verify=true")
          .run(ctx -> {
            assertThat(ctx).hasNotFailed();
            awaitWaiting(ctx.getBean(Router.class), 5);
          });
      // the config file alone
      runner.withPropertyValues("epp4j.endpoints=" + id, "epp4j.config-file=" + skipping)
          .run(ctx -> {
            assertThat(ctx).hasNotFailed();
            awaitWaiting(ctx.getBean(Router.class), 5);
          });
      // set false, the property wins over the file: nothing is read from the replica. Counted
      // on a path of its own: the scrapers above are closed, but a scrape they sent just before
      // can still be answered after (it once counted 3 pages where 2 were read before)
      runner.withPropertyValues("epp4j.endpoints=" + id, "epp4j.config-file=" + skippingElsewhere,
              "epp4j.metrics.insecure-skip-verify=false")
          .run(ctx -> {
            assertThat(ctx).hasNotFailed();
            io.epp4j.core.MetricsScraper scraper = ctx.getBean(io.epp4j.core.MetricsScraper.class);
            awaitAtLeast(scraper::failures, 2, "two failed scrapes");
            assertThat(ctx.getBean(Router.class).endpoints().get(0).metrics().isKnown()).isFalse();
          });
      assertThat(refusedPages.get()).as("pages read with insecure-skip-verify=false").isZero();
      // a named pool: its own value, else the top-level one
      runner.withPropertyValues("epp4j.metrics.insecure-skip-verify=true",
              "epp4j.pools.llama.endpoints=" + id, "epp4j.pools.llama.config-file=" + verifying,
              "epp4j.pools.qwen.endpoints=" + id, "epp4j.pools.qwen.config-file=" + skipping,
              "epp4j.pools.qwen.metrics.insecure-skip-verify=false")
          .run(ctx -> {
            assertThat(ctx).hasNotFailed();
            Epp4jPools pools = ctx.getBean(Epp4jPools.class);
            awaitWaiting(pools.router("llama"), 5);
            io.epp4j.core.MetricsScraper qwen = pools.pool("qwen").scraper;
            awaitAtLeast(qwen::failures, 2, "two failed scrapes of qwen");
            assertThat(pools.router("qwen").endpoints().get(0).metrics().isKnown()).isFalse();
          });
    } finally {
      replica.stop(0);
    }
  }

  private Path config(String name, String parameters) throws IOException {
    Path file = dir.resolve(name);
    Files.writeString(file, """
        plugins:
        - {name: src, type: metrics-data-source, parameters: {%s}}
        - {type: queue-scorer}
        - {type: max-score-picker}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: queue-scorer
          - pluginRef: max-score-picker
        """.formatted(parameters));
    return file;
  }

  private String endpoint() {
    return "127.0.0.1:" + server.getAddress().getPort();
  }

  private static void answer(HttpExchange ex, int waiting, AtomicLong hits) throws IOException {
    hits.incrementAndGet();
    byte[] b = ("vllm:num_requests_waiting " + waiting + "\n").getBytes(StandardCharsets.UTF_8);
    ex.sendResponseHeaders(200, b.length);
    ex.getResponseBody().write(b);
    ex.close();
  }

  private static void awaitWaiting(Router router, int waiting) throws InterruptedException {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (router.endpoints().get(0).metrics().waitingRequests() != waiting) {
      assertThat(System.nanoTime())
          .as("scraped %s waiting requests in time, have %s", waiting,
              router.endpoints().get(0).metrics().waitingRequests())
          .isLessThan(deadline);
      Thread.sleep(10);
    }
  }

  private static void awaitAtLeast(LongSupplier value, long atLeast, String what)
      throws InterruptedException {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (value.getAsLong() < atLeast) {
      assertThat(System.nanoTime()).as(what + " in time").isLessThan(deadline);
      Thread.sleep(10);
    }
  }
}
