package io.epp4j.sim;

import java.util.Arrays;
import org.jspecify.annotations.Nullable;

/**
 * One KV-cache event of a simulated replica, shaped like vLLM's {@code kv_events} (the payload a
 * precise-mode subscriber decodes from ZMQ): blocks stored with their parent hash and token IDs,
 * blocks removed when reallocated, or the whole cache cleared. Hashes are the simulator's own
 * 64-bit chained block hashes; they are stable for a given token sequence, as vLLM's are with a
 * fixed {@code PYTHONHASHSEED}.
 */
public sealed interface KvEvent {

  /**
   * Full blocks that became cached, in chain order.
   *
   * @param blockHashes     hashes of the stored blocks, head first
   * @param parentBlockHash hash of the block before the first stored one, or {@code null} when the
   *                        first stored block is the sequence's first block
   * @param tokenIds        the tokens of all stored blocks, {@code blockHashes.length × blockSize}
   * @param blockSize       tokens per block
   */
  record BlockStored(long[] blockHashes, @Nullable Long parentBlockHash, int[] tokenIds,
      int blockSize) implements KvEvent {
    @Override
    public String toString() {
      return "BlockStored{blocks=" + Arrays.toString(blockHashes) + ", parent=" + parentBlockHash
          + ", tokens=" + tokenIds.length + ", blockSize=" + blockSize + "}";
    }
  }

  /** Cached blocks that were evicted (reallocated for other tokens) and can no longer be hit. */
  record BlockRemoved(long[] blockHashes) implements KvEvent {
    @Override
    public String toString() {
      return "BlockRemoved{blocks=" + Arrays.toString(blockHashes) + "}";
    }
  }

  /** Every cached block was dropped (cache reset). */
  record AllBlocksCleared() implements KvEvent {}
}
