package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.RandomAccess;
import org.junit.jupiter.api.Test;

class PoolSnapshotTest {
  private static EndpointState state(String host) {
    return new EndpointState(Endpoint.of(host, 8000), EndpointMetrics.UNKNOWN,
        new EndpointState.InFlight());
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
}
