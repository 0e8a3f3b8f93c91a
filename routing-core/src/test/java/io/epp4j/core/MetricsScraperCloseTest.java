package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;

/** What a scraper may still do once {@link MetricsScraper#close()} has returned: nothing. */
class MetricsScraperCloseTest {

  @Test
  void anAnswerBeingHandledWhenCloseIsCalledIsDoneBeforeCloseReturns() throws Exception {
    // a page without KV usage: its handling logs a warning before it publishes the figures,
    // and the test holds it there, between the scraper's check that it is still open and the
    // router's update
    AtomicReference<String> body = new AtomicReference<>(
        "vllm:num_requests_waiting{model_name=\"m\"} 7\n"
        + "vllm:num_requests_running{model_name=\"m\"} 1\n");
    HttpServer server = MetricsScraperTest.metricsServer(body);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    CountDownLatch handling = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    Logger logger = Logger.getLogger(MetricsScraper.class.getName());
    Handler hold = new Handler() {
      @Override
      public void publish(LogRecord r) {
        if (r.getMessage().contains(id) && r.getMessage().contains("no sample of")
            && handling.getCount() > 0) {
          handling.countDown();
          try {
            release.await(20, TimeUnit.SECONDS);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
        }
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    logger.addHandler(hold);
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.parse(id))).build();
    MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(20))
        .timeout(MetricsScraperTest.UNHURRIED).start();
    try {
      assertThat(handling.await(10, TimeUnit.SECONDS)).isTrue();
      // the old scraper is closed and its successor (a reload's, a new interval's) publishes
      // as soon as close() returned
      AtomicBoolean successorPublished = new AtomicBoolean();
      Thread closer = new Thread(() -> {
        scraper.close();
        router.updateMetrics(id, EndpointMetrics.builder().waitingRequests(1).build());
        successorPublished.set(true);
      }, "closer");
      closer.start();
      // either close() returned and the successor published, or close() waits for the answer
      // in hand; only then is that answer let go on
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (!successorPublished.get() && !waitsInClose(closer)
          && System.nanoTime() < deadline) {
        Thread.onSpinWait();
      }
      release.countDown();
      closer.join(TimeUnit.SECONDS.toMillis(10));
      assertThat(closer.isAlive()).as("close() still waiting").isFalse();
      // the old scraper's answer has been handled in full, whenever that was
      deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (scraper.scrapesUnderWay() > 0 && System.nanoTime() < deadline) {
        Thread.onSpinWait();
      }
      assertThat(scraper.scrapesUnderWay()).isZero();
      Candidate c = router.endpoints().get(0);
      assertThat(c.metrics().waitingRequests())
          .as("the closed scraper's answer overwrote its successor's figures").isEqualTo(1);
    } finally {
      release.countDown();
      scraper.close();
      logger.removeHandler(hold);
      server.stop(0);
      router.close();
    }
  }

  @Test
  void aScrapeUnderWayWhenItsEndpointLeavesThePoolIsEndedNotLeftToItsTimeout() throws Exception {
    // a replica that takes the request and never answers (hung, or draining after it was taken
    // out of the pool); the scrape's answer could no longer be used, yet the scraper held it,
    // its connection and its entry until the timeout (minutes here; without end under one too
    // long to count), one more for every such replica that left
    CountDownLatch asked = new CountDownLatch(1);
    CountDownLatch hungUp = new CountDownLatch(1);
    try (java.net.ServerSocket listener = new java.net.ServerSocket(0, 50,
        java.net.InetAddress.getLoopbackAddress())) {
      Thread replica = new Thread(() -> {
        try (java.net.Socket s = listener.accept()) {
          java.io.InputStream in = s.getInputStream();
          // the request, up to the blank line that ends its headers
          int last4 = 0;
          while (last4 != 0x0d0a0d0a) {
            int b = in.read();
            if (b < 0) {
              return;
            }
            last4 = last4 << 8 | b;
          }
          asked.countDown();
          while (in.read() >= 0) {
            // no answer: wait for the client to hang up
          }
          hungUp.countDown();
        } catch (java.io.IOException e) {
          hungUp.countDown(); // reset by the client: hung up too
        }
      }, "hung-replica");
      replica.setDaemon(true);
      replica.start();
      String id = "127.0.0.1:" + listener.getLocalPort();
      Router router = Router.builder().registry(TestPlugins.registry())
          .profile(SchedulingProfile.builder("default").build())
          .endpoints(List.of(Endpoint.parse(id))).build();
      try (MetricsScraper scraper = MetricsScraper.builder(router)
          .interval(Duration.ofMillis(20)).timeout(Duration.ofMinutes(10))
          .start()) {
        assertThat(asked.await(10, TimeUnit.SECONDS)).isTrue();
        assertThat(scraper.scrapesUnderWay()).isEqualTo(1);
        assertThat(router.removeEndpoint(id)).isTrue();
        assertThat(hungUp.await(10, TimeUnit.SECONDS))
            .as("the scrape of the endpoint that left is still under way").isTrue();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (scraper.scrapesUnderWay() > 0 && System.nanoTime() < deadline) {
          Thread.onSpinWait();
        }
        assertThat(scraper.scrapesUnderWay()).isZero();
        assertThat(scraper.failures()).as("ended on purpose, not failed").isZero();
      } finally {
        router.close();
      }
    }
  }

