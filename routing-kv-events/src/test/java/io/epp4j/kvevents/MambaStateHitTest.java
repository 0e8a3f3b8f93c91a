package io.epp4j.kvevents;

import static io.epp4j.kvevents.HybridConversation.BS;
import static io.epp4j.kvevents.HybridConversation.TOKENS;
import static io.epp4j.kvevents.HybridConversation.hash;
import static io.epp4j.kvevents.HybridConversation.hashes;
import static io.epp4j.kvevents.HybridConversation.keys;
import static io.epp4j.kvevents.HybridConversation.sharing;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.core.Router;
import java.io.IOException;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/**
 * A hybrid model with Mamba (or linear-attention) layers keeps, in their KV-cache group, only the
 * recurrent state at the end of some blocks: with prefix caching in {@code align} mode, the block
 * at the end of each scheduled chunk. vLLM's {@code cache_full_blocks} leaves the other blocks
 * (null blocks) out of the group's {@code BlockStored}, whose {@code token_ids} still cover every
 * block of the step, and its {@code MambaManager} serves a hit only up to the last block whose
 * state it holds. The full-attention group stores every block under the same engine hashes. A
 * prompt that shares part of a cached conversation but not up to one of its states is computed
 * from the start; the index counted the full-attention run and promised the shared part.
 */
class MambaStateHitTest {
  private static final String EP = "10.0.0.1:8000";
  /**
   * A vLLM store map of blocks {@code from} to {@code to} (exclusive, of {@code blockSize}
   * tokens) of the conversation, naming {@code named} hashes.
   */
  private static void store(MessageBufferPacker p, String kind, int group, int blockSize,
      int from, int to, long[] named) throws IOException {
    p.packMapHeader(12).packString("type").packString("BlockStored")
        .packString("block_hashes").packArrayHeader(named.length);
    for (long h : named) {
      p.packLong(h);
    }
    p.packString("parent_block_hash");
    if (from == 0) {
      p.packNil();
    } else {
      p.packLong(hash(from * blockSize / BS - 1));
    }
    p.packString("token_ids").packArrayHeader((to - from) * blockSize);
    for (int i = from * blockSize; i < to * blockSize; i++) {
      p.packInt(TOKENS[i]);
    }
    p.packString("block_size").packInt(blockSize).packString("lora_id").packNil()
        .packString("medium").packString("GPU").packString("lora_name").packNil()
        .packString("group_idx").packInt(group).packString("kv_cache_spec_kind")
        .packString(kind).packString("kv_cache_spec_sliding_window").packNil()
        .packString("extra_keys").packNil();
  }

