package io.epp4j.redis;

import static io.epp4j.redis.ReplicationLogicTest.await;
import static io.epp4j.redis.ReplicationLogicTest.configYaml;
import static io.epp4j.redis.ReplicationLogicTest.countsOf;
import static io.epp4j.redis.ReplicationLogicTest.eightEndpoints;
import static io.epp4j.redis.ReplicationLogicTest.otherThan;
import static io.epp4j.redis.ReplicationLogicTest.primaryOf;
import static io.epp4j.redis.ReplicationLogicTest.prompt;
import static io.epp4j.redis.ReplicationLogicTest.replication;
import static io.epp4j.redis.ReplicationLogicTest.sessionBatch;
import static io.epp4j.redis.ReplicationLogicTest.sessionsIn;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import io.epp4j.core.RouterConfig;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A reload that changes the parameters of {@code redis-replication} creates a new instance while
 * the old one lives on for the router's retirement delay: the other routers must go on counting
 * this router's requests once, and the new instance must go on where the old one stopped.
 */
class ReloadHandoverTest {
  /** Long enough that a replaced instance stays open for the whole test unless said otherwise. */
  private static final Duration KEEP_RETIRED = Duration.ofMinutes(10);

  private final InMemoryLog log = new InMemoryLog();
  private final List<Router> routers = new ArrayList<>();
  private final List<RoutingDecision> open = new ArrayList<>();

  @AfterEach
  void close() {
    open.forEach(d -> d.onComplete(new Usage(1, 0, 1)));
    routers.forEach(Router::close);
  }

  private static String prefixYaml(String replicationParameters) {
    return configYaml("prefix-cache-scorer", replicationParameters, "");
  }

  private Router router(String name, String yaml, Duration retiredCloseDelay) {
    Router r = Router.builder().endpoints(eightEndpoints())
        .registry(PluginRegistry.fromServiceLoader()
            .with(new RedisReplication.Provider(log::factory)))
        .retiredPluginCloseDelay(retiredCloseDelay)
        .configYaml(yaml, name).randomSeed(name.hashCode()).build();
    routers.add(r);
    return r;
  }

  /**
   * Router b, which counts router a's requests: prefix-cache-scorer, pool p, routerId b, a flush
   * every millisecond and {@code moreParameters}, and no retirement while the test runs.
   */
  private Router routerB(String moreParameters) {
    return router("b", prefixYaml("pool: p, routerId: b, flushIntervalMillis: 1" + moreParameters),
        KEEP_RETIRED);
  }

  /** Opens a first request on {@code a}, waits until {@code b} counts it: a's open requests. */
  private Map<String, Integer> openFirstRequest(Router a, Router b) throws InterruptedException {
    Map<String, Integer> aOpen = new HashMap<>();
    openRequest(a, 1, aOpen);
    await("b counts a's open request", () -> countsOf(b, aOpen));
    return aOpen;
  }

  /** Routes {@code prompt(seed)} on {@code r} and keeps the request open until the test ends. */
  private RoutingDecision openRequest(Router r, long seed, Map<String, Integer> counts) {
    RoutingDecision d = r.route(prompt(seed));
    open.add(d);
    counts.merge(d.primary().id(), 1, Integer::sum);
    return d;
  }

  /**
   * Opens a second request on {@code a} and waits until {@code b} applied its prefix: the batch
   * that carries it, or one before it, carries the figure the request raised (a router counts a
   * request before its listeners queue the hint, and a flush takes the figures before the hints).
   */
  private void openAndAwaitItsPrefix(Router a, Router b, Map<String, Integer> aOpen)
      throws InterruptedException {
    long prefixes = replication(b).appliedPrefixes();
    openRequest(a, 2, aOpen);
    await("b applied the prefix of a's second request",
        () -> replication(b).appliedPrefixes() > prefixes);
  }

  private static RedisReplication reload(Router r, String yaml) {
    RedisReplication before = replication(r);
    Result<RouterConfig> done = r.reconfigure(yaml, "reload");
    assertThat(done.isOk()).as(String.valueOf(done.errors())).isTrue();
    RedisReplication after = replication(r);
    assertThat(after).as("a new instance for the changed parameters").isNotSameAs(before);
    return after;
  }

  /**
   * {@link #reload}, then waits until the new instance is connected: connected, it publishes and
   * reads, as the one it replaced has let go.
   */
  private static RedisReplication reloadConnected(Router r, String yaml)
      throws InterruptedException {
    RedisReplication replacement = reload(r, yaml);
    await("the new instance is connected", replacement::connected);
    return replacement;
  }

