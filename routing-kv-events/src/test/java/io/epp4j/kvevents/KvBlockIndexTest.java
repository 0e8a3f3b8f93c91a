package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import org.junit.jupiter.api.Test;

class KvBlockIndexTest {

  static int[] tokens(int from, int count) {
    int[] t = new int[count];
    for (int i = 0; i < count; i++) {
      t[i] = from + i;
    }
    return t;
  }

  static long[] keys(int[] tokens, int bs) {
    return BlockKeys.chain(BlockKeys.seed("", null, null), tokens, bs, Integer.MAX_VALUE);
  }

  /**
   * The resync count moves once the drop is done, never before: a reader that sees it moved
   * finds the blocks gone. A resync held up by another writer is not counted while it waits.
   */
  @Test
  void aResyncIsCountedOnlyOnceItsBlocksAreGone() throws Exception {
    KvBlockIndex index = KvBlockIndex.create();
    int[] prompt = tokens(700, 32);
    long[] k = keys(prompt, 16);
    index.apply("a", KvEvent.BlockStored.of(new long[] {1, 2}, null, prompt, 16));
    java.util.concurrent.CountDownLatch inside = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
    index.addDropListener(new KvBlockIndex.DropListener() {
      @Override
      public void dropped(String endpointId, long key) {
        inside.countDown();
        try { // holds the index's write lock, inside b's batch
          release.await(20, java.util.concurrent.TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }

      @Override
      public void cleared(String endpointId) {}
    });
    Thread writer = new Thread(() -> index.apply("b", KvEventBatch.of(1.0, List.of(
        KvEvent.BlockStored.of(new long[] {9}, null, tokens(900, 16), 16),
        KvEvent.BlockRemoved.of(9L)))));
    writer.start();
    assertThat(inside.await(20, java.util.concurrent.TimeUnit.SECONDS)).isTrue();
    Thread resync = new Thread(() -> index.resync("a"));
    resync.start();
    long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
    while (resync.getState() != Thread.State.BLOCKED && System.nanoTime() < deadline) {
      Thread.sleep(1);
    }
    assertThat(resync.getState()).as("the resync waits for the write lock").isEqualTo(
        Thread.State.BLOCKED);
    // waiting, it has dropped nothing, and so counts nothing yet
    assertThat(index.prefixWeight("a", k, 0)).isEqualTo(2);
    assertThat(index.metrics().resyncs()).isZero();
    release.countDown();
    resync.join(20_000);
    writer.join(20_000);
    assertThat(index.metrics().resyncs()).isEqualTo(1);
    assertThat(index.prefixWeight("a", k, 0)).isZero();
  }

  /**
   * A resync counts what it dropped: one of an endpoint the index never heard of, or of one whose
   * blocks are gone already, drops nothing and is not counted; nor is a restart that finds none.
   */
  @Test
  void aResyncThatDropsNothingIsNotCounted() {
    KvBlockIndex index = KvBlockIndex.create();
    index.resync("never-seen");
    index.engineRestarted("never-seen");
    assertThat(index.metrics().resyncs()).isZero();
    assertThat(index.trackedEndpoints()).doesNotContain("never-seen");
    int[] prompt = tokens(800, 16);
    index.apply("a", KvEvent.BlockStored.of(new long[] {1}, null, prompt, 16));
    index.resync("a");
    assertThat(index.metrics().resyncs()).isEqualTo(1);
    index.resync("a"); // gone already
    index.engineRestarted("a");
    assertThat(index.metrics().resyncs()).isEqualTo(1);
    index.apply("a", KvEvent.BlockStored.of(new long[] {1}, null, prompt, 16));
    index.engineRestarted("a");
    assertThat(index.metrics().resyncs()).isEqualTo(2);
    assertThat(index.blockCount("a")).isZero();
  }

  /** A hash repeated within one event over different blocks: the clear leaves nothing held. */
  @Test
  void aHashRepeatedInOneEventLeavesNothingBehindAClear() {
    KvBlockIndex index = KvBlockIndex.create();
    int[] prompt = tokens(100, 64);
    long[] k = keys(prompt, 16);
    index.apply("a", KvEvent.BlockStored.of(new long[] {1, 2, 1, 2}, null, prompt, 16));
    assertThat(index.metrics().reusedHashes()).isEqualTo(2);
    index.apply("a", KvEvent.AllBlocksCleared.INSTANCE);
    assertThat(index.blockCount("a")).isZero();
    assertThat(index.heldKeys()).isZero();
    assertThat(index.prefixWeight("a", k, 0)).isZero();
  }

  /** A block naming its own hash as parent: removing the hash leaves nothing held. */
  @Test
  void aBlockThatIsItsOwnParentLeavesNothingBehindItsRemoval() {
    KvBlockIndex index = KvBlockIndex.create();
    int[] prompt = tokens(100, 32);
    index.apply("a", KvEvent.BlockStored.of(new long[] {7}, null, Arrays.copyOf(prompt, 16), 16));
    index.apply("a", KvEvent.BlockStored.of(new long[] {7}, 7L,
        Arrays.copyOfRange(prompt, 16, 32), 16));
    index.apply("a", KvEvent.BlockRemoved.of(7L));
    assertThat(index.blockCount("a")).isZero();
    assertThat(index.heldKeys()).isZero();
  }

  /** One hash stored again and again with other tokens stays within the block budget. */
  @Test
  void aHashReusedForOtherContentCannotGrowTheIndexPastItsBudget() {
    KvBlockIndex index = KvBlockIndex.builder().maxBlocksPerEndpoint(4).build();
    for (int i = 0; i < 10_000; i++) {
      index.apply("a", KvEvent.BlockStored.of(new long[] {1}, null, tokens(i * 16, 16), 16));
    }
    assertThat(index.blockCount("a")).isEqualTo(1);
    assertThat(index.heldKeys()).isEqualTo(1);
    assertThat(index.metrics().reusedHashes()).isEqualTo(9_999);
    index.removeEndpoint("a");
    assertThat(index.heldKeys()).isZero();
  }

  @Test
  void storedChainsMatchFromBlockZeroAndRemovalsCutTheRun() {
    KvBlockIndex index = KvBlockIndex.create();
    int[] prompt = tokens(100, 64); // 4 blocks of 16
    index.apply("a", KvEvent.BlockStored.of(new long[] {-1L, 2}, null,
        Arrays.copyOfRange(prompt, 0, 32), 16));
    index.apply("a", KvEvent.BlockStored.of(new long[] {3}, 2L,
        Arrays.copyOfRange(prompt, 32, 48), 16));
    long[] k = keys(prompt, 16);
    assertThat(index.prefixWeight("a", k, 0)).isEqualTo(3.0);
    assertThat(index.prefixWeight("b", k, 0)).isZero();
    index.apply("a", KvEvent.BlockRemoved.of(2L));
    assertThat(index.prefixWeight("a", k, 0)).isEqualTo(1.0); // block 2 alone does not count
    assertThat(index.blockCount("a")).isEqualTo(2);
    index.apply("a", KvEvent.AllBlocksCleared.INSTANCE);
    assertThat(index.prefixWeight("a", k, 0)).isZero();
    assertThat(index.blockCount("a")).isZero();
  }

  @Test
  void dropListenersHearOnlyWhatTheEngineReportsGone() {
    KvBlockIndex index = KvBlockIndex.create();
    List<String> heard = new ArrayList<>();
    KvBlockIndex.DropListener l = new KvBlockIndex.DropListener() {
      @Override
      public void dropped(String endpointId, long key) {
        heard.add(endpointId + ":" + key);
      }

      @Override
      public void cleared(String endpointId) {
        heard.add(endpointId + ":all");
      }
    };
    index.addDropListener(l);
    int[] prompt = tokens(500, 32);
    long[] k = keys(prompt, 16);
    index.apply("a", new KvEvent.BlockStored(new long[] {1, 2}, false, 0, prompt, 16, -1,
        Medium.GPU, null, null));
    index.apply("a", new KvEvent.BlockStored(new long[] {1, 2}, false, 0, prompt, 16, -1,
        Medium.CPU, null, null));
    index.apply("a", KvEvent.BlockRemoved.of(2L)); // still offloaded: not gone
    assertThat(heard).isEmpty();
    index.apply("a", new KvEvent.BlockRemoved(new long[] {2}, Medium.CPU));
    assertThat(heard).containsExactly("a:" + k[1]);
    index.resync("a"); // the index lost track; the engine said nothing
    assertThat(heard).hasSize(1);
    index.apply("b", KvEvent.AllBlocksCleared.INSTANCE);
    assertThat(heard).containsExactly("a:" + k[1], "b:all");
    index.removeDropListener(l);
    index.apply("b", KvEvent.AllBlocksCleared.INSTANCE);
    assertThat(heard).hasSize(2);
  }

  /**
   * What the index drops on its own account (a resync, an overflow of the endpoint's budget) goes
   * to the listeners' {@code lostTrack}: every key it held there, and nothing as dropped.
   */
  @Test
  void dropListenersAreHandedWhatTheIndexLosesTrackOf() {
    KvBlockIndex index = KvBlockIndex.builder().maxBlocksPerEndpoint(4).build();
    List<String> dropped = new ArrayList<>();
    List<long[]> lost = new ArrayList<>();
    index.addDropListener(new KvBlockIndex.DropListener() {
      @Override
      public void dropped(String endpointId, long key) {
        dropped.add(endpointId);
      }

      @Override
      public void cleared(String endpointId) {
        dropped.add(endpointId);
      }

      @Override
      public void lostTrack(String endpointId, long[] keys) {
        assertThat(endpointId).isEqualTo("a");
        lost.add(keys);
      }
    });
    int[] prompt = tokens(900, 48);
    index.apply("a", KvEvent.BlockStored.of(new long[] {1, 2, 3}, null, prompt, 16));
    index.resync("a");
    assertThat(lost).hasSize(1);
    assertThat(lost.get(0)).containsExactlyInAnyOrder(keys(prompt, 16));
    index.resync("a"); // nothing left to lose
    assertThat(lost).hasSize(1);
    long[] more = new long[5];
    for (int i = 0; i < 5; i++) { // the fifth overflows the budget of 4
      index.apply("a", KvEvent.BlockStored.of(new long[] {i + 10}, null, tokens(i * 100, 16), 16));
      more[i] = keys(tokens(i * 100, 16), 16)[0];
    }
    assertThat(lost).hasSize(2);
    assertThat(lost.get(1)).containsExactlyInAnyOrder(Arrays.copyOf(more, 4));
    assertThat(dropped).isEmpty();
  }

  @Test
  void unknownParentIsAnOrphanAndIsDropped() {
    KvBlockIndex index = KvBlockIndex.create();
    boolean ok = index.apply("a", KvEvent.BlockStored.of(new long[] {9}, 8L, tokens(0, 16), 16));
    assertThat(ok).isFalse();
    assertThat(index.metrics().orphanBlocks()).isEqualTo(1);
    assertThat(index.blockCount("a")).isZero();
  }

  @Test
  void offloadedBlocksWeighLessAndSurviveGpuEviction() {
    KvBlockIndex index = KvBlockIndex.create();
    int[] prompt = tokens(7, 32);
    index.apply("a", KvEvent.BlockStored.of(new long[] {1, 2}, null, prompt, 16));
    index.apply("a", new KvEvent.BlockStored(new long[] {1, 2}, false, 0, prompt, 16, -1,
        Medium.CPU, null, null));
    index.apply("a", new KvEvent.BlockRemoved(new long[] {2}, Medium.GPU));
    long[] k = keys(prompt, 16);
    assertThat(index.tiers("a", k[1])).containsExactly(Medium.CPU);
    assertThat(index.prefixWeight("a", k, 0)).isEqualTo(1.8);
    index.apply("a", new KvEvent.BlockRemoved(new long[] {2}, Medium.CPU));
    assertThat(index.prefixWeight("a", k, 0)).isEqualTo(1.0);
    assertThat(index.blockCount("a")).isEqualTo(1);
  }

  @Test
  void loraAndSaltSeparateIdenticalTokens() {
    KvBlockIndex index = KvBlockIndex.create();
    int[] prompt = tokens(1, 16);
    index.apply("a", new KvEvent.BlockStored(new long[] {1}, false, 0, prompt, 16, 3,
        Medium.GPU, "sql", "tenant-1"));
    long withBoth = BlockKeys.chain(BlockKeys.seed("", "sql", "tenant-1"), prompt, 16, 9)[0];
    assertThat(index.prefixWeight("a", new long[] {withBoth}, 0)).isEqualTo(1.0);
    assertThat(index.prefixWeight("a", keys(prompt, 16), 0)).isZero();
    long noSalt = BlockKeys.chain(BlockKeys.seed("", "sql", null), prompt, 16, 9)[0];
    assertThat(index.prefixWeight("a", new long[] {noSalt}, 0)).isZero();
  }

  @Test
  void speculativeEntriesCountUntilTheirTtlAndYieldToRealOnes() {
    KvBlockIndex index = KvBlockIndex.builder().speculativeTtl(Duration.ofSeconds(2)).build();
    long[] k = keys(tokens(0, 48), 16);
    index.recordSpeculative("a", k, 1_000);
    assertThat(index.prefixWeight("a", k, 1_000)).isEqualTo(3.0);
    assertThat(index.prefixWeight("a", k, 1_000 + 2_000_000_000L)).isZero();
    index.purgeSpeculative(1_000 + 2_000_000_000L);
    assertThat(index.metrics().speculativeBlocks()).isEqualTo(3);
  }

  @Test
  void exceedingTheBlockBudgetClearsTheEndpoint() {
    KvBlockIndex index = KvBlockIndex.builder().maxBlocksPerEndpoint(4).build();
    for (int i = 0; i < 5; i++) {
      index.apply("a", KvEvent.BlockStored.of(new long[] {i + 1}, null, tokens(i * 100, 16), 16));
    }
    assertThat(index.metrics().overflows()).isEqualTo(1);
    assertThat(index.blockCount("a")).isEqualTo(1);
  }

  @Test
  void aPublisherStoringFarMoreThanTheBudgetStaysBoundedCountedAndIsLoggedOnce() {
    // an engine that stores without ever reporting evictions (or a cache larger than the
    // budget): each time it passes the budget its entries are dropped, counted every time,
    // and the operator is told once which endpoint and which knob
    try (KvEventSubscriberReliabilityTest.LogCapture log =
        new KvEventSubscriberReliabilityTest.LogCapture(KvBlockIndex.class)) {
      List<java.util.logging.LogRecord> records = log.records;
      KvBlockIndex index = KvBlockIndex.builder().maxBlocksPerEndpoint(4).build();
      for (int i = 0; i < 40; i++) {
        index.apply("a", KvEvent.BlockStored.of(new long[] {i + 1}, null, tokens(i * 100, 16),
            16));
        assertThat(index.blockCount("a")).isLessThanOrEqualTo(4);
      }
      index.apply("b", KvEvent.BlockStored.of(new long[] {1}, null, tokens(0, 16), 16));

      assertThat(index.metrics().overflows()).isEqualTo(9); // at stores 5, 9, ..., 37
      List<String> warnings = records.stream()
          .filter(r -> r.getLevel() == java.util.logging.Level.WARNING)
          .map(java.util.logging.LogRecord::getMessage).toList();
      assertThat(warnings).hasSize(1);
      assertThat(warnings.get(0)).contains("endpoint a ").contains("maxBlocksPerEndpoint (4)");
    }
  }

  // ------------------------------------------------------------------ randomized vs a model

  /** Reference: per endpoint, engine hash → (full token prefix, tiers). */
  record RefBlock(List<Integer> prefix, EnumSet<Medium> tiers) {}

  @Test
  void randomEventStreamsAgreeWithAReferenceModel() {
    Random r = new Random(11);
    int bs = 4;
    for (int round = 0; round < 40; round++) {
      KvBlockIndex index = KvBlockIndex.create();
      List<String> eps = List.of("a", "b", "c");
      Map<String, Map<Long, RefBlock>> ref = new HashMap<>();
      eps.forEach(e -> ref.put(e, new HashMap<>()));
      long nextHash = Long.MAX_VALUE - 50; // cross the signed boundary
      for (int op = 0; op < 400; op++) {
        String ep = eps.get(r.nextInt(eps.size()));
        Map<Long, RefBlock> m = ref.get(ep);
        int kind = r.nextInt(20);
        if (kind < 11) {
          // store a chain of 1..3 blocks under a random live parent or at the root
          List<Long> live = new ArrayList<>(m.keySet());
          boolean root = live.isEmpty() || r.nextInt(3) == 0;
          boolean orphan = !root && r.nextInt(15) == 0;
          long parent = root ? 0 : orphan ? 12345 : live.get(r.nextInt(live.size()));
          List<Integer> prefix = root || orphan ? new ArrayList<>()
              : new ArrayList<>(m.get(parent).prefix());
          int blocks = 1 + r.nextInt(3);
          long[] hashes = new long[blocks];
          int[] toks = new int[blocks * bs];
          for (int i = 0; i < toks.length; i++) {
            toks[i] = r.nextInt(3); // tiny alphabet: endpoints share prefixes
          }
          List<List<Integer>> prefixes = new ArrayList<>();
          boolean duplicate = false;
          for (int b = 0; b < blocks; b++) {
            hashes[b] = nextHash++;
            for (int i = 0; i < bs; i++) {
              prefix.add(toks[b * bs + i]);
            }
            List<Integer> p = List.copyOf(prefix);
            prefixes.add(p);
            for (RefBlock rb : m.values()) {
              duplicate |= rb.prefix().equals(p); // vLLM never stores a prefix twice
            }
          }
          if (duplicate) {
            continue;
          }
          index.apply(ep, new KvEvent.BlockStored(hashes, !root, parent, toks, bs, -1,
              Medium.GPU, null, null));
          if (!orphan) {
            for (int b = 0; b < blocks; b++) {
              m.put(hashes[b], new RefBlock(prefixes.get(b), EnumSet.of(Medium.GPU)));
            }
          }
        } else if (kind < 13 && !m.isEmpty()) {
          // offload a live GPU block to CPU (same engine hash)
          List<Long> live = new ArrayList<>(m.keySet());
          long h = live.get(r.nextInt(live.size()));
          RefBlock rb = m.get(h);
          List<Integer> p = rb.prefix();
          int[] own = new int[bs];
          for (int i = 0; i < bs; i++) {
            own[i] = p.get(p.size() - bs + i);
          }
          // find the parent hash by prefix
          long parentHash = 0;
          boolean hasParent = p.size() > bs;
          boolean found = !hasParent;
          for (Map.Entry<Long, RefBlock> en : m.entrySet()) {
            if (hasParent && en.getValue().prefix().equals(p.subList(0, p.size() - bs))) {
              parentHash = en.getKey();
              found = true;
            }
          }
          if (!found) {
            continue;
          }
          index.apply(ep, new KvEvent.BlockStored(new long[] {h}, hasParent, parentHash, own, bs,
              -1, Medium.CPU, null, null));
          rb.tiers().add(Medium.CPU);
        } else if (kind < 19 && !m.isEmpty()) {
          List<Long> live = new ArrayList<>(m.keySet());
          long h = live.get(r.nextInt(live.size()));
          Medium med = r.nextInt(3) == 0 ? Medium.CPU : Medium.GPU;
          index.apply(ep, new KvEvent.BlockRemoved(new long[] {h}, med));
          RefBlock rb = m.get(h);
          rb.tiers().remove(med);
          if (rb.tiers().isEmpty()) {
            m.remove(h);
          }
        } else if (kind == 19) {
          index.apply(ep, KvEvent.AllBlocksCleared.INSTANCE);
          m.clear();
        }
      }
      // queries: prefixes of live blocks, extended randomly
      for (int q = 0; q < 200; q++) {
        String src = eps.get(r.nextInt(eps.size()));
        List<Long> live = new ArrayList<>(ref.get(src).keySet());
        List<Integer> base = live.isEmpty() ? List.of()
            : ref.get(src).get(live.get(r.nextInt(live.size()))).prefix();
        int[] req = new int[base.size() + bs * r.nextInt(3)];
        for (int i = 0; i < req.length; i++) {
          req[i] = i < base.size() ? base.get(i) : r.nextInt(3);
        }
        long[] k = keys(req, bs);
        for (String ep : eps) {
          double expected = 0;
          for (int b = 0; b < k.length; b++) {
            List<Integer> p = new ArrayList<>();
            for (int i = 0; i < (b + 1) * bs; i++) {
              p.add(req[i]);
            }
            Set<Medium> tiers = EnumSet.noneOf(Medium.class);
            for (RefBlock rb : ref.get(ep).values()) {
              if (rb.prefix().equals(p)) {
                tiers.addAll(rb.tiers());
              }
            }
            if (tiers.isEmpty()) {
              break;
            }
            expected += tiers.contains(Medium.GPU) ? 1.0 : 0.8;
          }
          assertThat(index.prefixWeight(ep, k, 0))
              .as("round %d query %d endpoint %s", round, q, ep).isCloseTo(expected,
                  org.assertj.core.data.Offset.offset(1e-9));
        }
      }
      for (String ep : eps) {
        assertThat(index.blockCount(ep)).isEqualTo(ref.get(ep).size());
      }
    }
  }

  @Test
  void theSharedWalkReportsRealRunsAndASpeculativeRecordSkipsThemOnly() {
    KvBlockIndex index = KvBlockIndex.create();
    int[] prompt = tokens(11, 96);
    long[] k = keys(prompt, 16); // 6 blocks
    index.apply("a", KvEvent.BlockStored.of(new long[] {1, 2, 3}, null,
        Arrays.copyOfRange(prompt, 0, 48), 16)); // a holds blocks 0-2 for real
    index.recordSpeculative("b", Arrays.copyOf(k, 2), 1_000); // b: blocks 0-1, speculatively
    int[] slots = {index.endpointView("a").slot, index.endpointView("b").slot};
    boolean[] use = {true, true};
    double[] out = new double[2];
    int[] real = {-7, -7};
    index.prefixWeights(k, slots, use, 2_000, out, real);
    assertThat(out).containsExactly(3.0, 2.0);
    assertThat(real).as("speculative holdings are not real ones").containsExactly(3, 0);

    index.recordSpeculative("a", k, real[0], 2_000);
    assertThat(index.prefixWeight("a", k, 3_000)).isEqualTo(6.0);
    assertThat(index.tiers("a", k[0])).containsExactly(Medium.GPU);
    assertThat(index.tiers("a", k[3])).as("blocks 3-5 are speculative only").isEmpty();
    index.recordSpeculative("a", k, 99, 2_000); // a count past the chain records nothing
    index.recordSpeculative("c", k, 6, 2_000); // nothing left, but the endpoint becomes known
    assertThat(index.endpointView("c")).isNotNull();
    assertThat(index.prefixWeight("c", k, 3_000)).isZero();
  }

  @Test
  void anEndpointPastTheInlineSlotsKeepsMatchingAfterEveryOtherStopped() {
    KvBlockIndex index = KvBlockIndex.create();
    int[] prompt = tokens(13, 96);
    long[] k = keys(prompt, 16); // 6 blocks
    int n = HolderTable.INLINE_SLOTS + 2;
    for (int e = 0; e < n; e++) {
      int held = e == n - 1 ? 5 : e == n - 2 ? 2 : 1; // the widest slot holds the most
      long[] hashes = new long[held];
      for (int b = 0; b < held; b++) {
        hashes[b] = 100L * e + b;
      }
      index.apply("e" + e, KvEvent.BlockStored.of(hashes, null,
          Arrays.copyOfRange(prompt, 0, held * 16), 16));
    }
    int[] slots = new int[n];
    boolean[] use = new boolean[n];
    for (int e = 0; e < n; e++) {
      slots[e] = index.endpointView("e" + e).slot;
      use[e] = true;
    }
    assertThat(slots[n - 1]).isGreaterThanOrEqualTo(HolderTable.INLINE_SLOTS);
    double[] out = new double[n];
    index.prefixWeights(k, slots, use, 0, out);
    assertThat(out[n - 1]).isEqualTo(5.0);
    assertThat(out[n - 2]).isEqualTo(2.0);
    assertThat(out[0]).isEqualTo(1.0);
  }

  @Test
  void endpointsBeyondTheInlineSlotsKeepEverySemantic() {
    KvBlockIndex index = KvBlockIndex.create();
    int[] prompt = tokens(7, 64);
    long[] k = keys(prompt, 16);
    int n = HolderTable.INLINE_SLOTS + 8;
    for (int e = 0; e < n; e++) {
      // endpoint e holds the first 1 + e % 4 blocks, on GPU; odd endpoints offload block 0 too
      int held = 1 + e % 4;
      long[] hashes = new long[held];
      for (int b = 0; b < held; b++) {
        hashes[b] = 1000L * e + b;
      }
      index.apply("e" + e, KvEvent.BlockStored.of(hashes, null,
          Arrays.copyOfRange(prompt, 0, held * 16), 16));
      if (e % 2 == 1) {
        index.apply("e" + e, new KvEvent.BlockStored(new long[] {1000L * e}, false, 0,
            Arrays.copyOfRange(prompt, 0, 16), 16, -1, Medium.CPU, null, null));
        index.apply("e" + e, KvEvent.BlockRemoved.of(1000L * e)); // GPU copy gone
      }
    }
    int[] slots = new int[n];
    boolean[] use = new boolean[n];
    double[] out = new double[n];
    for (int e = 0; e < n; e++) {
      slots[e] = index.endpointView("e" + e).slot;
      use[e] = true;
    }
    index.prefixWeights(k, slots, use, 0, out);
    for (int e = 0; e < n; e++) {
      double expected = (e % 2 == 1 ? 0.8 : 1.0) + e % 4;
      assertThat(index.prefixWeight("e" + e, k, 0)).as("endpoint %d", e)
          .isCloseTo(expected, org.assertj.core.data.Offset.offset(1e-9));
      assertThat(out[e]).as("endpoint %d, shared walk", e)
          .isCloseTo(expected, org.assertj.core.data.Offset.offset(1e-9));
    }
    String wide = "e" + (n - 1); // slot n - 1, odd: block 0 on CPU only
    assertThat(index.tiers(wide, k[0])).containsExactly(Medium.CPU);
    index.apply(wide, new KvEvent.BlockRemoved(new long[] {1000L * (n - 1)}, Medium.CPU));
    assertThat(index.prefixWeight(wide, k, 0)).isZero();
    assertThat(index.prefixWeight("e" + (n - 2), k, 0)).isEqualTo(3.0); // neighbours untouched
    index.resync("e" + (n - 2));
    assertThat(index.prefixWeight("e" + (n - 2), k, 0)).isZero();
    assertThat(index.blockCount("e" + (n - 2))).isZero();
    assertThat(index.prefixWeight("e" + (n - 4), k, 0)).isEqualTo(1.0);
  }

  @Test
  void longLongMapBehavesLikeAHashMap() {
    Random r = new Random(3);
    LongLongMap m = new LongLongMap(4);
    Map<Long, Long> ref = new HashMap<>();
    long[] out = new long[1];
    for (int i = 0; i < 200_000; i++) {
      long k = r.nextInt(5000) - 2500; // includes 0
      switch (r.nextInt(3)) {
        case 0 -> {
          long v = r.nextLong();
          m.put(k, v);
          ref.put(k, v);
        }
        case 1 -> assertThat(m.remove(k)).isEqualTo(ref.remove(k) != null);
        default -> {
          boolean has = m.get(k, out);
          assertThat(has).isEqualTo(ref.containsKey(k));
          if (has) {
            assertThat(out[0]).isEqualTo(ref.get(k));
          }
        }
      }
      assertThat(m.size()).isEqualTo(ref.size());
    }
  }

  @Test
  void readersSeeConsistentPrefixesWhileEventsApply() throws Exception {
    KvBlockIndex index = KvBlockIndex.create();
    int[] stable = tokens(5_000, 16 * 8);
    index.apply("a", KvEvent.BlockStored.of(new long[] {1, 2, 3, 4, 5, 6, 7, 8}, null, stable, 16));
    long[] stableKeys = keys(stable, 16);
    FakeEngine engine = new FakeEngine(9, 16);
    java.util.concurrent.atomic.AtomicBoolean done = new java.util.concurrent.atomic.AtomicBoolean();
    java.util.concurrent.atomic.AtomicReference<Throwable> failure =
        new java.util.concurrent.atomic.AtomicReference<>();
    List<Thread> readers = new ArrayList<>();
    for (int r = 0; r < 2; r++) {
      Thread t = new Thread(() -> {
        try {
          while (!done.get()) {
            // blocks of "a" that no event touches must always be seen whole
            if (index.prefixWeight("a", stableKeys, 0) != 8.0) {
              throw new AssertionError("stable prefix seen partially");
            }
            index.prefixWeight("b", stableKeys, 0);
          }
        } catch (Throwable e) {
          failure.set(e);
        }
      });
      t.setDaemon(true);
      t.start();
      readers.add(t);
    }
    KvBlockIndex expected = KvBlockIndex.create();
    try {
      for (int i = 0; i < 3_000; i++) {
        KvEventBatch batch = engine.nextBatch(0);
        index.apply("b", batch);
        expected.apply("b", batch);
        if (i % 500 == 0) {
          index.apply("b", KvEvent.AllBlocksCleared.INSTANCE);
          expected.apply("b", KvEvent.AllBlocksCleared.INSTANCE);
        }
      }
    } finally {
      done.set(true); // the readers stop even when the writer fails
    }
    for (Thread t : readers) {
      t.join(10_000); // a reader that does not stop fails the test instead of hanging it
      assertThat(t.isAlive()).as("reader still running after the writer finished").isFalse();
    }
    assertThat(failure.get()).isNull();
    assertThat(index.blockCount("b")).isEqualTo(expected.blockCount("b"));
    for (int[] p : engine.prompts) {
      long[] k = keys(p, 16);
      assertThat(index.prefixWeight("b", k, 0)).isEqualTo(expected.prefixWeight("b", k, 0));
    }
  }

  @Test
  void anApplyRacingTheRemovalOfItsEndpointLeavesNoHolderBitsBehind() throws Exception {
    KvBlockIndex index = KvBlockIndex.create();
    java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
    Thread remover = new Thread(() -> {
      while (!stop.get()) {
        index.removeEndpoint("x");
      }
    }, "test-remover");
    remover.start();
    long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(2);
    try {
      for (int i = 0; i < 300_000 && System.nanoTime() < deadline; i++) {
        int[] tokens = new int[16];
        tokens[0] = i;
        index.apply("x", KvEventBatch.of(0, List.of(
            KvEvent.BlockStored.of(new long[] {i + 1}, null, tokens, 16))));
      }
    } finally {
      stop.set(true);
      remover.join(10_000);
    }
    assertThat(remover.isAlive()).as("remover finished").isFalse();
    // whatever the interleaving, forgetting the endpoint forgets every block written for it: a
    // write into an endpoint already taken out of the index would hold its key forever
    index.removeEndpoint("x");
    assertThat(index.heldKeys()).isZero();
  }
}
