package io.epp4j.core;

import static io.epp4j.core.TestPlugins.ep;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.ProfileRunner;
import io.epp4j.api.RedactedException;
import io.epp4j.api.Rejection;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;

class SchedulingTest {
  static final InferenceRequest REQ = InferenceRequest.completion("m", "hello");

  static Scorer constant(Map<String, Double> byId) {
    return (req, st, cands, scores) -> {
      for (int i = 0; i < cands.size(); i++) {
        scores[i] = byId.getOrDefault(cands.get(i).id(), 0.0);
      }
    };
  }

  static Router router(List<Endpoint> eps, SchedulingProfile profile) {
    return Router.builder().registry(TestPlugins.registry()).endpoints(eps).profile(profile)
        .randomSeed(7).build();
  }

  @Test
  void weightedSumPicksHighestTotal() {
    List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()));
    // a: 3*1.0 + 2*0 = 3 ; b: 3*0.5 + 2*1.0 = 3.5  -> b
    SchedulingProfile p = SchedulingProfile.builder("default")
        .scorer("s1", constant(Map.of("10.0.0.1:80", 1.0, "10.0.0.2:80", 0.5)), 3)
        .scorer("s2", constant(Map.of("10.0.0.1:80", 0.0, "10.0.0.2:80", 1.0)), 2)
        .build();
    assertThat(router(eps, p).route(REQ).primary().id()).isEqualTo("10.0.0.2:80");
  }

  @Test
  void everyPickSeesThisCyclesTotalsEvenAcrossRoutesAndANestedRouteOnTheSameThread() {
    List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()));
    List<String> problems = new CopyOnWriteArrayList<>();
    Router[] self = new Router[1];
    int[] depth = new int[1];
    io.epp4j.api.Picker picker = new io.epp4j.api.Picker() {
      @Override
      public List<Candidate> pick(InferenceRequest request, CycleState state,
          List<Candidate> candidates, double[] scores) {
        if (scores.length != candidates.size()) {
          problems.add("scores of length " + scores.length + " for " + candidates.size());
        }
        double[] seen = scores.clone();
        if (seen[0] != 2.0 || seen[1] != 1.0) {
          problems.add("totals " + java.util.Arrays.toString(seen) + " instead of [2.0, 1.0]");
        }
        if (depth[0]++ == 0) {
          self[0].route(REQ).onComplete(io.epp4j.api.Usage.NONE); // same thread, inside a pick
        }
        depth[0]--;
        if (!java.util.Arrays.equals(seen, scores)) {
          problems.add("totals changed under the picker: " + java.util.Arrays.toString(scores));
        }
        return List.of(candidates.get(0));
      }
    };
    SchedulingProfile p = SchedulingProfile.builder("default")
        .scorer("s1", constant(Map.of("10.0.0.1:80", 1.0, "10.0.0.2:80", 0.5)), 2)
        .picker(picker)
        .build();
    self[0] = router(eps, p);
    for (int i = 0; i < 3; i++) {
      assertThat(self[0].route(REQ).primary().id()).isEqualTo("10.0.0.1:80");
    }
    assertThat(problems).isEmpty();
  }

  @Test
  void weightsAreNotNormalisedAndChangeTheWinner() {
    List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()));
    // a: 5*1.0 + 2*0 = 5 ; b: 5*0.5 + 2*1.0 = 4.5 -> a
    SchedulingProfile p = SchedulingProfile.builder("default")
        .scorer("s1", constant(Map.of("10.0.0.1:80", 1.0, "10.0.0.2:80", 0.5)), 5)
        .scorer("s2", constant(Map.of("10.0.0.1:80", 0.0, "10.0.0.2:80", 1.0)), 2)
        .build();
    assertThat(router(eps, p).route(REQ).primary().id()).isEqualTo("10.0.0.1:80");
  }

  @Test
  void scoresAreClampedAndNanCountsAsZero() {
    List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()),
        ep("10.0.0.3:80", Map.of()));
    // a scores 50 (clamped to 1), b scores 0.9, c scores NaN; a second scorer gives c 0.95 and
    // b -7 (clamped to 0). Totals: a=1, b=0.9, c=0.95 -> a wins only because of clamping.
    SchedulingProfile p = SchedulingProfile.builder("default")
        .scorer("s1", constant(Map.of("10.0.0.1:80", 50.0, "10.0.0.2:80", 0.9, "10.0.0.3:80", Double.NaN)), 1)
        .scorer("s2", constant(Map.of("10.0.0.2:80", -7.0, "10.0.0.3:80", 0.95)), 1)
        .build();
    assertThat(router(eps, p).route(REQ).primary().id()).isEqualTo("10.0.0.1:80");
  }

  @Test
  void totalsAreTheClampedWeightedSumsForAnyScores() {
    double[] odd = {Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY, -0.0, 0.0,
        -3.5, 1.0, 1.0000001, 7.0, Double.MIN_VALUE, Math.nextDown(1.0)};
    java.util.SplittableRandom rnd = new java.util.SplittableRandom(11);
    for (int round = 0; round < 300; round++) {
      int n = 1 + rnd.nextInt(23); // past the four-wide sums and not a multiple of four
      int k = 1 + rnd.nextInt(4);
      List<Endpoint> eps = new java.util.ArrayList<>();
      for (int i = 0; i < n; i++) {
        eps.add(ep("10.0.0." + (i + 1) + ":80", Map.of()));
      }
      double[][] given = new double[k][n];
      double[] weights = new double[k];
      SchedulingProfile.Builder b = SchedulingProfile.builder("default");
      for (int s = 0; s < k; s++) {
        weights[s] = rnd.nextInt(3) == 0 ? rnd.nextInt(4) : rnd.nextDouble() * 10;
        for (int i = 0; i < n; i++) {
          // NaN in a third of the rounds only, so most rounds take the fast sums alone
          double v = rnd.nextInt(3) == 0 ? odd[rnd.nextInt(odd.length)] : rnd.nextDouble();
          given[s][i] = round % 3 != 0 && Double.isNaN(v) ? 0.5 : v;
        }
        double[] mine = given[s];
        b.scorer("s" + s, (req, st, cands, scores) -> {
          for (int i = 0; i < cands.size(); i++) {
            scores[i] = mine[Integer.parseInt(cands.get(i).id().split("[.:]")[3]) - 1];
          }
        }, weights[s]);
      }
      double[][] seen = new double[1][];
      List<String> order = new java.util.ArrayList<>();
      b.picker((req, st, cands, totals) -> {
        seen[0] = java.util.Arrays.copyOf(totals, cands.size());
        cands.forEach(c -> order.add(c.id()));
        return List.of(cands.get(0));
      });
      assertThat(router(eps, b.build()).route(REQ).isRouted()).isTrue();
      assertThat(order).hasSize(n);
      for (int i = 0; i < n; i++) {
        int e = Integer.parseInt(order.get(i).split("[.:]")[3]) - 1;
        double expected = 0;
        for (int s = 0; s < k; s++) {
          double v = given[s][e];
          double clamped = Double.isNaN(v) ? 0 : Math.min(Math.max(v, 0.0), 1.0);
          expected += weights[s] * clamped;
        }
        assertThat(Double.doubleToLongBits(seen[0][i])).as("round %d, candidate %d", round, i)
            .isEqualTo(Double.doubleToLongBits(expected));
      }
    }
  }

  @Test
  void filtersRunInOrderAndExhaustionRejectsWith503() {
    List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of("zone", "a", "gpu", "h100")),
        ep("10.0.0.2:80", Map.of("zone", "b", "gpu", "h100")));
    SchedulingProfile narrowing = SchedulingProfile.builder("default")
        .filter(new TestPlugins.LabelFilter("gpu", "h100"))
        .filter(new TestPlugins.LabelFilter("zone", "b"))
        .build();
    assertThat(router(eps, narrowing).route(REQ).primary().id()).isEqualTo("10.0.0.2:80");

    int[] laterFilterCalls = {0};
    SchedulingProfile exhausting = SchedulingProfile.builder("default")
        .filter(new TestPlugins.LabelFilter("zone", "c"))
        .filter((req, st, c) -> {
          laterFilterCalls[0]++;
          return c;
        })
        .build();
    RoutingDecision d = router(eps, exhausting).route(REQ);
    assertThat(d.isRouted()).isFalse();
    assertThat(d.rejection().reason()).isEqualTo(Rejection.Reason.NO_ENDPOINTS);
    assertThat(d.rejection().httpStatus()).isEqualTo(503);
    assertThat(laterFilterCalls[0]).as("filters stop once no candidate remains").isZero();
  }

  @Test
  void tiesAreBrokenAtRandomButReproduciblyWithASeed() {
    List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()),
        ep("10.0.0.3:80", Map.of()));
    SchedulingProfile p = SchedulingProfile.builder("default").build(); // no scorers: all tie
    Router r1 = router(eps, p);
    Router r2 = router(eps, p);
    Set<String> seen = new HashSet<>();
    for (int i = 0; i < 200; i++) {
      String a = r1.route(REQ).primary().id();
      String b = r2.route(REQ).primary().id();
      assertThat(a).isEqualTo(b);
      seen.add(a);
    }
    assertThat(seen).hasSize(3);
  }

  @Test
  void pickerReturnsFallbacksInScoreOrder() {
    List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of("s", "0.2")), ep("10.0.0.2:80", Map.of("s", "0.9")),
        ep("10.0.0.3:80", Map.of("s", "0.5")));
    SchedulingProfile p = SchedulingProfile.builder("default")
        .scorer(new TestPlugins.LabelScorer("s"))
        .picker(new MaxScorePicker(3))
        .build();
    RoutingDecision d = router(eps, p).route(REQ);
    assertThat(d.endpoints()).extracting(Endpoint::id)
        .containsExactly("10.0.0.2:80", "10.0.0.3:80", "10.0.0.1:80");
    assertThat(d.destinationHeaderValue()).isEqualTo("10.0.0.2:80,10.0.0.3:80,10.0.0.1:80");
  }

  @Test
  void emptyPoolIs503() {
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build()).build();
    RoutingDecision d = r.route(REQ);
    assertThat(d.rejection().reason()).isEqualTo(Rejection.Reason.NO_ENDPOINTS);
  }

  @Test
  void profileHandlerChoosesPrimaryAmongSeveralProfiles() {
    List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of("role", "prefill")),
        ep("10.0.0.2:80", Map.of("role", "decode")));
    SchedulingProfile prefill = SchedulingProfile.builder("prefill")
        .filter(new TestPlugins.LabelFilter("role", "prefill")).build();
    SchedulingProfile decode = SchedulingProfile.builder("decode")
        .filter(new TestPlugins.LabelFilter("role", "decode")).build();
    ProfileHandler both = new ProfileHandler() {
      @Override
      public String handle(InferenceRequest request, CycleState state, ProfileRunner runner) {
        runner.run("decode");
        runner.run("prefill");
        return "decode";
      }
    };
    Router r = Router.builder().registry(TestPlugins.registry()).endpoints(eps)
        .config(new RouterConfig(List.of(prefill, decode), both, Map.of(), List.of())).build();
    RoutingDecision d = r.route(REQ);
    assertThat(d.primary().id()).isEqualTo("10.0.0.2:80");
    assertThat(d.secondaryEndpoint("prefill").id()).isEqualTo("10.0.0.1:80");
    assertThat(d.secondaryEndpoint("decode")).as("the primary profile is not secondary").isNull();
    assertThat(d.secondaryEndpoint("absent")).isNull();
    assertThat(d.profileResults().keySet()).containsExactly("decode", "prefill");
  }

  @Test
  void aThrowingPluginGivesA503NotAnException() {
    List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of()));
    SchedulingProfile p = SchedulingProfile.builder("default")
        .scorer("boom", (req, st, c, s) -> {
          throw new IllegalStateException("bug");
        }, 1)
        .build();
    RoutingDecision d = router(eps, p).route(REQ);
    assertThat(d.isRouted()).isFalse();
    assertThat(d.rejection().httpStatus()).isEqualTo(503);
  }

  @Test
  void candidatesSeeLatestMetricsAndAge() {
    long[] now = {1_000_000_000L};
    List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of()));
    long[] seenAge = {-1};
    int[] seenWaiting = {-1};
    Scorer probe = (req, st, c, s) -> {
      Candidate x = c.get(0);
      seenAge[0] = x.metricsAgeNanos(st.nowNanos());
      seenWaiting[0] = x.metrics().waitingRequests();
    };
    Router r = Router.builder().registry(TestPlugins.registry()).endpoints(eps)
        .profile(SchedulingProfile.builder("default").scorer(probe).build())
        .ticker(() -> now[0]).build();
    r.route(REQ);
    assertThat(seenAge[0]).isEqualTo(Long.MAX_VALUE);
    r.updateMetrics("10.0.0.1:80", io.epp4j.api.EndpointMetrics.builder().waitingRequests(4).build());
    now[0] += 30_000_000L;
    r.route(REQ);
    assertThat(seenWaiting[0]).isEqualTo(4);
    assertThat(seenAge[0]).isEqualTo(30_000_000L);
  }

  /** A plugin that tries to send requests elsewhere than the decision picked. */
  static final class Hijacker implements io.epp4j.api.RequestListener {
    @Override
    public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision d) {
      d.setRequestHeader("X-Gateway-Destination-Endpoint", "10.9.9.9:80");
      d.setRequestHeader(RoutingDecision.PREFILLER_HEADER, null);
      d.setRequestHeader("x-kept", "yes");
    }
  }

  @Test
  void aPluginsAskForAReservedRequestHeaderIsIgnoredAndLoggedOnceNamingIt() {
    List<LogRecord> records = new CopyOnWriteArrayList<>();
    Handler capture = new Handler() {
      @Override public void publish(LogRecord r) { records.add(r); }
      @Override public void flush() {}
      @Override public void close() {}
    };
    Logger log = Logger.getLogger(Router.class.getName());
    log.addHandler(capture);
    try {
      Router r = Router.builder().registry(TestPlugins.registry())
          .endpoints(List.of(ep("10.0.0.1:80", Map.of())))
          .profile(SchedulingProfile.builder("default").scorer("s", constant(Map.of()), 1).build())
          .listener(new Hijacker()).build();
      for (int i = 0; i < 3; i++) {
        RoutingDecision d = r.route(REQ);
        assertThat(d.primary().id()).isEqualTo("10.0.0.1:80");
        assertThat(d.requestHeaders()).containsExactly(Map.entry("x-kept", "yes"));
        assertThat(d.removedRequestHeaders()).isEmpty();
        assertThat(d.refusedRequestHeaders()).containsExactly(
            RoutingDecision.DESTINATION_HEADER, RoutingDecision.PREFILLER_HEADER);
        d.onComplete(io.epp4j.api.Usage.NONE);
      }
      List<String> about = records.stream().map(LogRecord::getMessage)
          .filter(m -> m.contains("reserved") || m.contains(RoutingDecision.DESTINATION_HEADER))
          .toList();
      assertThat(about).singleElement().satisfies(m -> assertThat(m)
          .contains(Hijacker.class.getName())
          .contains(RoutingDecision.DESTINATION_HEADER + ", " + RoutingDecision.PREFILLER_HEADER)
          .contains("ignored"));
      r.close();
    } finally {
      log.removeHandler(capture);
    }
  }

  @Test
  void aThrowingPluginIsLoggedAtMostOncePerMinuteWithTheCountItSuppressed() {
    List<LogRecord> records = new CopyOnWriteArrayList<>();
    Handler capture = new Handler() {
      @Override public void publish(LogRecord r) { records.add(r); }
      @Override public void flush() {}
      @Override public void close() {}
    };
    Logger log = Logger.getLogger(Router.class.getName());
    log.addHandler(capture);
    try {
      AtomicLong now = new AtomicLong();
      List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()));
      SchedulingProfile p = SchedulingProfile.builder("default")
          .scorer("boom", (req, st, c, s) -> {
            throw new IllegalStateException("scorer bug");
          }, 1)
          .build();
      Router r = Router.builder().registry(TestPlugins.registry()).endpoints(eps).profile(p)
          .ticker(now::get).build();
      for (int i = 0; i < 1000; i++) {
        assertThat(r.route(REQ).rejection().httpStatus()).isEqualTo(503);
        now.addAndGet(TimeUnit.MILLISECONDS.toNanos(50)); // 1000 routes within 50 s
      }
      assertThat(records).as("one record for the first failure, the rest suppressed").hasSize(1);
      assertThat(records.get(0).getMessage()).contains("'boom'");
      assertThat(records.get(0).getThrown()).isInstanceOf(RedactedException.class);
      assertThat(((RedactedException) records.get(0).getThrown()).exceptionClass())
          .isEqualTo(IllegalStateException.class.getName());
      now.addAndGet(TimeUnit.SECONDS.toNanos(11)); // a minute since the first record
      r.route(REQ);
      assertThat(records).hasSize(2);
      assertThat(records.get(1).getMessage()).contains("'boom'").contains("999");
    } finally {
      log.removeHandler(capture);
    }
  }

  @Test
  void aThrowingPluginsMessageQuotingThePromptNeverReachesTheLogOrTheRejection() {
    String secret = "my-bank-password-is-hunter2";
    java.util.logging.SimpleFormatter format = new java.util.logging.SimpleFormatter();
    List<String> logged = new CopyOnWriteArrayList<>();
    Handler capture = new Handler() {
      @Override public void publish(LogRecord r) { logged.add(format.format(r)); }
      @Override public void flush() {}
      @Override public void close() {}
    };
    Logger log = Logger.getLogger("io.epp4j");
    log.addHandler(capture);
    try {
      List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()));
      SchedulingProfile p = SchedulingProfile.builder("default")
          .scorer("nosy", (req, st, c, s) -> {
            throw new IllegalStateException("cannot score '" + req.prompt() + "'",
                new IllegalArgumentException(String.valueOf(req.prompt())));
          }, 1)
          .build();
      Router r = router(eps, p);
      RoutingDecision d = r.route(InferenceRequest.completion("m", "please remember " + secret));
      assertThat(d.rejection().httpStatus()).isEqualTo(503);
      assertThat(d.rejection().message()).contains("IllegalStateException").contains("'nosy'")
          .doesNotContain(secret);
      assertThat(logged).hasSize(1);
      assertThat(logged.get(0)).doesNotContain(secret)
          .contains("'nosy'")
          .contains("java.lang.IllegalStateException")
          .contains("Caused by: java.lang.IllegalArgumentException")
          .contains("SchedulingTest"); // the frame that threw
    } finally {
      log.removeHandler(capture);
    }
  }

  @Test
  void eachThrowingPluginGetsItsOwnLogBudget() {
    List<LogRecord> records = new CopyOnWriteArrayList<>();
    Handler capture = new Handler() {
      @Override public void publish(LogRecord r) { records.add(r); }
      @Override public void flush() {}
      @Override public void close() {}
    };
    Logger log = Logger.getLogger(Router.class.getName());
    log.addHandler(capture);
    try {
      List<Endpoint> eps = List.of(ep("10.0.0.1:80", Map.of("zone", "a")), ep("10.0.0.2:80", Map.of("zone", "b")));
      SchedulingProfile badFilter = SchedulingProfile.builder("default")
          .filter((req, st, c) -> {
            throw new IllegalArgumentException("filter bug");
          })
          .build();
      SchedulingProfile badPicker = SchedulingProfile.builder("default")
          .picker((req, st, c, scores) -> {
            throw new UnsupportedOperationException("picker bug");
          })
          .build();
      Router a = router(eps, badFilter);
      Router b = router(eps, badPicker);
      for (int i = 0; i < 500; i++) {
        assertThat(a.route(REQ).isRouted()).isFalse();
        assertThat(b.route(REQ).isRouted()).isFalse();
      }
      assertThat(records).hasSize(2);
      assertThat(records).extracting(rec -> ((RedactedException) rec.getThrown()).exceptionClass())
          .containsExactlyInAnyOrder(IllegalArgumentException.class.getName(),
              UnsupportedOperationException.class.getName());
      assertThat(a.endpoints()).allSatisfy(c -> assertThat(c.inFlightRequests()).isZero());
      assertThat(b.endpoints()).allSatisfy(c -> assertThat(c.inFlightRequests()).isZero());
    } finally {
      log.removeHandler(capture);
    }
  }
}
