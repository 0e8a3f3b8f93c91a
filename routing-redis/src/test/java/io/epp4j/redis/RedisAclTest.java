package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.lettuce.core.AclSetuserArgs;
import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.protocol.CommandType;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A Redis user limited by an ACL to the commands the README names as the ones used
 * ("{@code XADD ... MAXLEN ~}, {@code XREAD BLOCK}, {@code XRANGE}", {@code PEXPIRE}), with what
 * a client needs to connect, and {@code TIME}; and one without the optional {@code PEXPIRE}.
 */
class RedisAclTest {
  @RegisterExtension
  static final RedisServer REDIS = new RedisServer();

  private final List<Router> routers = new ArrayList<>();

  @AfterEach
  void close() {
    routers.forEach(Router::close);
  }

  Router router(String uri, String pool, String id) {
    String yaml = ReplicationLogicTest.configYaml("prefix-cache-scorer",
        "uri: '%s', pool: %s, routerId: %s, heartbeatMillis: 200".formatted(uri, pool, id), "");
    Router r = Router.builder().endpoints(RedisReplicationTest.endpoints())
        .configYaml(yaml, "router " + id).randomSeed(id.hashCode()).build();
    routers.add(r);
    return r;
  }

  /** Makes Redis user {@code user} (password {@code pw}) allowed the handshake and {@code commands}. */
  static void user(String user, CommandType... commands) {
    RedisClient admin = RedisClient.create(REDIS.uri());
    try (StatefulRedisConnection<String, String> c = admin.connect()) {
      AclSetuserArgs args = AclSetuserArgs.Builder.on().addPassword("pw").keyPattern("epp4j:*")
          .addCommand(CommandType.HELLO).addCommand(CommandType.AUTH)
          .addCommand(CommandType.PING).addCommand(CommandType.CLIENT);
      for (CommandType command : commands) {
        args.addCommand(command);
      }
      c.sync().aclSetuser(user, args);
    } finally {
      admin.shutdown();
    }
  }

  @Test
  void aUserAllowedTheDocumentedCommandsKeepsReading() throws Exception {
    user("epp", CommandType.TIME, CommandType.XADD, CommandType.XREAD, CommandType.XRANGE,
        CommandType.PEXPIRE);
    String uri = "redis://epp:pw@127.0.0.1:" + REDIS.port();
    String pool = "acl-" + ProcessHandle.current().pid();
    Router a = router(uri, pool, "a");
    Router b = router(uri, pool, "b");
    RedisReplicationTest.awaitConnected(a, b);
    RoutingDecision first = a.route(RedisReplicationTest.prompt(1, 256, null));
    first.onComplete(RedisReplicationTest.DONE);
    RedisReplicationTest.await("b applied a's first prefix",
        () -> RedisReplicationTest.replication(b).appliedPrefixes() >= 1);
    // a few heartbeats: the connected reader's gap checks run
    Thread.sleep(1_500);
    RoutingDecision second = a.route(RedisReplicationTest.prompt(2, 256, null));
    second.onComplete(RedisReplicationTest.DONE);
    RedisReplicationTest.await("b applied a's second prefix",
        () -> RedisReplicationTest.replication(b).appliedPrefixes() >= 2);
    assertThat(RedisReplicationTest.replication(b).connected()).isTrue();
    assertThat(RedisReplicationTest.pttl(REDIS.uri(), "epp4j:" + pool + ":hints")).isPositive();
  }

  /**
   * {@code PEXPIRE} is optional: a user without it replicates as before, its stream keeps no TTL,
   * and a warning names the command and the key.
   */
  @Test
  void aUserNotAllowedPexpireReplicatesAndIsToldTheStreamKeepsNoTtl() throws Exception {
    List<LogRecord> logged = new CopyOnWriteArrayList<>();
    Handler capture = new Handler() {
      @Override
      public void publish(LogRecord r) {
        logged.add(r);
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    Logger log = Logger.getLogger(RedisReplication.class.getName());
    log.addHandler(capture);
    try {
      user("epp-no-ttl", CommandType.TIME, CommandType.XADD, CommandType.XREAD,
          CommandType.XRANGE);
      String uri = "redis://epp-no-ttl:pw@127.0.0.1:" + REDIS.port();
      String pool = "acl-no-ttl-" + ProcessHandle.current().pid();
      Router a = router(uri, pool, "a");
      Router b = router(uri, pool, "b");
      RedisReplicationTest.awaitConnected(a, b);
      for (int i = 0; i < 2; i++) {
        a.route(RedisReplicationTest.prompt(10 + i, 256, null))
            .onComplete(RedisReplicationTest.DONE);
        int n = i + 1;
        RedisReplicationTest.await("b applied a's prefix " + n,
            () -> RedisReplicationTest.replication(b).appliedPrefixes() >= n);
      }
      String key = "epp4j:" + pool + ":hints";
      assertThat(RedisReplicationTest.pttl(REDIS.uri(), key)).as("no TTL").isEqualTo(-1);
      assertThat(logged).map(LogRecord::getMessage)
          .anyMatch(m -> m.contains("PEXPIRE") && m.contains("NOPERM") && m.contains(key));
      assertThat(RedisReplicationTest.replication(a).dropped()).isZero();
      assertThat(RedisReplicationTest.replication(a).connected()).isTrue();
    } finally {
      log.removeHandler(capture);
    }
  }

  /** The gap check's answers, which the XRANGE-only form must keep. */
  @Test
  void holdsAfterTellsATrimmedOrReplacedStream() throws Exception {
    try (RedisStreamTransport.Factory f = new RedisStreamTransport.Factory(
        io.lettuce.core.RedisURI.create(REDIS.uri()), "epp4j:holds-" + System.nanoTime(), 1000,
        java.time.Duration.ofSeconds(2), null)) {
      HintTransport t = f.create();
      t.connect();
      assertThat(t.holdsAfter("1-0")).as("an empty stream: lost").isFalse();
      String first = t.append(new byte[] {1});
      String second = t.append(new byte[] {2});
      assertThat(t.holdsAfter(first)).isTrue();
      assertThat(t.holdsAfter(second)).as("the newest entry read").isTrue();
      assertThat(t.holdsAfter("1-0")).as("trimmed past the id").isFalse();
      long ms = StreamIds.millis(second);
      assertThat(t.holdsAfter((ms + 3_600_000) + "-0")).as("a newest entry older than the id")
          .isFalse();
      t.close();
    }
  }
}
