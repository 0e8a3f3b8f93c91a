package io.epp4j.sim;

import static io.epp4j.sim.TestRequests.concat;
import static io.epp4j.sim.TestRequests.request;
import static io.epp4j.sim.TestRequests.tokens;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.kvevents.KvEvent;
import io.epp4j.kvevents.Medium;
import java.util.List;
import org.junit.jupiter.api.Test;

class KvCacheTest {

  /** Admits {@code r} with its cached prefix and computes its whole prompt. */
  private static int prefill(KvCache kv, SimRequest r) {
    int hit = kv.cachedPrefixBlocks(r);
    assertThat(kv.allocateForAdmission(r, hit, r.numTokens() - hit * 16)).isTrue();
    r.numComputed = r.numTokens();
    kv.cacheFullBlocks(r, r.numComputed);
    return hit * 16;
  }

  @Test
  void aSecondRequestWithTheSamePrefixHitsItsFullBlocks() {
    KvCache kv = new KvCache(100, 16);
    int[] system = tokens(1, 64);
    assertThat(prefill(kv, request("a", concat(system, tokens(5000, 10)), 4))).isZero();
    int hit = prefill(kv, request("b", concat(system, tokens(7000, 10)), 4));
    assertThat(hit).isEqualTo(64);
  }

  @Test
  void aFullHitStillRecomputesTheLastToken() {
    KvCache kv = new KvCache(100, 16);
    int[] prompt = tokens(1, 64); // exactly four blocks
    SimRequest a = request("a", prompt, 1);
    prefill(kv, a);
    kv.free(a);
    int hit = prefill(kv, request("b", prompt, 1));
    assertThat(hit).isEqualTo(48).isLessThanOrEqualTo(prompt.length - 1);
  }

  @Test
  void onlyFullBlocksAreCached() {
    KvCache kv = new KvCache(100, 16);
    SimRequest a = request("a", tokens(1, 40), 1);
    prefill(kv, a);
    assertThat(kv.cachedBlocks()).isEqualTo(2);
  }

  @Test
  void freedBlocksStayHitableUntilReallocated() {
    KvCache kv = new KvCache(8, 16);
    int[] p = tokens(1, 64);
    SimRequest a = request("a", p, 1);
    prefill(kv, a);
    kv.free(a);
    assertThat(kv.freeBlocks()).isEqualTo(8);
    assertThat(kv.cachedPrefixBlocks(request("b", concat(p, tokens(99, 3)), 1))).isEqualTo(4);

    // a request of unrelated tokens needs 5 blocks: 4 untouched ones + the oldest freed one
    SimRequest c = request("c", tokens(10_000, 80), 1);
    prefill(kv, c);
    assertThat(kv.evictions()).isEqualTo(1);
    assertThat(kv.cachedPrefixBlocks(request("d", concat(p, tokens(99, 3)), 1))).isEqualTo(3);
  }

  @Test
  void evictionTakesAChainsTailBeforeItsHead() {
    KvCache kv = new KvCache(4, 16);
    int[] p = tokens(1, 64);
    SimRequest a = request("a", p, 1);
    prefill(kv, a);
    kv.free(a);
    // take two blocks for unrelated tokens: the last two blocks of the chain must go
    SimRequest other = request("x", tokens(50_000, 20), 1);
    assertThat(kv.allocateForAdmission(other, 0, 20)).isTrue();
    SimRequest probe = request("p", concat(p, tokens(77, 1)), 1);
    assertThat(kv.cachedPrefixBlocks(probe)).isEqualTo(2);
    assertThat(kv.contains(probe.blockHash(0))).isTrue();
    assertThat(kv.contains(probe.blockHash(1))).isTrue();
    assertThat(kv.contains(probe.blockHash(3))).isFalse();
  }

  @Test
  void sharedBlocksAreReferenceCountedAndNotEvictedWhileInUse() {
    KvCache kv = new KvCache(6, 16);
    int[] system = tokens(1, 32);
    SimRequest a = request("a", concat(system, tokens(500, 16)), 1);
    SimRequest b = request("b", concat(system, tokens(600, 16)), 1);
    prefill(kv, a);
    assertThat(prefill(kv, b)).isEqualTo(32);
    assertThat(kv.refCount(a.blocks[0])).isEqualTo(2);
    assertThat(kv.freeBlocks()).isEqualTo(2);
    kv.free(a);
    assertThat(kv.refCount(b.blocks[0])).isEqualTo(1);
    // only a's private block and the two never-used blocks are free now
    assertThat(kv.freeBlocks()).isEqualTo(3);
    SimRequest big = request("big", tokens(9_000, 64), 1);
    assertThat(kv.allocateForAdmission(big, 0, 64)).isFalse();
    assertThat(kv.freeBlocks()).as("a failed allocation changes nothing").isEqualTo(3);
  }