  @Test
  void aTimeoutTooLongToCountStillScrapesAfterARoundThatRanLate() throws Exception {
    // the scrape's deadline under such a timeout was queued so far ahead that the scheduler's
    // order overflowed once a round ran past the next one's time (a busy machine, a slow first
    // round): the deadline sorted first and the rounds stopped for good, with nothing said.
    // The router's ticker holds up the first round past a few intervals to make it late
    Duration interval = Duration.ofMillis(20);
    AtomicBoolean heldUp = new AtomicBoolean();
    io.epp4j.api.Ticker lateFirstRound = () -> {
      if (Thread.currentThread().getName().equals("epp4j-metrics-scraper")
          && heldUp.compareAndSet(false, true)) {
        long until = System.nanoTime() + 10 * interval.toNanos();
        while (System.nanoTime() < until) {
          java.util.concurrent.locks.LockSupport.parkNanos(until - System.nanoTime());
        }
      }
      return System.nanoTime();
    };
    AtomicReference<String> body = new AtomicReference<>(MetricsScraperTest.VLLM);
    HttpServer server = MetricsScraperTest.metricsServer(body);
    String id = "127.0.0.1:" + server.getAddress().getPort();
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build()).ticker(lateFirstRound)
        .endpoints(List.of(Endpoint.parse(id))).build();
    try (MetricsScraper scraper = MetricsScraper.builder(router).interval(interval)
        .timeout(java.time.temporal.ChronoUnit.FOREVER.getDuration()).start()) {
      awaitWaiting(router, 5);
      assertThat(heldUp).isTrue();
      body.set(MetricsScraperTest.VLLM.replace("} 3.0", "} 1.0"));
      awaitWaiting(router, 3);
      long rounds = scraper.rounds();
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (scraper.rounds() < rounds + 3 && System.nanoTime() < deadline) {
        Thread.onSpinWait();
      }
      assertThat(scraper.rounds()).isGreaterThanOrEqualTo(rounds + 3);
      assertThat(scraper.failures()).isZero();
    } finally {
      server.stop(0);
      router.close();
    }
  }

  private static void awaitWaiting(Router router, int waiting) {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (System.nanoTime() < deadline) {
      EndpointMetrics m = router.endpoints().get(0).metrics();
      if (m.isKnown() && m.waitingRequests() == waiting) {
        return;
      }
      java.util.concurrent.locks.LockSupport.parkNanos(2_000_000L);
    }
    assertThat(router.endpoints().get(0).metrics().waitingRequests())
        .as("metrics published in time").isEqualTo(waiting);
  }

  private static boolean waitsInClose(Thread t) {
    Thread.State state = t.getState();
    if (state != Thread.State.BLOCKED && state != Thread.State.WAITING
        && state != Thread.State.TIMED_WAITING) {
      return false;
    }
    for (StackTraceElement frame : t.getStackTrace()) {
      if (frame.getClassName().equals(MetricsScraper.class.getName())
          && frame.getMethodName().equals("close")) {
        return true;
      }
    }
    return false;
  }
}
