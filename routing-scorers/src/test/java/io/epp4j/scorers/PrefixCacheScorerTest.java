package io.epp4j.scorers;

import static io.epp4j.scorers.TestCandidates.state;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.epp4j.core.SchedulingProfile;
import java.lang.ref.WeakReference;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class PrefixCacheScorerTest {
  static final RoutingDecision.Callbacks NONE = new RoutingDecision.Callbacks() {
    @Override public void firstToken(RoutingDecision d) {}
    @Override public void complete(RoutingDecision d, Usage u) {}
    @Override public void failure(RoutingDecision d, Throwable c) {}
  };

  static int[] tokens(int n, int offset) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = offset + i;
    }
    return t;
  }

  static InferenceRequest tok(int[] ids) {
    return InferenceRequest.builder().model("qwen3-1.7b").tokenIds(ids).build();
  }

  static RoutingDecision decision(Endpoint primary) {
    Map<String, ProfileResult> r = new LinkedHashMap<>();
    r.put("default", new ProfileResult("default", List.of(primary)));
    return RoutingDecision.routed("default", r, NONE);
  }

  /** Scores, then records the request on {@code target} as the router would after picking it. */
  static double[] route(PrefixCacheScorer s, InferenceRequest r, List<Candidate> pool, Candidate target) {
    CycleState st = state();
    double[] scores = new double[pool.size()];
    s.score(r, st, pool, scores);
    s.afterRouting(r, st, decision(target.endpoint()));
    return scores;
  }

  @Test
  void scorersWithTheSameBlockSettingsShareOneCyclesHashesAndOthersHashOnTheirOwn() {
    PrefixCacheScorer first = PrefixCacheScorer.create();
    PrefixCacheScorer second = PrefixCacheScorer.create();
    PrefixCacheScorer coarser = PrefixCacheScorer.builder().blockSizeTokens(32).build();
    List<Candidate> pool = TestCandidates.pool(2);
    for (PrefixCacheScorer s : List.of(first, second, coarser)) {
      TestCandidates.joined(s, pool);
    }
    InferenceRequest r = tok(tokens(64, 0));
    long[] own = second.blockHashes(r);
    second.record(pool.get(1).id(), own);
    coarser.record(pool.get(1).id(), coarser.blockHashes(r));

    CycleState st = state();
    double[] scores = new double[2];
    first.score(r, st, pool, scores);
    BlockHasher.Shared shared = st.get(BlockHasher.SHARED);
    assertThat(shared).as("the first scorer publishes its hashes").isNotNull();
    assertThat(Arrays.copyOf(shared.hashes(), shared.size)).containsExactly(own);

    // a cycle whose published hashes (here deliberately other ones) the second scorer reads
    CycleState planted = state();
    planted.put(BlockHasher.SHARED, new BlockHasher.Shared(16, PrefixCacheScorer.DEFAULT_MAX_PREFIX_BLOCKS,
        new long[] {1, 2, 3, 4}, 4, false));
    second.score(r, planted, pool, scores);
    assertThat(scores).as("scored from the cycle's hashes, not by hashing again")
        .containsExactly(0.0, 0.0);
    coarser.score(r, planted, pool, scores);
    assertThat(scores).as("another block size hashes the prompt itself").containsExactly(0.0, 1.0);
  }

  @Test
  void aLargePoolPublishesEveryCandidatesHitsWhetherFewOrMostHoldThePrompt() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<Candidate> pool = TestCandidates.pool(64);
    TestCandidates.joined(s, pool);
    InferenceRequest r = tok(tokens(160, 0)); // 10 blocks
    long[] h = s.blockHashes(r);
    s.record(pool.get(5).id(), java.util.Arrays.copyOf(h, 3));
    s.record(pool.get(63).id(), h);
    CycleState st = state();
    double[] scores = new double[64];
    java.util.Arrays.fill(scores, 0.25); // what an earlier scorer left: overwritten everywhere
    s.score(r, st, pool, scores);
    PrefixHits few = st.get(PrefixHits.KEY);
    assertThat(few.size()).isEqualTo(64);
    assertThat(few.anyHit()).isTrue();
    for (int i = 0; i < 64; i++) {
      double expected = i == 5 ? 3 : i == 63 ? 10 : 0;
      assertThat(few.cachedBlocks(i)).as("candidate %d", i).isEqualTo(expected);
      assertThat(scores[i]).as("candidate %d", i).isEqualTo(expected / 10);
    }
    assertThat(few.cachedTokens(pool.get(63).id())).isEqualTo(160);

    for (int i = 0; i < 40; i++) { // most of the pool holds a part now
      s.record(pool.get(i).id(), java.util.Arrays.copyOf(h, 1 + i % 10));
    }
    CycleState st2 = state();
    s.score(r, st2, pool, scores);
    PrefixHits most = st2.get(PrefixHits.KEY);
    for (int i = 0; i < 64; i++) {
      double expected = i < 40 ? Math.max(1 + i % 10, i == 5 ? 3 : 0) : i == 63 ? 10 : 0;
      assertThat(most.cachedBlocks(i)).as("candidate %d", i).isEqualTo(expected);
    }
  }

  /** Few holders among many candidates (the sparse form) and many (the dense form). */
  @Test
  void everyCandidatesCountComesBackInEitherForm() {
    java.util.SplittableRandom rnd = new java.util.SplittableRandom(5);
    for (int round = 0; round < 200; round++) {
      int n = 1 + rnd.nextInt(300);
      List<Candidate> pool = TestCandidates.pool(n);
      int total = 1 + rnd.nextInt(200);
      int holders = rnd.nextInt(n + 1);
      int[] expected = new int[n];
      double[] scores = new double[n];
      for (int h = 0; h < holders; h++) {
        int i = rnd.nextInt(n);
        expected[i] = 1 + rnd.nextInt(total);
        scores[i] = (double) expected[i] / total;
      }
      PrefixMatch m = PrefixMatch.fromScores(total, 16, pool, scores);
      // the directory's form: every holder named, and some that scored 0 named too
      int[] found = new int[n];
      int k = 0;
      for (int i = 0; i < n; i++) {
        if (expected[i] > 0 || rnd.nextInt(4) == 0) {
          found[k++] = i;
        }
      }
      PrefixMatch f = PrefixMatch.fromFound(total, 16, pool, scores, found, k);
      for (int i = 0; i < n; i++) {
        assertThat(m.matchedAt(i)).as("round %d, candidate %d of %d", round, i, n)
            .isEqualTo(expected[i]);
        assertThat(f.matchedAt(i)).as("from found: round %d, candidate %d of %d", round, i, n)
            .isEqualTo(expected[i]);
      }
    }
  }

  @Test
  void matchCountsComeBackExactlyFromTheScores() {
    List<Candidate> one = TestCandidates.pool(1);
    for (int total : new int[] {1, 2, 3, 7, 10, 97, 1000, 1600, 4095, 8191, 8192}) {
      for (int m = 0; m <= total; m++) {
        double[] score = {(double) m / total};
        assertThat(PrefixMatch.fromScores(total, 16, one, score).matchedAt(0))
            .as("%d of %d", m, total).isEqualTo(m);
      }
    }
  }

  @Test
  void scoresMatchedFractionAndPublishesTheMatch() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<Candidate> pool = TestCandidates.pool(3);
    TestCandidates.joined(s, pool);
    route(s, tok(tokens(64, 0)), pool, pool.get(1)); // 4 blocks on endpoint 1
    int[] longer = tokens(128, 0); // same first 4 blocks, 8 in all
    CycleState st = state();
    double[] scores = new double[3];
    s.score(tok(longer), st, pool, scores);
    assertThat(scores).containsExactly(0.0, 0.5, 0.0);
    PrefixHits m = st.get(PrefixHits.KEY);
    assertThat(m.size()).isEqualTo(3);
    for (int i = 0; i < 3; i++) {
      assertThat(m.endpointId(i)).isEqualTo(pool.get(i).id());
      assertThat(m.totalBlocks(i)).isEqualTo(8);
      assertThat(m.blockSizeTokens(i)).isEqualTo(16);
      assertThat(m.cachedBlocks(i)).isEqualTo(i == 1 ? 4.0 : 0.0);
    }
    assertThat(m.cachedTokens(pool.get(1).id())).isEqualTo(64);
    assertThat(m.cachedTokens("unknown:1")).isZero();
    assertThat(m.anyHit()).isTrue();
  }

  @Test
  void partialBlocksAndEmptyCandidates() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<Candidate> pool = TestCandidates.pool(2);
    TestCandidates.joined(s, pool);
    double[] scores = new double[2];
    CycleState st = state();
    s.score(tok(tokens(15, 0)), st, pool, scores); // less than one block
    assertThat(scores).containsExactly(0.0, 0.0);
    assertThat(st.get(PrefixHits.KEY).totalBlocks(0)).isZero();
    assertThat(st.get(PrefixHits.KEY).anyHit()).isFalse();
    CycleState empty = state();
    s.score(tok(tokens(64, 0)), empty, List.of(), new double[0]);
    assertThat(empty.get(PrefixHits.KEY)).isNull();
  }

  @Test
  void strictPrefixCreditsOnlyConsecutiveBlocksFromTheFirst() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<Candidate> pool = TestCandidates.pool(2);
    TestCandidates.joined(s, pool);
    int[] a = tokens(64, 0);
    route(s, tok(a), pool, pool.get(0));
    int[] b = a.clone();
    b[0] = 999; // different first block: every later block hash differs as well (chained)
    double[] scores = new double[2];
    s.score(tok(b), state(), pool, scores);
    assertThat(scores).containsExactly(0.0, 0.0);
  }

  @Test
  void saltModelAndLoraSeparateTenants() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<Candidate> pool = TestCandidates.pool(2);
    TestCandidates.joined(s, pool);
    int[] ids = tokens(64, 0);
    InferenceRequest tenantA = InferenceRequest.builder().model("m").tokenIds(ids).cacheSalt("a").build();
    route(s, tenantA, pool, pool.get(0));
    for (InferenceRequest other : List.of(
        InferenceRequest.builder().model("m").tokenIds(ids).cacheSalt("b").build(),
        InferenceRequest.builder().model("m").tokenIds(ids).build(),
        InferenceRequest.builder().model("m2").tokenIds(ids).cacheSalt("a").build(),
        InferenceRequest.builder().model("m").tokenIds(ids).cacheSalt("a").loraAdapter("x").build())) {
      double[] scores = new double[2];
      s.score(other, state(), pool, scores);
      assertThat(scores).containsExactly(0.0, 0.0);
    }
    double[] same = new double[2];
    s.score(tenantA, state(), pool, same);
    assertThat(same).containsExactly(1.0, 0.0);
  }

  @Test
  void textPromptsUseFourCharactersPerToken() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    String system = "s".repeat(64 * 3); // three 64-character blocks
    assertThat(s.blockHashes(InferenceRequest.completion("m", system + "x".repeat(63))))
        .hasSize(3);
    List<Candidate> pool = TestCandidates.pool(2);
    TestCandidates.joined(s, pool);
    route(s, InferenceRequest.completion("m", system + "question one"), pool, pool.get(1));
    double[] scores = new double[2];
    s.score(InferenceRequest.completion("m", system + "y".repeat(64)), state(), pool, scores);
    assertThat(scores).containsExactly(0.0, 0.75);
  }

  @Test
  void chatIsHashedCanonicallyAndGrowsByTurns() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<ChatMessage> turn1 = List.of(ChatMessage.system("You are terse. ".repeat(20)),
        ChatMessage.user("What is a KV cache? ".repeat(10)));
    List<ChatMessage> turn2 = new ArrayList<>(turn1);
    turn2.add(ChatMessage.assistant("It stores attention keys and values. ".repeat(5)));
    turn2.add(ChatMessage.user("And prefix caching?"));
    long[] h1 = s.blockHashes(InferenceRequest.builder().model("m").messages(turn1).build());
    long[] h2 = s.blockHashes(InferenceRequest.builder().model("m").messages(turn2).build());
    assertThat(h1.length).isPositive();
    assertThat(h2.length).isGreaterThan(h1.length);
    for (int i = 0; i < h1.length; i++) {
      assertThat(h2[i]).isEqualTo(h1[i]);
    }
    // role boundaries matter: the same text under another role is another conversation
    long[] swapped = s.blockHashes(InferenceRequest.builder().model("m")
        .messages(List.of(ChatMessage.user(turn1.get(0).content()), turn1.get(1))).build());
    assertThat(swapped[0]).isNotEqualTo(h1[0]);
    // tools come first, so different tools change every block
    long[] withTools = s.blockHashes(InferenceRequest.builder().model("m").messages(turn1)
        .toolsJson("[{\"function\":{\"name\":\"f\"},\"type\":\"function\"}]").build());
    assertThat(withTools[0]).isNotEqualTo(h1[0]);
  }

  @Test
  void maxPrefixBlocksCapsTheWork() {
    PrefixCacheScorer s = PrefixCacheScorer.builder().maxPrefixBlocksToMatch(4).build();
    assertThat(s.blockHashes(tok(tokens(16 * 10, 0)))).hasSize(4);
    assertThat(PrefixCacheScorer.create().blockHashes(tok(tokens(16 * 10, 0)))).hasSize(10);
  }

  @Test
  void capacityFollowsNumGpuBlocksAndFallsBackToDefault() {
    PrefixCacheScorer s = PrefixCacheScorer.builder().lruCapacityPerServer(100).build();
    Candidate known = TestCandidates.withMetrics("10.0.0.1:8000", EndpointMetrics.builder()
        .kvCapacityBlocks(10).blockSizeTokens(32).scrapedAtNanos(0).build());
    Candidate unknown = TestCandidates.cand("10.0.0.2:8000");
    TestCandidates.joined(s, List.of(known, unknown));
    s.score(tok(tokens(16, 0)), state(), List.of(known, unknown), new double[2]);
    assertThat(s.blocks(known.id()).capacity()).isEqualTo(20); // 10 blocks of 32 = 20 of 16
    assertThat(s.blocks(unknown.id()).capacity()).isEqualTo(100);
    // a scrape (same endpoint, new metrics) after routes that found the stores by position
    s.score(tok(tokens(16, 0)), state(), List.of(known, unknown), new double[2]);
    Candidate rescraped = new TestCandidates.Cand(known.endpoint(), EndpointMetrics.builder()
        .kvCapacityBlocks(40).blockSizeTokens(32).scrapedAtNanos(1).build(), 0, 0);
    s.score(tok(tokens(16, 0)), state(), List.of(rescraped, unknown), new double[2]);
    assertThat(s.blocks(known.id()).capacity()).isEqualTo(80);
    PrefixCacheScorer fixed = PrefixCacheScorer.builder().lruCapacityPerServer(100).autoTune(false).build();
    fixed.onEndpointAdded(known.endpoint());
    fixed.score(tok(tokens(16, 0)), state(), List.of(known), new double[1]);
    assertThat(fixed.blocks(known.id()).capacity()).isEqualTo(100);
  }

  @Test
  void aStoreHoldsAtMostTheBlocksItsTableCanIndex() {
    int max = EndpointBlocks.MAX_ENTRIES;
    org.assertj.core.api.Assertions.assertThatThrownBy(
        () -> PrefixCacheScorer.builder().lruCapacityPerServer(max + 1))
        .hasMessageContaining("lruCapacityPerServer").hasMessageContaining(String.valueOf(max));
    PrefixCacheScorer s = PrefixCacheScorer.builder().lruCapacityPerServer(max).build();
    Candidate huge = TestCandidates.withMetrics("10.0.0.1:8000", EndpointMetrics.builder()
        .kvCapacityBlocks(1L << 30).blockSizeTokens(16).scrapedAtNanos(0).build());
    TestCandidates.joined(s, List.of(huge));
    s.score(tok(tokens(16, 0)), state(), List.of(huge), new double[1]);
    assertThat(s.blocks(huge.id()).capacity()).isEqualTo(max);
  }

  @Test
  void aHugeNumGpuBlocksCapsTheStoreInsteadOfWrappingToOneBlock() {
    // num_gpu_blocks × the server's block size does not fit in a long: the capacity is the most
    // a store holds, not whatever the wrapped product gives
    PrefixCacheScorer s = PrefixCacheScorer.create();
    for (long blocks : new long[] {Long.MAX_VALUE / 4, Long.MAX_VALUE}) {
      assertThat(s.capacityOf(EndpointMetrics.builder().kvCapacityBlocks(blocks)
          .blockSizeTokens(64).scrapedAtNanos(0).build()))
          .as("num_gpu_blocks %d of 64 tokens", blocks).isEqualTo(EndpointBlocks.MAX_ENTRIES);
    }
  }

  @Test
  void anEndpointRemovedAndAddedAgainIsScoredOnItsNewStoreEvenThroughTheSameCandidateList() {
    AtomicLong now = new AtomicLong();
    PrefixCacheScorer s = PrefixCacheScorer.builder().ticker(now::get).build();
    List<Candidate> pool = TestCandidates.pool(3);
    TestCandidates.joined(s, pool);
    InferenceRequest r = tok(tokens(64, 0));
    // twice, so that the second route finds the stores by position
    route(s, r, pool, pool.get(1));
    assertThat(route(s, r, pool, pool.get(1))).containsExactly(0, 1, 0);
    s.onEndpointRemoved(pool.get(1).endpoint());
    // back after the store it left with was let go of
    now.addAndGet(TimeUnit.SECONDS.toNanos(PrefixCacheScorer.KEEP_DEPARTED_SECONDS + 1));
    s.onEndpointAdded(pool.get(1).endpoint()); // the same Endpoint object, a new empty store
    double[] scores = new double[3];
    s.score(r, state(), pool, scores);
    assertThat(scores).containsExactly(0, 0, 0);
    assertThat(s.blocks(pool.get(1).id()).size()).isZero();
  }

  /**
   * An engine put to sleep discards its KV cache: what was routed to it before is forgotten, both
   * by a lookup over the stores found by position and by one through the directory, while the
   * other endpoints keep theirs and the emptied store keeps its capacity and fills again.
   */
  @Test
  void anEndpointWhoseEngineFellAsleepIsBelievedToHoldNothing() {
    PrefixCacheScorer s = PrefixCacheScorer.builder().lruCapacityPerServer(1000).build();
    List<Candidate> pool = TestCandidates.pool(3);
    TestCandidates.joined(s, pool);
    InferenceRequest r = tok(tokens(64, 0));
    route(s, r, pool, pool.get(1));
    route(s, r, pool, pool.get(2));
    assertThat(route(s, r, pool, pool.get(1))).containsExactly(0, 1, 1);
    s.onEndpointCacheDropped(pool.get(1).endpoint());
    double[] scores = new double[3];
    s.score(r, state(), pool, scores);
    assertThat(scores).containsExactly(0, 0, 1);
    s.score(r, state(), pool, scores); // the slots rebuilt by the lookup before
    assertThat(scores).containsExactly(0, 0, 1);
    assertThat(s.blocks(pool.get(1).id()).size()).isZero();
    assertThat(s.blocks(pool.get(1).id()).capacity()).isEqualTo(1000);
    route(s, r, pool, pool.get(1));
    s.score(r, state(), pool, scores);
    assertThat(scores).containsExactly(0, 1, 1);
    s.onEndpointCacheDropped(Endpoint.parse("10.9.9.9:80")); // not in the pool: nothing to drop
    assertThat(s.trackedEndpoints()).isEqualTo(3);
  }

  @Test
  void lookupRefreshCanBeLimitedToRoutedEndpoints() {
    for (boolean refresh : new boolean[] {true, false}) {
      PrefixCacheScorer s = PrefixCacheScorer.builder().lruCapacityPerServer(4)
          .refreshOnLookup(refresh).build();
      List<Candidate> pool = TestCandidates.pool(2);
      TestCandidates.joined(s, pool);
      route(s, tok(tokens(32, 0)), pool, pool.get(0)); // A = blocks a0 a1
      route(s, tok(tokens(32, 500)), pool, pool.get(0)); // B = blocks b0 b1; A is older
      s.score(tok(tokens(32, 0)), state(), pool, new double[2]); // lookup of A
      route(s, tok(tokens(32, 900)), pool, pool.get(1)); // elsewhere: no effect on pool[0]
      route(s, tok(tokens(32, 700)), pool, pool.get(0)); // C evicts the two oldest blocks
      double[] scores = new double[2];
      s.score(tok(tokens(32, 0)), state(), pool, scores);
      // with refresh, A was touched by the lookup and B was evicted; without, A was evicted
      assertThat(scores[0]).as("refreshOnLookup=%s", refresh).isEqualTo(refresh ? 1.0 : 0.0);
    }
  }

  @Test
  void recordsPrefillPickToo() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    Endpoint decode = Endpoint.parse("10.0.0.1:8000");
    Endpoint prefill = Endpoint.parse("10.0.0.2:8000");
    s.onEndpointAdded(decode);
    s.onEndpointAdded(prefill);
    InferenceRequest r = tok(tokens(32, 0));
    CycleState st = state();
    s.score(r, st, List.of(TestCandidates.cand(decode.id())), new double[1]);
    Map<String, ProfileResult> res = new LinkedHashMap<>();
    res.put("decode", new ProfileResult("decode", List.of(decode)));
    res.put("prefill", new ProfileResult("prefill", List.of(prefill)));
    s.afterRouting(r, st, RoutingDecision.routed("decode", res, NONE));
    double[] scores = new double[2];
    s.score(r, state(), List.of(TestCandidates.cand(decode.id()), TestCandidates.cand(prefill.id())), scores);
    assertThat(scores).containsExactly(1.0, 1.0);
  }

  @Test
  void aFallbackRecordsThePromptWhereItIsServed() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<Candidate> pool = TestCandidates.pool(3);
    TestCandidates.joined(s, pool);
    InferenceRequest r = tok(tokens(64, 0));
    route(s, r, pool, pool.get(0));
    s.onFallback(r, pool.get(0).endpoint(), pool.get(1).endpoint());
    double[] scores = new double[3];
    s.score(tok(tokens(64, 0)), state(), pool, scores);
    assertThat(scores[1]).as("the fallback now holds the prompt").isEqualTo(1.0);
    assertThat(scores[2]).isZero();
    s.onEndpointRemoved(pool.get(2).endpoint());
    s.onFallback(r, pool.get(1).endpoint(), pool.get(2).endpoint()); // left the pool: nothing kept
    assertThat(s.blocks(pool.get(2).id())).isNull();
  }

  @Test
  void forgetsRemovedEndpoints() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<Candidate> pool = TestCandidates.pool(2);
    TestCandidates.joined(s, pool);
    route(s, tok(tokens(32, 0)), pool, pool.get(0));
    assertThat(s.blocks(pool.get(0).id())).isNotNull();
    s.onEndpointRemoved(pool.get(0).endpoint());
    assertThat(s.blocks(pool.get(0).id())).isNull();
    double[] scores = new double[2];
    s.score(tok(tokens(32, 0)), state(), pool, scores);
    assertThat(scores).containsExactly(0.0, 0.0); // a new endpoint at that address starts cold
  }

  @Test
  void aRouteThatOutlivesItsEndpointsRemovalLeavesNoStateBehind() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<Candidate> pool = TestCandidates.pool(2);
    TestCandidates.joined(s, pool);
    Candidate leaving = pool.get(0);
    InferenceRequest r = tok(tokens(64, 0));
    CycleState st = state();
    s.score(r, st, pool, new double[2]); // the route read the pool before the removal ...
    s.onEndpointRemoved(leaving.endpoint());
    s.afterRouting(r, st, decision(leaving.endpoint())); // ... and records after its cleanup
    s.score(r, state(), pool, new double[2]); // another route still holding the old snapshot
    s.record(leaving.id(), s.blockHashes(r));
    assertThat(s.blocks(leaving.id())).isNull();
    assertThat(s.trackedEndpoints()).isEqualTo(1);
  }

  /**
   * A P/D pool (prefill-filter / decode-filter) routes every request over a filtered list, so
   * after one route over the whole pool (before the filters' roles were set, or through a profile
   * without a filter) the scorer may never see the whole pool again: the removal alone has to let
   * go of what the departed endpoints held.
   */
  @Test
  void endpointsThatLeaveAPoolRoutedOnlyThroughFiltersKeepNoStoreInTheScorer() {
    AtomicLong now = new AtomicLong();
    PrefixCacheScorer s = PrefixCacheScorer.builder().ticker(now::get).build();
    List<Candidate> pool = TestCandidates.pool(4);
    TestCandidates.joined(s, pool);
    InferenceRequest r = tok(tokens(64, 0));
    List<Candidate> whole = new HeadDirectoryTest.Ordered(pool, new Object());
    route(s, r, whole, pool.get(2)); // builds the table of stores by position
    route(s, r, whole, pool.get(3));
    assertThat(s.scoredByDirectory(scoreOnce(s, r, whole))).as("the table is in use").isTrue();
    List<Candidate> live = pool.subList(0, 2);
    EndpointBlocks departed2 = s.blocks(pool.get(2).id());
    EndpointBlocks departed3 = s.blocks(pool.get(3).id());
    assertThat(departed2.size()).isPositive();

    s.onEndpointRemoved(pool.get(2).endpoint());
    s.onEndpointRemoved(pool.get(3).endpoint());
    // kept for a return for a while, then let go of by a route
    now.addAndGet(TimeUnit.SECONDS.toNanos(PrefixCacheScorer.KEEP_DEPARTED_SECONDS + 1));
    for (int i = 0; i < 10; i++) {
      Candidate c = live.get(i % 2);
      route(s, tok(tokens(64, 100 * i)), List.of(c), c); // filtered: never the whole pool
    }

    assertThat(s.heldStores()).as("stores the scorer references")
        .containsExactlyInAnyOrder(s.blocks(live.get(0).id()), s.blocks(live.get(1).id()))
        .doesNotContain(departed2, departed3);
    assertThat(s.tableEndpoints()).as("endpoints in the table by position")
        .doesNotContain(pool.get(2).endpoint(), pool.get(3).endpoint());
    assertThat(s.footprintBytes()).as("bytes held: the live endpoints' stores only")
        .isEqualTo(s.blocks(live.get(0).id()).footprintBytes()
            + s.blocks(live.get(1).id()).footprintBytes());
  }

  @Test
  void aRouteOverAListReadBeforeAReplacementPutsNothingOfTheDepartedEndpointInTheTable() {
    PrefixCacheScorer s = PrefixCacheScorer.create();
    List<Candidate> before = TestCandidates.pool(3);
    TestCandidates.joined(s, before);
    // the route read the pool; meanwhile its third endpoint was replaced by a new one
    s.onEndpointRemoved(before.get(2).endpoint());
    s.onEndpointAdded(Endpoint.parse("10.0.0.9:8000"));
    InferenceRequest r = tok(tokens(64, 0));
    double[] scores = route(s, r, new HeadDirectoryTest.Ordered(before, new Object()),
        before.get(0));
    assertThat(scores).containsExactly(0, 0, 0);
    assertThat(s.tableEndpoints()).as("the table built from that list")
        .containsExactly(before.get(0).endpoint(), before.get(1).endpoint());
    assertThat(s.trackedEndpoints()).isEqualTo(3);
    assertThat(route(s, r, List.of(before.get(0)), before.get(0))).containsExactly(1.0);
  }

  @Test
  void nothingOfEndpointsThatLeftIsReachableFromTheScorerUnderFilteredRouting() {
    AtomicLong now = new AtomicLong();
    PrefixCacheScorer s = PrefixCacheScorer.builder().ticker(now::get).build();
    List<Candidate> live = TestCandidates.pool(2);
    TestCandidates.joined(s, live);
    List<WeakReference<Object>> departed = joinRouteAndRemove(s, live);
    now.addAndGet(TimeUnit.SECONDS.toNanos(PrefixCacheScorer.KEEP_DEPARTED_SECONDS + 1));
    for (int i = 0; i < 10; i++) {
      Candidate c = live.get(i % 2);
      route(s, tok(tokens(64, 100 * i)), List.of(c), c);
    }
    for (int i = 0; i < 50 && departed.stream().anyMatch(w -> w.get() != null); i++) {
      System.gc();
    }
    for (WeakReference<Object> w : departed) {
      assertThat(w.get()).as("still reachable after the removal").isNull();
    }
    assertThat(s.trackedEndpoints()).isEqualTo(2);
  }

  /**
   * Two endpoints with their own metrics join, are routed to over the whole pool (so the scorer's
   * table and directory of first blocks hold them) and leave again; returns weak references to
   * their endpoints, metrics and stores, which nothing else holds.
   */
  private static List<WeakReference<Object>> joinRouteAndRemove(PrefixCacheScorer s,
      List<Candidate> live) {
    List<Candidate> leaving = new ArrayList<>();
    for (int i = 0; i < 2; i++) {
      Candidate c = TestCandidates.withMetrics("10.9.0." + (i + 1) + ":8000",
          EndpointMetrics.builder().kvCapacityBlocks(4096 + i).blockSizeTokens(16)
              .scrapedAtNanos(0).build());
      leaving.add(c);
      s.onEndpointAdded(c.endpoint());
    }
    List<Candidate> all = new ArrayList<>(live);
    all.addAll(leaving);
    List<Candidate> whole = new HeadDirectoryTest.Ordered(all, new Object());
    InferenceRequest r = tok(tokens(64, 0));
    route(s, r, whole, leaving.get(0));
    route(s, r, whole, leaving.get(1));
    List<WeakReference<Object>> refs = new ArrayList<>();
    for (Candidate c : leaving) {
      refs.add(new WeakReference<>(c.endpoint()));
      refs.add(new WeakReference<>(c.metrics()));
      refs.add(new WeakReference<>(s.blocks(c.id())));
      assertThat(s.blocks(c.id()).size()).isPositive();
    }
    for (Candidate c : leaving) {
      s.onEndpointRemoved(c.endpoint());
    }
    return refs;
  }

  private static CycleState scoreOnce(PrefixCacheScorer s, InferenceRequest r,
      List<Candidate> candidates) {
    CycleState st = state();
    s.score(r, st, candidates, new double[candidates.size()]);
    return st;
  }

  @Test
  void endpointChurnWithNeverReusedIdsKeepsStateWithinThePool() throws Exception {
    // replaced pods come back under new addresses: every id leaves once and never returns, so
    // any state left for a departed id is kept forever
    int capacity = 64;
    PrefixCacheScorer s = PrefixCacheScorer.builder().lruCapacityPerServer(capacity).build();
    int poolSize = 6;
    List<Endpoint> initial = new ArrayList<>();
    for (int i = 0; i < poolSize; i++) {
      initial.add(Endpoint.parse("10.1.0." + i + ":8000"));
    }
    try (Router router = Router.builder().endpoints(initial)
        .profile(SchedulingProfile.builder("default").scorer("prefix-cache-scorer", s, 1).build())
        .randomSeed(3).build()) {
      int replacements = 3_000;
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
      AtomicBoolean churning = new AtomicBoolean(true);
      AtomicReference<Throwable> failure = new AtomicReference<>();
      List<Thread> routers = new ArrayList<>();
      for (int t = 0; t < 3; t++) {
        final int seed = t;
        Thread th = new Thread(() -> {
          try {
            for (int i = 0; churning.get() && System.nanoTime() < deadline; i++) {
              RoutingDecision d = router.route(tok(tokens(16 * (1 + i % 8), (seed * 31 + i) % 50)));
              if (d.isRouted()) {
                d.onComplete(Usage.NONE);
              }
            }
          } catch (Throwable e) {
            failure.compareAndSet(null, e);
          }
        });
        routers.add(th);
        th.start();
      }
      try {
        for (int i = 0; i < replacements && System.nanoTime() < deadline; i++) {
          String old = router.endpoints().get(i % poolSize).id();
          router.removeEndpoint(old);
          router.addEndpoint(Endpoint.parse("10.2." + (i / 250) + "." + (i % 250) + ":8000"));
        }
      } finally {
        churning.set(false);
        for (Thread th : routers) {
          th.join(TimeUnit.SECONDS.toMillis(30));
          assertThat(th.isAlive()).as("routing thread finished").isFalse();
        }
      }
      assertThat(failure.get()).isNull();
      List<String> inPool = router.endpoints().stream().map(Candidate::id).toList();
      assertThat(inPool).hasSize(poolSize);
      assertThat(s.trackedEndpoints()).as("endpoints with state").isEqualTo(poolSize);
      for (String id : inPool) {
        assertThat(s.blocks(id)).as(id).isNotNull();
      }
      // memory: at most one full store per endpoint in the pool, and as many again kept for
      // the return of endpoints that left
      assertThat(s.departedStores()).isLessThanOrEqualTo(poolSize);
      EndpointBlocks full = new EndpointBlocks(capacity);
      long[] chain = new long[4 * capacity];
      for (int i = 0; i < chain.length; i++) {
        chain[i] = 0x9E3779B97F4A7C15L * (i + 1);
      }
      full.record(chain, chain.length);
      assertThat(s.footprintBytes()).isLessThanOrEqualTo(2L * poolSize * full.footprintBytes());
    }
  }

  @Test
  void concurrentLookupsAndRecordsStayConsistent() throws Exception {
    PrefixCacheScorer s = PrefixCacheScorer.builder().lruCapacityPerServer(500).build();
    List<Candidate> pool = TestCandidates.pool(4);
    TestCandidates.joined(s, pool);
    int threads = 4;
    CountDownLatch start = new CountDownLatch(1);
    AtomicReference<Throwable> failure = new AtomicReference<>();
    List<Thread> ts = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      final int id = t;
      Thread th = new Thread(() -> {
        try {
          if (!start.await(10, TimeUnit.SECONDS)) {
            throw new AssertionError("start signal not given");
          }
          for (int i = 0; i < 3000; i++) {
            int[] ids = tokens(16 * (1 + (i % 12)), (i % 7) * 1000);
            InferenceRequest r = tok(ids);
            double[] sc = route(s, r, pool, pool.get((i + id) % 4));
            for (double v : sc) {
              if (!(v >= 0 && v <= 1)) {
                throw new AssertionError("score out of range: " + v);
              }
            }
          }
        } catch (Throwable e) {
          failure.compareAndSet(null, e);
        }
      });
      ts.add(th);
      th.start();
    }
    start.countDown();
    for (Thread th : ts) {
      th.join(30_000);
      assertThat(th.isAlive()).as("routing thread finished").isFalse();
    }
    assertThat(failure.get()).isNull();
    for (Candidate c : pool) {
      EndpointBlocks b = s.blocks(c.id());
      assertThat(b.size()).isLessThanOrEqualTo(500);
      assertThat(b.keysMostRecentFirst()).hasSize(b.size()).doesNotHaveDuplicates();
    }
    // after the storm, a just-recorded prompt is fully matched
    route(s, tok(tokens(64, 5)), pool, pool.get(2));
    double[] scores = new double[4];
    s.score(tok(tokens(64, 5)), state(), pool, scores);
    assertThat(scores[2]).isEqualTo(1.0);
  }
}
