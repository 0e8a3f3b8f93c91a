package io.epp4j.sim;

import io.epp4j.kvevents.KvEvent;
import io.epp4j.kvevents.Medium;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * The paged KV cache of one replica with vLLM v1 prefix-caching semantics.
 *
 * <ul>
 *   <li>Fixed pool of blocks of {@code blockSize} tokens; only full blocks are cached, keyed by
 *       the chained hash of their tokens.</li>
 *   <li>Blocks are reference-counted; a cached block whose count drops to zero goes to the tail
 *       of a free queue but keeps its hash, so it can still be hit until it is handed out again
 *       (that is an eviction); a block without a hash goes to the head, to be handed out
 *       first.</li>
 *   <li>A request's blocks are freed tail first, so under pressure the end of a prefix is lost
 *       before its start.</li>
 *   <li>A lookup hits at most {@code numTokens - 1} tokens: the last token is always
 *       recomputed to produce logits.</li>
 * </ul>
 *
 * Not thread-safe; one simulation thread owns it.
 */
final class KvCache {
  private static final int NONE = -1;

  private final int numBlocks;
  private final int blockSize;
  private final int[] refCount;
  private final long[] hash;
  private final boolean[] hashed;
  private final int[] prev;
  private final int[] next;
  private int head = NONE;
  private int tail = NONE;
  private int freeCount;
  private final LongIntMap cached;
  private long evictions;
  private @Nullable List<KvEvent> pendingEvents;
  private long[] removedBuffer = new long[16];
  private int removedCount;

  KvCache(int numBlocks, int blockSize) {
    if (numBlocks < 1 || blockSize < 1) {
      throw new IllegalArgumentException("numBlocks and blockSize must be >= 1");
    }
    this.numBlocks = numBlocks;
    this.blockSize = blockSize;
    this.refCount = new int[numBlocks];
    this.hash = new long[numBlocks];
    this.hashed = new boolean[numBlocks];
    this.prev = new int[numBlocks];
    this.next = new int[numBlocks];
    this.cached = new LongIntMap(numBlocks);
    for (int i = 0; i < numBlocks; i++) {
      appendFree(i);
    }
  }

  /**
   * Starts collecting {@link KvEvent}s, as vLLM's {@code kv_events} publisher reports them (GPU
   * tier, no LoRA, no salt); {@link #drainEvents()} hands them out.
   */
  void enableEvents() {
    if (pendingEvents == null) {
      pendingEvents = new ArrayList<>();
    }
  }

  int numBlocks() {
    return numBlocks;
  }

  int blockSize() {
    return blockSize;
  }

  /** Blocks not held by any request (cached-but-free blocks count as free, as in vLLM). */
  int freeBlocks() {
    return freeCount;
  }

  /** {@code vllm:kv_cache_usage_perc}: fraction of blocks held by requests. */
  double usage() {
    return (numBlocks - freeCount) / (double) numBlocks;
  }

  /** Cached blocks handed out again for other tokens so far. */
  long evictions() {
    return evictions;
  }

  /** Number of blocks currently registered in the prefix cache. */
  int cachedBlocks() {
    return cached.size();
  }

  /** Whether a block with this hash is in the prefix cache. */
  boolean contains(long blockHash) {
    return cached.get(blockHash) >= 0;
  }

  /**
   * Leading blocks of {@code r} present in the prefix cache, capped so that at most
   * {@code numTokens - 1} tokens hit.
   */
  int cachedPrefixBlocks(SimRequest r) {
    int max = (r.numTokens() - 1) / blockSize;
    int n = 0;
    while (n < max && cached.get(r.blockHash(n)) >= 0) {
      n++;
    }
    return n;
  }

