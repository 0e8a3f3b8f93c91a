package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.core.Router;
import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulRedisConnection;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Foreign data in Redis: the stream key holds a string (another application, a hand-made key, a
 * deployment that reused the prefix). Redis answers every command with {@code WRONGTYPE}; the
 * router must say so, not that Redis is unreachable.
 *
 * <p>The routers' commands time out after 30 s, not the default 2 s: the tests check which
 * warnings were logged, and a command that a loaded machine holds up past 2 s is logged as Redis
 * unreachable. No test here depends on a short timeout: the server always answers.
 */
class RedisRefusalLogTest {
  @RegisterExtension
  static final RedisServer REDIS = new RedisServer();

  private final List<Router> routers = new ArrayList<>();
  private final List<LogRecord> logged = new CopyOnWriteArrayList<>();
  private final Logger log = Logger.getLogger(RedisReplication.class.getName());
  private final Handler capture = new Handler() {
    @Override
    public void publish(LogRecord r) {
      logged.add(r);
    }

    @Override
    public void flush() {}

    @Override
    public void close() {}
  };

  @BeforeEach
  void setUp() {
    log.addHandler(capture);
  }

  @AfterEach
  void tearDown() {
    routers.forEach(Router::close);
    log.removeHandler(capture);
  }

  @Test
  void aStreamKeyOfAnotherTypeIsReportedAsSuchNotAsRedisUnreachable() throws Exception {
    String pool = "wrongtype-" + ProcessHandle.current().pid();
    RedisClient admin = RedisClient.create(REDIS.uri());
    try (StatefulRedisConnection<String, String> c = admin.connect()) {
      c.sync().set("epp4j:" + pool + ":hints", "not a stream");
    } finally {
      admin.shutdown();
    }
    String yaml = ReplicationLogicTest.configYaml("prefix-cache-scorer",
        "uri: '%s', pool: %s, connectTimeoutMillis: 30000".formatted(REDIS.uri(), pool), "");
    Router a = Router.builder().endpoints(RedisReplicationTest.endpoints())
        .configYaml(yaml, "router a").build();
    routers.add(a);
    a.route(RedisReplicationTest.prompt(1, 64, null)).onComplete(RedisReplicationTest.DONE);
    RedisReplicationTest.await("a warning", () -> logged.stream()
        .anyMatch(r -> r.getLevel() == Level.WARNING));
    Thread.sleep(500); // both threads
    List<String> warnings = logged.stream().filter(r -> r.getLevel() == Level.WARNING)
        .map(LogRecord::getMessage).toList();
    assertThat(warnings).as("warnings while the stream key holds a string")
        .allMatch(m -> m.contains("WRONGTYPE"))
        .noneMatch(m -> m.contains("unreachable"));
  }

  /**
   * Redis at its {@code maxmemory} under {@code noeviction} answers every XADD with {@code OOM}
   * and still serves reads. Each router's publisher says so once (the warning names the code,
   * not Redis unreachable), also the one that routes nothing; the router that routes counts the
   * hints it could not send, its connection gauge drops, routing goes on, and once memory is
   * allowed again the hints flow to the other routers as before.
   */
  @Test
  void aServerOutOfMemoryIsReportedOnceAndReplicationResumesWhenItClears() throws Exception {
    List<Router> both = twoRouters("oom-" + ProcessHandle.current().pid());
    Router a = both.get(0);
    RedisReplication ra = RedisReplicationTest.replication(a);
    RedisReplication rb = RedisReplicationTest.replication(both.get(1));
    RedisClient admin = RedisClient.create(REDIS.uri());
    try (StatefulRedisConnection<String, String> c = admin.connect()) {
      c.sync().configSet("maxmemory-policy", "noeviction");
      c.sync().configSet("maxmemory", "1");
      try {
        // a routes, b does not. a's first refusal may be a batch of hints (counted dropped) or
        // one of in-flight figures only, or a check of writes: from then on the hints wait in
        // a's queue. b, with nothing to send, finds it with the check of its next heartbeat
        long droppedBefore = ra.dropped();
        routeUntilWritesAreRefused(a, ra, "both routers' OOM warnings",
            () -> warnings("OOM").size() >= 2);
        assertThat(ra.dropped() > droppedBefore || ra.queued() > 0)
            .as("hints a routed while refused are counted dropped or wait in its queue").isTrue();
        assertThat(warnings("OOM")).as("warnings naming OOM, one per router").hasSize(2)
            .allMatch(m -> m.contains("publisher") && !m.contains("unreachable"));
      } finally {
        c.sync().configSet("maxmemory", "0");
      }
    } finally {
      admin.shutdown();
    }
    awaitHintsFlowAgain(a, rb, "b applied a prefix a routed once Redis took writes again");
  }

