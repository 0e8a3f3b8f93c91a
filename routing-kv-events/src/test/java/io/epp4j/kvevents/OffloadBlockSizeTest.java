package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/**
 * vLLM's LMCache connector forwards LMCache's own events into the engine's stream, after the
 * block pool's events of the same step: one {@code BlockStored} per LMCache chunk, with
 * LMCache's chunk hash, the previous chunk's hash as parent, the chunk's tokens,
 * {@code block_size} = the chunk's token count (256 by default, fewer for a prompt's last
 * chunk) and {@code medium} "cpu" (lmcache_connector.py, get_kv_connector_kv_cache_events).
 * The engine's block size is its GPU blocks'; a store of an offload tier must not change it.
 */
class OffloadBlockSizeTest {
  private static final String EP = "10.0.0.1:8000";
  private static final int BS = 16;
  private static final int CHUNK = 256;

  private static int[] tokens(int n) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = 1000 + i;
    }
    return t;
  }

  /**
   * One engine step of a 356-token prompt: the block pool's store of its 22 full GPU blocks,
   * then LMCache's two chunks (256 tokens, then the last 100), tagged arrays as vLLM sends them.
   */
  private static byte[] stepWithLmcacheChunks(int[] prompt) throws Exception {
    int gpuBlocks = prompt.length / BS;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(3).packDouble(1.7e9).packArrayHeader(3);
      p.packArrayHeader(8).packString("BlockStored").packArrayHeader(gpuBlocks);
      for (int i = 0; i < gpuBlocks; i++) {
        p.packLong(500 + i);
      }
      p.packNil().packArrayHeader(gpuBlocks * BS);
      for (int i = 0; i < gpuBlocks * BS; i++) {
        p.packInt(prompt[i]);
      }
      p.packInt(BS).packNil().packString("GPU").packNil();
      // LMCache: chunk hashes of its own, chained by parent
      p.packArrayHeader(8).packString("BlockStored").packArrayHeader(1).packLong(9001).packNil()
          .packArrayHeader(CHUNK);
      for (int i = 0; i < CHUNK; i++) {
        p.packInt(prompt[i]);
      }
      p.packInt(CHUNK).packNil().packString("cpu").packNil();
      int rest = prompt.length - CHUNK;
      p.packArrayHeader(8).packString("BlockStored").packArrayHeader(1).packLong(9002)
          .packLong(9001).packArrayHeader(rest);
      for (int i = CHUNK; i < prompt.length; i++) {
        p.packInt(prompt[i]);
      }
      p.packInt(rest).packNil().packString("cpu").packNil();
      p.packInt(0);
      return p.toByteArray();
    }
  }

  @Test
  void lmcacheChunksOfAnotherSizeLeaveTheEnginesBlockSizeAlone() throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
    int[] prompt = tokens(356);
    index.apply(EP, KvEventDecoder.decode(stepWithLmcacheChunks(prompt)));

    assertThat(index.endpointBlockSize(EP)).isEqualTo(BS);
    // the prompt's 22 blocks are keyed at the engine's size and held on GPU
    long[] keys = BlockKeys.chain(BlockKeys.seed("", null, null), prompt, BS, 1 << 10);
    assertThat(keys).hasSize(22);
    assertThat(index.prefixWeight(EP, keys, 0)).isEqualTo(22.0);
    // nothing suggests blockSizeTokens is wrong: the engine's blocks are of 16 tokens
    assertThat(index.metrics().blockSizeMismatches()).isZero();
    assertThat(index.metrics().otherSizeBlocks()).isEqualTo(2);
  }

  @Test
  void anOffloadStoreBeforeAnyGpuStoreDoesNotSetTheSize() throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
    int[] chunk = tokens(CHUNK);
    index.apply(EP, new KvEvent.BlockStored(new long[] {9001}, false, 0, chunk, CHUNK, -1,
        Medium.CPU, null, null));
    assertThat(index.endpointBlockSize(EP)).isNotEqualTo(CHUNK);
    assertThat(index.blockCount(EP)).isZero();

    // the engine's own blocks are then keyed at its size, and a later chunk changes nothing
    index.apply(EP, KvEvent.BlockStored.of(new long[] {500, 501}, null,
        java.util.Arrays.copyOf(chunk, 2 * BS), BS));
    index.apply(EP, new KvEvent.BlockStored(new long[] {9002}, false, 0, chunk, CHUNK, -1,
        Medium.CPU, null, null));
    long[] keys = BlockKeys.chain(BlockKeys.seed("", null, null), chunk, BS, 2);
    assertThat(index.endpointBlockSize(EP)).isEqualTo(BS);
    assertThat(index.prefixWeight(EP, keys, 0)).isEqualTo(2.0);
  }
}
