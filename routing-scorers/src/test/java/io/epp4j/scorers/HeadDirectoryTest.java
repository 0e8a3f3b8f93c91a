package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PoolOrder;
import io.epp4j.api.PrefixHits;
import java.util.AbstractList;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.RandomAccess;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * The prefix scorer reads a list in the pool's order through the directory of first blocks; any
 * other list through each candidate's store. Both must give the same scores on the same state.
 */
class HeadDirectoryTest {

  /** A list in the pool's order, as the router hands it out. */
  static final class Ordered extends AbstractList<Candidate> implements PoolOrder, RandomAccess {
    private final List<Candidate> elements;
    private final Object token;
    private final java.util.Map<String, Integer> positions = new java.util.HashMap<>();

    Ordered(List<Candidate> elements, Object token) {
      this.elements = List.copyOf(elements);
      this.token = token;
      for (int i = 0; i < this.elements.size(); i++) {
        positions.put(this.elements.get(i).id(), i);
      }
    }

    @Override public Candidate get(int i) { return elements.get(i); }
    @Override public int size() { return elements.size(); }
    @Override public Object poolOrder() { return token; }
    @Override public int positionOf(String id) { return positions.getOrDefault(id, -1); }
  }

  private static EndpointMetrics capacity(long blocks) {
    return EndpointMetrics.builder().kvCapacityBlocks(blocks).blockSizeTokens(16)
        .scrapedAtNanos(0).build();
  }

  private static InferenceRequest prompt(SplittableRandom rnd, int families) {
    int family = rnd.nextInt(families);
    int blocks = 1 + rnd.nextInt(12);
    int[] ids = new int[blocks * 16 + rnd.nextInt(16)];
    for (int i = 0; i < ids.length; i++) {
      // the first two blocks belong to the family, the rest varies a little
      ids[i] = i < 32 ? family * 1000 + i : rnd.nextInt(4) == 0 ? rnd.nextInt(50) : i;
    }
    return PrefixCacheScorerTest.tok(ids);
  }

  @Test
  void theDirectoryScoresEveryCandidateAsItsStoreDoesThroughRecordsEvictionsAndPoolChanges() {
    int directoryRoutes = 0;
    for (long seed = 1; seed <= 12; seed++) {
      SplittableRandom rnd = new SplittableRandom(seed);
      PrefixCacheScorer s = PrefixCacheScorer.create();
      List<Candidate> pool = new ArrayList<>();
      int nextId = 1;
      for (int i = 0; i < 40; i++) {
        pool.add(TestCandidates.withMetrics("10.1.0." + nextId++ + ":8000",
            capacity(24 + rnd.nextInt(64))));
      }
      TestCandidates.joined(s, pool);
      Object token = new Object();
      for (int step = 0; step < 600; step++) {
        int op = rnd.nextInt(100);
        if (op < 3 && pool.size() > 2) {
          Candidate gone = pool.remove(rnd.nextInt(pool.size()));
          s.onEndpointRemoved(gone.endpoint());
          token = new Object();
        } else if (op < 6) {
          Candidate c = TestCandidates.withMetrics("10.1.0." + nextId++ + ":8000",
              capacity(24 + rnd.nextInt(64)));
          pool.add(rnd.nextInt(pool.size() + 1), c);
          s.onEndpointAdded(c.endpoint());
          token = new Object();
        } else if (op < 12) {
          // new metrics: the same endpoints in the same order, so the same token
          int i = rnd.nextInt(pool.size());
          pool.set(i, new TestCandidates.Cand(pool.get(i).endpoint(),
              capacity(8 + rnd.nextInt(96)), 0, 0));
        }
        InferenceRequest r = prompt(rnd, 24);
        int n = pool.size();
        CycleState fast = TestCandidates.state();
        double[] viaDirectory = new double[n];
        Arrays.fill(viaDirectory, 0.5); // what an earlier scorer left: overwritten everywhere
        Ordered ordered = new Ordered(pool, token);
        s.score(r, fast, ordered, viaDirectory);
        if (s.scoredByDirectory(fast)) {
          directoryRoutes++;
        }
        CycleState slow = TestCandidates.state();
        double[] viaStores = new double[n];
        s.score(r, slow, new ArrayList<>(pool), viaStores);
        assertThat(s.scoredByDirectory(slow)).isFalse();
        assertThat(viaDirectory).as("seed %d step %d", seed, step).containsExactly(viaStores);
        PrefixHits a = fast.get(PrefixHits.KEY);
        PrefixHits b = slow.get(PrefixHits.KEY);
        for (int i = 0; i < n; i++) {
          assertThat(a.cachedBlocks(i)).isEqualTo(b.cachedBlocks(i));
          // a match scored through the directory finds positions by id without a scan
          assertThat(a.indexOf(pool.get(i).id())).as("seed %d step %d", seed, step).isEqualTo(i);
        }
        assertThat(a.indexOf("10.2.0.1:8000")).isEqualTo(-1);
        // a subset scored later in the same cycle (after a filter kept it) scores as a cycle
        // that scores only the subset
        List<Candidate> subset = new ArrayList<>();
        for (Candidate c : pool) {
          if (rnd.nextBoolean()) {
            subset.add(c);
          }
        }
        double[] reused = new double[subset.size()];
        s.score(r, fast, subset, reused);
        double[] alone = new double[subset.size()];
        CycleState fresh = TestCandidates.state();
        s.score(r, fresh, subset, alone);
        assertThat(reused).as("seed %d step %d", seed, step).containsExactly(alone);
        PrefixHits published = fast.get(PrefixHits.KEY);
        for (int i = 0; i < subset.size(); i++) {
          assertThat(published.cachedBlocks(published.indexOf(subset.get(i).id())))
              .isEqualTo(fresh.get(PrefixHits.KEY).cachedBlocks(i));
        }
        // the route goes somewhere and is recorded there, as after a real route
        Candidate to = ordered.get(rnd.nextInt(n));
        s.afterRouting(r, fast, PrefixCacheScorerTest.decision(to.endpoint()));
      }
    }
    assertThat(directoryRoutes).as("routes the directory scored").isGreaterThan(12 * 400);
  }

