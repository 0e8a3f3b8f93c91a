package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.time.Duration;
import java.time.temporal.ChronoUnit;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@code Router.Builder.inFlightMaxAge} accepts a duration too long to count in nanoseconds
 * ({@code ChronoUnit.FOREVER}) as "never release": the plugins that keep their own in-flight
 * counts under that age must take it the same way, not fail to load.
 */
class InFlightMaxAgeForeverTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"));
  static final Duration FOREVER = ChronoUnit.FOREVER.getDuration();

  static InferenceRequest request(int priority) {
    return InferenceRequest.builder().model("m").prompt("hello there").priority(priority)
        .maxTokens(10).build();
  }

  @ParameterizedTest
  @ValueSource(strings = {"inflight-load-producer", "prefix-cache-affinity-filter",
      "concurrency-detector"})
  void aPluginCountingInFlightLoadLoadsUnderAnEndlessMaximumAge(String type) {
    try (Router r = Router.builder().endpoints(POOL).randomSeed(1).inFlightMaxAge(FOREVER)
        .configYaml("""
            plugins:
            - type: %s
            - type: max-score-picker
            schedulingProfiles:
            - name: default
              plugins: [{pluginRef: %s}, {pluginRef: max-score-picker}]
            """.formatted(type, type), "forever.yaml").build()) {
      RoutingDecision d = r.route(request(0));
      assertThat(d.isRouted()).as("%s", d).isTrue();
      d.onComplete(Usage.NONE);
    }
  }

  /** Never released by age: requests the gateway never finishes keep the pool full. */
  @Test
  void concurrencyDetectorNeverForgetsUnfinishedRequestsUnderAnEndlessMaximumAge() {
    AtomicLong now = new AtomicLong();
    try (Router r = Router.builder().endpoints(POOL).randomSeed(3).ticker(now::get)
        .inFlightMaxAge(FOREVER).configYaml("""
            flowControl:
              saturationDetector: {pluginRef: concurrency-detector}
            plugins:
            - type: concurrency-detector
              parameters: {maxConcurrency: 1}
            - type: max-score-picker
            schedulingProfiles:
            - name: default
              plugins: [{pluginRef: concurrency-detector}, {pluginRef: max-score-picker}]
            """, "forever.yaml").build()) {
      assertThat(r.route(request(0)).isRouted()).isTrue();
      assertThat(r.route(request(0)).isRouted()).isTrue();
      assertThat(r.route(request(-1)).rejection()).isNotNull();
      now.addAndGet(Duration.ofDays(365L * 200).toNanos());
      assertThat(r.route(request(-1)).rejection()).isNotNull();
    }
  }
}
