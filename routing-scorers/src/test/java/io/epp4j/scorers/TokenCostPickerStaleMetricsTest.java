package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * token-cost-picker and figures that stopped coming: a replica too busy to answer its scrapes
 * keeps the figures of before, which must not make it look cheaper than the replicas that report.
 */
class TokenCostPickerStaleMetricsTest {
  static final long NOW = 60_000_000_000L;

  static EndpointMetrics usage(double kv, long scrapedAt) {
    return EndpointMetrics.builder().kvCacheUsage(kv).scrapedAtNanos(scrapedAt).build();
  }

  static Candidate pick(TokenCostPicker p, List<Candidate> pool) {
    InferenceRequest r = InferenceRequest.builder().model("m").tokenIds(new int[320])
        .maxTokens(10).build();
    return p.pick(r, TestCandidates.state(NOW, 7), pool, new double[pool.size()]).get(0);
  }

  @Test
  void aStaleEndpointsLastFiguresCountAsAtLeastTheFreshOnesMean() {
    // a: last scraped 10 s ago with an empty cache; b and c report 0.4 and 0.8 now
    Candidate a = TestCandidates.withMetrics("10.0.0.1:8000", usage(0.0, NOW - 10_000_000_000L));
    Candidate b = TestCandidates.withMetrics("10.0.0.2:8000", usage(0.4, NOW - 1_000_000L));
    Candidate c = TestCandidates.withMetrics("10.0.0.3:8000", usage(0.8, NOW - 1_000_000L));
    List<Candidate> pool = List.of(a, b, c);
    TokenCostPicker p = TestCandidates.joined(TokenCostPicker.create(), pool);
    // a counts as the fresh mean, 0.6: b, at 0.4, is the cheapest
    assertThat(pick(p, pool).id()).isEqualTo(b.id());

    // the same figures, fresh: a's empty cache is real, and a is the cheapest
    Candidate freshA = TestCandidates.withMetrics(a.id(), usage(0.0, NOW - 1_000_000L));
    List<Candidate> freshPool = List.of(freshA, b, c);
    assertThat(pick(p, freshPool).id()).isEqualTo(a.id());

    // stale figures above the mean still count as they are: stale data may hide an overload,
    // never invent one away
    Candidate busyA = TestCandidates.withMetrics(a.id(), usage(0.9, NOW - 10_000_000_000L));
    assertThat(p.cost(busyA, 320, 0)).isGreaterThan(p.cost(c, 320, 0));
    assertThat(pick(p, List.of(busyA, b, c)).id()).isEqualTo(b.id());
  }

  @Test
  void withEveryEndpointStaleTheLastFiguresAreAllThereIs() {
    long old = NOW - 10_000_000_000L;
    Candidate a = TestCandidates.withMetrics("10.0.0.1:8000", usage(0.0, old));
    Candidate b = TestCandidates.withMetrics("10.0.0.2:8000", usage(0.5, old));
    List<Candidate> pool = List.of(a, b);
    TokenCostPicker p = TestCandidates.joined(TokenCostPicker.create(), pool);
    assertThat(pick(p, pool).id()).isEqualTo(a.id());
  }
}
