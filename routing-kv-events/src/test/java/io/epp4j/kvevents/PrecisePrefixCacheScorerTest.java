package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import io.epp4j.api.Scorer;
import io.epp4j.core.ConfigException;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class PrecisePrefixCacheScorerTest {
  static final String MODEL = "qwen3-1.7b";
  static final List<Endpoint> EPS = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"), Endpoint.parse("10.0.0.3:8000"));

  /**
   * A configuration of one profile with the precise scorer alone, its parameters given as the
   * body of a YAML flow mapping (e.g. {@code "speculative: false"}).
   */
  static String preciseOnly(String parameters) {
    return """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters: {%s}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """.formatted(parameters);
  }

  static String yaml(String type) {
    return """
        plugins:
        - type: %s
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: %s
          - pluginRef: max-score-picker
        """.formatted(type, type);
  }

  final AtomicLong now = new AtomicLong(1_000_000_000L);
  final KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();
  Router router;

  Router router(String yaml) {
    router = Router.builder().endpoints(EPS).service(KvBlockIndex.class, index)
        .configYaml(yaml, "test").ticker(now::get).randomSeed(5).build();
    return router;
  }

  @AfterEach
  void close() {
    if (router != null) {
      router.close();
    }
  }

  static InferenceRequest request(int[] tokens) {
    return InferenceRequest.builder().model(MODEL).tokenIds(tokens).sessionKey("s").build();
  }

  static int[] prompt(int seed, int n) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = seed * 100_000 + i;
    }
    return t;
  }

  void store(String ep, int[] tokens, int blocks, long firstHash) {
    long[] hashes = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      hashes[i] = firstHash + i;
    }
    index.apply(ep, KvEventBatch.of(0, List.of(
        KvEvent.BlockStored.of(hashes, null, Arrays.copyOf(tokens, blocks * 16), 16))));
  }

  @Test
  void theEndpointHoldingTheLongestRunFromBlockZeroWins() {
    router(yaml("precise-prefix-cache-scorer"));
    int[] p = prompt(1, 16 * 8 + 5);
    store("10.0.0.1:8000", p, 3, 100);
    store("10.0.0.2:8000", p, 6, 200);
    for (int i = 0; i < 20; i++) {
      assertThat(router.route(request(p)).primary().id()).isEqualTo("10.0.0.2:8000");
    }
  }

  @Test
  void aNewPrefixFollowsTheFirstRequestWhileSpeculativeEntriesLive() {
    router(yaml("precise-prefix-cache-scorer"));
    int[] p = prompt(2, 160);
    String first = router.route(request(p)).primary().id();
    for (int i = 0; i < 20; i++) {
      assertThat(router.route(request(p)).primary().id()).isEqualTo(first);
    }
    long[] keys = BlockKeys.chain(BlockKeys.seed("", null, null), p, 16, 100);
    assertThat(index.prefixWeight(first, keys, now.get())).isEqualTo(10.0);
    now.addAndGet(2_000_000_001L);
    assertThat(index.prefixWeight(first, keys, now.get())).isZero();
    Set<String> seen = new HashSet<>();
    for (int i = 0; i < 30; i++) {
      int[] fresh = prompt(100 + i, 64);
      seen.add(router.route(request(fresh)).primary().id());
    }
    assertThat(seen).hasSize(3); // cold prompts are not all drawn to one endpoint
  }

  @Test
  void anEndpointServingAnotherModelNeverMatches() {
    index.setEndpointModel("10.0.0.1:8000", "other-model");
    index.setEndpointModel("10.0.0.2:8000", MODEL);
    router(yaml("precise-prefix-cache-scorer"));
    int[] p = prompt(3, 64);
    store("10.0.0.1:8000", p, 4, 1);
    store("10.0.0.2:8000", p, 2, 50);
    assertThat(router.route(request(p)).primary().id()).isEqualTo("10.0.0.2:8000");
  }

  @Test
  void removingAnEndpointFromTheRouterForgetsItsBlocks() {
    router(yaml("precise-prefix-cache-scorer"));
    int[] p = prompt(4, 64);
    store("10.0.0.3:8000", p, 4, 1);
    assertThat(index.blockCount("10.0.0.3:8000")).isEqualTo(4);
    router.removeEndpoint("10.0.0.3:8000");
    assertThat(index.blockCount("10.0.0.3:8000")).isZero();
  }

  static List<io.epp4j.api.Candidate> candidates(List<Endpoint> eps) {
    List<io.epp4j.api.Candidate> out = new java.util.ArrayList<>();
    for (Endpoint e : eps) {
      out.add(new io.epp4j.api.Candidate() {
        @Override public Endpoint endpoint() { return e; }
        @Override public io.epp4j.api.EndpointMetrics metrics() {
          return io.epp4j.api.EndpointMetrics.UNKNOWN;
        }
        @Override public int inFlightRequests() { return 0; }
        @Override public long inFlightTokens() { return 0; }
      });
    }
    return out;
  }

  static io.epp4j.api.RoutingDecision decision(Endpoint primary) {
    return io.epp4j.api.RoutingDecision.routed("default", java.util.Map.of("default",
        new io.epp4j.api.ProfileResult("default", List.of(primary))), NO_CALLBACKS);
  }

  static final io.epp4j.api.RoutingDecision.Callbacks NO_CALLBACKS =
      new io.epp4j.api.RoutingDecision.Callbacks() {
        @Override public void firstToken(io.epp4j.api.RoutingDecision d) {}
        @Override public void complete(io.epp4j.api.RoutingDecision d, io.epp4j.api.Usage u) {}
        @Override public void failure(io.epp4j.api.RoutingDecision d, Throwable t) {}
      };

  /** A hybrid over {@link #index} (10 min memory, 1,000 blocks) with {@link #EPS} announced. */
  private HybridPrefixCacheScorer hybridOnEps() {
    PrecisePrefixCacheScorer precise =
        new PrecisePrefixCacheScorer(index, null, null, 1024, true, true, false);
    HybridPrefixCacheScorer hybrid =
        new HybridPrefixCacheScorer(precise, 0.8, 600_000_000_000L, 1000, false);
    EPS.forEach(hybrid::onEndpointAdded);
    return hybrid;
  }

  @Test
  void aRouteThatOutlivesItsEndpointsRemovalLeavesNoStateInTheIndexOrTheMemory() {
    HybridPrefixCacheScorer hybrid = hybridOnEps();
    List<io.epp4j.api.Candidate> pool = candidates(EPS);
    Endpoint leaving = EPS.get(0);
    int[] p = prompt(11, 64);
    io.epp4j.api.CycleState st = new io.epp4j.api.CycleState(now.get(), new java.util.Random(1));
    hybrid.score(request(p), st, pool, new double[3]); // read the pool before the removal ...
    hybrid.onEndpointRemoved(leaving);
    hybrid.afterRouting(request(p), st, decision(leaving)); // ... and recorded after it
    assertThat(index.endpointView(leaving.id())).as("index entry").isNull();
    assertThat(hybrid.rememberedEndpoints()).as("routing memory").isEqualTo(2);
    // the endpoints still in the pool are recorded as before
    io.epp4j.api.CycleState st2 = new io.epp4j.api.CycleState(now.get(), new java.util.Random(1));
    hybrid.score(request(p), st2, pool, new double[3]);
    hybrid.afterRouting(request(p), st2, decision(EPS.get(1)));
    long[] keys = BlockKeys.chain(BlockKeys.seed("", null, null), p, 16, 100);
    assertThat(index.prefixWeight(EPS.get(1).id(), keys, now.get())).isEqualTo(4.0);
    hybrid.close();
  }

  /**
   * An endpoint removed and added again (the same {@code Endpoint} object, in the same place of
   * the same candidate list) has a new, empty memory, which the next routes must read: a cache
   * of memories by position would have to notice (one was measured, 1-7 % faster, not kept).
   */
  @Test
  void anEndpointRemovedAndAddedAgainIsScoredOnItsNewMemoryThroughTheSameCandidateList() {
    newMemoryIsReachedThrough(candidates(EPS), 12);
  }

  /** The same through a list in the pool's order, as the router hands it out. */
  @Test
  void aListInThePoolsOrderReachesTheNewMemoryOfAnEndpointRemovedAndAddedAgain() {
    newMemoryIsReachedThrough(new Ordered(candidates(EPS), new Object()), 14);
  }

  private void newMemoryIsReachedThrough(List<io.epp4j.api.Candidate> pool, int seed) {
    int[] p = prompt(seed, 65); // 4 blocks and a token: all 4 may be served
    Endpoint home = EPS.get(0);
    HybridPrefixCacheScorer hybrid = hybridOnEps();
    routeTo(hybrid, pool, p, home);
    now.addAndGet(5_000_000_000L); // past the speculative entries: only the memory is left
    assertThat(scores(hybrid, pool, p)).as("remembered on the first only").containsExactly(
        0.8, 0.0, 0.0);

    hybrid.onEndpointRemoved(home);
    hybrid.onEndpointAdded(home);
    assertThat(scores(hybrid, pool, p)[0]).as("a new memory remembers nothing").isZero();
    // routed there again: the new memory remembers, and the same list must reach it
    routeTo(hybrid, pool, p, home);
    now.addAndGet(5_000_000_000L);
    assertThat(scores(hybrid, pool, p)[0]).as("remembered by the new memory").isEqualTo(0.8);
    hybrid.close();
  }

  /** The pool's candidates as the router hands them out: a list with a {@code PoolOrder}. */
  static final class Ordered extends java.util.AbstractList<io.epp4j.api.Candidate>
      implements io.epp4j.api.PoolOrder, java.util.RandomAccess {
    private final List<io.epp4j.api.Candidate> elements;
    private final Object token;
    private final java.util.Map<String, Integer> positions = new java.util.HashMap<>();

    Ordered(List<io.epp4j.api.Candidate> elements, Object token) {
      this.elements = List.copyOf(elements);
      this.token = token;
      for (int i = 0; i < this.elements.size(); i++) {
        positions.put(this.elements.get(i).id(), i);
      }
    }

    @Override public io.epp4j.api.Candidate get(int i) { return elements.get(i); }
    @Override public int size() { return elements.size(); }
    @Override public Object poolOrder() { return token; }
    @Override public int positionOf(String id) { return positions.getOrDefault(id, -1); }
  }

  private double[] preciseScores(PrecisePrefixCacheScorer s, List<io.epp4j.api.Candidate> pool,
      int[] p) {
    double[] out = new double[pool.size()];
    s.score(request(p), new io.epp4j.api.CycleState(now.get(), new java.util.Random(1)), pool,
        out);
    return out;
  }

  /**
   * vLLM computes a prompt's last token whatever it holds ({@code max_cache_hit_length =
   * num_tokens - 1}) and serves only whole blocks, so a prompt that ends exactly at a block's end
   * is served at most the blocks before its last one. An endpoint holding the whole prompt was
   * credited with that last block too: it outscored an endpoint holding all but the last block,
   * although both engines compute the same one block, and a one-block prompt held anywhere
   * counted as a hit. Through a plain list and a list in the pool's order alike.
   */
  @Test
  void aPromptEndingAtABlocksEndIsNotCreditedWithItsLastBlock() {
    PrecisePrefixCacheScorer s =
        new PrecisePrefixCacheScorer(index, null, null, 1024, true, false, false);
    EPS.forEach(s::onEndpointAdded);
    List<io.epp4j.api.Candidate> pool = candidates(EPS);
    int[] p = prompt(31, 64); // exactly 4 blocks
    store("10.0.0.1:8000", p, 4, 1100);
    store("10.0.0.2:8000", p, 3, 1200);
    for (List<io.epp4j.api.Candidate> list : List.of(pool, new Ordered(pool, new Object()))) {
      io.epp4j.api.CycleState st =
          new io.epp4j.api.CycleState(now.get(), new java.util.Random(1));
      double[] scores = new double[3];
      s.score(request(p), st, list, scores);
      assertThat(scores).as("3 of 4 blocks served on both").containsExactly(0.75, 0.75, 0.0);
      io.epp4j.api.PrefixHits hits = st.get(io.epp4j.api.PrefixHits.KEY);
      assertThat(hits.cachedBlocks(hits.indexOf("10.0.0.1:8000"))).isEqualTo(3.0);
      assertThat(hits.totalBlocks(hits.indexOf("10.0.0.1:8000"))).isEqualTo(4);
      // one token more: the engine serves all four blocks and computes the token after them
      int[] longer = Arrays.copyOf(p, 65);
      assertThat(preciseScores(s, list, longer)).containsExactly(1.0, 0.75, 0.0);
      // a prompt of one block: nothing to serve from any cache, a miss everywhere
      int[] oneBlock = Arrays.copyOf(p, 16);
      io.epp4j.api.CycleState one =
          new io.epp4j.api.CycleState(now.get(), new java.util.Random(1));
      double[] oneScores = new double[3];
      s.score(request(oneBlock), one, list, oneScores);
      assertThat(oneScores).containsExactly(0.0, 0.0, 0.0);
      io.epp4j.api.PrefixHits oneHits = one.get(io.epp4j.api.PrefixHits.KEY);
      assertThat(oneHits.cachedBlocks(oneHits.indexOf("10.0.0.1:8000"))).isZero();
    }
  }

  /**
   * The hybrid's memory of a route is bound the same way: a prompt of exactly 4 blocks routed
   * to an endpoint is served 3 of them there next time, so the memory credits 0.8 x 3 of 4.
   */
  @Test
  void theHybridsMemoryOfAPromptEndingAtABlocksEndLeavesOutItsLastBlock() {
    for (boolean ordered : new boolean[] {false, true}) {
      HybridPrefixCacheScorer hybrid = hybridOnEps();
      List<io.epp4j.api.Candidate> plain = candidates(EPS);
      List<io.epp4j.api.Candidate> pool = ordered ? new Ordered(plain, new Object()) : plain;
      int[] p = prompt(ordered ? 33 : 32, 64); // exactly 4 blocks, which no engine reports
      routeTo(hybrid, pool, p, EPS.get(1));
      now.addAndGet(5_000_000_000L); // past the speculative entries: only the memory is left
      assertThat(scores(hybrid, pool, p)).as("ordered: %s", ordered)
          .containsExactly(0.0, 0.8 * 3 / 4, 0.0);
      io.epp4j.api.CycleState st =
          new io.epp4j.api.CycleState(now.get(), new java.util.Random(1));
      hybrid.score(request(p), st, pool, new double[3]);
      io.epp4j.api.PrefixHits hits = st.get(io.epp4j.api.PrefixHits.KEY);
      assertThat(hits.cachedBlocks(hits.indexOf(EPS.get(1).id()))).as("ordered: %s", ordered)
          .isEqualTo(0.8 * 3);
      // one token more: all four blocks
      assertThat(scores(hybrid, pool, Arrays.copyOf(p, 65))).as("ordered: %s", ordered)
          .containsExactly(0.0, 0.8, 0.0);
      hybrid.close();
    }
  }

  /**
   * A list in the pool's order finds each endpoint's view in the index by position; the index
   * learning of an endpoint, or forgetting one, between two routes with the same list must show.
   */
  @Test
  void aListInThePoolsOrderSeesEndpointsTheIndexLearnsOfAndForgetsAsAPlainListDoes() {
    PrecisePrefixCacheScorer s =
        new PrecisePrefixCacheScorer(index, null, null, 1024, true, false, false);
    EPS.forEach(s::onEndpointAdded);
    List<io.epp4j.api.Candidate> pool = candidates(EPS);
    Ordered ordered = new Ordered(pool, new Object());
    int[] p = prompt(13, 65); // 4 blocks and a token: all 4 may be served
    store("10.0.0.1:8000", p, 2, 500);
    assertThat(preciseScores(s, ordered, p)).containsExactly(0.5, 0.0, 0.0);

    store("10.0.0.3:8000", p, 4, 600); // the index learns of the third endpoint now
    assertThat(preciseScores(s, ordered, p)).containsExactly(preciseScores(s, pool, p))
        .containsExactly(0.5, 0.0, 1.0);

    index.removeEndpoint("10.0.0.1:8000");
    assertThat(preciseScores(s, ordered, p)).containsExactly(preciseScores(s, pool, p))
        .containsExactly(0.0, 0.0, 1.0);
    store("10.0.0.1:8000", p, 3, 700); // and again, under a new view
    assertThat(preciseScores(s, ordered, p)).containsExactly(0.75, 0.0, 1.0);
  }

  /**
   * A list in the pool's order is matched through a cached layout and a walk that starts from the
   * holders of the first block; a plain list candidate by candidate. Through random stores on two
   * tiers and two block sizes, removals, clears, speculative records and their expiry, model
   * changes and endpoints the index forgets and learns again, over 40 endpoints (two holder
   * planes), both must give the same scores, hits, keys and real runs at every step.
   */
  @Test
  void aListInThePoolsOrderMatchesEveryIndexStateAsAPlainListDoes() {
    PrecisePrefixCacheScorer s =
        new PrecisePrefixCacheScorer(index, null, null, 1024, true, false, false);
    throughRandomIndexStates(s, s::onEndpointAdded, null);
  }

  /**
   * The same for the hybrid, whose memory a list in the pool's order reads only at the endpoints
   * its directory names for the first key: with routes recorded, blocks the engines report
   * removed (forgotten by the memory), and endpoints leaving and rejoining the memory.
   */
  @Test
  void aListInThePoolsOrderGetsTheHybridsScoresAndHitsAsAPlainListDoes() {
    PrecisePrefixCacheScorer precise =
        new PrecisePrefixCacheScorer(index, null, null, 1024, true, false, false);
    HybridPrefixCacheScorer h =
        new HybridPrefixCacheScorer(precise, 0.8, 600_000_000_000L, 200, false);
    throughRandomIndexStates(h, h::onEndpointAdded, h);
    h.close();
  }

  private void throughRandomIndexStates(Scorer s, java.util.function.Consumer<Endpoint> announce,
      @org.jspecify.annotations.Nullable HybridPrefixCacheScorer hybrid) {
    io.epp4j.api.RequestListener listener = (io.epp4j.api.RequestListener) s;
    java.util.SplittableRandom rnd = new java.util.SplittableRandom(20261202);
    List<Endpoint> eps = new java.util.ArrayList<>();
    for (int i = 0; i < 40; i++) {
      eps.add(Endpoint.parse("10.1.0." + i + ":8000"));
    }
    eps.forEach(announce);
    List<io.epp4j.api.Candidate> plain = candidates(eps);
    Ordered ordered = new Ordered(plain, new Object());
    // prompt families sharing prefixes of different lengths, 256 tokens each
    int[][] prompts = new int[12][256];
    for (int p = 0; p < prompts.length; p++) {
      int[] base = prompts[p - p % 3];
      int shared = p % 3 == 0 ? 0 : 16 * rnd.nextInt(1, 16);
      for (int t = 0; t < 256; t++) {
        prompts[p][t] = t < shared ? base[t] : rnd.nextInt(1, 150_000);
      }
    }
    java.util.Map<String, List<Long>> stored = new java.util.HashMap<>();
    long nextHash = 1;
    int fastMatches = 0;
    int raised = 0;
    for (int step = 0; step < 1500; step++) {
      Endpoint ep = eps.get(rnd.nextInt(eps.size()));
      String id = ep.id();
      int op = rnd.nextInt(100);
      if (op < 45) { // a stored chain from block 0, on GPU or offloaded, in blocks of 16 or 32
        int bs = rnd.nextInt(8) == 0 ? 32 : 16;
        int[] p = prompts[rnd.nextInt(prompts.length)];
        int blocks = rnd.nextInt(1, 256 / bs + 1);
        long[] hashes = new long[blocks];
        for (int b = 0; b < blocks; b++) {
          hashes[b] = nextHash++;
          stored.computeIfAbsent(id, k -> new java.util.ArrayList<>()).add(hashes[b]);
        }
        Medium medium = rnd.nextInt(4) == 0 ? Medium.CPU : Medium.GPU;
        index.apply(id, KvEventBatch.of(0, List.of(new KvEvent.BlockStored(hashes, false, 0,
            Arrays.copyOf(p, blocks * bs), bs, -1, medium, null, null))));
      } else if (op < 65) { // a hole anywhere in what the endpoint holds
        List<Long> held = stored.get(id);
        if (held != null && !held.isEmpty()) {
          long h = held.remove(rnd.nextInt(held.size()));
          index.apply(id, KvEventBatch.of(0, List.of(KvEvent.BlockRemoved.of(h))));
        }
      } else if (op < 68) {
        index.apply(id, KvEventBatch.of(0, List.of(KvEvent.AllBlocksCleared.INSTANCE)));
        stored.remove(id);
      } else if (op < 70) { // forgotten, then learned again under a new slot by its next store
        index.removeEndpoint(id);
        stored.remove(id);
      } else if (op < 73) {
        index.setEndpointModel(id, rnd.nextBoolean() ? "another-model" : "");
      } else if (op < 75 && hybrid != null) { // the memory forgets it, then remembers anew
        hybrid.onEndpointRemoved(ep);
        hybrid.onEndpointAdded(ep);
      } else if (op < 82) {
        now.addAndGet(rnd.nextLong(0, 3_000_000_000L)); // speculative entries expire after 2 s
      }
      int[] p = prompts[rnd.nextInt(prompts.length)];
      io.epp4j.api.CycleState a = new io.epp4j.api.CycleState(now.get(), new java.util.Random(1));
      io.epp4j.api.CycleState b = new io.epp4j.api.CycleState(now.get(), new java.util.Random(1));
      double[] viaOrder = new double[eps.size()];
      double[] viaPlain = new double[eps.size()];
      s.score(request(p), a, ordered, viaOrder);
      s.score(request(p), b, plain, viaPlain);
      assertThat(viaOrder).as("scores at step %d", step).containsExactly(viaPlain);
      PreciseMatch ma = a.get(PreciseMatch.KEY);
      PreciseMatch mb = b.get(PreciseMatch.KEY);
      if (ma.scoredOver(ordered)) {
        fastMatches++;
      }
      io.epp4j.api.PrefixHits ha = a.get(io.epp4j.api.PrefixHits.KEY);
      io.epp4j.api.PrefixHits hb = b.get(io.epp4j.api.PrefixHits.KEY);
      for (Endpoint e : eps) {
        String at = "step " + step + ", " + e.id();
        assertThat(ma.matchedWeight(e.id())).as(at).isEqualTo(mb.matchedWeight(e.id()));
        assertThat(ma.totalBlocks(e.id())).as(at).isEqualTo(mb.totalBlocks(e.id()));
        assertThat(ma.knownReal(e.id())).as(at).isEqualTo(mb.knownReal(e.id()));
        assertThat(ma.keys(e.id())).as(at).containsExactly(mb.keys(e.id()));
        // both walks against the block-by-block reading of the shared planes (the walk may
        // finish on an endpoint's own table): the same weight, added in the same order, over
        // the blocks vLLM may serve (the prompts end at a block's end: all but the last) ...
        long[] k = mb.keys(e.id());
        int servable = KvBlockIndex.servableBlocks(k, p.length,
            mb.blockSizeTokens(mb.indexOf(e.id())));
        assertThat(ma.matchedWeight(e.id())).as("reference " + at)
            .isEqualTo(index.prefixWeight(e.id(), k, servable, now.get()));
        // ... and the same run of real holdings
        int realRun = 0;
        while (realRun < k.length && !index.tiers(e.id(), k[realRun]).isEmpty()) {
          realRun++;
        }
        if (ma.matchedWeight(e.id()) > 0) {
          assertThat(ma.knownReal(e.id())).as("real run " + at).isEqualTo(realRun);
        }
        int i = ma.indexOf(e.id());
        assertThat(ma.blockSizeTokens(i)).as(at).isEqualTo(mb.blockSizeTokens(mb.indexOf(e.id())));
        int ia = ha.indexOf(e.id());
        int ib = hb.indexOf(e.id());
        assertThat(ha.cachedBlocks(ia)).as("hits " + at).isEqualTo(hb.cachedBlocks(ib));
        assertThat(ha.totalBlocks(ia)).as("hits " + at).isEqualTo(hb.totalBlocks(ib));
        assertThat(ha.blockSizeTokens(ia)).as("hits " + at).isEqualTo(hb.blockSizeTokens(ib));
        if (ha.cachedBlocks(ia) > ma.matchedWeight(e.id())) {
          raised++;
        }
      }
      if (rnd.nextInt(3) == 0) { // routed: speculative entries (and memory) on the chosen one
        listener.afterRouting(request(p), a, decision(eps.get(rnd.nextInt(eps.size()))));
      }
    }
    // most steps must have taken the layout (the rest: an endpoint unknown to the index)
    assertThat(fastMatches).isGreaterThan(1000);
    if (hybrid != null) {
      assertThat(raised).as("candidates the memory credited above the precise run")
          .isGreaterThan(100);
    }
  }

  /** A match over a list in the pool's order finds each endpoint's position by id. */
  @Test
  void aMatchOverAListInThePoolsOrderFindsEveryEndpointByItsId() {
    PrecisePrefixCacheScorer s =
        new PrecisePrefixCacheScorer(index, null, null, 1024, true, false, false);
    EPS.forEach(s::onEndpointAdded);
    List<io.epp4j.api.Candidate> pool = candidates(EPS);
    int[] p = prompt(14, 64);
    store("10.0.0.2:8000", p, 3, 500);
    for (List<io.epp4j.api.Candidate> list : List.of(new Ordered(pool, new Object()), pool)) {
      io.epp4j.api.CycleState st = new io.epp4j.api.CycleState(now.get(), new java.util.Random(1));
      s.score(request(p), st, list, new double[list.size()]);
      PreciseMatch m = st.get(PreciseMatch.KEY);
      for (int i = 0; i < pool.size(); i++) {
        assertThat(m.indexOf(pool.get(i).id())).isEqualTo(i);
      }
      assertThat(m.indexOf("10.0.9.9:8000")).isEqualTo(-1);
      assertThat(m.matchedWeight("10.0.0.2:8000")).isEqualTo(3.0);
      assertThat(m.keys("10.0.0.3:8000")).hasSize(4);
    }
  }

  /** {@code to}'s engine reports the first {@code held} blocks of {@code p}, then p goes there. */
  private void routeWhereTheEngineHolds(HybridPrefixCacheScorer hybrid,
      List<io.epp4j.api.Candidate> pool, int[] p, Endpoint to, int held, long firstHash) {
    store(to.id(), p, held, firstHash);
    routeTo(hybrid, pool, p, to);
  }

  /** Scores {@code p} over {@code pool} and records it as routed to {@code to}. */
  private void routeTo(HybridPrefixCacheScorer hybrid, List<io.epp4j.api.Candidate> pool, int[] p,
      Endpoint to) {
    io.epp4j.api.CycleState st = new io.epp4j.api.CycleState(now.get(), new java.util.Random(1));
    hybrid.score(request(p), st, pool, new double[pool.size()]);
    hybrid.afterRouting(request(p), st, decision(to));
  }

  private double[] scores(HybridPrefixCacheScorer hybrid, List<io.epp4j.api.Candidate> pool,
      int[] p) {
    double[] out = new double[pool.size()];
    hybrid.score(request(p), new io.epp4j.api.CycleState(now.get(), new java.util.Random(1)),
        pool, out);
    return out;
  }

  @Test
  void endpointChurnWithNeverReusedIdsLeavesNoStateForDepartedEndpoints() throws Exception {
    router(yaml("hybrid-prefix-cache-scorer"));
    HybridPrefixCacheScorer hybrid = (HybridPrefixCacheScorer) router.config().profiles()
        .values().iterator().next().scorers().get(0).scorer();
    int poolSize = EPS.size();
    List<String> departed = new java.util.concurrent.CopyOnWriteArrayList<>();
    long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(20);
    java.util.concurrent.atomic.AtomicBoolean churning =
        new java.util.concurrent.atomic.AtomicBoolean(true);
    java.util.concurrent.atomic.AtomicReference<Throwable> failure =
        new java.util.concurrent.atomic.AtomicReference<>();
    List<Thread> routers = new java.util.ArrayList<>();
    for (int t = 0; t < 3; t++) {
      final int seed = t;
      Thread th = new Thread(() -> {
        try {
          for (int i = 0; churning.get() && System.nanoTime() < deadline; i++) {
            router.route(request(prompt((seed * 31 + i) % 40, 64))).onComplete(
                io.epp4j.api.Usage.NONE);
          }
        } catch (Throwable e) {
          failure.compareAndSet(null, e);
        }
      });
      routers.add(th);
      th.start();
    }
    try {
      for (int i = 0; i < 2_000 && System.nanoTime() < deadline; i++) {
        String old = router.endpoints().get(i % poolSize).id();
        router.removeEndpoint(old);
        departed.add(old);
        router.addEndpoint(Endpoint.parse("10.9." + (i / 250) + "." + (i % 250) + ":8000"));
      }
    } finally {
      churning.set(false);
      for (Thread th : routers) {
        th.join(30_000);
        assertThat(th.isAlive()).as("routing thread finished").isFalse();
      }
    }
    assertThat(failure.get()).isNull();
    assertThat(hybrid.rememberedEndpoints()).as("routing memory").isEqualTo(poolSize);
    long leftInIndex = departed.stream().filter(id -> index.endpointView(id) != null).count();
    assertThat(leftInIndex).as("departed endpoints the index still knows").isZero();
  }

  @Test
  void routingMemoryKeepsRememberingAnEndpointWhoseEngineClearedItsCache() {
    RoutingMemory m = new RoutingMemory(100, Long.MAX_VALUE);
    long[] keys = {11, 12, 13};
    m.addEndpoint("a:1");
    m.record("a:1", keys, 0);
    assertThat(m.prefixLength("a:1", keys, 1)).isEqualTo(3);
    m.clear("a:1");
    assertThat(m.prefixLength("a:1", keys, 1)).isZero();
    m.record("a:1", Arrays.copyOf(keys, 2), 1);
    assertThat(m.prefixLength("a:1", keys, 2)).isEqualTo(2);
    m.removeEndpoint("a:1");
    m.record("a:1", keys, 3);
    assertThat(m.prefixLength("a:1", keys, 4)).isZero();
    assertThat(m.endpoints()).isZero();
  }

  @Test
  void hybridKeepsADialogWhereItWentWhenNoCacheIsVisibleAnywhere() {
    router(yaml("hybrid-prefix-cache-scorer"));
    int[] turn1 = prompt(5, 200);
    String home = router.route(request(turn1)).primary().id();
    // the engine's events never show the dialog (evicted under pressure); speculation expires
    now.addAndGet(5_000_000_000L);
    int[] turn2 = Arrays.copyOf(turn1, 400);
    for (int i = 200; i < 400; i++) {
      turn2[i] = 7;
    }
    for (int i = 0; i < 10; i++) {
      assertThat(router.route(request(turn2)).primary().id()).isEqualTo(home);
    }
  }

  /**
   * The memory keeps only what the engine has not reported: a route to an endpoint that holds the
   * prompt's first 4 of 10 blocks remembers the first key and the 6 blocks after the held ones,
   * and the memory's credit there still spans the whole prompt (the held blocks counted from the
   * engine's report). Once the engine drops a block, the credit ends there, as the engine's own
   * run does.
   */
  @Test
  void hybridRemembersOnlyTheBlocksTheEngineHasNotReported() {
    HybridPrefixCacheScorer hybrid = hybridOnEps();
    List<io.epp4j.api.Candidate> pool = candidates(EPS);
    int[] p = prompt(21, 161); // 10 blocks and a token: all 10 may be served
    Endpoint home = EPS.get(1);
    routeWhereTheEngineHolds(hybrid, pool, p, home, 4, 700);
    assertThat(hybrid.rememberedKeys(home.id())).as("first key + blocks 4-9").isEqualTo(7);
    now.addAndGet(5_000_000_000L); // past the speculative entries: the engine's 4 and the memory
    assertThat(scores(hybrid, pool, p)).as("0.8 x 10 of 10 blocks, above the engine's 4")
        .containsExactly(0.0, 0.8, 0.0);
    // routed there again with the same 4 held: nothing new to remember
    routeTo(hybrid, pool, p, home);
    assertThat(hybrid.rememberedKeys(home.id())).isEqualTo(7);
    // the engine reports block 2 dropped: its run is 2 blocks, and the memory's credit ends there
    index.apply(home.id(), KvEventBatch.of(0, List.of(KvEvent.BlockRemoved.of(702))));
    now.addAndGet(5_000_000_000L);
    assertThat(scores(hybrid, pool, p)).as("the engine's 2 of 10 blocks")
        .containsExactly(0.0, 0.2, 0.0);
    hybrid.close();
  }

  /**
   * An engine that falls asleep discards its cache: the router says so even when the engine's own
   * AllBlocksCleared never arrived (a subscriber that was down), and the hybrid's memory of what
   * was routed there is forgotten, while it goes on remembering new routes.
   */
  @Test
  void theHybridForgetsItsMemoryOfAnEndpointWhoseEngineFellAsleep() {
    HybridPrefixCacheScorer hybrid = hybridOnEps();
    List<io.epp4j.api.Candidate> pool = candidates(EPS);
    int[] p = prompt(23, 160);
    Endpoint home = EPS.get(1);
    routeWhereTheEngineHolds(hybrid, pool, p, home, 4, 750);
    assertThat(hybrid.rememberedKeys(home.id())).isEqualTo(7);
    hybrid.onEndpointCacheDropped(home);
    assertThat(hybrid.rememberedKeys(home.id())).isZero();
    routeTo(hybrid, pool, p, home);
    assertThat(hybrid.rememberedKeys(home.id())).as("new routes are remembered").isPositive();
    hybrid.close();
  }

  /**
   * Where the index loses track of an endpoint without the engine's word (a resync after a
   * sequence gap), the memory vouches for what the index knew there, although it recorded only
   * the first key of the prompt the engine had already reported.
   */
  @Test
  void afterAResyncTheHybridStillCreditsWhatTheEngineHadReported() {
    HybridPrefixCacheScorer hybrid = hybridOnEps();
    List<io.epp4j.api.Candidate> pool = candidates(EPS);
    int[] p = prompt(22, 161); // 10 blocks and a token: all 10 may be served
    Endpoint home = EPS.get(2);
    routeWhereTheEngineHolds(hybrid, pool, p, home, 10, 800);
    assertThat(hybrid.rememberedKeys(home.id())).as("the first key only").isEqualTo(1);
    index.resync(home.id());
    now.addAndGet(5_000_000_000L);
    assertThat(index.prefixWeight(home.id(),
        BlockKeys.chain(BlockKeys.seed("", null, null), p, 16, 10), now.get())).isZero();
    assertThat(scores(hybrid, pool, p)).as("0.8 x the 10 blocks the index knew")
        .containsExactly(0.0, 0.0, 0.8);
    hybrid.close();
  }

  @Test
  void hybridPrefersTheEnginesTruthOverItsMemory() {
    router(yaml("hybrid-prefix-cache-scorer"));
    int[] p = prompt(6, 160);
    String home = router.route(request(p)).primary().id();
    now.addAndGet(5_000_000_000L);
    String other = EPS.stream().map(Endpoint::id).filter(id -> !id.equals(home)).findFirst()
        .orElseThrow();
    store(other, p, 10, 500); // engine truth: the whole prompt is on another replica
    assertThat(router.route(request(p)).primary().id()).isEqualTo(other);
  }

  @Test
  void hybridForgetsWhatTheEngineReportsEvicted() {
    router(yaml("hybrid-prefix-cache-scorer"));
    int[] p = prompt(9, 160);
    String home = router.route(request(p)).primary().id();
    now.addAndGet(5_000_000_000L);
    store(home, p, 10, 900);
    long[] stored = {900, 901, 902, 903, 904, 905, 906, 907, 908, 909};
    index.apply(home, KvEventBatch.of(0, List.of(KvEvent.BlockRemoved.of(stored))));
    String other = EPS.stream().map(Endpoint::id).filter(id -> !id.equals(home)).findFirst()
        .orElseThrow();
    store(other, p, 1, 950);
    // the engine said home dropped the prompt: the memory of sending it there no longer counts,
    // and one real block elsewhere wins
    for (int i = 0; i < 5; i++) {
      assertThat(router.route(request(p)).primary().id()).isEqualTo(other);
    }
  }

  @Test
  void hybridForgetsAnEndpointWhoseEngineClearedItsCache() {
    router(yaml("hybrid-prefix-cache-scorer"));
    int[] p = prompt(10, 160);
    String home = router.route(request(p)).primary().id();
    now.addAndGet(5_000_000_000L);
    String other = EPS.stream().map(Endpoint::id).filter(id -> !id.equals(home)).findFirst()
        .orElseThrow();
    store(other, p, 1, 990);
    assertThat(router.route(request(p)).primary().id()).as("memory still counts").isEqualTo(home);
    now.addAndGet(5_000_000_000L); // let the speculative entries of that decision expire
    index.apply(home, KvEventBatch.of(0, List.of(KvEvent.AllBlocksCleared.INSTANCE)));
    assertThat(router.route(request(p)).primary().id()).isEqualTo(other);
  }

  @Test
  void textRequestsAreScoredThroughTheTokenizerService() {
    Tokenizer chars = text -> text.chars().toArray();
    router = Router.builder().endpoints(EPS).service(KvBlockIndex.class, index)
        .service(Tokenizer.class, chars).configYaml(yaml("precise-prefix-cache-scorer"), "t")
        .ticker(now::get).randomSeed(1).build();
    String text = "x".repeat(40) + "y".repeat(40);
    store("10.0.0.3:8000", text.chars().toArray(), 5, 900);
    assertThat(router.route(InferenceRequest.completion(MODEL, text)).primary().id())
        .isEqualTo("10.0.0.3:8000");
  }

  @Test
  void badParametersAreReportedByName() {
    String bad = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            blockSizeTokens: 0
            kvEvents: {mode: sideways}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """;
    assertThatThrownBy(() -> router(bad)).isInstanceOf(ConfigException.class)
        .hasMessageContaining("blockSizeTokens").hasMessageContaining("mode");
  }

  @Test
  void aKvEventsFieldTheChosenModeDoesNotUseIsRefusedByName() {
    // each was read and then ignored: a per-endpoint router never binds, a central one never
    // connects to a publisher port, and mode none opens no socket at all
    String[][] cases = {
        {"{mode: per-endpoint, bindAddress: \"tcp://*:6000\"}",
            "'bindAddress' has no effect in mode per-endpoint"},
        {"{bindAddress: \"tcp://*:6000\"}", "'bindAddress' has no effect in mode per-endpoint"},
        {"{mode: central, bindAddress: \"tcp://127.0.0.1:*\", port: 6000}",
            "'port' has no effect in mode central"},
        {"{mode: none, port: 6000}", "'port' has no effect in mode none"},
        {"{mode: none, replayPort: 6001}", "'replayPort' has no effect in mode none"},
        {"{mode: none, topicFilter: \"kv@\"}", "'topicFilter' has no effect in mode none"},
    };
    for (String[] c : cases) {
      String yaml = preciseOnly("kvEvents: " + c[0]);
      assertThatThrownBy(() -> Router.builder().endpoints(EPS).configYaml(yaml, "t").build())
          .as(c[0]).isInstanceOf(ConfigException.class).hasMessageContaining(c[1]);
    }
    // with a KvBlockIndex service the mode is none unless the file says otherwise
    String implicitNone = preciseOnly("kvEvents: {port: 6000}");
    assertThatThrownBy(() -> Router.builder().endpoints(EPS).service(KvBlockIndex.class, index)
        .configYaml(implicitNone, "t").build()).isInstanceOf(ConfigException.class)
        .hasMessageContaining("'port' has no effect in mode none")
        .hasMessageContaining("KvBlockIndex service");
    // the fields each mode uses still load
    for (String ok : List.of("{mode: per-endpoint, port: 6000, replayPort: 6001}",
        "{mode: central, bindAddress: \"tcp://127.0.0.1:*\", replayPort: 6001}",
        "{mode: none}")) {
      org.assertj.core.api.Assertions.assertThatCode(() -> Router.builder().endpoints(EPS)
          .configYaml(preciseOnly("kvEvents: " + ok), "t").build().close())
          .as(ok).doesNotThrowAnyException();
    }
  }

  /**
   * kvEvents.receiveBufferBytes bounds the bytes of messages received and not yet applied; one
   * that cannot hold a message of the largest size accepted, or is not a number, is refused by
   * name, and so is one in mode none, which opens no socket.
   */
  @Test
  void aReceiveBufferThatCannotHoldOneMessageIsRefusedByName() {
    String[][] cases = {
        {"{receiveBufferBytes: 0}", "'receiveBufferBytes' must be at least 16777216"},
        {"{receiveBufferBytes: 16777215}", "'receiveBufferBytes' must be at least 16777216"},
        {"{receiveBufferBytes: -1}", "'receiveBufferBytes' must be at least 16777216"},
        {"{receiveBufferBytes: 256MiB}", "'receiveBufferBytes' must be an integer"},
        {"{mode: none, receiveBufferBytes: 268435456}",
            "'receiveBufferBytes' has no effect in mode none"},
    };
    for (String[] c : cases) {
      String yaml = preciseOnly("kvEvents: " + c[0]);
      assertThatThrownBy(() -> Router.builder().endpoints(EPS).configYaml(yaml, "t").build())
          .as(c[0]).isInstanceOf(ConfigException.class).hasMessageContaining("kvEvents")
          .hasMessageContaining(c[1]);
    }
    for (String ok : List.of("{receiveBufferBytes: 16777216}",
        "{mode: central, bindAddress: \"tcp://127.0.0.1:*\", receiveBufferBytes: 1073741824}")) {
      org.assertj.core.api.Assertions.assertThatCode(() -> Router.builder().endpoints(EPS)
          .configYaml(preciseOnly("kvEvents: " + ok), "t").build().close())
          .as(ok).doesNotThrowAnyException();
    }
  }

  /**
   * With a {@code KvBlockIndex} service the index was built by the application, so a file's
   * index-shaping field that says something else cannot take effect: each is refused by name,
   * for the precise and the hybrid scorer alike. A field that says what the index already does,
   * and {@code speculativeTtlMs: 0} (this scorer records no speculative entries), still load.
   */
  @Test
  void indexShapingFieldsThatDifferFromTheSharedIndexAreRefusedByName() {
    // index: the builder's defaults (16 tokens, 262144 blocks, 2 s, 0.8, no model)
    String[][] cases = {
        {"blockSizeTokens: 64", "'blockSizeTokens' is 64"},
        {"maxBlocksPerEndpoint: 1000", "'maxBlocksPerEndpoint' is 1000"},
        {"speculativeTtlMs: 5000", "'speculativeTtlMs' is 5000"},
        {"cpuWeight: 0.5", "'cpuWeight' is 0.5"},
        {"model: other", "'model' is 'other'"},
        {"tokenProcessorConfig: {blockSize: 64}", "'tokenProcessorConfig' blockSize is 64"},
    };
    for (String type : List.of("precise-prefix-cache-scorer", "hybrid-prefix-cache-scorer")) {
      for (String[] c : cases) {
        String yaml = preciseOnly(c[0]).replace("precise-prefix-cache-scorer", type);
        assertThatThrownBy(() -> router(yaml)).as(type + " " + c[0])
            .isInstanceOf(ConfigException.class).hasMessageContaining(c[1])
            .hasMessageContaining("KvBlockIndex service");
      }
    }
    for (String ok : List.of("blockSizeTokens: 16", "maxBlocksPerEndpoint: 262144",
        "speculativeTtlMs: 2000", "speculativeTtlMs: 0", "cpuWeight: 0.8", "model: \"\"",
        "tokenProcessorConfig: {blockSize: 16}")) {
      org.assertj.core.api.Assertions.assertThatCode(() -> router(preciseOnly(ok)).close())
          .as(ok).doesNotThrowAnyException();
    }
  }

  @Test
  void timeToLiveTooLongToCountInNanosecondsIsReportedByName() {
    // both TTLs are kept in nanoseconds: a value past Long.MAX_VALUE ns (about 292 years) would
    // overflow, and "remember forever" written as a huge number must not silently mean never
    for (String[] c : new String[][] {{"precise-prefix-cache-scorer", "speculativeTtlMs"},
        {"hybrid-prefix-cache-scorer", "memoryTtlMs"}}) {
      String yaml = """
          plugins:
          - type: %s
            parameters:
              kvEvents: {mode: none}
              %s: 9223372036854775807
          schedulingProfiles:
          - name: default
            plugins:
            - pluginRef: %s
          """.formatted(c[0], c[1], c[0]);
      assertThatThrownBy(() -> Router.builder().endpoints(EPS).configYaml(yaml, "t").build())
          .as(c[1]).isInstanceOf(ConfigException.class).hasMessageContaining(c[1]);
    }
    assertThatThrownBy(() -> KvBlockIndex.builder().speculativeTtl(java.time.Duration.ofDays(400)))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("speculativeTtl");
  }

  /** Stand-ins for scorers that live in routing-scorers. */
  static PluginProvider noopScorer(String type) {
    return new PluginProvider() {
      @Override
      public String type() {
        return type;
      }

      @Override
      public Result<? extends Plugin> create(PluginContext c, Parameters p) {
        Scorer s = (req, st, cands, scores) -> { };
        return Result.ok(s);
      }
    };
  }

  @Test
  void presetsLoadAndRoute() {
    PluginRegistry reg = PluginRegistry.fromServiceLoader()
        .with(noopScorer("queue-scorer"), noopScorer("kv-cache-utilization-scorer"));
    for (String preset : KvEventsPresets.names()) {
      try (Router r = Router.builder().endpoints(EPS).registry(reg)
          .service(KvBlockIndex.class, index).configYaml(KvEventsPresets.yaml(preset), preset)
          .ticker(now::get).build()) {
        int[] p = prompt(9, 64);
        store("10.0.0.2:8000", p, 4, 7_000);
        assertThat(r.route(request(p)).primary().id()).as(preset).isEqualTo("10.0.0.2:8000");
      }
    }
  }

  @Test
  void hybridInFallbackModeIgnoresMemoryWhenTheEngineShowsAnyHit() {
    String yaml = """
        plugins:
        - type: hybrid-prefix-cache-scorer
          parameters: {fallbackOnly: true}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: hybrid-prefix-cache-scorer
          - pluginRef: max-score-picker
        """;
    router(yaml);
    int[] p = prompt(8, 160);
    String home = router.route(request(p)).primary().id();
    now.addAndGet(5_000_000_000L);
    String other = EPS.stream().map(Endpoint::id).filter(id -> !id.equals(home)).findFirst()
        .orElseThrow();
    store(other, p, 1, 700); // a one-block real hit elsewhere outweighs a full remembered one
    for (int i = 0; i < 5; i++) {
      assertThat(router.route(request(p)).primary().id()).isEqualTo(other);
    }
  }
}
