package io.epp4j.scorers;

import static io.epp4j.scorers.PrefixCacheScorerTest.route;
import static io.epp4j.scorers.PrefixCacheScorerTest.tok;
import static io.epp4j.scorers.PrefixCacheScorerTest.tokens;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.InferenceRequest;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * An endpoint that leaves the pool and comes back at the same address soon after (a readiness
 * probe that failed under load: its engine still holds the cache) finds the prefixes it was sent
 * still indexed; one that comes back much later starts empty, and the stores of endpoints that
 * leave for good are kept for a limited time and never beyond the pool's size.
 */
class PrefixCacheScorerEndpointFlapTest {
  private static final long KEEP = TimeUnit.SECONDS.toNanos(PrefixCacheScorer.KEEP_DEPARTED_SECONDS);

  private static double[] scores(PrefixCacheScorer s, InferenceRequest r, List<Candidate> pool) {
    double[] out = new double[pool.size()];
    s.score(r, TestCandidates.state(), pool, out);
    return out;
  }

  @Test
  void anEndpointBackSoonAfterItLeftStillHoldsWhatItWasSent() {
    AtomicLong now = new AtomicLong();
    PrefixCacheScorer s = PrefixCacheScorer.builder().ticker(now::get).build();
    List<Candidate> pool = TestCandidates.pool(3);
    TestCandidates.joined(s, pool);
    InferenceRequest r = tok(tokens(128, 0));
    route(s, r, pool, pool.get(0));

    s.onEndpointRemoved(pool.get(0).endpoint());
    assertThat(scores(s, r, pool.subList(1, 3))).containsOnly(0.0);
    now.addAndGet(KEEP / 2);
    s.onEndpointAdded(pool.get(0).endpoint());
    assertThat(scores(s, r, pool)).containsExactly(1.0, 0.0, 0.0);
    assertThat(s.departedStores()).isZero();
  }

  @Test
  void anEndpointBackLongAfterItLeftStartsEmpty() {
    AtomicLong now = new AtomicLong();
    PrefixCacheScorer s = PrefixCacheScorer.builder().ticker(now::get).build();
    List<Candidate> pool = TestCandidates.pool(3);
    TestCandidates.joined(s, pool);
    InferenceRequest r = tok(tokens(128, 0));
    route(s, r, pool, pool.get(0));

    s.onEndpointRemoved(pool.get(0).endpoint());
    now.addAndGet(KEEP + 1);
    s.onEndpointAdded(pool.get(0).endpoint());
    assertThat(scores(s, r, pool)).containsOnly(0.0);
  }

  @Test
  void storesOfEndpointsThatLeaveForGoodAreBoundedByThePoolAndExpire() {
    AtomicLong now = new AtomicLong();
    PrefixCacheScorer s = PrefixCacheScorer.builder().lruCapacityPerServer(64).ticker(now::get)
        .build();
    List<Candidate> stays = TestCandidates.pool(3);
    TestCandidates.joined(s, stays);
    for (int i = 0; i < 300; i++) {
      Candidate c = TestCandidates.cand("10.3." + (i / 200) + "." + (i % 200 + 1) + ":8000");
      s.onEndpointAdded(c.endpoint());
      route(s, tok(tokens(64, 1000 * i)), List.of(c), c);
      s.onEndpointRemoved(c.endpoint());
      // the pool held four endpoints at once: no more stores than that are kept aside
      assertThat(s.departedStores()).isLessThanOrEqualTo(4);
      assertThat(s.heldStores()).hasSizeLessThanOrEqualTo(3 + 4);
    }
    assertThat(s.trackedEndpoints()).isEqualTo(3);
    now.addAndGet(KEEP + 1);
    route(s, tok(tokens(64, 7)), stays, stays.get(0)); // a route lets go of the expired ones
    assertThat(s.departedStores()).isZero();
    assertThat(s.heldStores()).hasSize(3);
  }
}
