package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class EndpointBlocksTest {

  /**
   * The obvious model: a list ordered most recent first. Recording a chain touches its blocks
   * from the last to the first (so the head ends most recent, the tail is evicted first); a
   * lookup credits the strict prefix that is present and touches it the same way.
   */
  static final class Model {
    final LinkedList<Long> order = new LinkedList<>();
    int capacity;

    Model(int capacity) {
      this.capacity = capacity;
    }

    void touch(long key) {
      if (!order.remove(key)) {
        order.addFirst(key);
        if (order.size() > capacity) {
          order.removeLast();
        }
        return;
      }
      order.addFirst(key);
    }

    void record(long[] chain) {
      for (int i = chain.length - 1; i >= 0; i--) {
        touch(chain[i]);
      }
    }

    int match(long[] chain) {
      int m = 0;
      while (m < chain.length && order.contains(chain[m])) {
        m++;
      }
      for (int i = m - 1; i >= 0; i--) {
        touch(chain[i]);
      }
      return m;
    }

    void setCapacity(int c) {
      capacity = c;
      while (order.size() > capacity) {
        order.removeLast();
      }
    }
  }

  /** Asserts that the store's keys, most recent first, are the model's; returns them. */
  static List<Long> assertSameOrder(EndpointBlocks blocks, Model model, int seed, int op) {
    List<Long> actual = new ArrayList<>();
    for (long k : blocks.keysMostRecentFirst()) {
      actual.add(k);
    }
    assertThat(actual).as("seed %d op %d", seed, op).isEqualTo(model.order);
    return actual;
  }

  /** Chains over a small alphabet of prefixes, so that requests share heads and diverge. */
  static long[] chain(SplittableRandom rnd, int maxLen) {
    int len = 1 + rnd.nextInt(maxLen);
    long[] c = new long[len];
    long h = 17;
    for (int i = 0; i < len; i++) {
      // few choices per position: lots of sharing; position mixed in: hashes differ per depth
      h = h * 0x9E3779B97F4A7C15L + rnd.nextInt(i < 3 ? 2 : 4) + 1;
      h ^= h >>> 29;
      c[i] = h;
    }
    return c;
  }

  @Test
  void randomizedAgainstReferenceModel() {
    for (int seed = 0; seed < 40; seed++) {
      SplittableRandom rnd = new SplittableRandom(seed);
      int cap = 1 + rnd.nextInt(64);
      EndpointBlocks blocks = new EndpointBlocks(cap);
      Model model = new Model(cap);
      java.util.Set<Long> firstBlocks = new java.util.HashSet<>();
      for (int op = 0; op < 3000; op++) {
        long[] c = chain(rnd, 24);
        int kind = rnd.nextInt(20);
        if (kind < 9) {
          blocks.record(c, c.length);
          model.record(c);
          firstBlocks.add(c[0]);
        } else if (kind < 11) {
          // plain match: same count, no change of order
          int expected = 0;
          while (expected < c.length && model.order.contains(c[expected])) {
            expected++;
          }
          assertThat(blocks.match(c, c.length)).isEqualTo(expected);
        } else if (kind < 19) {
          assertThat(blocks.matchAndTouch(c, c.length)).as("seed %d op %d", seed, op)
              .isEqualTo(model.match(c));
        } else {
          int newCap = 1 + rnd.nextInt(64);
          blocks.setCapacity(newCap);
          model.setCapacity(newCap);
        }
        List<Long> actual = assertSameOrder(blocks, model, seed, op);
        assertThat(blocks.size()).isLessThanOrEqualTo(model.capacity);
        for (long k : actual) {
          if (firstBlocks.contains(k)) {
            assertThat(blocks.mayHoldFirst(k)).as("held first block, seed %d op %d", seed, op)
                .isTrue();
          }
        }
      }
    }
  }

  /**
   * What lets a record insert the rest of a chain unlooked-up once one block is missing: every
   * held block's predecessor in its chain is held, and more recent.
   */
  @Test
  void everyHeldBlocksPredecessorIsHeldAndMoreRecent() {
    for (int seed = 0; seed < 20; seed++) {
      SplittableRandom rnd = new SplittableRandom(900 + seed);
      EndpointBlocks blocks = new EndpointBlocks(1 + rnd.nextInt(64));
      Map<Long, Long> parent = new HashMap<>();
      for (int op = 0; op < 2000; op++) {
        long[] c = chain(rnd, 24);
        for (int i = 1; i < c.length; i++) {
          parent.put(c[i], c[i - 1]);
        }
        int kind = rnd.nextInt(10);
        if (kind < 5) {
          blocks.record(c, c.length);
        } else if (kind < 7) {
          blocks.recordAfterMatch(c, c.length, blocks.matchAndTouch(c, c.length));
        } else if (kind < 9) {
          blocks.matchAndTouch(c, c.length);
        } else {
          blocks.setCapacity(1 + rnd.nextInt(64));
        }
        List<Long> order = new ArrayList<>();
        for (long k : blocks.keysMostRecentFirst()) {
          order.add(k);
        }
        for (int i = 0; i < order.size(); i++) {
          Long p = parent.get(order.get(i));
          if (p != null) {
            assertThat(order.subList(0, i)).as("seed %d op %d", seed, op).contains(p);
          }
        }
      }
    }
  }

  /**
   * Chains that repeat a key (which chained hashes never do, but a peer's hint may) leave the
   * list and the table whole. Keys from alphabets of 2 to 13, drawn at random per position: many
   * chains repeat one, at distances of one and more, over present, absent and matched blocks.
   */
  @Test
  void chainsThatRepeatAKeyNeverBreakTheStore() {
    for (int seed = 0; seed < 60; seed++) {
      SplittableRandom rnd = new SplittableRandom(1300 + seed);
      EndpointBlocks blocks = new EndpointBlocks(2 + rnd.nextInt(9));
      for (int op = 0; op < 1000; op++) {
        long[] c = new long[1 + rnd.nextInt(12)];
        int alpha = 2 + seed % 12;
        for (int i = 0; i < c.length; i++) {
          c[i] = 1 + rnd.nextInt(alpha);
        }
        int kind = rnd.nextInt(10);
        if (kind < 4) {
          blocks.record(c, c.length);
        } else if (kind < 7) {
          blocks.recordAfterMatch(c, c.length, blocks.matchAndTouch(c, c.length));
        } else if (kind < 9) {
          assertThat(blocks.matchAndTouch(c, c.length)).isBetween(0, c.length);
        } else {
          blocks.setCapacity(2 + rnd.nextInt(9));
        }
        try {
          blocks.checkIntegrity();
        } catch (IllegalStateException e) {
          throw new AssertionError("seed " + seed + " op " + op + ": " + e.getMessage(), e);
        }
      }
    }
  }

  @Test
  void aRepeatRightAfterItsFirstOccurrenceEndsTheTouchAndTheRecord() {
    EndpointBlocks blocks = new EndpointBlocks(16);
    blocks.record(new long[] {1, 2}, 2);
    // 2 is found where the touch has just placed it: the touch counts 1 and 2 and stops
    assertThat(blocks.matchAndTouch(new long[] {1, 2, 2, 3}, 4)).isEqualTo(2);
    blocks.record(new long[] {1, 2, 2, 3}, 4);
    blocks.checkIntegrity();
    assertThat(blocks.keysMostRecentFirst()).containsExactly(1L, 2L);
    blocks.recordAfterMatch(new long[] {1, 2, 2, 3}, 4, 2);
    blocks.checkIntegrity();
    assertThat(blocks.keysMostRecentFirst()).containsExactly(1L, 2L);
  }

  @Test
  void aRepeatedPairLeavesTheOrderARecordOfItsTouchesWouldGive() {
    EndpointBlocks blocks = new EndpointBlocks(16);
    blocks.record(new long[] {1, 2}, 2);
    blocks.record(new long[] {3}, 1);
    blocks.record(new long[] {1, 2, 1, 2}, 4);
    blocks.checkIntegrity();
    // touching 2, 1, 2, 1 (last to first) leaves 1, 2 most recent
    assertThat(blocks.keysMostRecentFirst()).containsExactly(1L, 2L, 3L);
    blocks.matchAndTouch(new long[] {3, 1, 3, 1}, 4);
    blocks.checkIntegrity();
    assertThat(blocks.size()).isEqualTo(3);
  }

  @Test
  void recordAfterMatchEqualsAFullRecordWhenNothingHappenedInBetween() {
    for (int seed = 0; seed < 40; seed++) {
      SplittableRandom rnd = new SplittableRandom(1000 + seed);
      int cap = 1 + rnd.nextInt(64);
      EndpointBlocks blocks = new EndpointBlocks(cap);
      Model model = new Model(cap);
      for (int op = 0; op < 3000; op++) {
        long[] c = chain(rnd, 24);
        if (rnd.nextInt(3) == 0) {
          blocks.record(c, c.length);
          model.record(c);
        } else {
          // a routed request: lookup (touching the match), then record the chain
          int m = blocks.matchAndTouch(c, c.length);
          assertThat(m).isEqualTo(model.match(c));
          blocks.recordAfterMatch(c, c.length, m);
          model.record(c);
        }
        assertSameOrder(blocks, model, seed, op);
      }
    }
  }

  @Test
  void recordAfterMatchStaysConsistentWhenOthersInterleave() {
    for (int seed = 0; seed < 40; seed++) {
      SplittableRandom rnd = new SplittableRandom(2000 + seed);
      int cap = 1 + rnd.nextInt(48);
      EndpointBlocks blocks = new EndpointBlocks(cap);
      for (int op = 0; op < 2000; op++) {
        long[] c = chain(rnd, 24);
        int m = blocks.matchAndTouch(c, c.length);
        for (int k = rnd.nextInt(4); k > 0; k--) {
          long[] other = chain(rnd, 24);
          blocks.record(other, other.length); // other requests land between lookup and record
        }
        blocks.recordAfterMatch(c, c.length, m);
        long[] keys = blocks.keysMostRecentFirst();
        assertThat(keys.length).isEqualTo(blocks.size()).isLessThanOrEqualTo(cap);
        assertThat(keys).as("seed %d op %d", seed, op).doesNotHaveDuplicates();
        assertThat(blocks.contains(c[Math.min(c.length, cap) - 1])).isTrue();
        for (long k : keys) {
          assertThat(blocks.contains(k)).isTrue();
        }
      }
    }
  }

  @Test
  void aLookupTakesNoLockOnAnEndpointWithoutTheChainsFirstBlock() throws Exception {
    EndpointBlocks b = new EndpointBlocks(1000);
    b.record(new long[] {1L << 40, 2, 3}, 3);
    java.util.concurrent.CountDownLatch held = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
    Thread owner = new Thread(() -> {
      synchronized (b) { // a writer in the middle of a long record
        held.countDown();
        try {
          release.await(10, java.util.concurrent.TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
    });
    owner.start();
    java.util.concurrent.ExecutorService ex = java.util.concurrent.Executors.newSingleThreadExecutor();
    try {
      assertThat(held.await(5, java.util.concurrent.TimeUnit.SECONDS)).isTrue();
      java.util.concurrent.Future<int[]> lookups = ex.submit(() -> new int[] {
          b.matchAndTouch(new long[] {7L << 40, 8}, 2), b.match(new long[] {9L << 40}, 1)});
      assertThat(lookups.get(5, java.util.concurrent.TimeUnit.SECONDS)).containsExactly(0, 0);
    } finally {
      release.countDown();
      ex.shutdownNow();
      owner.join(10_000);
    }
    assertThat(b.matchAndTouch(new long[] {1L << 40, 2, 3}, 3)).isEqualTo(3);
  }

  @Test
  void anEvictedFirstBlockNoLongerCountsAsHeld() {
    EndpointBlocks b = new EndpointBlocks(4);
    long first = 5L << 40;
    b.record(new long[] {first, 2, 3}, 3);
    assertThat(b.mayHoldFirst(first)).isTrue();
    b.record(new long[] {6L << 40, 11, 12, 13}, 4); // fills the capacity: the first chain goes
    assertThat(b.contains(first)).isFalse();
    assertThat(b.mayHoldFirst(first)).isFalse();
    assertThat(b.mayHoldFirst(6L << 40)).isTrue();
    b.setCapacity(1); // keeps only the most recent entry, the other chain's first block
    assertThat(b.mayHoldFirst(6L << 40)).isTrue();
    b.record(new long[] {first}, 1);
    assertThat(b.mayHoldFirst(6L << 40)).isFalse();
    assertThat(b.matchAndTouch(new long[] {first, 2}, 2)).isEqualTo(1);
  }

  @Test
  void firstBlocksStayCountedThroughACompactingShrink() {
    EndpointBlocks b = new EndpointBlocks(2000);
    for (long k = 1; k <= 1500; k++) {
      b.record(new long[] {k << 44}, 1);
    }
    b.setCapacity(10); // compacts the arrays, renumbering the entries
    for (long k = 1491; k <= 1500; k++) {
      assertThat(b.mayHoldFirst(k << 44)).isTrue();
    }
    for (long k = 1501; k <= 1600; k++) { // pushes the ten out, one by one
      b.record(new long[] {k << 44}, 1);
    }
    for (long k = 1491; k <= 1500; k++) {
      assertThat(b.contains(k << 44)).isFalse();
    }
    assertThat(b.mayHoldFirst(1600L << 44)).isTrue();
  }

  @Test
  void tailIsEvictedBeforeHead() {
    EndpointBlocks b = new EndpointBlocks(6);
    b.record(new long[] {1, 2, 3, 4}, 4);
    b.record(new long[] {10, 11, 12, 13}, 4); // two of the first chain must go: its tail
    assertThat(b.matchAndTouch(new long[] {1, 2, 3, 4}, 4)).isEqualTo(2);
    assertThat(b.contains(3)).isFalse();
    assertThat(b.contains(4)).isFalse();
  }

  @Test
  void strictPrefixOnly() {
    EndpointBlocks b = new EndpointBlocks(100);
    b.record(new long[] {5, 6, 7}, 3);
    // a chain whose first block is absent gets no credit for the later ones
    assertThat(b.matchAndTouch(new long[] {9, 6, 7}, 3)).isZero();
    assertThat(b.matchAndTouch(new long[] {5, 6, 8}, 3)).isEqualTo(2);
  }

  @Test
  void lookupRefreshesRecency() {
    EndpointBlocks b = new EndpointBlocks(4);
    b.record(new long[] {1, 2}, 2);
    b.record(new long[] {3, 4}, 2);
    b.matchAndTouch(new long[] {1, 2}, 2); // now 1,2 are more recent than 3,4
    b.record(new long[] {5, 6}, 2);
    assertThat(b.contains(1)).isTrue();
    assertThat(b.contains(2)).isTrue();
    assertThat(b.contains(3)).isFalse();
    assertThat(b.contains(4)).isFalse();
  }

  @Test
  void chainLongerThanCapacityKeepsItsHead() {
    EndpointBlocks b = new EndpointBlocks(3);
    b.record(new long[] {1, 2, 3, 4, 5}, 5);
    assertThat(b.keysMostRecentFirst()).containsExactly(1, 2, 3);
  }

  @Test
  void memoryStaysWithinBytesPerEntryBudget() {
    int cap = 31_250;
    EndpointBlocks b = new EndpointBlocks(cap);
    SplittableRandom rnd = new SplittableRandom(1);
    long[] chain = new long[128];
    for (int r = 0; r < 1000; r++) {
      for (int i = 0; i < chain.length; i++) {
        chain[i] = rnd.nextLong();
      }
      b.record(chain, chain.length);
    }
    assertThat(b.size()).isEqualTo(cap);
    assertThat(b.footprintBytes() / (double) cap).isLessThanOrEqualTo(32.0);
    // shrinking to a metrics-reported capacity releases memory
    b.setCapacity(5_000);
    assertThat(b.size()).isEqualTo(5_000);
    assertThat(b.footprintBytes() / 5_000.0).isLessThanOrEqualTo(40.0);
  }

  /**
   * Keys {@code x << 32 | x} all have the same home slot, so they form one long probe run:
   * lookups, evictions and the backward shift of deletion work through it. Keys of other homes
   * are mixed in so that shifts cross both kinds.
   */
  @Test
  void keysThatAllShareOneHomeSlotBehaveLikeTheModel() {
    sharedHomeAgainstTheModel(20, 40, 200, 12);
  }

  /**
   * The same with probe runs longer than the distance a table slot records (255): entries that
   * far from their home are found and shifted back by reading their keys.
   */
  @Test
  void probeRunsBeyondTheRecordedDistanceBehaveLikeTheModel() {
    assertThat(sharedHomeAgainstTheModel(6, 400, 400, 40)).as("ops that left a far entry")
        .isGreaterThan(1000);
  }

  /** Returns how many operations left an entry at the recorded distance's limit or beyond. */
  private static int sharedHomeAgainstTheModel(int seeds, int minCap, int capRange, int choices) {
    int far = 0;
    for (int seed = 0; seed < seeds; seed++) {
      SplittableRandom rnd = new SplittableRandom(500 + seed);
      int cap = minCap + rnd.nextInt(capRange);
      EndpointBlocks blocks = new EndpointBlocks(cap);
      Model model = new Model(cap);
      // as with chained hashes, a key stands for its whole prefix: one number per distinct
      // prefix (so a chain never repeats a key, a later block is never another chain's first,
      // and chains that share a key share everything before it)
      Map<List<Integer>, Long> prefixIds = new HashMap<>();
      for (int op = 0; op < 2000; op++) {
        int len = 1 + rnd.nextInt(30);
        long[] c = new long[len];
        List<Integer> prefix = new ArrayList<>();
        for (int i = 0; i < len; i++) {
          // few choices per depth, so that chains share heads and the store fills and evicts
          prefix.add(rnd.nextInt(i < 3 ? 2 : choices));
          long x = prefixIds.computeIfAbsent(List.copyOf(prefix), p -> prefixIds.size() + 1L);
          c[i] = x % 4 == 0 ? x * 0x9E3779B97F4A7C15L : (x << 32) | x;
        }
        if (rnd.nextInt(3) == 0) {
          assertThat(blocks.matchAndTouch(c, len)).as("seed %d op %d", seed, op)
              .isEqualTo(model.match(c));
        } else {
          blocks.record(c, len);
          model.record(c);
        }
        if (op % 50 == 49) {
          int newCap = minCap + rnd.nextInt(capRange);
          blocks.setCapacity(newCap);
          model.setCapacity(newCap);
        }
        assertSameOrder(blocks, model, seed, op);
        for (long k : model.order) {
          assertThat(blocks.contains(k)).as("seed %d op %d key %d", seed, op, k).isTrue();
        }
        if (blocks.holdsAFarEntry()) {
          far++;
        }
      }
    }
    return far;
  }
}
