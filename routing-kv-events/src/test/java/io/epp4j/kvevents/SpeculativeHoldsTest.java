package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;

class SpeculativeHoldsTest {

  /**
   * Random records (keys held for real skipped, keys recorded again before they expire, more
   * entries than the cap), confirmations, purges, endpoints dropped, and times that advance by
   * less than and more than the TTL: every answer equals a plain model's (a map of (key, slot)
   * to expiry and a FIFO of what was recorded), and a key some slot holds is never reported as
   * held by none.
   */
  @Test
  void answersAsAPlainModelThroughRefreshesTheCapPurgesAndDroppedSlots() {
    for (int seed = 0; seed < 20; seed++) {
      Random r = new Random(seed);
      long ttl = 100;
      int cap = 1 + r.nextInt(40);
      SpeculativeHolds holds = new SpeculativeHolds(ttl, cap, new KvEventMetrics());
      Model model = new Model(ttl, cap);
      HolderTable[] real = new HolderTable[40]; // each endpoint's own table of real holdings
      java.util.Arrays.setAll(real, i -> new HolderTable());
      long now = r.nextLong() / 2; // negative starting times included
      for (int step = 0; step < 4_000; step++) {
        now += r.nextInt(5) == 0 ? r.nextInt(150) : r.nextInt(4);
        int slot = r.nextInt(40); // two holder planes
        long[] keys = new long[1 + r.nextInt(6)];
        for (int i = 0; i < keys.length; i++) {
          keys[i] = r.nextInt(30) - 2; // few keys, so they meet again; key 0 included
        }
        String at = "seed " + seed + " step " + step;
        switch (r.nextInt(8)) {
          case 0, 1, 2 -> {
            int from = r.nextInt(keys.length);
            holds.record(real[slot], slot, keys, from, keys.length, now);
            model.record(real[slot], slot, keys, from, keys.length, now);
          }
          case 3 -> {
            holds.confirm(slot, keys, keys.length);
            model.confirm(slot, keys);
          }
          case 4 -> {
            holds.purge(now);
            model.purge(now);
          }
          case 5 -> {
            if (r.nextInt(10) == 0) {
              holds.dropSlot(slot);
              model.dropSlot(slot);
            }
          }
          case 6 -> real[slot].or(keys[0], 1 + r.nextInt(2)); // the engine stored it for real
          default -> { }
        }
        long ask = now + r.nextInt((int) ttl);
        for (long key = -2; key < 28; key++) {
          boolean anyHolder = false;
          for (int s = 0; s < 40; s++) {
            boolean h = model.holds(key, s, ask);
            anyHolder |= h;
            assertThat(holds.holds(key, s, ask)).as("%s key %d slot %d", at, key, s).isEqualTo(h);
          }
          if (anyHolder) {
            assertThat(holds.mayHold(key)).as("%s: key %d is held", at, key).isTrue();
          }
        }
        assertThat(holds.any()).as(at).isEqualTo(!model.ring.isEmpty());
      }
    }
  }

  /** Once every entry has left, no key is reported as possibly held. */
  @Test
  void countsFallBackToZeroWhenTheEntriesLeave() {
    SpeculativeHolds holds = new SpeculativeHolds(100, 1000, new KvEventMetrics());
    HolderTable real = new HolderTable();
    long[] keys = {5, 6, 7, 0};
    holds.record(real, 3, keys, 0, 4, 1_000);
    holds.record(real, 3, keys, 0, 2, 1_050); // 5 and 6 again, later
    holds.record(real, 9, keys, 1, 3, 1_060);
    holds.confirm(3, keys, 4);
    assertThat(holds.holds(6, 9, 1_100)).isTrue();
    holds.purge(1_200);
    for (long k : keys) {
      assertThat(holds.mayHold(k)).as("key %d", k).isFalse();
    }
    assertThat(holds.any()).isFalse();
  }

  /** The plain model. */
  private static final class Model {
    final long ttl;
    final int cap;
    final ArrayDeque<long[]> ring = new ArrayDeque<>();
    final Map<String, Long> live = new HashMap<>();

    Model(long ttl, int cap) {
      this.ttl = ttl;
      this.cap = cap;
    }

    void record(HolderTable real, int slot, long[] keys, int from, int to, long now) {
      purge(now);
      for (int i = from; i < to; i++) {
        if (real.get(keys[i]) != 0) {
          continue;
        }
        if (ring.size() == cap) {
          pop();
        }
        live.put(keys[i] + "@" + slot, now + ttl);
        ring.add(new long[] {keys[i], slot, now + ttl});
      }
    }

    void pop() {
      long[] e = ring.poll();
      String k = e[0] + "@" + e[1];
      Long t = live.get(k);
      if (t != null && t <= e[2]) {
        live.remove(k);
      }
    }

    void purge(long now) {
      while (!ring.isEmpty() && ring.peek()[2] <= now) {
        pop();
      }
    }

    void confirm(int slot, long[] keys) {
      for (long k : keys) {
        live.remove(k + "@" + slot);
      }
    }

    void dropSlot(int slot) {
      live.keySet().removeIf(k -> k.endsWith("@" + slot));
    }

    boolean holds(long key, int slot, long now) {
      Long t = live.get(key + "@" + slot);
      return t != null && t > now;
    }
  }
}
