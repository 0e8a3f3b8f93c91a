package io.epp4j.spring.gateway;

import io.epp4j.api.Candidate;
import io.epp4j.core.MetricsScraper;
import io.epp4j.core.Router;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.HealthIndicator;

/**
 * {@code epp4j} in {@code /actuator/health}: whether the gateway can route, and for the default
 * router and each named pool what it routes over. Up while at least one of them has an
 * endpoint whose engine is awake; down when none has an endpoint (every routed request is then
 * answered 503); out of service when every endpoint reports its engine asleep (vLLM's sleep
 * mode, {@link io.epp4j.api.EndpointMetrics#asleep()}): the routers then route to sleeping
 * engines, as they do only when none is awake, and those answer 503 until woken. A pool without
 * endpoints, or with only sleeping ones, next to others that have awake endpoints is reported in
 * the details, not in the status: the default router of a gateway that routes only through named
 * pools has none.
 *
 * <p>Details per router: {@code endpoints}; {@code asleep}, the endpoints whose last metrics say
 * their engine sleeps; {@code withoutMetrics}, the endpoints never scraped successfully; {@code oldestMetricsMillis}, the age of the oldest metrics among the others
 * (-1 when none has any); {@code inFlight}, requests routed and not finished;
 * {@code saturation}, the router's pool saturation (0 idle, 1 saturated); and
 * {@code scrapeFailures}, the failed scrapes of its metrics scraper since it started, when it
 * has one. Reading them takes no lock and costs one pass over each pool.
 */
public class Epp4jHealthIndicator implements HealthIndicator {
  private final Router router;
  private final @Nullable MetricsScraper scraper;
  private final Epp4jPools pools;

  /**
   * @param router the default router
   * @param scraper the default router's metrics scraper, null when its metrics are off
   * @param pools the named pools
   */
  public Epp4jHealthIndicator(Router router, @Nullable MetricsScraper scraper,
      Epp4jPools pools) {
    this.router = router;
    this.scraper = scraper;
    this.pools = pools;
  }

  @Override
  public Health health() {
    // [endpoints, of which asleep] over every router
    int[] count = new int[2];
    Map<String, Object> def = describe(router, scraper, count);
    Map<String, Object> named = new LinkedHashMap<>();
    for (String name : pools.names()) {
      Epp4jPools.@Nullable Pool p = pools.find(name);
      if (p != null) { // removed meanwhile otherwise
        named.put(name, describe(p.router, p.scraper, count));
      }
    }
    Health.Builder h;
    if (count[0] == 0) {
      h = Health.down()
          .withDetail("reason", "no router has an endpoint: routed requests are answered 503");
    } else if (count[1] == count[0]) {
      h = Health.outOfService().withDetail("reason", "every endpoint reports its engine asleep:"
          + " routed requests go to sleeping engines, which answer 503 until woken");
    } else {
      h = Health.up();
    }
    h.withDetail("default", def);
    if (!named.isEmpty()) {
      h.withDetail("pools", named);
    }
    return h.build();
  }

  private static Map<String, Object> describe(Router router, @Nullable MetricsScraper scraper,
      int[] count) {
    List<Candidate> endpoints = router.endpoints();
    long now = router.ticker().nanos();
    int withoutMetrics = 0;
    int asleep = 0;
    long oldest = -1;
    long inFlight = 0;
    for (Candidate c : endpoints) {
      inFlight += c.inFlightRequests();
      if (c.metrics().asleep()) {
        asleep++;
      }
      long age = c.metricsAgeNanos(now);
      if (age == Long.MAX_VALUE) {
        withoutMetrics++;
      } else {
        oldest = Math.max(oldest, age);
      }
    }
    count[0] += endpoints.size();
    count[1] += asleep;
    Map<String, Object> d = new LinkedHashMap<>();
    d.put("endpoints", endpoints.size());
    d.put("asleep", asleep);
    d.put("withoutMetrics", withoutMetrics);
    d.put("oldestMetricsMillis", oldest < 0 ? -1 : oldest / 1_000_000);
    d.put("inFlight", inFlight);
    d.put("saturation", router.poolSaturation());
    if (scraper != null) {
      d.put("scrapeFailures", scraper.failures());
    }
    return d;
  }
}
