package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.LockSupport;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The zero-config router (prefix-cache, queue and KV-utilisation scorers), and the {@code epp4j}
 * preset with sessions (whose picker keeps its own pending and session accounts), under everything a
 * gateway and a pool controller do at once: eight threads routing; endpoints added, removed and
 * replaced (ids that never come back, and ids that do); metrics published for some endpoints and
 * left to go stale for others; decisions finished on other threads, finished twice, finished
 * after they expired, or never finished at all. Bounded by a route count and a wall-clock budget.
 */
class RouterChurnStressTest {
  static final int ROUTING_THREADS = 8;
  static final int MAX_ROUTES_PER_THREAD = 100_000;
  static final long ROUTING_BUDGET_NANOS = TimeUnit.SECONDS.toNanos(10);
  /** In the test's own clock, which the metrics thread advances by 1 ms per update. */
  static final Duration MAX_AGE = Duration.ofSeconds(5);
  static final List<Endpoint> STABLE = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"), Endpoint.parse("10.0.0.3:8000"),
      Endpoint.parse("10.0.0.4:8000"));
  static final Usage USAGE = new Usage(300, 128, 64);

  final AtomicLong clock = new AtomicLong(1_000_000_000L);
  final AtomicBoolean stop = new AtomicBoolean();
  final ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
  final ConcurrentLinkedQueue<String> removedPicks = new ConcurrentLinkedQueue<>();
  /**
   * Bumped after each removal returns; a removed id maps to the value its removal took. A route
   * that read the epoch at {@code e} before it started must not pick an id removed at
   * {@code <= e}. A reusable id loses its entry before it is added back, so a pick after the
   * re-add is never mistaken for one.
   */
  final AtomicLong epoch = new AtomicLong();
  final ConcurrentHashMap<String, Long> removedAt = new ConcurrentHashMap<>();
  /** One candidate per endpoint incarnation: its in-flight counters outlive its removal. */
  final ConcurrentLinkedQueue<Candidate> incarnations = new ConcurrentLinkedQueue<>();
  final ArrayBlockingQueue<RoutingDecision> handoff = new ArrayBlockingQueue<>(1024);
  final ConcurrentLinkedQueue<RoutingDecision> finishLate = new ConcurrentLinkedQueue<>();
  final LongAdder routed = new LongAdder();
  final LongAdder rejected = new LongAdder();
  final LongAdder dropped = new LongAdder();
  final AtomicInteger removals = new AtomicInteger();
  final AtomicInteger maxAgeJumps = new AtomicInteger();

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"default", Epp4jPreset.NAME})
  @Timeout(value = 120, unit = TimeUnit.SECONDS)
  void eightThreadsRouteThroughChurnStaleMetricsAndRacingCallbacks(String config)
      throws Exception {
    boolean epp4j = config.equals(Epp4jPreset.NAME);
    InferenceRequest[] requests = requests(epp4j);
    ExecutorService pool = Executors.newFixedThreadPool(ROUTING_THREADS + 2);
    Router.Builder builder = Router.builder().endpoints(STABLE).ticker(clock::get)
        .inFlightMaxAge(MAX_AGE);
    if (epp4j) {
      builder.configYaml(Epp4jPreset.yaml(), "epp4j.yaml");
    }
    try (Router router = builder.build()) {
      incarnations.addAll(router.endpoints());
      CountDownLatch routersDone = new CountDownLatch(ROUTING_THREADS);
      List<Future<?>> routers = new ArrayList<>();
      long deadline = System.nanoTime() + ROUTING_BUDGET_NANOS;
      for (int t = 0; t < ROUTING_THREADS; t++) {
        long seed = 1000 + t;
        routers.add(pool.submit(guarded(() -> {
          try {
            route(router, requests, new SplittableRandom(seed), deadline);
          } finally {
            routersDone.countDown();
          }
        })));
      }
      Future<?> churn = pool.submit(guarded(() -> churn(router, new SplittableRandom(7))));
      Future<?> metrics = pool.submit(guarded(() -> publishMetrics(router, new SplittableRandom(8))));

      assertThat(routersDone.await(60, TimeUnit.SECONDS)).as("routing threads finished").isTrue();
      stop.set(true);
      for (Future<?> f : routers) {
        f.get(10, TimeUnit.SECONDS);
      }
      churn.get(10, TimeUnit.SECONDS);
      metrics.get(10, TimeUnit.SECONDS);

      assertThat(errors).isEmpty();
      assertThat(rejected.sum()).as("a non-empty pool routes every request").isZero();
      assertThat(removedPicks).as("endpoints picked after their removal had returned").isEmpty();
      assertThat(routed.sum()).as("routes done").isGreaterThanOrEqualTo(ROUTING_THREADS * 500L);
      assertThat(removals.get()).as("endpoint removals done").isGreaterThanOrEqualTo(50);
      assertThat(dropped.sum()).as("decisions dropped").isPositive();
      assertThat(maxAgeJumps.get()).as("times everything in flight expired at once").isPositive();

      RoutingDecision d;
      while ((d = handoff.poll()) != null) {
        d.onComplete(USAGE);
      }
      // what is still counted now is exactly what the gateway dropped: let it expire
      clock.addAndGet(MAX_AGE.toNanos() + 1);
      router.updateMetrics(Map.of());
      if (epp4j) {
        // the picker sweeps what was never finished when it next records a route: one more,
        // finished, so that its own accounts can be read at zero too
        RoutingDecision last = router.route(InferenceRequest.builder().model("m").prompt("last")
            .maxTokens(1).build());
        last.onComplete(USAGE);
      }
      assertCountersAtZero(router);
      // late callbacks for decisions that expired must not take the counts below zero
      while ((d = finishLate.poll()) != null) {
        d.onFirstToken();
        d.onComplete(USAGE);
        d.onFailure(new IllegalStateException("late"));
      }
      assertCountersAtZero(router);
      if (epp4j) {
        assertPickerAccountsAtZero(router, requests);
      }
    } finally {
      pool.shutdownNow();
      assertThat(pool.awaitTermination(10, TimeUnit.SECONDS)).isTrue();
    }
  }

  private void assertCountersAtZero(Router router) {
    List<Candidate> all = new ArrayList<>(incarnations);
    all.addAll(router.endpoints());
    assertThat(all).hasSizeGreaterThan(STABLE.size() + 50);
    assertThat(all).allSatisfy(c -> {
      assertThat(c.inFlightRequests()).as("in-flight requests on %s", c.id()).isZero();
      assertThat(c.inFlightTokens()).as("in-flight tokens on %s", c.id()).isZero();
    });
  }

  /**
   * token-cost-picker's own accounts: nothing pending or decoding anywhere, and each endpoint's
   * session count equal to the sessions whose home it is.
   */
  private static void assertPickerAccountsAtZero(Router router, InferenceRequest[] requests) {
    TokenCostPicker picker = (TokenCostPicker) router.config().profiles().values().iterator()
        .next().picker();
    assertThat(picker.pendingRequests()).as("requests pending in the picker").isZero();
    Map<String, Integer> homes = new HashMap<>();
    Set<String> sessions = new LinkedHashSet<>();
    for (InferenceRequest r : requests) {
      if (r.sessionKey() != null) {
        sessions.add(r.sessionKey());
      }
    }
    for (String s : sessions) {
      String home = picker.homeOf(s);
      if (home != null) {
        homes.merge(home, 1, Integer::sum);
      }
    }
    assertThat(router.endpoints()).allSatisfy(c -> {
      assertThat(picker.pendingTokens(c.id())).as("pending prefill on %s", c.id()).isZero();
      assertThat(picker.decodeTokens(c.id())).as("decode tokens on %s", c.id()).isZero();
      assertThat(picker.sessions(c.id())).as("sessions counted on %s", c.id())
          .isEqualTo(homes.getOrDefault(c.id(), 0));
    });
  }

  private Runnable guarded(Runnable r) {
    return () -> {
      try {
        r.run();
      } catch (Throwable t) {
        errors.add(t);
        stop.set(true);
      }
    };
  }

  /** Routes and finishes decisions the ways a gateway does, and some ways it should not. */
  private void route(Router router, InferenceRequest[] requests, SplittableRandom rnd, long deadline) {
    RoutingDecision[] pending = new RoutingDecision[32]; // finished a few dozen routes later
    for (int i = 0; i < MAX_ROUTES_PER_THREAD && !stop.get(); i++) {
      if ((i & 63) == 0 && System.nanoTime() - deadline > 0) {
        break;
      }
      long startedAt = epoch.get();
      RoutingDecision d = router.route(requests[rnd.nextInt(requests.length)]);
      if (!d.isRouted()) {
        rejected.increment();
        continue;
      }
      routed.increment();
      for (Endpoint e : d.endpoints()) {
        Long gone = removedAt.get(e.id());
        if (gone != null && gone <= startedAt) {
          removedPicks.add(e.id() + " removed at epoch " + gone + ", route started at " + startedAt);
        }
      }
      int fate = rnd.nextInt(100);
      if (fate < 2) {
        dropped.increment(); // never finished: only the age limit releases it
        if (fate == 0 && finishLate.size() < 2000) {
          finishLate.add(d); // ...and then the gateway remembers it after all
        }
      } else if (fate < 5) {
        handOff(d, rnd); // finished twice, on two threads at once
        d.onFailure(new IllegalStateException("upstream reset"));
      } else {
        int slot = i & (pending.length - 1);
        if (pending[slot] != null) {
          handOff(pending[slot], rnd);
        }
        pending[slot] = d;
      }
      RoutingDecision other = handoff.poll();
      if (other != null) {
        finish(other, rnd);
      }
    }
    for (RoutingDecision p : pending) {
      if (p != null) {
        finish(p, rnd);
      }
    }
  }

  private void handOff(RoutingDecision d, SplittableRandom rnd) {
    if (!handoff.offer(d)) {
      finish(d, rnd);
    }
  }

  private static void finish(RoutingDecision d, SplittableRandom rnd) {
    if (rnd.nextBoolean()) {
      d.onFirstToken();
    }
    if (rnd.nextInt(10) == 0) {
      d.onFailure(new IllegalStateException("upstream 500"));
    } else {
      d.onComplete(USAGE);
    }
  }

  /** The only thread that changes membership, so it knows the pool exactly. */
  private void churn(Router router, SplittableRandom rnd) {
    List<String> reusable = new ArrayList<>();
    for (int i = 1; i <= 8; i++) {
      reusable.add("10.9.0." + i + ":8000");
    }
    Set<String> present = new LinkedHashSet<>();
    int nextNew = 0;
    while (!stop.get()) {
      int op = rnd.nextInt(100);
      if (op < 40 && present.size() < 24) {
        String id = neverReused(nextNew++);
        router.addEndpoint(Endpoint.parse(id));
        present.add(id);
        capture(router, Set.of(id));
      } else if (op < 70 && !present.isEmpty()) {
        String id = pickOne(present, rnd);
        router.removeEndpoint(id);
        present.remove(id);
        markRemoved(List.of(id));
      } else if (op < 85) {
        String id = reusable.get(rnd.nextInt(reusable.size()));
        if (!present.contains(id)) {
          removedAt.remove(id); // before it is back in the pool
          router.addEndpoint(Endpoint.parse(id));
          present.add(id);
          capture(router, Set.of(id));
        }
      } else {
        // replace the pool: keep some, drop the rest, bring one new id, relabel the stable ones
        List<Endpoint> next = new ArrayList<>();
        String generation = Integer.toString(rnd.nextInt(3));
        for (Endpoint e : STABLE) {
          next.add(Endpoint.parse(e.id(), Map.of("generation", generation)));
        }
        Set<String> keep = new LinkedHashSet<>();
        for (String id : present) {
          if (rnd.nextBoolean()) {
            keep.add(id);
          }
        }
        String fresh = neverReused(nextNew++);
        keep.forEach(id -> next.add(Endpoint.parse(id)));
        next.add(Endpoint.parse(fresh));
        List<String> gone = new ArrayList<>(present);
        gone.removeAll(keep);
        router.setEndpoints(next);
        present.clear();
        present.addAll(keep);
        present.add(fresh);
        markRemoved(gone);
        capture(router, Set.of(fresh));
      }
      LockSupport.parkNanos(20_000); // pacing only: leave the cores to the routing threads
    }
  }

  private static String neverReused(int n) {
    return "10.1." + (n / 250) + "." + (n % 250 + 1) + ":8000";
  }

  private static String pickOne(Set<String> ids, SplittableRandom rnd) {
    int k = rnd.nextInt(ids.size());
    for (String id : ids) {
      if (k-- == 0) {
        return id;
      }
    }
    throw new AssertionError("unreachable");
  }

  private void markRemoved(List<String> ids) {
    for (String id : ids) {
      removedAt.put(id, epoch.incrementAndGet());
      removals.incrementAndGet();
    }
  }

  private void capture(Router router, Set<String> ids) {
    for (Candidate c : router.endpoints()) {
      if (ids.contains(c.id())) {
        incarnations.add(c);
      }
    }
  }

  /**
   * Publishes metrics for a random part of the pool, racing the churn (updates for ids that just
   * left are ignored); endpoints whose port ends in an odd digit never get any and stay stale.
   * Every 500 updates the clock jumps past the age limit, so expiry races the gateway's own
   * onComplete and onFailure calls on the routing threads.
   */
  private void publishMetrics(Router router, SplittableRandom rnd) {
    int n = 0;
    while (!stop.get()) {
      clock.addAndGet(TimeUnit.MILLISECONDS.toNanos(1));
      if (++n % 500 == 0) {
        clock.addAndGet(MAX_AGE.toNanos());
        maxAgeJumps.incrementAndGet();
      }
      Map<String, EndpointMetrics> batch = new HashMap<>();
      for (Candidate c : router.endpoints()) {
        int lastDigit = c.id().charAt(c.id().indexOf(':') - 1) - '0';
        if (lastDigit % 2 == 0 && rnd.nextBoolean()) {
          batch.put(c.id(), EndpointMetrics.builder().waitingRequests(rnd.nextInt(20))
              .runningRequests(rnd.nextInt(64)).kvCacheUsage(rnd.nextDouble()).build());
        }
      }
      router.updateMetrics(batch);
      router.updateMetrics(neverReused(rnd.nextInt(500)), EndpointMetrics.builder()
          .waitingRequests(1).kvCacheUsage(0.5).build());
      LockSupport.parkNanos(50_000); // pacing only
    }
  }

  /** Prompts sharing a few long prefixes, so the prefix index both hits and misses. */
  private static InferenceRequest[] requests(boolean withSessions) {
    SplittableRandom rnd = new SplittableRandom(42);
    String[] prefixes = new String[8];
    for (int p = 0; p < prefixes.length; p++) {
      StringBuilder sb = new StringBuilder();
      while (sb.length() < 2000) {
        sb.append("system prompt ").append(p).append(" rule ").append(sb.length()).append(". ");
      }
      prefixes[p] = sb.toString();
    }
    InferenceRequest[] out = new InferenceRequest[256];
    for (int i = 0; i < out.length; i++) {
      String prompt = prefixes[rnd.nextInt(prefixes.length)] + " question " + i;
      InferenceRequest.Builder b = InferenceRequest.builder().model("m").prompt(prompt)
          .maxTokens(64);
      if (withSessions && i % 4 != 0) {
        b.sessionKey("dialog-" + (i % 40)); // some requests carry none
      }
      out[i] = b.build();
    }
    return out;
  }
}
