package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.RoutingDecision;
import io.epp4j.testkit.ContractFixtures;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Upstream parameters that change behaviour, each seen changing it. */
class UpstreamPluginSemanticsTest {
  static final InferenceRequest REQ = InferenceRequest.completion("m", "hi");

  static Plugin build(io.epp4j.api.PluginProvider provider, Map<String, ?> params) {
    var r = provider.create(ContractFixtures.context(provider.type()), Parameters.of(params));
    assertThat(r.errors()).isEmpty();
    return r.value();
  }

  static void routeCold(NoHitLruScorer s, Candidate to) {
    s.afterRouting(REQ, TestCandidates.state(), RoutingDecision.routed("default",
        Map.of("default", new ProfileResult("default", List.of(to.endpoint())))));
  }

  @Test
  void noHitLruForgetsEndpointsBeyondItsLruSize() {
    List<Candidate> pool = TestCandidates.pool(4);
    NoHitLruScorer small = TestCandidates.joined(
        (NoHitLruScorer) build(new NoHitLruScorer.Provider(), Map.of("lruSize", 2)), pool);
    NoHitLruScorer large = TestCandidates.joined(
        (NoHitLruScorer) build(new NoHitLruScorer.Provider(), Map.of()), pool);
    for (NoHitLruScorer s : List.of(small, large)) {
      routeCold(s, pool.get(0));
      routeCold(s, pool.get(1));
      routeCold(s, pool.get(2));
    }
    double[] smallScores = new double[4];
    small.score(REQ, TestCandidates.state(), pool, smallScores);
    double[] largeScores = new double[4];
    large.score(REQ, TestCandidates.state(), pool, largeScores);
    // with room for two, the LRU forgot the first endpoint: it ranks with the never-used one
    assertThat(smallScores[0]).isEqualTo(1.0);
    assertThat(smallScores[3]).isEqualTo(1.0);
    // with the default 1024 it is remembered as the least recent of the used ones
    assertThat(largeScores[0]).isLessThan(1.0);
    assertThat(largeScores[3]).isEqualTo(1.0);
  }

  @Test
  void prefixScorerBlockSizeInCharactersIsConvertedToTokens() {
    PrefixCacheScorer chars = (PrefixCacheScorer) build(new PrefixCacheScorer.Provider(),
        Map.of("blockSize", 64));
    PrefixCacheScorer tokens = (PrefixCacheScorer) build(new PrefixCacheScorer.Provider(),
        Map.of("blockSizeTokens", 16));
    assertThat(chars.toString()).isEqualTo(tokens.toString());
  }

  @Test
  void prefixScorerMaxPrefixTokensToMatchBecomesBlocks() {
    List<Candidate> pool = TestCandidates.pool(2);
    PrefixCacheScorer byTokens = TestCandidates.joined((PrefixCacheScorer) build(
        new PrefixCacheScorer.Provider(),
        Map.of("maxPrefixTokensToMatch", 1024, "blockSizeTokens", 16)), pool);
    InferenceRequest longPrompt = InferenceRequest.builder().model("m")
        .tokenIds(new int[100 * 16]).build();
    io.epp4j.api.CycleState state = TestCandidates.state();
    byTokens.score(longPrompt, state, pool, new double[2]);
    io.epp4j.api.PrefixHits hits = state.get(io.epp4j.api.PrefixHits.KEY);
    assertThat(hits).isNotNull();
    assertThat(hits.totalBlocks(0)).as("1024 tokens of 16-token blocks").isEqualTo(64);
  }

  /** The blocks the scorer considers for a prompt of 100 blocks of 16 tokens. */
  static int blocksConsidered(Map<String, ?> params) {
    List<Candidate> pool = TestCandidates.pool(1);
    PrefixCacheScorer s = TestCandidates.joined(
        (PrefixCacheScorer) build(new PrefixCacheScorer.Provider(), params), pool);
    io.epp4j.api.CycleState state = TestCandidates.state();
    s.score(InferenceRequest.builder().model("m").tokenIds(new int[100 * 16]).build(), state,
        pool, new double[1]);
    io.epp4j.api.PrefixHits hits = state.get(io.epp4j.api.PrefixHits.KEY);
    assertThat(hits).isNotNull();
    return hits.totalBlocks(0);
  }

