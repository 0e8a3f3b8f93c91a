package io.epp4j.core;

import static io.epp4j.core.TestPlugins.ep;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * A router that neither routes nor gets metrics any more still releases the requests its gateway
 * never finished once they pass {@code inFlightMaxAge}: whoever reads its in-flight figures (the
 * caller, telemetry, the routers it shares them with) no longer finds them counted.
 */
class IdleRouterExpiryTest {
  private static final long MAX_AGE_NANOS = TimeUnit.SECONDS.toNanos(30);

  private static long gauge(InMemoryMetricReader reader, String name) {
    MetricData m = reader.collectAllMetrics().stream().filter(d -> d.getName().equals(name))
        .findFirst().orElseThrow();
    return m.getLongGaugeData().getPoints().iterator().next().getValue();
  }

  @Test
  void readingTheInFlightFiguresReleasesExpiredRequestsWithoutFurtherRoutes() {
    AtomicLong now = new AtomicLong();
    Router r = RouterTest.base().ticker(now::get).inFlightMaxAge(Duration.ofNanos(MAX_AGE_NANOS))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    RoutingDecision lost = r.route(RouterTest.REQ);
    RoutingDecision finished = r.route(RouterTest.REQ);
    finished.onComplete(Usage.NONE);
    assertThat(r.endpoints().get(0).inFlightRequests()).isEqualTo(1);
    // within the age: still counted
    now.addAndGet(MAX_AGE_NANOS);
    assertThat(r.endpoints().get(0).inFlightRequests()).isEqualTo(1);
    // past it, and past the next check: gone, with no route or metrics since
    now.addAndGet(MAX_AGE_NANOS / 8 + 1);
    assertThat(r.endpoints().get(0).inFlightRequests()).isZero();
    assertThat(r.endpoints().get(0).inFlightTokens()).isZero();
    lost.onComplete(Usage.NONE);
    assertThat(r.endpoints().get(0).inFlightRequests()).isZero();
  }

  @Test
  void theHintsSharedWithOtherRoutersNoLongerCarryThem() {
    AtomicLong now = new AtomicLong();
    Router r = RouterTest.base().ticker(now::get).inFlightMaxAge(Duration.ofNanos(MAX_AGE_NANOS))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    r.route(RouterTest.REQ);
    assertThat(RouterHintsTest.local(r.hints())).containsKey("10.0.0.1:80")
        .extractingByKey("10.0.0.1:80").satisfies(f -> assertThat(f[0]).isEqualTo(1));
    now.addAndGet(MAX_AGE_NANOS + MAX_AGE_NANOS / 8 + 1);
    assertThat(RouterHintsTest.local(r.hints())).extractingByKey("10.0.0.1:80")
        .satisfies(f -> assertThat(f).containsExactly(0, 0));
  }

  @Test
  void theInFlightGaugeNoLongerCountsThem() {
    InMemoryMetricReader reader = InMemoryMetricReader.create();
    OpenTelemetrySdk sdk = OpenTelemetrySdk.builder()
        .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(reader).build()).build();
    AtomicLong now = new AtomicLong();
    Router r = RouterTest.base().ticker(now::get).openTelemetry(sdk)
        .inFlightMaxAge(Duration.ofNanos(MAX_AGE_NANOS))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    r.route(RouterTest.REQ);
    assertThat(gauge(reader, "epp4j.pool.in_flight_requests")).isEqualTo(1);
    now.addAndGet(MAX_AGE_NANOS + MAX_AGE_NANOS / 8 + 1);
    assertThat(gauge(reader, "epp4j.pool.in_flight_requests")).isZero();
  }
}
