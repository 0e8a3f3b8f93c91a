package io.epp4j.sim;

import java.util.HashSet;
import java.util.PriorityQueue;
import java.util.Set;

/**
 * The hit-rate ceiling of a workload: a replay in which every request is served by one replica
 * whose prefix cache never evicts, and served instantly (a request's blocks are cached the moment
 * it arrives). No routing policy on any cluster can hit more: a policy can only lose blocks to
 * eviction, to sending a request where its prefix is not, or to a prefix still being computed.
 * Hits follow the simulator's (and vLLM's) rules: whole blocks of the chained block hash, at most
 * {@code promptLength - 1} tokens, and every full block of the prompt and of the generated answer
 * cached once the request has run. A request longer than the context is rejected as the simulator
 * rejects it: it looks nothing up, and its client goes on or gives up as
 * {@link Workload.Run#onRejected} says (a closed-loop client sends its next request, a dialog
 * ends).
 */
final class InfiniteCache {
  private InfiniteCache() {}

  private record Arrival(long atNanos, long seq, RequestSpec spec) {}

  static double hitRate(Workload workload, long seed, int blockSize) {
    return hitRate(workload, seed, blockSize, Integer.MAX_VALUE);
  }

  /**
   * The ceiling on a model with a context of {@code maxModelLen} tokens. The rejected requests
   * must go to their clients here as they do in the simulation, so that both replay the same
   * requests: a dialog that outgrew the context ends (otherwise it goes on through every
   * remaining turn, each longer than the last: with {@code --turns 10000} that is billions of
   * tokens to hash, and its prompts count against a ceiling the served requests are measured
   * by), a closed-loop client sends its next request.
   */
  static double hitRate(Workload workload, long seed, int blockSize, int maxModelLen) {
    Workload.Run run = workload.start(seed);
    PriorityQueue<Arrival> queue = new PriorityQueue<>((a, b) -> a.atNanos != b.atNanos
        ? Long.compare(a.atNanos, b.atNanos) : Long.compare(a.seq, b.seq));
    long[] seq = {0};
    Workload.Submitter submitter = (at, spec) -> queue.add(new Arrival(at, seq[0]++, spec));
    run.begin(submitter);
    Set<Long> cached = new HashSet<>();
    long blockSeed = ChainedBlockHash.seed("ceiling");
    long queried = 0;
    long hit = 0;
    while (!queue.isEmpty()) {
      Arrival a = queue.poll();
      RequestSpec spec = a.spec();
      if ((long) spec.promptLength() + spec.outputLength() > maxModelLen) {
        run.onRejected(spec, true, a.atNanos(), submitter);
        continue;
      }
      int[] tokens = spec.tokens().get();
      int prompt = spec.promptLength();
      int maxHitBlocks = (prompt - 1) / blockSize;
      int fullBlocks = Math.min(tokens.length, prompt + spec.outputLength()) / blockSize;
      long parent = blockSeed;
      boolean prefix = true;
      int hitBlocks = 0;
      for (int b = 0; b < fullBlocks; b++) {
        parent = ChainedBlockHash.hash(parent, tokens, b * blockSize, blockSize);
        boolean seen = !cached.add(parent);
        if (prefix && seen && b < maxHitBlocks) {
          hitBlocks++;
        } else {
          prefix = false;
        }
      }
      queried += prompt;
      hit += (long) hitBlocks * blockSize;
      run.onFinished(spec, a.atNanos(), submitter);
    }
    return queried == 0 ? 0 : hit / (double) queried;
  }
}
