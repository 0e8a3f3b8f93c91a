package io.epp4j.core;

import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.DoubleHistogram;
import io.opentelemetry.api.metrics.LongCounter;
import io.opentelemetry.api.metrics.Meter;
import io.opentelemetry.api.metrics.ObservableDoubleGauge;
import io.opentelemetry.api.metrics.ObservableLongGauge;
import java.util.List;
import java.util.function.Supplier;

/** OpenTelemetry instruments of a router. Attributes never carry request content. */
final class RouterTelemetry implements AutoCloseable {
  static final String INSTRUMENTATION = "io.epp4j.routing";
  static final AttributeKey<String> OUTCOME = AttributeKey.stringKey("outcome");

  private final DoubleHistogram duration;
  private final LongCounter decisions;
  private final LongCounter inFlightExpired;
  private final Attributes routed;
  private final Attributes invalid;
  private final Attributes shed;
  private final Attributes noEndpoints;
  private final Attributes error;
  private final List<AutoCloseable> gauges;

  RouterTelemetry(OpenTelemetry otel, Supplier<PoolSnapshot> pool,
      java.util.function.DoubleSupplier saturation) {
    Meter meter = otel.getMeter(INSTRUMENTATION);
    duration = meter.histogramBuilder("epp4j.routing.duration")
        .setDescription("Time spent deciding where to route one request")
        .setUnit("s")
        .build();
    decisions = meter.counterBuilder("epp4j.routing.decisions")
        .setDescription("Routing decisions by outcome (routed, invalid_request, shed, no_endpoints, error)")
        .setUnit("{decision}")
        .build();
    inFlightExpired = meter.counterBuilder("epp4j.routing.in_flight_expired")
        .setDescription("Routed requests released from in-flight accounting because the gateway"
            + " did not finish them within the router's inFlightMaxAge")
        .setUnit("{request}")
        .build();
    routed = Attributes.of(OUTCOME, "routed");
    invalid = Attributes.of(OUTCOME, "invalid_request");
    shed = Attributes.of(OUTCOME, "shed");
    noEndpoints = Attributes.of(OUTCOME, "no_endpoints");
    error = Attributes.of(OUTCOME, "error");
    ObservableLongGauge size = meter.gaugeBuilder("epp4j.pool.endpoints")
        .setDescription("Endpoints in the pool")
        .setUnit("{endpoint}")
        .ofLongs()
        .buildWithCallback(m -> m.record(pool.get().states.length));
    ObservableLongGauge inFlight = meter.gaugeBuilder("epp4j.pool.in_flight_requests")
        .setDescription("Requests routed and not yet finished, over all endpoints")
        .setUnit("{request}")
        .ofLongs()
        .buildWithCallback(m -> {
          long sum = 0;
          for (EndpointState s : pool.get().states) {
            sum += s.inFlightRequests();
          }
          m.record(sum);
        });
    ObservableDoubleGauge sat = meter.gaugeBuilder("epp4j.pool.saturation")
        .setDescription("Average endpoint saturation; at 1 or more sheddable requests are rejected")
        .setUnit("1")
        .buildWithCallback(m -> m.record(saturation.getAsDouble()));
    gauges = List.of(size, inFlight, sat);
  }

  void recordDuration(long nanos) {
    duration.record(nanos * 1e-9);
  }

  void routed() {
    decisions.add(1, routed);
  }

  void rejected(io.epp4j.api.Rejection.Reason reason) {
    decisions.add(1, switch (reason) {
      case INVALID_REQUEST -> invalid;
      case SHED -> shed;
      case NO_ENDPOINTS -> noEndpoints;
    });
  }

  void inFlightExpired(long n) {
    inFlightExpired.add(n);
  }

  void error() {
    decisions.add(1, error);
  }

  @Override
  public void close() {
    for (AutoCloseable g : gauges) {
      try {
        g.close();
      } catch (Exception ignored) {
        // closing a gauge callback cannot meaningfully fail
      }
    }
  }
}
