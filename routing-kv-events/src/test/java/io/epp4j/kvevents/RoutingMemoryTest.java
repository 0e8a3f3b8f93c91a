package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

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
    for (int seed = 0; seed < 10; seed++) {
      Random r = new Random(seed);
      int capacity = 1 + r.nextInt(24);
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
        long[] keys = chain(r);
        switch (r.nextInt(10)) {
          case 0, 1, 2, 3 -> {
            memory.record(id, keys, now);
            ref.record(id, keys, now);
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
            assertThat(memory.prefixLength(id, keys, at))
                .as("seed %d step %d endpoint %s", seed, step, id)
                .isEqualTo(ref.prefixLength(id, keys, at));
          }
        }
        assertThat(memory.endpoints()).isEqualTo(ref.endpoints());
      }
    }
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
}
