package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Result;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Ticker;
import io.epp4j.api.Usage;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import io.epp4j.testkit.CapturedLog;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The replication's own rules, over an in-memory log instead of Redis. */
class ReplicationLogicTest {
  private final List<Router> routers = new ArrayList<>();

  @AfterEach
  void close() {
    routers.forEach(Router::close);
  }

  Router router(InMemoryLog log, String pool, String id, int capacity) {
    return prefixRouter(log, id, "pool: %s, routerId: %s, flushIntervalMillis: 1, queueCapacity: %d"
        .formatted(pool, id, capacity));
  }

  /** A prefix-cache router whose redis-replication has the given parameters (YAML flow map body). */
  Router prefixRouter(InMemoryLog log, String id, String replicationParameters) {
    return router(log, id, configYaml("prefix-cache-scorer", replicationParameters, ""));
  }

  /**
   * A configuration of one profile, {@code scorer} and max-score-picker, beside redis-replication
   * with the given parameters (YAML flow map body) and {@code extraPlugin} (YAML list items).
   */
  static String configYaml(String scorer, String replicationParameters, String extraPlugin) {
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

  /** A router of eight endpoints on the in-memory log, with the given configuration. */
  Router router(InMemoryLog log, String id, String yaml) {
    Router r = Router.builder().endpoints(eightEndpoints())
        .registry(PluginRegistry.fromServiceLoader()
            .with(new RedisReplication.Provider(log::factory)))
        .configYaml(yaml, id).randomSeed(id.hashCode()).build();
    routers.add(r);
    return r;
  }

  /** 10.2.0.1:8000 to 10.2.0.8:8000. */
  static List<Endpoint> eightEndpoints() {
    List<Endpoint> eps = new ArrayList<>();
    for (int i = 0; i < 8; i++) {
      eps.add(Endpoint.parse("10.2.0." + (i + 1) + ":8000"));
    }
    return eps;
  }

  /** Routers whose decisions name a fallback and bind sessions (session-affinity-scorer). */
  Router sessionRouter(InMemoryLog log, String id) {
    return sessionRouter(log, id, "");
  }

  /** The same, with more parameters of redis-replication ({@code ", name: value"...}). */
  Router sessionRouter(InMemoryLog log, String id, String moreParameters) {
    String yaml = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: session-affinity-scorer
        - type: max-score-picker
          parameters: {maxNumOfEndpoints: 2}
        - type: redis-replication
          parameters: {pool: p, routerId: %s, flushIntervalMillis: 1%s}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: session-affinity-scorer
          - pluginRef: max-score-picker
        """.formatted(id, moreParameters);
    return router(log, id, yaml);
  }

  @Test
  void aSessionAFallbackServedIsBoundThereOnTheOtherRoutersToo() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = sessionRouter(log, "a");
    Router b = sessionRouter(log, "b");
    InferenceRequest r = InferenceRequest.builder().model("m").prompt("hi").sessionKey("s1")
        .maxTokens(4).build();
    RoutingDecision d = a.route(r);
    await("b applied a's session", () -> replication(b).appliedSessions() == 1);
    Endpoint fallback = d.endpoints().get(1);
    d.onFallback(fallback); // the primary could not be reached
    d.onComplete(new Usage(1, 0, 1));
    await("b applied the move", () -> replication(b).appliedSessions() == 2);
    for (int i = 0; i < 3; i++) {
      RoutingDecision next = b.route(r);
      assertThat(next.primary()).isEqualTo(fallback);
      next.onComplete(new Usage(1, 0, 1));
    }
  }

  /**
   * A session key longer than any router shares, on a route with no prompt blocks to share: the
   * route has nothing to send, so it queues nothing. It used to queue a hint of no record, which
   * held one of the queue's places (while Redis is away, until the publisher came back) and which
   * a full queue turned away without counting a record.
   */
  @Test
  void aRouteWithOnlyASessionKeyTooLongToShareQueuesNothing() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.down(); // nothing leaves the queue
    Router a = sessionRouter(log, "a");
    RedisReplication ra = replication(a);
    a.route(session("k".repeat(HintCodec.MAX_SESSION_KEY_CHARS + 1))).onComplete(
        new Usage(1, 0, 1));
    a.route(session("short")).onComplete(new Usage(1, 0, 1));
    assertThat(ra.queued()).as("hints queued: the short session's only").isEqualTo(1);
  }

  /**
   * An endpoint whose id is longer than a batch holds (65,535 bytes in modified UTF-8): its
   * in-flight figure made every flush throw before anything was sent, so none of the router's
   * figures, and none of the hints queued behind them, went out, and a failure was logged as
   * unexpected again and again. Its records are now left out and counted dropped, said once, and
   * every other endpoint's figures and hints go out.
   */
  @Test
  void anEndpointIdTooLongForABatchIsLeftOutAndTheRestStillGoesOut() throws Exception {
    CapturedLog logged = CapturedLog.of(RedisReplication.class.getName());
    List<RoutingDecision> open = new ArrayList<>();
    try {
      InMemoryLog log = new InMemoryLog();
      String longId = "e".repeat(HintCodec.MAX_STRING_BYTES + 1);
      Endpoint tooLong = new Endpoint(longId, "10.2.0.9", 8000, Map.of());
      String yaml = configYaml("session-affinity-scorer",
          "pool: p, routerId: a, flushIntervalMillis: 1, heartbeatMillis: 50", "");
      Router a = Router.builder().endpoints(List.of(tooLong, Endpoint.parse("10.2.0.1:8000")))
          .registry(PluginRegistry.fromServiceLoader()
              .with(new RedisReplication.Provider(log::factory)))
          .configYaml(yaml, "a").randomSeed(1).build();
      routers.add(a);
      Router b = sessionRouter(log, "b");
      // requests left open on both endpoints, each of a new session
      int onLong = 0;
      int onShort = 0;
      for (int i = 0; i < 200 && (onLong < 2 || onShort < 2); i++) {
        RoutingDecision d = a.route(session("s" + i));
        open.add(d);
        if (d.primary().id().equals(longId)) {
          onLong++;
        } else {
          onShort++;
        }
      }
      assertThat(onLong).as("requests on the long id").isGreaterThanOrEqualTo(2);
      assertThat(onShort).as("requests on 10.2.0.1:8000").isGreaterThanOrEqualTo(2);
      int shortOpen = onShort;
      RedisReplication ra = replication(a);
      await("b counts a's requests on 10.2.0.1:8000",
          () -> inFlight(b, "10.2.0.1:8000") == shortOpen);
      await("b applied a's sessions on 10.2.0.1:8000",
          () -> replication(b).appliedSessions() == shortOpen);
      // the long id's session moves, and its figure at least twice (a change, then heartbeats)
      int longOpen = onLong;
      await("a counted the long id's records dropped", () -> ra.dropped() >= longOpen + 2);
      assertThat(ra.errors("publisher")).as("unexpected failures of a's publisher").isZero();
      List<String> said = logged.records().stream()
          .filter(m -> m.contains("endpoint_id_too_long")).toList();
      assertThat(said).hasSize(1);
      assertThat(said.get(0)).contains(HintCodec.MAX_STRING_BYTES + 1 + " bytes")
          .hasSizeLessThan(1000);
    } finally {
      logged.close();
      open.forEach(d -> d.onComplete(new Usage(1, 0, 1)));
    }
  }

  /**
   * A P/D route whose prefill endpoint has an id longer than a batch holds: the prefix for its
   * decode endpoint still goes out, and the one for the prefill endpoint is left out, counted
   * once as dropped (endpoint_id_too_long) and not as a failure of the publisher.
   */
  @Test
  void aPrefillEndpointIdTooLongForABatchIsLeftOutAndCountedOnce() throws Exception {
    CapturedLog logged = CapturedLog.of(RedisReplication.class.getName());
    try {
      InMemoryLog log = new InMemoryLog();
      Router a = router(log, "p", "a", 1000);
      Router b = router(log, "p", "b", 1000);
      String longId = "p".repeat(HintCodec.MAX_STRING_BYTES + 1);
      Endpoint prefill = new Endpoint(longId, "10.2.0.9", 8000, Map.of());
      Endpoint decode = Endpoint.parse("10.2.0.1:8000");
      RedisReplication ra = replication(a);
      int n = 3;
      for (int i = 0; i < n; i++) {
        io.epp4j.api.CycleState state =
            new io.epp4j.api.CycleState(System.nanoTime(), new Random(i));
        state.put(io.epp4j.api.PrefixBlocks.KEY,
            io.epp4j.api.PrefixBlocks.of(16, new long[] {10L * i + 1, 10L * i + 2}));
        Map<String, io.epp4j.api.ProfileResult> results = new java.util.LinkedHashMap<>();
        results.put("decode", new io.epp4j.api.ProfileResult("decode", List.of(decode)));
        results.put("prefill", new io.epp4j.api.ProfileResult("prefill", List.of(prefill)));
        ra.afterRouting(prompt(i), state, RoutingDecision.routed("decode", results));
      }
      await("b applied the decode endpoints' prefixes",
          () -> replication(b).appliedPrefixes() == n);
      await("a counted the prefill prefixes dropped", () -> ra.dropped() >= n);
      // a counts a batch published once its append returns, which b may read before that
      await("a counted the decode prefixes published", () -> ra.published() >= n);
      assertThat(ra.published()).as("records a published").isEqualTo(n);
      assertThat(ra.dropped()).as("records a dropped").isEqualTo(n);
      assertThat(ra.errors("publisher")).as("unexpected failures of a's publisher").isZero();
      List<String> said = logged.records().stream()
          .filter(m -> m.contains("endpoint_id_too_long")).toList();
      assertThat(said).hasSize(1);
    } finally {
      logged.close();
    }
  }

  /**
   * Redis away long enough for the queue to fill: what the others learn once it is back must be
   * the newest hints (the sessions and prefixes routed last), not the outage's first ones while
   * every later hint is turned away. The oldest make room, counted as dropped.
   */
  @Test
  void aQueueFullWhileRedisIsAwayMakesRoomForTheNewestHints() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = sessionRouter(log, "a", ", heartbeatMillis: 20, queueCapacity: 4");
    Router b = sessionRouter(log, "b");
    await("both connected", () -> replication(a).connected() && replication(b).connected());
    log.down();
    RedisReplication ra = replication(a);
    // the publisher finds the outage when it next sends: a request left in flight (no session,
    // no prefix: no hint) changes the figures it sends
    int tried = log.appendsTried();
    RoutingDecision open = a.route(InferenceRequest.builder().model("m").prompt("hi")
        .maxTokens(4).build());
    await("a's publisher found the outage", () -> log.appendsTried() > tried);
    for (int i = 0; i < 5; i++) {
      primaryOf(a, "s" + i);
    }
    // s0 to s3 filled the queue and s4 was turned away: the oldest, s0, makes room
    await("a made room in its queue", () -> ra.queued() < 4);
    String newest = primaryOf(a, "s5");
    assertThat(ra.queued()).isEqualTo(4);
    log.up();
    await("b applied what a kept", () -> replication(b).appliedSessions() == 4);
    assertThat(ra.dropped()).as("s4 turned away, s0 dropped to make room").isEqualTo(2);
    assertThat(primaryOf(b, "s5")).as("the session a routed last").isEqualTo(newest);
    open.onComplete(new Usage(1, 0, 1));
  }

  @Test
  void hintsQueuedWhileRedisIsAwayAtCloseAreCountedDropped() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = sessionRouter(log, "a");
    await("a is connected", () -> replication(a).connected());
    log.down();
    await("a noticed the outage", () -> !replication(a).connected());
    for (int i = 0; i < 3; i++) {
      a.route(InferenceRequest.builder().model("m").prompt("hi").sessionKey("s" + i)
          .maxTokens(4).build()).onComplete(new Usage(1, 0, 1));
    }
    RedisReplication ra = replication(a);
    a.close();
    // one session record each, which no instance of this router will send now
    assertThat(ra.dropped()).isEqualTo(3);
    assertThat(ra.published()).isZero();
  }

  @Test
  void aSessionMoveThatReachesTheStreamLateDoesNotUndoANewerOne() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router b = sessionRouter(log, "b");
    long now = RedisReplication.epochMicros();
    // router x moved s1 to .2 a second ago; router y moved it to .1 a minute ago, kept the move
    // through an outage and publishes it only now
    log.append(sessionBatch("x", now - 1_000_000, "s1", "10.2.0.2:8000"));
    log.append(sessionBatch("y", now - 60_000_000, "s1", "10.2.0.1:8000"));
    await("b read both", () -> replication(b).appliedSessions()
        + replication(b).staleSessions() == 2);
    assertThat(replication(b).staleSessions()).isEqualTo(1);
    assertThat(primaryOf(b, "s1")).isEqualTo("10.2.0.2:8000");

    // b's own binding is newer than a move captured before it, and older than one after it
    String mine = primaryOf(b, "s2");
    // the session record itself: the router counts the request before its listeners queue the
    // hint, so a batch of the in-flight figure alone can be published first
    await("b published its binding", () -> sessionsIn(log, "b").contains("s2 " + mine));
    String other = otherThan(mine);
    long before = RedisReplication.epochMicros() - 30_000_000;
    log.append(sessionBatch("y", before, "s2", other));
    await("b read the late move", () -> replication(b).staleSessions() == 2);
    assertThat(primaryOf(b, "s2")).isEqualTo(mine);
    log.append(sessionBatch("x", RedisReplication.epochMicros(), "s2", other));
    await("b applied the newer move", () -> replication(b).appliedSessions() == 2);
    assertThat(primaryOf(b, "s2")).isEqualTo(other);
  }

  /**
   * A session move stamped in the future (a router whose clock is far ahead, a version that
   * wrote another unit, an entry written by hand) must not outrank every later move of the
   * session: it counts as captured when it is read, at the latest.
   */
  @Test
  void aSessionMoveCapturedInTheFutureDoesNotPinTheSession() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router b = sessionRouter(log, "b");
    log.append(sessionBatch("y", RedisReplication.epochMicros() + 3_600_000_000L, "s1",
        "10.2.0.1:8000"));
    await("b applied y's move", () -> replication(b).appliedSessions() == 1);
    // x's move is captured after b read y's: b took its own clock's reading before it counted y's
    // move as applied, and a capture at the same microsecond does not count as earlier
    log.append(sessionBatch("x", RedisReplication.epochMicros(), "s1", "10.2.0.2:8000"));
    await("b read x's move", () -> replication(b).appliedSessions()
        + replication(b).staleSessions() == 2);
    assertThat(replication(b).staleSessions()).as("x's later move skipped as stale").isZero();
    assertThat(primaryOf(b, "s1")).isEqualTo("10.2.0.2:8000");
  }

  @Test
  void aRouterWhoseOwnMoveWaitedWhileItReadAnOlderOnePutsItsOwnBack() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router b = sessionRouter(log, "b");
    await("b connected", () -> replication(b).connected());
    // b's publisher is stuck in a slow write, so the hint of its next move waits in its queue
    log.holdAppends();
    primaryOf(b, "warm");
    await("b's publisher is held", () -> log.appendsWaiting() == 1);
    long before = RedisReplication.epochMicros();
    String mine = primaryOf(b, "s3");
    // meanwhile b reads y's move of s3, captured a second before b's: it applies it, not yet
    // knowing of its own newer one
    String other = otherThan(mine);
    log.append(sessionBatch("y", before - 1_000_000, "s3", other));
    await("b applied y's move", () -> replication(b).appliedSessions() == 1);
    log.releaseAppends();
    // b sends its own move after handling it (so b has put it back, if it does, by then)
    await("b sent its own move", () -> sessionsIn(log, "b").contains("s3 " + mine));
    assertThat(primaryOf(b, "s3")).isEqualTo(mine);
  }

  /**
   * The records of one batch: "key endpoint" of each session move, "endpoint requests" of each
   * in-flight figure.
   */
  record BatchRecords(List<String> sessions, List<String> inFlight, List<long[]> prefixes) {}

  /** The records of every batch router {@code origin} wrote to the log, batch by batch. */
  static List<BatchRecords> batchesOf(InMemoryLog log, String origin) {
    List<BatchRecords> found = new ArrayList<>();
    for (byte[] batch : log.batches()) {
      try {
        var in = HintCodec.input(batch);
        HintCodec.Header h = HintCodec.header(in);
        if (!h.origin().equals(origin)) {
          continue;
        }
        BatchRecords records = new BatchRecords(new ArrayList<>(), new ArrayList<>(),
            new ArrayList<>());
        HintCodec.records(in, h, new HintCodec.Visitor() {
          @Override
          public void prefix(long at, String ep, int bs, long[] hashes) {
            records.prefixes().add(hashes.clone());
          }

          @Override
          public void session(long at, String key, String ep) {
            records.sessions().add(key + " " + ep);
          }

          @Override
          public void inFlight(String ep, int r, long t) {
            records.inFlight().add(ep + " " + r);
          }
        });
        found.add(records);
      } catch (HintCodec.MalformedBatchException e) {
        throw new AssertionError(e);
      }
    }
    return found;
  }

  /** "key endpoint" of every session record router {@code origin} wrote to the log. */
  static List<String> sessionsIn(InMemoryLog log, String origin) {
    return batchesOf(log, origin).stream().flatMap(b -> b.sessions().stream()).toList();
  }

  @Test
  void sessionTimesKeepTheNewestBindingOfABoundedNumberOfSessions() {
    RedisReplication.SessionTimes t = new RedisReplication.SessionTimes(2);
    assertThat(t.remote("a", 10, 100)).isTrue();
    assertThat(t.remote("a", 9, 101)).isFalse();
    assertThat(t.remote("a", 10, 102)).isTrue(); // equal: not earlier
    // a local binding made at 50, before the remote one of 10 took effect (at 102): recorded
    assertThat(t.local("b", 50, 60)).isEqualTo(RedisReplication.SessionTimes.RECORDED);
    // a local binding made at 20, after a's remote capture (10) but before it took effect (102)
    assertThat(t.local("a", 20, 110)).isEqualTo(RedisReplication.SessionTimes.OVERRIDDEN);
    assertThat(t.local("a", 5, 120)).isEqualTo(RedisReplication.SessionTimes.STALE);
    assertThat(t.remote("a", 15, 130)).isFalse(); // older than the local 20
    assertThat(t.local("c", 1, 2)).isEqualTo(RedisReplication.SessionTimes.RECORDED);
    assertThat(t.size()).isEqualTo(2); // b, the least recently used, is forgotten
    assertThat(t.remote("b", 0, 140)).isTrue(); // forgotten: any time is taken
  }

  /**
   * A failover to a server whose clock is a minute behind the old one's: the reader reads the new
   * server's {@code TIME} when it reconnects. A session bound a second before the failover kept
   * its time on the old clock, a minute ahead of any move made on the new one, so another
   * router's move of it a second and a half later was ignored as stale for a minute. The known
   * times move with the log's clock; readings that agree with this router's monotonic clock, and
   * so a move older than the binding, are left as they are.
   */
  @Test
  void sessionTimesMoveWithTheLogsClockWhenAFailoverStepsItBack() {
    RedisReplication.SessionTimes t = new RedisReplication.SessionTimes(16);
    long real = 1_800_000_000_000L; // ms, the new server's clock
    long ahead = 60_000; // the old server's clock, ms ahead of it
    long nanos = 7_000_000_000L; // this router's monotonic clock
    long roundTrip = 200_000; // ns
    t.logClockRead(real + ahead, 0, 0, nanos, nanos + roundTrip);
    long boundAt = (real + ahead - 1_000) * 1000; // on the old server's clock, µs
    assertThat(t.remote("s1", boundAt, boundAt)).isTrue();
    assertThat(t.remote("s2", boundAt, boundAt)).isTrue();
    // a heartbeat later, on the old server still: its clock went on with this router's
    t.logClockRead(real + ahead + 1_000, 0, 0, nanos + 1_000_000_000L,
        nanos + 1_000_000_000L + roundTrip);
    assertThat(t.remote("s2", boundAt - 1, boundAt)).as("a move older than the binding")
        .isFalse();
    // another second later, on the new server
    t.logClockRead(real + 2_000, 0, 0, nanos + 2_000_000_000L,
        nanos + 2_000_000_000L + roundTrip);
    long movedAt = (real + 2_500) * 1000; // another router's move, on the new server's clock
    assertThat(t.remote("s1", movedAt, movedAt)).as("a move 3.5 s after the binding").isTrue();
    // the binding of s2, moved onto the new clock, still outranks a move made before it
    long beforeBinding = (real - 1_500) * 1000;
    assertThat(t.remote("s2", beforeBinding, movedAt)).as("a move before the binding").isFalse();
  }

  /**
   * The log's clock moving ahead of this router's monotonic clock (a host suspended, whose
   * monotonic clock stood still, or a server whose clock is ahead) leaves the known times as they
   * are: moved ahead with it, a binding would outrank the moves made in the time the router did
   * not count.
   */
  @Test
  void sessionTimesStayWhenTheLogsClockMovesAhead() {
    RedisReplication.SessionTimes t = new RedisReplication.SessionTimes(16);
    long log = 1_800_000_000_000L; // ms
    long nanos = 7_000_000_000L;
    t.logClockRead(log, 0, 0, nanos, nanos + 200_000);
    long boundAt = (log - 1_000) * 1000;
    assertThat(t.remote("s1", boundAt, boundAt)).isTrue();
    // a second on this router's monotonic clock, ten minutes on the log's
    t.logClockRead(log + 600_000, 0, 0, nanos + 1_000_000_000L, nanos + 1_000_200_000L);
    long movedAt = (log + 1_000) * 1000; // another router's move, in the ten minutes
    assertThat(t.remote("s1", movedAt, movedAt)).as("a move 2 s after the binding").isTrue();
  }

  /** A batch of router {@code router} in pool p holding one prefix record (hashes 1, 2, 3). */
  static byte[] prefixBatch(String router, String endpoint) {
    HintCodec.Writer w = new HintCodec.Writer();
    w.prefix(RedisReplication.epochMicros(), endpoint, 16, new long[] {1, 2, 3});
    return w.finish("p", router, RedisReplication.epochMicros());
  }

  /** A batch of router {@code router} in pool p holding one session move. */
  static byte[] sessionBatch(String router, long atMicros, String key, String endpoint) {
    HintCodec.Writer w = new HintCodec.Writer();
    w.session(atMicros, key, endpoint);
    return w.finish("p", router, RedisReplication.epochMicros());
  }

  static InferenceRequest session(String key) {
    return InferenceRequest.builder().model("m").prompt("hi").sessionKey(key).maxTokens(4)
        .build();
  }

  /** Routes a request of session {@code sessionKey} on {@code r}, ends it, names its primary. */
  static String primaryOf(Router r, String sessionKey) {
    RoutingDecision d = r.route(session(sessionKey));
    d.onComplete(new Usage(1, 0, 1));
    return d.primary().id();
  }

  /** An endpoint other than {@code endpointId}: 10.2.0.5:8000, or 10.2.0.6:8000 if it is that. */
  static String otherThan(String endpointId) {
    return endpointId.equals("10.2.0.5:8000") ? "10.2.0.6:8000" : "10.2.0.5:8000";
  }

  static RedisReplication replication(Router r) {
    return (RedisReplication) r.config().plugins().get(RedisReplication.TYPE);
  }

  static InferenceRequest prompt(long seed) {
    Random rnd = new Random(seed);
    int[] ids = new int[256];
    for (int i = 0; i < ids.length; i++) {
      ids[i] = rnd.nextInt(50_000);
    }
    return InferenceRequest.builder().model("m").tokenIds(ids).maxTokens(8).build();
  }

  static void await(String what, BooleanSupplier c) throws InterruptedException {
    // 30 s: after an outage a reader may sit out a 5 s backoff, and a loaded 2-core machine can
    // stretch the rest several times over; a condition that holds returns at once
    long deadline = System.nanoTime() + 30_000_000_000L;
    while (!c.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("timed out waiting until " + what);
      }
      Thread.sleep(1);
    }
  }

  @Test
  void hintsReachOnlyOtherRoutersOfTheSamePool() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "p1", "a", 1000);
    Router b = router(log, "p1", "b", 1000);
    Router other = router(log, "p2", "x", 1000);
    String chosen = null;
    for (int i = 0; i < 5; i++) {
      RoutingDecision d = a.route(prompt(i));
      chosen = d.primary().id();
      d.onComplete(new Usage(1, 0, 1));
    }
    await("b applied a's prefixes", () -> replication(b).appliedPrefixes() >= 5);
    // the log is shared: the other pool read the same batches and applied none
    // the other pool's reader has handled every batch in the log, a's included
    int written = log.size();
    assertThat(written).isGreaterThanOrEqualTo(1);
    await("the other pool read past a's batches",
        () -> replication(other).entriesRead() >= written);
    assertThat(replication(other).applied()).isZero();
    assertThat(replication(a).appliedPrefixes()).as("a's own hints").isZero();
    assertThat(b.route(prompt(4)).primary().id()).isEqualTo(chosen);
  }

  /**
   * Requests that reach two routers within the replication delay (a burst, or Redis away): each
   * places a prompt it knows nothing of, and where every endpoint ties, both must choose the
   * same one, or the prompt's prefix is prefilled and cached twice.
   */
  @Test
  void routersThatShareStateBreakTiesAlikeForAPromptNeitherHasHeardOf() {
    InMemoryLog log = new InMemoryLog();
    log.down(); // nothing replicates: each router decides on its own
    Router a = router(log, "p1", "a", 1000);
    Router b = router(log, "p1", "b", 1000);
    java.util.Set<String> used = assertBothPickAlike(a, b, 40_000, 40);
    // agreement by spreading, not by sending everything to one endpoint
    assertThat(used).hasSizeGreaterThanOrEqualTo(5);
  }

  /**
   * The same with token-cost-picker, whose costs differ between routers by each one's own
   * pending prefill: a prompt no endpoint holds still goes to the same endpoint on both, as long
   * as that endpoint is not much dearer than the cheapest.
   */
  @Test
  void tokenCostPickersThatShareStateAgreeOnAPromptNeitherHasHeardOf() {
    InMemoryLog log = new InMemoryLog();
    log.down();
    String yaml = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: prefix-cache-scorer
        - type: token-cost-picker
        - type: redis-replication
          parameters: {pool: p1, routerId: %s, flushIntervalMillis: 1}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: prefix-cache-scorer
          - pluginRef: token-cost-picker
        """;
    Router a = router(log, "a", yaml.formatted("a"));
    Router b = router(log, "b", yaml.formatted("b"));
    List<RoutingDecision> open = new ArrayList<>();
    // a has a request of its own waiting for prefill that b knows nothing of
    open.add(a.route(RedisReplicationTest.prompt(41_000, 1024, null)));
    java.util.Set<String> used = assertBothPickAlike(a, b, 42_000, 30);
    assertThat(used).hasSizeGreaterThanOrEqualTo(5);
    open.forEach(d -> d.onComplete(RedisReplicationTest.DONE));
  }

  /**
   * Routes the {@code count} prompts of seeds {@code firstSeed} on, on {@code a} and on {@code b}:
   * each prompt's primary must be the same on both. The endpoints they went to.
   */
  private static java.util.Set<String> assertBothPickAlike(Router a, Router b, int firstSeed,
      int count) {
    java.util.Set<String> used = new java.util.HashSet<>();
    for (int i = 0; i < count; i++) {
      RoutingDecision da = a.route(RedisReplicationTest.prompt(firstSeed + i, 1024, null));
      RoutingDecision db = b.route(RedisReplicationTest.prompt(firstSeed + i, 1024, null));
      assertThat(db.primary().id()).as("prompt %d", i).isEqualTo(da.primary().id());
      used.add(da.primary().id());
      da.onComplete(RedisReplicationTest.DONE);
      db.onComplete(RedisReplicationTest.DONE);
    }
    return used;
  }

  @Test
  void aRouterThatSharesNothingKeepsTheRandomTieBreak() {
    String yaml = """
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
        """;
    List<String> picks = new ArrayList<>();
    for (String seed : List.of("a", "b")) {
      Router r = Router.builder().endpoints(eightEndpoints()).configYaml(yaml, seed)
          .randomSeed(seed.hashCode()).build();
      routers.add(r);
      StringBuilder sb = new StringBuilder();
      for (int i = 0; i < 40; i++) {
        RoutingDecision d = r.route(RedisReplicationTest.prompt(40_000 + i, 1024, null));
        sb.append(d.primary().id()).append(' ');
        d.onComplete(RedisReplicationTest.DONE);
      }
      picks.add(sb.toString());
    }
    // the seeds decide: two seeds agreeing on 40 random 1-in-8 draws has probability 8^-40
    assertThat(picks.get(1)).isNotEqualTo(picks.get(0));
  }

  @Test
  void aFullQueueDropsAndCountsInsteadOfBlockingTheRoute() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.down();
    int capacity = 100;
    Router a = router(log, "p", "a", capacity);
    for (int i = 0; i < 3 * capacity; i++) {
      RoutingDecision d = a.route(prompt(i));
      assertThat(d.isRouted()).isTrue();
      d.onComplete(new Usage(1, 0, 1));
    }
    // each route one prefix record: queued, or dropped (turned away by the full queue, or among
    // the oldest that the publisher, waiting for Redis, drops to make room for newer ones)
    assertThat(replication(a).queued()).isBetween(capacity * 3 / 4, capacity);
    await("every record queued or counted dropped",
        () -> replication(a).dropped() + replication(a).queued() == 3L * capacity);
    assertThat(replication(a).connected()).isFalse();
  }

