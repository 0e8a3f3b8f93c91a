package io.epp4j.kvevents;

import static io.epp4j.kvevents.HybridConversation.BS;
import static io.epp4j.kvevents.HybridConversation.TOKENS;
import static io.epp4j.kvevents.HybridConversation.hashes;
import static io.epp4j.kvevents.HybridConversation.keys;
import static io.epp4j.kvevents.HybridConversation.sharing;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

import io.epp4j.core.Router;
import java.io.IOException;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/**
 * vLLM serves a prefix hit of a hybrid model only where every KV-cache group can serve it: its
 * {@code HybridKVCacheCoordinator} takes the full-attention group's run of cached blocks from
 * block 0 and then asks each sliding-window group for the longest hit within it, which needs
 * the {@code ceil((sliding_window - 1) / block_size)} blocks before the hit's end cached in
 * that group (or a run from block 0). The sliding-window group frees the blocks that leave its
 * window while a request runs, so they are evicted long before the full-attention group's: a
 * prompt that shares only the start of a long conversation finds the full-attention blocks but
 * not the window before them, and the engine computes it all again. The index counted the
 * full-attention run alone, so it promised that hit. vLLM's {@code BlockStored} names the
 * group's kind and window ({@code kv_cache_spec_kind}, {@code kv_cache_spec_sliding_window}).
 */
