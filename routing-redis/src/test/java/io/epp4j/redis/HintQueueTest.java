package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.PrefixBlocks;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

class HintQueueTest {

  /** {@code n} blocks of 16 tokens. */
  static PrefixBlocks blocks(int n) {
    return new PrefixBlocks() {
      @Override
      public int blockSizeTokens() {
        return 16;
      }

      @Override
      public int size() {
        return n;
      }

      @Override
      public long hash(int i) {
        return i + 1;
      }
    };
  }

  static Hint hint(@Nullable PrefixBlocks b) {
    return new Hint(0, "ep", null, b, b == null ? "session" : null);
  }

  /** Takes every linked hint as the publisher does; returns them. */
  static List<Hint> drain(HintQueue q) {
    List<Hint> out = new ArrayList<>();
    long blocks = 0;
    for (Hint h; (h = q.poll()) != null; ) {
      out.add(h);
      blocks += HintQueue.blocksOf(h);
    }
    q.taken(out.size(), blocks);
    return out;
  }

  @Test
  void hintsThatWouldHoldMoreBlockHashesThanTheBoundAreDroppedWhateverTheirCount() {
    HintQueue q = new HintQueue(1000, 10_000);
    assertThat(q.offer(hint(blocks(8_192)))).isTrue();
    // a second long prompt would hold 16,384 hashes: dropped, though 998 places are free
    assertThat(q.offer(hint(blocks(8_192)))).isFalse();
    assertThat(q.offer(hint(blocks(1_808)))).isTrue(); // exactly at the bound
    assertThat(q.offer(hint(blocks(1)))).isFalse();
    assertThat(q.offer(hint(null))).as("a session move holds no hashes").isTrue();
    assertThat(q.size()).isEqualTo(3);
    assertThat(q.blocks()).isEqualTo(10_000);

    assertThat(drain(q)).hasSize(3);
    assertThat(q.size()).isZero();
    assertThat(q.blocks()).isZero();
    assertThat(q.offer(hint(blocks(8_192)))).as("room again once published").isTrue();
  }

  @Test
  void theCountOfHintsStillBoundsHintsWithFewBlocks() {
    HintQueue q = new HintQueue(3, 1_000_000);
    for (int i = 0; i < 3; i++) {
      assertThat(q.offer(hint(blocks(2)))).isTrue();
    }
    assertThat(q.offer(hint(blocks(2)))).isFalse();
    assertThat(q.offer(hint(null))).isFalse();
    assertThat(q.size()).isEqualTo(3);
    assertThat(q.blocks()).isEqualTo(6);
  }

  @Test
  void concurrentProducersNeverLeaveMoreThanTheBoundsQueued() throws Exception {
    HintQueue q = new HintQueue(1 << 20, 50_000);
    int threads = 4;
    CountDownLatch start = new CountDownLatch(1);
    AtomicInteger accepted = new AtomicInteger();
    List<Thread> ts = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      int seed = t;
      Thread th = new Thread(() -> {
        try {
          start.await();
        } catch (InterruptedException e) {
          return;
        }
        for (int i = 0; i < 20_000; i++) {
          if (q.offer(hint(blocks(1 + (i * 7 + seed) % 100)))) {
            accepted.incrementAndGet();
          }
        }
      });
      th.start();
      ts.add(th);
    }
    start.countDown();
    for (Thread th : ts) {
      th.join(30_000);
    }
    List<Hint> taken = drain(q);
    long held = taken.stream().mapToLong(HintQueue::blocksOf).sum();
    assertThat(taken).hasSize(accepted.get());
    assertThat(held).isLessThanOrEqualTo(50_000);
    assertThat(q.size()).isZero();
    assertThat(q.blocks()).isZero();
  }

  /**
   * The largest capacity the parameter allows: the count of hints must not wrap in its part of
   * the word at the bound (nor with producers past it between their increment and decrement), or
   * a full queue reads as empty and takes hints without bound while Redis is away.
   */
  @Test
  void theLargestCapacityStillBoundsTheQueue() {
    int capacity = 1 << 24;
    HintQueue q = new HintQueue(capacity, 10);
    // the same session move over and over: a queue node is the hint itself, and nothing here
    // walks the chain, so this holds one object however many are counted
    Hint h = hint(null);
    for (int i = 0; i < capacity; i++) {
      if (!q.offer(h)) {
        throw new AssertionError("hint " + i + " refused below the capacity");
      }
    }
    assertThat(q.size()).isEqualTo(capacity);
    assertThat(q.offer(h)).as("a hint past the capacity").isFalse();
    assertThat(q.size()).isEqualTo(capacity);
  }

  @Test
  void boundsOutsideTheWordAreRefused() {
    assertThatThrownBy(() -> new HintQueue(0, 10)).isInstanceOf(IllegalArgumentException.class);
    assertThatThrownBy(() -> new HintQueue(10, 0)).isInstanceOf(IllegalArgumentException.class);
    assertThatThrownBy(() -> new HintQueue(10, HintQueue.MAX_BLOCKS + 1))
        .isInstanceOf(IllegalArgumentException.class);
    assertThatThrownBy(() -> new HintQueue((1 << 24) + 1, 10))
        .isInstanceOf(IllegalArgumentException.class);
  }
}
