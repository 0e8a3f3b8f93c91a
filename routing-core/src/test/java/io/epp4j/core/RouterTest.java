package io.epp4j.core;

import static io.epp4j.core.TestPlugins.ep;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PoolListener;
import io.epp4j.api.Rejection;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class RouterTest {
  static final InferenceRequest REQ = InferenceRequest.builder().model("m").prompt("hello").maxTokens(10).build();

  static Router.Builder base() {
    return Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build());
  }

  /**
   * The pool holds one endpoint per address: an address given twice to the builder would keep
   * only the last entry's labels (a prefill server taken for a decode one), so it is refused.
   */
  @Test
  void anEndpointListedTwiceIsRefusedNamingIt() {
    Endpoint prefill = Endpoint.parse("10.0.0.1:8000", Map.of("llm-d.ai/role", "prefill"));
    Endpoint decode = Endpoint.parse("10.0.0.1:8000", Map.of("llm-d.ai/role", "decode"));
    assertThatThrownBy(() -> Router.builder().endpoints(List.of(prefill, Endpoint.parse("10.0.0.2:8000")))
        .endpoint(decode).build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("10.0.0.1:8000 is listed twice")
        .hasMessageContaining("prefill").hasMessageContaining("decode");
    assertThatThrownBy(() -> Router.builder().endpoint(Endpoint.parse("10.0.0.3:8000"))
        .endpoint(Endpoint.parse("10.0.0.3:8000")).build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("endpoint 10.0.0.3:8000 is listed twice: the pool holds one endpoint per"
            + " address");
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").picker(new MaxScorePicker(1)).build())
        .endpoint(prefill).endpoint(Endpoint.parse("10.0.0.2:8000")).build()) {
      assertThat(router.endpoints()).hasSize(2);
    }
  }

  @Test
  void inFlightCountersFollowTheLifecycleExactlyOnce() {
    Router r = base().endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    RoutingDecision d1 = r.route(REQ);
    RoutingDecision d2 = r.route(REQ);
    Candidate c = r.endpoints().get(0);
    assertThat(c.inFlightRequests()).isEqualTo(2);
    assertThat(c.inFlightTokens()).isEqualTo(2L * (REQ.estimatedPromptTokens() + 10));
    d1.onFirstToken();
    d1.onComplete(new Usage(2, 0, 10));
    d1.onComplete(new Usage(2, 0, 10));
    d1.onFailure(new RuntimeException());
    assertThat(c.inFlightRequests()).isEqualTo(1);
    d2.onFailure(new RuntimeException("timeout"));
    d2.onComplete(Usage.NONE);
    assertThat(c.inFlightRequests()).isZero();
    assertThat(c.inFlightTokens()).isZero();
  }

  /** Records the lifecycle calls it hears that name endpoints, in order. */
  static final class RecordingListener implements RequestListener {
    final List<String> events = new CopyOnWriteArrayList<>();

    @Override public void onActivity(InferenceRequest q, Endpoint e) { events.add("activity:" + e.id()); }
    @Override public void onFallback(InferenceRequest q, Endpoint from, Endpoint to) { events.add("fallback:" + from.id() + ">" + to.id()); }
    @Override public void onFirstToken(InferenceRequest q, Endpoint e) { events.add("first:" + e.id()); }
    @Override public void onComplete(InferenceRequest q, Endpoint e, Usage u) { events.add("done:" + e.id()); }
    @Override public void onFailure(InferenceRequest q, Endpoint e, Throwable t) { events.add("failed:" + e.id()); }
  }

  /** A router over {@code n} endpoints whose decisions name all of them, heard by {@code l}. */
  private static Router listenedRouter(RequestListener l, int n) {
    List<Endpoint> endpoints = new ArrayList<>();
    for (int i = 1; i <= n; i++) {
      endpoints.add(ep("10.0.0." + i + ":80", Map.of()));
    }
    return Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").picker(new MaxScorePicker(n)).build())
        .listener(l).endpoints(endpoints).build();
  }

  @Test
  void aFallbackMovesTheInFlightCountsAndTheLifecycleCallsToTheEndpointThatServes() {
    List<String> events = new CopyOnWriteArrayList<>();
    RequestListener l = new RequestListener() {
      @Override public void onFallback(InferenceRequest q, Endpoint from, Endpoint to) { events.add("fallback:" + from.id() + ">" + to.id()); }
      @Override public void onFirstToken(InferenceRequest q, Endpoint e) { events.add("first:" + e.id()); }
      @Override public void onComplete(InferenceRequest q, Endpoint e, Usage u) { events.add("done:" + e.id()); }
    };
    Router r = listenedRouter(l, 3);
    RoutingDecision d = r.route(REQ);
    assertThat(d.endpoints()).hasSize(3);
    Endpoint primary = d.primary();
    Endpoint second = d.endpoints().get(1);
    Endpoint third = d.endpoints().get(2);
    assertThat(d.servedBy()).isEqualTo(primary);
    long tokens = REQ.estimatedPromptTokens() + 10;
    assertThat(inFlight(r, primary)).isEqualTo(1);

    d.onFallback(second); // the primary refused the connection
    assertThat(d.servedBy()).isEqualTo(second);
    assertThat(inFlight(r, primary)).isZero();
    assertThat(inFlight(r, second)).isEqualTo(1);
    assertThat(candidate(r, second).inFlightTokens()).isEqualTo(tokens);
    d.onFallback(second); // the endpoint that already serves: nothing moves
    d.onFallback(third); // so did the first fallback
    assertThat(inFlight(r, second)).isZero();
    assertThat(inFlight(r, third)).isEqualTo(1);

    d.onFirstToken();
    d.onFallback(primary); // too late: the request is being served
    d.onComplete(Usage.NONE);
    assertThat(events).containsExactly("fallback:" + primary.id() + ">" + second.id(),
        "fallback:" + second.id() + ">" + third.id(), "first:" + third.id(), "done:" + third.id());
    for (Candidate c : r.endpoints()) {
      assertThat(c.inFlightRequests()).as(c.endpoint().id()).isZero();
      assertThat(c.inFlightTokens()).as(c.endpoint().id()).isZero();
    }
  }

  @Test
  void aFallbackAfterThePrimaryLeftThePoolCountsTheRequestWhereItIsServed() {
    List<Endpoint> all = List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()),
        ep("10.0.0.3:80", Map.of()));
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").picker(new MaxScorePicker(3)).build())
        .endpoints(all).build();
    long tokens = REQ.estimatedPromptTokens() + 10;
    for (boolean comesBack : new boolean[] {false, true}) {
      RoutingDecision d = r.route(REQ);
      Endpoint primary = d.primary();
      Endpoint second = d.endpoints().get(1);
      // the primary's pod is deleted while the gateway connects to it ...
      r.setEndpoints(all.stream().filter(e -> !e.equals(primary)).toList());
      if (comesBack) { // ... and a new pod takes its address before the fallback
        r.setEndpoints(all);
      }
      d.onFallback(second);
      assertThat(inFlight(r, second)).as("served by the fallback, comes back: " + comesBack)
          .isEqualTo(1);
      assertThat(candidate(r, second).inFlightTokens()).isEqualTo(tokens);
      if (comesBack) {
        assertThat(inFlight(r, primary)).as("the new pod at the old address").isZero();
      }
      d.onComplete(Usage.NONE);
      for (Candidate c : r.endpoints()) {
        assertThat(c.inFlightRequests()).as(c.endpoint().id()).isZero();
        assertThat(c.inFlightTokens()).as(c.endpoint().id()).isZero();
      }
      r.setEndpoints(all);
    }
  }

  @Test
  void aFirstTokenAndAnEndReportedDuringAFallbackReachTheListenersAfterIt() throws Exception {
    for (boolean failure : new boolean[] {false, true}) {
      List<String> events = new CopyOnWriteArrayList<>();
      CountDownLatch inFallback = new CountDownLatch(1);
      CountDownLatch letGo = new CountDownLatch(1);
      RequestListener l = new RequestListener() {
        @Override public void onFallback(InferenceRequest q, Endpoint from, Endpoint to) {
          events.add("fallback>" + to.id());
          inFallback.countDown();
          try {
            letGo.await(10, TimeUnit.SECONDS); // a listener that takes its time
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
          events.add("fallback done");
        }
        @Override public void onFirstToken(InferenceRequest q, Endpoint e) { events.add("first:" + e.id()); }
        @Override public void onComplete(InferenceRequest q, Endpoint e, Usage u) { events.add("done:" + e.id()); }
        @Override public void onFailure(InferenceRequest q, Endpoint e, Throwable t) { events.add("failed:" + e.id()); }
      };
      Router r = listenedRouter(l, 2);
      RoutingDecision d = r.route(REQ);
      Endpoint second = d.endpoints().get(1);
      ExecutorService pool = Executors.newSingleThreadExecutor();
      try {
        Future<?> fallback = pool.submit(() -> d.onFallback(second));
        assertThat(inFallback.await(10, TimeUnit.SECONDS)).isTrue();
        // a timeout on another thread ends the request while the fallback is being reported
        d.onFirstToken();
        if (failure) {
          d.onFailure(new RuntimeException("timeout"));
        } else {
          d.onComplete(Usage.NONE);
        }
        d.onComplete(Usage.NONE); // a second end is ignored, as always
        assertThat(events).as("while the fallback is reported").containsExactly(
            "fallback>" + second.id());
        letGo.countDown();
        fallback.get(10, TimeUnit.SECONDS);
      } finally {
        pool.shutdownNow();
      }
      assertThat(events).containsExactly("fallback>" + second.id(), "fallback done",
          "first:" + second.id(), (failure ? "failed:" : "done:") + second.id());
      for (Candidate c : r.endpoints()) {
        assertThat(c.inFlightRequests()).as(c.endpoint().id()).isZero();
      }
    }
  }

  @Test
  void aFallbackMustBeOneOfTheDecisionsEndpointsAndComesToNothingAfterTheEnd() {
    Router r = base().endpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of())))
        .build();
    RoutingDecision d = r.route(REQ);
    Endpoint other = r.endpoints().stream().map(Candidate::endpoint)
        .filter(e -> !e.equals(d.primary())).findFirst().orElseThrow();
    assertThatThrownBy(() -> d.onFallback(other)).isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining(other.id()).hasMessageContaining("not one of the decision's endpoints");
    assertThatThrownBy(() -> RoutingDecision.rejected(Rejection.Reason.SHED, "x").onFallback(other))
        .isInstanceOf(IllegalStateException.class);
    d.onFailure(new RuntimeException("gone"));
    assertThat(inFlight(r, d.primary())).isZero();
  }

  @Test
  void aFallbackRacingTheEndReleasesEveryCountExactlyOnce() throws Exception {
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").picker(new MaxScorePicker(2)).build())
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()))).build();
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try {
      for (int i = 0; i < 2_000; i++) {
        RoutingDecision d = r.route(REQ);
        CountDownLatch go = new CountDownLatch(1);
        Future<?> a = pool.submit(() -> { go.await(); d.onFallback(d.endpoints().get(1)); return null; });
        Future<?> b = pool.submit(() -> { go.await(); d.onComplete(Usage.NONE); return null; });
        go.countDown();
        a.get();
        b.get();
      }
    } finally {
      pool.shutdownNow();
    }
    for (Candidate c : r.endpoints()) {
      assertThat(c.inFlightRequests()).as(c.endpoint().id()).isZero();
      assertThat(c.inFlightTokens()).as(c.endpoint().id()).isZero();
    }
  }

  private static Candidate candidate(Router r, Endpoint e) {
    return r.endpoints().stream().filter(c -> c.endpoint().id().equals(e.id())).findFirst()
        .orElseThrow();
  }

  private static int inFlight(Router r, Endpoint e) {
    return candidate(r, e).inFlightRequests();
  }

  /** A scorer that listens to requests and records what it hears after being closed. */
  static final class ClosableListeningScorer implements io.epp4j.api.Scorer, RequestListener {
    volatile boolean closed;
    final List<String> heardAfterClose = new java.util.concurrent.CopyOnWriteArrayList<>();

    @Override
    public void score(InferenceRequest r, CycleState s, List<Candidate> cs, double[] scores) {}

    @Override
    public void onFirstToken(InferenceRequest q, Endpoint e) {
      if (closed) {
        heardAfterClose.add("first");
      }
    }

    @Override
    public void onComplete(InferenceRequest q, Endpoint e, Usage u) {
      if (closed) {
        heardAfterClose.add("done");
      }
    }

    @Override
    public void onFailure(InferenceRequest q, Endpoint e, Throwable t) {
      if (closed) {
        heardAfterClose.add("fail");
      }
    }

    @Override
    public void close() {
      closed = true;
    }
  }

  @Test
  void decisionsFinishedAfterTheRouterClosedReleaseTheirCountsButReachNoClosedPlugin() {
    ClosableListeningScorer plugin = new ClosableListeningScorer();
    List<String> extra = new java.util.concurrent.CopyOnWriteArrayList<>();
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").scorer("s", plugin, 1).build())
        .listener(new RequestListener() {
          @Override public void onComplete(InferenceRequest q, Endpoint e, Usage u) { extra.add("done"); }
        })
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    RoutingDecision d1 = r.route(REQ);
    RoutingDecision d2 = r.route(REQ);
    Candidate c = r.endpoints().get(0);
    // a gateway shutting down: the router closes while requests drain
    r.close();
    assertThat(plugin.closed).isTrue();
    d1.onFirstToken();
    d1.onComplete(Usage.NONE);
    d2.onFailure(new RuntimeException("shutdown"));
    assertThat(plugin.heardAfterClose).isEmpty();
    assertThat(c.inFlightRequests()).isZero();
    assertThat(extra).containsExactly("done"); // not closed by the router: still told
  }

  @Test
  void listenersSeeEveryStage() {
    List<String> events = new ArrayList<>();
    RequestListener l = new RequestListener() {
      @Override public void afterRouting(InferenceRequest q, CycleState s, RoutingDecision d) { events.add("routed:" + d.primary()); }
      @Override public void onFirstToken(InferenceRequest q, Endpoint e) { events.add("first:" + e); }
      @Override public void onComplete(InferenceRequest q, Endpoint e, Usage u) { events.add("done:" + e + ":" + u.cachedTokens()); }
      @Override public void onFailure(InferenceRequest q, Endpoint e, Throwable t) { events.add("fail:" + e); }
    };
    Router r = base().endpoints(List.of(ep("10.0.0.1:80", Map.of()))).listener(l).build();
    RoutingDecision d = r.route(REQ);
    d.onFirstToken();
    d.onFirstToken();
    d.onComplete(new Usage(100, 64, 3));
    assertThat(events).containsExactly("routed:10.0.0.1:80", "first:10.0.0.1:80", "done:10.0.0.1:80:64");
  }

  @Test
  void poolListenersHearAddsAndRemovals() {
    List<String> events = new ArrayList<>();
    PoolListener l = new PoolListener() {
      @Override public void onEndpointAdded(Endpoint e) { events.add("+" + e); }
      @Override public void onEndpointRemoved(Endpoint e) { events.add("-" + e); }
    };
    Router r = base().endpoints(List.of(ep("10.0.0.1:80", Map.of()))).listener(l).build();
    r.addEndpoint(ep("10.0.0.2:80", Map.of()));
    assertThat(r.addEndpoint(ep("10.0.0.2:80", Map.of()))).isFalse();
    r.removeEndpoint("10.0.0.1:80");
    r.setEndpoints(List.of(ep("10.0.0.3:80", Map.of())));
    assertThat(events).containsExactly("+10.0.0.1:80", "+10.0.0.2:80", "-10.0.0.1:80", "-10.0.0.2:80", "+10.0.0.3:80");
    assertThat(r.endpoints()).extracting(Candidate::id).containsExactly("10.0.0.3:80");
  }

  /** A scorer that also listens to the pool, recording what it hears. */
  static final class PoolRecordingScorer implements io.epp4j.api.Scorer, PoolListener {
    final List<String> events = new CopyOnWriteArrayList<>();

    @Override
    public void score(InferenceRequest request, io.epp4j.api.CycleState state,
        List<Candidate> candidates, double[] scores) {}

    @Override public void onEndpointAdded(Endpoint e) { events.add("+" + e); }
    @Override public void onEndpointRemoved(Endpoint e) { events.add("-" + e); }
    @Override public void onEndpointChanged(Endpoint previous, Endpoint current) {
      events.add("~" + current);
    }
  }

  @Test
  void afterCloseThePoolChangesReachOnlyTheBuildersExtraListeners() {
    // the router closes its own plugins: a discovery timer still running at shutdown must not
    // call into them; an extra listener, which the router does not close, still hears
    PoolRecordingScorer own = new PoolRecordingScorer();
    List<String> extra = new CopyOnWriteArrayList<>();
    PoolListener l = new PoolListener() {
      @Override public void onEndpointAdded(Endpoint e) { extra.add("+" + e); }
      @Override public void onEndpointRemoved(Endpoint e) { extra.add("-" + e); }
    };
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").scorer("own", own, 1).build())
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()))).listener(l).build();
    r.addEndpoint(ep("10.0.0.2:80", Map.of()));
    assertThat(own.events).containsExactly("+10.0.0.1:80", "+10.0.0.2:80");
    r.close();
    own.events.clear();
    extra.clear();

    r.addEndpoint(ep("10.0.0.3:80", Map.of()));
    r.removeEndpoint("10.0.0.1:80");
    r.setEndpoints(List.of(ep("10.0.0.4:80", Map.of()), ep("10.0.0.3:80", Map.of("a", "b"))));

    assertThat(own.events).as("the closed scorer").isEmpty();
    assertThat(extra).containsExactly("+10.0.0.3:80", "-10.0.0.1:80", "-10.0.0.2:80", "+10.0.0.4:80");
  }

  /**
   * A discovery that reports a member's new labels as an addition (an informer's "modified"
   * handled like "added"): the member is updated and announced as changed, keeping the router's
   * state for it; an addition equal to the member changes nothing.
   */
  @Test
  void addingAKnownEndpointWithOtherLabelsUpdatesItAsSetEndpointsDoes() {
    List<String> events = new ArrayList<>();
    PoolListener l = new PoolListener() {
      @Override public void onEndpointAdded(Endpoint e) { events.add("+" + e); }
      @Override public void onEndpointRemoved(Endpoint e) { events.add("-" + e); }
      @Override public void onEndpointChanged(Endpoint previous, Endpoint current) {
        events.add("~" + previous.labels() + "->" + current.labels());
      }
    };
    Endpoint before = ep("10.0.0.1:80", Map.of("epp4j.io/weight", "1"));
    Endpoint after = ep("10.0.0.1:80", Map.of("epp4j.io/weight", "5"));
    Router r = base().endpoints(List.of(before, ep("10.0.0.2:80", Map.of()))).listener(l)
        .build();
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().waitingRequests(3).build());
    RoutingDecision d = r.route(REQ);
    while (!d.primary().id().equals(before.id())) {
      d.onComplete(Usage.NONE);
      d = r.route(REQ);
    }
    events.clear();

    assertThat(r.addEndpoint(after)).as("added").isFalse();
    assertThat(events).containsExactly("~{epp4j.io/weight=1}->{epp4j.io/weight=5}");
    Candidate kept = candidate(r, after);
    assertThat(kept.endpoint().labels()).isEqualTo(after.labels());
    assertThat(kept.inFlightRequests()).as("in-flight count kept").isEqualTo(1);
    assertThat(kept.metrics().waitingRequests()).as("metrics kept").isEqualTo(3);
    assertThat(r.endpoints()).extracting(Candidate::id)
        .containsExactly("10.0.0.1:80", "10.0.0.2:80");

    assertThat(r.addEndpoint(after)).isFalse();
    assertThat(events).hasSize(1);
    d.onComplete(Usage.NONE);
    assertThat(inFlight(r, after)).isZero();
  }

  /**
   * A member kept at its address with new labels (a changed weight) is announced as changed, not
   * as a removal and an addition, which would make listeners drop their per-endpoint state; the
   * router keeps its own (in-flight counts, metrics) and serves the new labels.
   */
  @Test
  void setEndpointsAnnouncesAMemberWhoseLabelsChanged() {
    List<String> events = new ArrayList<>();
    List<Endpoint[]> changes = new ArrayList<>();
    PoolListener l = new PoolListener() {
      @Override public void onEndpointAdded(Endpoint e) { events.add("+" + e); }
      @Override public void onEndpointRemoved(Endpoint e) { events.add("-" + e); }
      @Override public void onEndpointChanged(Endpoint previous, Endpoint current) {
        events.add("~" + current);
        changes.add(new Endpoint[] {previous, current});
      }
    };
    Endpoint before = ep("10.0.0.1:80", Map.of("epp4j.io/weight", "1"));
    Endpoint after = ep("10.0.0.1:80", Map.of("epp4j.io/weight", "5"));
    Router r = base().endpoints(List.of(before)).listener(l).build();
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().waitingRequests(3).build());
    RoutingDecision d = r.route(REQ);
    r.route(REQ);
    assertThat(d.primary().id()).isEqualTo(before.id());
    int inFlight = inFlight(r, before);
    assertThat(inFlight).isEqualTo(2);
    r.addEndpoint(ep("10.0.0.2:80", Map.of()));
    events.clear();

    // one member leaves, one is added, one changes labels: removals, then changes, then additions
    r.setEndpoints(List.of(after, ep("10.0.0.3:80", Map.of())));

    assertThat(events).containsExactly("-10.0.0.2:80", "~10.0.0.1:80", "+10.0.0.3:80");
    assertThat(changes).hasSize(1);
    assertThat(changes.get(0)[0].labels()).isEqualTo(before.labels());
    assertThat(changes.get(0)[1].labels()).isEqualTo(after.labels());
    Candidate kept = candidate(r, after);
    assertThat(kept.endpoint().labels()).as("the router serves the new labels")
        .isEqualTo(after.labels());
    assertThat(kept.inFlightRequests()).as("in-flight count kept").isEqualTo(inFlight);
    assertThat(kept.metrics().waitingRequests()).as("metrics kept").isEqualTo(3);
    d.onComplete(Usage.NONE);
    assertThat(inFlight(r, after)).as("the decision routed before the change releases its count")
        .isEqualTo(inFlight - 1);

    // the same labels again: nothing to announce
    events.clear();
    r.setEndpoints(List.of(after, ep("10.0.0.3:80", Map.of())));
    assertThat(events).isEmpty();
  }

  /** A listener that throws on a change is logged and skipped; the others still hear it. */
  @Test
  void aListenerThatThrowsOnAChangeDoesNotKeepOthersFromHearingIt() {
    List<String> events = new ArrayList<>();
    PoolListener throwing = new PoolListener() {
      @Override public void onEndpointChanged(Endpoint previous, Endpoint current) {
        throw new IllegalStateException("broken listener");
      }
    };
    PoolListener recording = new PoolListener() {
      @Override public void onEndpointChanged(Endpoint previous, Endpoint current) {
        events.add("~" + current + "=" + current.label("zone"));
      }
    };
    Router r = base().endpoints(List.of(ep("10.0.0.1:80", Map.of("zone", "a"))))
        .listener(throwing).listener(recording).build();
    r.setEndpoints(List.of(ep("10.0.0.1:80", Map.of("zone", "b"))));
    assertThat(events).containsExactly("~10.0.0.1:80=b");
    assertThat(r.endpoints().get(0).endpoint().label("zone")).isEqualTo("b");
  }

  @Test
  void setEndpointsKeepsMetricsOfEndpointsThatStay() {
    Router r = base().endpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()))).build();
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().waitingRequests(3).build());
    r.setEndpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.4:80", Map.of())));
    assertThat(r.endpoints().get(0).metrics().waitingRequests()).isEqualTo(3);
    assertThat(r.updateMetrics("10.0.0.2:80", EndpointMetrics.UNKNOWN)).isFalse();
  }

  /**
   * A vLLM server put to sleep answers inference requests with 503 while its queue and KV figures
   * read 0: taken at its word, it was the idlest endpoint, and every load-aware choice sent
   * requests there. It is routed to only when no endpoint is awake, and counts as saturated.
   */
  @Test
  void anEndpointWhoseEngineSleepsGetsRequestsOnlyWhenNoneIsAwake() {
    long[] now = {0};
    Router r = base().ticker(() -> now[0])
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()))).build();
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().asleep(true).build());
    r.updateMetrics("10.0.0.2:80", EndpointMetrics.builder().waitingRequests(2).build());
    for (int i = 0; i < 20; i++) {
      RoutingDecision d = r.route(REQ);
      assertThat(d.endpoints()).extracting(Endpoint::id).containsExactly("10.0.0.2:80");
      d.onComplete(Usage.NONE);
      RoutingDecision sub = r.route(REQ, java.util.Set.of("10.0.0.1:80", "10.0.0.2:80"));
      assertThat(sub.endpoints()).extracting(Endpoint::id).containsExactly("10.0.0.2:80");
      sub.onComplete(Usage.NONE);
    }
    // a subset holding only the sleeping endpoint, or a pool that only sleeps, still routes
    assertThat(r.route(REQ, java.util.Set.of("10.0.0.1:80")).primary().id())
        .isEqualTo("10.0.0.1:80");
    InferenceRequest sheddable = REQ.toBuilder().priority(-1).build();
    assertThat(r.route(sheddable).isRouted()).as("one endpoint of two serves").isTrue();
    r.updateMetrics("10.0.0.2:80", EndpointMetrics.builder().asleep(true).build());
    RoutingDecision d = r.route(REQ);
    assertThat(d.isRouted()).isTrue();
    d.onComplete(Usage.NONE);
    assertThat(r.route(sheddable).rejection().reason())
        .as("a pool that only sleeps is saturated").isEqualTo(Rejection.Reason.SHED);
  }

  /**
   * An engine put to sleep drops its KV cache: listeners hear it once per fall, from either form
   * of the metrics update, and not again while it sleeps or when it wakes up.
   */
  @Test
  void poolListenersHearOnceThatAnEndpointFellAsleepAndDroppedItsCache() {
    List<String> dropped = new java.util.concurrent.CopyOnWriteArrayList<>();
    PoolListener listener = new PoolListener() {
      @Override
      public void onEndpointCacheDropped(Endpoint endpoint) {
        dropped.add(endpoint.id());
      }
    };
    Router r = base().listener(listener)
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()))).build();
    EndpointMetrics awake = EndpointMetrics.builder().waitingRequests(1).build();
    EndpointMetrics asleep = EndpointMetrics.builder().asleep(true).build();
    r.updateMetrics("10.0.0.1:80", awake);
    r.updateMetrics(Map.of("10.0.0.2:80", awake));
    assertThat(dropped).isEmpty();
    r.updateMetrics("10.0.0.1:80", asleep);
    r.updateMetrics("10.0.0.1:80", asleep);
    assertThat(dropped).containsExactly("10.0.0.1:80");
    r.updateMetrics(Map.of("10.0.0.1:80", awake, "10.0.0.2:80", asleep));
    r.updateMetrics(Map.of("10.0.0.2:80", asleep));
    assertThat(dropped).containsExactly("10.0.0.1:80", "10.0.0.2:80");
    r.updateMetrics("10.0.0.1:80", asleep);
    assertThat(dropped).containsExactly("10.0.0.1:80", "10.0.0.2:80", "10.0.0.1:80");
  }

  /** A pool listener that records the endpoints whose cache it hears was dropped. */
  private static PoolListener cacheDrops(List<String> dropped) {
    return new PoolListener() {
      @Override
      public void onEndpointCacheDropped(Endpoint endpoint) {
        dropped.add(endpoint.id());
      }
    };
  }

  /**
   * A server that restarts at the same address (a crash, a rolling update keeping the pod) comes
   * back with an empty KV cache: listeners hear it once per restart when the process start time
   * changes, from either form of the update, and not while it stays the same.
   */
  @Test
  void poolListenersHearOnceThatAnEndpointsServerRestartedByItsStartTime() {
    List<String> dropped = new java.util.concurrent.CopyOnWriteArrayList<>();
    Router r = base().listener(cacheDrops(dropped))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()))).build();
    EndpointMetrics first = EndpointMetrics.builder().processStartTimeSeconds(1.7e9 + 0.25)
        .promptTokensTotal(5000).build();
    EndpointMetrics second = EndpointMetrics.builder().processStartTimeSeconds(1.7e9 + 600.5)
        .promptTokensTotal(9000).build();
    r.updateMetrics("10.0.0.1:80", first);
    r.updateMetrics(Map.of("10.0.0.2:80", first));
    r.updateMetrics("10.0.0.1:80", first);
    assertThat(dropped).as("the same process").isEmpty();
    r.updateMetrics("10.0.0.1:80", second);
    r.updateMetrics("10.0.0.1:80", second);
    assertThat(dropped).containsExactly("10.0.0.1:80");
    r.updateMetrics(Map.of("10.0.0.1:80", second, "10.0.0.2:80", second));
    assertThat(dropped).containsExactly("10.0.0.1:80", "10.0.0.2:80");
    // a start time known on both sides decides: the counter of the same process cannot go back
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder()
        .processStartTimeSeconds(1.7e9 + 600.5).promptTokensTotal(10).build());
    assertThat(dropped).hasSize(2);
    // metrics without a start time in between (a caller's own) do not hide the next change
    r.updateMetrics("10.0.0.2:80", EndpointMetrics.builder().waitingRequests(3).build());
    r.updateMetrics("10.0.0.2:80", first);
    assertThat(dropped).containsExactly("10.0.0.1:80", "10.0.0.2:80", "10.0.0.2:80");
  }

  /**
   * Where the page carries no start time (SGLang and vLLM with several API servers serve it in
   * prometheus_client's multiprocess mode), a prompt-token counter that went back tells the
   * restart, compared with the last value known even across pages without it (SGLang writes it
   * once it has served a request); a counter that only grows is the same server.
   */
  @Test
  void poolListenersHearOnceThatAnEndpointsServerRestartedByItsCounterGoingBack() {
    List<String> dropped = new java.util.concurrent.CopyOnWriteArrayList<>();
    Router r = base().listener(cacheDrops(dropped))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().promptTokensTotal(800).build());
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().promptTokensTotal(800).build());
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().promptTokensTotal(1200).build());
    assertThat(dropped).isEmpty();
    // the restarted server's first pages have no counter yet, then a small one
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.UNKNOWN);
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().waitingRequests(1).build());
    assertThat(dropped).isEmpty();
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().promptTokensTotal(40).build());
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().promptTokensTotal(90).build());
    assertThat(dropped).containsExactly("10.0.0.1:80");
    // a restart that is also a fall asleep is heard once
    r.updateMetrics("10.0.0.1:80",
        EndpointMetrics.builder().promptTokensTotal(0).asleep(true).build());
    assertThat(dropped).containsExactly("10.0.0.1:80", "10.0.0.1:80");
  }

  @Test
  void sheddableRequestsAreRejectedWith429OnlyWhenSaturated() {
    long[] now = {0};
    Router r = base().ticker(() -> now[0])
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()))).build();
    InferenceRequest sheddable = REQ.toBuilder().priority(-1).build();
    // never scraped: stale counts as saturated
    assertThat(r.route(sheddable).rejection().reason()).isEqualTo(Rejection.Reason.SHED);
    assertThat(r.route(sheddable).rejection().httpStatus()).isEqualTo(429);
    assertThat(r.route(REQ).isRouted()).as("non-sheddable requests still go through").isTrue();
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().waitingRequests(1).kvCacheUsage(0.2).build());
    r.updateMetrics("10.0.0.2:80", EndpointMetrics.builder().waitingRequests(2).kvCacheUsage(0.4).build());
    assertThat(r.route(sheddable).isRouted()).isTrue();
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().waitingRequests(9).kvCacheUsage(0.9).build());
    r.updateMetrics("10.0.0.2:80", EndpointMetrics.builder().waitingRequests(5).kvCacheUsage(0.5).build());
    assertThat(r.route(sheddable).rejection().reason()).isEqualTo(Rejection.Reason.SHED);
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().waitingRequests(0).build());
    r.updateMetrics("10.0.0.2:80", EndpointMetrics.builder().waitingRequests(0).build());
    now[0] += 300_000_000L; // metrics now 300 ms old
    assertThat(r.route(sheddable).rejection().reason()).isEqualTo(Rejection.Reason.SHED);
  }

  @Test
  void metricsStampedInTheFutureAreTakenAsReceivedNowAndStillGoStale() {
    // a scrape time after the router's clock (a caller's clock bug) gave an age of 0 until the
    // clock caught up: a dead endpoint's last figures counted as fresh for as long as the error
    long[] now = {1_000_000_000L};
    Router r = base().ticker(() -> now[0])
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()))).build();
    List<String> warnings = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.logging.Logger log = java.util.logging.Logger.getLogger(Router.class.getName());
    java.util.logging.Handler handler = new java.util.logging.Handler() {
      @Override
      public void publish(java.util.logging.LogRecord rec) {
        if (rec.getMessage().contains("scrapedAtNanos")) {
          warnings.add(rec.getMessage());
        }
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    log.addHandler(handler);
    long hourAhead = now[0] + Duration.ofHours(1).toNanos();
    r.updateMetrics("10.0.0.1:80",
        EndpointMetrics.builder().waitingRequests(0).scrapedAtNanos(hourAhead).build());
    r.updateMetrics(Map.of("10.0.0.2:80",
        EndpointMetrics.builder().waitingRequests(0).scrapedAtNanos(hourAhead).build()));
    log.removeHandler(handler);
    long received = now[0];
    // the caller's bug is told, once for both (at most once a minute), naming the field
    assertThat(warnings).hasSize(1);
    assertThat(warnings.get(0)).contains("10.0.0.1:80");
    assertThat(r.endpoints()).allSatisfy(c -> {
      assertThat(c.metrics().waitingRequests()).isZero();
      assertThat(c.metricsScrapedAtNanos()).isEqualTo(received);
    });
    InferenceRequest sheddable = REQ.toBuilder().priority(-1).build();
    assertThat(r.route(sheddable).isRouted()).as("fresh when received").isTrue();
    now[0] += 300_000_000L; // past the default 200 ms staleness, far from the hour ahead
    assertThat(r.route(sheddable).rejection().reason()).isEqualTo(Rejection.Reason.SHED);
    // a time in the past is kept as given: the metrics are as old as the caller says
    long earlier = now[0] - 50_000_000L;
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().scrapedAtNanos(earlier).build());
    assertThat(r.endpoints().get(0).metricsScrapedAtNanos()).isEqualTo(earlier);
  }

  @Test
  void badBodyIs400AndGoodBodyRoutes() {
    Router r = base().endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    RoutingDecision bad = r.route("/v1/completions", Map.of(), "{".getBytes(StandardCharsets.UTF_8));
    assertThat(bad.rejection().reason()).isEqualTo(Rejection.Reason.INVALID_REQUEST);
    assertThat(bad.rejection().httpStatus()).isEqualTo(400);
    RoutingDecision ok = r.route("/v1/completions", Map.of(),
        "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8));
    assertThat(ok.primary().id()).isEqualTo("10.0.0.1:80");
  }

  @Test
  void telemetryRecordsDurationsOutcomesAndPoolGauges() {
    InMemoryMetricReader reader = InMemoryMetricReader.create();
    OpenTelemetrySdk sdk = OpenTelemetrySdk.builder()
        .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(reader).build()).build();
    Router r = base().openTelemetry(sdk).endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    r.route(REQ);
    r.route(REQ);
    r.route("/v1/completions", Map.of(), "nope".getBytes(StandardCharsets.UTF_8));
    Collection<MetricData> metrics = reader.collectAllMetrics();
    MetricData decisions = metrics.stream().filter(m -> m.getName().equals("epp4j.routing.decisions")).findFirst().orElseThrow();
    assertThat(decisions.getLongSumData().getPoints()).anySatisfy(p -> {
      assertThat(p.getAttributes().get(RouterTelemetry.OUTCOME)).isEqualTo("routed");
      assertThat(p.getValue()).isEqualTo(2);
    });
    assertThat(decisions.getLongSumData().getPoints()).anySatisfy(p -> {
      assertThat(p.getAttributes().get(RouterTelemetry.OUTCOME)).isEqualTo("invalid_request");
      assertThat(p.getValue()).isEqualTo(1);
    });
    MetricData duration = metrics.stream().filter(m -> m.getName().equals("epp4j.routing.duration")).findFirst().orElseThrow();
    assertThat(duration.getUnit()).isEqualTo("s");
    assertThat(duration.getHistogramData().getPoints()).singleElement().satisfies(p -> assertThat(p.getCount()).isEqualTo(2));
    MetricData inflight = metrics.stream().filter(m -> m.getName().equals("epp4j.pool.in_flight_requests")).findFirst().orElseThrow();
    assertThat(inflight.getLongGaugeData().getPoints()).singleElement().satisfies(p -> assertThat(p.getValue()).isEqualTo(2));
    MetricData size = metrics.stream().filter(m -> m.getName().equals("epp4j.pool.endpoints")).findFirst().orElseThrow();
    assertThat(size.getLongGaugeData().getPoints()).singleElement().satisfies(p -> assertThat(p.getValue()).isEqualTo(1));
  }

  @Test
  void concurrentRoutingWhileEndpointsComeAndGo() throws Exception {
    List<Endpoint> stable = List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()));
    Router r = base().endpoints(stable).build();
    int threads = 4;
    ExecutorService pool = Executors.newFixedThreadPool(threads + 1);
    AtomicBoolean stop = new AtomicBoolean();
    ConcurrentLinkedQueue<String> violations = new ConcurrentLinkedQueue<>();
    // removedNow[k] becomes true once removeEndpoint(k) has returned; ids are never reused
    java.util.concurrent.ConcurrentHashMap<String, Boolean> removedNow = new java.util.concurrent.ConcurrentHashMap<>();
    AtomicInteger routed = new AtomicInteger();
    CountDownLatch started = new CountDownLatch(threads);
    List<Future<?>> fs = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      fs.add(pool.submit(() -> {
        started.countDown();
        while (!stop.get()) {
          // snapshot which endpoints were definitely removed before this call started
          java.util.Set<String> goneBefore = new java.util.HashSet<>();
          removedNow.forEach((k, v) -> { if (v) goneBefore.add(k); });
          RoutingDecision d = r.route(REQ);
          if (d.isRouted()) {
            routed.incrementAndGet();
            String id = d.primary().id();
            if (goneBefore.contains(id)) {
              violations.add(id);
            }
            d.onComplete(Usage.NONE);
          }
        }
      }));
    }
    assertThat(started.await(10, TimeUnit.SECONDS)).as("routing threads started").isTrue();
    for (int i = 0; i < 2000; i++) {
      String id = "10.1." + (i / 200) + "." + (i % 200) + ":80"; // never re-added
      r.addEndpoint(ep(id, Map.of()));
      removedNow.put(id, false);
      r.removeEndpoint(id);
      removedNow.put(id, true);
    }
    stop.set(true);
    for (Future<?> f : fs) {
      f.get(30, TimeUnit.SECONDS); // rethrows any exception from a routing thread
    }
    pool.shutdownNow();
    assertThat(violations).isEmpty();
    assertThat(routed.get()).isPositive();
    assertThat(r.endpoints()).extracting(Candidate::id).containsExactlyInAnyOrder("10.0.0.1:80", "10.0.0.2:80");
    for (Candidate c : r.endpoints()) {
      assertThat(c.inFlightRequests()).isZero();
    }
  }

  @Test
  void decisionsTheGatewayNeverFinishesAreReleasedAfterTheDefaultAgeLimit() {
    AtomicLong now = new AtomicLong(1_000_000_000L);
    Router r = base().ticker(now::get).endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    for (int i = 0; i < 100; i++) {
      r.route(REQ); // dropped: never completed, never failed
    }
    Candidate c = r.endpoints().get(0);
    assertThat(c.inFlightRequests()).isEqualTo(100);
    now.addAndGet(TimeUnit.MINUTES.toNanos(9));
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.UNKNOWN);
    assertThat(c.inFlightRequests()).as("younger than the 10 minute default: still counted").isEqualTo(100);
    now.addAndGet(TimeUnit.MINUTES.toNanos(2));
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.UNKNOWN);
    assertThat(c.inFlightRequests()).isZero();
    assertThat(c.inFlightTokens()).isZero();
  }

  @Test
  void expiredDecisionsAreReleasedOnceCountedInAMetricAndNotAgainWhenFinishedLate() {
    InMemoryMetricReader reader = InMemoryMetricReader.create();
    OpenTelemetrySdk sdk = OpenTelemetrySdk.builder()
        .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(reader).build()).build();
    AtomicLong now = new AtomicLong();
    Router r = base().ticker(now::get).openTelemetry(sdk).inFlightMaxAge(Duration.ofSeconds(30))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    Candidate c = r.endpoints().get(0);
    long perRequest = REQ.estimatedPromptTokens() + 10;
    RoutingDecision finished = r.route(REQ);
    RoutingDecision late = r.route(REQ);
    RoutingDecision failedLate = r.route(REQ);
    finished.onComplete(Usage.NONE);
    now.addAndGet(TimeUnit.SECONDS.toNanos(20));
    RoutingDecision young = r.route(REQ);
    now.addAndGet(TimeUnit.SECONDS.toNanos(15)); // the first three are 35 s old, young is 15 s
    r.route(REQ).onComplete(Usage.NONE); // routing sweeps too
    assertThat(c.inFlightRequests()).as("only the young decision is still counted").isEqualTo(1);
    assertThat(c.inFlightTokens()).isEqualTo(perRequest);
    late.onComplete(new Usage(2, 0, 10));
    failedLate.onFailure(new RuntimeException("gateway timeout"));
    assertThat(c.inFlightRequests()).as("finishing an expired decision must not count it twice").isEqualTo(1);
    young.onComplete(Usage.NONE);
    assertThat(c.inFlightRequests()).isZero();
    assertThat(c.inFlightTokens()).isZero();
    MetricData expired = reader.collectAllMetrics().stream()
        .filter(m -> m.getName().equals("epp4j.routing.in_flight_expired")).findFirst().orElseThrow();
    assertThat(expired.getLongSumData().getPoints()).singleElement()
        .satisfies(p -> assertThat(p.getValue()).isEqualTo(2));
  }

  /**
   * A request that legitimately lasts long (a websocket session) and whose gateway says so keeps
   * counting as in flight past inFlightMaxAge; once the gateway stops saying so it expires.
   */
  @Test
  void aDecisionRenewedByItsGatewayOutlivesTheMaximumAgeUntilItIsNoLongerRenewed() {
    AtomicLong now = new AtomicLong();
    Router r = base().ticker(now::get).inFlightMaxAge(Duration.ofSeconds(30))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    assertThat(r.inFlightMaxAge()).isEqualTo(Duration.ofSeconds(30));
    Candidate c = r.endpoints().get(0);
    RoutingDecision session = r.route(REQ);
    for (int i = 0; i < 4; i++) { // 80 s in all, renewed every 20 s
      now.addAndGet(TimeUnit.SECONDS.toNanos(20));
      session.onActivity();
      r.route(REQ).onComplete(Usage.NONE); // routing sweeps
    }
    assertThat(c.inFlightRequests()).as("renewed within the maximum age").isEqualTo(1);
    now.addAndGet(TimeUnit.SECONDS.toNanos(35));
    r.route(REQ).onComplete(Usage.NONE);
    assertThat(c.inFlightRequests()).as("not renewed for longer than the maximum age").isZero();
    session.onActivity(); // too late: it stays released
    session.onComplete(Usage.NONE);
    assertThat(c.inFlightRequests()).isZero();
  }

  /** Request listeners hear a renewal, naming the endpoint that serves, until the end. */
  @Test
  void requestListenersHearTheGatewaysRenewalsOfADecision() {
    RecordingListener l = new RecordingListener();
    RoutingDecision d = listenedRouter(l, 2).route(REQ);
    Endpoint second = d.endpoints().get(1);
    d.onActivity();
    d.onFallback(second);
    d.onActivity();
    d.onComplete(Usage.NONE);
    d.onActivity(); // after the end: not heard
    RoutingDecision.rejected(Rejection.Reason.SHED, "x").onActivity();
    assertThat(l.events).containsExactly("activity:" + d.primary().id(),
        "fallback:" + d.primary().id() + ">" + second.id(), "activity:" + second.id(),
        "done:" + second.id());
  }

  @Test
  void durationsTooLongForNanosecondsMeanNeverInsteadOfFailingTheRouter() {
    // ChronoUnit.FOREVER or anything past ~292 years passed the builder's checks, then build()
    // threw ArithmeticException, and a reload threw it after the new configuration was in place
    Duration forever = java.time.temporal.ChronoUnit.FOREVER.getDuration();
    long[] now = {0};
    Router r = base().ticker(() -> now[0]).inFlightMaxAge(forever).metricsStaleness(forever)
        .retiredPluginCloseDelay(forever).endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    RoutingDecision d = r.route(REQ);
    now[0] += Duration.ofDays(365L * 200).toNanos();
    r.updateMetrics("10.0.0.1:80", EndpointMetrics.builder().waitingRequests(0).build());
    InferenceRequest sheddable = REQ.toBuilder().priority(-1).build();
    assertThat(r.route(sheddable).isRouted()).as("fresh metrics, never stale").isTrue();
    assertThat(r.endpoints().get(0).inFlightRequests()).as("never expired").isEqualTo(2);
    d.onComplete(Usage.NONE);
    assertThat(r.reconfigure(RouterConfig.of(SchedulingProfile.builder("other").build())).isOk())
        .isTrue();
    // metrics never scraped still count as stale, whatever the staleness limit
    Router unscraped = base().metricsStaleness(Duration.ofNanos(Long.MAX_VALUE))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    assertThat(unscraped.route(sheddable).rejection().reason()).isEqualTo(Rejection.Reason.SHED);
  }

  @Test
  void inFlightMaxAgeMustBePositive() {
    assertThatThrownBy(() -> base().inFlightMaxAge(Duration.ZERO))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("inFlightMaxAge");
    assertThatThrownBy(() -> base().inFlightMaxAge(Duration.ofSeconds(-1)))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("inFlightMaxAge");
  }

  @Test
  void aThrowingAfterRoutingListenerNeitherFailsTheRequestNorLeaksACount() {
    List<String> later = new ArrayList<>();
    RequestListener broken = new RequestListener() {
      @Override public void afterRouting(InferenceRequest q, CycleState s, RoutingDecision d) {
        throw new IllegalStateException("listener bug");
      }
    };
    RequestListener fine = new RequestListener() {
      @Override public void afterRouting(InferenceRequest q, CycleState s, RoutingDecision d) { later.add("routed"); }
    };
    Router r = base().endpoints(List.of(ep("10.0.0.1:80", Map.of()))).listener(broken).listener(fine).build();
    Candidate c = r.endpoints().get(0);
    for (int i = 0; i < 10; i++) {
      RoutingDecision d = r.route(REQ);
      assertThat(d.isRouted()).as("a listener failure does not fail routing").isTrue();
      d.onComplete(Usage.NONE);
    }
    assertThat(c.inFlightRequests()).isZero();
    assertThat(c.inFlightTokens()).isZero();
    assertThat(later).as("listeners after the broken one still run").hasSize(10);
  }

  @Test
  void throwingLifecycleListenersDoNotReachTheGatewayOrStopOtherListeners() {
    List<String> events = new ArrayList<>();
    RequestListener broken = new RequestListener() {
      @Override public void onFirstToken(InferenceRequest q, Endpoint e) { throw new IllegalStateException("x"); }
      @Override public void onComplete(InferenceRequest q, Endpoint e, Usage u) { throw new IllegalStateException("x"); }
      @Override public void onFailure(InferenceRequest q, Endpoint e, Throwable t) { throw new IllegalStateException("x"); }
    };
    RequestListener fine = new RequestListener() {
      @Override public void onFirstToken(InferenceRequest q, Endpoint e) { events.add("first"); }
      @Override public void onComplete(InferenceRequest q, Endpoint e, Usage u) { events.add("done"); }
      @Override public void onFailure(InferenceRequest q, Endpoint e, Throwable t) { events.add("fail"); }
    };
    Router r = base().endpoints(List.of(ep("10.0.0.1:80", Map.of()))).listener(broken).listener(fine).build();
    RoutingDecision a = r.route(REQ);
    a.onFirstToken();
    a.onComplete(Usage.NONE);
    r.route(REQ).onFailure(new RuntimeException("reset"));
    assertThat(events).containsExactly("first", "done", "fail");
    assertThat(r.endpoints().get(0).inFlightRequests()).isZero();
  }

  @Test
  void expiryRacingTheGatewaysCallbacksReleasesEachDecisionExactlyOnce() throws Exception {
    AtomicLong now = new AtomicLong();
    Router r = base().ticker(now::get).inFlightMaxAge(Duration.ofSeconds(1))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of()))).build();
    List<Candidate> eps = r.endpoints();
    int perThread = 5_000;
    int threads = 4;
    List<List<RoutingDecision>> shares = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      List<RoutingDecision> share = new ArrayList<>();
      for (int i = 0; i < perThread; i++) {
        share.add(r.route(REQ));
      }
      shares.add(share);
    }
    assertThat(eps.get(0).inFlightRequests() + eps.get(1).inFlightRequests()).isEqualTo(threads * perThread);
    now.addAndGet(Duration.ofSeconds(2).toNanos()); // all of them are now too old
    ExecutorService pool = Executors.newFixedThreadPool(threads + 1);
    CountDownLatch go = new CountDownLatch(1);
    List<Future<?>> fs = new ArrayList<>();
    try {
      for (List<RoutingDecision> share : shares) {
        fs.add(pool.submit(() -> {
          assertThat(go.await(10, TimeUnit.SECONDS)).isTrue();
          for (int i = 0; i < share.size(); i++) {
            if (i % 2 == 0) {
              share.get(i).onComplete(Usage.NONE);
            } else {
              share.get(i).onFailure(new RuntimeException("reset"));
            }
          }
          return null;
        }));
      }
      fs.add(pool.submit(() -> {
        assertThat(go.await(10, TimeUnit.SECONDS)).isTrue();
        // sweeps from the metrics path and from routing, each due after the clock moves on
        for (int i = 0; i < 200; i++) {
          now.addAndGet(Duration.ofMillis(200).toNanos());
          r.updateMetrics("10.0.0.1:80", EndpointMetrics.UNKNOWN);
          r.route(REQ).onComplete(Usage.NONE);
        }
        return null;
      }));
      go.countDown();
      for (Future<?> f : fs) {
        f.get(30, TimeUnit.SECONDS);
      }
    } finally {
      pool.shutdownNow();
    }
    for (Candidate c : eps) {
      assertThat(c.inFlightRequests()).isZero();
      assertThat(c.inFlightTokens()).isZero();
    }
  }

  /**
   * Pool listeners keep per-endpoint state (prefix stores, session bindings), so they must hear
   * membership changes in the order the pool made them: a removal whose listeners are still
   * running must not be overtaken by a re-add of the same id, or the listener ends up without
   * state for a member of the pool.
   */
  @Test
  void poolListenersHearMembershipChangesInTheOrderThePoolMadeThem() throws Exception {
    java.util.Set<String> members = java.util.concurrent.ConcurrentHashMap.newKeySet();
    CountDownLatch inRemoval = new CountDownLatch(1);
    CountDownLatch releaseRemoval = new CountDownLatch(1);
    PoolListener listener = new PoolListener() {
      @Override
      public void onEndpointAdded(Endpoint endpoint) {
        members.add(endpoint.id());
      }

      @Override
      public void onEndpointRemoved(Endpoint endpoint) {
        inRemoval.countDown();
        try {
          releaseRemoval.await(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        members.remove(endpoint.id());
      }
    };
    Router r = base().listener(listener).endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    assertThat(members).containsExactly("10.0.0.1:80");
    Thread remover = new Thread(() -> r.removeEndpoint("10.0.0.1:80"));
    remover.start();
    assertThat(inRemoval.await(10, TimeUnit.SECONDS)).isTrue();
    Thread adder = new Thread(() -> r.addEndpoint(ep("10.0.0.1:80", Map.of())));
    adder.start();
    adder.join(500); // lets an unordered add finish while the removal's listener still runs
    releaseRemoval.countDown();
    remover.join(10_000);
    adder.join(10_000);
    assertThat(remover.isAlive() || adder.isAlive()).as("pool changes finished").isFalse();
    assertThat(r.endpoints()).extracting(c -> c.endpoint().id()).containsExactly("10.0.0.1:80");
    assertThat(members).as("listener's view of the pool").containsExactly("10.0.0.1:80");
  }

  @Test
  void aThrowingPoolListenerNeitherFailsThePoolChangeNorStopsOtherListeners() {
    List<String> heard = new ArrayList<>();
    PoolListener broken = new PoolListener() {
      @Override
      public void onEndpointAdded(Endpoint endpoint) {
        throw new IllegalStateException("broken listener");
      }

      @Override
      public void onEndpointRemoved(Endpoint endpoint) {
        throw new IllegalStateException("broken listener");
      }
    };
    PoolListener good = new PoolListener() {
      @Override
      public void onEndpointAdded(Endpoint endpoint) {
        heard.add("+" + endpoint.id());
      }

      @Override
      public void onEndpointRemoved(Endpoint endpoint) {
        heard.add("-" + endpoint.id());
      }
    };
    Router r = base().listener(broken).listener(good).build();
    assertThat(r.addEndpoint(ep("10.0.0.1:80", Map.of()))).isTrue();
    r.setEndpoints(List.of(ep("10.0.0.2:80", Map.of())));
    assertThat(r.removeEndpoint("10.0.0.2:80")).isTrue();
    assertThat(heard).containsExactly("+10.0.0.1:80", "-10.0.0.1:80", "+10.0.0.2:80", "-10.0.0.2:80");
  }

  @Test
  void anEligibleSubsetRestrictsThePickAndItsCandidates() {
    List<Boolean> sawPoolOrder = new ArrayList<>();
    List<Integer> sawSize = new ArrayList<>();
    io.epp4j.api.Filter recording = (q, st, cands) -> {
      sawPoolOrder.add(cands instanceof io.epp4j.api.PoolOrder);
      sawSize.add(cands.size());
      return cands;
    };
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").filter(recording)
            .scorer(new TestPlugins.LabelScorer("s")).build())
        .endpoints(List.of(ep("10.0.0.1:80", Map.of("s", "0.9")), ep("10.0.0.2:80", Map.of("s", "0.5")),
            ep("10.0.0.3:80", Map.of("s", "0.1"))))
        .build();

    assertThat(r.route(REQ).primary().id()).isEqualTo("10.0.0.1:80");
    RoutingDecision d = r.route(REQ, java.util.Set.of("10.0.0.2:80", "10.0.0.3:80"));
    assertThat(d.primary().id()).isEqualTo("10.0.0.2:80");
    assertThat(r.route(REQ, java.util.Set.of("10.0.0.3:80", "10.9.9.9:1")).primary().id())
        .isEqualTo("10.0.0.3:80");
    // every endpoint eligible: the pool's own list, with its PoolOrder fast path
    assertThat(r.route(REQ, java.util.Set.of("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"))
        .primary().id()).isEqualTo("10.0.0.1:80");
    assertThat(sawPoolOrder).containsExactly(true, false, false, true);
    assertThat(sawSize).containsExactly(3, 2, 1, 3);

    // the subset pick is counted in flight on the endpoint it names
    Candidate b = r.endpoints().get(1);
    assertThat(b.inFlightRequests()).isEqualTo(1);
    d.onComplete(Usage.NONE);
    assertThat(b.inFlightRequests()).isZero();

    // and the body overload parses first: a bad body stays a 400 whatever the subset
    RoutingDecision bad = r.route("/v1/completions", Map.of(),
        "{".getBytes(StandardCharsets.UTF_8), java.util.Set.of("10.0.0.2:80"));
    assertThat(bad.rejection().reason()).isEqualTo(Rejection.Reason.INVALID_REQUEST);
    RoutingDecision parsed = r.route("/v1/completions", Map.of(),
        "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8),
        java.util.Set.of("10.0.0.3:80"));
    assertThat(parsed.primary().id()).isEqualTo("10.0.0.3:80");
    parsed.onComplete(Usage.NONE);
  }

  @Test
  void anEmptyOrForeignSubsetIsNoEndpoints() {
    Router r = base().endpoints(List.of(ep("10.0.0.1:80", Map.of()))).build();
    RoutingDecision empty = r.route(REQ, java.util.Set.of());
    assertThat(empty.rejection().reason()).isEqualTo(Rejection.Reason.NO_ENDPOINTS);
    assertThat(empty.rejection().httpStatus()).isEqualTo(503);
    assertThat(empty.rejection().message()).contains("subset is empty");
    RoutingDecision foreign = r.route(REQ, java.util.Set.of("10.0.0.9:80", "10.0.0.8:80"));
    assertThat(foreign.rejection().reason()).isEqualTo(Rejection.Reason.NO_ENDPOINTS);
    assertThat(foreign.rejection().message())
        .isEqualTo("none of the request's 2 eligible endpoints is in the pool");
    assertThat(r.endpoints().get(0).inFlightRequests()).isZero();
    assertThatThrownBy(() -> r.route(REQ, (java.util.Set<String>) null))
        .isInstanceOf(NullPointerException.class);
  }
}
