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
        "uri: '%s', pool: %s".formatted(REDIS.uri(), pool), "");
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
}
