package io.epp4j.scorers;

import static io.epp4j.scorers.TestCandidates.cand;
import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.epp4j.api.Candidate;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * Uneven weights make the ring-hash picker's ring as large as {@code maximumRingSize} (8,388,608
 * entries): the build must hold primitive arrays only and still place every entry exactly where
 * Envoy's construction does.
 */
class RingHashBuildTest {

  static List<Candidate> weighted(int... weights) {
    List<Candidate> hosts = new ArrayList<>();
    for (int i = 0; i < weights.length; i++) {
      hosts.add(cand("10.3." + (i / 200) + "." + (i % 200 + 1) + ":8000",
          Map.of(ConsistentHashPicker.WEIGHT_LABEL, Integer.toString(weights[i]))));
    }
    return hosts;
  }

  /**
   * Weights 1 and 1,000,000 with Envoy's default minimum ring size: the light host needs one
   * entry, so the ring gets about a million. The ring itself is a hash (8 bytes) and a host
   * (4 bytes) per entry; building it may also need the hashes in the order they were made and
   * a buffer for the sort, 8 bytes each. Boxed indexes, per-entry strings or a boxed sort add
   * tens of bytes per entry on top.
   */
  @Test
  void aMillionEntryRingIsBuiltInPrimitiveArraysOfAboutTwiceItsOwnSize() {
    com.sun.management.ThreadMXBean threads =
        (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    assumeTrue(threads.isThreadAllocatedMemorySupported() && threads.isThreadAllocatedMemoryEnabled(),
        "per-thread allocation counting");
    List<Candidate> hosts = weighted(1, 1_000_000);
    new RingHashPicker.Ring(weighted(1, 3), 1024, 8_388_608); // loads what a first build loads
    long threadId = Thread.currentThread().getId();
    long before = threads.getThreadAllocatedBytes(threadId);
    RingHashPicker.Ring ring = new RingHashPicker.Ring(hosts, 1024, 8_388_608);
    long allocated = threads.getThreadAllocatedBytes(threadId) - before;
    int size = ring.size();
    assertThat(size).as("ring entries").isGreaterThanOrEqualTo(1_000_000);
    long perEntry = 12 + 8 + 8; // the ring, the hashes as made, a sort buffer
    assertThat(allocated).as("bytes allocated to build a ring of %d entries", size)
        .isLessThanOrEqualTo(perEntry * size + (1 << 16));
  }

  /** The ring as the picker built it before it sorted primitive keys: boxed indexes, stable sort. */
  static long[][] boxedSortRing(List<Candidate> candidates, int minRing, int maxRing) {
    int n = candidates.size();
    long sum = 0;
    for (Candidate c : candidates) {
      sum += ConsistentHashPicker.weight(c.endpoint());
    }
    double[] w = new double[n];
    double minW = 1.0;
    for (int h = 0; h < n; h++) {
      w[h] = ConsistentHashPicker.weight(candidates.get(h).endpoint()) * 1.0 / sum;
      minW = Math.min(minW, w[h]);
    }
    double scale = Math.min(Math.ceil(minW * minRing) / minW, (double) maxRing);
    List<long[]> entries = new ArrayList<>();
    double current = 0.0;
    double target = 0.0;
    for (int h = 0; h < n; h++) {
      target += scale * w[h];
      for (long i = 0; current < target; i++, current += 1.0) {
        byte[] key = (candidates.get(h).id() + "_" + i).getBytes(StandardCharsets.UTF_8);
        entries.add(new long[] {Xxh64.hash(key, 0, key.length, 0) ^ Long.MIN_VALUE, h});
      }
    }
    Integer[] order = new Integer[entries.size()];
    for (int i = 0; i < order.length; i++) {
      order[i] = i;
    }
    Arrays.sort(order, (a, b) -> Long.compare(entries.get(a)[0], entries.get(b)[0]));
    long[] flipped = new long[order.length];
    long[] hosts = new long[order.length];
    for (int i = 0; i < order.length; i++) {
      flipped[i] = entries.get(order[i])[0];
      hosts[i] = entries.get(order[i])[1];
    }
    return new long[][] {flipped, hosts};
  }

  @Test
  void randomWeightsAndRingSizesGiveTheBoxedSortsRingEntryForEntry() {
    SplittableRandom rnd = new SplittableRandom(7);
    for (int round = 0; round < 60; round++) {
      int n = 1 + rnd.nextInt(12);
      int[] weights = new int[n];
      for (int h = 0; h < n; h++) {
        // now and then one very light host, which makes the ring far larger than the minimum
        weights[h] = rnd.nextInt(10) == 0 ? 1 : 1 + rnd.nextInt(rnd.nextBoolean() ? 5 : 2_000);
      }
      int minRing = 1 + rnd.nextInt(4096);
      int maxRing = minRing + rnd.nextInt(60_000);
      List<Candidate> hosts = weighted(weights);
      long[][] expected = boxedSortRing(hosts, minRing, maxRing);
      RingHashPicker.Ring ring = new RingHashPicker.Ring(hosts, minRing, maxRing);
      String what = "weights " + Arrays.toString(weights) + ", ring " + minRing + ".." + maxRing;
      assertThat(ring.size()).as(what).isEqualTo(expected[0].length);
      for (int i = 0; i < ring.size(); i++) {
        if (ring.hashAt(i) != (expected[0][i] ^ Long.MIN_VALUE) || ring.hostAt(i) != expected[1][i]) {
          assertThat(new long[] {ring.hashAt(i), ring.hostAt(i)}).as("%s, position %d", what, i)
              .containsExactly(expected[0][i] ^ Long.MIN_VALUE, expected[1][i]);
        }
      }
    }
  }

  /**
   * XXH64 collisions among a ring's entries are too rare to meet in a test, so the sort is fed
   * values drawn from a few, sharing upper halves, lower halves or both: equal values must keep
   * the order their entries were made in, as the stable boxed sort kept them.
   */
  @Test
  void entriesWithEqualHashesOrEqualUpperHalvesSortAsAStableSortOrdersThem() {
    SplittableRandom rnd = new SplittableRandom(11);
    long[] uppers = {Long.MIN_VALUE, -1L << 32, 0, 1L << 32, 0x7FFF_FFFFL << 32, 42L << 32};
    long[] lowers = {0, 1, 0x7FFF_FFFFL, 0x8000_0000L, 0xFFFF_FFFFL};
    for (int round = 0; round < 200; round++) {
      int hostCount = 1 + rnd.nextInt(6);
      int[] starts = new int[hostCount + 1];
      for (int h = 1; h <= hostCount; h++) {
        starts[h] = starts[h - 1] + rnd.nextInt(40); // some hosts make no entry
      }
      int count = starts[hostCount];
      long[] entries = new long[count + rnd.nextInt(3)]; // unused beyond count
      List<long[]> expected = new ArrayList<>();
      for (int h = 0; h < hostCount; h++) {
        for (int i = starts[h]; i < starts[h + 1]; i++) {
          entries[i] = rnd.nextInt(4) == 0 ? rnd.nextLong()
              : uppers[rnd.nextInt(uppers.length)] | lowers[rnd.nextInt(lowers.length)];
          expected.add(new long[] {entries[i], h});
        }
      }
      expected.sort((a, b) -> Long.compare(a[0], b[0])); // List.sort is stable
      long[] flipped = new long[count];
      int[] hosts = new int[count];
      RingHashPicker.Ring.sortByHash(entries, count, starts, hostCount, flipped, hosts);
      for (int i = 0; i < count; i++) {
        assertThat(new long[] {flipped[i], hosts[i]}).as("round %d, position %d", round, i)
            .containsExactly(expected.get(i));
      }
    }
  }
}