class SlidingWindowHitTest {
  private static final String EP = "10.0.0.1:8000";
  /** A window of 9 tokens: a hit needs the 2 blocks before its end in the window group. */
  private static final int WINDOW = 9;
  /** {@code {ts, events}} with vLLM's store maps, which name the group's kind and window. */
  private static byte[] stores(String kind, int group, Integer window) throws IOException {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packMapHeader(2).packString("ts").packDouble(1.7e9).packString("events")
          .packArrayHeader(1).packMapHeader(12).packString("type").packString("BlockStored")
          .packString("block_hashes").packArrayHeader(8);
      for (long h : hashes(0, 8)) {
        p.packLong(h);
      }
      p.packString("parent_block_hash").packNil().packString("token_ids")
          .packArrayHeader(TOKENS.length);
      for (int t : TOKENS) {
        p.packInt(t);
      }
      p.packString("block_size").packInt(BS).packString("lora_id").packNil()
          .packString("medium").packString("GPU").packString("lora_name").packNil()
          .packString("group_idx").packInt(group).packString("kv_cache_spec_kind")
          .packString(kind).packString("kv_cache_spec_sliding_window");
      if (window == null) {
        p.packNil();
      } else {
        p.packInt(window);
      }
      p.packString("extra_keys").packNil();
      return p.toByteArray();
    }
  }

  private static KvBlockIndex conversationHeld() throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
    index.apply(EP, KvEventDecoder.decode(stores("full_attention", 0, null)));
    index.apply(EP, KvEventDecoder.decode(stores("sliding_window", 1, WINDOW)));
    return index;
  }

  /** The window group evicts its copies of blocks {@code from} to {@code to} (exclusive). */
  private static void windowEvicts(KvBlockIndex index, int from, int to) {
    index.apply(EP, new KvEvent.BlockRemoved(hashes(from, to), Medium.GPU, 1));
  }

  /** What the scorer's walk finds for the one endpoint. */
  private static double walked(KvBlockIndex index, long[] keys) {
    double[] out = new double[1];
    index.prefixWeights(keys, new int[] {index.endpointView(EP).slot}, new boolean[] {true}, 0, out);
    return out[0];
  }

  @Test
  void aPrefixWhoseWindowTheWindowGroupNoLongerHoldsIsNoHit() throws Exception {
    KvBlockIndex index = conversationHeld();
    windowEvicts(index, 0, 6);
    // the whole conversation: the window group still holds its last two blocks
    assertThat(index.prefixWeight(EP, keys(TOKENS), 0)).isEqualTo(8.0);
    assertThat(walked(index, keys(TOKENS))).isEqualTo(8.0);
    // its first four blocks only: the window before them is gone, the engine recomputes all
    assertThat(index.prefixWeight(EP, keys(sharing(4)), 0)).isZero();
    assertThat(walked(index, keys(sharing(4)))).isZero();
  }

  /**
   * vLLM computes a prompt's last token whatever it holds ({@code max_cache_hit_length =
   * num_tokens - 1}), and its {@code SlidingWindowManager} looks for the window only among the
   * {@code max_length // block_size} blocks it may serve. For a prompt that ends exactly at a
   * block's end, a window completed by that last block does not count; the index found it there
   * and promised the whole prompt while the engine computed it from the start.
   */
  @Test
  void aWindowThatOnlyThePromptsLastBlockCompletesIsNoHit() throws Exception {
    KvBlockIndex index = conversationHeld();
    windowEvicts(index, 0, 6); // the window group keeps blocks 6 and 7 only
    long[] k = keys(TOKENS);
    int servable = KvBlockIndex.servableBlocks(k, TOKENS.length, BS);
    assertThat(servable).isEqualTo(7);
    // vLLM searches blocks 6..0: block 6 alone is no window, and block 0 is gone
    assertThat(index.prefixWeight(EP, k, servable, 0)).isZero();
    assertThat(walkedServable(index, k, servable)).isZero();
    // one token more: all eight blocks may be served, and blocks 6 and 7 are the window
    int[] longer = Arrays.copyOf(TOKENS, TOKENS.length + 1);
    long[] kl = keys(longer);
    int servableLonger = KvBlockIndex.servableBlocks(kl, longer.length, BS);
    assertThat(index.prefixWeight(EP, kl, servableLonger, 0)).isEqualTo(8.0);
    assertThat(walkedServable(index, kl, servableLonger)).isEqualTo(8.0);

    // the window group holds blocks 5 and 6 too: blocks 5 and 6 are a window within the seven
    KvBlockIndex held = conversationHeld();
    windowEvicts(held, 0, 5);
    assertThat(held.prefixWeight(EP, k, servable, 0)).isEqualTo(7.0);
    assertThat(walkedServable(held, k, servable)).isEqualTo(7.0);
  }

  /** What the scorer's walk finds for a prompt of which vLLM may serve {@code servable} blocks. */
  private static double walkedServable(KvBlockIndex index, long[] keys, int servable) {
    double[] out = new double[1];
    index.prefixWeights(keys, servable, new int[] {index.endpointView(EP).slot},
        new boolean[] {true}, 0, out, null);
    return out[0];
  }

  @Test
  void theHitEndsAtTheLastWindowTheGroupHolds() throws Exception {
    KvBlockIndex index = conversationHeld();
    windowEvicts(index, 0, 2);
    windowEvicts(index, 4, 6);
    // blocks 2 and 3 are a window: a prompt sharing six blocks hits four of them
    assertThat(index.prefixWeight(EP, keys(sharing(6)), 0)).isEqualTo(4.0);
    assertThat(walked(index, keys(sharing(6)))).isEqualTo(4.0);
    // one window block alone is not enough, unless it runs from block 0
    windowEvicts(index, 2, 3);
    assertThat(index.prefixWeight(EP, keys(sharing(6)), 0)).isZero();
    KvBlockIndex fromStart = conversationHeld();
    windowEvicts(fromStart, 1, 6);
    assertThat(fromStart.prefixWeight(EP, keys(sharing(5)), 0)).isEqualTo(1.0);
  }

  @Test
  void withoutAWindowGroupTheFullAttentionRunCountsAsBefore() throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(BS).build();
    index.apply(EP, KvEventDecoder.decode(stores("full_attention", 0, null)));
    assertThat(index.prefixWeight(EP, keys(sharing(4)), 0)).isEqualTo(4.0);
    // a group that names no window (an older engine) cannot be checked, and is not
    index.apply(EP, KvEventDecoder.decode(stores("sliding_window", 1, null)));
    windowEvicts(index, 0, 8);
    assertThat(index.prefixWeight(EP, keys(sharing(4)), 0)).isEqualTo(4.0);
  }

  @Test
  void aClearForgetsTheWindowGroup() throws Exception {
    KvBlockIndex index = conversationHeld();
    windowEvicts(index, 0, 8);
    index.apply(EP, KvEvent.AllBlocksCleared.INSTANCE);
    index.apply(EP, KvEventDecoder.decode(stores("full_attention", 0, null)));
    assertThat(index.prefixWeight(EP, keys(sharing(4)), 0)).isEqualTo(4.0);
  }

  @Test
  void speculativeBlocksCountForTheWindowGroupToo() throws Exception {
    KvBlockIndex index = conversationHeld();
    windowEvicts(index, 0, 8);
    long[] k = keys(sharing(4));
    index.recordSpeculative(EP, Arrays.copyOf(k, 4), 0);
    // routed there a moment ago: the engine computes those blocks for every group
    assertThat(index.prefixWeight(EP, k, 0)).isEqualTo(4.0);
  }

  /**
   * The offloading connector's store of the full-attention group's blocks {@code 0..to} in host
   * memory (vLLM's self-describing offload events carry the tokens of that group only).
   */
  private static KvEvent.BlockStored offloaded(int to) {
    return new KvEvent.BlockStored(hashes(0, to), false, 0, Arrays.copyOf(TOKENS, to * BS), BS,
        -1, Medium.CPU, null, null, 0, 0);
  }

  /**
   * vLLM's offloading connector looks up the blocks after the engine's own hit in host memory
   * and loads them back for every KV-cache group (its hybrid chunks hold each group's data), so
   * an offloaded block serves a window group's need as it serves the full-attention run. The
   * window check looked at the window group's GPU copies only, so an offloaded prefix whose GPU
   * copies were gone scored nothing on a hybrid model while the same blocks scored cpuWeight
   * each on a model without window groups.
   */
  @Test
  void anOffloadedBlockServesTheWindowGroupsToo() throws Exception {
    double cpu = 0.8;
    KvBlockIndex index = conversationHeld();
    index.apply(EP, offloaded(8));
    index.apply(EP, new KvEvent.BlockRemoved(hashes(0, 8), Medium.GPU, 1));
    index.apply(EP, new KvEvent.BlockRemoved(hashes(0, 8), Medium.GPU, 0));
    // held in host memory only: each block weighs cpuWeight, as without window groups
    assertThat(index.prefixWeight(EP, keys(sharing(4)), 0)).isCloseTo(4 * cpu, within(1e-9));
    assertThat(walked(index, keys(sharing(4)))).isCloseTo(4 * cpu, within(1e-9));
    assertThat(walked(index, keys(TOKENS))).isCloseTo(8 * cpu, within(1e-9));

    // the full-attention group still holds every block on GPU, the window group none, and
    // host memory the first three: the engine loads those three back for the window group
    KvBlockIndex partly = conversationHeld();
    partly.apply(EP, offloaded(3));
    windowEvicts(partly, 0, 8);
    assertThat(partly.prefixWeight(EP, keys(sharing(6)), 0)).isEqualTo(3.0);
    assertThat(walked(partly, keys(sharing(6)))).isEqualTo(3.0);
  }

  /**
   * vLLM's offloading connector describes the host-memory copies of full-attention groups only:
   * a sliding-window group's copy is stored as a placeholder (no tokens, skipped), and when it
   * goes, its removal names the chunk's last engine hash with the window group's
   * {@code group_idx} (offloading/events.py, {@code _take_removed_event}). That removal cleared
   * the host-memory copy the full-attention group still holds, and cut the offloaded prefix
   * there.
   */
  @Test
  void aRemovalFromAGroupThatStoredNothingOffloadedLeavesTheOffloadedCopy() throws Exception {
    KvBlockIndex index = conversationHeld();
    index.apply(EP, offloaded(8));
    index.apply(EP, new KvEvent.BlockRemoved(hashes(0, 8), Medium.GPU, 1));
    index.apply(EP, new KvEvent.BlockRemoved(hashes(0, 8), Medium.GPU, 0));
    index.apply(EP, new KvEvent.BlockRemoved(hashes(3, 4), Medium.CPU, 1));
    assertThat(index.prefixWeight(EP, keys(TOKENS), 0)).isCloseTo(8 * 0.8, within(1e-9));
    assertThat(index.metrics().unknownRemovals()).isEqualTo(1);
    // the full-attention group's own removal still takes its copy away
    index.apply(EP, new KvEvent.BlockRemoved(hashes(3, 4), Medium.CPU, 0));
    assertThat(index.prefixWeight(EP, keys(TOKENS), 0)).isCloseTo(3 * 0.8, within(1e-9));
  }

  @Test
  void theKindAndWindowAreDecodedFromTheArrayShapeToo() throws Exception {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.7e9).packArrayHeader(1);
      p.packArrayHeader(12).packString("BlockStored").packArrayHeader(1).packLong(7).packNil()
          .packArrayHeader(1).packInt(9).packInt(1).packNil().packString("GPU").packNil()
          .packNil().packInt(3).packString("sliding_window").packInt(128);
      KvEvent.BlockStored s = (KvEvent.BlockStored) KvEventDecoder.decode(p.toByteArray())
          .events().get(0);
      assertThat(s.slidingWindow()).isEqualTo(128);
    }
    assertThat(((KvEvent.BlockStored) KvEventDecoder.decode(stores("full_attention", 0, 128))
        .events().get(0)).slidingWindow()).isZero();
    assertThat(((KvEvent.BlockStored) KvEventDecoder.decode(stores("sliding_window_mla", 2, 64))
        .events().get(0)).slidingWindow()).isEqualTo(64);
  }

  /** Blocks {@code 0..blocks} of {@code tokens} stored by group {@code group} (16 tokens each). */
  private static KvEvent.BlockStored store16(int[] tokens, int blocks, long firstHash, int group,
      int window) {
    long[] h = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      h[i] = firstHash + i;
    }
    return new KvEvent.BlockStored(h, false, 0, Arrays.copyOf(tokens, blocks * 16), 16, -1,
        Medium.GPU, null, null, group, window);
  }

  @Test
  void theScorerPrefersTheEndpointWhoseWindowGroupCanServeItsPrefix() {
    AtomicLong now = new AtomicLong(1_000_000_000L);
    KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();
    int[] p = PrecisePrefixCacheScorerTest.prompt(7, 16 * 8 + 5);
    String far = "10.0.0.1:8000";
    String near = "10.0.0.2:8000";
    // "far" holds six blocks in its full-attention group, but its window group (33 tokens: the
    // two blocks before a hit's end) has evicted all of them; "near" holds three in both
    index.apply(far, KvEventBatch.of(0, List.of(store16(p, 6, 100, 0, 0),
        store16(p, 6, 100, 1, 33))));
    long[] evicted = {100, 101, 102, 103, 104, 105};
    index.apply(far, KvEventBatch.of(0, List.of(new KvEvent.BlockRemoved(evicted, Medium.GPU,
        1))));
    index.apply(near, KvEventBatch.of(0, List.of(store16(p, 3, 200, 0, 0),
        store16(p, 3, 200, 1, 33))));
    try (Router router = Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
        .service(KvBlockIndex.class, index)
        .configYaml(PrecisePrefixCacheScorerTest.yaml("precise-prefix-cache-scorer"), "t")
        .ticker(now::get).randomSeed(5).build()) {
      assertThat(router.route(PrecisePrefixCacheScorerTest.request(p)).primary().id())
          .isEqualTo(near);
    }
  }
}