  /**
   * Admits a waiting request: takes its {@code hitBlocks} cached leading blocks (from
   * {@link #cachedPrefixBlocks}) and allocates room for {@code numNewTokens} more. Changes nothing
   * and returns false when the free blocks do not suffice.
   */
  boolean allocateForAdmission(SimRequest r, int hitBlocks, int numNewTokens) {
    if (r.numBlocks != 0) {
      throw new IllegalStateException("request already holds blocks: " + r);
    }
    if (!fits(r, hitBlocks, hitBlocks * blockSize + numNewTokens)) {
      return false;
    }
    int toAllocate = Math.max(0, ceilDiv(hitBlocks * blockSize + numNewTokens, blockSize)
        - hitBlocks);
    for (int i = 0; i < hitBlocks; i++) {
      int id = cached.get(r.blockHash(i));
      if (refCount[id]++ == 0) {
        unlinkFree(id);
      }
      r.addBlock(id);
    }
    r.numCachedBlocks = hitBlocks;
    for (int i = 0; i < toAllocate; i++) {
      r.addBlock(takeFreeBlock());
    }
    return true;
  }

  /**
   * Whether the free blocks could hold the first {@code numTokens} tokens of a waiting request
   * that takes its {@code hitBlocks} cached leading blocks: a hit block that is cached but free
   * stops being free when taken, so it counts against the free space, as in vLLM.
   */
  boolean fits(SimRequest r, int hitBlocks, int numTokens) {
    int toAllocate = Math.max(0, ceilDiv(numTokens, blockSize) - hitBlocks);
    int evictableHits = 0;
    for (int i = 0; i < hitBlocks; i++) {
      if (refCount[cached.get(r.blockHash(i))] == 0) {
        evictableHits++;
      }
    }
    return toAllocate <= freeCount - evictableHits;
  }

  /**
   * Makes room for {@code numNewTokens} more tokens of a running request. Changes nothing and
   * returns false when the free blocks do not suffice.
   */
  boolean allocateSlots(SimRequest r, int numNewTokens) {
    int required = ceilDiv(r.numComputed + numNewTokens, blockSize);
    int toAllocate = required - r.numBlocks;
    if (toAllocate <= 0) {
      return true;
    }
    if (toAllocate > freeCount) {
      return false;
    }
    for (int i = 0; i < toAllocate; i++) {
      r.addBlock(takeFreeBlock());
    }
    return true;
  }

  /**
   * Registers in the prefix cache the request's blocks that its first {@code numTokens} tokens
   * fill (at most its known tokens). The scheduler calls it for the tokens a step will have
   * computed when it plans the step, as vLLM's {@code allocate_slots} does, so that requests
   * planned later in that step can already hit them. A block whose hash another block already
   * holds (computed concurrently) stays uncached.
   */
  void cacheFullBlocks(SimRequest r, int numTokens) {
    int full = Math.min(Math.min(numTokens, r.numTokens()) / blockSize, r.numBlocks);
    int runStart = -1;
    for (int i = r.numCachedBlocks; i < full; i++) {
      int id = r.blocks[i];
      boolean stored = false;
      if (!hashed[id]) {
        long h = r.blockHash(i);
        if (cached.get(h) < 0) {
          cached.put(h, id);
          hash[id] = h;
          hashed[id] = true;
          stored = true;
        }
      }
      if (stored && runStart < 0) {
        runStart = i;
      } else if (!stored && runStart >= 0) {
        emitStored(r, runStart, i);
        runStart = -1;
      }
    }
    if (runStart >= 0) {
      emitStored(r, runStart, full);
    }
    r.numCachedBlocks = Math.max(r.numCachedBlocks, full);
  }

  /**
   * Releases every block of {@code r}, tail first, and forgets its progress in the cache. As
   * vLLM's {@code BlockPool.free_blocks}: a block in the prefix cache goes to the back of the free
   * queue, to be evicted last, while a block without a hash (never filled, so no request can hit
   * it) goes to the front and is handed out before any cached block.
   */
  void free(SimRequest r) {
    int lastFront = NONE;
    for (int i = r.numBlocks - 1; i >= 0; i--) {
      int id = r.blocks[i];
      if (--refCount[id] == 0) {
        if (hashed[id]) {
          appendFree(id);
        } else {
          // the unhashed blocks keep their tail-first order at the front of the queue
          insertFreeAfter(lastFront, id);
          lastFront = id;
        }
      } else if (refCount[id] < 0) {
        throw new IllegalStateException("block " + id + " freed twice");
      }
    }
    r.numBlocks = 0;
    r.numCachedBlocks = 0;
  }

