package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * utilization-detector's {@code headroom}: upstream takes any value >= 0 (its validation refuses
 * only a negative one), and a large one lets the filter keep endpoints far past the thresholds.
 * epp4j refused a headroom above 100 ("must be in [0.0, 100.0]"), so a file upstream loads did
 * not build a router here.
 */
class UtilizationDetectorHeadroomTest {
  final ConfigLoader loader = new ConfigLoader(PluginRegistry.fromServiceLoader());

  private Result<RouterConfig> load(String headroom) {
    return loader.load("""
        plugins:
        - type: utilization-detector
          parameters: {queueDepthThreshold: 5, headroom: %s}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: utilization-detector
          - pluginRef: max-score-picker
        """.formatted(headroom), "d.yaml");
  }

  private static Candidate waiting(int octet, int queue, long now) {
    return new EndpointState(Endpoint.of("10.0.0." + octet, 8000),
        EndpointMetrics.builder().waitingRequests(queue).scrapedAtNanos(now).build(),
        new EndpointState.InFlight("10.0.0." + octet + ":8000"));
  }

  @Test
  void aHeadroomAbove100LoadsAndRelaxesTheFilterByIt() {
    Result<RouterConfig> r = load("150");
    assertThat(r.errors()).isEmpty();
    UtilizationDetector d = (UtilizationDetector) r.value().plugins().get("utilization-detector");
    long now = 1_000_000_000L;
    // limit 5 × (1 + 150) = 755 waiting requests
    List<Candidate> pool = List.of(waiting(1, 754, now), waiting(2, 755, now), waiting(3, 0, now));
    List<Candidate> kept = d.filter(InferenceRequest.builder().model("m").prompt("p").build(),
        new CycleState(now, new java.util.SplittableRandom(1)), pool);
    assertThat(kept).containsExactly(pool.get(0), pool.get(2));
  }

  @Test
  void aNegativeOrNonNumericHeadroomIsRefusedNamingIt() {
    assertThat(load("-0.5").errors()).singleElement().asString()
        .contains("parameter 'headroom'").contains("-0.5");
    assertThat(load("lots").errors()).singleElement().asString()
        .contains("parameter 'headroom'").contains("lots");
  }
}
