package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.PoolListener;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * An endpoint that leaves the pool and comes back at the same address while a scrape of it is
 * under way: the answer to that scrape comes from the server that was there before (a pod
 * replaced at the same IP, a restarted process) and must not become the figures of the endpoint
 * back in the pool. Before, it was published as the returning endpoint's first metrics, stamped
 * on arrival so that it looked fresh, and the next scrape of the new server then read as a
 * restart.
 */
class ScrapeAcrossEndpointReturnTest {

  @Test
  void aScrapeBegunBeforeTheEndpointLeftIsNotPublishedForItsReturn() throws Exception {
    CountDownLatch firstArrived = new CountDownLatch(1);
    CountDownLatch releaseFirst = new CountDownLatch(1);
    CountDownLatch secondArrived = new CountDownLatch(1);
    CountDownLatch releaseLater = new CountDownLatch(1);
    AtomicInteger requests = new AtomicInteger();
    HttpServer server = HttpServer.create(
        new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.setExecutor(java.util.concurrent.Executors.newCachedThreadPool());
    server.createContext("/metrics", ex -> {
      int n = requests.incrementAndGet();
      try {
        if (n == 1) {
          firstArrived.countDown();
          releaseFirst.await(30, TimeUnit.SECONDS);
          answer(ex, "vllm:num_requests_waiting 7\nvllm:num_requests_running 9\n"
              + "vllm:kv_cache_usage_perc 0.9\nprocess_start_time_seconds 1000\n");
        } else {
          secondArrived.countDown();
          releaseLater.await(30, TimeUnit.SECONDS);
          answer(ex, "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\n"
              + "vllm:kv_cache_usage_perc 0.1\nprocess_start_time_seconds 2000\n");
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    });
    server.start();
    Endpoint a = Endpoint.of("127.0.0.1", server.getAddress().getPort());
    AtomicInteger cacheDropped = new AtomicInteger();
    PoolListener listener = new PoolListener() {
      @Override
      public void onEndpointCacheDropped(Endpoint endpoint) {
        cacheDropped.incrementAndGet();
      }
    };
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build()).endpoints(List.of(a))
        .listener(listener).build();
        MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(10))
            .timeout(MetricsScraperTest.UNHURRIED).start()) {
      assertThat(firstArrived.await(30, TimeUnit.SECONDS)).as("first scrape sent").isTrue();
      assertThat(router.removeEndpoint(a.id())).isTrue();
      assertThat(router.addEndpoint(a)).isTrue();
      releaseFirst.countDown();
      // the scrape of the returning endpoint's stay ends the earlier one before it starts, so
      // once the second arrives the first answer can no longer be published
      assertThat(secondArrived.await(30, TimeUnit.SECONDS)).as("second scrape sent").isTrue();
      Candidate back = candidate(router, a);
      assertThat(back.metrics().isKnown())
          .as("the returning endpoint has no figures from the server that was there before")
          .isFalse();
      assertThat(back.waitingRequests()).isZero();
      assertThat(scraper.failures()).isZero();
      releaseLater.countDown();
      awaitNewServersFigures(router, a, "scraped the returned endpoint in time");
      assertThat(candidate(router, a).runningRequests()).isEqualTo(2);
      assertThat(cacheDropped).as("the new server's first page is no restart of the old one's")
          .hasValue(0);
    } finally {
      releaseFirst.countDown();
      releaseLater.countDown();
      server.stop(0);
    }
  }

  /**
   * The returning endpoint's first scrape starts at once, not after the scrape of its earlier
   * stay ends: before, it waited for that one (up to the scrape timeout) and the endpoint went
   * without figures all that while.
   */
  @Test
  void theReturningEndpointIsScrapedWhileTheEarlierStaysScrapeHangs() throws Exception {
    CountDownLatch firstArrived = new CountDownLatch(1);
    CountDownLatch releaseFirst = new CountDownLatch(1);
    CountDownLatch laterArrived = new CountDownLatch(1);
    AtomicInteger requests = new AtomicInteger();
    HttpServer server = HttpServer.create(
        new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.setExecutor(java.util.concurrent.Executors.newCachedThreadPool());
    server.createContext("/metrics", ex -> {
      try {
        if (requests.incrementAndGet() == 1) {
          firstArrived.countDown();
          releaseFirst.await(60, TimeUnit.SECONDS); // the old server hangs
          answer(ex, "vllm:num_requests_waiting 7\nvllm:num_requests_running 9\n"
              + "vllm:kv_cache_usage_perc 0.9\n");
        } else {
          laterArrived.countDown();
          answer(ex, "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\n"
              + "vllm:kv_cache_usage_perc 0.1\n");
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    });
    server.start();
    Endpoint a = Endpoint.of("127.0.0.1", server.getAddress().getPort());
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build()).endpoints(List.of(a)).build();
        MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(10))
            .timeout(Duration.ofMinutes(10)).start()) {
      assertThat(firstArrived.await(30, TimeUnit.SECONDS)).as("first scrape sent").isTrue();
      assertThat(router.removeEndpoint(a.id())).isTrue();
      assertThat(router.addEndpoint(a)).isTrue();
      // the first scrape still hangs (its server answers only when released below) and its
      // timeout is minutes away: only a scrape started beside it can arrive now
      assertThat(laterArrived.await(20, TimeUnit.SECONDS))
          .as("the returning endpoint is scraped while the earlier stay's scrape hangs").isTrue();
      awaitNewServersFigures(router, a, "published the returning endpoint's figures in time");
      assertThat(candidate(router, a).runningRequests()).isEqualTo(2);
      assertThat(scraper.failures())
          .as("the earlier stay's scrape, ended on purpose, is no failure").isZero();
    } finally {
      releaseFirst.countDown();
      server.stop(0);
    }
  }

  /** Waits up to 30 s for the page of the server that came back (1 waiting request). */
  private static void awaitNewServersFigures(Router router, Endpoint a, String what)
      throws InterruptedException {
    long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
    while (candidate(router, a).waitingRequests() != 1) {
      assertThat(System.nanoTime()).as(what).isLessThan(deadline);
      Thread.sleep(5);
    }
  }

  private static Candidate candidate(Router router, Endpoint e) {
    return router.endpoints().stream().filter(c -> c.id().equals(e.id())).findFirst()
        .orElseThrow();
  }

  private static void answer(HttpExchange ex, String page) throws IOException {
    byte[] b = page.getBytes(StandardCharsets.UTF_8);
    ex.sendResponseHeaders(200, b.length);
    ex.getResponseBody().write(b);
    ex.close();
  }
}
