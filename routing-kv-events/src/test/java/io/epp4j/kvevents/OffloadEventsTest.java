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
}
