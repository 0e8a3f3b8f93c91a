package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BiFunction;
import java.util.function.Function;
import org.jspecify.annotations.Nullable;

/** An immutable view of the endpoint pool, swapped atomically on every change. */
final class PoolSnapshot {
  static final PoolSnapshot EMPTY = new PoolSnapshot(new EndpointState[0]);

  final EndpointState[] states;
  final List<Candidate> candidates;
  /**
   * The candidates a request may go to: those whose server is awake, or all of them when none
   * is (a pool that only sleeps still routes, and the servers' 503s say why). The same list as
   * {@link #candidates}, with its {@link io.epp4j.api.PoolOrder}, while no endpoint sleeps.
   */
  final List<Candidate> awake;
  /** How many endpoints report their engine asleep. */
  final int asleep;
  /** The {@link io.epp4j.api.PoolOrder} token: the same while only metrics change. */
  private final Object order;
  private final Map<String, Integer> index;

  PoolSnapshot(EndpointState[] states) {
    this(states, new Object(), null);
  }

  /** A snapshot of {@code states}, which are {@code same}'s endpoints in {@code same}'s order. */
  private PoolSnapshot(EndpointState[] states, Object order, @Nullable PoolSnapshot same) {
    this.states = states;
    this.order = order;
    if (same != null) {
      this.index = same.index;
    } else {
      Map<String, Integer> m = new HashMap<>(states.length * 2);
      for (int i = 0; i < states.length; i++) {
        m.put(states[i].endpoint.id(), i);
      }
      this.index = m;
    }
    this.candidates = new CandidateList(states, order, index);
    int sleeping = 0;
    for (EndpointState st : states) {
      if (st.metrics.asleep()) {
        sleeping++;
      }
    }
    this.asleep = sleeping;
    this.awake = sleeping == 0 ? candidates : awakeOf(candidates);
  }

  /**
   * {@code list} without the endpoints that report their engine asleep, or {@code list} itself
   * when that would leave none, or when none sleeps.
   */
  static List<Candidate> awakeOf(List<Candidate> list) {
    List<Candidate> kept = null;
    for (int i = 0, n = list.size(); i < n; i++) {
      Candidate c = list.get(i);
      boolean up = !c.metrics().asleep();
      if (!up && kept == null) {
        kept = new ArrayList<>(list.subList(0, i));
      } else if (up && kept != null) {
        kept.add(c);
      }
    }
    return kept == null || kept.isEmpty() ? list : Collections.unmodifiableList(kept);
  }

  int indexOf(String id) {
    Integer i = index.get(id);
    return i == null ? -1 : i;
  }

  @Nullable EndpointState get(String id) {
    int i = indexOf(id);
    return i < 0 ? null : states[i];
  }

  /** This pool plus a new endpoint with unknown metrics and nothing in flight. */
  PoolSnapshot with(Endpoint endpoint) {
    return with(endpoint, new EndpointState.InFlight(endpoint.id()));
  }

  /** This pool plus a new endpoint with unknown metrics, counting in flight on {@code inFlight}. */
  PoolSnapshot with(Endpoint endpoint, EndpointState.InFlight inFlight) {
    EndpointState[] next = Arrays.copyOf(states, states.length + 1);
    next[states.length] = new EndpointState(endpoint, EndpointMetrics.UNKNOWN, inFlight);
    return new PoolSnapshot(next);
  }

  /** This pool without the endpoint at index {@code i}. */
  PoolSnapshot without(int i) {
    EndpointState[] next = new EndpointState[states.length - 1];
    System.arraycopy(states, 0, next, 0, i);
    System.arraycopy(states, i + 1, next, i, states.length - i - 1);
    return new PoolSnapshot(next);
  }

  /** A member that stays at its address with new labels. */
  record Relabel(Endpoint previous, Endpoint current) {}

  /**
   * The pool made exactly {@code endpoints}: members that stay keep their metrics and in-flight
   * counters (and take new labels), new ones start unknown. Fills {@code added},
   * {@code removed} and {@code relabelled}.
   */
  PoolSnapshot reconciled(Collection<Endpoint> endpoints, List<Endpoint> added,
      List<Endpoint> removed, List<Relabel> relabelled) {
    return reconciled(endpoints, added, removed, relabelled, EndpointState.InFlight::new);
  }

  /**
   * As {@link #reconciled(Collection, List, List, List)}, with the in-flight counters of a new
   * member taken from {@code counters} (by id).
   */
  PoolSnapshot reconciled(Collection<Endpoint> endpoints, List<Endpoint> added,
      List<Endpoint> removed, List<Relabel> relabelled,
      Function<String, EndpointState.InFlight> counters) {
    Map<String, Endpoint> wanted = new LinkedHashMap<>();
    for (Endpoint e : endpoints) {
      wanted.put(e.id(), e);
    }
    List<EndpointState> next = new ArrayList<>(wanted.size());
    for (EndpointState s : states) {
      Endpoint w = wanted.remove(s.endpoint.id());
      if (w == null) {
        removed.add(s.endpoint);
      } else if (w.equals(s.endpoint)) {
        next.add(s);
      } else {
        next.add(s.relabelled(w)); // labels changed
        relabelled.add(new Relabel(s.endpoint, w));
      }
    }
    for (Endpoint e : wanted.values()) {
      next.add(new EndpointState(e, EndpointMetrics.UNKNOWN, counters.apply(e.id())));
      added.add(e);
    }
    return new PoolSnapshot(next.toArray(new EndpointState[0]));
  }

  /**
   * This pool with new metrics for the members named in {@code metricsById}; metrics without a
   * scrape time, or with one after {@code now}, are stamped {@code now}.
   */
  PoolSnapshot withMetrics(Map<String, EndpointMetrics> metricsById, long now,
      BiFunction<Endpoint, EndpointMetrics, EndpointMetrics> published) {
    EndpointState[] next = states.clone();
    for (int i = 0; i < next.length; i++) {
      EndpointMetrics m = metricsById.get(next[i].endpoint.id());
      if (m != null) {
        next[i] = next[i].withMetrics(stamped(published.apply(next[i].endpoint, m), now));
      }
    }
    return new PoolSnapshot(next, order, this);
  }

  /** This pool with new metrics for the member at index {@code i}. */
  PoolSnapshot withMetrics(int i, EndpointMetrics m, long now,
      BiFunction<Endpoint, EndpointMetrics, EndpointMetrics> published) {
    EndpointState[] next = states.clone();
    next[i] = next[i].withMetrics(stamped(published.apply(next[i].endpoint, m), now));
    return new PoolSnapshot(next, order, this);
  }

  private static EndpointMetrics stamped(EndpointMetrics m, long now) {
    return m.scrapedAtNanos() == EndpointMetrics.UNSET_TIME || inFuture(m, now)
        ? m.withScrapedAtNanos(now) : m;
  }

  /**
   * Whether {@code m} says it was scraped after {@code now}: kept, such a time would give the
   * metrics an age of 0 (see {@code Candidate.metricsAgeNanos}) until the clock caught up, so
   * they would never go stale. Compared as a difference, as ticker readings are.
   */
  static boolean inFuture(EndpointMetrics m, long now) {
    return m.scrapedAtNanos() != EndpointMetrics.UNSET_TIME && now - m.scrapedAtNanos() < 0;
  }
}