  /** Once {@code b} read everything written so far, it counts exactly {@code aOpen} of a's. */
  private void assertBCountsOnly(Router b, Map<String, Integer> aOpen)
      throws InterruptedException {
    await("b read everything written so far", () -> replication(b).entriesRead() >= log.size());
    assertThat(inFlightOf(b)).as("b's count of a's open requests").isEqualTo(aOpen);
  }

  @Test
  void aReloadThatReplacesThePluginDoesNotCountTheRoutersRequestsTwice() throws Exception {
    Router a = router("a", prefixYaml("pool: p, flushIntervalMillis: 1"), KEEP_RETIRED);
    Router b = routerB("");
    Map<String, Integer> aOpen = openFirstRequest(a, b);
    String idBefore = replication(a).settings().routerId();

    RedisReplication replacement = reloadConnected(a,
        prefixYaml("pool: p, flushIntervalMillis: 1, batchSize: 128"));
    openAndAwaitItsPrefix(a, b, aOpen);
    assertBCountsOnly(b, aOpen);
    assertThat(replacement.settings().routerId()).as("the default routerId survives a reload")
        .isEqualTo(idBefore);
  }

  @Test
  void aReloadThatChangesTheRouterIdCountsTheRoutersRequestsOnce() throws Exception {
    Router a = router("a", prefixYaml("pool: p, routerId: a1, flushIntervalMillis: 1"),
        KEEP_RETIRED);
    Router b = routerB("");
    Map<String, Integer> aOpen = openFirstRequest(a, b);

    RedisReplication replacement = reloadConnected(a,
        prefixYaml("pool: p, routerId: a2, flushIntervalMillis: 1"));
    openAndAwaitItsPrefix(a, b, aOpen);
    assertBCountsOnly(b, aOpen);
    // counted once the append returned, which can be after b read it
    await("the replacement counted what it published", () -> replacement.published() > 0);
  }

  /**
   * A reload that changes routerId on the same stream: the old instance's zeros under the old id
   * went out first, and the new instance's figures only once it had connected, so that for that
   * long the other routers counted none of this router's requests. The figures under the new id
   * now go out before the zeros under the old one.
   */
  @Test
  void aReloadThatChangesTheRouterIdSendsTheNewIdsFiguresBeforeTheOldIdsZeros() throws Exception {
    Router a = router("a", prefixYaml("pool: p, routerId: a1, flushIntervalMillis: 1"),
        KEEP_RETIRED);
    Router b = routerB("");
    Map<String, Integer> aOpen = openFirstRequest(a, b);
    String figure = aOpen.keySet().iterator().next() + " 1";
    String zero = aOpen.keySet().iterator().next() + " 0";

    reloadConnected(a, prefixYaml("pool: p, routerId: a2, flushIntervalMillis: 1"));
    await("a2's figure and a1's zero are in the log",
        () -> firstBatchWith("a2", figure) >= 0 && firstBatchWith("a1", zero) >= 0);
    assertThat(firstBatchWith("a2", figure)).as("the batch of a2's figure, in the log")
        .isLessThan(firstBatchWith("a1", zero));
    assertBCountsOnly(b, aOpen);
  }

  /** Position in the log of the first batch of {@code origin} with the figure "endpoint n". */
  private int firstBatchWith(String origin, String figure) {
    List<byte[]> batches = log.batches();
    for (int i = 0; i < batches.size(); i++) {
      try {
        var in = HintCodec.input(batches.get(i));
        HintCodec.Header h = HintCodec.header(in);
        if (!h.origin().equals(origin)) {
          continue;
        }
        List<String> figures = new ArrayList<>();
        HintCodec.records(in, h, new HintCodec.Visitor() {
          @Override
          public void prefix(long at, String ep, int bs, long[] hashes) {}

          @Override
          public void session(long at, String key, String ep) {}

          @Override
          public void inFlight(String ep, int r, long t) {
            figures.add(ep + " " + r);
          }
        });
        if (figures.contains(figure)) {
          return i;
        }
      } catch (HintCodec.MalformedBatchException e) {
        throw new AssertionError(e);
      }
    }
    return -1;
  }

