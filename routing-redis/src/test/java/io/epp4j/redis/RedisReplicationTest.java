package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.DefaultClientResources;
import io.netty.util.concurrent.DefaultThreadFactory;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Three routers in one JVM share one real redis-server, as three gateway replicas of one pool
 * would. Each test has a pool (and so a stream) of its own.
 */
class RedisReplicationTest {
  @RegisterExtension
  static final RedisServer REDIS = new RedisServer();

  static final Duration DEADLINE = Duration.ofSeconds(20);
  /**
   * How long a router may take to connect: on a starved machine an attempt can run out of
   * connectTimeoutMillis (2 s) in its handshake, and the next one waits out a backoff of up to
   * 5 s, so three failed attempts already take about 20 s. Connecting is what is waited for, so
   * a longer bound only makes a router that never connects fail later.
   */
  static final Duration CONNECT_DEADLINE = Duration.ofSeconds(60);
  static final int ENDPOINTS = 8;
  static final AtomicInteger POOLS = new AtomicInteger();

  private final List<Router> routers = new ArrayList<>();
  private String pool = "";

  @BeforeEach
  void pool() {
    pool = "test-" + ProcessHandle.current().pid() + "-" + POOLS.incrementAndGet();
  }

  @AfterEach
  void close() {
    routers.forEach(Router::close);
  }

  static List<Endpoint> endpoints() {
    List<Endpoint> eps = new ArrayList<>();
    for (int i = 0; i < ENDPOINTS; i++) {
      eps.add(Endpoint.parse("10.1.0." + (i + 1) + ":8000"));
    }
    return eps;
  }

