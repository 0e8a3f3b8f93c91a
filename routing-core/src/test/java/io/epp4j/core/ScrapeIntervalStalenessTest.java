package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.locks.LockSupport;
import java.util.function.LongSupplier;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;

/**
 * A utilization-detector's {@code metricsStalenessThreshold} compared with the interval the
 * scraper runs at, not its default: every endpoint is stale between two scrapes when the
 * threshold is shorter, and the pool reads as saturated. The file alone cannot tell (the
 * scraper is made after the router), so the scraper says it once it runs the configuration.
 */
class ScrapeIntervalStalenessTest {
  private static final String PREFIX = "metricsStalenessThreshold of ";

  private static String config(String staleness) {
    return """
        plugins:
        - name: detector
          type: utilization-detector
          parameters: {metricsStalenessThreshold: %s}
        - type: max-score-picker
        saturationDetector: {pluginRef: detector}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: max-score-picker
        """.formatted(staleness);
  }

  /** The scraper's warnings about staleness, from creation to close. */
  private static final class Warnings extends Handler implements AutoCloseable {
    final List<String> messages = new CopyOnWriteArrayList<>();
    private final Logger logger = Logger.getLogger(MetricsScraper.class.getName());

    Warnings() {
      logger.addHandler(this);
    }

    @Override
    public void publish(LogRecord r) {
      if (r.getMessage().startsWith(PREFIX)) {
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

  private static void awaitCount(LongSupplier count, long atLeast) {
    long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
    while (count.getAsLong() < atLeast && System.nanoTime() < deadline) {
      LockSupport.parkNanos(10_000_000L);
    }
    assertThat(count.getAsLong()).isGreaterThanOrEqualTo(atLeast);
  }

  @Test
  void theUpstreamDefaultThresholdUnderASlowerScraperIsWarnedAbout() {
    // 200 ms is upstream's default and above the scraper's default 50 ms: the file loads quietly
    Router router = Router.builder().registry(PluginRegistry.fromServiceLoader())
        .configYaml(config("200ms"), "d.yaml").build();
    assertThat(router.config().warnings()).isEmpty();
    try (Warnings log = new Warnings();
        MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofSeconds(1))
            .start()) {
      awaitCount(scraper::rounds, 1);
      assertThat(log.messages).containsExactly(PREFIX + "utilization-detector 'detector' is 200"
          + " ms, shorter than this scraper's interval of 1000 ms: between scrapes every"
          + " endpoint's metrics are stale and count as saturated, so the pool reads as"
          + " saturated most of the time; scrape more often or raise the threshold");
    }
  }

  @Test
  void aThresholdAtLeastTheScrapersIntervalIsNotWarnedAboutAndAReloadIsChecked() {
    Router router = Router.builder().registry(PluginRegistry.fromServiceLoader())
        .configYaml(config("20ms"), "d.yaml").build();
    try (Warnings log = new Warnings();
        MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(10))
            .start()) {
      awaitCount(scraper::rounds, 2);
      // 20 ms is below the default interval, not below this scraper's 10 ms
      assertThat(log.messages).isEmpty();
      assertThat(router.reconfigure(config("5ms"), "d.yaml").isOk()).isTrue();
      long after = scraper.rounds();
      awaitCount(scraper::rounds, after + 2);
      assertThat(log.messages).singleElement().asString()
          .startsWith(PREFIX + "utilization-detector 'detector' is 5 ms, shorter than this"
              + " scraper's interval of 10 ms");
    }
  }
}