  @Test
  void aStoreTheDirectoryNeverReadTakesItsEndpointsCapacityWhenARouteIsRecordedThere() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<Candidate> pool = new ArrayList<>(TestCandidates.pool(8));
    TestCandidates.joined(s, pool);
    Object token = new Object();
    InferenceRequest r = PrefixCacheScorerTest.tok(PrefixCacheScorerTest.tokens(64, 0));
    s.score(r, TestCandidates.state(), new Ordered(pool, token), new double[8]); // builds it
    pool.set(3, new TestCandidates.Cand(pool.get(3).endpoint(), capacity(2), 0, 0));
    CycleState st = TestCandidates.state();
    s.score(r, st, new Ordered(pool, token), new double[8]);
    assertThat(s.scoredByDirectory(st)).isTrue();
    assertThat(s.blocks(pool.get(3).id()).capacity())
        .as("not read while scoring: it holds nothing").isEqualTo(
            PrefixCacheScorer.DEFAULT_LRU_CAPACITY_PER_SERVER);
    s.afterRouting(r, st, PrefixCacheScorerTest.decision(pool.get(3).endpoint()));
    assertThat(s.blocks(pool.get(3).id()).capacity()).isEqualTo(2);
    assertThat(s.blocks(pool.get(3).id()).size()).isEqualTo(2);
  }

  @Test
  void aRowListsThePositionsWhoseCountIsNotZero() {
    HeadDirectory d = new HeadDirectory(13, 16); // a row of two words, the second partly used
    long key = 5L << 40;
    d.increment(key, 0);
    d.increment(key, 7);
    d.increment(key, 8);
    d.increment(key, 12);
    d.increment(key + (1L << 40), 3); // another slot
    int[] out = new int[13];
    assertThat(Arrays.copyOf(out, d.mayHold(key, out))).containsExactly(0, 7, 8, 12);
    d.decrement(key, 7);
    assertThat(Arrays.copyOf(out, d.mayHold(key, out))).containsExactly(0, 8, 12);
    for (int i = 0; i < 300; i++) {
      d.increment(key, 8);
    }
    for (int i = 0; i < 400; i++) {
      d.decrement(key, 8);
    }
    assertThat(Arrays.copyOf(out, d.mayHold(key, out))).as("a saturated count stays")
        .containsExactly(0, 8, 12);
  }
}
