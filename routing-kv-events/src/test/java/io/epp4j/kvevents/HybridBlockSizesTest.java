package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/**
 * A hybrid model whose KV-cache groups use blocks of different sizes (attention layers and
 * Mamba layers cached in {@code align} mode, for instance). vLLM hashes a request at
 * {@code hash_block_size}, the smallest group block size, and a group whose blocks are a
 * multiple of it publishes them with its own {@code block_size}, under the hash at the block's
 * end; a prefix that ends inside such a block is published as a partial entry of
 * {@code hash_block_size} tokens ({@code BlockPool.cache_partial_block}). Requests are keyed at
 * one size, so the index keeps keying by the smallest.
 */
class HybridBlockSizesTest {
  private static final String EP = "10.0.0.1:8000";
  private static final int HASH_BS = 4;
  private static final int[] TOKENS = {1, 2, 3, 4, 5, 6, 7, 8};

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

  private static Event stored(long[] hashes, Long parent, int[] tokens, int blockSize,
      int group) {
    return p -> {
      p.packMapHeader(9).packString("type").packString("BlockStored")
          .packString("block_hashes").packArrayHeader(hashes.length);
      for (long h : hashes) {
        p.packLong(h);
      }
      p.packString("parent_block_hash");
      if (parent == null) {
        p.packNil();
      } else {
        p.packLong(parent);
      }
      p.packString("token_ids").packArrayHeader(tokens.length);
      for (int t : tokens) {
        p.packInt(t);
      }
      p.packString("block_size").packInt(blockSize)
          .packString("lora_id").packNil()
          .packString("medium").packString("GPU")
          .packString("lora_name").packNil()
          .packString("group_idx").packInt(group);
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

  /** The attention group's blocks (4 tokens), hashes 21 and 22 at token 4 and 8. */
  private static Event attention() {
    return stored(new long[] {21, 22}, null, TOKENS, HASH_BS, 0);
  }

  /** The Mamba group's block of 8 tokens, under the hash at its end. */
  private static Event mambaFull() {
    return stored(new long[] {22}, null, TOKENS, 2 * HASH_BS, 1);
  }

  /** The Mamba group's partial entry for the prefix that ends at token 4. */
  private static Event mambaPartial() {
    return stored(new long[] {21}, null, new int[] {1, 2, 3, 4}, HASH_BS, 1);
  }

  @Test
  void theLargerGroupsBlocksDoNotChangeTheSizeRequestsAreKeyedBy() throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(HASH_BS).build();
    index.apply(EP, KvEventDecoder.decode(batch(attention(), mambaFull())));
    assertThat(index.endpointBlockSize(EP)).isEqualTo(HASH_BS);
    assertThat(index.prefixWeight(EP, keys(HASH_BS), 0)).isEqualTo(2.0);

    index.apply(EP, KvEventDecoder.decode(batch(mambaPartial())));
    assertThat(index.endpointBlockSize(EP)).isEqualTo(HASH_BS);
    assertThat(index.prefixWeight(EP, keys(HASH_BS), 0)).isEqualTo(2.0);
    assertThat(index.metrics().blockSizeMismatches()).isZero();
    assertThat(index.metrics().otherSizeBlocks()).isEqualTo(1);

    // the Mamba group evicts its block (both of its entries): the attention group still holds
    index.apply(EP, KvEventDecoder.decode(batch(removed(22, 1), removed(21, 1))));
    assertThat(index.prefixWeight(EP, keys(HASH_BS), 0)).isEqualTo(2.0);
    index.apply(EP, KvEventDecoder.decode(batch(removed(22, 0))));
    assertThat(index.prefixWeight(EP, keys(HASH_BS), 0)).isEqualTo(1.0);
  }

  @Test
  void theSmallerSizeWinsWhicheverGroupComesFirst() throws Exception {
    // configured for another size, and the larger group's event is the first the index sees
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(16).build();
    index.apply(EP, KvEventDecoder.decode(batch(mambaFull())));
    index.apply(EP, KvEventDecoder.decode(batch(attention(), mambaPartial(), mambaFull())));
    assertThat(index.endpointBlockSize(EP)).isEqualTo(HASH_BS);
    assertThat(index.prefixWeight(EP, keys(HASH_BS), 0)).isEqualTo(2.0);
    // nothing keyed at the larger size is left behind
    assertThat(index.blockCount(EP)).isEqualTo(2);
    assertThat(index.metrics().otherSizeBlocks()).isEqualTo(1);
  }

  @Test
  void anEngineWithOneGroupStillFollowsItsEvents() throws Exception {
    // a restart with another --block-size: the size follows the engine
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(HASH_BS).build();
    index.apply(EP, KvEventDecoder.decode(batch(attention())));
    index.apply(EP, KvEventDecoder.decode(batch(stored(new long[] {31}, null, TOKENS,
        2 * HASH_BS, 0))));
    assertThat(index.endpointBlockSize(EP)).isEqualTo(2 * HASH_BS);
    assertThat(index.prefixWeight(EP, keys(2 * HASH_BS), 0)).isEqualTo(1.0);
  }
}
