package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/**
 * SGLang's KV events ({@code engineType: sglang}): vLLM's arrays up to {@code medium}, and for a
 * salted request a {@code BlockStoredWithMetadata}, whose eighth element, where vLLM has
 * {@code lora_name}, is the map {@code {"cache_salt": ...}}
 * (sglang/srt/disaggregation/kv_events.py).
 */
class SglangEventsTest {
  private static final int[] TOKENS = {1, 2, 3, 4, 5, 6, 7, 8};

  /** {@code [ts, [BlockStored...], attn_dp_rank]} with one salted root store of two blocks. */
  private static byte[] saltedBatch(String salt) throws IOException {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(3).packDouble(1.7e9).packArrayHeader(2);
      p.packArrayHeader(8).packString("BlockStored").packArrayHeader(2).packLong(11).packLong(12)
          .packNil().packArrayHeader(TOKENS.length);
      for (int t : TOKENS) {
        p.packInt(t);
      }
      p.packInt(4).packNil().packString("GPU")
          .packMapHeader(1).packString("cache_salt").packString(salt);
      // an unsalted store of the same step keeps the legacy length of 7
      p.packArrayHeader(7).packString("BlockStored").packArrayHeader(1).packLong(21).packNil()
          .packArrayHeader(4).packInt(9).packInt(9).packInt(9).packInt(9).packInt(4).packNil()
          .packString("GPU");
      p.packInt(0);
      return p.toByteArray();
    }
  }

  @Test
  void aSaltedStoreIsDecodedWithItsSaltInsteadOfDroppingTheBatch() throws Exception {
    KvEventBatch b = KvEventDecoder.decode(saltedBatch("tenant-a"));
    assertThat(b.events()).hasSize(2);
    KvEvent.BlockStored s = (KvEvent.BlockStored) b.events().get(0);
    assertThat(s.cacheSalt()).isEqualTo("tenant-a");
    assertThat(s.loraName()).isNull();
    assertThat(((KvEvent.BlockStored) b.events().get(1)).cacheSalt()).isNull();
  }

  @Test
  void saltedBlocksMatchRequestsWithTheSameSaltOnly() throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(4).build();
    index.apply("10.0.0.1:30000", KvEventDecoder.decode(saltedBatch("tenant-a")));
    long[] salted = BlockKeys.chain(BlockKeys.seed("", null, "tenant-a"), TOKENS, 4, 64);
    long[] unsalted = BlockKeys.chain(BlockKeys.seed("", null, null), TOKENS, 4, 64);
    assertThat(index.prefixWeight("10.0.0.1:30000", salted, 0)).isEqualTo(2.0);
    assertThat(index.prefixWeight("10.0.0.1:30000", unsalted, 0)).isZero();
  }
}
