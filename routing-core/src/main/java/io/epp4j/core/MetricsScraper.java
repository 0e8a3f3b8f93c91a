package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Result;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Polls {@code http://<endpoint>/metrics} of every endpoint in a router's pool and publishes the
 * result with {@link Router#updateMetrics}. Runs on its own daemon thread, off the request path;
 * follows the pool as it changes. A failed scrape leaves the previous metrics in place, so they
 * age and count as stale (see {@code Router.Builder.metricsStaleness}); failures are counted and
 * logged once per endpoint until it recovers.
 *
 * <pre>{@code
 * MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(50)).start();
 * }</pre>
 */
public final class MetricsScraper implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(MetricsScraper.class.getName());

  private final Router router;
  private final Duration interval;
  private final Duration timeout;
  private final String path;
  private final String scheme;
  private final HttpClient client;
  private final ScheduledExecutorService scheduler;
  private final ConcurrentHashMap<String, Boolean> inFlight = new ConcurrentHashMap<>();
  private final ConcurrentHashMap<String, Boolean> failing = new ConcurrentHashMap<>();
  private final AtomicLong scrapes = new AtomicLong();
  private final AtomicLong failures = new AtomicLong();

  private MetricsScraper(Builder b) {
    this.router = b.router;
    this.interval = b.interval;
    this.timeout = b.timeout;
    this.path = b.path;
    this.scheme = b.scheme;
    this.client = HttpClient.newBuilder().connectTimeout(b.timeout).build();
    this.scheduler = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "epp4j-metrics-scraper");
      t.setDaemon(true);
      return t;
    });
  }

  public static Builder builder(Router router) {
    return new Builder(router);
  }

  private MetricsScraper start() {
    scheduler.scheduleAtFixedRate(this::scrapeAll, 0, interval.toNanos(), TimeUnit.NANOSECONDS);
    return this;
  }

  private void scrapeAll() {
    // an exception escaping a periodic task cancels it for good, and with it the scraping of
    // every endpoint: whatever one endpoint does, the next round must still come
    try {
      for (Candidate c : router.endpoints()) {
        scrape(c.id());
      }
    } catch (RuntimeException e) {
      LOG.log(Level.WARNING, "a round of metrics scrapes failed", e);
    }
  }

  private void scrape(String id) {
    if (inFlight.putIfAbsent(id, Boolean.TRUE) != null) {
      return; // the previous scrape of this endpoint is still running
    }
    java.util.concurrent.CompletableFuture<HttpResponse<String>> response;
    try {
      HttpRequest req = HttpRequest.newBuilder(URI.create(scheme + "://" + id + path))
          .timeout(timeout).GET().build();
      response = client.sendAsync(req, HttpResponse.BodyHandlers.ofString());
    } catch (RuntimeException e) {
      // an id that makes no URL the client accepts (a host name with '_', an IPv6 zone): this
      // endpoint cannot be scraped, the others still are
      inFlight.remove(id);
      scrapes.incrementAndGet();
      fail(id, "no metrics request can be made for it: " + e);
      return;
    }
    response.whenComplete((resp, err) -> {
      inFlight.remove(id);
      scrapes.incrementAndGet();
      if (err != null || resp.statusCode() != 200) {
        fail(id, err != null ? err.toString() : "HTTP " + resp.statusCode());
        return;
      }
      try {
        Result<EndpointMetrics> m = PrometheusMetrics.parse(resp.body());
        if (!m.isOk()) {
          fail(id, m.errors().get(0));
          return;
        }
        if (failing.remove(id) != null) {
          LOG.info("metrics of " + id + " are back");
        }
        router.updateMetrics(id, m.value());
      } catch (RuntimeException e) {
        // the future would keep the exception to itself: count and log it as any failure
        fail(id, e.toString());
      }
    });
  }

  private void fail(String id, String why) {
    failures.incrementAndGet();
    if (failing.putIfAbsent(id, Boolean.TRUE) == null) {
      LOG.log(Level.WARNING, "scraping metrics of " + id + " failed: " + why);
    }
  }

  /** Completed scrape attempts. */
  public long scrapes() {
    return scrapes.get();
  }

  /** Failed scrape attempts (connection errors, non-200, unparseable bodies). */
  public long failures() {
    return failures.get();
  }

  @Override
  public void close() {
    scheduler.shutdownNow();
  }

  /** Configures a {@link MetricsScraper}. */
  public static final class Builder {
    private final Router router;
    private Duration interval = Duration.ofMillis(50);
    private Duration timeout = Duration.ofSeconds(1);
    private String path = "/metrics";
    private String scheme = "http";

    private Builder(Router router) {
      this.router = Objects.requireNonNull(router, "router");
      // a configuration's metrics-data-source names where its servers publish metrics; it is the
      // default here, and path(...) / scheme(...) still override it
      for (io.epp4j.api.Plugin p : router.config().plugins().values()) {
        if (p instanceof MetricsDataSource source) {
          this.path = source.path;
          this.scheme = source.scheme;
          break;
        }
      }
    }

    /** Time between scrapes of each endpoint; default 50 ms. */
    public Builder interval(Duration d) {
      if (d.isNegative() || d.isZero()) {
        throw new IllegalArgumentException("interval must be positive, got " + d);
      }
      this.interval = d;
      return this;
    }

    /** Connect and request timeout; default 1 s. */
    public Builder timeout(Duration d) {
      if (d.isNegative() || d.isZero()) {
        throw new IllegalArgumentException("timeout must be positive, got " + d);
      }
      this.timeout = d;
      return this;
    }

    /**
     * Metrics path; default {@code /metrics}, or the {@code path} of the router's
     * {@code metrics-data-source} plugin when its configuration declares one.
     */
    public Builder path(String p) {
      if (!p.startsWith("/")) {
        throw new IllegalArgumentException("path must start with '/', got '" + p + "'");
      }
      this.path = p;
      return this;
    }

    /**
     * {@code http} (default) or {@code https}; the router's {@code metrics-data-source} plugin's
     * {@code scheme} is the default when its configuration declares one.
     */
    public Builder scheme(String s) {
      if (!s.equals("http") && !s.equals("https")) {
        throw new IllegalArgumentException("scheme must be http or https, got '" + s + "'");
      }
      this.scheme = s;
      return this;
    }

    /** Starts scraping at once. */
    public MetricsScraper start() {
      return new MetricsScraper(this).start();
    }
  }
}
