package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class HolderTableTest {

  @Test
  void behavesLikeAMapOfBitsThroughManyRehashes() {
    Random r = new Random(5);
    HolderTable t = new HolderTable();
    Map<Long, Long> ref = new HashMap<>();
    for (int i = 0; i < 400_000; i++) {
      // a key range that grows then shrinks, so the table both grows and sheds dead entries
      int range = i < 200_000 ? 1 + i / 10 : 1 + (400_000 - i) / 10;
      long k = r.nextInt(range) - range / 2; // includes 0
      long bits = 1L << r.nextInt(64);
      switch (r.nextInt(3)) {
        case 0 -> {
          t.or(k, bits);
          ref.merge(k, bits, (a, b) -> a | b);
        }
        case 1 -> {
          long left = ref.getOrDefault(k, 0L) & ~bits;
          if (left == 0) {
            ref.remove(k);
          } else {
            ref.put(k, left);
          }
          assertThat(t.andNot(k, bits)).isEqualTo(left);
        }
        default -> assertThat(t.get(k)).isEqualTo(ref.getOrDefault(k, 0L));
      }
    }
    for (Map.Entry<Long, Long> e : ref.entrySet()) {
      assertThat(t.get(e.getKey())).isEqualTo(e.getValue());
    }
    assertThat(t.liveKeys()).isEqualTo(ref.size() - (ref.containsKey(0L) ? 1 : 0));
  }

  /**
   * The argument readers rely on: a key that is never removed is found with its bits by every
   * lock-free read, and a removed key is never seen with bits, while the writer churns other
   * keys (reusing dead cells, emptying them, rehashing the table) and flips other slots' bits
   * in the same word.
   */
  @Test
  void readersNeverMissAStableKeyWhileTheWriterChurnsAndRehashes() throws Exception {
    HolderTable t = new HolderTable();
    long[] stable = new long[512];
    Random r = new Random(9);
    for (int i = 0; i < stable.length; i++) {
      stable[i] = r.nextLong() | 1;
      t.or(stable[i], 0b01); // slot 0 on GPU
    }
    // ghosts: keys that held bits once and are gone for good; their dead cells get reused by
    // the churn below, and a reader of a ghost must never pick up a newcomer's bits
    long[] ghosts = new long[4096];
    for (int i = 0; i < ghosts.length; i++) {
      ghosts[i] = r.nextLong() | 1;
      t.or(ghosts[i], 0b10_0000);
    }
    for (long g : ghosts) {
      t.andNot(g, 0b10_0000);
    }
    AtomicBoolean done = new AtomicBoolean();
    AtomicReference<Throwable> failure = new AtomicReference<>();
    List<Thread> readers = new ArrayList<>();
    for (int n = 0; n < 2; n++) {
      Thread th = new Thread(() -> {
        try {
          while (!done.get()) {
            for (long k : stable) {
              if ((t.get(k) & 0b11) != 0b01) {
                throw new AssertionError("stable key " + k + " seen without its bits");
              }
            }
            for (long g : ghosts) {
              if (t.get(g) != 0) {
                throw new AssertionError("removed key " + g + " seen with bits");
              }
            }
          }
        } catch (Throwable e) {
          failure.set(e);
        }
      });
      th.setDaemon(true);
      th.start();
      readers.add(th);
    }
    long[] churn = new long[20_000];
    try {
      for (int round = 0; round < 60 && failure.get() == null; round++) {
        for (int i = 0; i < churn.length; i++) {
          churn[i] = r.nextLong();
          t.or(churn[i], 0b0100);
        }
        for (int i = 0; i < stable.length; i += 2) {
          t.or(stable[i], 0b1000); // another slot in the same word
        }
        for (long k : churn) {
          t.andNot(k, 0b0100);
        }
        for (int i = 0; i < stable.length; i += 2) {
          t.andNot(stable[i], 0b1000);
        }
      }
    } finally {
      done.set(true); // the readers stop even when the writer fails
    }
    for (Thread th : readers) {
      th.join(10_000); // a reader that does not stop fails the test instead of hanging it
      assertThat(th.isAlive()).as("reader still running after the writer finished").isFalse();
    }
    assertThat(failure.get()).isNull();
    assertThat(t.liveKeys()).isEqualTo(stable.length);
  }

  @Test
  void putReplacesTheWordAndMixesWithOrAndAndNotLikeAMap() {
    Random r = new Random(6);
    HolderTable t = new HolderTable();
    Map<Long, Long> ref = new HashMap<>();
    for (int i = 0; i < 200_000; i++) {
      long k = r.nextInt(5_000) - 50; // includes 0
      long v = r.nextLong() | 1L << r.nextInt(64); // nonzero
      switch (r.nextInt(4)) {
        case 0 -> {
          t.put(k, v);
          ref.put(k, v);
        }
        case 1 -> {
          t.or(k, v);
          ref.merge(k, v, (a, b) -> a | b);
        }
        case 2 -> {
          long left = ref.getOrDefault(k, 0L) & ~v;
          if (left == 0) {
            ref.remove(k);
          } else {
            ref.put(k, left);
          }
          assertThat(t.andNot(k, v)).isEqualTo(left);
        }
        default -> assertThat(t.get(k)).isEqualTo(ref.getOrDefault(k, 0L));
      }
    }
    for (Map.Entry<Long, Long> e : ref.entrySet()) {
      assertThat(t.get(e.getKey())).isEqualTo(e.getValue());
    }
    assertThat(t.liveKeys()).isEqualTo(ref.size() - (ref.containsKey(0L) ? 1 : 0));
    assertThatThrownBy(() -> t.put(1, 0)).isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("value");
  }

  /** A reader never sees a word a put did not write: the old value or the new, never a blend. */
  @Test
  void readersSeeEitherTheOldOrTheNewWordOfAPut() throws Exception {
    HolderTable t = new HolderTable();
    long a = 0x0F0F_0F0F_0F0F_0F0FL;
    long b = 0x7070_7070_7070_7070L;
    t.put(42, a);
    AtomicReference<String> failure = new AtomicReference<>();
    AtomicBoolean stop = new AtomicBoolean();
    Thread reader = new Thread(() -> {
      while (!stop.get() && failure.get() == null) {
        long v = t.get(42);
        if (v != a && v != b) {
          failure.set(Long.toHexString(v));
        }
      }
    });
    reader.start();
    Random r = new Random(8);
    long deadline = System.nanoTime() + 1_000_000_000L;
    for (int i = 0; i < 500_000 && System.nanoTime() < deadline; i++) {
      t.put(42, (i & 1) == 0 ? b : a);
      t.or(100 + r.nextInt(20_000), 1); // other keys (never 42) grow the table through rehashes
    }
    stop.set(true);
    reader.join(5_000);
    assertThat(reader.isAlive()).isFalse();
    assertThat(failure.get()).isNull();
  }
}