  /** Drops every cached hash (blocks held by requests stay allocated). */
  void clearCache() {
    for (int i = 0; i < numBlocks; i++) {
      hashed[i] = false;
    }
    cached.clear();
    if (pendingEvents != null) {
      flushRemoved();
      pendingEvents.add(KvEvent.AllBlocksCleared.INSTANCE);
    }
  }

  /** Events since the last call, in order; empty when events are disabled. */
  List<KvEvent> drainEvents() {
    if (pendingEvents == null) {
      return List.of();
    }
    flushRemoved();
    if (pendingEvents.isEmpty()) {
      return List.of();
    }
    List<KvEvent> out = pendingEvents;
    pendingEvents = new ArrayList<>();
    return out;
  }

  int refCount(int blockId) {
    return refCount[blockId];
  }

  private int takeFreeBlock() {
    int id = head;
    if (id == NONE) {
      throw new IllegalStateException("no free block");
    }
    unlinkFree(id);
    if (hashed[id]) {
      cached.remove(hash[id]);
      hashed[id] = false;
      evictions++;
      if (pendingEvents != null) {
        if (removedCount == removedBuffer.length) {
          removedBuffer = Arrays.copyOf(removedBuffer, removedCount * 2);
        }
        removedBuffer[removedCount++] = hash[id];
      }
    }
    refCount[id] = 1;
    return id;
  }

  private void emitStored(SimRequest r, int from, int to) {
    if (pendingEvents == null) {
      return;
    }
    flushRemoved();
    long[] hs = new long[to - from];
    for (int i = from; i < to; i++) {
      hs[i - from] = r.blockHash(i);
    }
    Long parent = from == 0 ? null : r.blockHash(from - 1);
    int[] toks = Arrays.copyOfRange(r.tokens, from * blockSize, to * blockSize);
    // as vLLM: the adapter on every event, the salt in the extra keys of a chain's first block
    pendingEvents.add(new KvEvent.BlockStored(hs, parent != null, parent == null ? 0 : parent,
        toks, blockSize, r.loraId, Medium.GPU, r.loraName, from == 0 ? r.cacheSalt : null));
  }

  private void flushRemoved() {
    if (removedCount > 0 && pendingEvents != null) {
      pendingEvents.add(KvEvent.BlockRemoved.of(Arrays.copyOf(removedBuffer, removedCount)));
      removedCount = 0;
    }
  }

  private void appendFree(int id) {
    prev[id] = tail;
    next[id] = NONE;
    if (tail == NONE) {
      head = id;
    } else {
      next[tail] = id;
    }
    tail = id;
    freeCount++;
  }

  /** Links {@code id} into the free queue right after {@code prevId}, or first when NONE. */
  private void insertFreeAfter(int prevId, int id) {
    int n = prevId == NONE ? head : next[prevId];
    prev[id] = prevId;
    next[id] = n;
    if (prevId == NONE) {
      head = id;
    } else {
      next[prevId] = id;
    }
    if (n == NONE) {
      tail = id;
    } else {
      prev[n] = id;
    }
    freeCount++;
  }

  private void unlinkFree(int id) {
    int p = prev[id];
    int n = next[id];
    if (p == NONE) {
      head = n;
    } else {
      next[p] = n;
    }
    if (n == NONE) {
      tail = p;
    } else {
      prev[n] = p;
    }
    prev[id] = NONE;
    next[id] = NONE;
    freeCount--;
  }

  private static int ceilDiv(int a, int b) {
    return (a + b - 1) / b;
  }
}