  @Test
  void prefixScorerMaxPrefixTokensToMatchZeroIsUnsetAsUpstream() {
    // upstream's default for the field: 0 means "not set", and maxPrefixBlocksToMatch applies
    assertThat(blocksConsidered(Map.of("maxPrefixTokensToMatch", 0))).isEqualTo(100);
    assertThat(blocksConsidered(Map.of("maxPrefixTokensToMatch", 0,
        "maxPrefixBlocksToMatch", 10))).isEqualTo(10);
  }

  @Test
  void prefixScorerMaxPrefixTokensToMatchTakesPrecedenceOverBlocksAsUpstream() {
    assertThat(blocksConsidered(Map.of("maxPrefixTokensToMatch", 1024,
        "maxPrefixBlocksToMatch", 10, "blockSizeTokens", 16))).isEqualTo(64);
  }

  /**
   * Upstream sets no upper bound on either prefix limit: a file with {@code
   * maxPrefixTokensToMatch: 2147483647} ("the whole prompt") loads there. epp4j refused a
   * token limit above 2^30 and a block limit above 2^22, though nothing is allocated by them;
   * both now load, for the scorer and the producer, and a prompt is matched whole.
   */
  @Test
  void prefixLimitsAboveTheFormerCapsLoadAndMatchTheWholePrompt() {
    assertThat(blocksConsidered(Map.of("maxPrefixTokensToMatch", Integer.MAX_VALUE)))
        .isEqualTo(100);
    assertThat(blocksConsidered(Map.of("maxPrefixTokensToMatch", 10_000_000_000L)))
        .isEqualTo(100);
    assertThat(blocksConsidered(Map.of("maxPrefixBlocksToMatch", 50_000_000))).isEqualTo(100);
    var producer = new PrefixCacheScorer.ApproxProducerProvider().create(ContractFixtures.context("p"),
        Parameters.of(Map.of("maxPrefixBlocksToMatch", 50_000_000,
            "maxPrefixTokensToMatch", Integer.MAX_VALUE)));
    assertThat(producer.errors()).isEmpty();
  }

  @Test
  void prefixScorerRefusesANegativeMaxPrefixTokensToMatchNamingIt() {
    var r = new PrefixCacheScorer.Provider().create(ContractFixtures.context("p"),
        Parameters.of(Map.of("maxPrefixTokensToMatch", -1)));
    assertThat(r.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("maxPrefixTokensToMatch"));
  }

  @Test
  void probabilisticAdmitterTakesEveryPositiveThresholdAndPowerUpstreamTakes() {
    // upstream requires only kvCacheUtilThreshold > 0 and power > 0: a threshold above 1 lets
    // KV usage count for less than the queue
    ProbabilisticAdmitter a = (ProbabilisticAdmitter) build(new ProbabilisticAdmitter.Provider(),
        Map.of("kvCacheUtilThreshold", 2.0, "power", 2000));
    List<Candidate> full = List.of(TestCandidates.withMetrics("10.0.0.1:8000",
        TestCandidates.metrics(0, 4, 1.0)));
    assertThat(a.saturation(full)).isEqualTo(0.5);
  }

  @Test
  void probabilisticAdmitterRefusesThresholdsThatAreNotFinitePositiveNumbers() {
    for (var bad : List.of(Map.of("kvCacheUtilThreshold", Double.POSITIVE_INFINITY),
        Map.of("power", Double.POSITIVE_INFINITY), Map.of("kvCacheUtilThreshold", -0.5))) {
      var r = new ProbabilisticAdmitter.Provider().create(ContractFixtures.context("a"),
          Parameters.of(bad));
      assertThat(r.errors()).as("%s", bad).singleElement().satisfies(e -> assertThat(e)
          .contains("'" + bad.keySet().iterator().next() + "'"));
    }
  }

  @Test
  void cacheTrackingModeIsRefusedClearlyWithoutThePreciseModule() {
    var r = new PrefixCacheScorer.Provider().create(ContractFixtures.context("p"),
        Parameters.of(Map.of("mode", "cache_tracking")));
    assertThat(r.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("'mode'").contains("routing-kv-events"));
  }
}
