package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.PoolListener;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

/** Candidates and cycle states for tests. */
final class TestCandidates {
  private TestCandidates() {}

  record Cand(Endpoint endpoint, EndpointMetrics metrics, int inFlightRequests, long inFlightTokens)
      implements Candidate {}

  static Cand cand(String id) {
    return new Cand(Endpoint.parse(id), EndpointMetrics.UNKNOWN, 0, 0);
  }

  static Cand cand(String id, Map<String, String> labels) {
    return new Cand(Endpoint.parse(id, labels), EndpointMetrics.UNKNOWN, 0, 0);
  }

  static Cand withMetrics(String id, EndpointMetrics m) {
    return new Cand(Endpoint.parse(id), m, 0, 0);
  }

  static Cand inFlight(String id, int requests, long tokens) {
    return new Cand(Endpoint.parse(id), EndpointMetrics.UNKNOWN, requests, tokens);
  }

  /** Fresh metrics scraped at time 0 with the given queue and KV usage. */
  static EndpointMetrics metrics(int waiting, int running, double kv) {
    return EndpointMetrics.builder().waitingRequests(waiting).runningRequests(running)
        .kvCacheUsage(kv).scrapedAtNanos(0).build();
  }

  static List<Candidate> pool(int n) {
    List<Candidate> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      out.add(cand("10.0.0." + (i + 1) + ":8000"));
    }
    return out;
  }

  /** Announces {@code pool} to a plugin as the router does when endpoints join; returns it. */
  static <T extends PoolListener> T joined(T plugin, List<Candidate> pool) {
    for (Candidate c : pool) {
      plugin.onEndpointAdded(c.endpoint());
    }
    return plugin;
  }

  static CycleState state() {
    return new CycleState(0, new SplittableRandom(42));
  }

  static CycleState state(long nowNanos, long seed) {
    return new CycleState(nowNanos, new SplittableRandom(seed));
  }
}
