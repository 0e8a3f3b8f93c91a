package io.epp4j.core;

import static io.epp4j.core.TestPlugins.ep;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.HintListener;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RouterHints;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** What another router's hints do to this router: in-flight figures and plugin hand-over. */
class RouterHintsTest {
  static final InferenceRequest REQ =
      InferenceRequest.builder().model("m").prompt("hello").maxTokens(10).build();
  static final String E1 = "10.0.0.1:80";
  static final String E2 = "10.0.0.2:80";

  final AtomicLong now = new AtomicLong();

  Router router(Object... listeners) {
    Router.Builder b = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .ticker(now::get)
        .inFlightMaxAge(Duration.ofSeconds(80))
        .endpoints(List.of(ep(E1, Map.of()), ep(E2, Map.of())));
    for (Object l : listeners) {
      b.listener(l);
    }
    return b.build();
  }

  static int requests(Router r, String id) {
    for (Candidate c : r.endpoints()) {
      if (c.id().equals(id)) {
        return c.inFlightRequests();
      }
    }
    throw new AssertionError(id);
  }

  static Map<String, long[]> local(RouterHints h) {
    Map<String, long[]> m = new HashMap<>();
    h.forEachLocalInFlight((ep, r, t) -> m.put(ep, new long[] {r, t}));
    return m;
  }

  @Test
  void remoteFiguresTooLargeForAnyEngineCannotWrapTheCounters() {
    Router r = router();
    RouterHints h = r.hints();
    RoutingDecision d = r.route(REQ);
    String mine = d.primary().id();
    // two peers at the int's limit summed to a negative count: a loaded endpoint looked idle
    h.inFlight("b", mine, Integer.MAX_VALUE, Long.MAX_VALUE);
    h.inFlight("c", mine, Integer.MAX_VALUE, Long.MAX_VALUE);
    assertThat(requests(r, mine)).isEqualTo(1 + 2 * HintApplier.MAX_REMOTE_REQUESTS);
    h.forget("b");
    h.forget("c");
    assertThat(requests(r, mine)).isEqualTo(1);
    d.onComplete(new Usage(1, 0, 1));
    assertThat(requests(r, mine)).isZero();
  }

  /**
   * Another router's figure comes and goes while this router, with nothing in flight, reads its
   * own share, as its publisher does every flush. The remote share was lowered before the total,
   * so a read between the two took the total from before and the remote share from after: the
   * other router's whole figure as this router's own, which it then sent to every router.
   */
  @Test
  void theLocalShareReadWhileARemoteFigureChangesNeverHoldsTheRemoteOne() throws Exception {
    Router r = router();
    RouterHints h = r.hints();
    java.util.concurrent.atomic.AtomicBoolean stop =
        new java.util.concurrent.atomic.AtomicBoolean();
    Thread other = new Thread(() -> {
      while (!stop.get()) {
        h.inFlight("b", E1, 1000, 100_000);
        h.inFlight("b", E1, 0, 0);
      }
    });
    long[] mostSeen = new long[2];
    other.start();
    try {
      // a second of reads: without the fix the first over-report comes within milliseconds
      long deadline = System.nanoTime() + 1_000_000_000L;
      while (System.nanoTime() - deadline < 0 && mostSeen[0] == 0 && mostSeen[1] == 0) {
        h.forEachLocalInFlight((ep, req, tok) -> {
          mostSeen[0] = Math.max(mostSeen[0], req);
          mostSeen[1] = Math.max(mostSeen[1], tok);
        });
      }
    } finally {
      stop.set(true);
      other.join(10_000);
    }
    assertThat(other.isAlive()).isFalse();
    assertThat(mostSeen).as("most requests and tokens read as this router's own")
        .containsExactly(0, 0);
  }

