package io.epp4j.kvevents;

import java.util.List;
import java.util.Objects;

/**
 * The events of one engine step, as one ZeroMQ message carries them.
 *
 * @param timestampSeconds the engine's wall-clock time of the step (Unix seconds)
 * @param events           the events in the order the engine produced them
 * @param dataParallelRank the data-parallel rank that produced them, or -1 when absent (the
 *                         decoder refuses a negative rank as malformed)
 */
public record KvEventBatch(double timestampSeconds, List<KvEvent> events, int dataParallelRank) {
  public KvEventBatch {
    events = List.copyOf(Objects.requireNonNull(events, "events"));
  }

  /** A batch without a data-parallel rank. */
  public static KvEventBatch of(double timestampSeconds, List<KvEvent> events) {
    return new KvEventBatch(timestampSeconds, events, -1);
  }
}
