package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.lettuce.core.RedisCommandTimeoutException;
import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The Redis transport on its own, against a real redis-server. */
class RedisStreamTransportTest {
  @RegisterExtension
  static final RedisServer REDIS = new RedisServer();

  private static final AtomicInteger STREAMS = new AtomicInteger();

  private static RedisStreamTransport.Factory factory(Duration commandTimeout) {
    String key = "epp4j:transport-test-" + ProcessHandle.current().pid() + "-"
        + STREAMS.incrementAndGet();
    return new RedisStreamTransport.Factory(RedisURI.create(REDIS.uri()), key, 1000,
        commandTimeout, null);
  }

  private static List<Thread> startedSince(Set<Thread> before) {
    List<Thread> started = new ArrayList<>();
    for (Thread t : Thread.getAllStackTraces().keySet()) {
      if (!before.contains(t)) {
        started.add(t);
      }
    }
    return started;
  }

  /**
   * A library's close releases its threads before it returns: a gateway that closes its router
   * (a test suite, a redeploy in the same JVM) must not find the Redis client's threads still
   * running. Here one of the client's computation threads is still busy when close is called
   * (as when it completes a command that expired), for at most half a second: close waits for
   * it, within its bound.
   */
  @Test
  void closingTheFactoryStopsEveryThreadOfTheClient() throws Exception {
    Set<Thread> before = Thread.getAllStackTraces().keySet();
    RedisStreamTransport.Factory f = factory(Duration.ofSeconds(2));
    CountDownLatch busy = new CountDownLatch(1);
    List<Thread> started;
    try {
      HintTransport t = f.create();
      t.connect();
      t.append(new byte[] {1});
      assertThat(t.read(HintTransport.OLDEST, 10, Duration.ofMillis(100))).hasSize(1);
      t.close();
      CountDownLatch never = new CountDownLatch(1);
      f.resources().eventExecutorGroup().execute(() -> {
        busy.countDown();
        try {
          never.await(500, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      });
      assertThat(busy.await(10, TimeUnit.SECONDS)).as("the computation thread started").isTrue();
      started = startedSince(before);
    } finally {
      f.close();
    }
    assertThat(started).as("the client's threads").anyMatch(t -> t.getName().startsWith("lettuce-"));
    // Netty's GlobalEventExecutor, which the shutdown uses to notify listeners, is one thread for
    // the whole process, not the client's: it ends itself after a second without work
    assertThat(started.stream().filter(Thread::isAlive).map(Thread::getName)
        .filter(n -> !n.startsWith("globalEventExecutor-")))
        .as("threads of the client still alive after close").isEmpty();
  }

  /**
   * The blocking read needs a timeout longer than its wait, and only it: a command after it
   * (the gap check, the server's clock) must time out after the configured command timeout
   * when the server stops answering, not after the longest wait a read ever asked for.
   */
  @Test
  void aBlockingReadDoesNotLengthenTheTimeoutOfLaterCommands() throws Exception {
    Duration timeout = Duration.ofMillis(300);
    try (RedisStreamTransport.Factory f = factory(timeout)) {
      HintTransport t = f.create();
      t.connect();
      String id = t.append(new byte[] {1});
      // an entry is there: the read returns at once, whatever wait it was allowed
      assertThat(t.read(HintTransport.OLDEST, 10, Duration.ofSeconds(60))).hasSize(1);
      // the server answers nothing for 3 s: ten times the command timeout
      try (RedisServer.Pause pause = REDIS.pause(3_000)) {
        assertThatThrownBy(() -> t.holdsAfter(id))
            .as("a command after the read, while the server does not answer")
            .isInstanceOf(RedisCommandTimeoutException.class);
      }
      t.close();
    }
  }
}