  /**
   * Redis runs out of memory under two routers that route nothing and have nothing in flight:
   * their publishers had no batch whose refusal would tell, their heartbeats carry no figure, and
   * reads still work, so both gauges read 1 and nothing was logged for as long as the routers
   * stayed idle. A publisher that appended nothing for a heartbeat now checks that the server
   * still takes writes: each router warns once, naming OOM, and its gauge drops to 0, without a
   * route and without a batch; once memory is allowed again both are connected again.
   */
  @Test
  void aServerThatRunsOutOfMemoryUnderIdleRoutersIsReportedByEach() throws Exception {
    List<RedisReplication> rs = twoRouters("oom-idle-" + ProcessHandle.current().pid()).stream()
        .map(RedisReplicationTest::replication).toList();
    RedisClient admin = RedisClient.create(REDIS.uri());
    try (StatefulRedisConnection<String, String> c = admin.connect()) {
      c.sync().configSet("maxmemory-policy", "noeviction");
      c.sync().configSet("maxmemory", "1");
      try {
        RedisReplicationTest.await("an OOM warning from each router",
            () -> warnings("OOM").size() == 2);
        RedisReplicationTest.await("both gauges down",
            () -> rs.stream().noneMatch(RedisReplication::connected));
        assertThat(warnings("OOM")).allMatch(m -> m.contains("publisher")
            && !m.contains("unreachable"));
        for (RedisReplication r : rs) {
          assertThat(r.published()).as("records sent by an idle router").isZero();
        }
      } finally {
        c.sync().configSet("maxmemory", "0");
      }
    } finally {
      admin.shutdown();
    }
    for (RedisReplication r : rs) {
      RedisReplicationTest.await("connected once Redis takes writes again", r::connected,
          RedisReplicationTest.CONNECT_DEADLINE);
    }
  }

  /**
   * Routes on {@code a} until {@code refused} holds and a's gauge has read 0, then for 1.5 s
   * more, a few attempts of the backoff (100 ms, doubling), each route still routed.
   */
  private static void routeUntilWritesAreRefused(Router a, RedisReplication ra, String what,
      java.util.function.BooleanSupplier refused) throws InterruptedException {
    int routed = 0;
    boolean down = false;
    long deadline = System.nanoTime() + RedisReplicationTest.DEADLINE.toNanos();
    while (!(refused.getAsBoolean() && down) && System.nanoTime() - deadline < 0) {
      a.route(RedisReplicationTest.prompt(1_000 + routed++, 64, null))
          .onComplete(RedisReplicationTest.DONE);
      Thread.sleep(5);
      down |= !ra.connected();
    }
    assertThat(refused.getAsBoolean()).as(what).isTrue();
    assertThat(down).as("a's gauge down").isTrue();
    long until = System.nanoTime() + 1_500_000_000L;
    while (System.nanoTime() - until < 0) {
      assertThat(a.route(RedisReplicationTest.prompt(2_000 + routed++, 64, null)).isRouted())
          .isTrue();
      Thread.sleep(20);
    }
  }

  /** Once {@code a} is connected again, a prefix it routes reaches the other router. */
  private static void awaitHintsFlowAgain(Router a, RedisReplication other, String what)
      throws InterruptedException {
    RedisReplicationTest.awaitConnected(a);
    long applied = other.appliedPrefixes();
    a.route(RedisReplicationTest.prompt(3_000, 64, null)).onComplete(RedisReplicationTest.DONE);
    RedisReplicationTest.await(what, () -> other.appliedPrefixes() > applied);
  }

  private List<String> warnings(String containing) {
    return logged.stream().filter(r -> r.getLevel() == Level.WARNING)
        .map(LogRecord::getMessage).filter(m -> m.contains(containing)).toList();
  }

