package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/**
 * A hybrid model (full and sliding-window attention layers: gpt-oss, Gemma 3) has one KV-cache
 * group per kind of layer. vLLM caches every full block once per group, under the same engine
 * hash, and publishes a {@code BlockStored} per group with its {@code group_idx}; each group
 * evicts its own copy, with a {@code BlockRemoved} that names the group. The sliding-window
 * group frees the blocks that fall out of its window at once, so its copies are evicted long
 * before the full-attention group's, which the engine still reuses for a prefix hit.
 */
class KvCacheGroupsTest {
  private static final String EP = "10.0.0.1:8000";
  private static final int BS = 4;
  private static final int[] TOKENS = {1, 2, 3, 4, 5, 6, 7, 8};

  /** {@code {ts, events: [...]}} as the newest vLLM sends it (maps, no array_like). */
  private static byte[] batch(Event... events) throws IOException {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packMapHeader(2).packString("ts").packDouble(1.7e9).packString("events")
          .packArrayHeader(events.length);
      for (Event e : events) {
        e.pack(p);
      }
      return p.toByteArray();
    }
  }

  private interface Event {
    void pack(MessageBufferPacker p) throws IOException;
  }

  private static Event stored(long[] hashes, int[] tokens, int blockSize, int group) {
    return p -> {
      p.packMapHeader(10).packString("type").packString("BlockStored")
          .packString("block_hashes").packArrayHeader(hashes.length);
      for (long h : hashes) {
        p.packLong(h);
      }
      p.packString("parent_block_hash").packNil()
          .packString("token_ids").packArrayHeader(tokens.length);
      for (int t : tokens) {
        p.packInt(t);
      }
      p.packString("block_size").packInt(blockSize)
          .packString("lora_id").packNil()
          .packString("medium").packString("GPU")
          .packString("lora_name").packNil()
          .packString("group_idx").packInt(group)
          .packString("kv_cache_spec_kind")
          .packString(group == 0 ? "full_attention" : "sliding_window");
    };
  }

  private static Event removed(long hash, int group) {
    return p -> p.packMapHeader(4).packString("type").packString("BlockRemoved")
        .packString("block_hashes").packArrayHeader(1).packLong(hash)
        .packString("medium").packString("GPU")
        .packString("group_idx").packInt(group);
  }

  private static long[] keys(int blockSize) {
    return BlockKeys.chain(BlockKeys.seed("", null, null), TOKENS, blockSize, 1 << 10);
  }

  @Test
  void theGroupOfAnEventIsDecodedFromBothShapes() throws Exception {
    KvEventBatch b = KvEventDecoder.decode(batch(stored(new long[] {1, 2}, TOKENS, BS, 1),
        removed(1, 2)));
    assertThat(((KvEvent.BlockStored) b.events().get(0)).group()).isEqualTo(1);
    assertThat(((KvEvent.BlockRemoved) b.events().get(1)).group()).isEqualTo(2);

    byte[] tagged;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.7e9).packArrayHeader(3);
      // ["BlockStored", hashes, parent, tokens, bs, lora_id, medium, lora_name, extra_keys,
      //  group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window]
      p.packArrayHeader(12).packString("BlockStored").packArrayHeader(1).packLong(7).packNil()
          .packArrayHeader(1).packInt(9).packInt(1).packNil().packString("GPU").packNil()
          .packNil().packInt(3).packString("sliding_window").packInt(128);
      p.packArrayHeader(4).packString("BlockRemoved").packArrayHeader(1).packLong(7)
          .packString("GPU").packInt(3);
      p.packArrayHeader(2).packString("BlockRemoved").packArrayHeader(1).packLong(7);
      tagged = p.toByteArray();
    }
    b = KvEventDecoder.decode(tagged);
    assertThat(((KvEvent.BlockStored) b.events().get(0)).group()).isEqualTo(3);
    assertThat(((KvEvent.BlockRemoved) b.events().get(1)).group()).isEqualTo(3);
    assertThat(((KvEvent.BlockRemoved) b.events().get(2)).group()).isZero();
  }

  @Test
  void aBlockEvictedByTheSlidingWindowGroupStaysHeldWhileTheFullAttentionGroupHoldsIt()
      throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
    index.apply(EP, KvEventDecoder.decode(batch(stored(new long[] {11, 12}, TOKENS, BS, 0),
        stored(new long[] {11, 12}, TOKENS, BS, 1))));
    assertThat(index.prefixWeight(EP, keys(BS), 0)).isEqualTo(2.0);

    // the sliding-window group's copy of the first block is evicted: the engine still serves a
    // two-block prefix hit from the full-attention group's copies
    index.apply(EP, KvEventDecoder.decode(batch(removed(11, 1))));
    assertThat(index.prefixWeight(EP, keys(BS), 0)).isEqualTo(2.0);
    assertThat(index.blockCount(EP)).isEqualTo(2);

    // and once the full-attention group's copy goes too, the block is gone
    index.apply(EP, KvEventDecoder.decode(batch(removed(11, 0))));
    assertThat(index.prefixWeight(EP, keys(BS), 0)).isZero();
    assertThat(index.blockCount(EP)).isEqualTo(1);
    assertThat(index.metrics().unknownRemovals()).isZero();
  }

  @Test
  void eitherGroupMayEvictFirst() throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
    index.apply(EP, KvEventDecoder.decode(batch(stored(new long[] {11, 12}, TOKENS, BS, 1),
        stored(new long[] {11, 12}, TOKENS, BS, 0))));
    index.apply(EP, KvEventDecoder.decode(batch(removed(12, 0))));
    assertThat(index.prefixWeight(EP, keys(BS), 0)).isEqualTo(2.0);
    index.apply(EP, KvEventDecoder.decode(batch(removed(12, 1))));
    assertThat(index.prefixWeight(EP, keys(BS), 0)).isEqualTo(1.0);
    // a group's removal repeated (or of a copy never seen stored) leaves the others' alone
    index.apply(EP, KvEventDecoder.decode(batch(stored(new long[] {11, 12}, TOKENS, BS, 0),
        removed(12, 1))));
    assertThat(index.prefixWeight(EP, keys(BS), 0)).isEqualTo(2.0);
  }

  @Test
  void aModelWithOneGroupIsIndexedAsBefore() throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
    index.apply(EP, KvEventDecoder.decode(batch(stored(new long[] {11, 12}, TOKENS, BS, 0))));
    index.apply(EP, KvEventDecoder.decode(batch(removed(11, 0))));
    assertThat(index.prefixWeight(EP, keys(BS), 0)).isZero();
    assertThat(index.blockCount(EP)).isEqualTo(1);
  }

  @Test
  void aClearForgetsWhichGroupsHeldABlock() throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
    index.apply(EP, KvEventDecoder.decode(batch(stored(new long[] {11, 12}, TOKENS, BS, 0),
        stored(new long[] {11, 12}, TOKENS, BS, 1))));
    index.resync(EP);
    index.apply(EP, KvEventDecoder.decode(batch(stored(new long[] {11, 12}, TOKENS, BS, 0))));
    index.apply(EP, KvEventDecoder.decode(batch(removed(11, 0))));
    assertThat(index.prefixWeight(EP, keys(BS), 0)).isZero();
  }

  /**
   * vLLM's {@code cache_full_blocks} leaves a group's null blocks (outside a sliding window, or
   * between a Mamba group's kept blocks) out of {@code block_hashes}, while {@code token_ids}
   * still spans every block from the first stored: here the full-attention group stores three
   * blocks, and in the same step the sliding-window group stores only the last of them.
   */
  @Test
  void aGroupThatStoresFewerBlocksThanItsTokensFillDoesNotCostTheStep() throws Exception {
    int[] tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    long[] keys = BlockKeys.chain(BlockKeys.seed("", null, null), tokens, BS, 1 << 10);
    byte[] mapShaped = batch(stored(new long[] {11, 12, 13}, tokens, BS, 0),
        stored(new long[] {13}, tokens, BS, 1), stored(new long[0], tokens, BS, 1));
    byte[] tagged;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(3).packDouble(1.7e9).packArrayHeader(2);
      for (long[] hashes : new long[][] {{11, 12, 13}, {13}}) {
        p.packArrayHeader(12).packString("BlockStored").packArrayHeader(hashes.length);
        for (long h : hashes) {
          p.packLong(h);
        }
        p.packNil().packArrayHeader(tokens.length);
        for (int t : tokens) {
          p.packInt(t);
        }
        boolean window = hashes.length == 1;
        p.packInt(BS).packNil().packString("GPU").packNil().packNil().packInt(window ? 1 : 0)
            .packString(window ? "sliding_window" : "full_attention");
        if (window) {
          p.packInt(8);
        } else {
          p.packNil();
        }
      }
      p.packInt(0);
      tagged = p.toByteArray();
    }
    for (byte[] payload : new byte[][] {mapShaped, tagged}) {
      KvEventBatch b = KvEventDecoder.decode(payload);
      assertThat(b.events()).hasSize(1);
      KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
      index.apply(EP, b);
      assertThat(index.prefixWeight(EP, keys, 0)).isEqualTo(3.0);
      // the group's later removal of a block it was not seen storing changes nothing
      index.apply(EP, KvEventDecoder.decode(batch(removed(13, 1))));
      assertThat(index.prefixWeight(EP, keys, 0)).isEqualTo(3.0);
    }
  }
}