  /**
   * One engine step that caches attention blocks {@code from} to {@code to}: the Mamba group 0
   * first (as vLLM caches groups in order, and the model's first layers are Mamba layers), keeping
   * the state at the end of the step's last block only, then the full-attention group 1.
   */
  private static KvEventBatch step(int from, int to) throws Exception {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packMapHeader(2).packString("ts").packDouble(1.7e9).packString("events")
          .packArrayHeader(2);
      store(p, "mamba", 0, BS, from, to, new long[] {hash(to - 1)});
      store(p, "full_attention", 1, BS, from, to, hashes(from, to));
      return KvEventDecoder.decode(p.toByteArray());
    }
  }

  private static double walked(KvBlockIndex index, long[] keys, int servable) {
    double[] out = new double[1];
    index.prefixWeights(keys, servable, new int[] {index.endpointView(EP).slot},
        new boolean[] {true}, 0, out, null);
    return out[0];
  }

  private static void assertHit(KvBlockIndex index, int[] prompt, int blocks) {
    long[] k = keys(prompt);
    int servable = KvBlockIndex.servableBlocks(k, prompt.length, BS);
    assertThat(index.prefixWeight(EP, k, servable, 0)).isEqualTo(blocks);
    assertThat(walked(index, k, servable)).isEqualTo(blocks);
  }

  /** The whole conversation and the first token of the next turn. */
  private static int[] continued() {
    int[] t = Arrays.copyOf(TOKENS, TOKENS.length + 1);
    t[TOKENS.length] = 9;
    return t;
  }

  private static KvBlockIndex index() {
    return KvBlockIndex.builder().defaultBlockSize(BS).build();
  }

  @Test
  void aPromptThatStopsShortOfEveryStateIsNoHit() throws Exception {
    KvBlockIndex index = index();
    index.apply(EP, step(0, 8));

    // the full-attention group holds blocks 0-5 of this prompt, but the only Mamba state is at
    // the end of block 7: vLLM computes the whole prompt
    assertHit(index, sharing(6), 0);
    assertHit(index, continued(), 8);
    assertThat(index.blockCount(EP)).isEqualTo(8);
  }

  @Test
  void theHitEndsAtTheLastStateBeforeTheSharedPartEnds() throws Exception {
    KvBlockIndex index = index();
    // a prefill in two chunks keeps a state at the end of each
    index.apply(EP, step(0, 4));
    index.apply(EP, step(4, 8));

    assertHit(index, sharing(6), 4);
    assertHit(index, sharing(3), 0);
    assertHit(index, continued(), 8);
  }

  @Test
  void aStateTheMambaGroupEvictedNoLongerServesAHit() throws Exception {
    KvBlockIndex index = index();
    index.apply(EP, step(0, 4));
    index.apply(EP, step(4, 8));

    index.apply(EP, new KvEvent.BlockRemoved(new long[] {hash(7)}, Medium.GPU, 0));

    assertHit(index, continued(), 4);
    assertThat(index.blockCount(EP)).isEqualTo(8); // the attention group still holds block 7
  }

  @Test
  void statesAreFoundWhenTheAttentionGroupStoresFirst() throws Exception {
    KvBlockIndex index = index();
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packMapHeader(2).packString("ts").packDouble(1.7e9).packString("events")
          .packArrayHeader(2);
      store(p, "full_attention", 0, BS, 0, 8, hashes(0, 8));
      store(p, "mamba", 1, BS, 0, 8, new long[] {hash(3), hash(7)});
      index.apply(EP, KvEventDecoder.decode(p.toByteArray()));
    }

    assertHit(index, sharing(6), 4);
    assertHit(index, continued(), 8);
  }

  @Test
  void aMambaGroupOfLargerBlocksNamesTheHashAtItsBlocksEnd() throws Exception {
    // Mamba blocks of 2 attention blocks: vLLM hashes requests at the attention size and names
    // a larger block by the (integer) hash of its last part
    KvBlockIndex index = index();
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packMapHeader(2).packString("ts").packDouble(1.7e9).packString("events")
          .packArrayHeader(2);
      store(p, "mamba", 0, 2 * BS, 0, 4, new long[] {hash(3), hash(7)});
      store(p, "full_attention", 1, BS, 0, 8, hashes(0, 8));
      index.apply(EP, KvEventDecoder.decode(p.toByteArray()));
    }

    assertHit(index, sharing(6), 4);
    assertHit(index, continued(), 8);
    assertThat(index.endpointBlockSize(EP)).isEqualTo(BS);
  }

  @Test
  void aMambaGroupThatKeepsEveryBlocksStateCutsNothing() throws Exception {
    // mamba_cache_mode "all": the group's store names every block, like the attention group's
    KvBlockIndex index = index();
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packMapHeader(2).packString("ts").packDouble(1.7e9).packString("events")
          .packArrayHeader(2);
      store(p, "mamba", 0, BS, 0, 8, hashes(0, 8));
      store(p, "full_attention", 1, BS, 0, 8, hashes(0, 8));
      index.apply(EP, KvEventDecoder.decode(p.toByteArray()));
    }

    assertHit(index, sharing(6), 6);
    assertHit(index, sharing(3), 3);
  }

  @Test
  void aPromptEndingAtAStatesBlockEndIsServedOnlyUpToTheStateBefore() throws Exception {
    // vLLM computes a prompt's last token whatever it holds (max_cache_hit_length =
    // num_tokens - 1), so for a prompt of exactly 8 blocks its MambaManager looks for a state
    // among the first 7: the one at the end of block 7 serves only a prompt that goes on past it
    KvBlockIndex index = index();
    index.apply(EP, step(0, 4));
    index.apply(EP, step(4, 8));
    assertHit(index, TOKENS, 4);
    assertHit(index, continued(), 8);

    KvBlockIndex onlyAtTheEnd = index();
    onlyAtTheEnd.apply(EP, step(0, 8));
    assertHit(onlyAtTheEnd, TOKENS, 0);
    assertHit(onlyAtTheEnd, Arrays.copyOf(TOKENS, TOKENS.length - 1), 0);
    assertHit(onlyAtTheEnd, continued(), 8);
  }

  @Test
  void theScorerSendsAPromptEndingAtAStatesBlockEndWhereAnEarlierStateServesIt() {
    // a prompt of exactly 8 blocks of 16 tokens: "whole" holds them all with the only state at
    // the end of the last, which vLLM cannot use for it (0 blocks served); "half" holds the
    // first 4 with a state at their end (4 blocks served)
    int[] p = PrecisePrefixCacheScorerTest.prompt(11, 8 * 16);
    String whole = "10.0.0.1:8000";
    String half = "10.0.0.2:8000";
    KvBlockIndex index = KvBlockIndex.builder().build();
    index.apply(whole, KvEventBatch.of(0, List.of(mambaStore16(p, 8, 100), attentionStore16(p, 8,
        100))));
    index.apply(half, KvEventBatch.of(0, List.of(mambaStore16(p, 4, 200), attentionStore16(p, 4,
        200))));
    try (Router router = Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
        .service(KvBlockIndex.class, index)
        .configYaml(PrecisePrefixCacheScorerTest.yaml("precise-prefix-cache-scorer"), "t")
        .randomSeed(5).build()) {
      assertThat(router.route(PrecisePrefixCacheScorerTest.request(p)).primary().id())
          .isEqualTo(half);
    }
  }

  /**
   * Mamba states wait for the store of the blocks they name; past 16,384 per endpoint they are
   * dropped. They were dropped without a count or a word, so an engine whose states never found
   * their blocks (every hit then computed from the start) showed nothing.
   */
  @Test
  void statesThatNeverFindTheirBlocksAreCountedWhenDroppedAndLoggedOnce() {
    KvBlockIndex index = KvBlockIndex.builder().build();
    try (KvEventSubscriberReliabilityTest.LogCapture log =
        new KvEventSubscriberReliabilityTest.LogCapture(KvBlockIndex.class)) {
      List<java.util.logging.LogRecord> warnings = log.records;
      int waiting = 1 << 14;
      long[] named = new long[waiting + 1];
      for (int i = 0; i < named.length; i++) {
        named[i] = 1_000_000L + i; // hashes no block of the endpoint is stored under
      }
      index.apply(EP, KvEventBatch.of(0, List.of(new KvEvent.BlockStored(named, false, 0,
          new int[0], 16, -1, Medium.GPU, null, null, 0, 0, true))));
      assertThat(index.metrics().droppedMambaStates()).isEqualTo(waiting);
      assertThat(warnings).hasSize(1);
      assertThat(warnings.get(0).getMessage()).contains(EP).contains("droppedMambaStates");

      long[] more = new long[waiting];
      for (int i = 0; i < more.length; i++) {
        more[i] = 2_000_000L + i;
      }
      index.apply(EP, KvEventBatch.of(0, List.of(new KvEvent.BlockStored(more, false, 0,
          new int[0], 16, -1, Medium.GPU, null, null, 0, 0, true))));
      assertThat(index.metrics().droppedMambaStates()).isEqualTo(2L * waiting);
      assertThat(warnings).as("logged once per endpoint").hasSize(1);
    }
  }

  /** Mamba group 0's store of {@code blocks} blocks of 16 tokens: a state at the last one's end. */
  private static KvEvent.BlockStored mambaStore16(int[] tokens, int blocks, long firstHash) {
    return new KvEvent.BlockStored(new long[] {firstHash + blocks - 1}, false, 0, new int[0], 16,
        -1, Medium.GPU, null, null, 0, 0, true);
  }

  /** Full-attention group 1's store of the first {@code blocks} blocks of 16 tokens. */
  private static KvEvent.BlockStored attentionStore16(int[] tokens, int blocks, long firstHash) {
    long[] h = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      h[i] = firstHash + i;
    }
    return new KvEvent.BlockStored(h, false, 0, Arrays.copyOf(tokens, blocks * 16), 16, -1,
        Medium.GPU, null, null, 1, 0);
  }
}
