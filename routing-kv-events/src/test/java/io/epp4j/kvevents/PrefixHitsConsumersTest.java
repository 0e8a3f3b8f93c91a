package io.epp4j.kvevents;

import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.candidates;
import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.decision;
import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.prompt;
import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.request;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Parameters;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PoolListener;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import io.epp4j.api.Ticker;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The plugins that act on cache locality (pd-profile-handler, no-hit-lru-scorer) see the hits of
 * the precise and hybrid scorers; the approximate scorer's side is in routing-scorers.
 */
class PrefixHitsConsumersTest {
  static final List<Endpoint> EPS = PrecisePrefixCacheScorerTest.EPS;
  final AtomicLong now = new AtomicLong(1_000_000_000L);
  final KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();

  void store(String ep, int[] tokens, int blocks, long firstHash) {
    long[] hashes = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      hashes[i] = firstHash + i;
    }
    index.apply(ep, KvEventBatch.of(0, List.of(
        KvEvent.BlockStored.of(hashes, null, Arrays.copyOf(tokens, blocks * 16), 16))));
  }

  static String pdYaml(String scorer) {
    return """
        plugins:
        - {type: pd-profile-handler, parameters: {nonCachedTokens: 100}}
        - type: %s
        - type: decode-filter
        - type: prefill-filter
        - type: max-score-picker
        schedulingProfiles:
        - name: decode
          plugins: [{pluginRef: decode-filter}, {pluginRef: %s}, {pluginRef: max-score-picker}]
        - name: prefill
          plugins: [{pluginRef: prefill-filter}, {pluginRef: max-score-picker}]
        """.formatted(scorer, scorer);
  }

  static final List<Endpoint> PD = List.of(
      Endpoint.parse("10.0.1.1:8000", Map.of(Endpoint.ROLE_LABEL, "decode")),
      Endpoint.parse("10.0.1.2:8000", Map.of(Endpoint.ROLE_LABEL, "prefill")));

  @ParameterizedTest
  @ValueSource(strings = {"precise-prefix-cache-scorer", "hybrid-prefix-cache-scorer"})
  void pdHandlerSkipsPrefillWhenTheDecodePickHoldsThePrompt(String scorer) {
    try (Router r = Router.builder().endpoints(PD).service(KvBlockIndex.class, index)
        .configYaml(pdYaml(scorer), "pd.yaml").ticker(now::get).randomSeed(1).build()) {
      int[] held = prompt(1, 160);
      store("10.0.1.1:8000", held, 10, 100); // all 160 tokens cached on the decode endpoint
      RoutingDecision warm = r.route(request(held));
      assertThat(warm.primary().id()).isEqualTo("10.0.1.1:8000");
      assertThat(warm.secondaryEndpoint("prefill")).as("0 uncached tokens < 100").isNull();
      RoutingDecision cold = r.route(request(prompt(2, 160)));
      assertThat(cold.secondaryEndpoint("prefill")).as("160 uncached tokens >= 100").isNotNull();
    }
  }

  @Test
  void pdHandlerSeesTheHybridsMemoryWhereTheEngineShowsNothing() {
    try (Router r = Router.builder().endpoints(PD).service(KvBlockIndex.class, index)
        .configYaml(pdYaml("hybrid-prefix-cache-scorer"), "pd.yaml").ticker(now::get)
        .randomSeed(1).build()) {
      int[] p = prompt(3, 160);
      assertThat(r.route(request(p)).secondaryEndpoint("prefill")).isNotNull();
      now.addAndGet(5_000_000_000L); // speculative entries expire; the memory remains
      assertThat(r.route(request(p)).secondaryEndpoint("prefill")).isNull();
    }
  }

  @Test
  void thePreciseScorerInThePrefillProfileScoresThePrefillPool() {
    String yaml = """
        plugins:
        - {type: pd-profile-handler, parameters: {nonCachedTokens: 100}}
        - type: precise-prefix-cache-scorer
        - type: decode-filter
        - type: prefill-filter
        - type: max-score-picker
        schedulingProfiles:
        - name: decode
          plugins: [{pluginRef: decode-filter}, {pluginRef: precise-prefix-cache-scorer},
            {pluginRef: max-score-picker}]
        - name: prefill
          plugins: [{pluginRef: prefill-filter}, {pluginRef: precise-prefix-cache-scorer},
            {pluginRef: max-score-picker}]
        """;
    List<Endpoint> eps = List.of(
        Endpoint.parse("10.0.2.1:8000", Map.of(Endpoint.ROLE_LABEL, "decode")),
        Endpoint.parse("10.0.2.2:8000", Map.of(Endpoint.ROLE_LABEL, "prefill")),
        Endpoint.parse("10.0.2.3:8000", Map.of(Endpoint.ROLE_LABEL, "prefill")));
    try (Router r = Router.builder().endpoints(eps).service(KvBlockIndex.class, index)
        .configYaml(yaml, "pd.yaml").ticker(now::get).randomSeed(1).build()) {
      for (int k = 0; k < 8; k++) {
        int[] p = prompt(20 + k, 160);
        String holder = eps.get(1 + k % 2).id();
        store(holder, p, 10, 1_000L * (k + 1));
        RoutingDecision d = r.route(request(p));
        assertThat(d.secondaryEndpoint("prefill")).as("prompt %d", k).isNotNull();
        assertThat(d.secondaryEndpoint("prefill").id()).as("prompt %d", k).isEqualTo(holder);
      }
    }
  }

  static Scorer noHitLru(List<Endpoint> pool) {
    PluginContext ctx = new PluginContext() {
      @Override public String pluginName() { return "no-hit-lru-scorer"; }
      @Override public Ticker ticker() { return () -> 0L; }
      @Override public <T> Optional<T> service(Class<T> type) { return Optional.empty(); }
    };
    Scorer s = (Scorer) PluginRegistry.fromServiceLoader()
        .create("no-hit-lru-scorer", ctx, Parameters.empty()).value();
    pool.forEach(((PoolListener) s)::onEndpointAdded);
    return s;
  }

  CycleState state() {
    return new CycleState(now.get(), new SplittableRandom(1));
  }

  /** Scores with {@code producer} then {@code lru} in one cycle, as one profile would. */
  static double[] lruAfter(Scorer producer, Scorer lru, int[] tokens, CycleState st,
      List<Candidate> pool) {
    producer.score(request(tokens), st, pool, new double[pool.size()]);
    double[] scores = new double[pool.size()];
    lru.score(request(tokens), st, pool, scores);
    return scores;
  }

  @ParameterizedTest
  @ValueSource(booleans = {false, true})
  void noHitLruSeesEngineHits(boolean hybrid) {
    PrecisePrefixCacheScorer precise =
        new PrecisePrefixCacheScorer(index, null, null, 1024, true, true, false);
    Scorer producer = hybrid
        ? new HybridPrefixCacheScorer(precise, 0.8, 600_000_000_000L, 1000, false) : precise;
    EPS.forEach(((PoolListener) producer)::onEndpointAdded);
    Scorer lru = noHitLru(EPS);
    List<Candidate> pool = candidates(EPS);
    int[] held = prompt(4, 64);
    store(EPS.get(1).id(), held, 4, 10);
    CycleState warm = state();
    assertThat(lruAfter(producer, lru, held, warm, pool)).as("a hit: neutral").containsOnly(0.5);
    ((RequestListener) lru).afterRouting(request(held), warm, decision(EPS.get(1)));
    // the warm request left no cold stamp: a cold one still finds every endpoint unused
    assertThat(lruAfter(producer, lru, prompt(5, 64), state(), pool)).containsOnly(1.0);
    producer.close();
  }

  @Test
  void noHitLruSeesTheHybridsMemory() {
    PrecisePrefixCacheScorer precise =
        new PrecisePrefixCacheScorer(index, null, null, 1024, true, true, false);
    HybridPrefixCacheScorer hybrid =
        new HybridPrefixCacheScorer(precise, 0.8, 600_000_000_000L, 1000, false);
    EPS.forEach(hybrid::onEndpointAdded);
    Scorer lru = noHitLru(EPS);
    List<Candidate> pool = candidates(EPS);
    int[] p = prompt(6, 64);
    CycleState first = state();
    hybrid.score(request(p), first, pool, new double[3]);
    hybrid.afterRouting(request(p), first, decision(EPS.get(2)));
    now.addAndGet(5_000_000_000L); // speculative entries expire; the memory remains
    assertThat(lruAfter(hybrid, lru, p, state(), pool)).containsOnly(0.5);
    hybrid.close();
  }
}
