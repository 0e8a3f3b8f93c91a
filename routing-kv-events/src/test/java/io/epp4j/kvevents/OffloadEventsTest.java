package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/**
 * vLLM's OffloadingConnector (CPU offload, {@code --kv-transfer-config
 * '{"kv_connector":"OffloadingConnector",...}'}) publishes, in the same batch as the engine's
 * own GPU events, {@code BlockStored(block_hashes=..., parent_block_hash=None, token_ids=[],
 * block_size=..., lora_id=None, medium="CPU", lora_name=None)} (offloading/scheduler.py,
 * take_events). Such a batch must not be lost whole.
 */
class OffloadEventsTest {

  /** [ts, [GPU BlockStored of 2 blocks, offload BlockStored with token_ids=[]]]. */
  private static byte[] gpuStoreThenOffloadStore() throws Exception {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.7e9).packArrayHeader(2);
      // ["BlockStored", [11, 12], nil, [32 tokens], 16, nil, "GPU", nil]
      p.packArrayHeader(8).packString("BlockStored").packArrayHeader(2).packLong(11).packLong(12)
          .packNil().packArrayHeader(32);
      for (int i = 0; i < 32; i++) {
        p.packInt(100 + i);
      }
      p.packInt(16).packNil().packString("GPU").packNil();
      // the offloading connector: same step, token_ids=[] and parent None
      p.packArrayHeader(8).packString("BlockStored").packArrayHeader(2).packLong(901)
          .packLong(902).packNil().packArrayHeader(0).packInt(16).packNil().packString("CPU")
          .packNil();
      return p.toByteArray();
    }
  }

  @Test
  void offloadConnectorStoreDoesNotMakeTheWholeBatchMalformed() throws Exception {
    KvEventBatch b = KvEventDecoder.decode(gpuStoreThenOffloadStore());
    assertThat(b.events()).hasSizeGreaterThanOrEqualTo(1);
    assertThat(b.events().get(0)).isInstanceOf(KvEvent.BlockStored.class);
  }

  @Test
  void gpuBlocksOfAStepWithOffloadEventsAreIndexed() throws Exception {
    KvBlockIndex index = KvBlockIndex.create();
    byte[] payload = gpuStoreThenOffloadStore();
    try {
      index.apply("10.0.0.1:8000", KvEventDecoder.decode(payload));
    } catch (MalformedKvEventException e) {
      // what the subscriber does: the batch is dropped
    }
    assertThat(index.blockCount("10.0.0.1:8000")).isEqualTo(2);
  }

  /** Newest vLLM: batch and events as maps (no array_like), with group_idx and spec fields. */
  @Test
  void mapShapedBatchWithHybridFieldsAndAnOffloadStoreDecodes() throws Exception {
    byte[] payload;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packMapHeader(3).packString("ts").packDouble(1.7e9).packString("events")
          .packArrayHeader(2);
      p.packMapHeader(12).packString("type").packString("BlockStored")
          .packString("block_hashes").packArrayHeader(1).packLong(11)
          .packString("parent_block_hash").packNil()
          .packString("token_ids").packArrayHeader(2).packInt(1).packInt(2)
          .packString("block_size").packInt(2)
          .packString("lora_id").packNil()
          .packString("medium").packString("GPU")
          .packString("lora_name").packNil()
          .packString("extra_keys").packNil()
          .packString("group_idx").packInt(0)
          .packString("kv_cache_spec_kind").packString("full_attention")
          .packString("kv_cache_spec_sliding_window").packNil();
      p.packMapHeader(8).packString("type").packString("BlockStored")
          .packString("block_hashes").packArrayHeader(1).packBinaryHeader(32)
          .addPayload(new byte[32])
          .packString("parent_block_hash").packNil()
          .packString("token_ids").packArrayHeader(0)
          .packString("block_size").packInt(2)
          .packString("lora_id").packNil()
          .packString("medium").packString("CPU")
          .packString("lora_name").packNil();
      p.packString("data_parallel_rank").packInt(0);
      payload = p.toByteArray();
    }
    KvEventBatch b = KvEventDecoder.decode(payload);
    assertThat(b.events()).containsExactly(
        KvEvent.BlockStored.of(new long[] {11}, null, new int[] {1, 2}, 2));
    assertThat(b.dataParallelRank()).isZero();
  }

  /** A vLLM BlockStored map of two blocks (hashes 11, 12, tokens 1..4, block size 2). */
  private static void packStored(MessageBufferPacker p, String medium, boolean withTokens)
      throws Exception {
    p.packMapHeader(8).packString("type").packString("BlockStored")
        .packString("block_hashes").packArrayHeader(2).packLong(11).packLong(12)
        .packString("parent_block_hash").packNil()
        .packString("token_ids").packArrayHeader(withTokens ? 4 : 0);
    if (withTokens) {
      p.packInt(1).packInt(2).packInt(3).packInt(4);
    }
    p.packString("block_size").packInt(2)
        .packString("lora_id").packNil()
        .packString("medium").packString(medium)
        .packString("lora_name").packNil();
  }

  private static void packRemoved(MessageBufferPacker p, String medium, long hash)
      throws Exception {
    p.packMapHeader(3).packString("type").packString("BlockRemoved")
        .packString("block_hashes").packArrayHeader(1).packLong(hash)
        .packString("medium").packString(medium);
  }

  /**
   * vLLM's tiered offloading keeps a block in host memory (medium {@code "CPU"}, stores with
   * their tokens) and behind it in a file-system or object-store tier (medium
   * {@code "STORAGE"}, stores by hash only). The storage tier evicting its copy leaves the CPU
   * tier's, from which the engine still loads the prefix.
   */
  @Test
  void aRemovalFromTheStorageTierLeavesTheCpuTiersCopy() throws Exception {
    byte[] stores;
    byte[] removals;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(3).packDouble(1.7e9).packArrayHeader(3);
      packStored(p, "GPU", true);
      packStored(p, "CPU", true);
      packStored(p, "STORAGE", false);
      p.packInt(0);
      stores = p.toByteArray();
    }
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(3).packDouble(1.7e9 + 1).packArrayHeader(3);
      packRemoved(p, "GPU", 11);
      packRemoved(p, "GPU", 12);
      packRemoved(p, "STORAGE", 11);
      p.packInt(0);
      removals = p.toByteArray();
    }
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(2).build();
    long[] keys = BlockKeys.chain(BlockKeys.seed("", null, null), new int[] {1, 2, 3, 4}, 2, 16);
    index.apply("10.0.0.1:8000", KvEventDecoder.decode(stores));
    assertThat(index.prefixWeight("10.0.0.1:8000", keys, 0)).isEqualTo(2.0);
    index.apply("10.0.0.1:8000", KvEventDecoder.decode(removals));
    // both blocks are left in host memory only: each weighs cpuWeight
    assertThat(index.prefixWeight("10.0.0.1:8000", keys, 0)).isCloseTo(1.6,
        org.assertj.core.data.Offset.offset(1e-9));
    assertThat(index.tiers("10.0.0.1:8000", keys[0])).containsExactly(Medium.CPU);
  }

  /**
   * Current vLLM's offloading connector sends the stores it cannot describe (sliding-window and
   * Mamba groups, or every store unless {@code self_describing_kv_events} is on) as a placeholder:
   * one hash, {@code token_ids=[]}, {@code block_size=0} (offloading/events.py,
   * {@code _placeholder_stored}), with the newer fields {@code group_idx} and {@code locality}.
   * Such a store cannot be keyed and is skipped; the step's GPU events still apply.
   */
  @Test
  void aPlaceholderStoreOfBlockSizeZeroLeavesTheStepsGpuEventsApplied() throws Exception {
    byte[] payload;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(3).packDouble(1.7e9).packArrayHeader(2);
      packStored(p, "GPU", true);
      p.packMapHeader(10).packString("type").packString("BlockStored")
          .packString("block_hashes").packArrayHeader(1).packLong(12)
          .packString("parent_block_hash").packNil()
          .packString("token_ids").packArrayHeader(0)
          .packString("lora_id").packNil()
          .packString("block_size").packInt(0)
          .packString("medium").packString("CPU")
          .packString("lora_name").packNil()
          .packString("group_idx").packInt(1)
          .packString("locality").packString("LOCAL");
      p.packInt(0);
      payload = p.toByteArray();
    }
    KvEventBatch b = KvEventDecoder.decode(payload);
    assertThat(b.events()).containsExactly(
        KvEvent.BlockStored.of(new long[] {11, 12}, null, new int[] {1, 2, 3, 4}, 2));
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(2).build();
    index.apply("10.0.0.1:8000", b);
    long[] keys = BlockKeys.chain(BlockKeys.seed("", null, null), new int[] {1, 2, 3, 4}, 2, 16);
    assertThat(index.prefixWeight("10.0.0.1:8000", keys, 0)).isEqualTo(2.0);
    // the same placeholder in the array shape: [tag, hashes, parent, tokens, 0, lora_id, medium]
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.7e9).packArrayHeader(1);
      p.packArrayHeader(7).packString("BlockStored").packArrayHeader(1).packLong(12).packNil()
          .packArrayHeader(0).packInt(0).packNil().packString("CPU");
      assertThat(KvEventDecoder.decode(p.toByteArray()).events()).isEmpty();
    }
  }

  /**
   * vLLM's self-describing offload stores leave {@code extra_keys} out (offloading/events.py:
   * "Deferred"), so the host-memory store of a salted request's first blocks names no salt. The
   * engine hashes are the ones the GPU store named with it: those blocks are the salted ones.
   * Keyed again without the salt, they replaced the GPU entries (as other content under a known
   * hash), so the salted prompt stopped matching and an unsalted prompt of the same tokens
   * matched the salted blocks.
   */
  @Test
  void anOffloadStoreWithoutTheSaltKeepsTheKeysTheGpuStoreGaveItsHashes() {
    int[] tokens = {1, 2, 3, 4};
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(2).build();
    index.apply("10.0.0.1:8000", new KvEvent.BlockStored(new long[] {11, 12}, false, 0, tokens,
        2, -1, Medium.GPU, null, "salt", 0, 0));
    index.apply("10.0.0.1:8000", new KvEvent.BlockStored(new long[] {11, 12}, false, 0, tokens,
        2, -1, Medium.CPU, null, null, 0, 0));
    long[] salted = BlockKeys.chain(BlockKeys.seed("", null, "salt"), tokens, 2, 16);
    long[] unsalted = BlockKeys.chain(BlockKeys.seed("", null, null), tokens, 2, 16);
    assertThat(index.prefixWeight("10.0.0.1:8000", salted, 0)).isEqualTo(2.0);
    assertThat(index.prefixWeight("10.0.0.1:8000", unsalted, 0)).isZero();
    index.apply("10.0.0.1:8000", new KvEvent.BlockRemoved(new long[] {11, 12}, Medium.GPU, 0));
    // left in host memory, still under the salted keys
    assertThat(index.prefixWeight("10.0.0.1:8000", salted, 0)).isCloseTo(1.6,
        org.assertj.core.data.Offset.offset(1e-9));
    assertThat(index.prefixWeight("10.0.0.1:8000", unsalted, 0)).isZero();
  }
}
