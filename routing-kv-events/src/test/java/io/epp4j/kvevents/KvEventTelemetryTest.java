package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.core.Router;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.util.Collection;
import java.util.List;
import org.junit.jupiter.api.Test;

class KvEventTelemetryTest {

  static long sum(Collection<MetricData> metrics, String name) {
    return metrics.stream().filter(m -> m.getName().equals(name)).findFirst()
        .map(m -> m.getLongSumData().getPoints().iterator().next().getValue())
        .orElseThrow(() -> new AssertionError("no metric " + name));
  }

  static int leases(KvBlockIndex index) {
    synchronized (index.telemetryRegistered) {
      return index.telemetryLeases;
    }
  }

  @Test
  void indexMetricsAreExportedThroughTheRoutersOpenTelemetryOnce() {
    InMemoryMetricReader reader = InMemoryMetricReader.create();
    OpenTelemetrySdk sdk = OpenTelemetrySdk.builder()
        .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(reader).build()).build();
    KvBlockIndex index = KvBlockIndex.create();
    int[] tokens = new int[32];
    for (int i = 0; i < tokens.length; i++) {
      tokens[i] = 100 + i;
    }
    try (Router router = Router.builder()
        .endpoints(List.of(Endpoint.parse("10.0.0.1:8000")))
        .openTelemetry(sdk)
        .service(KvBlockIndex.class, index)
        .configYaml(KvEventsPresets.yaml(KvEventsPresets.EPP_PRECISE_HYBRID), "hybrid")
        .build()) {
      index.apply("10.0.0.1:8000", KvEventBatch.of(0.0, List.of(
          KvEvent.BlockStored.of(new long[] {11, 12}, null, tokens, 16),
          KvEvent.BlockRemoved.of(12))));
      Collection<MetricData> metrics = reader.collectAllMetrics();
      assertThat(sum(metrics, "epp4j.kv_events.blocks_stored")).isEqualTo(2);
      assertThat(sum(metrics, "epp4j.kv_events.blocks_removed")).isEqualTo(1);
      assertThat(sum(metrics, "epp4j.kv_events.batches")).isEqualTo(1);
      assertThat(sum(metrics, "epp4j.kv_events.unknown_endpoint_messages")).isZero();
      assertThat(metrics.stream().filter(m -> m.getName().equals("epp4j.kv_events.blocks_stored")))
          .as("one registration per index").hasSize(1);
      assertThat(index.telemetryRegistered.get()).isTrue();
    }
    assertThat(index.telemetryRegistered.get()).as("closing the router ends the export").isFalse();
  }

  /**
   * A reconfiguration with a shared index builds the new scorer while the old one still exports
   * the index's metrics, so the new one found them exported and registered nothing; closing the
   * old one then ended the export for good.
   */
  @Test
  void theExportOutlivesAReconfigurationThatRetiresTheScorerWhichStartedIt() {
    InMemoryMetricReader reader = InMemoryMetricReader.create();
    OpenTelemetrySdk sdk = OpenTelemetrySdk.builder()
        .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(reader).build()).build();
    KvBlockIndex index = KvBlockIndex.create();
    int[] tokens = new int[32];
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters: {maxPromptBlocks: %d}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - {pluginRef: precise-prefix-cache-scorer}
          - {pluginRef: max-score-picker}
        """;
    try (Router router = Router.builder()
        .endpoints(List.of(Endpoint.parse("10.0.0.1:8000")))
        .openTelemetry(sdk)
        .service(KvBlockIndex.class, index)
        .retiredPluginCloseDelay(java.time.Duration.ZERO)
        .configYaml(yaml.formatted(100), "first")
        .build()) {
      assertThat(router.reconfigure(yaml.formatted(200), "second").errors()).isEmpty();
      // the retired scorer is closed on a timer thread, at once with no delay: wait until it has
      // given its lease back (the new scorer's alone is left), so the export is read after it
      long deadline = System.nanoTime() + 10_000_000_000L;
      while (leases(index) != 1) {
        assertThat(System.nanoTime() < deadline).as("the retired scorer was closed").isTrue();
        Thread.onSpinWait();
      }
      index.apply("10.0.0.1:8000", KvEventBatch.of(0.0, List.of(
          KvEvent.BlockStored.of(new long[] {11, 12}, null, tokens, 16))));
      assertThat(sum(reader.collectAllMetrics(), "epp4j.kv_events.blocks_stored"))
          .isEqualTo(2);
    }
    assertThat(index.telemetryRegistered.get()).as("closing the router ends the export").isFalse();
  }
}
