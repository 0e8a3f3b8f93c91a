package io.epp4j.kvevents;

import java.util.Arrays;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * One change to a replica's KV cache, as vLLM publishes it. Engine block hashes are opaque
 * 64-bit values (vLLM's unsigned integers reinterpreted as {@code long}, or 32-byte binary
 * hashes folded to 64 bits); the index never tries to recompute them. Public because in-process
 * producers (the simulator, tests, a relay) feed {@link KvBlockIndex#apply} with them.
 */
public sealed interface KvEvent {

  /**
   * Blocks that became cached. {@code tokenIds} holds the tokens of every stored block in order,
   * {@code blockSize} per block.
   *
   * @param blockHashes engine hashes of the stored blocks, parent first
   * @param hasParent   whether the first block continues an earlier block
   * @param parentHash  engine hash of that earlier block (meaningful only when {@code hasParent})
   * @param tokenIds    the tokens of the stored blocks, {@code blockHashes.length × blockSize}
   * @param blockSize   tokens per block
   * @param loraId      vLLM's LoRA id, or -1 for the base model
   * @param medium      where the blocks live
   * @param loraName    the LoRA adapter name, or {@code null}
   * @param cacheSalt   the cache salt found in the first block's extra keys (root blocks only),
   *                    or {@code null}
   * @param group       vLLM's {@code group_idx}: the KV-cache group that stored the blocks (0 when
   *                    absent). A hybrid model (full and sliding-window attention, e.g. gpt-oss or
   *                    Gemma 3) caches each block once per group under the same engine hash, and
   *                    each group evicts its copy on its own: a block stays held while any group
   *                    holds it
   * @param slidingWindow the window in tokens of a sliding-window group (vLLM's
   *                    {@code kv_cache_spec_sliding_window} of a store whose
   *                    {@code kv_cache_spec_kind} is {@code sliding_window} or
   *                    {@code sliding_window_mla}), or 0 for any other group or an engine that
   *                    does not say. vLLM serves a prefix hit only where such a group holds the
   *                    blocks of the window before the hit's end
   * @param recurrentState whether the group keeps a recurrent state rather than keys and values
   *                    (vLLM's {@code kv_cache_spec_kind} {@code mamba}: Mamba and linear-attention
   *                    layers). Such a group holds the state at the end of each block it names, and
   *                    vLLM serves a prefix hit only up to the end of a block whose state it holds.
   *                    Its blocks may be named by hash alone ({@code tokenIds} empty): vLLM leaves
   *                    the blocks it keeps no state for out of {@code blockHashes} without saying
   *                    which they were, and the hashes are those the other groups stored with their
   *                    tokens
   */
  record BlockStored(long[] blockHashes, boolean hasParent, long parentHash, int[] tokenIds,
      int blockSize, int loraId, Medium medium, @Nullable String loraName,
      @Nullable String cacheSalt, int group, int slidingWindow, boolean recurrentState)
      implements KvEvent {

    /** A store of KV-cache group {@code group}, which keeps keys and values. */
    public BlockStored(long[] blockHashes, boolean hasParent, long parentHash, int[] tokenIds,
        int blockSize, int loraId, Medium medium, @Nullable String loraName,
        @Nullable String cacheSalt, int group, int slidingWindow) {
      this(blockHashes, hasParent, parentHash, tokenIds, blockSize, loraId, medium, loraName,
          cacheSalt, group, slidingWindow, false);
    }

    /** A store of KV-cache group {@code group}, which is not a sliding-window group. */
    public BlockStored(long[] blockHashes, boolean hasParent, long parentHash, int[] tokenIds,
        int blockSize, int loraId, Medium medium, @Nullable String loraName,
        @Nullable String cacheSalt, int group) {
      this(blockHashes, hasParent, parentHash, tokenIds, blockSize, loraId, medium, loraName,
          cacheSalt, group, 0);
    }

    /** A store of KV-cache group 0 (a model with one group, or an engine that names none). */
    public BlockStored(long[] blockHashes, boolean hasParent, long parentHash, int[] tokenIds,
        int blockSize, int loraId, Medium medium, @Nullable String loraName,
        @Nullable String cacheSalt) {
      this(blockHashes, hasParent, parentHash, tokenIds, blockSize, loraId, medium, loraName,
          cacheSalt, 0);
    }

    public BlockStored {
      Objects.requireNonNull(blockHashes, "blockHashes");
      Objects.requireNonNull(tokenIds, "tokenIds");
      Objects.requireNonNull(medium, "medium");
      if (blockSize < 1) {
        throw new IllegalArgumentException("blockSize must be >= 1, got " + blockSize);
      }
      if ((long) blockHashes.length * blockSize != tokenIds.length
          && !(recurrentState && tokenIds.length == 0)) {
        throw new IllegalArgumentException("expected " + blockHashes.length + " blocks of "
            + blockSize + " tokens, got " + tokenIds.length + " tokens");
      }
      if (group < 0) {
        throw new IllegalArgumentException("group must be >= 0, got " + group);
      }
      if (slidingWindow < 0) {
        throw new IllegalArgumentException("slidingWindow must be >= 0, got " + slidingWindow);
      }
      if (recurrentState && slidingWindow != 0) {
        throw new IllegalArgumentException("a recurrentState group has no slidingWindow, got "
            + slidingWindow);
      }
    }

    /** A GPU store of a chain of blocks without LoRA or salt (convenient for producers). */
    public static BlockStored of(long[] blockHashes, @Nullable Long parentHash, int[] tokenIds,
        int blockSize) {
      return new BlockStored(blockHashes, parentHash != null,
          parentHash == null ? 0 : parentHash, tokenIds, blockSize, -1, Medium.GPU, null, null);
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof BlockStored b && Arrays.equals(blockHashes, b.blockHashes)
          && hasParent == b.hasParent && (!hasParent || parentHash == b.parentHash)
          && Arrays.equals(tokenIds, b.tokenIds) && blockSize == b.blockSize
          && loraId == b.loraId && medium == b.medium && Objects.equals(loraName, b.loraName)
          && Objects.equals(cacheSalt, b.cacheSalt) && group == b.group
          && slidingWindow == b.slidingWindow && recurrentState == b.recurrentState;
    }

    @Override
    public int hashCode() {
      return Arrays.hashCode(blockHashes) * 31 + Arrays.hashCode(tokenIds);
    }

    @Override
    public String toString() {
      return "BlockStored{blocks=" + blockHashes.length + ", parent="
          + (hasParent ? Long.toUnsignedString(parentHash) : "none") + ", blockSize=" + blockSize
          + ", medium=" + medium + ", lora=" + loraName + (group != 0 ? ", group=" + group : "")
          + (slidingWindow != 0 ? ", slidingWindow=" + slidingWindow : "")
          + (recurrentState ? ", recurrentState" : "") + "}";
    }
  }

  /**
   * Blocks that left the cache (evicted or reallocated).
   *
   * @param blockHashes engine hashes of the removed blocks
   * @param medium      the tier they left
   * @param group       vLLM's {@code group_idx}: the KV-cache group whose copies left (0 when
   *                    absent); the blocks stay held while another group holds them
   */
  record BlockRemoved(long[] blockHashes, Medium medium, int group) implements KvEvent {
    public BlockRemoved {
      Objects.requireNonNull(blockHashes, "blockHashes");
      Objects.requireNonNull(medium, "medium");
      if (group < 0) {
        throw new IllegalArgumentException("group must be >= 0, got " + group);
      }
    }

    /** A removal from KV-cache group 0 (a model with one group, or an engine that names none). */
    public BlockRemoved(long[] blockHashes, Medium medium) {
      this(blockHashes, medium, 0);
    }

    /** A GPU removal. */
    public static BlockRemoved of(long... blockHashes) {
      return new BlockRemoved(blockHashes, Medium.GPU);
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof BlockRemoved b && Arrays.equals(blockHashes, b.blockHashes)
          && medium == b.medium && group == b.group;
    }

    @Override
    public int hashCode() {
      return Arrays.hashCode(blockHashes) * 31 + medium.hashCode();
    }

    @Override
    public String toString() {
      return "BlockRemoved{blocks=" + blockHashes.length + ", medium=" + medium
          + (group != 0 ? ", group=" + group : "") + "}";
    }
  }

  /** The replica dropped its whole prefix cache (e.g. {@code reset_prefix_cache}). */
  record AllBlocksCleared() implements KvEvent {
    /** The single instance. */
    public static final AllBlocksCleared INSTANCE = new AllBlocksCleared();
  }
}
