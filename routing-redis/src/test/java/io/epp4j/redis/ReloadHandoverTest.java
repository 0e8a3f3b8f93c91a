package io.epp4j.redis;

import static io.epp4j.redis.ReplicationLogicTest.await;
import static io.epp4j.redis.ReplicationLogicTest.countsOf;
import static io.epp4j.redis.ReplicationLogicTest.prompt;
import static io.epp4j.redis.ReplicationLogicTest.replication;
import static io.epp4j.redis.ReplicationLogicTest.sessionsIn;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
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

  private final List<Router> routers = new ArrayList<>();
  private final List<RoutingDecision> open = new ArrayList<>();

  @AfterEach
  void close() {
    open.forEach(d -> d.onComplete(new Usage(1, 0, 1)));
    routers.forEach(Router::close);
  }

  private static String yaml(String scorer, String replicationParameters, String extraPlugin) {
    return """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: %s
        - type: max-score-picker
        - type: redis-replication
          parameters: {%s}
        %s
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: %s
          - pluginRef: max-score-picker
        """.formatted(scorer, replicationParameters, extraPlugin, scorer);
  }

  private static String prefixYaml(String replicationParameters) {
    return yaml("prefix-cache-scorer", replicationParameters, "");
  }

  private Router router(InMemoryLog log, String name, String yaml, Duration retiredCloseDelay) {
    List<Endpoint> eps = new ArrayList<>();
    for (int i = 0; i < 8; i++) {
      eps.add(Endpoint.parse("10.2.0." + (i + 1) + ":8000"));
    }
    Router r = Router.builder().endpoints(eps)
        .registry(PluginRegistry.fromServiceLoader()
            .with(new RedisReplication.Provider(log::factory)))
        .retiredPluginCloseDelay(retiredCloseDelay)
        .configYaml(yaml, name).randomSeed(name.hashCode()).build();
    routers.add(r);
    return r;
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

  @Test
  void aReloadThatReplacesThePluginDoesNotCountTheRoutersRequestsTwice() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "a", prefixYaml("pool: p, flushIntervalMillis: 1"), KEEP_RETIRED);
    Router b = router(log, "b", prefixYaml("pool: p, routerId: b, flushIntervalMillis: 1"),
        KEEP_RETIRED);
    Map<String, Integer> aOpen = new HashMap<>();
    openRequest(a, 1, aOpen);
    await("b counts a's open request", () -> countsOf(b, aOpen));
    String idBefore = replication(a).settings().routerId();

    RedisReplication replacement = reload(a,
        prefixYaml("pool: p, flushIntervalMillis: 1, batchSize: 128"));
    // connected, the new instance publishes: the one it replaced has let go
    await("the new instance is connected", replacement::connected);
    openAndAwaitItsPrefix(a, b, aOpen);
    await("b read everything written so far", () -> replication(b).entriesRead() >= log.size());
    assertThat(inFlightOf(b)).as("b's count of a's open requests").isEqualTo(aOpen);
    assertThat(replacement.settings().routerId()).as("the default routerId survives a reload")
        .isEqualTo(idBefore);
  }

  @Test
  void aReloadThatChangesTheRouterIdCountsTheRoutersRequestsOnce() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "a", prefixYaml("pool: p, routerId: a1, flushIntervalMillis: 1"),
        KEEP_RETIRED);
    Router b = router(log, "b", prefixYaml("pool: p, routerId: b, flushIntervalMillis: 1"),
        KEEP_RETIRED);
    Map<String, Integer> aOpen = new HashMap<>();
    openRequest(a, 1, aOpen);
    await("b counts a's open request", () -> countsOf(b, aOpen));

    RedisReplication replacement = reload(a,
        prefixYaml("pool: p, routerId: a2, flushIntervalMillis: 1"));
    // connected, the new instance publishes: the one it replaced has let go
    await("the new instance is connected", replacement::connected);
    openAndAwaitItsPrefix(a, b, aOpen);
    await("b read everything written so far", () -> replication(b).entriesRead() >= log.size());
    assertThat(inFlightOf(b)).as("b's count of a's open requests").isEqualTo(aOpen);
    assertThat(replacement.published()).isPositive();
  }

  /**
   * The replaced instance is closed after the retirement delay: under the routerId it shares
   * with its successor, a farewell of zeros would erase the figures the successor sent.
   */
  @Test
  void theReplacedInstanceClosingDoesNotEraseTheRoutersFigures() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "a", prefixYaml("pool: p, flushIntervalMillis: 1"), Duration.ZERO);
    Router b = router(log, "b", prefixYaml("pool: p, routerId: b, flushIntervalMillis: 1"),
        KEEP_RETIRED);
    Map<String, Integer> aOpen = new HashMap<>();
    openRequest(a, 1, aOpen);
    await("b counts a's open request", () -> countsOf(b, aOpen));
    RedisReplication before = replication(a);

    RedisReplication replacement = reload(a,
        prefixYaml("pool: p, flushIntervalMillis: 1, batchSize: 128"));
    await("the replaced instance is closed", before::closed);
    long prefixes = replication(b).appliedPrefixes();
    openRequest(a, 2, aOpen); // its prefix, sent after the close, is b's marker
    await("b applied the marker", () -> replication(b).appliedPrefixes() > prefixes);
    assertThat(replacement.published()).isPositive();
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
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "a", prefixYaml("pool: p, flushIntervalMillis: 1"), KEEP_RETIRED);
    // b forgets a silent router only after five of its heartbeats (50 minutes): only a farewell
    // takes a's figures off b within the test
    Router b = router(log, "b", prefixYaml("pool: p, routerId: b, flushIntervalMillis: 1,"
        + " heartbeatMillis: 600000"), KEEP_RETIRED);
    Map<String, Integer> aOpen = new HashMap<>();
    openRequest(a, 1, aOpen);
    await("b counts a's open request", () -> countsOf(b, aOpen));
    RedisReplication replacement = reload(a,
        prefixYaml("pool: p, flushIntervalMillis: 1, batchSize: 128"));
    await("the new instance is connected", replacement::connected);
    openAndAwaitItsPrefix(a, b, aOpen);
    int connects = log.connects();

    a.close();
    assertThat(log.connects()).as("connections made while the router closed")
        .isEqualTo(connects);
    await("b no longer counts a's requests", () -> countsOf(b, Map.of()));
  }

  /** A reload that fails closes the instance it created: the running one must go on publishing. */
  @Test
  void aFailedReloadLeavesTheRunningInstancePublishing() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "a", prefixYaml("pool: p, flushIntervalMillis: 1"), KEEP_RETIRED);
    Router b = router(log, "b", prefixYaml("pool: p, routerId: b, flushIntervalMillis: 1"),
        KEEP_RETIRED);
    Map<String, Integer> aOpen = new HashMap<>();
    openRequest(a, 1, aOpen);
    await("b counts a's open request", () -> countsOf(b, aOpen));
    RedisReplication running = replication(a);

    Result<RouterConfig> failed = a.reconfigure(yaml("prefix-cache-scorer",
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
    InMemoryLog log = new InMemoryLog();
    // a fixed routerId: the new instance skips the old one's batches as its own
    String params = "pool: p, routerId: a, flushIntervalMillis: 1";
    Router a = router(log, "a", yaml("session-affinity-scorer", params, ""), KEEP_RETIRED);
    RoutingDecision own = a.route(session("s2"));
    String mine = own.primary().id();
    own.onComplete(new Usage(1, 0, 1));
    await("a published its binding", () -> sessionsIn(log, "a").contains("s2 " + mine));
    String other = mine.equals("10.2.0.5:8000") ? "10.2.0.6:8000" : "10.2.0.5:8000";
    // another router's move of s2, captured before a's binding, reaches the stream late
    log.append(sessionBatch("y", RedisReplication.epochMicros() - 30_000_000, "s2", other));
    await("a skipped the older move", () -> replication(a).staleSessions() == 1);

    RedisReplication replacement = reload(a,
        yaml("session-affinity-scorer", params + ", batchSize: 128", ""));
    // connected, the new instance reads: the one it replaced has let go
    await("the new instance is connected", replacement::connected);
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

  private static byte[] sessionBatch(String router, long atMicros, String key, String endpoint) {
    HintCodec.Writer w = new HintCodec.Writer();
    w.session(atMicros, key, endpoint);
    return w.finish("p", router, RedisReplication.epochMicros());
  }

  private static InferenceRequest session(String key) {
    return InferenceRequest.builder().model("m").prompt("hi").sessionKey(key).maxTokens(4)
        .build();
  }

  private static String primaryOf(Router r, String sessionKey) {
    RoutingDecision d = r.route(session(sessionKey));
    d.onComplete(new Usage(1, 0, 1));
    return d.primary().id();
  }
}
