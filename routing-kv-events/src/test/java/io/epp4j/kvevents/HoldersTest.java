package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class HoldersTest {

  /** (key, slot) → bits, the model {@link Holders} must match for every slot, however wide. */
  private static long cell(long key, int slot) {
    return key * 1_000_003L + slot;
  }

  @Test
  void behavesLikeAMapOfSlotBitsAcrossPlanesThatComeAndGo() {
    Random r = new Random(17);
    Holders h = new Holders();
    Map<Long, Integer> ref = new HashMap<>();
    int maxSlot = 5 * HolderTable.INLINE_SLOTS; // planes 0-4
    for (int i = 0; i < 300_000; i++) {
      // phases: grow everywhere, then drain the wide slots, so planes are created and dropped
      boolean drain = (i / 50_000) % 2 == 1;
      long key = r.nextInt(600) - 100; // includes 0, which a plane cannot store in a cell
      int slot = r.nextInt(maxSlot);
      int op = r.nextInt(drain ? 5 : 3);
      long c = cell(key, slot);
      if (op == 0) {
        int bit = 1 + r.nextInt(2);
        h.add(key, slot, bit);
        ref.merge(c, bit, (a, b) -> a | b);
      } else if (op == 1 || op >= 3) {
        int bits = 1 + r.nextInt(3);
        int left = ref.getOrDefault(c, 0) & ~bits;
        if (left == 0) {
          ref.remove(c);
        } else {
          ref.put(c, left);
        }
        assertThat(h.remove(key, slot, bits)).as("bits left, key %d slot %d", key, slot)
            .isEqualTo(left);
      } else {
        assertThat(h.bits(key, slot)).as("key %d slot %d", key, slot)
            .isEqualTo(ref.getOrDefault(c, 0));
      }
      if (i % 10_000 == 0) {
        assertMatches(h, ref, maxSlot);
      }
    }
    assertMatches(h, ref, maxSlot);
    // empty every wide slot: no plane but plane 0 may remain
    for (long key = -100; key < 500; key++) {
      for (int slot = HolderTable.INLINE_SLOTS; slot < maxSlot; slot++) {
        h.remove(key, slot, 3);
        ref.remove(cell(key, slot));
      }
    }
    assertMatches(h, ref, maxSlot);
    assertThat(h.widePlanes()).isZero();
  }

  private static void assertMatches(Holders h, Map<Long, Integer> ref, int maxSlot) {
    Set<Integer> planesInUse = new HashSet<>();
    Map<Integer, Set<Long>> keysByPlane = new HashMap<>();
    for (Map.Entry<Long, Integer> e : ref.entrySet()) {
      long key = Math.floorDiv(e.getKey() + 100L * 1_000_003L, 1_000_003L) - 100;
      int slot = (int) (e.getKey() - key * 1_000_003L);
      int plane = slot / HolderTable.INLINE_SLOTS;
      if (plane > 0) {
        planesInUse.add(plane);
      }
      if (key != 0) {
        keysByPlane.computeIfAbsent(plane, p -> new HashSet<>()).add(key);
      }
      assertThat(h.bits(key, slot)).isEqualTo(e.getValue());
    }
    assertThat(h.widePlanes()).as("planes with some holder").isEqualTo(planesInUse.size());
    assertThat(h.liveKeys()).isEqualTo(
        keysByPlane.values().stream().mapToInt(Set::size).sum());
  }

  /**
   * A reader of a wide slot's key that is never removed keeps finding it while the writer creates
   * and drops the planes of other slots (each drop and creation republishes the plane array).
   */
  @Test
  void readersKeepAStableWideHolderWhileOtherPlanesComeAndGo() throws Exception {
    Holders h = new Holders();
    int stableSlot = 3 * HolderTable.INLINE_SLOTS + 5;
    for (long k = 1; k <= 64; k++) {
      h.add(k, stableSlot, 1);
    }
    AtomicReference<String> failure = new AtomicReference<>();
    CountDownLatch done = new CountDownLatch(1);
    Thread reader = new Thread(() -> {
      while (done.getCount() > 0 && failure.get() == null) {
        for (long k = 1; k <= 64; k++) {
          if (h.bits(k, stableSlot) != 1) {
            failure.set("lost key " + k);
          }
        }
      }
    });
    reader.start();
    Random r = new Random(3);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
    for (int i = 0; i < 200_000 && System.nanoTime() < deadline; i++) {
      int slot = HolderTable.INLINE_SLOTS * (1 + r.nextInt(6)) + r.nextInt(4);
      if (slot / HolderTable.INLINE_SLOTS == 3) {
        continue;
      }
      long key = r.nextInt(8) + 1;
      h.add(key, slot, 2);
      h.remove(key, slot, 2); // the plane empties again and is dropped
    }
    done.countDown();
    reader.join(5_000);
    assertThat(reader.isAlive()).isFalse();
    assertThat(failure.get()).isNull();
    assertThat(h.widePlanes()).isEqualTo(1);
  }
}
