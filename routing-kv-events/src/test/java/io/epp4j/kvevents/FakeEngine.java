package io.epp4j.kvevents;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/** Generates plausible vLLM event batches: chains grow from live blocks, others get evicted. */
final class FakeEngine {
  final int blockSize;
  private final Random random;
  private final List<long[]> live = new ArrayList<>(); // {hash}
  private final List<int[]> liveTokens = new ArrayList<>(); // full token prefix per live block
  final List<int[]> prompts = new ArrayList<>(); // every prefix ever stored, for queries
  private long nextHash;

  FakeEngine(long seed, int blockSize) {
    this.random = new Random(seed);
    this.blockSize = blockSize;
    this.nextHash = Long.MAX_VALUE - 5 + (seed % 3); // crosses into "negative" (uint64 > MAX)
  }

  KvEventBatch nextBatch(double ts) {
    List<KvEvent> events = new ArrayList<>();
    int stores = 1 + random.nextInt(3);
    for (int s = 0; s < stores; s++) {
      boolean root = live.isEmpty() || random.nextInt(3) == 0;
      int parentIdx = root ? -1 : random.nextInt(live.size());
      int[] base = root ? new int[0] : liveTokens.get(parentIdx);
      int blocks = 1 + random.nextInt(4);
      long[] hashes = new long[blocks];
      int[] toks = new int[blocks * blockSize];
      for (int i = 0; i < toks.length; i++) {
        toks[i] = random.nextInt(50_000);
      }
      int[] prefix = base;
      for (int b = 0; b < blocks; b++) {
        hashes[b] = nextHash++;
        int[] p = java.util.Arrays.copyOf(prefix, prefix.length + blockSize);
        System.arraycopy(toks, b * blockSize, p, prefix.length, blockSize);
        prefix = p;
        live.add(new long[] {hashes[b]});
        liveTokens.add(p);
        prompts.add(p);
      }
      events.add(new KvEvent.BlockStored(hashes, !root, root ? 0 : live.get(parentIdx)[0], toks,
          blockSize, -1, random.nextInt(5) == 0 ? Medium.CPU : Medium.GPU, null, null));
    }
    if (live.size() > 6 && random.nextBoolean()) {
      int k = 1 + random.nextInt(3);
      long[] removed = new long[k];
      for (int i = 0; i < k; i++) {
        int idx = random.nextInt(live.size());
        removed[i] = live.remove(idx)[0];
        liveTokens.remove(idx);
      }
      events.add(new KvEvent.BlockRemoved(removed, Medium.GPU));
      events.add(new KvEvent.BlockRemoved(removed, Medium.CPU));
    }
    return KvEventBatch.of(ts, events);
  }
}
