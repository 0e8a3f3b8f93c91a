package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.HashSet;
import java.util.Random;
import java.util.Set;
import org.junit.jupiter.api.Test;

class BlockKeysTest {

  private static int[] tokens(Random r, int n) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = r.nextInt(200_000);
    }
    return t;
  }

  @Test
  void everyTokenOfABlockChangesItsKeyAndEveryLaterKeyButNoEarlierOne() {
    Random r = new Random(1);
    long seed = BlockKeys.seed("m", null, null);
    for (int bs : new int[] {1, 3, 7, 8, 15, 16, 17, 32, 64}) {
      int[] t = tokens(r, bs * 6);
      long[] keys = BlockKeys.chain(seed, t, bs, 6);
      for (int pos = 0; pos < t.length; pos++) {
        int[] u = t.clone();
        u[pos] ^= 1 << r.nextInt(31); // any bit of any token
        long[] changed = BlockKeys.chain(seed, u, bs, 6);
        int block = pos / bs;
        for (int b = 0; b < 6; b++) {
          if (b < block) {
            assertThat(changed[b]).as("bs %d pos %d block %d", bs, pos, b).isEqualTo(keys[b]);
          } else {
            assertThat(changed[b]).as("bs %d pos %d block %d", bs, pos, b).isNotEqualTo(keys[b]);
          }
        }
      }
    }
  }

  @Test
  void aKeyDependsOnTheOrderOfTokensTheParentAndTheBlockLength() {
    long seed = BlockKeys.seed("m", null, null);
    int[] t = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    int[] swappedInPair = t.clone();
    swappedInPair[0] = 2;
    swappedInPair[1] = 1;
    int[] swappedLanes = t.clone();
    System.arraycopy(t, 2, swappedLanes, 0, 2);
    System.arraycopy(t, 0, swappedLanes, 2, 2);
    long k = BlockKeys.next(seed, t, 0, 16);
    assertThat(BlockKeys.next(seed, swappedInPair, 0, 16)).isNotEqualTo(k);
    assertThat(BlockKeys.next(seed, swappedLanes, 0, 16)).isNotEqualTo(k);
    assertThat(BlockKeys.next(seed + 1, t, 0, 16)).isNotEqualTo(k);
    int[] zeros = new int[32];
    assertThat(BlockKeys.next(seed, zeros, 0, 16)).isNotEqualTo(BlockKeys.next(seed, zeros, 0, 17));
    assertThat(BlockKeys.next(seed, zeros, 0, 16))
        .isNotEqualTo(BlockKeys.next(BlockKeys.seed("m", "lora", null), zeros, 0, 16));
  }

  @Test
  void chainIsNextAppliedBlockByBlockAndStopsAtTheLastFullBlock() {
    Random r = new Random(2);
    int[] t = tokens(r, 16 * 5 + 9);
    long seed = BlockKeys.seed("m", null, "salt");
    long[] keys = BlockKeys.chain(seed, t, 16, 100);
    assertThat(keys).hasSize(5);
    long k = seed;
    for (int b = 0; b < 5; b++) {
      k = BlockKeys.next(k, t, b * 16, 16);
      assertThat(keys[b]).isEqualTo(k);
    }
    assertThat(BlockKeys.chain(seed, t, 16, 3)).containsExactly(keys[0], keys[1], keys[2]);
  }

  @Test
  void distinctBlocksGetDistinctKeys() {
    Random r = new Random(3);
    long seed = BlockKeys.seed("m", null, null);
    Set<Long> keys = new HashSet<>();
    Set<java.util.List<Integer>> blocks = new HashSet<>();
    // small token values and near-identical blocks: the inputs a weak mix would collide on
    for (int i = 0; i < 200_000; i++) {
      int[] t = new int[16];
      t[r.nextInt(16)] = r.nextInt(4);
      t[r.nextInt(16)] = r.nextInt(50_000);
      blocks.add(java.util.Arrays.stream(t).boxed().toList());
      keys.add(BlockKeys.next(seed, t, 0, 16));
    }
    assertThat(keys).hasSameSizeAs(blocks);
  }
}
