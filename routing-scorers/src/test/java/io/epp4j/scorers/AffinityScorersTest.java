package io.epp4j.scorers;

import static io.epp4j.scorers.TestCandidates.state;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.RoutingDecision;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class AffinityScorersTest {
  static RoutingDecision decision(Candidate c) {
    Map<String, ProfileResult> r = new LinkedHashMap<>();
    r.put("default", new ProfileResult("default", List.of(c.endpoint())));
    return RoutingDecision.routed("default", r, PrefixCacheScorerTest.NONE);
  }

  static InferenceRequest session(String key) {
    return InferenceRequest.builder().model("m").prompt("p").sessionKey(key).build();
  }

  @Test
  void sessionBindingExpiresAfterTtl() {
    AtomicLong now = new AtomicLong();
    SessionAffinityScorer s = new SessionAffinityScorer(HashKeySource.SESSION, "x-session-token",
        Duration.ofSeconds(300), 1000, now::get);
    List<Candidate> pool = TestCandidates.pool(3);
    TestCandidates.joined(s, pool);
    double[] scores = new double[3];
    s.score(session("u1"), state(), pool, scores);
    assertThat(scores).containsOnly(0.0);
    s.afterRouting(session("u1"), state(), decision(pool.get(2)));
    scores = new double[3];
    s.score(session("u1"), state(), pool, scores);
    assertThat(scores).containsExactly(0.0, 0.0, 1.0);
    now.addAndGet(Duration.ofSeconds(301).toNanos());
    scores = new double[3];
    s.score(session("u1"), state(), pool, scores);
    assertThat(scores).containsOnly(0.0);
  }

  /**
   * A peer sends a session hint for every request it routes; repeating a binding this scorer
   * already holds must not restart {@code maxAge}, as routing the session again locally does not.
   */
  @Test
  void aPeersHintOfTheSameBindingDoesNotRenewMaxAgeButAMoveRebinds() {
    AtomicLong now = new AtomicLong();
    List<Candidate> pool = TestCandidates.pool(2);
    SessionAffinityScorer s = TestCandidates.joined(new SessionAffinityScorer(
        HashKeySource.SESSION, null, Duration.ofSeconds(300), Duration.ofSeconds(10), 1000,
        now::get), pool);
    s.afterRouting(session("u"), state(), decision(pool.get(0)));
    now.addAndGet(Duration.ofSeconds(9).toNanos());
    s.afterRouting(session("u"), state(), decision(pool.get(0)));
    s.onRemoteSession("u", pool.get(0).id(), now.get());
    assertThat(s.binding("u")).isEqualTo(pool.get(0).id());
    now.addAndGet(Duration.ofSeconds(2).toNanos()); // 11 s after the binding was made
    assertThat(s.binding("u")).isNull();

    s.afterRouting(session("v"), state(), decision(pool.get(0)));
    s.onRemoteSession("v", pool.get(1).id(), now.get()); // the peer moved the session
    assertThat(s.binding("v")).isEqualTo(pool.get(1).id());
  }

  @Test
  void aFallbackRebindsTheSessionToTheEndpointThatServesIt() {
    AtomicLong now = new AtomicLong();
    List<Candidate> pool = TestCandidates.pool(3);
    SessionAffinityScorer s = TestCandidates.joined(new SessionAffinityScorer(
        HashKeySource.SESSION, null, Duration.ofSeconds(300), 1000, now::get), pool);
    s.afterRouting(session("u"), state(), decision(pool.get(0)));
    s.onFallback(session("u"), pool.get(0).endpoint(), pool.get(1).endpoint());
    assertThat(s.binding("u")).isEqualTo(pool.get(1).id());
    // a fallback from an endpoint the session is not bound to leaves the binding alone
    s.onFallback(session("u"), pool.get(0).endpoint(), pool.get(2).endpoint());
    assertThat(s.binding("u")).isEqualTo(pool.get(1).id());
    // nor does one to an endpoint that left the pool
    s.onEndpointRemoved(pool.get(2).endpoint());
    s.onFallback(session("u"), pool.get(1).endpoint(), pool.get(2).endpoint());
    assertThat(s.binding("u")).isEqualTo(pool.get(1).id());
  }

  @Test
  void endpointHeaderWinsAndABindingToAnEndpointThatLeftBindsNothing() {
    SessionAffinityScorer s = new SessionAffinityScorer(HashKeySource.SESSION, "x-session-token",
        Duration.ofSeconds(300), 1000, System::nanoTime);
    List<Candidate> pool = TestCandidates.pool(3);
    TestCandidates.joined(s, pool);
    String token = Base64.getEncoder().encodeToString(pool.get(1).id().getBytes(StandardCharsets.UTF_8));
    InferenceRequest r = InferenceRequest.builder().model("m").prompt("p")
        .headers(Map.of("x-session-token", token)).build();
    double[] scores = new double[3];
    s.score(r, state(), pool, scores);
    assertThat(scores).containsExactly(0.0, 1.0, 0.0);
    s.afterRouting(session("u2"), state(), decision(pool.get(0)));
    assertThat(s.binding("u2")).isEqualTo(pool.get(0).id());
    s.onEndpointRemoved(pool.get(0).endpoint());
    scores = new double[2];
    s.score(session("u2"), state(), pool.subList(1, 3), scores);
    assertThat(scores).containsOnly(0.0);
  }

  /**
   * The request parser takes {@code x-session-token} as the session key too, so an opaque token
   * arrives both as the endpoint header and as the key of the binding. One that happens to be
   * valid base64 decodes to no endpoint; the binding must still be read.
   */
  @Test
  void anEndpointHeaderThatNamesNoCandidateLeavesTheBindingInCharge() {
    List<Candidate> pool = TestCandidates.pool(3);
    SessionAffinityScorer s = TestCandidates.joined(new SessionAffinityScorer(
        HashKeySource.SESSION, "x-session-token", Duration.ofSeconds(300), 1000,
        System::nanoTime), pool);
    InferenceRequest r = InferenceRequest.builder().model("m").prompt("p").sessionKey("abcd1234")
        .headers(Map.of("x-session-token", "abcd1234")).build();
    s.afterRouting(r, state(), decision(pool.get(2)));
    double[] scores = new double[3];
    s.score(r, state(), pool, scores);
    assertThat(scores).containsExactly(0.0, 0.0, 1.0);
    // a header naming an endpoint that left the pool falls back the same way
    String gone = Base64.getEncoder().encodeToString("10.9.9.9:8000".getBytes(StandardCharsets.UTF_8));
    InferenceRequest moved = InferenceRequest.builder().model("m").prompt("p").sessionKey("u3")
        .headers(Map.of("x-session-token", gone)).build();
    s.afterRouting(moved, state(), decision(pool.get(1)));
    scores = new double[3];
    s.score(moved, state(), pool, scores);
    assertThat(scores).containsExactly(0.0, 1.0, 0.0);
  }

  @Test
  void noHitLruSpreadsColdRequestsToLeastRecentlyUsed() {
    NoHitLruScorer s = new NoHitLruScorer();
    List<Candidate> pool = TestCandidates.pool(3);
    TestCandidates.joined(s, pool);
    // never used: all tie at rank 0
    double[] scores = new double[3];
    s.score(session("a"), state(), pool, scores);
    assertThat(scores).containsOnly(1.0);
    s.afterRouting(session("a"), state(), decision(pool.get(0)));
    s.afterRouting(session("b"), state(), decision(pool.get(1)));
    scores = new double[3];
    s.score(session("c"), state(), pool, scores);
    // pool[2] never used (rank 0), pool[0] older (rank 1), pool[1] newest (rank 2)
    assertThat(scores).containsExactly(0.5, 0.0, 1.0);
    // a request with a cache hit somewhere is left to the other scorers
    CycleState hit = state();
    PrefixHits.publish(hit, PrefixHits.of(new String[] {pool.get(0).id()}, new int[] {4},
        new double[] {2}, 16));
    scores = new double[3];
    s.score(session("d"), hit, pool, scores);
    assertThat(scores).containsOnly(0.5);
    s.afterRouting(session("d"), hit, decision(pool.get(2))); // not cold: no stamp
    scores = new double[3];
    s.score(session("e"), state(), pool, scores);
    assertThat(scores).containsExactly(0.5, 0.0, 1.0);
    s.onEndpointRemoved(pool.get(1).endpoint());
    scores = new double[3];
    s.score(session("f"), state(), pool, scores);
    // pool[1] forgotten: it and pool[2] tie as never used, pool[0] is the most recent
    assertThat(scores).containsExactly(0.0, 1.0, 1.0);
  }

  @Test
  void noHitLruStampsTheDecodePickBeforeThePrefillPickAsUpstream() {
    // upstream moves the primary (decode) pick to the front of its LRU first and the prefill
    // pick after it, so of two endpoints that can do both the prefill pick is the more recent
    List<Candidate> pool = TestCandidates.pool(2);
    NoHitLruScorer s = TestCandidates.joined(new NoHitLruScorer(), pool);
    Map<String, ProfileResult> r = new LinkedHashMap<>();
    r.put("decode", new ProfileResult("decode", List.of(pool.get(0).endpoint())));
    r.put(PdProfileHandler.PREFILL_PROFILE, new ProfileResult(PdProfileHandler.PREFILL_PROFILE,
        List.of(pool.get(1).endpoint())));
    s.afterRouting(session("a"), state(), RoutingDecision.routed("decode", r,
        PrefixCacheScorerTest.NONE));
    double[] scores = new double[2];
    s.score(session("b"), state(), pool, scores);
    assertThat(scores).containsExactly(1.0, 0.0);
  }

  @Test
  void aSessionBoundByARouteThatOutlivedItsEndpointIsDropped() {
    List<Candidate> pool = TestCandidates.pool(2);
    SessionAffinityScorer s = TestCandidates.joined(new SessionAffinityScorer(
        HashKeySource.SESSION, null, Duration.ofSeconds(300), 1000, System::nanoTime), pool);
    s.onEndpointRemoved(pool.get(0).endpoint());
    s.afterRouting(session("late"), state(), decision(pool.get(0))); // routed before the removal
    assertThat(s.binding("late")).isNull();
    s.afterRouting(session("kept"), state(), decision(pool.get(1)));
    assertThat(s.binding("kept")).isEqualTo(pool.get(1).id());
  }

  @Test
  void noHitLruKeepsNoStampForAnEndpointThatLeftDuringARoute() {
    List<Candidate> pool = TestCandidates.pool(2);
    NoHitLruScorer s = TestCandidates.joined(new NoHitLruScorer(), pool);
    s.afterRouting(session("earlier"), state(), decision(pool.get(1)));
    s.onEndpointRemoved(pool.get(0).endpoint());
    s.afterRouting(session("late"), state(), decision(pool.get(0)));
    assertThat(s.trackedEndpoints()).isEqualTo(1);
  }

  @Test
  void noHitLruSeesTheApproximateScorersHits() {
    List<Candidate> pool = TestCandidates.pool(3);
    PrefixCacheScorer prefix = TestCandidates.joined(PrefixCacheScorer.create(), pool);
    NoHitLruScorer lru = TestCandidates.joined(new NoHitLruScorer(), pool);
    InferenceRequest held = PrefixCacheScorerTest.tok(PrefixCacheScorerTest.tokens(64, 0));
    PrefixCacheScorerTest.route(prefix, held, pool, pool.get(1));
    CycleState warm = state();
    prefix.score(held, warm, pool, new double[3]);
    double[] scores = new double[3];
    lru.score(held, warm, pool, scores);
    assertThat(scores).as("a hit: neutral").containsOnly(0.5);
    lru.afterRouting(held, warm, decision(pool.get(1)));
    InferenceRequest cold = PrefixCacheScorerTest.tok(PrefixCacheScorerTest.tokens(64, 9_000));
    CycleState st = state();
    prefix.score(cold, st, pool, new double[3]);
    scores = new double[3];
    lru.score(cold, st, pool, scores);
    assertThat(scores).as("the warm request left no cold stamp").containsOnly(1.0);
  }

  @Test
  void pdHandlerRunsPrefillOnlyAboveThreshold() {
    PdProfileHandler h = new PdProfileHandler(100);
    var runner = new FakeRunner("decode", "prefill");
    InferenceRequest longPrompt = InferenceRequest.builder().model("m").tokenIds(new int[200]).build();
    assertThat(h.handle(longPrompt, state(), runner)).isEqualTo("decode");
    assertThat(runner.ran).containsExactly("decode", "prefill");
    // 160 of 200 tokens cached on the decode pick: 40 uncached < 100
    CycleState st = state();
    PrefixHits.publish(st, PrefixHits.of(new String[] {"d:1"}, new int[] {12},
        new double[] {10}, 16));
    var runner2 = new FakeRunner("decode", "prefill");
    h.handle(longPrompt, st, runner2);
    assertThat(runner2.ran).containsExactly("decode");
    // without a decode profile the first profile runs alone
    var single = new FakeRunner("default");
    assertThat(h.handle(longPrompt, state(), single)).isEqualTo("default");
  }

  static final class FakeRunner implements io.epp4j.api.ProfileRunner {
    final java.util.Set<String> names;
    final List<String> ran = new java.util.ArrayList<>();

    FakeRunner(String... names) {
      this.names = new java.util.LinkedHashSet<>(List.of(names));
    }

    @Override
    public java.util.Set<String> profileNames() {
      return names;
    }

    @Override
    public ProfileResult run(String profile) {
      ran.add(profile);
      return new ProfileResult(profile, List.of(io.epp4j.api.Endpoint.parse(
          profile.equals("decode") ? "d:1" : "p:1")));
    }

    @Override
    public ProfileResult result(String profile) {
      return null;
    }
  }
}