  private List<Router> twoRouters(String pool) throws InterruptedException {
    String yaml = ReplicationLogicTest.configYaml("prefix-cache-scorer",
        "uri: '%s', pool: %s, connectTimeoutMillis: 30000, heartbeatMillis: 200"
            .formatted(REDIS.uri(), pool), "");
    List<Router> both = new ArrayList<>();
    for (String id : List.of("a", "b")) {
      Router r = Router.builder().endpoints(RedisReplicationTest.endpoints())
          .configYaml(yaml, "router " + id).build();
      routers.add(r);
      both.add(r);
    }
    RedisReplicationTest.awaitConnected(both.toArray(Router[]::new));
    return both;
  }

  /**
   * A Redis made a replica (a failover that demoted it, a URI that points at a replica) answers
   * every XADD with {@code READONLY} and still serves reads. As with OOM: one warning naming the
   * code per router (also from the one that routes nothing), the gauge down, routing goes on, and
   * once the server takes writes again (promoted) the hints reach the other routers.
   */
  @Test
  void aReadOnlyReplicaIsReportedOnceAndReplicationResumesWhenPromoted() throws Exception {
    List<Router> both = twoRouters("readonly-" + ProcessHandle.current().pid());
    Router a = both.get(0);
    RedisReplication ra = RedisReplicationTest.replication(a);
    RedisReplication rb = RedisReplicationTest.replication(both.get(1));
    int noMaster;
    try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1,
        java.net.InetAddress.getLoopbackAddress())) {
      noMaster = s.getLocalPort(); // closed below: the replica's master never answers
    }
    RedisClient admin = RedisClient.create(REDIS.uri());
    try (StatefulRedisConnection<String, String> c = admin.connect()) {
      c.sync().replicaof("127.0.0.1", noMaster);
      try {
        // whether a batch of a's was refused first, or its check of writes when its reader saw
        // the demotion (its hints then wait in its queue), depends on which came first
        routeUntilWritesAreRefused(a, ra, "both routers' READONLY warnings",
            () -> warnings("READONLY").size() >= 2);
        List<String> readOnly = warnings("READONLY");
        // b routes nothing: its publisher checks its writes when its reader sees the demotion
        assertThat(readOnly).as("warnings naming READONLY, one per router").hasSize(2)
            .allMatch(m -> m.contains("publisher") && !m.contains("unreachable"));
        assertThat(warnings("unreachable")).as("warnings saying Redis is unreachable").isEmpty();
      } finally {
        c.sync().replicaofNoOne();
      }
    } finally {
      admin.shutdown();
    }
    awaitHintsFlowAgain(a, rb, "b applied a prefix a routed once Redis took writes again");
  }

  /**
   * A Redis demoted to a replica under idle routers ends their blocked reads with
   * {@code UNBLOCKED} (and closes those connections). That is no refusal: a replica serves reads.
   * It used to be logged as one ({@code Redis refused a command (reader: UNBLOCKED ...)}), after
   * a backoff step, while the publishers, with nothing to send, stayed connected and said
   * nothing. Now each reader reads on from the replica at once, without an error, a resync or a
   * warning of its own; the demotion is said once per router in plain words (INFO) and each
   * publisher checks its writes at once: one READONLY warning that names the replica, the gauge 0.
   *
   * <p>{@code REPLICAOF} ends only the reads blocked at that moment: a reader whose 200 ms wait
   * had just ended, between two reads, keeps its connection. So the readers blocked then are
   * listed in the same write as the demotion ({@link #demoteListingBlockedReaders}), and when
   * that finds one not blocked, the server is promoted back and the demotion made again under two
   * new routers.
   */
  @Test
  void aDemotionIsReportedOnceAndTheReadersReadOnFromTheReplica() throws Exception {
    int noMaster;
    try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1,
        java.net.InetAddress.getLoopbackAddress())) {
      noMaster = s.getLocalPort(); // closed below: the replica's master never answers
    }
    List<Router> both = List.of();
    RedisClient admin = RedisClient.create(REDIS.uri());
    try (StatefulRedisConnection<String, String> c = admin.connect()) {
      List<Long> blocked = List.of();
      for (int attempt = 1; blocked.size() < 2; attempt++) {
        assertThat(attempt).as("attempts to demote the server under two blocked reads")
            .isLessThanOrEqualTo(10);
        if (!both.isEmpty()) {
          c.sync().replicaofNoOne();
          both.forEach(Router::close);
          routers.removeAll(both);
          logged.clear();
        }
        both = twoRouters("demoted-" + ProcessHandle.current().pid() + "-" + attempt);
        RedisReplicationTest.await("both readers blocked in XREAD",
            () -> blockedReaders(c.sync().clientList()).size() == 2);
        blocked = demoteListingBlockedReaders(c, noMaster);
      }
      List<Long> before = blocked;
      List<RedisReplication> rs = both.stream().map(RedisReplicationTest::replication).toList();
      try {
        RedisReplicationTest.await("both readers blocked in XREAD again, on new connections",
            () -> {
              List<Long> now = blockedReaders(c.sync().clientList());
              return now.size() == 2 && now.stream().noneMatch(before::contains);
            });
        RedisReplicationTest.await("a READONLY warning from each router",
            () -> warnings("READONLY").size() == 2);
        RedisReplicationTest.await("both gauges down",
            () -> rs.stream().noneMatch(RedisReplication::connected));
        assertThat(warnings("READONLY")).allMatch(m -> m.contains("publisher")
            && m.contains("read-only replica"));
        assertThat(warnings("")).as("warnings: the publishers' READONLY only")
            .allMatch(m -> m.contains("READONLY"));
        assertThat(logged).filteredOn(r -> r.getLevel() == Level.INFO)
            .extracting(LogRecord::getMessage)
            .filteredOn(m -> m.contains("became a replica")).hasSize(2);
        for (RedisReplication r : rs) {
          assertThat(r.errors("reader")).isZero();
          assertThat(r.resyncs()).isZero();
        }
      } finally {
        c.sync().replicaofNoOne();
      }
    } finally {
      admin.shutdown();
    }
    awaitHintsFlowAgain(both.get(0), RedisReplicationTest.replication(both.get(1)),
        "b applied a prefix a routed once Redis took writes again");
  }

  /**
   * Makes the server a replica of {@code 127.0.0.1:masterPort} and returns the ids of the clients
   * that were blocked in {@code XREAD} when it did: {@code CLIENT LIST} and {@code REPLICAOF} go
   * out in one write, and Redis runs the commands a client sent together one after the other,
   * with no other client's command and no blocked read's timeout between them.
   */
  private static List<Long> demoteListingBlockedReaders(StatefulRedisConnection<String, String> c,
      int masterPort) throws Exception {
    io.lettuce.core.RedisFuture<String> list;
    io.lettuce.core.RedisFuture<String> demoted;
    c.setAutoFlushCommands(false);
    try {
      list = c.async().clientList();
      demoted = c.async().replicaof("127.0.0.1", masterPort);
      c.flushCommands();
    } finally {
      c.setAutoFlushCommands(true);
    }
    assertThat(demoted.get(10, java.util.concurrent.TimeUnit.SECONDS)).isEqualTo("OK");
    return blockedReaders(list.get(10, java.util.concurrent.TimeUnit.SECONDS));
  }

  /** The ids of the clients blocked in {@code XREAD}, from {@code CLIENT LIST}. */
  private static List<Long> blockedReaders(String clientList) {
    List<Long> ids = new ArrayList<>();
    for (String line : clientList.split("\n")) {
      if (line.contains(" cmd=xread ") && line.contains(" flags=b ")) {
        ids.add(Long.parseLong(line.substring(3, line.indexOf(' '))));
      }
    }
    return ids;
  }

  /**
   * A router that starts against a read-only replica (a URI that names one) and routes nothing:
   * its publisher connects and, with no batch to send, never had a write refused, so the gauge
   * read 1 for as long as it stayed idle and nothing said that nothing could be published. The
   * publisher checks on connecting that the server takes writes: READONLY is reported, the gauge
   * stays 0 through the reconnections, and once the server is promoted it reads 1 and hints flow.
   */
  @Test
  void aRouterConnectingToAReadOnlyReplicaIsNotConnectedUntilItTakesWrites() throws Exception {
    String pool = "readonly-idle-" + ProcessHandle.current().pid();
    int noMaster;
    try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1,
        java.net.InetAddress.getLoopbackAddress())) {
      noMaster = s.getLocalPort(); // closed below: the replica's master never answers
    }
    Router a;
    RedisClient admin = RedisClient.create(REDIS.uri());
    try (StatefulRedisConnection<String, String> c = admin.connect()) {
      c.sync().replicaof("127.0.0.1", noMaster);
      try {
        String yaml = ReplicationLogicTest.configYaml("prefix-cache-scorer",
            "uri: '%s', pool: %s, connectTimeoutMillis: 30000, heartbeatMillis: 200"
                .formatted(REDIS.uri(), pool), "");
        a = Router.builder().endpoints(RedisReplicationTest.endpoints())
            .configYaml(yaml, "router a").build();
        routers.add(a);
        RedisReplication ra = RedisReplicationTest.replication(a);
        RedisReplicationTest.await("a READONLY warning", () -> !warnings("READONLY").isEmpty());
        assertThat(warnings("READONLY").get(0)).contains("publisher");
        // several reconnections (the backoff from 100 ms), each checked
        long until = System.nanoTime() + 1_500_000_000L;
        while (System.nanoTime() - until < 0) {
          assertThat(ra.connected()).as("connected to a server that refuses writes").isFalse();
          Thread.sleep(10);
        }
        assertThat(ra.published()).isZero();
      } finally {
        c.sync().replicaofNoOne();
      }
    } finally {
      admin.shutdown();
    }
    String yaml = ReplicationLogicTest.configYaml("prefix-cache-scorer",
        "uri: '%s', pool: %s, connectTimeoutMillis: 30000, heartbeatMillis: 200"
            .formatted(REDIS.uri(), pool), "");
    Router b = Router.builder().endpoints(RedisReplicationTest.endpoints())
        .configYaml(yaml, "router b").build();
    routers.add(b);
    RedisReplicationTest.awaitConnected(b);
    awaitHintsFlowAgain(a, RedisReplicationTest.replication(b),
        "b applied a prefix a routed once Redis took writes");
  }

  /**
   * A password required after the routers connected ({@code requirepass} set, or the user's
   * password changed) leaves their connections working; the next connection each opens (here:
   * the server closed them all) is refused with {@code NOAUTH}. One warning says the credentials
   * were refused (per router), the gauge stays 0 while they are, routing goes on, and once the server accepts
   * the routers again they reconnect and the hints flow.
   */
  @Test
  void credentialsRequiredMidSessionAreReportedOnceAndReplicationResumesWhenAccepted()
      throws Exception {
    List<Router> both = twoRouters("noauth-" + ProcessHandle.current().pid());
    Router a = both.get(0);
    RedisReplication ra = RedisReplicationTest.replication(a);
    RedisReplication rb = RedisReplicationTest.replication(both.get(1));
    String password = "pw-" + ProcessHandle.current().pid();
    RedisClient admin = RedisClient.create(REDIS.uri());
    try (StatefulRedisConnection<String, String> c = admin.connect()) {
      c.sync().configSet("requirepass", password);
      try {
        // the admin's connection was authenticated before: it stays. The routers' four
        // connections are not counted exactly: one that a loaded machine's timeout had the
        // router replace is not there to kill, and one opened now is refused all the same. The
        // warnings below, one per router, are what says both were cut off
        assertThat(c.sync().clientKill(io.lettuce.core.KillArgs.Builder.typeNormal().skipme()))
            .as("the routers' connections").isPositive();
        RedisReplicationTest.await("both routers' credentials are refused",
            () -> warnings("credentials").size() >= 2);
        int routed = 0;
        long until = System.nanoTime() + 1_500_000_000L;
        while (System.nanoTime() - until < 0) {
          assertThat(a.route(RedisReplicationTest.prompt(2_000 + routed++, 64, null)).isRouted())
              .isTrue();
          assertThat(ra.connected()).as("a connected while its credentials are refused").isFalse();
          Thread.sleep(20);
        }
        List<String> refused = warnings("credentials");
        assertThat(refused).as("warnings saying the credentials were refused, one per router")
            .hasSize(2);
        assertThat(logged).extracting(LogRecord::getMessage).noneMatch(m -> m.contains(password));
      } finally {
        c.sync().configSet("requirepass", "");
      }
    } finally {
      admin.shutdown();
    }
    RedisReplicationTest.awaitConnected(both.get(1));
    awaitHintsFlowAgain(a, rb, "b applied a prefix a routed once Redis accepted it again");
  }
}