  Router router(String id, int queueCapacity, Router.Builder b) {
    String yaml = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: prefix-cache-scorer
        - type: session-affinity-scorer
        - type: max-score-picker
        - type: redis-replication
          parameters:
            uri: %s
            pool: %s
            routerId: %s
            flushIntervalMillis: 2
            heartbeatMillis: 200
            queueCapacity: %d
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: prefix-cache-scorer
            weight: 1
          - pluginRef: session-affinity-scorer
            weight: 2
          - pluginRef: max-score-picker
        """.formatted(REDIS.uri(), pool, id, queueCapacity);
    Router r = b.endpoints(endpoints()).configYaml(yaml, "router " + id)
        .randomSeed(id.hashCode()).build();
    routers.add(r);
    return r;
  }

  Router router(String id) {
    return router(id, 65_536, Router.builder());
  }

  static RedisReplication replication(Router r) {
    return (RedisReplication) r.config().plugins().get(RedisReplication.TYPE);
  }

  static InferenceRequest prompt(long seed, int tokens, String session) {
    Random rnd = new Random(seed);
    int[] ids = new int[tokens];
    for (int i = 0; i < ids.length; i++) {
      ids[i] = rnd.nextInt(50_000);
    }
    InferenceRequest.Builder b = InferenceRequest.builder().model("m").tokenIds(ids).maxTokens(16);
    if (session != null) {
      b.sessionKey(session);
    }
    return b.build();
  }

  static void await(String what, BooleanSupplier condition) throws InterruptedException {
    await(what, condition, DEADLINE);
  }

  static void await(String what, BooleanSupplier condition, Duration bound)
      throws InterruptedException {
    long deadline = System.nanoTime() + bound.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("timed out after " + bound + " waiting until " + what);
      }
      Thread.sleep(1);
    }
  }

  /**
   * Waits until {@code condition} holds, for as long as {@code progress} grows: for a state that
   * takes work on the machine's CPU (so many routes), whose time a loaded machine stretches.
   * Fails when {@code progress} stands still for {@link #DEADLINE}, or after five of them in all.
   */
  static void awaitWhileProgressing(String what, BooleanSupplier condition,
      java.util.function.LongSupplier progress) throws InterruptedException {
    long start = System.nanoTime();
    long last = progress.getAsLong();
    long lastMoved = start;
    while (!condition.getAsBoolean()) {
      long now = System.nanoTime();
      long p = progress.getAsLong();
      if (p != last) {
        last = p;
        lastMoved = now;
      }
      if (now - lastMoved > DEADLINE.toNanos()) {
        throw new AssertionError("no progress for " + DEADLINE + " waiting until " + what);
      }
      if (now - start > 5 * DEADLINE.toNanos()) {
        throw new AssertionError("timed out after " + DEADLINE.multipliedBy(5)
            + " waiting until " + what);
      }
      Thread.sleep(1);
    }
  }

  static void awaitConnected(Router... rs) throws InterruptedException {
    for (Router r : rs) {
      await("the replication is connected", () -> replication(r).connected(), CONNECT_DEADLINE);
    }
  }

  static int inFlight(Router r, String endpointId) {
    for (Candidate c : r.endpoints()) {
      if (c.id().equals(endpointId)) {
        return c.inFlightRequests();
      }
    }
    return -1;
  }

  static final Usage DONE = new Usage(1024, 0, 16);

  @Test
  void aPrefixRoutedByOneRouterScoresOnTheOthers() throws Exception {
    Router a = router("a");
    Router b = router("b");
    Router c = router("c");
    awaitConnected(a, b, c);
    int n = 20;
    String[] chosen = new String[n];
    for (int i = 0; i < n; i++) {
      RoutingDecision d = a.route(prompt(i, 1024, null));
      chosen[i] = d.primary().id();
      d.onComplete(DONE);
    }
    await("b and c applied a's prefixes", () -> replication(b).appliedPrefixes() >= n
        && replication(c).appliedPrefixes() >= n);
    for (int i = 0; i < n; i++) {
      // only the endpoint a sent the prompt to holds it: the max-score picker must take it
      for (Router other : List.of(b, c)) {
        RoutingDecision d = other.route(prompt(i, 1024, null));
        assertThat(d.primary().id()).as("prompt %d on another router", i).isEqualTo(chosen[i]);
        d.onComplete(DONE);
      }
    }
    assertThat(replication(a).dropped()).isZero();
  }

  /**
   * An application with several routers gives them one Lettuce {@code ClientResources}: their
   * clients run on its threads and start none of their own (each router otherwise adds up to five
   * Lettuce threads, and every reload as many again for a while), and closing one router leaves
   * the resources, and the other routers on them, working.
   */
  @Test
  void routersGivenOneClientResourcesStartNoLettuceThreadsOfTheirOwn() throws Exception {
    Set<Thread> sharedThreads = ConcurrentHashMap.newKeySet();
    ClientResources shared = DefaultClientResources.builder()
        .threadFactoryProvider(name -> {
          ThreadFactory netty = new DefaultThreadFactory(name, true);
          return r -> {
            Thread t = netty.newThread(r);
            sharedThreads.add(t);
            return t;
          };
        })
        .build();
    try {
      Set<Thread> before = Set.copyOf(Thread.getAllStackTraces().keySet());
      Router a = router("a", 65_536, Router.builder().service(ClientResources.class, shared));
      Router b = router("b", 65_536, Router.builder().service(ClientResources.class, shared));
      Router c = router("c", 65_536, Router.builder().service(ClientResources.class, shared));
      awaitConnected(a, b, c);
      RoutingDecision first = a.route(prompt(7000, 1024, null));
      first.onComplete(DONE);
      await("b and c applied a's prefix", () -> replication(b).appliedPrefixes() >= 1
          && replication(c).appliedPrefixes() >= 1);
      List<String> ownThreads = new ArrayList<>();
      for (Thread t : Thread.getAllStackTraces().keySet()) {
        if (!before.contains(t) && t.getName().startsWith("lettuce-")
            && !sharedThreads.contains(t)) {
          ownThreads.add(t.getName());
        }
      }
      assertThat(sharedThreads).as("threads of the shared resources").isNotEmpty();
      assertThat(ownThreads).as("Lettuce threads the routers started beside the shared ones")
          .isEmpty();

      routers.remove(a);
      a.close();
      assertThat(shared.eventExecutorGroup().isShuttingDown())
          .as("the shared resources after closing one router").isFalse();
      long appliedBefore = replication(c).appliedPrefixes();
      RoutingDecision d = b.route(prompt(7001, 1024, null));
      d.onComplete(DONE);
      await("c applied b's prefix after a closed",
          () -> replication(c).appliedPrefixes() > appliedBefore);
      RoutingDecision there = c.route(prompt(7001, 1024, null));
      assertThat(there.primary().id()).isEqualTo(d.primary().id());
      there.onComplete(DONE);
    } finally {
      routers.forEach(Router::close);
      routers.clear();
      shared.shutdown(0, 2, TimeUnit.SECONDS).get(10, TimeUnit.SECONDS);
    }
  }

  /** The remaining time to live of {@code key} in ms (-1: none, -2: no such key). */
  static long pttl(String uri, String key) {
    RedisClient admin = RedisClient.create(uri);
    try (StatefulRedisConnection<String, String> c = admin.connect()) {
      return c.sync().pttl(key);
    } finally {
      admin.shutdown();
    }
  }

  /**
   * The stream of a pool whose routers are all gone (a pool renamed or retired) must not stay in
   * Redis for good with up to maxLen batches: the routers give its key a TTL, a day by default,
   * which every batch they write renews.
   */
  @Test
  void theStreamKeyExpiresADayAfterTheLastBatchByDefault() throws Exception {
    Router a = router("a");
    awaitConnected(a);
    a.route(prompt(8000, 256, null)).onComplete(DONE);
    await("a published its prefix", () -> replication(a).published() >= 1);
    String key = "epp4j:" + pool + ":hints";
    assertThat(pttl(REDIS.uri(), key)).as("the TTL of %s", key)
        .isGreaterThan(86_400_000L - DEADLINE.toMillis()).isLessThanOrEqualTo(86_400_000L);
  }

  @Test
  void theStreamTtlIsConfigurableAndZeroMeansNone() throws Exception {
    String yaml = ReplicationLogicTest.configYaml("prefix-cache-scorer",
        "uri: '%s', pool: %s, routerId: a, streamTtlSeconds: 120".formatted(REDIS.uri(), pool), "");
    Router a = Router.builder().endpoints(endpoints()).configYaml(yaml, "router a").build();
    routers.add(a);
    String other = pool + "-no-ttl";
    String none = ReplicationLogicTest.configYaml("prefix-cache-scorer",
        "uri: '%s', pool: %s, routerId: b, streamTtlSeconds: 0".formatted(REDIS.uri(), other), "");
    Router b = Router.builder().endpoints(endpoints()).configYaml(none, "router b").build();
    routers.add(b);
    awaitConnected(a, b);
    a.route(prompt(8001, 256, null)).onComplete(DONE);
    b.route(prompt(8002, 256, null)).onComplete(DONE);
    await("both published", () -> replication(a).published() >= 1
        && replication(b).published() >= 1);
    assertThat(pttl(REDIS.uri(), "epp4j:" + pool + ":hints")).isGreaterThan(0)
        .isLessThanOrEqualTo(120_000L);
    assertThat(pttl(REDIS.uri(), "epp4j:" + other + ":hints")).as("no TTL").isEqualTo(-1);
  }

  @Test
  void sessionBindingsFollowToTheOtherRouters() throws Exception {
    Router a = router("a");
    Router b = router("b");
    Router c = router("c");
    awaitConnected(a, b, c);
    int n = 20;
    String[] chosen = new String[n];
    for (int i = 0; i < n; i++) {
      // shorter than one block: only the session can lead the others to the same endpoint
      RoutingDecision d = a.route(prompt(1000 + i, 4, "session-" + i));
      chosen[i] = d.primary().id();
      d.onComplete(DONE);
    }
    await("b and c applied a's sessions", () -> replication(b).appliedSessions() >= n
        && replication(c).appliedSessions() >= n);
    for (int i = 0; i < n; i++) {
      for (Router other : List.of(b, c)) {
        RoutingDecision d = other.route(prompt(5000 + i, 4, "session-" + i));
        assertThat(d.primary().id()).as("session %d on another router", i).isEqualTo(chosen[i]);
        d.onComplete(DONE);
      }
    }
  }

  @Test
  void aHintQueuedRightBeforeCloseStillReachesTheOtherRouters() throws Exception {
    Router b = router("b");
    // a publishes once a minute: whatever it routes now is still queued when it closes
    String yaml = """
        plugins:
        - type: session-affinity-scorer
        - type: max-score-picker
        - type: redis-replication
          parameters:
            uri: %s
            pool: %s
            routerId: a
            flushIntervalMillis: 60000
            heartbeatMillis: 600000
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: session-affinity-scorer
          - pluginRef: max-score-picker
        """.formatted(REDIS.uri(), pool);
    Router a = Router.builder().endpoints(endpoints()).configYaml(yaml, "router a").build();
    try {
      awaitConnected(a, b);
      RedisReplication ra = replication(a);
      // the first flush after connecting is done (it had nothing to send): the next is a minute away
      await("a's publisher waits for its next flush",
          () -> ra.publisherState() == Thread.State.TIMED_WAITING);
      RoutingDecision d = a.route(prompt(42, 4, "closing-session"));
      d.onComplete(DONE);
      a.close();
      await("b applied the session a routed right before closing",
          () -> replication(b).appliedSessions() >= 1);
      assertThat(ra.dropped()).isZero();
      assertThat(ra.published()).isEqualTo(1);
      RoutingDecision there = b.route(prompt(43, 4, "closing-session"));
      assertThat(there.primary().id()).isEqualTo(d.primary().id());
      there.onComplete(DONE);
    } finally {
      a.close();
    }
  }

  @Test
  void inFlightLoadOfOneRouterShowsOnTheOthersUntilItFinishes() throws Exception {
    Router a = router("a");
    Router b = router("b");
    Router c = router("c");
    awaitConnected(a, b, c);
    List<RoutingDecision> open = new ArrayList<>();
    Map<String, Integer> perEndpoint = new HashMap<>();
    for (int i = 0; i < 12; i++) {
      RoutingDecision d = a.route(prompt(2000 + i, 4, null));
      open.add(d);
      perEndpoint.merge(d.primary().id(), 1, Integer::sum);
    }
    for (Router other : List.of(b, c)) {
      await("a's requests in flight show on another router", () -> perEndpoint.entrySet().stream()
          .allMatch(e -> inFlight(other, e.getKey()) == e.getValue()));
    }
    // a's own counts are its own requests only: nothing echoed back from b or c
    perEndpoint.forEach((ep, k) -> assertThat(inFlight(a, ep)).isEqualTo(k));
    open.forEach(d -> d.onComplete(DONE));
    for (Router other : List.of(b, c)) {
      await("a's finished requests leave the other routers' counts", () ->
          other.endpoints().stream().allMatch(x -> x.inFlightRequests() == 0));
    }
  }

  @Test
  void routingGoesOnWhileRedisIsDownAndTheRoutersConvergeAfterItComesBack() throws Exception {
    InMemoryMetricReader metrics = InMemoryMetricReader.create();
    OpenTelemetrySdk otel = OpenTelemetrySdk.builder()
        .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(metrics).build())
        .build();
    int capacity = 500;
    Router a = router("a", capacity, Router.builder().openTelemetry(otel));
    Router b = router("b", capacity, Router.builder());
    Router c = router("c", capacity, Router.builder());
    awaitConnected(a, b, c);
    assertThat(gauge(metrics, "epp4j.replication.connected")).isEqualTo(1);

    AtomicBoolean stop = new AtomicBoolean();
    AtomicLong routed = new AtomicLong();
    AtomicLong errors = new AtomicLong();
    ExecutorService pool = Executors.newFixedThreadPool(3);
    List<Future<?>> load = new ArrayList<>();
    int t = 0;
    for (Router r : List.of(a, b, c)) {
      int thread = t++;
      load.add(pool.submit(() -> {
        long i = 0;
        while (!stop.get()) {
          try {
            RoutingDecision d = r.route(prompt(thread * 1_000_000L + i++ % 5000, 256,
                "s-" + (i % 300)));
            if (d.isRouted()) {
              routed.incrementAndGet();
              d.onComplete(DONE);
            } else {
              errors.incrementAndGet();
            }
          } catch (RuntimeException e) {
            errors.incrementAndGet();
          }
        }
      }));
    }
    try {
      // each router routes and applies the others' hints: replication works before the outage
      awaitWhileProgressing("every router applied prefixes and sessions of the others",
          () -> List.of(a, b, c).stream().allMatch(r -> replication(r).appliedPrefixes() > 0
              && replication(r).appliedSessions() > 0),
          routed::get);
      REDIS.stop();
      for (Router r : List.of(a, b, c)) {
        await("the replication notices Redis is gone", () -> !replication(r).connected());
      }
      assertThat(gauge(metrics, "epp4j.replication.connected")).isZero();
      long before = routed.get();
      // past the queue's capacity on every router while nothing can be published: the queues
      // turn hints away (and make room for the newest). Routing is what this waits for, so the
      // wait lasts as long as routes complete: a loaded machine routes slower, a route that waited
      // on Redis would stop the progress
      awaitWhileProgressing("routing goes on while Redis is down and every queue turned hints away",
          () -> routed.get() > before + 3 * capacity
              && List.of(a, b, c).stream().allMatch(r -> replication(r).droppedQueueFull() > 0),
          routed::get);
      for (Router r : List.of(a, b, c)) {
        assertThat(replication(r).queued()).isLessThanOrEqualTo(capacity);
        assertThat(replication(r).dropped()).isPositive();
      }
      REDIS.start();
      awaitConnected(a, b, c);
    } finally {
      stop.set(true);
      pool.shutdown();
      assertThat(pool.awaitTermination(10, TimeUnit.SECONDS)).isTrue();
    }
    for (Future<?> f : load) {
      f.get(1, TimeUnit.SECONDS);
    }
    assertThat(errors.get()).as("routes that failed or were rejected").isZero();
    // the restarted Redis lost the stream: each reader starts over from what the new one holds
    for (Router r : List.of(a, b, c)) {
      assertThat(replication(r).resyncs()).isPositive();
    }

    // what a queued during the outage goes out first; until then new hints may find it full
    await("a sent what it queued during the outage", () -> replication(a).queued() == 0);
    int n = 10;
    String[] chosen = new String[n];
    long publishedBefore = replication(a).published();
    long droppedBefore = replication(a).dropped();
    for (int i = 0; i < n; i++) {
      RoutingDecision d = a.route(prompt(9_000_000L + i, 1024, null));
      chosen[i] = d.primary().id();
      d.onComplete(DONE);
    }
    assertThat(replication(a).dropped()).isEqualTo(droppedBefore);
    // a barrier in the stream: once b counts exactly a's open requests on every endpoint, it
    // has read every batch a sent before them, the prefixes above included. The traffic has
    // stopped and every other request finished, so any other figure on b would be one from
    // before the outage: b dropped those when it resynced, and a figure that outlived that
    // (the bug this barrier once caught) fails it
    await("a sent its new prefixes", () -> replication(a).queued() == 0
        && replication(a).published() >= publishedBefore + n);
    List<RoutingDecision> open = new ArrayList<>();
    Map<String, Integer> perEndpoint = new HashMap<>();
    for (int i = 0; i < 5; i++) {
      RoutingDecision d = a.route(prompt(9_500_000L + i, 4, null));
      open.add(d);
      perEndpoint.merge(d.primary().id(), 1, Integer::sum);
    }
    await("b counts exactly a's open requests", () -> b.endpoints().stream()
        .allMatch(x -> x.inFlightRequests() == perEndpoint.getOrDefault(x.id(), 0)));
    for (int i = 0; i < n; i++) {
      RoutingDecision d = b.route(prompt(9_000_000L + i, 1024, null));
      assertThat(d.primary().id()).as("prompt %d on b", i).isEqualTo(chosen[i]);
      d.onComplete(DONE);
    }
    open.forEach(d -> d.onComplete(DONE));
    assertThat(gauge(metrics, "epp4j.replication.connected")).isEqualTo(1);
    assertThat(counter(metrics, "epp4j.replication.hints_published")).isPositive();
    assertThat(counter(metrics, "epp4j.replication.hints_applied")).isPositive();
    assertThat(counter(metrics, "epp4j.replication.hints_dropped")).isPositive();
  }

  /**
   * A router that starts learns the prefixes the stream holds, but not the in-flight figures of
   * its old batches: here those of a router that crashed an hour ago (no farewell), whose load
   * is long gone. Applied, they would weigh on the endpoint until the origin counts as silent,
   * and the hour-old batch would be recorded as an hour of replication lag.
   */
  @Test
  void aStartingRouterLearnsOldPrefixesButNotOldInFlightFigures() throws Exception {
    String ep = "10.1.0.3:8000";
    long hourAgoMillis = System.currentTimeMillis() - 3_600_000L;
    HintCodec.Writer w = new HintCodec.Writer();
    w.inFlight(ep, 7, 7_000);
    w.prefix(hourAgoMillis * 1000, ep, 16, new long[] {1, 2, 3});
    byte[] batch = w.finish(pool, "crashed", hourAgoMillis * 1000);
    io.lettuce.core.RedisClient client = io.lettuce.core.RedisClient.create(REDIS.uri());
    try (var c = client.connect(io.lettuce.core.codec.ByteArrayCodec.INSTANCE)) {
      // the id Redis gave the batch an hour ago
      c.sync().xadd(("epp4j:" + pool + ":hints").getBytes(java.nio.charset.StandardCharsets.UTF_8),
          new io.lettuce.core.XAddArgs().id(hourAgoMillis + "-0"),
          Map.of("b".getBytes(java.nio.charset.StandardCharsets.UTF_8), batch));
    } finally {
      client.shutdown();
    }
    Router b = router("b");
    await("b applied the old prefix", () -> replication(b).appliedPrefixes() == 1);
    assertThat(inFlight(b, ep)).as("in flight on " + ep + " an hour ago").isZero();
    assertThat(Arrays.stream(replication(b).lagMicros()).max().orElse(0))
        .as("longest lag recorded (µs)").isLessThan(60_000_000L);
  }

  /**
   * A failover to a replica whose clock is behind the old primary's, or a stream deleted after an
   * entry with an id in the future (written by hand or by a server whose clock was ahead): the
   * stream now in place holds ids below the last one the reader read. A read after that id
   * returns nothing until the new ids pass it, so the reader must take it as a lost stream and
   * start over, not wait there while the other routers' hints go by.
   */
  /** A batch of router {@code origin} telling that {@code endpoint} holds one chain of blocks. */
  private byte[] prefixBatch(String origin, String endpoint, long... blocks) {
    HintCodec.Writer w = new HintCodec.Writer();
    w.prefix(RedisReplication.epochMicros(), endpoint, 16, blocks);
    return w.finish(pool, origin, RedisReplication.epochMicros());
  }

  @Test
  void aStreamReplacedByOneWhoseIdsAreBehindTheReaderIsReadAgainFromItsStart() throws Exception {
    Router a = router("a");
    Router b = router("b");
    awaitConnected(a, b);
    byte[] key = ("epp4j:" + pool + ":hints").getBytes(java.nio.charset.StandardCharsets.UTF_8);
    byte[] field = "b".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    long hourAheadMillis = System.currentTimeMillis() + 3_600_000L;
    byte[] ahead = prefixBatch("ahead", "10.1.0.3:8000", 1, 2, 3);
    byte[] behind = prefixBatch("behind", "10.1.0.4:8000", 4, 5, 6);
    io.lettuce.core.RedisClient client = io.lettuce.core.RedisClient.create(REDIS.uri());
    try (var c = client.connect(io.lettuce.core.codec.ByteArrayCodec.INSTANCE)) {
      c.sync().xadd(key, new io.lettuce.core.XAddArgs().id(hourAheadMillis + "-0"),
          Map.of(field, ahead));
      await("b read the entry an hour ahead", () -> replication(b).appliedPrefixes() == 1);
      // the new stream, in one step so that no reader sees it empty (a failover never shows an
      // empty stream): ids from the server's clock now, an hour behind b's cursor
      c.sync().multi();
      c.sync().del(key);
      c.sync().xadd(key, Map.of(field, behind));
      assertThat(c.sync().exec().wasDiscarded()).isFalse();
    } finally {
      client.shutdown();
    }
    await("b applied the new stream's first batch", () -> replication(b).appliedPrefixes() >= 2);
    assertThat(replication(b).resyncs()).isEqualTo(1);
    int n = 5;
    for (int i = 0; i < n; i++) {
      a.route(prompt(4_000_000L + i, 1024, null)).onComplete(DONE);
    }
    await("b applied what a sent to the new stream",
        () -> replication(b).appliedPrefixes() >= 2 + n);
  }

  /**
   * The stream's oldest entry is one far longer than any router writes (another writer's). The
   * reader's gap check, once a heartbeat, asked Redis for the stream's oldest entry, which Redis
   * sends whole (the client buffers all of it before the reader sees its id): 16 MiB crossed the
   * connection at every check for as long as the stream kept the entry. It asks for the last
   * entry it read instead, which tells the same (the trim takes the oldest first): over several
   * checks, Redis sends less than that one entry once.
   */
  @Test
  void theGapCheckDoesNotFetchALongEntryAtTheStreamsHead() throws Exception {
    byte[] key = ("epp4j:" + pool + ":hints").getBytes(java.nio.charset.StandardCharsets.UTF_8);
    byte[] field = "b".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    int headBytes = 16 << 20;
    io.lettuce.core.RedisClient client = io.lettuce.core.RedisClient.create(REDIS.uri());
    try (var c = client.connect(io.lettuce.core.codec.ByteArrayCodec.INSTANCE)) {
      var sync = c.sync();
      sync.xadd(key, Map.of(field, new byte[headBytes]));
      Router b = router("b");
      awaitConnected(b);
      sync.xadd(key, Map.of(field, prefixBatch("a", "10.1.0.3:8000", 1, 2, 3)));
      await("b read past the long entry", () -> replication(b).appliedPrefixes() == 1);
      long sentBefore = info(sync, "stats", "total_net_output_bytes");
      long checksBefore = xrangeCalls(sync);
      // b's heartbeat is 200 ms: a check at least every 200 ms, one XRANGE or more each
      await("four more XRANGE calls", () -> xrangeCalls(sync) >= checksBefore + 4);
      long sent = info(sync, "stats", "total_net_output_bytes") - sentBefore;
      assertThat(sent).as("bytes Redis sent over four gap checks").isLessThan(headBytes);
      assertThat(replication(b).resyncs()).isZero();
    } finally {
      client.shutdown();
    }
  }

  /** A number of {@code INFO section}, e.g. total_net_output_bytes of stats. */
  private static long info(io.lettuce.core.api.sync.RedisCommands<byte[], byte[]> sync,
      String section, String name) {
    for (String line : sync.info(section).split("\r?\n")) {
      if (line.startsWith(name + ":")) {
        return Long.parseLong(line.substring(name.length() + 1).trim());
      }
    }
    throw new AssertionError("no " + name + " in INFO " + section);
  }

  /** XRANGE calls the server has answered, from INFO commandstats. */
  private static long xrangeCalls(io.lettuce.core.api.sync.RedisCommands<byte[], byte[]> sync) {
    for (String line : sync.info("commandstats").split("\r?\n")) {
      if (line.startsWith("cmdstat_xrange:calls=")) {
        String calls = line.substring("cmdstat_xrange:calls=".length());
        return Long.parseLong(calls.substring(0, calls.indexOf(',')));
      }
    }
    return 0;
  }

  /**
   * A connection that appends batches to the pool's hint stream as other routers' publishers do
   * (each under its own router id, written into the batch).
   */
  private final class OtherRouters implements AutoCloseable {
    private final byte[] key =
        ("epp4j:" + pool + ":hints").getBytes(java.nio.charset.StandardCharsets.UTF_8);
    private final byte[] field = "b".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    private final io.lettuce.core.RedisClient client =
        io.lettuce.core.RedisClient.create(REDIS.uri());
    private final io.lettuce.core.api.StatefulRedisConnection<byte[], byte[]> connection =
        client.connect(io.lettuce.core.codec.ByteArrayCodec.INSTANCE);

    void append(byte[] batch) {
      connection.sync().xadd(key, Map.of(field, batch));
    }

    @Override
    public void close() {
      connection.close();
      client.shutdown();
    }
  }

  /**
   * Router y moved session s1 a second ago; router x, whose clock is ten minutes behind, moves it
   * now. Compared on each router's own clock, x's move looked ten minutes older than y's and every
   * other router ignored it as stale, so s1 stayed where x had moved it from for as long as the
   * clocks disagreed. The times are compared on the server's clock (the entry id is the server's
   * time when x appended the batch it stamped just before): x's move is the newer and applies.
   */
  @Test
  void aSessionMoveOfARouterWhoseClockIsBehindIsNotTakenForAnOldOne() throws Exception {
    Router b = router("b");
    awaitConnected(b);
    long now = RedisReplication.epochMicros();
    HintCodec.Writer y = new HintCodec.Writer();
    y.session(now - 1_000_000L, "s1", "10.1.0.2:8000");
    long behind = now - 600_000_000L; // x's clock
    HintCodec.Writer x = new HintCodec.Writer();
    x.session(behind, "s1", "10.1.0.1:8000");
    try (OtherRouters others = new OtherRouters()) {
      others.append(y.finish(pool, "y", RedisReplication.epochMicros()));
      await("b applied y's move", () -> replication(b).appliedSessions() == 1);
      others.append(x.finish(pool, "x", behind));
    }
    await("b read x's move", () -> replication(b).appliedSessions()
        + replication(b).staleSessions() == 2);
    assertThat(replication(b).staleSessions()).as("moves b ignored as stale").isZero();
    RoutingDecision d = b.route(prompt(6_000_000L, 64, "s1"));
    d.onComplete(DONE);
    assertThat(d.primary().id()).isEqualTo("10.1.0.1:8000");
  }

  /**
   * Router x moved session s1 ten seconds ago, but the batch reached the server only now (x's
   * process paused between stamping the batch and appending it); router y moved s1 five seconds
   * ago. The offset of x's clock was taken from that batch alone, the ten seconds of delay
   * included, so x's move looked a moment old, newer than y's, and b kept s1 where x had put it
   * (y's move counted stale) while y, which records its own move on the server's clock, kept it
   * on its own choice. The offset is the smallest of x's recent batches: x's move stays the older.
   */
  @Test
  void aSessionMoveWhoseAppendWasHeldUpDoesNotOutrankALaterOne() throws Exception {
    Router b = router("b");
    awaitConnected(b);
    try (OtherRouters others = new OtherRouters()) {
      // an earlier batch of x, appended as soon as stamped: how far x's clock is from the server's
      HintCodec.Writer x0 = new HintCodec.Writer();
      x0.session(RedisReplication.epochMicros(), "s0", "10.1.0.1:8000");
      others.append(x0.finish(pool, "x", RedisReplication.epochMicros()));
      long stamped = RedisReplication.epochMicros() - 10_000_000L;
      HintCodec.Writer x1 = new HintCodec.Writer();
      x1.session(stamped - 1_000L, "s1", "10.1.0.1:8000");
      others.append(x1.finish(pool, "x", stamped));
      long yNow = RedisReplication.epochMicros();
      HintCodec.Writer y = new HintCodec.Writer();
      y.session(yNow - 5_000_000L, "s1", "10.1.0.2:8000");
      others.append(y.finish(pool, "y", yNow));
    }
    await("b read the three moves", () -> replication(b).appliedSessions()
        + replication(b).staleSessions() == 3);
    assertThat(replication(b).staleSessions()).as("moves b ignored as stale").isZero();
    RoutingDecision d = b.route(prompt(6_000_000L, 64, "s1"));
    d.onComplete(DONE);
    assertThat(d.primary().id()).isEqualTo("10.1.0.2:8000");
  }

  /**
   * Router x's clock steps back 3 s (an NTP step) after b learnt its offset. Router y moved
   * session s1 two seconds ago, x moved it one second ago, after y. x's moves looked 3 s older
   * than they were for up to two windows of ten heartbeats, so b counted x's move stale and kept
   * s1 on y's endpoint while x, which records its own move on the server's clock, kept it on its
   * own: the routers disagreed on where s1 lives. b follows the step once x's batches of half a
   * heartbeat (b's is 200 ms) all show it.
   */
  @Test
  void aSessionMoveOfARouterWhoseClockSteppedBackIsNotTakenForAnOldOne() throws Exception {
    Router b = router("b");
    awaitConnected(b);
    long step = 3_000_000L;
    try (OtherRouters others = new OtherRouters()) {
      // x's batches before the step: b learns x's clock is the server's
      for (int i = 0; i < 3; i++) {
        HintCodec.Writer x = new HintCodec.Writer();
        x.session(RedisReplication.epochMicros(), "s0-" + i, "10.1.0.1:8000");
        others.append(x.finish(pool, "x", RedisReplication.epochMicros()));
      }
      // after the step: x's heartbeats, 150 ms apart on the server's clock (the ids' times)
      for (int i = 0; i < 3; i++) {
        HintCodec.Writer x = new HintCodec.Writer();
        others.append(x.finish(pool, "x", RedisReplication.epochMicros() - step));
        Thread.sleep(150);
      }
      long now = RedisReplication.epochMicros();
      HintCodec.Writer y = new HintCodec.Writer();
      y.session(now - 2_000_000L, "s1", "10.1.0.2:8000");
      others.append(y.finish(pool, "y", now));
      HintCodec.Writer x = new HintCodec.Writer();
      x.session(now - 1_000_000L - step, "s1", "10.1.0.1:8000");
      others.append(x.finish(pool, "x", RedisReplication.epochMicros() - step));
    }
    await("b read the moves", () -> replication(b).appliedSessions()
        + replication(b).staleSessions() == 5);
    assertThat(replication(b).staleSessions()).as("moves b ignored as stale").isZero();
    RoutingDecision d = b.route(prompt(6_100_000L, 64, "s1"));
    d.onComplete(DONE);
    assertThat(d.primary().id()).isEqualTo("10.1.0.1:8000");
  }

  /**
   * Routers x, whose clock is ten minutes behind, and z, ten minutes ahead, each send a session
   * move they made ten milliseconds before. The lag was taken on the routers' own clocks: b recorded
   * ten minutes for x's move and minus ten for z's (none at all in the histogram). It is taken on
   * the server's clock, onto which the moves' times are moved as for ordering them.
   */
  @Test
  void theLagOfRoutersWhoseClocksAreSkewedIsTakenOnTheServersClock() throws Exception {
    Router b = router("b");
    awaitConnected(b);
    try (OtherRouters others = new OtherRouters()) {
      for (long skew : new long[] {-600_000_000L, 600_000_000L}) {
        long stamped = RedisReplication.epochMicros() + skew;
        HintCodec.Writer w = new HintCodec.Writer();
        w.session(stamped - 10_000L, "lag-" + skew, "10.1.0.1:8000");
        others.append(w.finish(pool, skew < 0 ? "x" : "z", stamped));
      }
    }
    await("b applied both moves", () -> replication(b).appliedSessions() == 2);
    long[] lags = replication(b).lagMicros();
    assertThat(lags).as("lags recorded (µs)").hasSize(2);
    assertThat(Arrays.stream(lags).boxed().toList()).as("lags recorded (µs)")
        .allSatisfy(l -> assertThat(l)
        .isGreaterThanOrEqualTo(0).isLessThan(60_000_000L));
  }

  /**
   * A writer appends an entry with an id whose time is far past any clock (9.3e15 ms, the year
   * 296,000; a broken peer, or XADD with an id of its choosing), and Redis then gives every later
   * entry an id of that same millisecond. Its time times 1000 overflowed the offset of each
   * router's clock, so that every move read after it looked older than any move b had made or
   * known: x moves session s1 after b bound it, and b kept s1 where it was, counting x's move
   * stale, and recorded a negative lag. Such an id's time is not taken as the server's clock.
   */
  @Test
  void aSessionMoveInAStreamWhoseIdsArePastAnyClockIsNotTakenForAnOldOne() throws Exception {
    Router b = router("b");
    awaitConnected(b);
    byte[] key = ("epp4j:" + pool + ":hints").getBytes(java.nio.charset.StandardCharsets.UTF_8);
    byte[] field = "b".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    String elsewhere;
    try (OtherRouters others = new OtherRouters()) {
      others.connection.sync().xadd(key, new io.lettuce.core.XAddArgs().id("9300000000000000-0"),
          Map.of(field, prefixBatch("w", "10.1.0.3:8000", 1, 2, 3)));
      await("b applied the entry past any clock", () -> replication(b).appliedPrefixes() == 1);
      RoutingDecision bound = b.route(prompt(6_200_000L, 4, "s1"));
      bound.onComplete(DONE);
      await("b sent its binding of s1", () -> replication(b).published() >= 1);
      elsewhere = bound.primary().id().equals("10.1.0.1:8000")
          ? "10.1.0.2:8000" : "10.1.0.1:8000";
      long now = RedisReplication.epochMicros();
      HintCodec.Writer x = new HintCodec.Writer();
      x.session(now, "s1", elsewhere);
      others.append(x.finish(pool, "x", now));
    }
    await("b read x's move", () -> replication(b).appliedSessions()
        + replication(b).staleSessions() == 1);
    assertThat(replication(b).staleSessions()).as("moves b ignored as stale").isZero();
    assertThat(Arrays.stream(replication(b).lagMicros()).boxed().toList())
        .as("lags recorded (µs)")
        .allSatisfy(l -> assertThat(l).isGreaterThanOrEqualTo(0).isLessThan(60_000_000L));
    RoutingDecision d = b.route(prompt(6_300_000L, 4, "s1"));
    d.onComplete(DONE);
    assertThat(d.primary().id()).isEqualTo(elsewhere);
  }

  /**
   * After a failover to a replica that lacks the newest entries, the reader starts over and reads
   * again the batches it had read, its own among them: counted twice, they made it warn that
   * another router writes under its routerId.
   */
  @Test
  void ownBatchesReadAgainAfterAFailoverDoNotLookLikeAnotherRouterUnderTheSameId()
      throws Exception {
    Router a = router("a");
    Router b = router("b");
    awaitConnected(a, b);
    for (int i = 0; i < 5; i++) {
      b.route(prompt(5_000_000L + i, 1024, null)).onComplete(DONE);
      a.route(prompt(5_100_000L + i, 1024, null)).onComplete(DONE);
    }
    await("b read a's batches", () -> replication(b).appliedPrefixes() >= 5);
    byte[] key = ("epp4j:" + pool + ":hints").getBytes(java.nio.charset.StandardCharsets.UTF_8);
    byte[] field = "b".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    long hourAheadMillis = System.currentTimeMillis() + 3_600_000L;
    byte[] ahead = prefixBatch("ahead", "10.1.0.3:8000", 1, 2, 3);
    io.lettuce.core.RedisClient client = io.lettuce.core.RedisClient.create(REDIS.uri());
    try (var c = client.connect(io.lettuce.core.codec.ByteArrayCodec.INSTANCE)) {
      var sync = c.sync();
      long applied = replication(b).appliedPrefixes();
      sync.xadd(key, new io.lettuce.core.XAddArgs().id(hourAheadMillis + "-0"),
          Map.of(field, ahead));
      await("b read the entry an hour ahead", () -> replication(b).appliedPrefixes() > applied);
      // the replica promoted in its place holds every entry but those from the hour ahead on
      List<io.lettuce.core.StreamMessage<byte[], byte[]>> held =
          sync.xrange(key, io.lettuce.core.Range.create("-", "+"));
      long readBefore = replication(b).entriesRead();
      sync.multi();
      sync.del(key);
      int kept = 0;
      for (var m : held) {
        if (StreamIds.millis(m.getId()) < hourAheadMillis) {
          sync.xadd(key, new io.lettuce.core.XAddArgs().id(m.getId()), m.getBody());
          kept++;
        }
      }
      assertThat(sync.exec().wasDiscarded()).isFalse();
      int replayed = kept;
      await("b read the replica's stream again", () -> replication(b).resyncs() == 1
          && replication(b).entriesRead() >= readBefore + replayed);
    } finally {
      client.shutdown();
    }
    assertThat(replication(b).sharedRouterIdSeen()).isFalse();
  }

  /**
   * Router x crashed (no farewell) with requests in flight and restarts under the same routerId
   * while the stream's ids are an hour ahead of the server's clock, as after a failover to a
   * server whose clock is behind the old one's: Redis gives every new entry the time of the
   * stream's last id until its own clock gets there. Its earlier run's batches, their ids after
   * the server's time when the new run's reader connected, were taken for the new run's own: read
   * header only, their figures never cleared (b kept the crashed run's load until its
   * inFlightMaxAge), and counted against the new run's appends, which made it warn that another
   * router writes under its routerId. A batch sent before the new run started, by its clock, is
   * an earlier run's too.
   */
  @Test
  void aRouterRestartedWhileTheStreamsIdsAreAheadOfTheServersClockClearsItsCrashedRunsLoad()
      throws Exception {
    Router b = router("b");
    awaitConnected(b);
    byte[] key = ("epp4j:" + pool + ":hints").getBytes(java.nio.charset.StandardCharsets.UTF_8);
    byte[] field = "b".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    String ep = "10.1.0.1:8000";
    try (OtherRouters others = new OtherRouters()) {
      others.connection.sync().xadd(key, new io.lettuce.core.XAddArgs().id(
          (System.currentTimeMillis() + 3_600_000L) + "-0"),
          Map.of(field, prefixBatch("w", "10.1.0.3:8000", 1, 2, 3)));
      // the crashed run's last heartbeats
      for (int i = 0; i < 5; i++) {
        HintCodec.Writer w = new HintCodec.Writer();
        w.inFlight(ep, 5, 5_000);
        others.append(w.finish(pool, "x", RedisReplication.epochMicros()));
      }
    }
    await("b counts the crashed run's load", () -> inFlight(b, ep) == 5);
    Router x = router("x");
    // a request of the new run, so that it heartbeats and the others keep hearing from x
    RoutingDecision open = x.route(prompt(6_400_000L, 64, null));
    int expected = open.primary().id().equals(ep) ? 1 : 0;
    await("b counts only what the new run of x has on " + ep,
        () -> inFlight(b, ep) == expected);
    assertThat(replication(x).sharedRouterIdSeen()).as("x warned of another router under its id")
        .isFalse();
    open.onComplete(DONE);
  }

  /**
   * The delay from a route on one router to the hint's application on another, over 2000
   * requests at about one per millisecond. Printed for the README; bounded by the reader's block
   * timeout, which a reader that waited out its blocking read instead of waking on the new entry
   * would reach.
   */
  @Test
  void replicationDelay() throws Exception {
    Router a = router("a");
    Router b = router("b");
    awaitConnected(a, b);
    replication(b).clearLagSamples();
    int n = 2000;
    for (int i = 0; i < n; i++) {
      RoutingDecision d = a.route(prompt(3_000_000L + i, 512, "d-" + i));
      d.onComplete(DONE);
      Thread.sleep(1);
    }
    await("b applied every hint", () -> replication(b).appliedPrefixes() >= n);
    long[] lags = replication(b).lagMicros();
    Arrays.sort(lags);
    long p50 = lags[lags.length / 2];
    long p99 = lags[(int) (lags.length * 0.99)];
    System.out.printf("replication delay over %d hints (%s): p50 %.2f ms, p99 %.2f ms,"
        + " max %.2f ms%n", lags.length, REDIS.version(), p50 / 1e3, p99 / 1e3,
        lags[lags.length - 1] / 1e3);
    assertThat(p50).isLessThan(RedisReplication.READ_WAIT.toNanos() / 1000);
  }

  static long gauge(InMemoryMetricReader reader, String name) {
    for (MetricData m : reader.collectAllMetrics()) {
      if (m.getName().equals(name)) {
        return m.getLongGaugeData().getPoints().iterator().next().getValue();
      }
    }
    throw new AssertionError("no metric " + name);
  }

  static long counter(InMemoryMetricReader reader, String name) {
    for (MetricData m : reader.collectAllMetrics()) {
      if (m.getName().equals(name)) {
        long sum = 0;
        for (var p : m.getLongSumData().getPoints()) {
          sum += p.getValue();
        }
        return sum;
      }
    }
    throw new AssertionError("no metric " + name);
  }
}