  /**
   * The replaced instance is closed after the retirement delay: under the routerId it shares
   * with its successor, a farewell of zeros would erase the figures the successor sent.
   */
  @Test
  void theReplacedInstanceClosingDoesNotEraseTheRoutersFigures() throws Exception {
    Router a = router("a", prefixYaml("pool: p, flushIntervalMillis: 1"), Duration.ZERO);
    Router b = routerB("");
    Map<String, Integer> aOpen = openFirstRequest(a, b);
    RedisReplication before = replication(a);

    RedisReplication replacement = reload(a,
        prefixYaml("pool: p, flushIntervalMillis: 1, batchSize: 128"));
    await("the replaced instance is closed", before::closed);
    long prefixes = replication(b).appliedPrefixes();
    openRequest(a, 2, aOpen); // its prefix, sent after the close, is b's marker
    await("b applied the marker", () -> replication(b).appliedPrefixes() > prefixes);
    // counted once the append returned, which can be after b read it
    await("the replacement counted what it published", () -> replacement.published() > 0);
    assertThat(inFlightOf(b)).as("b's count of a's open requests").isEqualTo(aOpen);
  }

  /**
   * The router closes while the instance a reload replaced still waits for its retirement delay.
   * The running instance says the router's farewell on its open connection (the other routers
   * drop its figures at once); the replaced one, which no route uses any more, must not take over
   * again on the way out, connecting anew (up to connectTimeoutMillis while Redis is slow) to
   * publish and say it instead.
   */
  @Test
  void aRouterClosedDuringTheRetirementDelaySaysFarewellWithoutConnectingAgain()
      throws Exception {
    Router a = router("a", prefixYaml("pool: p, flushIntervalMillis: 1"), KEEP_RETIRED);
    // b forgets a silent router only after five of its heartbeats (50 minutes): only a farewell
    // takes a's figures off b within the test
    Router b = routerB(", heartbeatMillis: 600000");
    Map<String, Integer> aOpen = openFirstRequest(a, b);
    reloadConnected(a, prefixYaml("pool: p, flushIntervalMillis: 1, batchSize: 128"));
    openAndAwaitItsPrefix(a, b, aOpen);
    int connects = log.connects();

    a.close();
    assertThat(log.connects()).as("connections made while the router closed")
        .isEqualTo(connects);
    await("b no longer counts a's requests", () -> countsOf(b, Map.of()));
  }

  /**
   * Hints queued on an instance while Redis is away stay queued through a reload: the instance
   * that replaces it sends them, also once the replaced one has closed (the end of its
   * retirement delay, before Redis came back), rather than losing them without a count.
   */
  @Test
  void hintsQueuedBeforeAReloadDuringAnOutageAreSentAfterTheReplacedInstanceClosed()
      throws Exception {
    Router a = router("a", prefixYaml("pool: p, flushIntervalMillis: 1"), Duration.ofMillis(50));
    Router b = routerB("");
    await("a is connected", () -> replication(a).connected());
    log.down();
    RedisReplication old = replication(a);
    // the publisher notices the outage when it sends: the batch of a probe's in-flight figure
    // (perhaps with its prefix) fails, and from then on nothing is taken from the queue until
    // the log is back (b, which routes nothing, sends nothing)
    open.add(a.route(prompt(999)));
    await("a's publisher tried to send", () -> log.appendsTried() > 0);
    // its failure noticed: the publisher takes nothing more from the queue until the log is back.
    // Not !old.connected(): the reader's read, which the outage ends at once, can make that true
    // while the publisher is still between its failed append and counting what the batch lost;
    // the publisher closes its connection only after that count
    await("a's publisher found the log down", () -> log.closedAfterFailedAppend() > 0);
    assertThat(old.connected()).isFalse();
    long lost = old.dropped();
    int queued = old.queued();
    int n = 20;
    for (int i = 0; i < n; i++) {
      open.add(a.route(prompt(1_000 + i)));
    }
    assertThat(old.queued()).as("hints queued while the log is down").isEqualTo(queued + n);
    reload(a, prefixYaml("pool: p, flushIntervalMillis: 1, batchSize: 128"));
    await("the replaced instance is closed", old::closed);
    log.up();
    await("b applied the prefixes a routed before its reload",
        () -> replication(b).appliedPrefixes() >= queued + n);
    assertThat(replication(a).dropped()).isZero();
    assertThat(old.dropped()).isEqualTo(lost);
  }

