package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/**
 * An engine may announce one engine hash as stored more than once on the same tier, and then
 * removes it once per announcement:
 *
 * <ul>
 *   <li>GPU: vLLM's block pool does not de-duplicate ({@code BlockHashToBlockMap}, "we don't
 *       check if there is already an identical block in the cache"): two requests that fill a
 *       block of the same tokens before either found the other's (a later prefill chunk, the
 *       same generated tokens) each cache a physical block under the same hash, each with a
 *       {@code BlockStored}, and each copy's eviction sends a {@code BlockRemoved}. The engine
 *       serves the prefix from the copy that is left.
 *   <li>Offload tier: the offloading connector's self-describing events re-announce the hashes
 *       of a shared prefix once per chunk that holds them, and fan each chunk's eviction out to
 *       the same hashes (offloading/events.py: consumers are expected to reference-count
 *       repeated store/remove announcements of the same hash).
 * </ul>
 *
 * <p>The events below are built as vLLM emits them (maps, as the newest vLLM sends them).
 */
class RepeatedStoresTest {
  private static final String EP = "10.0.0.1:8000";
  private static final int BS = 4;
  private static final int[] TOKENS = {1, 2, 3, 4, 5, 6, 7, 8};

  private interface Event {
    void pack(MessageBufferPacker p) throws IOException;
  }

