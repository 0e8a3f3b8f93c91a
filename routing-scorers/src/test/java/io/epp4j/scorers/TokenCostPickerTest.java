package io.epp4j.scorers;

import static io.epp4j.scorers.TestCandidates.joined;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.offset;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.Result;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Ticker;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class TokenCostPickerTest {

  static final List<Candidate> POOL = TestCandidates.pool(3);

  static InferenceRequest request(int promptTokens, int maxTokens, String session) {
    return InferenceRequest.builder().model("m").tokenIds(new int[promptTokens])
        .maxTokens(maxTokens).sessionKey(session).build();
  }

  /** Hits at 16-token blocks: {@code cachedBlocks[i]} of the prompt on {@code POOL.get(i)}. */
  static CycleState withHits(int promptTokens, double... cachedBlocks) {
    CycleState s = TestCandidates.state();
    String[] ids = new String[cachedBlocks.length];
    int[] total = new int[cachedBlocks.length];
    for (int i = 0; i < ids.length; i++) {
      ids[i] = POOL.get(i).id();
      total[i] = promptTokens / 16;
    }
    PrefixHits.publish(s, PrefixHits.of(ids, total, cachedBlocks, 16));
    return s;
  }

  static RoutingDecision decision(Endpoint e) {
    return RoutingDecision.routed("default", Map.of("default", new ProfileResult("default",
        List.of(e))), new RoutingDecision.Callbacks() {
          @Override public void firstToken(RoutingDecision d) {}
          @Override public void complete(RoutingDecision d, Usage u) {}
          @Override public void failure(RoutingDecision d, Throwable c) {}
        });
  }

  /** Routes {@code r} through the picker as the router would and returns the endpoint. */
  static Candidate route(TokenCostPicker p, InferenceRequest r, CycleState s, List<Candidate> pool) {
    Candidate c = p.pick(r, s, pool, new double[pool.size()]).get(0);
    p.afterRouting(r, s, decision(c.endpoint()));
    return c;
  }

  @Test
  void costAddsMissesPendingPrefillDecodeInFlightAndOverflowInTokens() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.1, 1.0, 0), POOL);
    Candidate a = POOL.get(0);
    // one earlier request of 1,000 uncached prompt tokens and 200 output tokens, still prefilling
    InferenceRequest earlier = request(1000, 200, "x");
    p.pick(earlier, TestCandidates.state(), List.of(a), new double[1]);
    CycleState s0 = TestCandidates.state();
    p.pick(earlier, s0, List.of(a), new double[1]);
    p.afterRouting(earlier, s0, decision(a.endpoint()));

    // 800-token prompt, 320 tokens cached: 480 uncached + 1,000 pending + 0.1 × 200 to generate
    assertThat(p.cost(a, 800, 320, 100)).isCloseTo(480 + 1000 + 20, offset(1e-9));

    // the same endpoint with 10,000 tokens of KV of which 90% are in use: the request's
    // 480 + 100 new tokens on top of 9,000 used and 1,000 pending overflow by 580
    Candidate full = TestCandidates.withMetrics(a.id(), EndpointMetrics.builder()
        .kvCapacityBlocks(625).blockSizeTokens(16).kvCacheUsage(0.9).scrapedAtNanos(0).build());
    assertThat(p.cost(full, 800, 320, 100)).isCloseTo(480 + 1000 + 20 + 580, offset(1e-9));
    // a full cache overflows by more, but only the request's own 580 new tokens are its doing
    Candidate packed = TestCandidates.withMetrics(a.id(), EndpointMetrics.builder()
        .kvCapacityBlocks(625).blockSizeTokens(16).kvCacheUsage(1.0).scrapedAtNanos(0).build());
    assertThat(p.cost(packed, 800, 320, 100)).isCloseTo(480 + 1000 + 20 + 580, offset(1e-9));

    // first token: the prefill is no longer pending, the decode stays until completion
    p.onFirstToken(earlier, a.endpoint());
    assertThat(p.pendingTokens(a.id())).isZero();
    assertThat(p.decodeTokens(a.id())).isEqualTo(200);
    assertThat(p.cost(a, 800, 320, 100)).isCloseTo(480 + 20, offset(1e-9));
    p.onComplete(earlier, a.endpoint(), new Usage(1000, 0, 200));
    assertThat(p.decodeTokens(a.id())).isZero();
    assertThat(p.cost(a, 800, 320, 100)).isCloseTo(480, offset(1e-9));
    // a second completion (or a failure after completion) gives nothing back twice
    p.onFailure(earlier, a.endpoint(), new RuntimeException("late"));
    assertThat(p.pendingTokens(a.id())).isZero();
    assertThat(p.decodeTokens(a.id())).isZero();
  }

  @Test
  void kvHeldByRunningRequestsCountsAsThatShareOfThePrompt() {
    TokenCostPicker p = joined(new TokenCostPicker(0.0, 0.0, 0.0, 0, 0,
        TokenCostPicker.DEFAULT_SESSION_TTL_SECONDS, 1.0), POOL);
    // 40% of the endpoint's KV is held by running requests: 0.4 x the 800-token prompt
    Candidate busy = TestCandidates.withMetrics(POOL.get(0).id(), EndpointMetrics.builder()
        .kvCapacityBlocks(625).blockSizeTokens(16).kvCacheUsage(0.4).scrapedAtNanos(0).build());
    assertThat(p.cost(busy, 800, 320, 100)).isCloseTo(480 + 0.4 * 800, offset(1e-9));
    Candidate idle = TestCandidates.withMetrics(POOL.get(1).id(), EndpointMetrics.builder()
        .kvCapacityBlocks(625).blockSizeTokens(16).kvCacheUsage(0.0).scrapedAtNanos(0).build());
    assertThat(p.cost(idle, 800, 320, 100)).isCloseTo(480, offset(1e-9));
    // a cache hit of 320 tokens does not outweigh 0.4 x 800 = 320 tokens of KV pressure plus
    // a larger miss: the idle endpoint with nothing cached costs 800, the busy one 480 + 320
    assertThat(p.cost(busy, 800, 320, 100)).isEqualTo(p.cost(idle, 800, 0, 100));
  }

  @Test
  void queuedRequestsOfAnotherRouterCountAsRequestsOfThisSize() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.0, 0.0, 0), POOL);
    // the engine reports 3 waiting + 1 running; this router has 1 in flight there: 3 are foreign
    // and all of them are waiting
    Candidate busy = new TestCandidates.Cand(POOL.get(0).endpoint(),
        TestCandidates.metrics(3, 1, 0.1), 1, 500);
    assertThat(p.cost(busy, 400, 0)).isEqualTo(400 + 3 * 400);
    // everything the engine reports is this router's: no foreign work
    Candidate own = new TestCandidates.Cand(POOL.get(0).endpoint(),
        TestCandidates.metrics(3, 1, 0.1), 4, 500);
    assertThat(p.cost(own, 400, 0)).isEqualTo(400);
  }

  @Test
  void picksTheLowestCostNotTheBestHit() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.0, 0.0, 0), POOL);
    // endpoint 0 holds 50 of the 64 blocks but has 2,000 tokens of prefill queued from earlier
    InferenceRequest big = request(2000, 10, "a");
    CycleState s = withHits(2000, 0, 0, 0);
    p.pick(big, s, List.of(POOL.get(0)), new double[1]);
    p.afterRouting(big, s, decision(POOL.get(0).endpoint()));

    InferenceRequest r = request(1024, 10, "b");
    // costs: 0 → (1024 − 800) + 2000 = 2224; 1 → 1024 − 320 = 704; 2 → 1024
    Candidate chosen = p.pick(r, withHits(1024, 50, 20, 0), POOL, new double[3]).get(0);
    assertThat(chosen).isEqualTo(POOL.get(1));
  }

  @Test
  void withoutPrefixHitsTheWholePromptIsUncachedEverywhere() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.0, 0.0, 0), POOL);
    InferenceRequest r = request(300, 10, "a");
    CycleState s = TestCandidates.state();
    Candidate first = route(p, r, s, POOL);
    assertThat(p.pendingTokens(first.id())).isEqualTo(300);
    // the next request avoids the endpoint whose prefill is still pending
    Candidate second = p.pick(request(300, 10, "b"), TestCandidates.state(), POOL,
        new double[3]).get(0);
    assertThat(second).isNotEqualTo(first);
  }

  @Test
  void equalCostsSendASessionToTheSameEndpointWhateverTheOrder() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.0, 0.0, 0), TestCandidates.pool(8));
    List<Candidate> pool = new ArrayList<>(TestCandidates.pool(8));
    Set<String> homes = new HashSet<>();
    for (int session = 0; session < 64; session++) {
      InferenceRequest r = request(100, 10, "session-" + session);
      Candidate home = p.pick(r, TestCandidates.state(0, session), pool, new double[8]).get(0);
      for (int shuffle = 0; shuffle < 5; shuffle++) {
        Collections.shuffle(pool, new java.util.Random(shuffle));
        assertThat(p.pick(r, TestCandidates.state(0, 1000 + shuffle), pool, new double[8]).get(0))
            .as("session-%d", session).isEqualTo(home);
      }
      homes.add(home.id());
    }
    // rendezvous hashing spreads sessions: 64 sessions reach every one of 8 endpoints
    assertThat(homes).hasSize(8);
  }

  @Test
  void equalCostsWithoutSessionGoToFewerInFlightThenAtRandom() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.0, 0.0, 0), POOL);
    InferenceRequest r = InferenceRequest.builder().model("m").tokenIds(new int[100]).build();
    List<Candidate> pool = List.of(TestCandidates.inFlight(POOL.get(0).id(), 3, 0),
        TestCandidates.inFlight(POOL.get(1).id(), 1, 0), TestCandidates.inFlight(POOL.get(2).id(), 1, 0));
    Set<String> picked = new HashSet<>();
    for (int seed = 0; seed < 40; seed++) {
      picked.add(p.pick(r, TestCandidates.state(0, seed), pool, new double[3]).get(0).id());
    }
    assertThat(picked).containsExactlyInAnyOrder(POOL.get(1).id(), POOL.get(2).id());
  }

  @Test
  void boundedLoadSkipsAnEndpointAboveTheBoundEvenWithTheBestCache() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.0, 0.0, 1.25), POOL);
    // 6 in flight in total: bound ceil(1.25 × 7 / 3) = 3; endpoint 0 already has 4
    List<Candidate> pool = List.of(TestCandidates.inFlight(POOL.get(0).id(), 4, 0),
        TestCandidates.inFlight(POOL.get(1).id(), 1, 0), TestCandidates.inFlight(POOL.get(2).id(), 1, 0));
    CycleState s = withHits(1024, 64, 0, 0);
    assertThat(p.pick(request(1024, 10, "a"), s, pool, new double[3]).get(0).id())
        .isNotEqualTo(POOL.get(0).id());
    // unbounded, the full hit wins
    TokenCostPicker free = joined(new TokenCostPicker(1.0, 0.0, 0.0, 0), POOL);
    assertThat(free.pick(request(1024, 10, "a"), withHits(1024, 64, 0, 0), pool, new double[3])
        .get(0).id()).isEqualTo(POOL.get(0).id());
  }

  /** Routes {@code sessions} new one-request sessions, each completed before the next. */
  static Map<String, Integer> placeNewSessions(TokenCostPicker p, int sessions) {
    Map<String, Integer> perEndpoint = new java.util.HashMap<>();
    for (int k = 0; k < sessions; k++) {
      InferenceRequest r = request(1024, 10, "dialog-" + k);
      // endpoint 0 holds the whole prompt of every session: the cheapest by far
      Candidate c = route(p, r, withHits(1024, 64, 0, 0), POOL);
      p.onFirstToken(r, c.endpoint());
      p.onComplete(r, c.endpoint(), new Usage(1024, 0, 10));
      perEndpoint.merge(c.id(), 1, Integer::sum);
    }
    return perEndpoint;
  }

  @Test
  void newSessionsPileUpNowhereBeyondTheSessionBound() {
    // the defaults: no endpoint takes a new session while it holds ceil(1.25 × mean) of them,
    // however much cheaper it is
    TokenCostPicker p = joined(TokenCostPicker.create(), POOL);
    Map<String, Integer> placed = placeNewSessions(p, 12);
    int bound = (int) Math.ceil(TokenCostPicker.DEFAULT_SESSION_BALANCE_FACTOR * 12 / 3);
    assertThat(placed.values()).allSatisfy(count -> assertThat(count).isLessThanOrEqualTo(bound));
    assertThat(placed.values().stream().mapToInt(Integer::intValue).sum()).isEqualTo(12);
    for (Candidate c : POOL) {
      assertThat(p.sessions(c.id())).isEqualTo(placed.getOrDefault(c.id(), 0));
    }
    // without the bound the cheapest endpoint collects them all
    TokenCostPicker free = joined(new TokenCostPicker(0.5, 0.1, 1.0, 0, 0,
        TokenCostPicker.DEFAULT_SESSION_TTL_SECONDS), POOL);
    assertThat(placeNewSessions(free, 12)).containsExactly(Map.entry(POOL.get(0).id(), 12));
  }

  @Test
  void aSessionCountsOnceWhereItsLastRequestWentUntilItIsIdleForTheTtl() {
    TokenCostPicker p = joined(new TokenCostPicker(0.5, 0.1, 1.0, 0, 1.25, 10), POOL);
    long ttl = 10_000_000_000L;
    InferenceRequest first = request(100, 10, "a");
    route(p, first, TestCandidates.state(0, 1), List.of(POOL.get(0)));
    route(p, request(100, 10, "a"), TestCandidates.state(1, 2), List.of(POOL.get(0)));
    assertThat(p.sessions(POOL.get(0).id())).isEqualTo(1);
    // the session moves (its home was filtered out): it counts where it went, not twice
    route(p, request(100, 10, "a"), TestCandidates.state(2, 3), List.of(POOL.get(1)));
    assertThat(p.sessions(POOL.get(0).id())).isZero();
    assertThat(p.sessions(POOL.get(1).id())).isEqualTo(1);
    // idle past the TTL: forgotten at the next sweep (armed by the first routing, due an eighth
    // of the TTL later)
    route(p, request(100, 10, "b"), TestCandidates.state(2 + ttl + 1, 4), List.of(POOL.get(2)));
    assertThat(p.sessions(POOL.get(1).id())).isZero();
    assertThat(p.sessions(POOL.get(2).id())).isEqualTo(1);
    // its endpoint leaves and comes back within the TTL: the session is still at home there
    p.onEndpointRemoved(POOL.get(2).endpoint());
    p.onEndpointAdded(POOL.get(2).endpoint());
    assertThat(p.sessions(POOL.get(2).id())).isEqualTo(1);
    assertThat(p.homeOf("b")).isEqualTo(POOL.get(2).id());
  }

  @Test
  void sessionsBeyondTheCapAreForgottenLeastRecentFirstAndCountsStayExact() {
    Result<? extends Plugin> built = provide(Map.of("maxSessions", 100));
    assertThat(built.errors()).isEmpty();
    TokenCostPicker p = joined((TokenCostPicker) built.value(), POOL);
    // 1,000 sessions within the TTL, one request each, a millisecond apart
    for (int k = 0; k < 1000; k++) {
      route(p, request(64, 4, "s" + k), TestCandidates.state(k * 1_000_000L, k + 1), POOL);
    }
    int tracked = p.trackedSessions();
    assertThat(tracked).isBetween(1, 100);
    int counted = 0;
    for (Candidate c : POOL) {
      counted += p.sessions(c.id());
    }
    assertThat(counted).isEqualTo(tracked);
    // the newest are kept, the oldest forgotten
    assertThat(p.homeOf("s999")).isNotNull();
    assertThat(p.homeOf("s0")).isNull();
    assertThat(p.homeOf("s500")).isNull();
  }

  /** One routing step of a stress thread: thread {@code seed}, step {@code k}. */
  interface Step {
    void run(int seed, int k, SplittableRandom rnd);
  }

  /** Runs {@code steps} steps on each of {@code threads} threads and waits up to 30 s. */
  static void onThreads(int threads, int steps, Step step) throws Exception {
    java.util.concurrent.ExecutorService pool =
        java.util.concurrent.Executors.newFixedThreadPool(threads);
    try {
      List<java.util.concurrent.Future<?>> done = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        int seed = t;
        done.add(pool.submit(() -> {
          SplittableRandom rnd = new SplittableRandom(seed);
          for (int k = 0; k < steps; k++) {
            step.run(seed, k, rnd);
          }
        }));
      }
      for (var f : done) {
        f.get(30, java.util.concurrent.TimeUnit.SECONDS);
      }
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void concurrentRoutingPastTheSessionCapKeepsCountsExactAndWithinTheCap() throws Exception {
    TokenCostPicker p = joined((TokenCostPicker) provide(Map.of("maxSessions", 64)).value(), POOL);
    onThreads(4, 3000, (seed, k, rnd) -> {
      InferenceRequest r = request(64, 4, "s" + rnd.nextInt(500));
      Candidate c = route(p, r, TestCandidates.state(k * 1000L + seed, seed * 100_000L + k), POOL);
      p.onComplete(r, c.endpoint(), new Usage(64, 0, 4));
    });
    int counted = 0;
    for (Candidate c : POOL) {
      assertThat(p.sessions(c.id())).isNotNegative();
      counted += p.sessions(c.id());
    }
    assertThat(counted).isEqualTo(p.trackedSessions());
    assertThat(p.trackedSessions()).isBetween(1, 64);
  }

  @Test
  void concurrentRoutingCountsEverySessionExactlyOnce() throws Exception {
    TokenCostPicker p = joined(TokenCostPicker.create(), POOL);
    int sessions = 50;
    onThreads(4, 2000, (seed, k, rnd) -> {
      InferenceRequest r = request(64, 4, "s" + rnd.nextInt(sessions));
      // candidate subsets, as filters produce: sessions move between endpoints
      List<Candidate> subset = rnd.nextBoolean() ? POOL : List.of(POOL.get(rnd.nextInt(3)));
      Candidate c = route(p, r, TestCandidates.state(k, seed * 100_000L + k), subset);
      p.onComplete(r, c.endpoint(), new Usage(64, 0, 4));
    });
    int counted = 0;
    for (Candidate c : POOL) {
      assertThat(p.sessions(c.id())).isNotNegative();
      counted += p.sessions(c.id());
      assertThat(p.pendingTokens(c.id())).isZero();
    }
    assertThat(counted).isEqualTo(sessions);
  }

  @Test
  void accountsOnlyWhatItChoseAndKeepsItThroughItsEndpointsLeaveAndReturn() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.1, 0.0, 0), POOL);
    InferenceRequest r = request(500, 50, "a");
    CycleState s = TestCandidates.state();
    Candidate chosen = p.pick(r, s, POOL, new double[3]).get(0);
    Candidate other = POOL.stream().filter(c -> c != chosen).findFirst().orElseThrow();
    // another plugin's decision (a different primary): nothing is counted
    p.afterRouting(r, s, decision(other.endpoint()));
    assertThat(p.pendingTokens(other.id())).isZero();
    assertThat(p.pendingTokens(chosen.id())).isZero();

    route(p, r, TestCandidates.state(), List.of(chosen));
    assertThat(p.pendingTokens(chosen.id())).isEqualTo(500);
    p.onEndpointRemoved(chosen.endpoint());
    p.onEndpointAdded(chosen.endpoint());
    assertThat(p.pendingTokens(chosen.id())).as("still running there").isEqualTo(500);
    assertThat(p.decodeTokens(chosen.id())).isEqualTo(50);
    p.onComplete(r, chosen.endpoint(), new Usage(500, 0, 50));
    assertThat(p.pendingTokens(chosen.id())).isZero();
    assertThat(p.decodeTokens(chosen.id())).isZero();
  }

  @Test
  void aFallbackTakesThePendingWorkAndTheSessionToTheEndpointThatServes() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.1, 0.0, 0, 1.25, 10), POOL);
    Candidate a = POOL.get(0);
    Candidate b = POOL.get(1);
    InferenceRequest r = request(500, 50, "s");
    // 400 of the 500 tokens cached on a: 100 pending there
    route(p, r, withHits(500, 25, 0, 0), List.of(a));
    assertThat(p.pendingTokens(a.id())).isEqualTo(100);
    assertThat(p.sessions(a.id())).isEqualTo(1);

    p.onFallback(r, a.endpoint(), b.endpoint()); // a refused the connection
    assertThat(p.pendingTokens(a.id())).isZero();
    assertThat(p.decodeTokens(a.id())).isZero();
    assertThat(p.sessions(a.id())).isZero();
    // b was not looked up: the whole prompt is pending there
    assertThat(p.pendingTokens(b.id())).isEqualTo(500);
    assertThat(p.decodeTokens(b.id())).isEqualTo(50);
    assertThat(p.sessions(b.id())).isEqualTo(1);

    p.onFirstToken(r, b.endpoint());
    assertThat(p.pendingTokens(b.id())).isZero();
    p.onComplete(r, b.endpoint(), new Usage(500, 0, 50));
    assertThat(p.decodeTokens(b.id())).isZero();
    // finished: a late fallback moves nothing
    p.onFallback(r, b.endpoint(), a.endpoint());
    assertThat(p.pendingTokens(a.id())).isZero();
    assertThat(p.decodeTokens(a.id())).isZero();
  }

  @Test
  void anEndpointThatLeavesWhileARouteIsRecordedKeepsItForTheEndpointsReturn() {
    // the pool drops an endpoint (on its own thread) after a listener method found the
    // endpoint's counters and before it recorded the request against them: the hook runs the
    // removal in exactly that gap. The request counts on counters kept for the endpoint's
    // return, as when it left before the lookup; before, it counted nowhere (earlier still, its
    // pending entry and its session's home stayed for good, naming the departed endpoint)
    TokenCostPicker p0 = joined(new TokenCostPicker(1.0, 0.1, 0.0, 0, 1.25, 60), POOL);
    Candidate a = POOL.get(0);
    Candidate b = POOL.get(1);
    Candidate c = POOL.get(2);
    InferenceRequest r = request(500, 50, "s");
    CycleState s = TestCandidates.state();
    assertThat(p0.pick(r, s, List.of(a), new double[1]).get(0)).isSameAs(a);
    p0.lookupHook = () -> p0.onEndpointRemoved(a.endpoint());
    p0.afterRouting(r, s, decision(a.endpoint()));
    p0.lookupHook = null;
    assertThat(p0.homeOf("s")).isEqualTo(a.id());
    assertThat(p0.pendingRequests()).isOne();
    assertThat(p0.departedLoads()).as("kept for its return").isOne();
    p0.onEndpointAdded(a.endpoint()); // back at the same address: the request counts there
    assertThat(p0.sessions(a.id())).isOne();
    assertThat(p0.pendingTokens(a.id())).isEqualTo(500);
    assertThat(p0.decodeTokens(a.id())).isEqualTo(50);
    p0.onComplete(r, a.endpoint(), Usage.NONE);
    assertThat(p0.pendingTokens(a.id())).isZero();
    assertThat(p0.decodeTokens(a.id())).isZero();
    // and when it stays away, its kept counters go once the request ends and the session moves
    InferenceRequest r2 = request(500, 50, "s2");
    CycleState s2 = TestCandidates.state();
    p0.pick(r2, s2, List.of(b), new double[1]);
    p0.lookupHook = () -> p0.onEndpointRemoved(b.endpoint());
    p0.afterRouting(r2, s2, decision(b.endpoint()));
    p0.lookupHook = null;
    assertThat(p0.departedLoads()).isOne();
    p0.onComplete(r2, b.endpoint(), Usage.NONE);
    route(p0, request(100, 10, "s2"), TestCandidates.state(), List.of(c));
    assertThat(p0.departedLoads()).isZero();

    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.1, 0.0, 0, 1.25, 60), POOL);

    // a fallback whose endpoint leaves idle while the work moves there: the work counts on
    // counters kept for its return and the session stays where it was, as when the fallback had
    // left before
    InferenceRequest moving = request(300, 30, "t");
    route(p, moving, TestCandidates.state(), List.of(b));
    assertThat(p.pendingTokens(b.id())).isEqualTo(300);
    p.lookupHook = () -> p.onEndpointRemoved(c.endpoint());
    p.onFallback(moving, b.endpoint(), c.endpoint());
    p.lookupHook = null;
    assertThat(p.pendingTokens(b.id())).isZero();
    assertThat(p.decodeTokens(b.id())).isZero();
    assertThat(p.pendingRequests()).isOne();
    assertThat(p.departedLoads()).as("kept for the fallback's return").isOne();
    assertThat(p.homeOf("t")).isEqualTo(b.id());
    assertThat(p.sessions(b.id())).isEqualTo(1);
    p.onFailure(moving, c.endpoint(), new RuntimeException("reset"));
    assertThat(p.departedLoads()).isZero();

    // another router's session placed on an endpoint that leaves idle meanwhile is not
    // remembered
    p.lookupHook = () -> p.onEndpointRemoved(a.endpoint());
    p.onRemoteSession("u", a.id(), 1);
    p.lookupHook = null;
    assertThat(p.homeOf("u")).isNull();
    assertThat(p.departedLoads()).isZero();
    // one placed on an endpoint that leaves with a session at home there is kept for its
    // return, as that session is
    p.lookupHook = () -> p.onEndpointRemoved(b.endpoint());
    p.onRemoteSession("v", b.id(), 1);
    p.lookupHook = null;
    assertThat(p.homeOf("v")).isEqualTo(b.id());
    assertThat(p.homeOf("t")).isEqualTo(b.id());
    p.onEndpointAdded(b.endpoint());
    assertThat(p.sessions(b.id())).isEqualTo(2);
    assertThat(p.trackedSessions()).isEqualTo(2);
  }

  @Test
  void requestsNeverFinishedAreReleasedAfterTheMaximumAge() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.1, 0.0, 0), POOL);
    InferenceRequest lost = request(700, 10, "a");
    Candidate a = route(p, lost, TestCandidates.state(0, 1), List.of(POOL.get(0)));
    assertThat(p.pendingTokens(a.id())).isEqualTo(700);
    long later = TokenCostPicker.PENDING_MAX_AGE_NANOS + 1;
    // the first routing after the maximum age arms the sweep; one an eighth later runs it
    route(p, request(10, 0, "b"), TestCandidates.state(later, 2), List.of(POOL.get(1)));
    route(p, request(10, 0, "c"),
        TestCandidates.state(later + TokenCostPicker.PENDING_MAX_AGE_NANOS / 8, 3),
        List.of(POOL.get(1)));
    assertThat(p.pendingTokens(a.id())).isZero();
    assertThat(p.decodeTokens(a.id())).isZero();
  }

  /** A websocket session the gateway renews keeps its share past the age, until renewals stop. */
  @Test
  void aRequestItsGatewayRenewsOutlivesTheMaximumAgeUntilRenewalsStop() {
    TokenCostPicker p = joined(new TokenCostPicker(1.0, 0.1, 0.0, 0), POOL);
    long max = TokenCostPicker.PENDING_MAX_AGE_NANOS;
    AtomicLong now = new AtomicLong();
    p.ticker = now::get;
    InferenceRequest session = request(700, 10, "a");
    Candidate a = route(p, session, TestCandidates.state(0, 1), List.of(POOL.get(0)));
    now.set(max / 2);
    p.onActivity(session, a.endpoint());
    // a sweep past the age from the routing, within it from the renewal: kept
    route(p, request(10, 0, "b"), TestCandidates.state(max + 1, 2), List.of(POOL.get(1)));
    route(p, request(10, 0, "c"), TestCandidates.state(max + 1 + max / 8, 3),
        List.of(POOL.get(1)));
    assertThat(p.pendingTokens(a.id())).as("renewed within the age").isEqualTo(700);
    // no renewal since: the next sweep, past the age from the renewal, releases it
    route(p, request(10, 0, "d"), TestCandidates.state(max / 2 + max + max / 4, 4),
        List.of(POOL.get(1)));
    assertThat(p.pendingTokens(a.id())).as("not renewed for longer than the age").isZero();
    assertThat(p.decodeTokens(a.id())).isZero();
    p.onActivity(session, a.endpoint()); // too late: nothing comes back
    assertThat(p.pendingTokens(a.id())).isZero();
    assertThat(p.decodeTokens(a.id())).isZero();
  }

  static Result<? extends Plugin> provide(Map<String, ?> params) {
    PluginContext ctx = new PluginContext() {
      @Override public String pluginName() { return TokenCostPicker.TYPE; }
      @Override public Ticker ticker() { return () -> 0L; }
      @Override public <T> Optional<T> service(Class<T> t) { return Optional.empty(); }
    };
    return new TokenCostPicker.Provider().create(ctx, Parameters.of(params));
  }

  @Test
  void providerRejectsBadParametersNamingThem() {
    assertThat(provide(Map.of()).errors()).isEmpty();
    assertThat(provide(Map.of("queueWeight", -1)).errors())
        .singleElement().asString().contains("queueWeight");
    assertThat(provide(Map.of("decodeWeight", "lots")).errors())
        .singleElement().asString().contains("decodeWeight");
    assertThat(provide(Map.of("capacityWeight", -0.5)).errors())
        .singleElement().asString().contains("capacityWeight");
    assertThat(provide(Map.of("balanceFactor", 0.5)).errors())
        .singleElement().asString().contains("balanceFactor");
    assertThat(provide(Map.of("balanceFactor", 1.25, "decodeWeight", 0)).errors()).isEmpty();
    assertThat(provide(Map.of("sessionBalanceFactor", 0.9)).errors())
        .singleElement().asString().contains("sessionBalanceFactor");
    assertThat(provide(Map.of("kvUsageWeight", -1)).errors())
        .singleElement().asString().contains("kvUsageWeight");
    assertThat(provide(Map.of("sessionTtlSeconds", 0)).errors())
        .singleElement().asString().contains("sessionTtlSeconds");
    assertThat(provide(Map.of("maxSessions", 0)).errors())
        .singleElement().asString().contains("maxSessions");
    assertThat(provide(Map.of("sessionBalanceFactor", 0, "sessionTtlSeconds", 30)).errors())
        .isEmpty();
  }

  @Test
  void presetLoadsAndSpreadsNewSessionsWhilePrefillIsPending() {
    List<Endpoint> endpoints = POOL.stream().map(Candidate::endpoint).toList();
    try (Router router = Router.builder().endpoints(endpoints).randomSeed(1)
        .configYaml(Epp4jPreset.yaml(), Epp4jPreset.NAME).build()) {
      // three 1,100-token requests sharing a 96-token prefix arrive before any has started: the
      // prefill pending where the prefix went (0.125 × 1,100 or more) outweighs the 96 tokens it
      // would save
      Set<String> used = new HashSet<>();
      for (int k = 0; k < 3; k++) {
        int[] ids = new int[1100];
        for (int i = 0; i < ids.length; i++) {
          ids[i] = i < 96 ? i : 100_000 * (k + 1) + i;
        }
        InferenceRequest r = InferenceRequest.builder().model("m").tokenIds(ids).maxTokens(10)
            .sessionKey("s" + k).build();
        RoutingDecision d = router.route(r);
        assertThat(d.isRouted()).isTrue();
        used.add(d.primary().id());
      }
      assertThat(used).hasSize(3);
    }
  }

  /**
   * In a router the picker forgets a request never finished after the router's inFlightMaxAge,
   * not after a ten minutes of its own: a router set to an hour for long requests keeps both
   * counts for the hour, and a reload keeps the age.
   */
  @Test
  void inARouterThePickersMaximumAgeIsTheRoutersInFlightMaxAge() {
    List<Endpoint> endpoints = POOL.stream().map(Candidate::endpoint).toList();
    AtomicLong now = new AtomicLong();
    try (Router router = Router.builder().endpoints(endpoints).randomSeed(1).ticker(now::get)
        .inFlightMaxAge(java.time.Duration.ofHours(1))
        .configYaml(Epp4jPreset.yaml(), Epp4jPreset.NAME).build()) {
      TokenCostPicker picker =
          (TokenCostPicker) router.config().plugins().get(TokenCostPicker.TYPE);
      assertThat(picker.pendingMaxAgeNanos).isEqualTo(java.time.Duration.ofHours(1).toNanos());
      RoutingDecision open = router.route(request(700, 10, "long"));
      String on = open.primary().id();
      for (int minutes = 10; minutes <= 50; minutes += 10) { // routing sweeps meanwhile
        now.set(java.util.concurrent.TimeUnit.MINUTES.toNanos(minutes));
        router.route(request(10, 1, null)).onComplete(Usage.NONE);
      }
      assertThat(picker.pendingTokens(on)).as("50 minutes in, within the router's hour")
          .isEqualTo(700);
      for (int minutes = 61; minutes <= 80; minutes += 9) {
        now.set(java.util.concurrent.TimeUnit.MINUTES.toNanos(minutes));
        router.route(request(10, 1, null)).onComplete(Usage.NONE);
      }
      assertThat(picker.pendingTokens(on)).as("past the router's hour").isZero();
      assertThat(router.reconfigure(Epp4jPreset.yaml(), "reload").isOk()).isTrue();
      TokenCostPicker reloaded =
          (TokenCostPicker) router.config().plugins().get(TokenCostPicker.TYPE);
      assertThat(reloaded.pendingMaxAgeNanos).isEqualTo(java.time.Duration.ofHours(1).toNanos());
      open.onComplete(Usage.NONE);
    }
  }

  @Test
  void aListInThePoolsOrderIsPickedFromExactlyAsAPlainListOfTheSameCandidates() {
    for (long seed = 1; seed <= 6; seed++) {
      SplittableRandom rnd = new SplittableRandom(seed);
      TokenCostPicker byPosition = TokenCostPicker.create();
      TokenCostPicker byId = TokenCostPicker.create();
      List<Candidate> pool = new ArrayList<>();
      int nextId = 1;
      for (int i = 0; i < 12; i++) {
        Candidate c = TestCandidates.withMetrics("10.2.0." + nextId++ + ":8000",
            TestCandidates.metrics(rnd.nextInt(4), rnd.nextInt(8), rnd.nextDouble()));
        pool.add(c);
        byPosition.onEndpointAdded(c.endpoint());
        byId.onEndpointAdded(c.endpoint());
      }
      Object token = new Object();
      List<InferenceRequest> open = new ArrayList<>();
      List<Endpoint> openOn = new ArrayList<>();
      for (int step = 0; step < 400; step++) {
        int op = rnd.nextInt(100);
        if (op < 3) { // an endpoint joins: a new order
          Candidate c = TestCandidates.withMetrics("10.2.0." + nextId++ + ":8000",
              TestCandidates.metrics(0, 0, 0));
          pool.add(rnd.nextInt(pool.size() + 1), c);
          byPosition.onEndpointAdded(c.endpoint());
          byId.onEndpointAdded(c.endpoint());
          token = new Object();
        } else if (op < 15) { // new metrics: the same order
          int i = rnd.nextInt(pool.size());
          pool.set(i, new TestCandidates.Cand(pool.get(i).endpoint(),
              TestCandidates.metrics(rnd.nextInt(4), rnd.nextInt(8), rnd.nextDouble()), 0, 0));
        }
        if (!open.isEmpty() && rnd.nextInt(3) == 0) {
          int k = rnd.nextInt(open.size());
          InferenceRequest done = open.remove(k);
          Endpoint on = openOn.remove(k);
          byPosition.onComplete(done, on, Usage.NONE);
          byId.onComplete(done, on, Usage.NONE);
        }
        InferenceRequest r = request(200 + rnd.nextInt(4000), rnd.nextInt(600),
            "s" + rnd.nextInt(30));
        long now = step * 50_000_000L;
        CycleState a = TestCandidates.state(now, step);
        CycleState b = TestCandidates.state(now, step);
        Candidate viaPosition = route(byPosition, r, a, new HeadDirectoryTest.Ordered(pool, token));
        Candidate viaId = route(byId, r, b, new ArrayList<>(pool));
        assertThat(viaPosition.id()).as("seed %d step %d", seed, step).isEqualTo(viaId.id());
        for (Candidate c : pool) {
          assertThat(byPosition.pendingTokens(c.id())).isEqualTo(byId.pendingTokens(c.id()));
          assertThat(byPosition.sessions(c.id())).isEqualTo(byId.sessions(c.id()));
        }
        open.add(r);
        openOn.add(viaId.endpoint());
      }
    }
  }
}
