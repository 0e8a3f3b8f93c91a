package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

class RoutingMemoryTest {

  /**
   * Random records (of overlapping chains, so keys are routed again and evicted while still
   * recorded later), forgets, clears, endpoint removals and re-additions, at times that advance
   * by less than, about and more than the TTL: every prefix length equals the reference model's.
   */
  @Test
  void answersAsTheReferenceModelThroughEvictionExpiryAndRemoval() {
    againstReference(0, 24, RoutingMemoryTest::chain);
  }

  /**
   * The same with chains of families that each start with their own key, spread over the filter
   * of first keys, so that its counts rise and fall back to zero (a zero that hid a remembered
   * first key would show as a shorter prefix than the model's).
   */
  @Test
  void theFilterOfFirstKeysNeverHidesARememberedChain() {
    againstReference(100, 60, RoutingMemoryTest::spreadChain);
  }

  /**
   * The same with capacities past the room a ring starts with, and enough distinct keys to fill
   * them: rings grow while they fill, then evict as before.
   */
  @Test
  void answersAsTheReferenceModelWhileRingsGrowToTheirCapacity() {
    againstReference(200, 5 * RoutingMemory.INITIAL_RING, RoutingMemoryTest::wideChain);
  }

  /**
   * memoryBlocksPerEndpoint takes up to 2^24: a ring allocated at its capacity from the start
   * held 256 MiB per endpoint (two longs per entry) before anything was routed there, so a pool
   * of a few dozen endpoints ran the JVM out of memory when the endpoints were added. Room comes
   * as entries do.
   */
  @Test
  void aRingTakesRoomAsEntriesComeNotItsWholeCapacityAtOnce() {
    int capacity = 1 << 20;
    RoutingMemory memory = new RoutingMemory(capacity, Long.MAX_VALUE);
    memory.addEndpoint("a");
    assertThat(memory.allocated("a")).isLessThan(capacity);
    int n = 3_000;
    for (int i = 0; i < n; i++) {
      memory.record("a", new long[] {1_000_000L + i}, i);
    }
    assertThat(memory.size("a")).isEqualTo(n);
    assertThat(memory.allocated("a")).isBetween(n, 2 * n);
    for (int i = 0; i < n; i++) {
      assertThat(memory.prefixLength("a", new long[] {1_000_000L + i}, n)).isEqualTo(1);
    }
  }

  private static void againstReference(int seedBase, int maxCapacity,
      java.util.function.Function<Random, long[]> chains) {
    for (int seed = seedBase; seed < seedBase + 10; seed++) {
      Random r = new Random(seed);
      int capacity = 1 + r.nextInt(maxCapacity);
      long ttl = 50;
      RoutingMemory memory = new RoutingMemory(capacity, ttl);
      RoutingMemoryReference ref = new RoutingMemoryReference(capacity, ttl);
      String[] ids = {"a", "b", "c", "d"};
      for (String id : ids) {
        if (r.nextInt(4) > 0) {
          memory.addEndpoint(id);
          ref.addEndpoint(id);
        }
      }
      long now = r.nextLong(); // any starting time, negative ones included
      for (int step = 0; step < 5_000; step++) {
        String id = ids[r.nextInt(ids.length)];
        now += r.nextInt(4) == 0 ? r.nextInt(120) : r.nextInt(3);
        long[] keys = chains.apply(r);
        switch (r.nextInt(10)) {
          case 0, 1, 2, 3 -> {
            // from block 0, or from a block the endpoint reports holding (only the first key of
            // the held part is kept)
            int from = r.nextBoolean() ? 0 : r.nextInt(keys.length + 1);
            memory.record(id, keys, from, now);
            ref.record(id, keys, from, now);
          }
          case 4 -> {
            long key = keys[r.nextInt(keys.length)];
            memory.forget(id, key);
            ref.forget(id, key);
          }
          case 5 -> {
            if (r.nextInt(8) == 0) {
              memory.clear(id);
              ref.clear(id);
            } else if (r.nextInt(4) == 0) { // the index lost track of these: the memory keeps them
              long[] lost = chains.apply(r);
              memory.absorb(id, lost, now);
              ref.absorb(id, lost, now);
            }
          }
          case 6 -> {
            if (r.nextInt(8) == 0) {
              memory.removeEndpoint(id);
              ref.removeEndpoint(id);
            } else {
              memory.addEndpoint(id);
              ref.addEndpoint(id);
            }
          }
          default -> {
            long at = now + r.nextInt(2 * (int) ttl);
            int from = r.nextBoolean() ? 0 : r.nextInt(keys.length + 1);
            int expected = ref.prefixLength(id, keys, from, at);
            assertThat(memory.prefixLength(id, keys, from, at))
                .as("seed %d step %d endpoint %s from %d", seed, step, id, from)
                .isEqualTo(expected);
            // the directory names every endpoint that remembers the chain, and reads it alike
            int found = memory.ringsThatMayHoldFirst(keys[0]);
            boolean named = false;
            for (int f = 0; f < found; f++) {
              if (RoutingMemory.foundEndpoint(f).equals(id)) {
                named = true;
                assertThat(memory.foundPrefixLength(f, keys, from, at)).isEqualTo(expected);
              }
            }
            assertThat(named || expected == 0)
                .as("directory names %s, seed %d step %d", id, seed, step).isTrue();
          }
        }
        assertThat(memory.endpoints()).isEqualTo(ref.endpoints());
        assertThat(memory.size(id)).as("seed %d step %d endpoint %s", seed, step, id)
            .isEqualTo(ref.size(id));
      }
    }
  }

