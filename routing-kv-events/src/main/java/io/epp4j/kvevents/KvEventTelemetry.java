package io.epp4j.kvevents;

import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.metrics.Meter;
import java.util.ArrayList;
import java.util.List;
import java.util.function.ToLongFunction;

/**
 * Exports a {@link KvBlockIndex}'s {@link KvEventMetrics} through the OpenTelemetry API as
 * observable counters ({@code epp4j.kv_events.*}) and a lag gauge. The precise scorers register
 * it once per index with the router's {@code OpenTelemetry}; closing the registration stops the
 * callbacks. Package-private: users read the same totals from {@link KvBlockIndex#metrics()}.
 */
final class KvEventTelemetry implements AutoCloseable {
  static final String INSTRUMENTATION = "io.epp4j.kv-events";

  private final List<AutoCloseable> instruments = new ArrayList<>();
  private final KvBlockIndex index;

  private KvEventTelemetry(KvBlockIndex index) {
    this.index = index;
  }

  /**
   * Registers the index's metrics, or returns {@code null} when this index is already
   * registered (several scorers may share one index).
   */
  static @org.jspecify.annotations.Nullable KvEventTelemetry register(KvBlockIndex index,
      OpenTelemetry otel) {
    if (!index.telemetryRegistered.compareAndSet(false, true)) {
      return null;
    }
    KvEventTelemetry t = new KvEventTelemetry(index);
    Meter meter = otel.getMeter(INSTRUMENTATION);
    KvEventMetrics m = index.metrics();
    t.counter(meter, "batches", "{batch}", "KV event batches applied", KvEventMetrics::batches, m);
    t.counter(meter, "events", "{event}", "KV events applied", KvEventMetrics::events, m);
    t.counter(meter, "blocks_stored", "{block}", "blocks reported stored", KvEventMetrics::blocksStored, m);
    t.counter(meter, "blocks_removed", "{block}", "blocks reported removed", KvEventMetrics::blocksRemoved, m);
    t.counter(meter, "decode_errors", "{payload}", "messages dropped as malformed or failing", KvEventMetrics::decodeErrors, m);
    t.counter(meter, "gaps", "{gap}", "sequence gaps detected", KvEventMetrics::gaps, m);
    t.counter(meter, "replays", "{replay}", "gaps repaired through the replay socket", KvEventMetrics::replays, m);
    t.counter(meter, "resyncs", "{resync}", "endpoints whose entries were dropped to resynchronise", KvEventMetrics::resyncs, m);
    t.counter(meter, "restarts", "{restart}", "publisher restarts detected", KvEventMetrics::restarts, m);
    t.counter(meter, "orphan_blocks", "{block}", "stored blocks whose parent was unknown", KvEventMetrics::orphanBlocks, m);
    t.counter(meter, "reused_hashes", "{block}", "stored blocks whose engine hash already named other content", KvEventMetrics::reusedHashes, m);
    t.counter(meter, "overflows", "{overflow}", "endpoints cleared for exceeding their block budget", KvEventMetrics::overflows, m);
    t.counter(meter, "unknown_endpoint_messages", "{message}", "messages dropped because their endpoint is not in the pool", KvEventMetrics::unknownEndpointMessages, m);
    t.counter(meter, "block_size_mismatches", "{change}", "endpoints found using another block size than the configured one", KvEventMetrics::blockSizeMismatches, m);
    t.counter(meter, "wrong_rank_batches", "{batch}", "batches dropped for naming another data-parallel rank than their endpoint's", KvEventMetrics::wrongRankBatches, m);
    t.instruments.add(meter.gaugeBuilder("epp4j.kv_events.lag")
        .setDescription("Age of the newest applied batch when it was applied")
        .setUnit("ms").ofLongs()
        .buildWithCallback(r -> r.record(m.lagMillis())));
    return t;
  }

  private void counter(Meter meter, String name, String unit, String description,
      ToLongFunction<KvEventMetrics> read, KvEventMetrics m) {
    instruments.add(meter.counterBuilder("epp4j.kv_events." + name)
        .setDescription(description).setUnit(unit)
        .buildWithCallback(r -> r.record(read.applyAsLong(m))));
  }

  @Override
  public void close() {
    for (AutoCloseable i : instruments) {
      try {
        i.close();
      } catch (Exception ignored) {
        // closing an observable callback cannot meaningfully fail
      }
    }
    index.telemetryRegistered.set(false);
  }
}
