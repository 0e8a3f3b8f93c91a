package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Picker;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * Common part of {@code ring-hash-picker} and {@code maglev-picker}: the request key, the
 * placement table (rebuilt only when the candidates' ids or weights change), optional bounded
 * load and fallbacks. The request hash is {@code XXH64(key, seed 0)} as in Envoy; a request
 * without a key gets a random hash from the cycle's random source, as Envoy does.
 */
abstract class ConsistentHashPicker implements Picker {
  /** Label holding an endpoint's integer weight (default 1). */
  static final String WEIGHT_LABEL = "epp4j.io/weight";

  /** A placement table built for one candidate list. */
  abstract static class Table {
    final Endpoint[] endpoints;
    final double[] normalizedWeights;

    Table(List<Candidate> candidates) {
      int n = candidates.size();
      endpoints = new Endpoint[n];
      normalizedWeights = new double[n];
      long sum = 0;
      for (int i = 0; i < n; i++) {
        endpoints[i] = candidates.get(i).endpoint();
        sum += weight(endpoints[i]);
      }
      for (int i = 0; i < n; i++) {
        // same arithmetic as Envoy: weight * locality weight (1.0) / sum, in double
        normalizedWeights[i] = weight(endpoints[i]) * 1.0 / sum;
      }
    }

    final boolean matches(List<Candidate> candidates) {
      if (candidates.size() != endpoints.length) {
        return false;
      }
      for (int i = 0; i < endpoints.length; i++) {
        Endpoint e = candidates.get(i).endpoint();
        if (e != endpoints[i] && !e.equals(endpoints[i])) {
          return false;
        }
      }
      return true;
    }

    /** Position of a request hash in the table. */
    abstract int position(long hash);

    /** Candidate index at a position. */
    abstract int hostAt(int position);

    /** Number of positions. */
    abstract int size();
  }

  private final HashKeySource keySource;
  private final double balanceFactor;
  private final int maxEndpoints;
  // a few recent tables, so that filters alternating between candidate sets do not rebuild
  private static final int CACHED_TABLES = 4;
  private final AtomicReferenceArray<Table> tables = new AtomicReferenceArray<>(CACHED_TABLES);
  private final AtomicInteger nextSlot = new AtomicInteger();

  ConsistentHashPicker(HashKeySource keySource, double balanceFactor, int maxEndpoints) {
    if (balanceFactor != 0 && !(balanceFactor >= 1.0)) {
      throw new IllegalArgumentException("balanceFactor must be 0 (off) or >= 1, got " + balanceFactor);
    }
    if (maxEndpoints < 1) {
      throw new IllegalArgumentException("maxNumOfEndpoints must be >= 1, got " + maxEndpoints);
    }
    this.keySource = keySource;
    this.balanceFactor = balanceFactor;
    this.maxEndpoints = maxEndpoints;
  }

  static int weight(Endpoint e) {
    String w = e.label(WEIGHT_LABEL);
    if (w == null) {
      return 1;
    }
    try {
      int v = Integer.parseInt(w.trim());
      return v >= 1 && v <= 1_000_000 ? v : 1;
    } catch (NumberFormatException ex) {
      return 1;
    }
  }

  abstract Table build(List<Candidate> candidates);

  final Table tableFor(List<Candidate> candidates) {
    for (int i = 0; i < CACHED_TABLES; i++) {
      Table t = tables.get(i);
      if (t != null && t.matches(candidates)) {
        return t;
      }
    }
    // racing builders produce equal tables; a duplicate only wastes a slot
    Table t = build(candidates);
    tables.set((nextSlot.getAndIncrement() & Integer.MAX_VALUE) % CACHED_TABLES, t);
    return t;
  }

  /** The request's hash: XXH64 of its key, or a random value when it has none. */
  final long requestHash(InferenceRequest request, CycleState state) {
    String key = keySource.key(request);
    return key != null ? Xxh64.hash(key, 0) : state.random().nextLong();
  }

  @Override
  public List<Candidate> pick(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    if (n == 0) {
      return List.of();
    }
    Table t = tableFor(candidates);
    int pos = t.position(requestHash(request, state));
    if (balanceFactor == 0 && maxEndpoints == 1) {
      return List.of(candidates.get(t.hostAt(pos)));
    }
    int k = Math.min(maxEndpoints, n);
    long totalInFlight = 0;
    if (balanceFactor != 0) {
      for (int i = 0; i < n; i++) {
        totalInFlight += candidates.get(i).inFlightRequests();
      }
    }
    boolean[] seen = new boolean[n];
    int[] chosen = new int[n];
    int chosenCount = 0;
    int[] overloaded = new int[n];
    int overloadedCount = 0;
    int distinct = 0;
    int size = t.size();
    // walk clockwise from the hashed position; the first distinct hosts are primary then fallbacks
    for (int step = 0; step < size && chosenCount < k && distinct < n; step++) {
      int p = pos + step;
      if (p >= size) {
        p -= size;
      }
      int host = t.hostAt(p);
      if (seen[host]) {
        continue;
      }
      seen[host] = true;
      distinct++;
      if (balanceFactor != 0
          && isOverloaded(candidates.get(host), t.normalizedWeights[host], totalInFlight)) {
        overloaded[overloadedCount++] = host;
      } else {
        chosen[chosenCount++] = host;
      }
    }
    // every host overloaded (or too few left): take overloaded ones in clockwise order
    for (int i = 0; i < overloadedCount && chosenCount < k; i++) {
      chosen[chosenCount++] = overloaded[i];
    }
    if (chosenCount == 1) {
      return List.of(candidates.get(chosen[0]));
    }
    List<Candidate> out = new ArrayList<>(chosenCount);
    for (int i = 0; i < chosenCount; i++) {
      out.add(candidates.get(chosen[i]));
    }
    return out;
  }

  /**
   * Bounded load (consistent hashing with bounded loads): an endpoint may take a new request
   * while its in-flight count is below {@code ceil((total + 1) × factor × weight)} (at least 1).
   */
  private boolean isOverloaded(Candidate c, double normalizedWeight, long totalInFlight) {
    double slots = Math.max(1.0, Math.ceil((totalInFlight + 1) * balanceFactor * normalizedWeight));
    return c.inFlightRequests() >= slots;
  }

  final int maxNumOfEndpoints() {
    return maxEndpoints;
  }
}