  /**
   * The directory of first keys forgets an endpoint's chains when they go (evicted, cleared, or
   * the endpoint removed), and a ring that takes a removed ring's number starts with none.
   */
  @Test
  void theDirectoryOfFirstKeysFollowsEvictionClearsAndRemovals() {
    RoutingMemory memory = new RoutingMemory(4, Long.MAX_VALUE);
    memory.addEndpoint("a");
    memory.addEndpoint("b");
    long[] chain = {7L << 40, 8, 9};
    memory.record("a", chain, 1);
    assertThat(named(memory, chain[0])).containsExactly("a");
    memory.record("a", new long[] {1L << 40, 2, 3, 4}, 2); // evicts all of the first chain
    assertThat(named(memory, chain[0])).isEmpty();
    memory.record("a", chain, 3);
    memory.record("b", chain, 3);
    assertThat(named(memory, chain[0])).containsExactlyInAnyOrder("a", "b");
    memory.clear("b");
    assertThat(named(memory, chain[0])).containsExactly("a");
    memory.removeEndpoint("a");
    assertThat(named(memory, chain[0])).isEmpty();
    memory.addEndpoint("c"); // takes a's number
    assertThat(named(memory, chain[0])).isEmpty();
    memory.record("c", chain, 4);
    assertThat(named(memory, chain[0])).containsExactly("c");
  }

  private static List<String> named(RoutingMemory memory, long firstKey) {
    List<String> out = new java.util.ArrayList<>();
    for (int f = 0, n = memory.ringsThatMayHoldFirst(firstKey); f < n; f++) {
      out.add(RoutingMemory.foundEndpoint(f));
    }
    return out;
  }

  /**
   * The bound counts distinct blocks, least recently routed first out: a prefix that every
   * request repeats takes its room once. (Before, every routed block took a place in the ring,
   * so routing one 5-block prefix twice pushed out another prefix routed just before it while
   * only 10 distinct blocks were remembered against a bound of 10.)
   */
  @Test
  void aRepeatedPrefixTakesItsRoomOnceAndTheLeastRecentlyRoutedGoFirst() {
    RoutingMemory memory = new RoutingMemory(10, Long.MAX_VALUE);
    memory.addEndpoint("a");
    long[] b = {11, 12, 13, 14, 15};
    long[] a = {1, 2, 3, 4, 5};
    memory.record("a", b, 1);
    memory.record("a", a, 2);
    memory.record("a", a, 3);
    memory.record("a", a, 4);
    assertThat(memory.prefixLength("a", b, 5)).isEqualTo(5);
    assertThat(memory.prefixLength("a", a, 5)).isEqualTo(5);
    // two new blocks: b, routed least recently, loses its last two (recorded tail first, so
    // the tail goes first); a, routed since, keeps everything
    memory.record("a", new long[] {21, 22}, 6);
    assertThat(memory.prefixLength("a", b, 7)).isEqualTo(3);
    assertThat(memory.prefixLength("a", a, 7)).isEqualTo(5);
    assertThat(memory.prefixLength("a", new long[] {21, 22}, 7)).isEqualTo(2);
  }

  /** A chain of 1-12 keys from a few families that share their first keys. */
  private static long[] chain(Random r) {
    int family = r.nextInt(3);
    long[] keys = new long[1 + r.nextInt(12)];
    for (int i = 0; i < keys.length; i++) {
      // keys 0 and 1 shared by all families, later ones per family; key value 0 included
      keys[i] = i < 2 ? i : family * 100L + i;
    }
    return keys;
  }

  /**
   * A chain of 1-12 keys of one of 12 families, each with its own first key; keys are mixed so
   * that their high bits, which pick a filter slot, differ.
   */
  private static long[] wideChain(Random r) {
    int family = r.nextInt(60);
    long[] keys = new long[1 + r.nextInt(12)];
    for (int i = 0; i < keys.length; i++) {
      long x = (family * 16L + i + 1) * 0x9E3779B97F4A7C15L;
      keys[i] = x ^ (x >>> 29);
    }
    return keys;
  }

  private static long[] spreadChain(Random r) {
    int family = r.nextInt(12);
    long[] keys = new long[1 + r.nextInt(12)];
    for (int i = 0; i < keys.length; i++) {
      long x = (family * 16L + i + 1) * 0x9E3779B97F4A7C15L;
      keys[i] = x ^ (x >>> 29);
    }
    return keys;
  }
}