  @Test
  void remoteFiguresReplaceEachOtherAndAddToTheLocalCounts() {
    Router r = router();
    RouterHints h = r.hints();
    RoutingDecision d = r.route(REQ);
    String mine = d.primary().id();
    h.inFlight("b", mine, 3, 300);
    h.inFlight("c", mine, 2, 200);
    h.inFlight("b", mine, 4, 400); // replaces b's 3, does not add to it
    assertThat(requests(r, mine)).isEqualTo(1 + 4 + 2);
    // what this router tells the others is its own share only
    assertThat(local(h).get(mine)[0]).isEqualTo(1);
    assertThat(local(h).get(mine)[1]).isEqualTo(REQ.estimatedPromptTokens() + 10);
    h.inFlight("c", mine, 0, 0);
    h.forget("b");
    assertThat(requests(r, mine)).isEqualTo(1);
    d.onComplete(new Usage(1, 0, 1));
    assertThat(requests(r, mine)).isZero();
    assertThat(((HintApplier) h).remoteFigures()).isZero();
  }

  @Test
  void aFigureNotRefreshedWithinTheInFlightAgeIsTakenBack() {
    Router r = router();
    RouterHints h = r.hints();
    h.inFlight("b", E1, 5, 50);
    h.inFlight("c", E2, 1, 10);
    now.addAndGet(Duration.ofSeconds(60).toNanos());
    h.inFlight("c", E2, 1, 10); // refreshed
    now.addAndGet(Duration.ofSeconds(30).toNanos());
    r.updateMetrics(Map.of()); // sweeps: b's figure is 90 s old, c's 30 s
    assertThat(requests(r, E1)).isZero();
    assertThat(requests(r, E2)).isEqualTo(1);
  }

  @Test
  void anEndpointThatLeftAndCameBackStartsWithoutTheOldRemoteFigures() {
    Router r = router();
    RouterHints h = r.hints();
    h.inFlight("b", E1, 5, 50);
    r.removeEndpoint(E1);
    h.inFlight("b", E1, 6, 60); // unknown endpoint: ignored
    r.addEndpoint(ep(E1, Map.of()));
    assertThat(requests(r, E1)).isZero();
    h.inFlight("b", E1, 2, 20);
    assertThat(requests(r, E1)).isEqualTo(2);
    h.forget("b");
    assertThat(requests(r, E1)).isZero();
    assertThat(local(h).get(E1)).containsExactly(0, 0);
  }

  /** An extra listener that records the hints it is handed. */
  static final class Recorder implements RequestListener, HintListener {
    final List<String> heard = new ArrayList<>();

    @Override
    public void onRemotePrefix(String endpointId, PrefixBlocks blocks) {
      heard.add("prefix " + endpointId + " " + blocks.blockSizeTokens() + " " + blocks.size());
    }

    @Override
    public void onRemoteSession(String sessionKey, String endpointId, long nowNanos) {
      heard.add("session " + sessionKey + " " + endpointId + " " + nowNanos);
    }
  }

  /** A hint listener that throws: logged and skipped, the others still hear the hint. */
  static final class Broken implements RequestListener, HintListener {
    @Override
    public void onRemotePrefix(String endpointId, PrefixBlocks blocks) {
      throw new IllegalStateException("broken");
    }
  }

  @Test
  void prefixAndSessionHintsReachEveryHintListenerWithTheRoutersClock() {
    Recorder rec = new Recorder();
    Router r = router(new Broken(), rec);
    now.set(42);
    r.hints().prefixSent(E1, PrefixBlocks.of(16, new long[] {7, 8}));
    r.hints().sessionBound("s1", E2);
    assertThat(rec.heard).containsExactly("prefix " + E1 + " 16 2", "session s1 " + E2 + " 42");
  }

  /** A scorer of the configuration (so the router closes it) that records hints heard after. */
  static final class ClosableHintScorer implements io.epp4j.api.Scorer, HintListener {
    volatile boolean closed;
    final List<String> heardAfterClose = new java.util.concurrent.CopyOnWriteArrayList<>();

    @Override
    public void score(InferenceRequest r, io.epp4j.api.CycleState s, List<Candidate> cs,
        double[] scores) {}

