package io.epp4j.kvevents;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * Counters of the KV-event pipeline: what was applied, what was lost and how far behind the
 * engines the index is. Thread-safe; all values are totals since creation except
 * {@link #lagMillis()} (the latest batch) and the rates of {@link #sample(long)}.
 */
public final class KvEventMetrics {
  final LongAdder batches = new LongAdder();
  final LongAdder events = new LongAdder();
  final LongAdder blocksStored = new LongAdder();
  final LongAdder blocksRemoved = new LongAdder();
  final LongAdder orphanBlocks = new LongAdder();
  final LongAdder unknownRemovals = new LongAdder();
  final LongAdder reusedHashes = new LongAdder();
  final LongAdder decodeErrors = new LongAdder();
  final LongAdder gaps = new LongAdder();
  final LongAdder missedBatches = new LongAdder();
  final LongAdder replays = new LongAdder();
  final LongAdder replayedBatches = new LongAdder();
  final LongAdder replayFailures = new LongAdder();
  final LongAdder resyncs = new LongAdder();
  final LongAdder restarts = new LongAdder();
  final LongAdder duplicates = new LongAdder();
  final LongAdder overflows = new LongAdder();
  final LongAdder droppedMambaStates = new LongAdder();
  final LongAdder speculativeBlocks = new LongAdder();
  final LongAdder unknownEndpointMessages = new LongAdder();
  final LongAdder blockSizeMismatches = new LongAdder();
  final LongAdder otherSizeBlocks = new LongAdder();
  final LongAdder untokenizedRequests = new LongAdder();
  final LongAdder wrongRankBatches = new LongAdder();
  final LongAdder foreignTopicMessages = new LongAdder();
  final AtomicLong lagMillis = new AtomicLong();
  private final Object sampleLock = new Object();
  private long lastSampleNanos = Long.MIN_VALUE;
  private long lastEvents;
  private long lastBlocks;

  /** Batches applied. */
  public long batches() { return batches.sum(); }
  /** Events applied. */
  public long events() { return events.sum(); }
  /** Blocks added to the index by {@code BlockStored}. */
  public long blocksStored() { return blocksStored.sum(); }
  /** Blocks taken out of the index by {@code BlockRemoved}. */
  public long blocksRemoved() { return blocksRemoved.sum(); }
  /** Stored blocks dropped because their parent was unknown (history missed). */
  public long orphanBlocks() { return orphanBlocks.sum(); }
  /** Removed hashes the index did not know. */
  public long unknownRemovals() { return unknownRemovals.sum(); }
  /**
   * Stored blocks whose engine hash already named other content on that endpoint (a malformed
   * event, a block naming itself as parent, a hash collision); the content it named before is
   * dropped from the index.
   */
  public long reusedHashes() { return reusedHashes.sum(); }
  /**
   * Messages dropped: malformed frames or payloads, and messages whose handling failed (see
   * {@link KvEventSubscriber}).
   */
  public long decodeErrors() { return decodeErrors.sum(); }
  /** Sequence gaps detected. */
  public long gaps() { return gaps.sum(); }
  /** Batches missing in those gaps. */
  public long missedBatches() { return missedBatches.sum(); }
  /** Replay requests sent. */
  public long replays() { return replays.sum(); }
  /** Batches recovered through replay. */
  public long replayedBatches() { return replayedBatches.sum(); }
  /**
   * Replays that did not close their gap from its start (then the endpoint was resynchronised,
   * and what the engine still buffered after the gap's start applied).
   */
  public long replayFailures() { return replayFailures.sum(); }
  /**
   * Times an endpoint's entries were dropped to start over (a gap not filled, a publisher that
   * disconnected or restarted). Counted once the drop is done, so an index read after the count
   * moved no longer holds them; a resync that found the endpoint holding no block is not counted.
   */
  public long resyncs() { return resyncs.sum(); }
  /** Publisher restarts detected (sequence back to 0). */
  public long restarts() { return restarts.sum(); }
  /** Batches received twice and ignored. */
  public long duplicates() { return duplicates.sum(); }
  /** Times an endpoint exceeded its block budget and was cleared. */
  public long overflows() { return overflows.sum(); }
  /**
   * Mamba states dropped unmatched: a Mamba group's store named them under hashes no block of the
   * endpoint was stored under, and more than 16,384 were waiting for those blocks.
   */
  public long droppedMambaStates() { return droppedMambaStates.sum(); }
  /** Speculative block entries recorded after routing. */
  public long speculativeBlocks() { return speculativeBlocks.sum(); }
  /**
   * Messages dropped because their endpoint is not in the pool: in central mode a topic naming
   * no pool member, in either mode batches that were still queued when their endpoint left.
   */
  public long unknownEndpointMessages() { return unknownEndpointMessages.sum(); }
  /**
   * Times an endpoint's engine turned out to use another block size than the index's configured
   * one ({@code blockSizeTokens}), learned from its events or metrics; counted once per change.
   * The engine's size is used for that endpoint from then on, but lookups made before it was
   * known, and components configured with the same wrong size, use the wrong blocks.
   */
  public long blockSizeMismatches() { return blockSizeMismatches.sum(); }
  /**
   * Stored blocks not indexed because a KV-cache group of a hybrid model published them at a
   * multiple of the block size the endpoint's requests are keyed with (the smallest size its
   * events carry, vLLM's {@code hash_block_size}).
   */
  public long otherSizeBlocks() { return otherSizeBlocks.sum(); }
  /**
   * Requests a precise scorer of this index scored as uncached because its tokenizer failed on
   * them, among them chats with their own {@code chat_template}, which the in-process tokenizers
   * refuse (they render only the model's template).
   */
  public long untokenizedRequests() { return untokenizedRequests.sum(); }
  /**
   * Batches dropped because the {@code data_parallel_rank} they carry is not the rank of the
   * endpoint whose stream delivered them (data parallelism with ports that do not match the
   * engine's ranks); see {@link KvEventSubscriber.Builder#dataParallel}.
   */
  public long wrongRankBatches() { return wrongRankBatches.sum(); }
  /**
   * Messages dropped because their topic does not start with the subscriber's topic filter
   * ({@link KvEventSubscriber.Builder#topicFilter}): an engine that publishes under another topic
   * than the filter expects, such as vLLM's default empty topic when {@code --kv-events-config}
   * sets no {@code topic}.
   */
  public long foreignTopicMessages() { return foreignTopicMessages.sum(); }
  /** Wall-clock delay between the engine stamping the latest batch and its application. */
  public long lagMillis() { return lagMillis.get(); }

  /** Event and block rates since the previous sample. */
  public record Rates(double eventsPerSecond, double blocksPerSecond) {}

  /**
   * Rates since the previous call ({@code nowNanos} on any monotonic clock); the first call
   * returns zeros. Meant for a periodic metrics exporter.
   */
  public Rates sample(long nowNanos) {
    long ev = events();
    long bl = blocksStored() + blocksRemoved();
    synchronized (sampleLock) {
      Rates r;
      if (lastSampleNanos == Long.MIN_VALUE || nowNanos <= lastSampleNanos) {
        r = new Rates(0, 0);
      } else {
        double secs = (nowNanos - lastSampleNanos) / 1e9;
        r = new Rates((ev - lastEvents) / secs, (bl - lastBlocks) / secs);
      }
      lastSampleNanos = nowNanos;
      lastEvents = ev;
      lastBlocks = bl;
      return r;
    }
  }

  @Override
  public String toString() {
    return "KvEventMetrics{batches=" + batches() + ", events=" + events() + ", stored="
        + blocksStored() + ", removed=" + blocksRemoved() + ", orphans=" + orphanBlocks()
        + ", decodeErrors=" + decodeErrors() + ", gaps=" + gaps() + ", replays=" + replays()
        + ", replayFailures=" + replayFailures() + ", resyncs=" + resyncs() + ", restarts="
        + restarts() + ", unknownEndpointMessages=" + unknownEndpointMessages()
        + ", blockSizeMismatches=" + blockSizeMismatches()
        + ", untokenizedRequests=" + untokenizedRequests()
        + ", wrongRankBatches=" + wrongRankBatches()
        + ", foreignTopicMessages=" + foreignTopicMessages()
        + ", lagMillis=" + lagMillis() + "}";
  }
}
