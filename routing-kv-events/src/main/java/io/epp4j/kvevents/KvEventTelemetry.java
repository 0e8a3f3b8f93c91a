package io.epp4j.kvevents;

import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.metrics.Meter;
import java.util.ArrayList;
import java.util.List;
import java.util.function.ToLongFunction;

/**
 * Exports a {@link KvBlockIndex}'s {@link KvEventMetrics} through the OpenTelemetry API as
 * observable counters ({@code epp4j.kv_events.*}) and a lag gauge, once per index. Each precise
 * scorer takes a lease with the router's {@code OpenTelemetry}; the first lease of an index
 * starts the export, and closing the last one stops the callbacks. Scorers share an index (a
 * {@link KvBlockIndex} service), and a reconfiguration builds the new scorer while the old one
 * still holds its lease: the export goes on through the new one's when the old one is retired.
 * Package-private: users read the same totals from {@link KvBlockIndex#metrics()}.
 */
final class KvEventTelemetry implements AutoCloseable {
  static final String INSTRUMENTATION = "io.epp4j.kv-events";

  private final KvBlockIndex index;
  private final java.util.concurrent.atomic.AtomicBoolean closed =
      new java.util.concurrent.atomic.AtomicBoolean();

  private KvEventTelemetry(KvBlockIndex index) {
    this.index = index;
  }

  /**
   * A lease on the export of the index's metrics, which starts it when no other lease of the
   * index is open (several scorers may share one index).
   */
  static KvEventTelemetry register(KvBlockIndex index, OpenTelemetry otel) {
    synchronized (index.telemetryRegistered) {
      if (index.telemetryLeases == 0) {
        index.telemetryInstruments = instruments(index, otel);
        index.telemetryRegistered.set(true);
      }
      index.telemetryLeases++;
    }
    return new KvEventTelemetry(index);
  }

  private static List<AutoCloseable> instruments(KvBlockIndex index, OpenTelemetry otel) {
    List<AutoCloseable> t = new ArrayList<>();
    Meter meter = otel.getMeter(INSTRUMENTATION);
    KvEventMetrics m = index.metrics();
    counter(t, meter, "batches", "{batch}", "KV event batches applied", KvEventMetrics::batches, m);
    counter(t, meter, "events", "{event}", "KV events applied", KvEventMetrics::events, m);
    counter(t, meter, "blocks_stored", "{block}", "blocks reported stored", KvEventMetrics::blocksStored, m);
    counter(t, meter, "blocks_removed", "{block}", "blocks reported removed", KvEventMetrics::blocksRemoved, m);
    counter(t, meter, "decode_errors", "{payload}", "messages dropped as malformed or failing", KvEventMetrics::decodeErrors, m);
    counter(t, meter, "gaps", "{gap}", "sequence gaps detected", KvEventMetrics::gaps, m);
    counter(t, meter, "replays", "{replay}", "gaps repaired through the replay socket", KvEventMetrics::replays, m);
    counter(t, meter, "resyncs", "{resync}", "endpoints whose entries were dropped to resynchronise", KvEventMetrics::resyncs, m);
    counter(t, meter, "restarts", "{restart}", "publisher restarts detected", KvEventMetrics::restarts, m);
    counter(t, meter, "orphan_blocks", "{block}", "stored blocks whose parent was unknown", KvEventMetrics::orphanBlocks, m);
    counter(t, meter, "reused_hashes", "{block}", "stored blocks whose engine hash already named other content", KvEventMetrics::reusedHashes, m);
    counter(t, meter, "overflows", "{overflow}", "endpoints cleared for exceeding their block budget", KvEventMetrics::overflows, m);
    counter(t, meter, "dropped_mamba_states", "{state}", "Mamba states dropped for naming blocks never stored", KvEventMetrics::droppedMambaStates, m);
    counter(t, meter, "unknown_endpoint_messages", "{message}", "messages dropped because their endpoint is not in the pool", KvEventMetrics::unknownEndpointMessages, m);
    counter(t, meter, "block_size_mismatches", "{change}", "endpoints found using another block size than the configured one", KvEventMetrics::blockSizeMismatches, m);
    counter(t, meter, "wrong_rank_batches", "{batch}", "batches dropped for naming another data-parallel rank than their endpoint's", KvEventMetrics::wrongRankBatches, m);
    counter(t, meter, "untokenized_requests", "{request}", "requests scored as uncached because the precise scorer's tokenizer failed on them", KvEventMetrics::untokenizedRequests, m);
    counter(t, meter, "foreign_topic_messages", "{message}", "messages dropped because their topic does not start with the topic filter", KvEventMetrics::foreignTopicMessages, m);
    t.add(meter.gaugeBuilder("epp4j.kv_events.lag")
        .setDescription("Age of the newest applied batch when it was applied")
        .setUnit("ms").ofLongs()
        .buildWithCallback(r -> r.record(m.lagMillis())));
    return t;
  }

  private static void counter(List<AutoCloseable> instruments, Meter meter, String name, String unit, String description,
      ToLongFunction<KvEventMetrics> read, KvEventMetrics m) {
    instruments.add(meter.counterBuilder("epp4j.kv_events." + name)
        .setDescription(description).setUnit(unit)
        .buildWithCallback(r -> r.record(read.applyAsLong(m))));
  }

  /** Ends this lease; the export stops with the index's last one. Idempotent. */
  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    List<AutoCloseable> instruments;
    synchronized (index.telemetryRegistered) {
      if (--index.telemetryLeases > 0) {
        return;
      }
      instruments = index.telemetryInstruments;
      index.telemetryInstruments = null;
      index.telemetryRegistered.set(false);
    }
    if (instruments != null) {
      for (AutoCloseable i : instruments) {
        try {
          i.close();
        } catch (Exception ignored) {
          // closing an observable callback cannot meaningfully fail
        }
      }
    }
  }
}
