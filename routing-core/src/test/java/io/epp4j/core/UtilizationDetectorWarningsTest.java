package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/**
 * utilization-detector values that upstream accepts but that cannot be what the file means: a
 * headroom above 1 (a percentage written where a fraction belongs: 20 is 2000 %, and the filter
 * then keeps endpoints far past the queue threshold and never drops one for its KV usage), and a
 * staleness limit below the scraper's interval (every endpoint is stale between scrapes, so the
 * pool reads as saturated). Both load, as upstream loads them, with a warning naming the field.
 */
class UtilizationDetectorWarningsTest {
  final ConfigLoader loader = new ConfigLoader(PluginRegistry.fromServiceLoader());

  private Result<RouterConfig> load(String parameters) {
    return loader.load("""
        plugins:
        - name: detector
          type: utilization-detector
          parameters: {%s}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: detector
          - pluginRef: max-score-picker
        """.formatted(parameters), "d.yaml");
  }

  @Test
  void aHeadroomAbove1LoadsWithAWarningSayingWhatTheFilterThenDoes() {
    Result<RouterConfig> r = load("queueDepthThreshold: 5, headroom: 20");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().warnings()).singleElement().asString().isEqualTo(
        "d.yaml: plugins[0] (name 'detector', type 'utilization-detector'): parameter 'headroom'"
            + " is 20, a fraction of the thresholds (0.2 for 20 %): the filter keeps an endpoint"
            + " until 105 requests wait and never drops one for its KV cache usage (limit 16.8,"
            + " usage is at most 1); write a percentage as a fraction");
  }

  @Test
  void aHeadroomUpTo1LoadsWithoutAWarning() {
    for (String h : new String[] {"0", "0.2", "1"}) {
      Result<RouterConfig> r = load("headroom: " + h);
      assertThat(r.errors()).isEmpty();
      assertThat(r.value().warnings()).as("headroom %s", h).isEmpty();
    }
  }

  @Test
  void aStalenessBelowTheScrapeIntervalLoadsWithAWarning() {
    Result<RouterConfig> r = load("metricsStalenessThreshold: 20ms");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().warnings()).singleElement().asString()
        .startsWith("d.yaml: plugins[0] (name 'detector', type 'utilization-detector'): parameter"
            + " 'metricsStalenessThreshold' is 20 ms, shorter than the scraper's default interval"
            + " of 50 ms")
        .contains("count as saturated");
    assertThat(load("metricsStalenessThreshold: 50ms").value().warnings()).isEmpty();
  }

  /** The detector's fields written inline in the former section warn there too, by field. */
  @Test
  void theInlineSectionWarnsAboutItsStalenessNamingTheSection() {
    Result<RouterConfig> r = loader.load("""
        saturationDetector:
          metricsStalenessThreshold: 1ms
        plugins:
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: max-score-picker
        """, "d.yaml");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().warnings()).singleElement().asString()
        .startsWith("d.yaml: saturationDetector: field 'metricsStalenessThreshold' is 1 ms,");
  }
}