  /**
   * Published, applied and dropped count the same thing, records (one prefix for one endpoint,
   * one session move, one in-flight figure), so they can be compared: a route with a prefix and
   * a session that finds the queue full drops the two records it would have sent, not one.
   */
  @Test
  void aDroppedHintCountsTheRecordsItWouldHaveSentAsPublishedAndAppliedDo() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.down();
    int capacity = 50;
    Router a = router(log, "p", "a", capacity);
    for (int i = 0; i < 3 * capacity; i++) {
      RoutingDecision d = a.route(RedisReplicationTest.prompt(i, 256, "session-" + i));
      assertThat(d.isRouted()).isTrue();
      d.onComplete(new Usage(1, 0, 1));
    }
    // each route found the queue full (or was among the oldest dropped to make room for newer
    // ones while Redis is away) or waits: dropped counts two records for each that does not wait
    await("records dropped, two per hint that does not wait",
        () -> replication(a).dropped() == 2L * (3 * capacity - replication(a).queued()));
    // the ones that waited are published as the same two records each, and applied as such
    log.up();
    Router b = router(log, "p", "b", capacity);
    await("b applied a's waiting hints", () -> replication(b).appliedPrefixes()
        + replication(b).appliedSessions() + replication(a).dropped() == 2L * 3 * capacity);
    long dropped = replication(a).dropped();
    assertThat(dropped).as("records dropped").isBetween(2L * 2 * capacity, 2L * 3 * capacity);
    // at least those records (in-flight figures, also records, may go out beside them); a counts
    // a batch once the append has returned, which can be after b has read it, so this waits too
    await("a counted the records it published",
        () -> replication(a).published() >= 2L * 3 * capacity - dropped);
    assertThat(replication(a).dropped()).as("records dropped, unchanged by the publishing")
        .isEqualTo(dropped);
  }

  /**
   * A Redis that accepts connections but refuses the commands (out of memory with
   * {@code noeviction}, a read-only replica, an ACL without XADD or XREAD): each failed command
   * must be followed by the backoff, not by a new connection at once, or both threads reconnect
   * in a loop that burns a core and floods the server with connections.
   */
  @Test
  void commandsThatFailOnAFreshConnectionAreRetriedWithBackoff() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.refuseCommands(true);
    Router a = router(log, "p", "a", 1000);
    RoutingDecision open = a.route(prompt(1)); // an in-flight figure the publisher keeps sending
    int attempts = 4;
    for (String thread : List.of("epp4j-redis-replication-publish",
        "epp4j-redis-replication-read")) {
      await(thread + " connected " + attempts + " times",
          () -> log.connectTimes(thread).size() >= attempts);
      List<Long> times = log.connectTimes(thread);
      for (int i = 1; i < attempts; i++) {
        // the backoff doubles from 100 ms and waits at least half of each step (jitter), at most
        // a heartbeat: a wait a loaded machine can only make longer
        long least = Math.min(RedisReplication.INITIAL_BACKOFF_NANOS / 2 << (i - 1),
            RedisReplication.DEFAULT_HEARTBEAT_MILLIS * 1_000_000L);
        assertThat(times.get(i) - times.get(i - 1))
            .as("%s: nanoseconds between connection %d and %d", thread, i, i + 1)
            .isGreaterThanOrEqualTo(least);
      }
    }
    open.onComplete(new Usage(1, 0, 1));
    assertThat(replication(a).connected()).isFalse();
  }

  /**
   * A batch Redis did not take loses the hints drained into it, and those are counted
   * ({@code reason=publish_failed}). Its in-flight figures are not lost: the publisher keeps what
   * it last sent and sends them again with the next batch, so they are not counted, however many
   * attempts fail.
   */
  @Test
  void aFailedPublishCountsTheHintsItLostNotTheInFlightFiguresItSendsAgain() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.refuseCommands(true);
    Router a = router(log, "p", "a", 1000);
    Router b = router(log, "p", "b", 1000);
    // one hint, and an in-flight figure that goes with every attempt until one succeeds
    RoutingDecision open = a.route(prompt(1));
    String ep = open.primary().id();
    await("a's publisher took the hint", () -> replication(a).queued() == 0);
    int tried = log.appendsTried();
    // attempts end one after the other: by the second one after this, the one that took the hint
    // has failed and been counted
    await("two more attempts failed", () -> log.appendsTried() >= tried + 2);
    assertThat(replication(a).dropped()).as("hints a dropped").isEqualTo(1);
    log.refuseCommands(false);
    await("b counts a's open request, sent again", () -> inFlight(b, ep) == 1);
    assertThat(replication(a).dropped()).as("hints a dropped").isEqualTo(1);
    open.onComplete(new Usage(1, 0, 1));
  }

  /**
   * Both threads' refusals shared one warning a minute: the reader's took it and the publisher's
   * (here READONLY, the code that says what to fix) went unsaid for a minute. Each thread now has
   * its own.
   */
  @Test
  void aRefusalOfThePublisherIsReportedAfterOneOfTheReader() throws Exception {
    InMemoryLog log = new InMemoryLog();
    try (io.epp4j.testkit.CapturedLog captured =
        io.epp4j.testkit.CapturedLog.of(RedisReplication.class.getName())) {
      log.refuseReads("NOPERM this user has no permissions to run the 'xread' command");
      Router a = router(log, "p", "a", 1000);
      await("the reader's refusal is reported",
          () -> captured.text().contains("reader: NOPERM"));
      log.refuseReads(null);
      log.refuseAppends("READONLY You can't write against a read only replica.");
      RoutingDecision open = a.route(prompt(1));
      await("the publisher's refusal is reported",
          () -> captured.text().contains("publisher: READONLY"));
      open.onComplete(new Usage(1, 0, 1));
    }
  }

  /**
   * A server that ends every blocked read with {@code UNBLOCKED} (Redis does so once, when it
   * becomes a replica; a proxy or a script might do it every time): the reader reconnects at once
   * after one, as after a demotion, but waits out the backoff after a second in a row instead of
   * reconnecting in a loop; none is logged as a refused command, the demotion once at INFO.
   */
  @Test
  void aReaderUnblockedAgainAndAgainBacksOffAndReportsTheDemotionOnce() throws Exception {
    InMemoryLog log = new InMemoryLog();
    try (io.epp4j.testkit.CapturedLog captured =
        io.epp4j.testkit.CapturedLog.of(RedisReplication.class.getName())) {
      log.refuseReads("UNBLOCKED force unblock from blocking operation, instance state changed"
          + " (master -> replica?)");
      router(log, "p", "a", 1000);
      await("the reader connected three times", () -> log.connectTimes(READER).size() >= 3);
      Thread.sleep(1_000);
      // backoff steps of 50-100, 100-200, 200-400, 400-800 ms...: a handful in a second; a loop
      // without them connects thousands of times
      assertThat(log.connectTimes(READER)).as("the reader's connections").hasSizeLessThan(20);
      assertThat(captured.records()).filteredOn(r -> r.contains("became a replica")).hasSize(1);
      assertThat(captured.text()).doesNotContain("refused a command");
    }
  }

  private static final String READER = "epp4j-redis-replication-read";

  static int inFlight(Router r, String endpointId) {
    for (var c : r.endpoints()) {
      if (c.id().equals(endpointId)) {
        return c.inFlightRequests();
      }
    }
    return -1;
  }

  /**
   * A request that ends while the bus is away: once it is back, the other routers must hear
   * that it ended, not keep the last figure they had until the age limit.
   */
  @Test
  void anInFlightFigureThatDroppedToZeroDuringAnOutageIsSentAfterIt() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "p", "a", 1000);
    Router b = router(log, "p", "b", 1000);
    RoutingDecision d = a.route(prompt(1));
    String ep = d.primary().id();
    await("b sees a's request", () -> inFlight(b, ep) == 1);
    // the request's prefix hint may trail its in-flight figure by a batch (the router counts a
    // request before its listeners run): had the outage taken that batch, the marker below
    // would be b's first prefix, not its second
    await("b applied a's first prefix", () -> replication(b).appliedPrefixes() == 1);
    log.down();
    await("a's publisher notices", () -> !replication(a).connected());
    d.onComplete(new Usage(1, 0, 1));
    log.up();
    await("a reconnects", () -> replication(a).connected());
    // a marker after the reconnection: once b has it, it has read what a sent on reconnecting
    RoutingDecision marker = a.route(prompt(2));
    await("b applied a's marker", () -> replication(b).appliedPrefixes() >= 2);
    await("b hears that a's first request ended", () -> inFlight(b, ep)
        == (marker.primary().id().equals(ep) ? 1 : 0));
    marker.onComplete(new Usage(1, 0, 1));
  }

  /**
   * A flush interval longer than the heartbeat: the figures must still go out every heartbeat,
   * or the other routers, which drop a router silent for five of their heartbeats, forget a
   * request that is still open between two flushes. With a flush interval of a minute, batches
   * carrying the open request's figure must reach the stream heartbeat after heartbeat, long
   * before the first interval is over (the wait gives up after 30 s), and the other router
   * counts the request.
   */
  @Test
  void inFlightFiguresGoOutEveryHeartbeatWhateverTheFlushInterval() throws Exception {
    InMemoryLog log = new InMemoryLog();
    String params = "pool: p, routerId: %s, flushIntervalMillis: %d, heartbeatMillis: 200";
    Router a = prefixRouter(log, "a", params.formatted("a", 60_000));
    Router b = prefixRouter(log, "b", params.formatted("b", 1));
    RoutingDecision open = a.route(prompt(1));
    String ep = open.primary().id();
    // an unchanged figure goes out again only on a heartbeat: three batches carrying it are the
    // one that first sent it and two heartbeats after it at least
    await("a sent its open request's figure three times",
        () -> inFlightBatchesIn(log, "a", ep, 1) >= 3);
    await("b counts a's open request", () -> inFlight(b, ep) == 1);
    open.onComplete(new Usage(1, 0, 1));
  }

  /** Batches router {@code origin} wrote to the log saying {@code requests} in flight on {@code ep}. */
  static int inFlightBatchesIn(InMemoryLog log, String origin, String ep, int requests) {
    return (int) batchesOf(log, origin).stream()
        .filter(b -> b.inFlight().contains(ep + " " + requests)).count();
  }

  /**
   * A router that crashed with requests in flight (no farewell) and restarted under the same
   * routerId before the others found it silent: its new run's heartbeats keep the id alive, and
   * it sent nothing for the endpoints it has nothing on, so the others went on counting the
   * crashed run's load there until their inFlightMaxAge (10 minutes). The new run reads its
   * earlier run's last figures in the stream and sends its own for those endpoints, zeros
   * included.
   */
  @Test
  void aRouterRestartedUnderTheSameIdClearsTheLoadItsCrashedRunLeft() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.withClock();
    Router b = router(log, "p", "b", 1000);
    String ep = "10.2.0.3:8000";
    // the crashed run's last heartbeat
    HintCodec.Writer w = new HintCodec.Writer();
    w.inFlight(ep, 5, 5_000);
    log.append(w.finish("p", "x", RedisReplication.epochMicros()));
    await("b counts the crashed run's load", () -> inFlight(b, ep) == 5);
    Router x = router(log, "p", "x", 1000);
    // a request of the new run, so that it heartbeats and the others keep hearing from x
    RoutingDecision open = x.route(prompt(1));
    int expected = open.primary().id().equals(ep) ? 1 : 0;
    await("b counts only what the new run of x has on " + ep,
        () -> inFlight(b, ep) == expected);
    open.onComplete(new Usage(1, 0, 1));
  }

  /**
   * The same, with the crashed run's clock a minute ahead of the restarted one's (a pod restarted
   * on another node). Its last figures were stamped after the new run started by the new run's
   * clock, so they were taken for the new run's own, read header only and skipped: the others
   * kept counting the crashed run's load. Which run a batch is of is told on the log's clock.
   */
  @Test
  void aRouterRestartedUnderTheSameIdWithItsClockBehindClearsTheLoadItsCrashedRunLeft()
      throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.withClock();
    log.cutEntries();
    Router b = router(log, "p", "b", 1000);
    String ep = "10.2.0.3:8000";
    HintCodec.Writer w = new HintCodec.Writer();
    w.inFlight(ep, 5, 5_000);
    log.append(w.finish("p", "x", RedisReplication.epochMicros() + 60_000_000L));
    await("b counts the crashed run's load", () -> inFlight(b, ep) == 5);
    Router x = router(log, "p", "x", 1000);
    RoutingDecision open = x.route(prompt(1));
    int expected = open.primary().id().equals(ep) ? 1 : 0;
    await("b counts only what the new run of x has on " + ep,
        () -> inFlight(b, ep) == expected);
    open.onComplete(new Usage(1, 0, 1));
  }

  @Test
  void twoRoutersWritingUnderOneRouterIdAreToldSo() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.withClock();
    Router a = router(log, "p", "same", 1000);
    Router b = router(log, "p", "same", 1000);
    // a reader counts only batches newer than its own start, which it learns once connected:
    // on a loaded machine one router's first batches can predate the other's start, so both
    // keep writing until each has seen the other's
    long[] seed = {0};
    await("both see batches under their id that they did not write", () -> {
      seed[0]++;
      a.route(prompt(seed[0])).onComplete(new Usage(1, 0, 1));
      b.route(prompt(100_000 + seed[0])).onComplete(new Usage(1, 0, 1));
      return replication(a).sharedRouterIdSeen() && replication(b).sharedRouterIdSeen();
    });
  }

  @Test
  void routersWithTheirOwnIdsAndARestartedRouterAreNotToldSo() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.withClock();
    Router first = router(log, "p", "a", 1000);
    for (long seed = 1; seed <= 20; seed++) {
      first.route(prompt(seed)).onComplete(new Usage(1, 0, 1));
    }
    await("the first run of a wrote its hints", () -> log.size() > 0);
    first.close();
    int before = log.size();
    // a restarts with the same id: the stream's history holds its earlier run's batches
    Router a = router(log, "p", "a", 1000);
    Router b = router(log, "p", "b", 1000);
    for (long seed = 1; seed <= 20; seed++) {
      a.route(prompt(200 + seed)).onComplete(new Usage(1, 0, 1));
      b.route(prompt(300 + seed)).onComplete(new Usage(1, 0, 1));
    }
    await("a and b wrote and read", () -> log.size() > before
        && replication(b).published() > 0 && replication(a).published() > 0
        && replication(a).entriesRead() >= log.size() && replication(b).entriesRead() >= log.size());
    assertThat(replication(a).sharedRouterIdSeen()).isFalse();
    assertThat(replication(b).sharedRouterIdSeen()).isFalse();
  }

  @Test
  void aConnectedReaderThatFellBehindTheTrimResyncs() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "p", "a", 1000);
    Router b = router(log, "p", "b", 1000);
    RoutingDecision open = a.route(prompt(1));
    String ep = open.primary().id();
    await("b counts a's open request", () -> inFlight(b, ep) == 1);
    log.holdReads(); // b's reader stays connected but reads nothing
    long publishedBefore = replication(a).published();
    open.onComplete(new Usage(1, 0, 1));
    await("a published that the request ended", () -> replication(a).published() > publishedBefore);
    // no batch may come after the trim until b has checked: a heartbeat read first would carry
    // b's cursor past the gap between two checks, which a stream trimmed by MAXLEN only does
    // with a full read (the case of aReaderThatReadsPastTrimmedBatchesBetweenTwoChecksResyncs)
    log.holdAppends();
    log.trim(0); // the batch that lowered the figure is trimmed before b read it
    log.releaseReads();
    await("b found the gap without reconnecting", () -> replication(b).resyncs() == 1);
    log.releaseAppends();
    await("b no longer counts the ended request", () -> inFlight(b, ep) == 0);
  }

  /**
   * A reader that fell behind by more than the silence limit (five heartbeats of the log's clock)
   * reads the batches it missed as history, whose in-flight figures it skips: right for a router
   * it holds no figure of (one long gone leaves its last figures in the stream), wrong for one it
   * still counts. The batch that lowered such a router's figure was skipped, the figure it
   * replaced stayed, and the router, having sent that change once, never sent it again: the
   * reader counted its ended request until the age limit (10 minutes). A figure read late is
   * now applied when its router's figures are held here.
   */
  @Test
  void aReaderThatFellBehindStillAppliesTheFiguresOfARouterItCounts() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.withClock(); // one entry is one ms of the log's clock: 5,000 entries are five heartbeats
    Router b = router(log, "p", "b", 1000);
    String ep = "10.2.0.1:8000";
    log.append(inFlightBatch("x", Map.of(ep, 1)));
    await("b counts x's request", () -> inFlight(b, ep) == 1);
    long start = System.nanoTime();
    log.holdReads(); // b's reader stays connected but reads nothing: it falls behind
    log.append(inFlightBatch("x", Map.of(ep, 0))); // x's request ended
    int filler = 6_000; // another pool's batches: the change is now history
    for (int i = 0; i < filler; i++) {
      log.append(new HintCodec.Writer().finish("q", "z", RedisReplication.epochMicros()));
    }
    long readBefore = replication(b).entriesRead();
    Thread.sleep(1_500); // b's check of a heartbeat reads the log's clock past the change
    log.releaseReads();
    await("b read what it missed", () -> replication(b).entriesRead() >= readBefore + filler + 1);
    org.junit.jupiter.api.Assumptions.assumeTrue(
        System.nanoTime() - start < 4_000_000_000L,
        "held up for five heartbeats: b forgot x as silent, which says nothing of the change");
    assertThat(inFlight(b, ep)).as("x's ended request as b counts it").isZero();
  }

  /**
   * A reader that writers outran by more than the stream keeps, and that catches up before its
   * next check of the stream's oldest batch (once a heartbeat): its read after a trimmed id
   * returns what the stream still holds, and by the check its cursor is inside the stream again.
   * A batch trimmed unread may have lowered an in-flight figure that its sender, still sending
   * heartbeats, never sends again.
   */
  @Test
  void aReaderThatReadsPastTrimmedBatchesBetweenTwoChecksResyncs() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router b = router(log, "p", "b", 1000);
    int backlog = 2 * RedisReplication.READ_BATCHES;
    assertResyncsAfterATrimDropsAnEndedRequest(log, b, backlog, backlog);
  }

  /**
   * x has a request in flight on each of two endpoints, as {@code b} counts them; then, in one
   * step while b's reader waits for the next batch, x's request on one endpoint ends, {@code
   * heartbeats} batches follow, and a trim down to {@code trimTo} drops the batch that said so
   * before b reads it. b must find the gap and resync: the resync drops both of x's figures and
   * the batches read again bring back the open one (until then it reads 0 too).
   */
  private static void assertResyncsAfterATrimDropsAnEndedRequest(InMemoryLog log, Router b,
      int heartbeats, int trimTo) throws Exception {
    String ended = "10.2.0.1:8000";
    String open = "10.2.0.2:8000";
    log.append(inFlightBatch("x", Map.of(ended, 1, open, 1)));
    await("b counts x's requests", () -> inFlight(b, ended) == 1 && inFlight(b, open) == 1);
    synchronized (log) {
      log.append(inFlightBatch("x", Map.of(ended, 0)));
      for (int i = 0; i < heartbeats; i++) {
        log.append(inFlightBatch("x", Map.of(open, 1)));
      }
      log.trim(trimTo);
    }
    long[] polls = {0};
    await("b no longer counts x's ended request, and counts its open one again", () -> {
      if (++polls[0] % 50 == 0) {
        log.append(inFlightBatch("x", Map.of(open, 1))); // x is alive: not forgotten as silent
      }
      return inFlight(b, ended) == 0 && inFlight(b, open) == 1;
    });
    assertThat(replication(b).resyncs()).isEqualTo(1);
  }

  /**
   * As above, with a {@code maxLen} below the entries a read asks for ({@code READ_BATCHES}): the
   * trim leaves maxLen batches, so the read after the trimmed id returns fewer than a full read,
   * and the reader took it for a read that had caught up: it applied the batches after the gap
   * and found nothing wrong at its next check. Every maxLen the configuration takes must let a
   * reader find the gap.
   */
  @Test
  void aReaderFindsATrimGapWhenMaxLenIsBelowTheBatchesOfARead() throws Exception {
    int maxLen = 10;
    assertThat(maxLen).isLessThan(RedisReplication.READ_BATCHES);
    InMemoryLog log = new InMemoryLog();
    Router b = prefixRouter(log, "b", "pool: p, routerId: b, flushIntervalMillis: 1,"
        + " maxLen: " + maxLen);
    assertResyncsAfterATrimDropsAnEndedRequest(log, b, 2 * maxLen, maxLen);
  }

  /**
   * The bound on other routers (MAX_ORIGINS) is a bound on the in-flight figures kept per origin:
   * the prefixes and sessions of a router past it still teach this one, as they cost no state
   * per origin.
   */
  @Test
  void aRouterPastTheBoundOnOriginsStillSharesItsPrefixes() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router b = router(log, "p", "b", 1000);
    for (int i = 0; i < RedisReplication.MAX_ORIGINS; i++) {
      log.append(inFlightBatch("o" + i, Map.of()));
    }
    log.append(prefixBatch("late", "10.2.0.5:8000"));
    // the last batch, of a known origin: once applied, every batch before it was
    log.append(sessionBatch("o0", RedisReplication.epochMicros(), "s1", "10.2.0.6:8000"));
    await("b applied the marker", () -> replication(b).appliedSessions() == 1);
    assertThat(replication(b).appliedPrefixes()).as("the prefix of the router past the bound")
        .isEqualTo(1);
  }

  private static byte[] inFlightBatch(String router, Map<String, Integer> requests) {
    HintCodec.Writer w = new HintCodec.Writer();
    requests.forEach((ep, r) -> w.inFlight(ep, r, 100L * r));
    return w.finish("p", router, RedisReplication.epochMicros());
  }

  /**
   * A reader cut off while the stream went on (its own network, say, not Redis) reads what it
   * missed when it reconnects. Batches older than the silence limit by the log's clock are
   * history, as when it starts: their in-flight figures may be those of a router that crashed
   * meanwhile (no farewell), whose load is gone. Taken as current, they weigh on the endpoint
   * until that router counts as silent.
   */
  @Test
  void aReaderCatchingUpAfterAnOutageTakesNoInFlightFiguresOlderThanTheSilenceLimit()
      throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.withClock();
    Router b = prefixRouter(log, "b", "pool: p, routerId: b, flushIntervalMillis: 1,"
        + " heartbeatMillis: 1000");
    log.append(prefixBatch("y", "10.2.0.5:8000"));
    await("b read y's batch", () -> replication(b).appliedPrefixes() == 1);
    log.down();
    await("b's reader noticed", () -> !replication(b).connected());
    String ep = "10.2.0.3:8000";
    log.append(inFlightBatch("crashed", Map.of(ep, 7)));
    // the log's clock counts entries: 5 heartbeats of 1000 ms are 5000 of them
    for (int i = 0; i < 6_000; i++) {
      log.append(inFlightBatch("y", Map.of()));
    }
    log.up();
    await("b read what it missed", () -> replication(b).entriesRead() >= log.size());
    assertThat(inFlight(b, ep)).as("in flight on " + ep + " 6000 batches ago").isZero();
    assertThat(replication(b).resyncs()).isZero();
  }

  /**
   * A request that ended just before the stream was lost: the batch saying so reached the old
   * stream but not the other router. The router that sent it does not send that zero again, and
   * its heartbeats, carrying its other open request, keep it from being forgotten as silent; the
   * reader that finds the gap must not keep the figure it had.
   */
  @Test
  void anInFlightFigureLoweredInBatchesTheStreamLostIsNotKeptByTheReader() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "p", "a", 1000);
    Router b = router(log, "p", "b", 1000);
    List<RoutingDecision> open = new ArrayList<>();
    Map<String, Integer> perEndpoint = new HashMap<>();
    for (long seed = 1; perEndpoint.size() < 2; seed++) {
      RoutingDecision d = a.route(prompt(seed));
      open.add(d);
      perEndpoint.merge(d.primary().id(), 1, Integer::sum);
    }
    await("b counts a's open requests", () -> countsOf(b, perEndpoint));
    String ended = open.get(0).primary().id();
    log.holdReads();
    long publishedBefore = replication(a).published();
    open.removeIf(d -> {
      if (d.primary().id().equals(ended)) {
        d.onComplete(new Usage(1, 0, 1));
        return true;
      }
      return false;
    });
    perEndpoint.remove(ended);
    await("a published that the requests on " + ended + " ended",
        () -> replication(a).published() > publishedBefore);
    log.lose();
    log.releaseReads();

    await("b found the gap", () -> replication(b).resyncs() == 1);
    await("b counts exactly a's open requests", () -> countsOf(b, perEndpoint));
    assertThat(inFlight(b, ended)).isZero();
    open.forEach(d -> d.onComplete(new Usage(1, 0, 1)));
  }

  /**
   * A reader that has applied nothing since it started reading from the stream's oldest batch
   * (a new router, or one that just resynced) and reconnects: it reads from the oldest batch
   * again, which loses nothing, so it counts no resync. Asking the log whether it holds
   * everything after the oldest id is no question: a log that lost entries before (lose()
   * below) would answer no, and the reader counted a second resync and forgot the figures it had
   * learnt since the first.
   */
  @Test
  void aReaderThatReconnectsBeforeReadingAnyBatchCountsNoResync() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.append(prefixBatch("gone", "10.2.0.3:8000"));
    log.lose(); // lost before this router came: nothing it could have read
    // no heartbeat within the test: the router appends nothing it would read back
    Router b = prefixRouter(log, "b", "pool: p, routerId: b, flushIntervalMillis: 1,"
        + " heartbeatMillis: 600000");
    String reader = "epp4j-redis-replication-read";
    await("b's reader connected", () -> log.connectTimes(reader).size() == 1);
    log.down();
    await("b's reader noticed", () -> !replication(b).connected());
    log.up();
    await("b's reader connected again", () -> log.connectTimes(reader).size() == 2);
    log.append(prefixBatch("y", "10.2.0.5:8000"));
    await("b read y's batch", () -> replication(b).appliedPrefixes() == 1);
    assertThat(replication(b).resyncs()).isZero();
  }

  static boolean countsOf(Router r, Map<String, Integer> perEndpoint) {
    return r.endpoints().stream()
        .allMatch(c -> c.inFlightRequests() == perEndpoint.getOrDefault(c.id(), 0));
  }

  @Test
  void aMalformedBatchIsSkippedAndTheNextOnesStillApply() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router b = router(log, "p", "b", 1000);
    log.append("not a batch".getBytes(StandardCharsets.UTF_8));
    byte[] good = prefixBatch("a", "10.2.0.3:8000");
    // the same batch cut short: rejected as a whole
    log.append(java.util.Arrays.copyOf(good, good.length - 4));
    log.append(good);
    await("the good batch applied", () -> replication(b).appliedPrefixes() == 1);
    assertThat(replication(b).malformed()).isEqualTo(2);
  }

  /**
   * A foreign entry in the stream (another application writing to the key, a hand-made entry):
   * the warning names the stream key and the entry's id, so it can be found, and quotes nothing
   * of what the entry holds.
   */
  @Test
  void aMalformedEntryIsNamedByKeyAndIdWithoutQuotingIt() throws Exception {
    CapturedLog logged = CapturedLog.of(RedisReplication.class.getName());
    try {
      InMemoryLog stream = new InMemoryLog();
      Router b = router(stream, "p", "b", 1000);
      stream.append(prefixBatch("a", "10.2.0.3:8000"));
      String foreign = "{\"prompt\": \"my secret question\"}";
      stream.append(foreign.getBytes(StandardCharsets.UTF_8));
      // the count moves just before the warning is logged: wait for both
      await("the foreign entry skipped and named", () -> replication(b).malformed() == 1
          && logged.records().stream().anyMatch(
              m -> m.contains("entry 2-0") && m.contains("'epp4j:p:hints'")));
      assertThat(logged.records())
          .noneMatch(m -> m.contains("secret"));
    } finally {
      logged.close();
    }
  }

  /**
   * A foreign entry under another router's name, stamped at a time no clock reads
   * ({@code Long.MIN_VALUE} and {@code Long.MAX_VALUE} µs). Its send time used to go into that
   * router's clock offset, overflowing it: the offset, the smallest of the router's recent
   * batches, then made every later move of the router look older than any other router's, and
   * the entry's lag went into {@code epp4j.replication.lag} as thousands of years. It is now
   * malformed, named by key and id, and the router's next move applies as its time says.
   */
  @Test
  void anEntryStampedAtATimeNoClockReadsIsMalformedAndSkewsNothing() throws Exception {
    CapturedLog logged = CapturedLog.of(RedisReplication.class.getName());
    try {
      InMemoryLog log = new InMemoryLog();
      log.withClock(); // the offsets are taken on the log's clock only
      Router b = sessionRouter(log, "b");
      await("b connected", () -> replication(b).connected());
      long now = RedisReplication.epochMicros();
      int before = log.size();
      // y moved s1 a second ago
      log.append(sessionBatch("y", now - 1_000_000, "s1", "10.2.0.1:8000"));
      String absurdId = (log.size() + 1) + "-0";
      for (long sent : new long[] {Long.MIN_VALUE, Long.MAX_VALUE}) {
        HintCodec.Writer w = new HintCodec.Writer();
        w.prefix(now, "10.2.0.3:8000", 16, new long[] {1, 2, 3});
        log.append(w.finish("p", "x", sent));
      }
      // then x moved s1, now: the newer move
      log.append(sessionBatch("x", RedisReplication.epochMicros(), "s1", "10.2.0.2:8000"));
      await("b handled the four entries", () -> replication(b).entriesRead() >= before + 4);
      RedisReplication rb = replication(b);
      assertThat(rb.malformed()).isEqualTo(2);
      assertThat(rb.appliedPrefixes()).isZero();
      assertThat(rb.staleSessions()).as("x's move taken for older than y's").isZero();
      assertThat(primaryOf(b, "s1")).isEqualTo("10.2.0.2:8000");
      // lags of moves read within seconds of their capture: none near the absurd times
      assertThat(java.util.Arrays.stream(rb.lagMicros()).boxed().toList()).isNotEmpty()
          .allSatisfy(l -> assertThat(Math.abs(l)).isLessThan(60_000_000L));
      await("the first absurd entry named by key and id", () -> logged.records().stream()
          .anyMatch(m -> m.contains(
              "malformed entry " + absurdId + " of stream 'epp4j:p:hints' (send time")));
    } finally {
      logged.close();
    }
  }

  /**
   * Entries may each be up to MAX_ENTRY_BYTES (about 33 MiB), and a read of 64 of them held them
   * all at once, 2 GiB. A read now keeps entries up to READ_BYTES (past its first); the entries
   * past them come back empty and are read again, first, by the next read: none is lost, none is
   * taken for malformed.
   */
  @Test
  void entriesPastAReadsByteLimitAreLeftForTheNextRead() throws Exception {
    InMemoryLog stream = new InMemoryLog();
    stream.cutEntries();
    Router b = router(stream, "p", "b", 1000);
    // three entries of well over a third of the limit each: a read keeps two of them
    String longId = "e".repeat(HintCodec.MAX_STRING_BYTES);
    int records = (int) (RedisReplication.READ_BYTES * 3 / 8 / HintCodec.MAX_STRING_BYTES);
    HintCodec.Writer w = new HintCodec.Writer();
    for (int i = 0; i < records; i++) {
      w.inFlight(longId, 0, 0);
    }
    byte[] large = w.finish("p", "a", RedisReplication.epochMicros());
    assertThat(large.length).isLessThanOrEqualTo(RedisReplication.MAX_ENTRY_BYTES)
        .isGreaterThan((int) (RedisReplication.READ_BYTES / 3));
    // all of them there for the reader's next read (one that catches up on a backlog)
    stream.holdReads();
    for (int i = 0; i < 3; i++) {
      stream.append(large);
    }
    stream.append(prefixBatch("a", "10.2.0.3:8000"));
    stream.releaseReads();
    await("the batch after them applied", () -> replication(b).appliedPrefixes() == 1);
    assertThat(replication(b).malformed()).as("entries taken for malformed").isZero();
    assertThat(replication(b).entriesRead()).as("entries read, each once").isEqualTo(4);
    assertThat(stream.mostKeptByARead()).as("bytes one read kept")
        .isLessThanOrEqualTo(RedisReplication.READ_BYTES);
  }

  /**
   * XREAD sends a read's entries whole: a backlog of entries larger than the connection carries
   * within the read's timeout made every read of it run out of time, and the reader asked for the
   * same 64 entries again after each reconnection, for good, applying nothing more of the stream.
   * A read that runs out of time is now followed by one of half as many entries, and reads that
   * succeed bring the count back up to the full one.
   */
  @Test
  void aBacklogThatCannotArriveInOneReadsTimeIsReadInSmallerReads() throws Exception {
    InMemoryLog stream = new InMemoryLog();
    stream.cutEntries();
    Router b = router(stream, "p", "b", 1000);
    byte[] batch = prefixBatch("a", "10.2.0.3:8000");
    // ten entries waiting; the connection carries three of them within a read's time
    stream.holdReads();
    for (int i = 0; i < 10; i++) {
      stream.append(batch);
    }
    stream.carriesAtMost(3L * batch.length);
    stream.releaseReads();
    await("the whole backlog applied", () -> replication(b).appliedPrefixes() == 10);
    assertThat(replication(b).malformed()).isZero();
    stream.append(batch);
    await("the entry written after it applied", () -> replication(b).appliedPrefixes() == 11);
    await("a read asks for the full count again",
        () -> stream.lastAsked() == RedisReplication.READ_BATCHES);
  }

  /**
   * One entry that cannot arrive within a read's time (a foreign writer's, as large as Redis
   * takes, over a slow link) holds the reader back for as long as it is there: the warning names
   * the stream, the id the reader is stuck after and the setting that bounds the read.
   */
  @Test
  void anEntryThatCannotArriveInAReadsTimeIsNamedWithTheSettingToRaise() throws Exception {
    CapturedLog logged = CapturedLog.of(RedisReplication.class.getName());
    try {
      InMemoryLog stream = new InMemoryLog();
      stream.cutEntries();
      byte[] batch = prefixBatch("a", "10.2.0.3:8000");
      stream.append(batch);
      stream.carriesAtMost(batch.length - 1);
      Router b = router(stream, "p", "b", 1000);
      await("the reader says what holds it back", () -> logged.records().stream()
          .anyMatch(m -> m.contains("connectTimeoutMillis")));
      assertThat(logged.records())
          .filteredOn(m -> m.contains("connectTimeoutMillis"))
          .allMatch(m -> m.contains("after id " + HintTransport.OLDEST)
              && m.contains("'epp4j:p:hints'"));
      assertThat(stream.lastAsked()).as("entries the stuck read asks for").isEqualTo(1);
      assertThat(replication(b).appliedPrefixes()).isZero();
    } finally {
      logged.close();
    }
  }

  /**
   * A well-formed entry longer than any router writes (a foreign writer's): decoded, its records
   * would become objects several times its size on the reader's thread. Skipped unread, named by
   * key and id with its size, and the next entries still apply.
   */
  @Test
  void anEntryLongerThanAnyRouterWritesIsSkippedUnreadAndNamedByKeyAndId() throws Exception {
    CapturedLog logged = CapturedLog.of(RedisReplication.class.getName());
    try {
      InMemoryLog stream = new InMemoryLog();
      stream.cutEntries(); // as Redis does: the reader keeps nothing of it, its size is told
      Router b = router(stream, "p", "b", 1000);
      // in-flight records under the longest endpoint id a batch holds, until past the limit
      HintCodec.Writer w = new HintCodec.Writer();
      String longId = "e".repeat(HintCodec.MAX_STRING_BYTES);
      int records = RedisReplication.MAX_ENTRY_BYTES / HintCodec.MAX_STRING_BYTES + 1;
      for (int i = 0; i < records; i++) {
        w.inFlight(longId, 1, 1);
      }
      byte[] oversized = w.finish("p", "a", RedisReplication.epochMicros());
      assertThat(oversized.length).isGreaterThan(RedisReplication.MAX_ENTRY_BYTES);
      stream.append(oversized);
      stream.append(prefixBatch("a", "10.2.0.3:8000"));
      await("the batch after it applied", () -> replication(b).appliedPrefixes() == 1);
      assertThat(replication(b).malformed()).isEqualTo(1);
      assertThat(logged.records())
          .anyMatch(m -> m.contains("entry 1-0") && m.contains("'epp4j:p:hints'")
              && m.contains(oversized.length + " bytes"))
          .noneMatch(m -> m.contains("eeee"));
    } finally {
      logged.close();
    }
  }

  /**
   * A session key longer than any router sends (a foreign or hand-written entry): kept, each
   * would hold up to 64 KiB in the bounded map of sessions' capture times and in the scorers.
   */
  @Test
  void aSessionKeyLongerThanAnyRouterSendsIsMalformed() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router b = sessionRouter(log, "b");
    long now = RedisReplication.epochMicros();
    log.append(sessionBatch("a", now, "k".repeat(HintCodec.MAX_SESSION_KEY_CHARS + 1),
        "10.2.0.1:8000"));
    log.append(sessionBatch("a", now, "s1", "10.2.0.2:8000"));
    await("b read both", () -> replication(b).appliedSessions() + replication(b).malformed() == 2);
    assertThat(replication(b).malformed()).isEqualTo(1);
    assertThat(replication(b).appliedSessions()).isEqualTo(1);
  }

  @Test
  void codecRoundTripsEveryRecordKind() throws Exception {
    HintCodec.Writer w = new HintCodec.Writer();
    w.prefix(11, "e1", 16, new long[] {-1, 0, Long.MAX_VALUE});
    w.session(12, "sess", "e2");
    w.inFlight("e3", 4, 1234);
    byte[] b = w.finish("pool", "origin", 99);
    var in = HintCodec.input(b);
    HintCodec.Header h = HintCodec.header(in);
    assertThat(h).isEqualTo(new HintCodec.Header("pool", "origin", 99, 3));
    List<String> seen = new ArrayList<>();
    HintCodec.records(in, h, new HintCodec.Visitor() {
      @Override
      public void prefix(long at, String ep, int bs, long[] hashes) {
        seen.add(at + " " + ep + " " + bs + " " + java.util.Arrays.toString(hashes));
      }

      @Override
      public void session(long at, String key, String ep) {
        seen.add(at + " " + key + " " + ep);
      }

      @Override
      public void inFlight(String ep, int r, long t) {
        seen.add(ep + " " + r + " " + t);
      }
    });
    assertThat(seen).containsExactly("11 e1 16 [-1, 0, 9223372036854775807]", "12 sess e2",
        "e3 4 1234");
  }

  static Result<?> create(Map<String, Object> params) {
    PluginContext ctx = new PluginContext() {
      @Override
      public String pluginName() {
        return RedisReplication.TYPE;
      }

      @Override
      public Ticker ticker() {
        return Ticker.system();
      }

      @Override
      public <T> Optional<T> service(Class<T> type) {
        return Optional.empty();
      }
    };
    return new RedisReplication.Provider().create(ctx, Parameters.of(params));
  }

  @Test
  void badParametersAreNamedAndNoSecretIsQuoted() {
    assertThat(create(Map.of()).errors()).anyMatch(e -> e.contains("uri"));
    Result<?> bad = create(Map.of("uri", "http://user:s3cret@host", "batchSize", 0,
        "maxLen", -1, "queueMaxBlocks", 0));
    assertThat(bad.errors()).anyMatch(e -> e.contains("batchSize"))
        .anyMatch(e -> e.contains("maxLen")).anyMatch(e -> e.contains("uri"))
        .anyMatch(e -> e.contains("queueMaxBlocks"))
        .noneMatch(e -> e.contains("s3cret"));
  }

  @Test
  void aStreamTtlTooShortIsNamed() {
    Result<?> bad = create(Map.of("uri", "redis://127.0.0.1:1", "streamTtlSeconds", 5));
    assertThat(bad.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("streamTtlSeconds").contains("60"));
    Result<?> negative = create(Map.of("uri", "redis://127.0.0.1:1", "streamTtlSeconds", -1));
    assertThat(negative.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("streamTtlSeconds"));
    Result<?> none = create(Map.of("uri", "redis://127.0.0.1:1", "connectTimeoutMillis", 200,
        "streamTtlSeconds", 0));
    assertThat(none.isOk()).as(String.valueOf(none.errors())).isTrue();
    ((RedisReplication) none.value()).close();
  }

  @Test
  void aPoolOrRouterIdTooLongForABatchIsNamed() {
    String longName = "x".repeat(65_536);
    Result<?> bad = create(Map.of("uri", "redis://127.0.0.1:1", "pool", longName,
        "routerId", longName));
    assertThat(bad.isOk()).isFalse();
    assertThat(bad.errors()).anyMatch(e -> e.contains("pool") && e.contains("65535"))
        .anyMatch(e -> e.contains("routerId") && e.contains("65535"))
        .noneMatch(e -> e.contains(longName));
    Result<?> ok = create(Map.of("uri", "redis://127.0.0.1:1", "connectTimeoutMillis", 200,
        "pool", "x".repeat(65_535)));
    assertThat(ok.isOk()).as(String.valueOf(ok.errors())).isTrue();
    ((RedisReplication) ok.value()).close();
  }

  @Test
  void aRouterIdsLimitIsCountedAndNamedInTheEncodingTheBatchesUse() throws Exception {
    // 12,000 emoji: 48,000 bytes in UTF-8, 72,000 in the modified UTF-8 a batch holds
    String emoji = "\uD83D\uDE00".repeat(12_000);
    assertThat(emoji.getBytes(java.nio.charset.StandardCharsets.UTF_8)).hasSize(48_000);
    Result<?> bad = create(Map.of("uri", "redis://127.0.0.1:1", "routerId", emoji));
    assertThat(bad.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("routerId").contains("modified UTF-8").contains("72000")
        .doesNotContain(emoji));
    // what passes is what a batch can hold: 10,922 emoji are 65,532 bytes encoded
    String fits = "\uD83D\uDE00".repeat(10_922);
    Result<?> ok = create(Map.of("uri", "redis://127.0.0.1:1", "connectTimeoutMillis", 200,
        "routerId", fits));
    assertThat(ok.isOk()).as(String.valueOf(ok.errors())).isTrue();
    ((RedisReplication) ok.value()).close();
    HintCodec.Writer w = new HintCodec.Writer();
    w.inFlight("10.2.0.1:8000", 1, 1);
    byte[] batch = w.finish("p", fits, 1);
    java.io.DataInputStream in = new java.io.DataInputStream(
        new java.io.ByteArrayInputStream(batch));
    in.readUnsignedByte(); // the version
    assertThat(in.readUTF()).isEqualTo("p");
    assertThat(in.readUTF()).isEqualTo(fits);
  }

  @Test
  void aBacklogOfLongPromptsIsSentInBatchesOfBoundedSize() throws Exception {
    // batchSize bounds the hints of a batch, not its bytes: a backlog of long prompts (an outage,
    // queueMaxBlocks raised) went out as one entry as large as the backlog, which Redis refuses
    // past its proto-max-bulk-len (512 MiB) and which, past 2 GiB, overflowed the batch buffer
    // and ended the publisher thread
    InMemoryLog log = new InMemoryLog();
    log.down();
    PluginContext ctx = new PluginContext() {
      @Override
      public String pluginName() {
        return RedisReplication.TYPE;
      }

      @Override
      public Ticker ticker() {
        return Ticker.system();
      }

      @Override
      public <T> Optional<T> service(Class<T> type) {
        return Optional.empty();
      }
    };
    Result<?> made = new RedisReplication.Provider(log::factory).create(ctx, Parameters.of(Map.of(
        "pool", "p", "routerId", "x", "flushIntervalMillis", 1, "queueMaxBlocks", 1L << 26)));
    assertThat(made.isOk()).as(String.valueOf(made.errors())).isTrue();
    RedisReplication r = (RedisReplication) made.value();
    try {
      // three hints of 2^20 blocks each (8 MiB of hashes; one array, held by reference)
      int perHint = 1 << 20;
      long[] hashes = new long[perHint];
      for (int i = 0; i < perHint; i++) {
        hashes[i] = i * 0x9E3779B97F4A7C15L;
      }
      Endpoint e = eightEndpoints().get(0);
      InferenceRequest request = InferenceRequest.builder().model("m").prompt("p").build();
      for (int i = 0; i < 3; i++) {
        io.epp4j.api.CycleState state = new io.epp4j.api.CycleState(System.nanoTime(),
            new Random(i));
        state.put(io.epp4j.api.PrefixBlocks.KEY, io.epp4j.api.PrefixBlocks.of(16, hashes));
        r.afterRouting(request, state, RoutingDecision.routed("default",
            Map.of("default", new io.epp4j.api.ProfileResult("default", List.of(e)))));
      }
      assertThat(r.queued()).isEqualTo(3);
      log.up();
      await("every hint published", () -> r.published() == 3);
      List<Integer> sizes = log.batches().stream().map(b -> b.length).toList();
      long oneHint = 8L * perHint + 1024;
      assertThat(sizes).hasSizeGreaterThan(1)
          .allMatch(n -> n <= RedisReplication.MAX_BATCH_BYTES + oneHint);
    } finally {
      r.close();
    }
  }

  @Test
  void aKeyPrefixBesideAnExplicitStreamIsRefusedByName() {
    // the stream key is the stream parameter as written: a keyPrefix beside it used to be read
    // and ignored, so routers configured with another prefix shared one stream unawares
    Result<?> both = create(Map.of("uri", "redis://127.0.0.1:1", "stream", "hints",
        "keyPrefix", "tenant-a:"));
    assertThat(both.isOk()).isFalse();
    assertThat(both.errors()).anyMatch(e -> e.contains("keyPrefix") && e.contains("stream"));
    Result<?> prefixOnly = create(Map.of("uri", "redis://127.0.0.1:1", "connectTimeoutMillis",
        200, "keyPrefix", "tenant-a:"));
    assertThat(prefixOnly.isOk()).as(String.valueOf(prefixOnly.errors())).isTrue();
    RedisReplication r = (RedisReplication) prefixOnly.value();
    assertThat(r.settings().streamKey()).isEqualTo("tenant-a:default:hints");
    r.close();
  }

  @Test
  void namesWithWhitespaceOrAControlCharacterAtAnEndAreRefusedNamingTheParameter() {
    // they were used as written: a pool " p " was another pool than "p" (and its stream another
    // stream), so routers given the two never saw each other's hints, without a word
    Map<String, String> shownAs = new java.util.LinkedHashMap<>();
    shownAs.put(" p ", "' p '");
    shownAs.put("p\n", "'p\\n'"); // a file or secret's last line break
    shownAs.put("\tp", "'\\tp'");
    shownAs.put("p\r", "'p\\r'");
    shownAs.put("p\u00a0", "'p\\u00a0'"); // a no-break space, pasted
    shownAs.put("\u0000p", "'\\u0000p'");
    for (String name : List.of("pool", "stream", "keyPrefix", "routerId")) {
      shownAs.forEach((value, shown) -> {
        Result<?> bad = create(Map.of("uri", "redis://127.0.0.1:1", name, value));
        assertThat(bad.isOk()).as(name + " " + shown).isFalse();
        assertThat(bad.errors()).as(name + " " + shown).singleElement()
            .satisfies(e -> assertThat(e).startsWith("parameter '" + name + "' must not start or"
                + " end with whitespace").contains("got " + shown).doesNotContain("\n"));
      });
    }
    // a long one is shown by its ends
    Result<?> longPool = create(Map.of("uri", "redis://127.0.0.1:1", "pool",
        "a".repeat(1000) + "\n"));
    assertThat(longPool.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("got '" + "a".repeat(40) + "..." + "a".repeat(39) + "\\n'")
        .doesNotContain("a".repeat(81)));
    // only whitespace: refused too (empty keyPrefix is no prefix; blank routerId the default)
    for (String name : List.of("pool", "stream", "keyPrefix")) {
      Result<?> blank = create(Map.of("uri", "redis://127.0.0.1:1", name, " \n"));
      assertThat(blank.errors()).as(name).singleElement()
          .satisfies(e -> assertThat(e).startsWith("parameter '" + name + "' must not be"));
    }
  }

  @Test
  void namesWithAControlCharacterOrALineBreakInsideAreRefusedThroughTheConfigFile() {
    // they were accepted and reached as written the log lines (a line break in a pool's name
    // started a line of its own in every warning naming the pool), the metrics' pool attribute
    // and the stream key, where a NUL between two letters shows as nothing: another pool than
    // the two letters that looks like it. Each is written as a user writes it, escaped in a
    // double-quoted YAML string.
    Map<String, String> shownAs = new java.util.LinkedHashMap<>();
    shownAs.put("p\\nq", "p\\nq");
    shownAs.put("p\\tq", "p\\tq");
    shownAs.put("p\\rq", "p\\rq");
    shownAs.put("p\\0q", "p\\u0000q");
    shownAs.put("p\\x7fq", "p\\u007fq"); // DEL
    shownAs.put("p\\x1bq", "p\\u001bq"); // ESC, a terminal's escape sequences
    shownAs.put("p\\Nq", "p\\u0085q"); // NEL
    shownAs.put("p\\Lq", "p\\u2028q"); // the line separator
    shownAs.put("p\\Pq", "p\\u2029q"); // the paragraph separator
    for (String name : List.of("pool", "stream", "keyPrefix", "routerId")) {
      shownAs.forEach((yaml, shown) -> {
        String config = configYaml("prefix-cache-scorer", name + ": \"" + yaml + "\"", "");
        assertThatThrownBy(() -> router(new InMemoryLog(), "a", config)).as(name + " " + shown)
            .isInstanceOfSatisfying(io.epp4j.core.ConfigException.class, e -> assertThat(
                e.errors()).singleElement().satisfies(error -> assertThat(error)
                .contains("parameter '" + name + "' must not contain a control character or a"
                    + " line break").contains("got '" + shown + "'")
                .doesNotContainPattern("[\\p{Cc}\\x{2028}\\x{2029}]")));
      });
    }
    // a long name is shown by its ends: the error says where the character is
    String hidden = "a".repeat(50) + "\\n" + "a".repeat(50);
    assertThatThrownBy(() -> router(new InMemoryLog(), "a", configYaml("prefix-cache-scorer",
        "pool: \"" + hidden + "\"", "")))
        .isInstanceOfSatisfying(io.epp4j.core.ConfigException.class, e -> assertThat(
            e.errors()).singleElement().satisfies(error -> assertThat(error)
            .contains("parameter 'pool'").contains("'\\n' at character 51")));
    // spaces inside stay names of their own (a no-break space included)
    Router spaced = router(new InMemoryLog(), "a", configYaml("prefix-cache-scorer",
        "pool: \"llama 70b\", routerId: \"gateway\u00a01\"", ""));
    RedisReplication r = replication(spaced);
    assertThat(r.settings().pool()).isEqualTo("llama 70b");
    assertThat(r.settings().routerId()).isEqualTo("gateway\u00a01");
  }

  @Test
  void aNameOrTrustCertFileGivenWithoutAValueIsRefusedAsAnEmptyOneIs() throws Exception {
    // "pool:" with nothing after it (a template's unset variable: pool: $POOL) is null in YAML,
    // which was read as no parameter: the pool "default", shared with every router left
    // without one, and for trustCertFile the JVM's trust store in place of the CA meant, where
    // an empty value ("") was refused
    for (String name : List.of("pool", "stream", "keyPrefix")) {
      String config = configYaml("prefix-cache-scorer", name + ":", "");
      assertThatThrownBy(() -> router(new InMemoryLog(), "a", config)).as(name)
          .isInstanceOfSatisfying(io.epp4j.core.ConfigException.class, e -> assertThat(
              e.errors()).singleElement().satisfies(error -> assertThat(error)
              .contains("parameter '" + name + "' has no value")));
    }
    Result<?> trust = create(new HashMap<>(Map.of("uri", "rediss://127.0.0.1:1")) {
      {
        put("trustCertFile", null);
      }
    });
    assertThat(trust.errors()).singleElement().satisfies(e -> assertThat(e)
        .startsWith("parameter 'trustCertFile' has no value"));
    // routerId without a value is the default, as an empty one is
    Router r = router(new InMemoryLog(), "a", configYaml("prefix-cache-scorer", "routerId:", ""));
    assertThat(replication(r).settings().routerId()).isNotBlank();
  }

  @Test
  void aNumberOrVerifyPeerGivenWithoutAValueIsRefusedByName() {
    // "streamTtlSeconds:" with nothing after it (a template's unset variable) was read as left
    // out: a day's TTL where 0 (none) or ten years may have been meant, verification where
    // false was, and so on, without a word
    for (String name : List.of("batchSize", "flushIntervalMillis", "maxLen", "streamTtlSeconds",
        "queueCapacity", "queueMaxBlocks", "heartbeatMillis", "connectTimeoutMillis",
        "verifyPeer")) {
      String config = configYaml("prefix-cache-scorer", name + ":", "");
      assertThatThrownBy(() -> router(new InMemoryLog(), "a", config)).as(name)
          .isInstanceOfSatisfying(io.epp4j.core.ConfigException.class, e -> assertThat(
              e.errors()).singleElement().satisfies(error -> assertThat(error)
              .contains("parameter '" + name + "' has no value")));
    }
  }

  @Test
  void namesWithWhitespaceInsideAnEmptyKeyPrefixAndABlankRouterIdAreAccepted() {
    Result<?> inside = create(Map.of("uri", "redis://127.0.0.1:1", "connectTimeoutMillis", 200,
        "pool", "llama 70b", "keyPrefix", "team a:", "routerId", "gateway 1"));
    assertThat(inside.isOk()).as(String.valueOf(inside.errors())).isTrue();
    RedisReplication r = (RedisReplication) inside.value();
    try {
      assertThat(r.settings().pool()).isEqualTo("llama 70b");
      assertThat(r.settings().streamKey()).isEqualTo("team a:llama 70b:hints");
      assertThat(r.settings().routerId()).isEqualTo("gateway 1");
    } finally {
      r.close();
    }
    Result<?> stream = create(Map.of("uri", "redis://127.0.0.1:1", "connectTimeoutMillis", 200,
        "stream", "my hints"));
    assertThat(stream.isOk()).as(String.valueOf(stream.errors())).isTrue();
    r = (RedisReplication) stream.value();
    try {
      assertThat(r.settings().streamKey()).isEqualTo("my hints");
    } finally {
      r.close();
    }
    Result<?> noPrefix = create(Map.of("uri", "redis://127.0.0.1:1", "connectTimeoutMillis", 200,
        "keyPrefix", "", "routerId", " \n"));
    assertThat(noPrefix.isOk()).as(String.valueOf(noPrefix.errors())).isTrue();
    r = (RedisReplication) noPrefix.value();
    try {
      assertThat(r.settings().streamKey()).isEqualTo("default:hints");
      // the router's own id, as when none is given
      assertThat(r.settings().routerId()).isNotBlank().isNotEqualTo(" \n");
    } finally {
      r.close();
    }
  }

  @Test
  void tlsParametersWithAPlainRedisUriAreRefusedByName() throws Exception {
    // with redis:// they used to be ignored: a file meant to make the connection TLS left it in
    // plaintext, the password in the URI included
    Path ca = Files.createTempFile("epp4j-ca", ".pem");
    try {
      Files.writeString(ca, anyCertificatePem());
      Result<?> trust = create(Map.of("uri", "redis://user:s3cret@127.0.0.1:1",
          "trustCertFile", ca.toString()));
      assertThat(trust.isOk()).isFalse();
      assertThat(trust.errors()).anyMatch(e -> e.contains("trustCertFile")
          && e.contains("rediss://")).noneMatch(e -> e.contains("s3cret"));
      Result<?> verify = create(Map.of("uri", "redis://127.0.0.1:1", "verifyPeer", false));
      assertThat(verify.isOk()).isFalse();
      assertThat(verify.errors()).anyMatch(e -> e.contains("verifyPeer")
          && e.contains("rediss://"));
    } finally {
      Files.delete(ca);
    }
  }

  @Test
  void anEmptyTrustCertFileOrOneWithWhitespaceAtAnEndIsRefusedByName() throws Exception {
    // empty (an unset variable behind it) it used to mean the JVM's trust store in place of the
    // CA meant, and whitespace at its ends was trimmed away unsaid
    Path ca = Files.createTempFile("epp4j-ca", ".pem");
    try {
      Files.writeString(ca, anyCertificatePem());
      for (String blank : List.of("", " ", "\n")) {
        Result<?> bad = create(Map.of("uri", "rediss://127.0.0.1:1", "trustCertFile", blank));
        assertThat(bad.isOk()).as("'" + blank + "'").isFalse();
        assertThat(bad.errors()).singleElement().satisfies(e -> assertThat(e)
            .startsWith("parameter 'trustCertFile' must not be empty"));
      }
      for (String padded : List.of(ca + "\n", " " + ca)) {
        Result<?> bad = create(Map.of("uri", "rediss://127.0.0.1:1", "trustCertFile", padded));
        assertThat(bad.isOk()).as(padded).isFalse();
        assertThat(bad.errors()).singleElement().satisfies(e -> assertThat(e)
            .startsWith("parameter 'trustCertFile' must not start or end with whitespace"));
      }
      Result<?> ok = create(Map.of("uri", "rediss://127.0.0.1:1", "connectTimeoutMillis", 200,
          "trustCertFile", ca.toString()));
      assertThat(ok.isOk()).as(String.valueOf(ok.errors())).isTrue();
      ((RedisReplication) ok.value()).close();
      // a missing file is shown whole, with its control characters escaped
      String missing = ca + "-" + "x".repeat(100) + "\u0007.pem";
      Result<?> gone = create(Map.of("uri", "rediss://127.0.0.1:1", "trustCertFile", missing));
      assertThat(gone.errors()).singleElement().satisfies(e -> assertThat(e)
          .contains("trustCertFile").contains("x".repeat(100) + "\\u0007.pem'")
          .doesNotContain("\u0007"));
    } finally {
      Files.delete(ca);
    }
  }

  @Test
  void aTrustCertFileWithVerificationOffIsRefusedByName() throws Exception {
    // with nothing verified Lettuce trusts any certificate: the file was read, checked and then
    // ignored, so a configuration that looked pinned to a CA accepted any server
    Path ca = Files.createTempFile("epp4j-ca", ".pem");
    try {
      Files.writeString(ca, anyCertificatePem());
      for (Map<String, Object> off : List.<Map<String, Object>>of(
          Map.of("uri", "rediss://u:s3cret@127.0.0.1:1", "verifyPeer", false),
          Map.of("uri", "rediss://u:s3cret@127.0.0.1:1?verifyPeer=NONE"),
          Map.of("uri", "rediss://u:s3cret@127.0.0.1:1?verifypeer=none"))) {
        Map<String, Object> params = new HashMap<>(off);
        params.put("trustCertFile", ca.toString());
        Result<?> bad = create(params);
        assertThat(bad.isOk()).as(String.valueOf(off)).isFalse();
        assertThat(bad.errors()).as(String.valueOf(off)).singleElement().satisfies(e ->
            assertThat(e).startsWith("parameter 'trustCertFile' has no effect when nothing is"
                + " verified").doesNotContain("s3cret"));
      }
      // the chain alone (CA) is verified against it
      Result<?> chain = create(Map.of("uri", "rediss://127.0.0.1:1?verifyPeer=CA",
          "connectTimeoutMillis", 200, "trustCertFile", ca.toString()));
      assertThat(chain.isOk()).as(String.valueOf(chain.errors())).isTrue();
      ((RedisReplication) chain.value()).close();
    } finally {
      Files.delete(ca);
    }
  }

  @Test
  void verifyPeerGivenBothInTheUriAndAsAParameterIsRefusedByName() {
    // one of the two would be ignored without a word
    Result<?> both = create(Map.of("uri", "rediss://127.0.0.1:1?verifyPeer=CA", "verifyPeer",
        true));
    assertThat(both.isOk()).isFalse();
    assertThat(both.errors()).anyMatch(e -> e.contains("'verifyPeer'") && e.contains("'uri'"));
  }

  @Test
  void aTimeoutInTheUriIsRefusedNamingTheParameterThatSetsIt() {
    // it used to be replaced by connectTimeoutMillis (2 s by default) without a word
    Result<?> timeout = create(Map.of("uri", "redis://127.0.0.1:1?timeout=30s"));
    assertThat(timeout.isOk()).isFalse();
    assertThat(timeout.errors()).anyMatch(e -> e.contains("'uri'")
        && e.contains("'connectTimeoutMillis'"));
  }

  @Test
  void aUriWhoseHostHasWhitespaceOrAControlCharacterIsRefusedByName() {
    // a space as written is no URI, but Lettuce decoded a percent-encoded one into the host (and
    // took the whole "host:port" for it): the URI was accepted and every connection failed
    for (String uri : List.of("redis://%20redis:6379", "redis://redis%20:6379",
        "rediss://:s3cret@redis%09:6380", "redis://%0Aredis/0", "redis://%20",
        "redis://redis%C2%A0/0", "redis-sentinel://:s3cret@s1:26379,s2%20:26379/0#mymaster")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' has whitespace or a control character in a host")
          .doesNotContain("s3cret").doesNotContain("redis:").doesNotContain("s2"));
    }
  }

  @Test
  void aUriWhoseHostLettuceCannotTellFromItsPortIsRefusedByName() {
    // redis_cache:6380 is no host name to java.net.URI: Lettuce took "redis_cache:6380" for the
    // host, with port 6379, which no lookup finds, and the URI was accepted
    for (String uri : List.of("redis://redis_cache:6380", "rediss://u:s3cret@redis_cache:6380/1",
        "redis://r%C3%A9dis:6380")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' has a host whose port could not be read")
          .doesNotContain("s3cret").doesNotContain("redis_cache"));
    }
  }

  @Test
  void aUriWithPortZeroOrADatabaseLettuceCannotReadIsRefusedByName() {
    // Lettuce read port 0 as no port and connected to 6379, and a database it could not read
    // (" 1", "one") as database 0, without a word
    for (String uri : List.of("redis://127.0.0.1:0", "rediss://u:s3cret@127.0.0.1:0/1")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' has port 0").doesNotContain("s3cret"));
    }
    for (String uri : List.of("redis://127.0.0.1:6379?database=%201",
        "redis://127.0.0.1:6379?database=one", "redis://127.0.0.1:6379?db=-1",
        "redis://u:s3cret@127.0.0.1:6379?DATABASE=1x")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' sets a database in its query").doesNotContain("s3cret"));
    }
    // a database Lettuce reads is kept, in the query or in the path
    for (String uri : List.of("redis://127.0.0.1:1?database=2", "redis://127.0.0.1:1/3",
        "redis://127.0.0.1:1?db=0")) {
      Result<?> ok = create(Map.of("uri", uri, "connectTimeoutMillis", 200));
      assertThat(ok.isOk()).as(uri + " " + ok.errors()).isTrue();
      ((RedisReplication) ok.value()).close();
    }
  }

  @Test
  void aQueryOptionOfTheUriThatLettuceDoesNotReadIsRefusedByName() {
    // Lettuce reads seven options and ignores any other without a word: ?ssl=true left the
    // connection, and the password in the URI, in plaintext; ?databse=2 or ?DB=2 (it reads db in
    // lower case only) connected to database 0
    Map<String, String> named = new java.util.LinkedHashMap<>();
    named.put("redis://:s3cret@127.0.0.1:6379?ssl=true", "'ssl'");
    named.put("redis://127.0.0.1:6379?databse=2", "'databse'");
    named.put("redis://127.0.0.1:6379?DB=2", "'DB'");
    named.put("redis://127.0.0.1:6379?database=2&verify_peer=NONE", "'verify_peer'");
    named.put("redis://127.0.0.1:6379?clientName=gw;password=s3cret", "'password'");
    named.put("rediss://127.0.0.1:6380?verifyPeer=CA&s3cret", "an option"); // no name shown
    named.put("redis://127.0.0.1:6379?protocol=2", "'protocol'");
    named.forEach((uri, shown) -> {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' sets " + shown + " in its query, which Lettuce does not"
              + " read").doesNotContain("s3cret").doesNotContain("127.0.0.1"));
    });
    // the options Lettuce reads, in any case but db's
    for (String uri : List.of("redis://127.0.0.1:1?clientName=gw-1&libraryName=x&libraryVersion=1",
        "redis://127.0.0.1:1?Database=2&CLIENTNAME=gw", "redis://127.0.0.1:1?db=1&",
        "rediss://127.0.0.1:1?verifyPeer=CA")) {
      Result<?> ok = create(Map.of("uri", uri, "connectTimeoutMillis", 200));
      assertThat(ok.isOk()).as(uri + " " + ok.errors()).isTrue();
      ((RedisReplication) ok.value()).close();
    }
  }

  @Test
  void theUrisQueryIsReadAsLettuceReadsItAfterASemicolonToo() {
    // Lettuce splits the query at ';' as at '&': after a ';' a database it cannot read went
    // unchecked (it connected to database 0), and one it reads was refused, the rest of the
    // query taken for its value
    for (String uri : List.of("redis://127.0.0.1:6379?clientName=gw;database=one",
        "redis://u:s3cret@127.0.0.1:6379?clientName=gw;db=%201",
        "redis://127.0.0.1:6379?database=1%26db=x")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' sets a database in its query").doesNotContain("s3cret"));
    }
    for (String uri : List.of("redis://127.0.0.1:1?database=2;clientName=gw",
        "redis://127.0.0.1:1?clientName=gw;db=4", "redis://127.0.0.1:1?database=1%26db=3")) {
      Result<?> ok = create(Map.of("uri", uri, "connectTimeoutMillis", 200));
      assertThat(ok.isOk()).as(uri + " " + ok.errors()).isTrue();
      ((RedisReplication) ok.value()).close();
    }
    // so are timeout and verifyPeer, which parameters of their own set
    Result<?> timeout = create(Map.of("uri", "redis://127.0.0.1:1?clientName=gw;timeout=30s"));
    assertThat(timeout.errors()).singleElement().satisfies(e -> assertThat(e)
        .startsWith("parameter 'uri' sets 'timeout' in its query"));
    Result<?> verify = create(Map.of("uri", "rediss://127.0.0.1:1?clientName=gw;verifyPeer=CA",
        "verifyPeer", true));
    assertThat(verify.errors()).singleElement().satisfies(e -> assertThat(e)
        .startsWith("parameter 'verifyPeer' is also set by the query of parameter 'uri'"));
  }

  @Test
  void aClientNameInTheUriThatRedisRefusesIsRefusedByName() {
    // Lettuce sends it with every connection's handshake (HELLO ... SETNAME), and Redis refuses
    // a name with a space, a control character or a character outside ASCII: no connection was
    // ever made, and the configuration had been accepted
    for (String uri : List.of("redis://127.0.0.1:6379?clientName=gateway%201",
        "redis://u:s3cret@127.0.0.1:6379?clientName=gw%0A1",
        "redis://127.0.0.1:6379?clientName=r%C3%A9",
        "redis://127.0.0.1:6379?database=1;clientName=gw%7F")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' sets a clientName that Redis refuses")
          .doesNotContain("s3cret").doesNotContain("gw").doesNotContain("gateway"));
    }
    // printable ASCII is taken, and an empty name is none
    for (String uri : List.of("redis://127.0.0.1:1?clientName=gw-1~!x",
        "redis://127.0.0.1:1?clientName=")) {
      Result<?> ok = create(Map.of("uri", uri, "connectTimeoutMillis", 200));
      assertThat(ok.isOk()).as(uri + " " + ok.errors()).isTrue();
      ((RedisReplication) ok.value()).close();
    }
  }

  @Test
  void aUriWithOneDatabaseInItsPathAndAnotherInItsQueryIsRefusedByName() {
    // Lettuce connected to the query's database and ignored the path's without a word
    for (String uri : List.of("redis://127.0.0.1:6379/2?database=3",
        "rediss://u:s3cret@127.0.0.1:6380/0?db=1", "redis://127.0.0.1:6379/1?clientName=gw;db=0")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' sets one database in its path and another in its query")
          .doesNotContain("s3cret"));
    }
    // the same one twice says nothing twice over
    Result<?> ok = create(Map.of("uri", "redis://127.0.0.1:1/2?database=2",
        "connectTimeoutMillis", 200));
    assertThat(ok.isOk()).as(String.valueOf(ok.errors())).isTrue();
    ((RedisReplication) ok.value()).close();
  }

  @Test
  void aSentinelMasterNameInAUriThatIsNoSentinelUriIsRefusedByName() {
    // Lettuce connected to the host as to a Redis server and ignored the name: the scheme meant
    // was redis-sentinel://, and the host (a Sentinel) took no XADD
    for (String uri : List.of("redis://127.0.0.1:26379#mymaster",
        "rediss://u:s3cret@127.0.0.1:26379/0#mymaster",
        "redis://127.0.0.1:26379?sentinelMasterId=mymaster")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' names a Sentinel master").contains("redis-sentinel://")
          .doesNotContain("s3cret").doesNotContain("mymaster"));
    }
    Result<?> sentinel = create(Map.of("uri", "redis-sentinel://127.0.0.1:1#mymaster",
        "connectTimeoutMillis", 200));
    assertThat(sentinel.isOk()).as(String.valueOf(sentinel.errors())).isTrue();
    ((RedisReplication) sentinel.value()).close();
  }

  @Test
  void aSentinelMasterNameWithAControlCharacterInsideIsRefusedByName() {
    // as a name of the plugin's own: Sentinel's configuration, a file of lines, holds no such
    // name, so the URI was accepted and no master was ever found
    for (String uri : List.of("redis-sentinel://s1:26379/0#my%0Amaster",
        "redis-sentinel://:s3cret@s1:26379/0?sentinelMasterId=my%09master",
        "redis-sentinel://s1:26379#my%00master", "redis-sentinel://s1:26379#my%E2%80%A8master")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' has a sentinel master name with a control character or a"
              + " line break in it").doesNotContain("s3cret").doesNotContain("master'"));
    }
  }

  @Test
  void aUnixSocketUriWithoutANativeTransportIsRefusedByName() {
    // this module brings no Netty native transport (epoll, kqueue), and Lettuce connects to a
    // Unix domain socket only with one: every connection failed (IllegalStateException) after
    // the configuration had been accepted
    assertThat(io.lettuce.core.resource.Transports.NativeTransports.isDomainSocketSupported())
        .as("a native transport on the test class path").isFalse();
    for (String uri : List.of("redis-socket:///var/run/redis/redis.sock",
        "redis-socket:///tmp/s3cret.sock?database=1")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' is a Unix domain socket").contains("netty-transport-native")
          .doesNotContain("s3cret"));
    }
  }

  @Test
  void aUriWithAUserAndAnEmptyPasswordIsRefusedByName() {
    // Lettuce drops a user whose password is empty and connects as the default user: another
    // identity (its ACL, its permissions) than the one named, without a word
    for (String uri : List.of("redis://epp:@127.0.0.1:6379",
        "rediss://gateway-user:@127.0.0.1:6380/1")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' names a user with an empty password")
          .doesNotContain("epp:").doesNotContain("gateway-user"));
    }
    // a password alone is the default user's, as Lettuce reads it
    Result<?> ok = create(Map.of("uri", "redis://:pw@127.0.0.1:1", "connectTimeoutMillis", 200));
    assertThat(ok.isOk()).as(String.valueOf(ok.errors())).isTrue();
    ((RedisReplication) ok.value()).close();
  }

  @Test
  void aStartTlsUriIsRefusedByName() {
    // redis+tls:// is Lettuce's STARTTLS: the handshake's first command goes in plaintext, which
    // a TLS port of Redis or Valkey (neither speaks STARTTLS) answers by closing the connection;
    // every connection failed after the configuration had been accepted
    for (String uri : List.of("redis+tls://127.0.0.1:6380",
        "redis+tls://u:s3cret@127.0.0.1:6380/1")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' asks for STARTTLS").contains("rediss://")
          .doesNotContain("s3cret"));
    }
    // redis+ssl:// is rediss:// under another name
    Result<?> ok = create(Map.of("uri", "redis+ssl://127.0.0.1:1", "connectTimeoutMillis", 200));
    assertThat(ok.isOk()).as(String.valueOf(ok.errors())).isTrue();
    ((RedisReplication) ok.value()).close();
  }

  @Test
  void aSentinelMasterNameWithWhitespaceAtAnEndIsRefusedByName() {
    for (String uri : List.of("redis-sentinel://s1:26379/0#mymaster%20",
        "redis-sentinel://s1:26379/0?sentinelMasterId=%0Amymaster")) {
      Result<?> bad = create(Map.of("uri", uri));
      assertThat(bad.isOk()).as(uri).isFalse();
      assertThat(bad.errors()).as(uri).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'uri' has a sentinel master name with whitespace"));
    }
  }

  @Test
  void spacesInTheUrisCredentialsAreKeptAndAroundItIgnored() {
    // percent-encoded, a user and a password may hold spaces, at their ends too; whitespace
    // around the whole URI, which no URI holds, is ignored
    for (String uri : List.of("redis://:%20pa%20ss%20@127.0.0.1:1",
        "rediss://us%20er:pw%09@127.0.0.1:1/0", " redis://127.0.0.1:1\n")) {
      Result<?> ok = create(Map.of("uri", uri, "connectTimeoutMillis", 200));
      assertThat(ok.isOk()).as(uri + " " + ok.errors()).isTrue();
      ((RedisReplication) ok.value()).close();
    }
  }

  /** A CA certificate of the JDK's own trust store, as PEM: a valid file for trustCertFile. */
  private static String anyCertificatePem() throws Exception {
    java.security.KeyStore cacerts = java.security.KeyStore.getInstance(
        Path.of(System.getProperty("java.home"), "lib", "security", "cacerts").toFile(),
        "changeit".toCharArray());
    java.security.cert.Certificate c =
        cacerts.getCertificate(cacerts.aliases().nextElement());
    return "-----BEGIN CERTIFICATE-----\n"
        + java.util.Base64.getMimeEncoder(64, "\n".getBytes(java.nio.charset.StandardCharsets.US_ASCII))
            .encodeToString(c.getEncoded())
        + "\n-----END CERTIFICATE-----\n";
  }

  @Test
  void aValidRedisUriBuildsAPluginThatDoesNotNeedRedisToStart() {
    // nothing listens on port 1: the plugin is created and keeps trying in the background
    Result<?> ok = create(Map.of("uri", "rediss://user:pw@127.0.0.1:1", "connectTimeoutMillis",
        200));
    assertThat(ok.isOk()).as(String.valueOf(ok.errors())).isTrue();
    RedisReplication r = (RedisReplication) ok.value();
    assertThat(r.connected()).isFalse();
    assertThat(r.settings().streamKey()).isEqualTo("epp4j:default:hints");
    r.close();
  }

  @Test
  void theReadmesMetricsTableListsEveryInstrument() throws Exception {
    io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader metrics =
        io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader.create();
    io.opentelemetry.sdk.OpenTelemetrySdk otel = io.opentelemetry.sdk.OpenTelemetrySdk.builder()
        .setMeterProvider(io.opentelemetry.sdk.metrics.SdkMeterProvider.builder()
            .registerMetricReader(metrics).build())
        .build();
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "a", configYaml("prefix-cache-scorer",
        "pool: p, routerId: a, flushIntervalMillis: 1", ""));
    Router b = Router.builder().endpoints(eightEndpoints())
        .registry(PluginRegistry.fromServiceLoader()
            .with(new RedisReplication.Provider(log::factory)))
        .configYaml(configYaml("prefix-cache-scorer",
            "pool: p, routerId: b, flushIntervalMillis: 1", ""), "b")
        .openTelemetry(otel).build();
    routers.add(b);
    a.route(InferenceRequest.builder().model("m").prompt("hello ".repeat(100)).maxTokens(4)
        .build()).onComplete(new Usage(1, 0, 1));
    // the lag is recorded just after the prefix is counted as applied: wait for the histogram
    await("b recorded the lag of a's prefix", () -> metrics.collectAllMetrics().stream()
        .anyMatch(m -> m.getName().equals("epp4j.replication.lag")));
    List<String> instruments = metrics.collectAllMetrics().stream().map(m -> m.getName())
        .filter(n -> n.startsWith("epp4j.replication.")).distinct().toList();
    assertThat(instruments).contains("epp4j.replication.lag", "epp4j.replication.resyncs");
    // the table under "### Metrics": its consecutive lines starting with '|'
    List<String> lines = Files.readAllLines(Path.of("README.md"));
    int at = lines.indexOf("### Metrics");
    assertThat(at).isNotNegative();
    while (!lines.get(at).startsWith("| instrument")) {
      at++;
    }
    StringBuilder table = new StringBuilder();
    for (; at < lines.size() && lines.get(at).startsWith("|"); at++) {
      table.append(lines.get(at)).append('\n');
    }
    for (String name : instruments) {
      assertThat(table.toString()).as(name).contains("| `" + name + "` |");
    }
  }

  @Test
  void theReadmeDocumentsTheTypeAndEveryParameter() throws Exception {
    String readme = Files.readString(Path.of("README.md"));
    assertThat(readme).contains("## " + RedisReplication.TYPE);
    for (String p : List.of("uri", "pool", "keyPrefix", "stream", "routerId", "batchSize",
        "flushIntervalMillis", "maxLen", "queueCapacity", "queueMaxBlocks", "heartbeatMillis",
        "connectTimeoutMillis", "verifyPeer", "trustCertFile", "streamTtlSeconds")) {
      assertThat(readme).as("parameter " + p).contains("`" + p + "`");
    }
  }

  /**
   * An origin's clock steps back 3 s (an NTP step): the difference between its batches' ids and
   * send times grows by 3 s and stays there. The offset, the smallest difference of two windows
   * of ten heartbeats, kept the old value for up to 20 s, and the origin's moves looked 3 s older
   * than they were meanwhile. Every batch of half a heartbeat that far above the offset is now a
   * step: followed within a heartbeat. A batch held up alone between its stamp and the server
   * still leaves the offset where it is.
   */
  @Test
  void anOriginWhoseClockStepsBackIsFollowedWithinAHeartbeat() {
    RedisReplication.OriginOffsets offsets = new RedisReplication.OriginOffsets();
    long window = 10 * 1000; // ten heartbeats of 1 s
    long[] t = {1_800_000_000_000L}; // log ms
    long offset = 2_000; // the origin's clock is 2 ms behind the server's
    // the origin's batch appended now, stamped `behind` µs behind the log's clock
    java.util.function.LongUnaryOperator batch = behind -> {
      t[0] += 100;
      return offsets.offset("x", t[0], t[0] * 1000 + 500 - behind, window);
    };
    for (int i = 0; i < 20; i++) {
      assertThat(batch.applyAsLong(offset)).isEqualTo(offset);
    }
    // one batch held up 10 s between its stamp and the server, then 400 ms of slow appends
    assertThat(batch.applyAsLong(offset + 10_000_000)).isEqualTo(offset);
    for (int i = 0; i < 4; i++) {
      assertThat(batch.applyAsLong(offset + 700_000)).as("slow append %d", i).isEqualTo(offset);
    }
    assertThat(batch.applyAsLong(offset)).isEqualTo(offset);

    long stepped = offset + 3_000_000;
    List<Long> seen = new ArrayList<>();
    for (int i = 0; i < 10; i++) { // a heartbeat of batches after the step
      seen.add(batch.applyAsLong(stepped));
    }
    assertThat(seen.get(0)).as("the first batch after the step").isEqualTo(offset);
    assertThat(seen.get(seen.size() - 1)).as("a heartbeat after the step").isEqualTo(stepped);
    // and a step forward is followed at once, as before
    assertThat(batch.applyAsLong(offset)).isEqualTo(offset);
  }
}
