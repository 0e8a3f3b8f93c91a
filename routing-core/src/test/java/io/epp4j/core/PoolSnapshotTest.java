package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.PoolOrder;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.RandomAccess;
import org.junit.jupiter.api.Test;

class PoolSnapshotTest {
  /** Publishes metrics as scraped (no extractor turns a figure off). */
  private static final java.util.function.BiFunction<Endpoint, EndpointMetrics, EndpointMetrics>
      AS_SCRAPED = (e, m) -> m;

  private static EndpointState state(String host) {
    return new EndpointState(Endpoint.of(host, 8000), EndpointMetrics.UNKNOWN,
        new EndpointState.InFlight(host + ":8000"));
  }

  @Test
  void candidatesAreThePoolInOrderAndReadOnly() {
    PoolSnapshot pool = new PoolSnapshot(new EndpointState[] {state("a"), state("b")})
        .with(Endpoint.of("c", 8000));
    List<Candidate> candidates = pool.candidates;

    assertThat(candidates).extracting(c -> c.endpoint().host()).containsExactly("a", "b", "c");
    assertThat(candidates).isInstanceOf(RandomAccess.class);
    assertThat(candidates.get(2)).isSameAs(pool.states[2]);
    assertThat(candidates).isEqualTo(new ArrayList<>(candidates));
    assertThatThrownBy(() -> candidates.get(3)).isInstanceOf(IndexOutOfBoundsException.class);

    Candidate first = candidates.get(0);
    assertThatThrownBy(() -> candidates.add(first))
        .isInstanceOf(UnsupportedOperationException.class);
    assertThatThrownBy(() -> candidates.set(0, first))
        .isInstanceOf(UnsupportedOperationException.class);
    assertThatThrownBy(() -> candidates.remove(0))
        .isInstanceOf(UnsupportedOperationException.class);
    assertThatThrownBy(candidates::clear).isInstanceOf(UnsupportedOperationException.class);
    Iterator<Candidate> it = candidates.iterator();
    it.next();
    assertThatThrownBy(it::remove).isInstanceOf(UnsupportedOperationException.class);
    assertThat(candidates).hasSize(3);
  }

  private static Object order(PoolSnapshot pool) {
    return ((PoolOrder) pool.candidates).poolOrder();
  }

  @Test
  void aCandidateAnswersTheMostReadMetricsAsItsMetricsDo() {
    PoolSnapshot pool = new PoolSnapshot(new EndpointState[] {state("a"), state("b")});
    Candidate never = pool.candidates.get(1);
    assertThat(never.metricsScrapedAtNanos()).isEqualTo(EndpointMetrics.UNSET_TIME);
    assertThat(never.waitingRequests()).isZero();
    PoolSnapshot scraped = pool.withMetrics(0, EndpointMetrics.builder().waitingRequests(3)
        .runningRequests(17).kvCacheUsage(0.625).build(), 42, AS_SCRAPED);
    PoolSnapshot again = scraped.withMetrics(Map.of("a:8000", EndpointMetrics.builder()
        .waitingRequests(5).runningRequests(2).kvCacheUsage(0.25).scrapedAtNanos(7).build()), 99, AS_SCRAPED);
    for (PoolSnapshot p : List.of(pool, scraped, again)) {
      for (Candidate c : p.candidates) {
        EndpointMetrics m = c.metrics();
        assertThat(c.waitingRequests()).as(c.id()).isEqualTo(m.waitingRequests());
        assertThat(c.runningRequests()).as(c.id()).isEqualTo(m.runningRequests());
        assertThat(c.kvCacheUsage()).as(c.id()).isEqualTo(m.kvCacheUsage());
        assertThat(c.metricsScrapedAtNanos()).as(c.id()).isEqualTo(m.scrapedAtNanos());
      }
    }
    Candidate a = again.candidates.get(0);
    assertThat(List.of(a.waitingRequests(), a.runningRequests())).containsExactly(5, 2);
    assertThat(a.kvCacheUsage()).isEqualTo(0.25);
    assertThat(a.metricsScrapedAtNanos()).isEqualTo(7); // a scrape's own stamp is kept
    assertThat(scraped.candidates.get(0).metricsScrapedAtNanos()).isEqualTo(42);
  }

  @Test
  void theOrderTokenStaysWhileOnlyMetricsChangeAndChangesWithTheMembers() {
    PoolSnapshot pool = new PoolSnapshot(new EndpointState[] {state("a"), state("b")});
    EndpointMetrics m = EndpointMetrics.builder().waitingRequests(3).build();

    PoolSnapshot scraped = pool.withMetrics(1, m, 5, AS_SCRAPED);
    PoolSnapshot scrapedAll = scraped.withMetrics(Map.of("a:8000", m), 6, AS_SCRAPED);
    assertThat(order(scraped)).isSameAs(order(pool));
    assertThat(order(scrapedAll)).isSameAs(order(pool));
    assertThat(scrapedAll.candidates.get(0).metrics().waitingRequests()).isEqualTo(3);
    assertThat(scrapedAll.candidates.get(0).endpoint()).isSameAs(pool.candidates.get(0).endpoint());
    assertThat(scrapedAll.indexOf("b:8000")).isEqualTo(1);

    PoolSnapshot grown = pool.with(Endpoint.of("c", 8000));
    PoolSnapshot shrunk = pool.without(0);
    PoolSnapshot relabelled = pool.reconciled(
        List.of(Endpoint.parse("a:8000", Map.of("zone", "x")), Endpoint.of("b", 8000)),
        new ArrayList<>(), new ArrayList<>(), new ArrayList<>());
    assertThat(order(grown)).isNotSameAs(order(pool));
    assertThat(order(shrunk)).isNotSameAs(order(pool));
    assertThat(order(relabelled)).as("a new Endpoint object at position 0")
        .isNotSameAs(order(pool));
    assertThat(shrunk.indexOf("b:8000")).isEqualTo(0);
  }

  @Test
  void aListInThePoolsOrderKnowsEachEndpointsPositionThroughEveryKindOfChange() {
    PoolSnapshot pool = new PoolSnapshot(new EndpointState[] {state("a"), state("b"), state("c")});
    PoolSnapshot scraped = pool.withMetrics(2, EndpointMetrics.builder().waitingRequests(1).build(), 5,
        AS_SCRAPED);
    PoolSnapshot grown = scraped.with(Endpoint.of("d", 8000));
    PoolSnapshot shrunk = grown.without(0);
    for (PoolSnapshot p : List.of(pool, scraped, grown, shrunk)) {
      PoolOrder list = (PoolOrder) p.candidates;
      for (int i = 0; i < p.candidates.size(); i++) {
        assertThat(list.positionOf(p.candidates.get(i).id())).isEqualTo(i);
      }
      assertThat(list.positionOf("z:8000")).isEqualTo(-1);
    }
    assertThat(((PoolOrder) shrunk.candidates).positionOf("a:8000")).isEqualTo(-1);
    assertThat(((PoolOrder) shrunk.candidates).positionOf("d:8000")).isEqualTo(2);
  }
}