    @Override
    public void onRemotePrefix(String endpointId, PrefixBlocks blocks) {
      if (closed) {
        heardAfterClose.add("prefix");
      }
    }

    @Override
    public void onRemoteSession(String sessionKey, String endpointId, long nowNanos) {
      if (closed) {
        heardAfterClose.add("session");
      }
    }

    @Override
    public void close() {
      closed = true;
    }
  }

  @Test
  void hintsArrivingAfterTheRouterClosedReachNoPluginItClosed() {
    ClosableHintScorer plugin = new ClosableHintScorer();
    Recorder extra = new Recorder();
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").scorer("s", plugin, 1).build())
        .ticker(now::get)
        .listener(extra)
        .endpoints(List.of(ep(E1, Map.of()), ep(E2, Map.of()))).build();
    RouterHints h = r.hints();
    // a replication reader still delivering while the gateway shuts down
    r.close();
    assertThat(plugin.closed).isTrue();
    h.prefixSent(E1, PrefixBlocks.of(16, new long[] {7}));
    h.sessionBound("s1", E2);
    assertThat(plugin.heardAfterClose).isEmpty();
    // the builder's extra listener is not the router's to close: still told
    assertThat(extra.heard).containsExactly("prefix " + E1 + " 16 1", "session s1 " + E2 + " 0");
  }

  @Test
  void hintsBeforeTheRouterExistsOrForUnknownEndpointsAreIgnored() {
    HintApplier unbound = new HintApplier();
    unbound.inFlight("b", E1, 1, 1);
    unbound.prefixSent(E1, PrefixBlocks.of(16, new long[] {1}));
    assertThat(unbound.remoteFigures()).isZero();
    Router r = router();
    r.hints().inFlight("b", "10.9.9.9:80", 3, 3);
    assertThat(((HintApplier) r.hints()).remoteFigures()).isZero();
    for (Endpoint e : List.of(ep(E1, Map.of()), ep(E2, Map.of()))) {
      assertThat(requests(r, e.id())).isZero();
    }
  }

  /**
   * Sharing state is counted per call: two plugins (or the two instances of one across a reload)
   * each undo their own share, and the router shares until the last one is undone.
   */
  @Test
  void sharingStateLastsUntilEveryShareIsUndone() {
    RouterHints h = router().hints();
    assertThat(h.sharesState()).isFalse();
    h.stopSharingState(); // unmatched: ignored, it must not cancel a later share
    h.shareState();
    h.shareState();
    assertThat(h.sharesState()).isTrue();
    h.stopSharingState();
    assertThat(h.sharesState()).as("one share left").isTrue();
    h.stopSharingState();
    assertThat(h.sharesState()).isFalse();
  }

  /**
   * A reload that drops a hint listener leaves nothing of the old configuration reachable through
   * the hint path, even when no hint arrives after the reload (replication was the dropped plugin).
   */
  @Test
  void aReloadDoesNotKeepTheDroppedConfigurationReachableThroughTheHintPath() throws Exception {
    ClosableHintScorer plugin = new ClosableHintScorer();
    Router r = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").scorer("s", plugin, 1).build())
        .ticker(now::get)
        .retiredPluginCloseDelay(Duration.ZERO)
        .endpoints(List.of(ep(E1, Map.of()), ep(E2, Map.of()))).build();
    r.hints().sessionBound("s1", E2); // the hint path now knows the configuration's listeners
    java.lang.ref.WeakReference<ClosableHintScorer> dropped =
        new java.lang.ref.WeakReference<>(plugin);
    plugin = null;
    assertThat(r.reconfigure(RouterConfig.of(SchedulingProfile.builder("default").build()))
        .isOk()).isTrue();
    long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(10);
    while (dropped.get() != null && System.nanoTime() < deadline) {
      System.gc();
      Thread.sleep(20);
    }
    assertThat(dropped.get()).as("the dropped plugin is still reachable").isNull();
    r.route(REQ).onComplete(Usage.NONE); // the router is still usable and reachable here
    r.close();
  }
}