  private static KvEventBatch batch(Event... events) throws Exception {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packMapHeader(2).packString("ts").packDouble(1.7e9).packString("events")
          .packArrayHeader(events.length);
      for (Event e : events) {
        e.pack(p);
      }
      return KvEventDecoder.decode(p.toByteArray());
    }
  }

  /** A store of {@code hashes} with {@code tokens}, a root (no parent), of KV-cache group 0. */
  private static Event stored(String medium, int[] tokens, long... hashes) {
    return storedBy(0, medium, tokens, hashes);
  }

  /** Group 0 full attention, any other group sliding-window attention of 8 tokens. */
  private static Event storedBy(int group, String medium, int[] tokens, long... hashes) {
    return storedBy(group, group == 0 ? "full_attention" : "sliding_window", medium, tokens,
        hashes);
  }

  private static Event storedBy(int group, String kind, String medium, int[] tokens,
      long... hashes) {
    return p -> {
      p.packMapHeader(11).packString("type").packString("BlockStored")
          .packString("block_hashes").packArrayHeader(hashes.length);
      for (long h : hashes) {
        p.packLong(h);
      }
      p.packString("parent_block_hash").packNil()
          .packString("token_ids").packArrayHeader(tokens.length);
      for (int t : tokens) {
        p.packInt(t);
      }
      p.packString("block_size").packInt(BS)
          .packString("lora_id").packNil()
          .packString("medium").packString(medium)
          .packString("lora_name").packNil()
          .packString("group_idx").packInt(group)
          .packString("kv_cache_spec_kind").packString(kind)
          .packString("kv_cache_spec_sliding_window");
      if (kind.equals("sliding_window")) {
        p.packInt(8);
      } else {
        p.packNil();
      }
    };
  }

  private static Event removed(String medium, long... hashes) {
    return removedBy(0, medium, hashes);
  }

  private static Event removedBy(int group, String medium, long... hashes) {
    return p -> {
      p.packMapHeader(4).packString("type").packString("BlockRemoved")
          .packString("block_hashes").packArrayHeader(hashes.length);
      for (long h : hashes) {
        p.packLong(h);
      }
      p.packString("medium").packString(medium).packString("group_idx").packInt(group);
    };
  }

  private static long[] keys(int[] tokens) {
    return BlockKeys.chain(BlockKeys.seed("", null, null), tokens, BS, 1 << 10);
  }

  @Test
  void aGpuBlockCachedTwiceStaysHeldUntilBothCopiesAreEvicted() throws Exception {
    KvBlockIndex index = KvBlockIndex.create();
    long[] k = keys(TOKENS);
    // two requests cached the same two blocks, each in blocks of its own
    index.apply(EP, batch(stored("GPU", TOKENS, 11, 12)));
    index.apply(EP, batch(stored("GPU", TOKENS, 11, 12)));

    // one request's copies are evicted: the other's still serve the prefix
    index.apply(EP, batch(removed("GPU", 12), removed("GPU", 11)));
    assertThat(index.tiers(EP, k[0])).containsExactly(Medium.GPU);
    assertThat(index.tiers(EP, k[1])).containsExactly(Medium.GPU);
    assertThat(index.prefixWeight(EP, k, 0)).isEqualTo(2.0);

    // and then the other's
    index.apply(EP, batch(removed("GPU", 12), removed("GPU", 11)));
    assertThat(index.tiers(EP, k[0])).isEmpty();
    assertThat(index.tiers(EP, k[1])).isEmpty();
    assertThat(index.blockCount(EP)).isZero();
    assertThat(index.metrics().unknownRemovals()).isZero();
  }

  @Test
  void aKvCacheGroupsCopiesAreCountedApartFromTheOtherGroups() throws Exception {
    KvBlockIndex index = KvBlockIndex.create();
    long[] k = keys(TOKENS);
    // a hybrid model: the full-attention group cached the blocks once, the window group twice
    index.apply(EP, batch(storedBy(0, "GPU", TOKENS, 11, 12),
        storedBy(1, "GPU", TOKENS, 11, 12)));
    index.apply(EP, batch(storedBy(1, "GPU", TOKENS, 11, 12)));

    index.apply(EP, batch(removedBy(0, "GPU", 11, 12), removedBy(1, "GPU", 11, 12)));
    assertThat(index.tiers(EP, k[0])).containsExactly(Medium.GPU);
    assertThat(index.prefixWeight(EP, k, 0)).isEqualTo(2.0);

    index.apply(EP, batch(removedBy(1, "GPU", 11, 12)));
    assertThat(index.tiers(EP, k[0])).isEmpty();
    assertThat(index.blockCount(EP)).isZero();
  }

  @Test
  void anOffloadedBlockAnnouncedByTwoChunksStaysUntilBothChunksAreEvicted() throws Exception {
    // the engine's block size is known (an offload store does not teach it)
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
    int[] other = {1, 2, 3, 4, 9, 9, 9, 9};
    long[] k = keys(TOKENS);
    long[] ko = keys(other);
    // two chunks of two blocks share their first block (hash 11); each announces it
    index.apply(EP, batch(stored("CPU", TOKENS, 11, 12), stored("CPU", other, 11, 22)));
    assertThat(index.tiers(EP, k[0])).containsExactly(Medium.CPU);

    // the first chunk is evicted: its eviction fans out to both of its hashes
    index.apply(EP, batch(removed("CPU", 11, 12)));
    assertThat(index.tiers(EP, k[1])).isEmpty();
    assertThat(index.tiers(EP, ko[0])).containsExactly(Medium.CPU);
    assertThat(index.tiers(EP, ko[1])).containsExactly(Medium.CPU);
    assertThat(index.prefixWeight(EP, ko, 0)).isEqualTo(2 * 0.8);

    index.apply(EP, batch(removed("CPU", 11, 22)));
    assertThat(index.tiers(EP, ko[0])).isEmpty();
    assertThat(index.blockCount(EP)).isZero();
  }

  @Test
  void eachFullAttentionGroupsOffloadedCopiesAreCountedOnTheirOwn() throws Exception {
    // A model with two full-attention KV-cache groups: vLLM's offloading connector offloads each
    // group's chunks under its own keys and describes them with the group's group_idx, under the
    // same engine hashes; each group's chunk eviction fans out to the hashes with that group_idx.
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
    int[] other = {1, 2, 3, 4, 9, 9, 9, 9};
    long[] k = keys(TOKENS);
    long[] ko = keys(other);
    // two chunks share their first block (hash 11), and both groups offload both chunks
    for (int group = 0; group < 2; group++) {
      index.apply(EP, batch(storedBy(group, "full_attention", "CPU", TOKENS, 11, 12),
          storedBy(group, "full_attention", "CPU", other, 11, 22)));
    }
    assertThat(index.prefixWeight(EP, ko, 0)).isEqualTo(2 * 0.8);

    // group 0 evicts its first chunk: its second chunk and group 1 still hold block 11
    index.apply(EP, batch(removedBy(0, "CPU", 11, 12)));
    assertThat(index.tiers(EP, k[1])).isEmpty();
    assertThat(index.tiers(EP, ko[0])).containsExactly(Medium.CPU);
    assertThat(index.prefixWeight(EP, ko, 0)).isEqualTo(2 * 0.8);

    // group 1 evicts its second chunk: its first chunk and group 0 still hold block 11, but the
    // tier now lacks group 1's copy of block 22, so a prefix stops there
    index.apply(EP, batch(removedBy(1, "CPU", 11, 22)));
    assertThat(index.tiers(EP, ko[0])).containsExactly(Medium.CPU);
    assertThat(index.tiers(EP, ko[1])).isEmpty();
    assertThat(index.prefixWeight(EP, ko, 0)).isEqualTo(0.8);

    // group 0 evicts its last copy of block 11: the engine can no longer load it
    index.apply(EP, batch(removedBy(0, "CPU", 11, 22)));
    assertThat(index.tiers(EP, ko[0])).isEmpty();
    assertThat(index.blockCount(EP)).isZero();
  }

  @Test
  void aRepeatedOffloadStoreDoesNotKeepTheGpuCopyAlive() throws Exception {
    KvBlockIndex index = KvBlockIndex.create();
    long[] k = keys(TOKENS);
    index.apply(EP, batch(stored("GPU", TOKENS, 11, 12)));
    index.apply(EP, batch(stored("CPU", TOKENS, 11, 12)));
    index.apply(EP, batch(stored("CPU", TOKENS, 11, 12)));

    // the one GPU copy is evicted: the tier's count is its own
    index.apply(EP, batch(removed("GPU", 11, 12)));
    assertThat(index.tiers(EP, k[0])).containsExactly(Medium.CPU);
    index.apply(EP, batch(removed("CPU", 11, 12)));
    assertThat(index.tiers(EP, k[0])).containsExactly(Medium.CPU);
    index.apply(EP, batch(removed("CPU", 11, 12)));
    assertThat(index.tiers(EP, k[0])).isEmpty();
    assertThat(index.blockCount(EP)).isZero();
  }

  @Test
  void clearingTheCacheForgetsTheCopiesCounted() throws Exception {
    KvBlockIndex index = KvBlockIndex.create();
    long[] k = keys(TOKENS);
    index.apply(EP, batch(stored("GPU", TOKENS, 11, 12)));
    index.apply(EP, batch(stored("GPU", TOKENS, 11, 12)));
    index.apply(EP, new KvEventBatch(1.7e9, java.util.List.of(KvEvent.AllBlocksCleared.INSTANCE),
        -1));

    // stored once after the clear, removed once: gone
    index.apply(EP, batch(stored("GPU", TOKENS, 11, 12)));
    index.apply(EP, batch(removed("GPU", 11, 12)));
    assertThat(index.tiers(EP, k[0])).isEmpty();
    assertThat(index.blockCount(EP)).isZero();
  }
}