  /** A reload that fails closes the instance it created: the running one must go on publishing. */
  @Test
  void aFailedReloadLeavesTheRunningInstancePublishing() throws Exception {
    Router a = router("a", prefixYaml("pool: p, flushIntervalMillis: 1"), KEEP_RETIRED);
    Router b = routerB("");
    Map<String, Integer> aOpen = openFirstRequest(a, b);
    RedisReplication running = replication(a);

    Result<RouterConfig> failed = a.reconfigure(configYaml("prefix-cache-scorer",
        "pool: p, flushIntervalMillis: 1, batchSize: 128", "- type: no-such-plugin-type"),
        "reload");
    assertThat(failed.isOk()).isFalse();
    assertThat(replication(a)).isSameAs(running);
    long prefixes = replication(b).appliedPrefixes();
    openRequest(a, 2, aOpen);
    await("b applied a's prefix after the failed reload",
        () -> replication(b).appliedPrefixes() > prefixes);
    await("b counts a's open requests", () -> countsOf(b, aOpen));
  }

  /**
   * The new instance reads on from where the old one stopped: read again from the stream's
   * oldest batch, without the old one's session times, a move another router made before this
   * router's own would undo this router's newer binding.
   */
  @Test
  void aReloadedPluginReadsOnWhereTheOldOneStopped() throws Exception {
    // a fixed routerId: the new instance skips the old one's batches as its own
    String params = "pool: p, routerId: a, flushIntervalMillis: 1";
    Router a = router("a", configYaml("session-affinity-scorer", params, ""), KEEP_RETIRED);
    String mine = primaryOf(a, "s2");
    await("a published its binding", () -> sessionsIn(log, "a").contains("s2 " + mine));
    String other = otherThan(mine);
    // another router's move of s2, captured before a's binding, reaches the stream late
    log.append(sessionBatch("y", RedisReplication.epochMicros() - 30_000_000, "s2", other));
    await("a skipped the older move", () -> replication(a).staleSessions() == 1);

    RedisReplication replacement = reloadConnected(a,
        configYaml("session-affinity-scorer", params + ", batchSize: 128", ""));
    log.append(sessionBatch("z", RedisReplication.epochMicros(), "s9", "10.2.0.7:8000"));
    // the marker is the only session record after the old instance's place in the stream
    await("the new instance handled a session record",
        () -> replacement.appliedSessions() + replacement.staleSessions() >= 1);
    assertThat(primaryOf(a, "s2")).as("a's own newer binding of s2").isEqualTo(mine);
    assertThat(primaryOf(a, "s9")).as("the marker's binding").isEqualTo("10.2.0.7:8000");
  }

  /** The endpoints with requests in flight on {@code r}, and how many. */
  private static Map<String, Integer> inFlightOf(Router r) {
    Map<String, Integer> m = new HashMap<>();
    for (var c : r.endpoints()) {
      if (c.inFlightRequests() != 0) {
        m.put(c.id(), c.inFlightRequests());
      }
    }
    return m;
  }

  /**
   * The shared-state tie-break belongs to the plugin that asked for it: a reload that drops
   * redis-replication gives the router its own random tie-break back once the retired instance
   * is closed, while a reload that replaces the instance keeps it throughout.
   */
  @Test
  void aReloadThatDropsTheReplicationEndsTheSharedStateTieBreak() throws Exception {
    Router a = router("a", prefixYaml("pool: p, routerId: a, flushIntervalMillis: 1"),
        Duration.ZERO);
    assertThat(a.hints().sharesState()).isTrue();
    // another instance for changed parameters: the router still shares, before and after the
    // old instance closes
    RedisReplication first = replication(a);
    reload(a, prefixYaml("pool: p, routerId: a, flushIntervalMillis: 2"));
    assertThat(a.hints().sharesState()).isTrue();
    await("the replaced instance closed", first::closed);
    assertThat(a.hints().sharesState()).isTrue();
    RedisReplication second = replication(a);
    Result<RouterConfig> done = a.reconfigure("""
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: prefix-cache-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: prefix-cache-scorer
          - pluginRef: max-score-picker
        """, "without replication");
    assertThat(done.isOk()).as(String.valueOf(done.errors())).isTrue();
    await("the dropped instance closed", second::closed);
    assertThat(a.hints().sharesState()).as("after the plugin that shared state left").isFalse();
    // and back: the plugin shares again
    done = a.reconfigure(prefixYaml("pool: p, routerId: a, flushIntervalMillis: 1"), "again");
    assertThat(done.isOk()).as(String.valueOf(done.errors())).isTrue();
    assertThat(a.hints().sharesState()).isTrue();
  }
}