  @Test
  void aFreedBlockWithoutAHashIsHandedOutBeforeAnyCachedBlock() {
    KvCache kv = new KvCache(4, 16);
    int[] p = tokens(1, 32);
    SimRequest a = request("a", p, 1);
    prefill(kv, a); // two full blocks, both cached
    kv.free(a);
    // b takes the two never-used blocks: one it fills (cached), one it leaves partly empty
    SimRequest b = request("b", tokens(1_000, 20), 1);
    prefill(kv, b);
    kv.free(b);
    // every block is free; the only one no request could hit is b's partial block, so that is
    // the one a new request gets, and a's prefix stays whole
    SimRequest c = request("c", tokens(5_000, 10), 1);
    assertThat(kv.allocateForAdmission(c, 0, 10)).isTrue();
    assertThat(c.blocks[0]).isEqualTo(b.blocks[1]);
    assertThat(kv.evictions()).isZero();
    assertThat(kv.cachedPrefixBlocks(request("d", concat(p, tokens(77, 1)), 1))).isEqualTo(2);
  }

  @Test
  void admissionCountsCachedButFreeHitBlocksAgainstTheFreeSpace() {
    KvCache kv = new KvCache(4, 16);
    int[] p = tokens(1, 48);
    SimRequest a = request("a", p, 1);
    prefill(kv, a);
    kv.free(a);
    // b hits 3 free cached blocks and needs 2 more: 4 free blocks minus the 3 it re-uses = 1
    SimRequest b = request("b", concat(p, tokens(800, 20)), 1);
    int hit = kv.cachedPrefixBlocks(b);
    assertThat(hit).isEqualTo(3);
    assertThat(kv.allocateForAdmission(b, hit, b.numTokens() - 48)).isFalse();
    assertThat(kv.allocateForAdmission(b, hit, 16)).isTrue();
  }

  @Test
  void eventsDescribeStoredAndRemovedBlocksLikeVllm() {
    KvCache kv = new KvCache(8, 16);
    kv.enableEvents();
    int[] p = tokens(1, 48);
    SimRequest a = request("a", p, 1);
    prefill(kv, a);
    List<KvEvent> events = kv.drainEvents();
    assertThat(events).hasSize(1);
    KvEvent.BlockStored stored = (KvEvent.BlockStored) events.get(0);
    assertThat(stored.blockHashes()).containsExactly(a.blockHash(0), a.blockHash(1), a.blockHash(2));
    assertThat(stored.hasParent()).isFalse();
    assertThat(stored.medium()).isEqualTo(Medium.GPU);
    assertThat(stored.tokenIds()).containsExactly(p);
    assertThat(stored.blockSize()).isEqualTo(16);

    // b continues a's chain: the event names the parent
    SimRequest b = request("b", concat(p, tokens(100, 20)), 1);
    prefill(kv, b);
    KvEvent.BlockStored next = (KvEvent.BlockStored) kv.drainEvents().get(0);
    assertThat(next.hasParent()).isTrue();
    assertThat(next.parentHash()).isEqualTo(a.blockHash(2));
    assertThat(next.blockHashes()).containsExactly(b.blockHash(3));
    kv.free(a);
    kv.free(b);

    // six blocks for unrelated tokens: three never-used ones, b's partial block, then the two
    // cached tail blocks of the chain
    SimRequest c = request("c", tokens(70_000, 96), 1);
    prefill(kv, c);
    List<KvEvent> later = kv.drainEvents();
    assertThat(later.get(0)).isInstanceOf(KvEvent.BlockRemoved.class);
    assertThat(((KvEvent.BlockRemoved) later.get(0)).blockHashes())
        .containsExactly(b.blockHash(3), b.blockHash(2));

    kv.clearCache();
    assertThat(kv.drainEvents()).containsExactly(KvEvent.AllBlocksCleared.INSTANCE);
    assertThat(kv.cachedBlocks()).isZero();
  }
}
