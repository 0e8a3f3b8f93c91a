package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandTimeoutException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.sync.RedisCommands;
import io.lettuce.core.codec.ByteArrayCodec;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
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
    return factory(commandTimeout, newKey());
  }

  private static String newKey() {
    return "epp4j:transport-test-" + ProcessHandle.current().pid() + "-"
        + STREAMS.incrementAndGet();
  }

  private static RedisStreamTransport.Factory factory(Duration commandTimeout, String key) {
    return new RedisStreamTransport.Factory(RedisURI.create(REDIS.uri()), key, 1000,
        commandTimeout, null);
  }

  /** A number of {@code INFO section}, e.g. total_connections_received of stats. */
  private static long info(RedisCommands<byte[], byte[]> sync, String section, String name) {
    for (String line : sync.info(section).split("\r?\n")) {
      if (line.startsWith(name + ":")) {
        return Long.parseLong(line.substring(name.length() + 1).trim());
      }
    }
    throw new AssertionError("no " + name + " in INFO " + section);
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
  /** A batch of {@code pool} from {@code origin} whose prefix records hold {@code blocks} hashes. */
  private static byte[] batch(String pool, String origin, int blocks) {
    HintCodec.Writer w = new HintCodec.Writer();
    w.prefix(1, "10.0.0.1:8000", 16, new long[blocks]);
    return w.finish(pool, origin, 1);
  }

  /**
   * XREAD returns entries whole, and the reader kept every entry of a read whole before looking
   * at any: its own batches and another pool's, of which it reads only the header, were held in
   * full. What the reader does not want is now dropped as the answer is decoded, one entry at a
   * time; each entry keeps its stored length.
   */
  @Test
  void aReadKeepsOnlyWhatTheReaderWants() throws Exception {
    RedisStreamTransport.Factory f = factory(Duration.ofSeconds(2));
    try (HintTransport t = f.create()) {
      t.connect();
      byte[] wanted = batch("p", "other", 1000);
      byte[] own = batch("p", "me", 100_000);
      byte[] otherPool = batch("q", "other", 100_000);
      for (byte[] b : List.of(wanted, own, otherPool)) {
        t.append(b);
      }
      int ownHeader = 1 + 2 + 1 + 2 + 2 + 8 + 4;
      int otherPoolHeader = 1 + 2 + 1 + 2 + 5 + 8 + 4;

      List<HintTransport.Entry> got = t.read(HintTransport.OLDEST, 10, Duration.ofMillis(100),
          new RedisReplication.Wanted("p", "me"));

      assertThat(got).extracting(HintTransport.Entry::size).as("stored lengths")
          .containsExactly(wanted.length, own.length, otherPool.length);
      assertThat(got.get(0).batch()).as("another router's batch of the pool").isEqualTo(wanted);
      assertThat(got.get(1).batch()).as("the reader's own")
          .isEqualTo(java.util.Arrays.copyOf(own, ownHeader));
      assertThat(got.get(2).batch()).as("another pool's")
          .isEqualTo(java.util.Arrays.copyOf(otherPool, otherPoolHeader));
      // the header is what the reader decides by
      assertThat(HintCodec.header(HintCodec.input(got.get(1).batch())).origin()).isEqualTo("me");
      assertThat(HintCodec.header(HintCodec.input(got.get(2).batch())).pool()).isEqualTo("q");

      // nothing at all of an entry the reader wants none of
      assertThat(t.read(HintTransport.OLDEST, 10, Duration.ofMillis(100), stored -> 0))
          .allSatisfy(e -> assertThat(e.batch()).isEmpty())
          .extracting(HintTransport.Entry::size)
          .containsExactly(wanted.length, own.length, otherPool.length);
      // the gap check, which keeps no entry, and a read without a wish, which keeps them whole
      assertThat(t.holdsAfter(got.get(0).id())).isTrue();
      assertThat(t.nowMillis()).isPositive();
      assertThat(t.read(HintTransport.OLDEST, 10, Duration.ofMillis(100)))
          .extracting(e -> e.batch().length)
          .containsExactly(wanted.length, own.length, otherPool.length);
    } finally {
      f.close();
    }
  }

  /**
   * Lettuce gathers a value whole in its connection's read buffer, which grows to the value and
   * is released only when the connection closes (its decode-buffer policies only move unread
   * bytes to the front). One entry as long as Redis takes, another writer's, pinned that much
   * memory per router for as long as the reader's connection lasted. A command whose answer held
   * a value (or field name) longer than {@link RedisStreamTransport#RECYCLE_ABOVE_BYTES} now
   * closes its connection, and the next command opens another; an entry as long as a router
   * writes keeps it.
   */
  @Test
  void aConnectionThatReceivedAValueLongerThanRoutersWriteIsReplacedAfterwards() throws Exception {
    String key = newKey();
    byte[] k = key.getBytes(StandardCharsets.UTF_8);
    RedisStreamTransport.Factory f = factory(Duration.ofSeconds(10), key);
    RedisClient admin = RedisClient.create(REDIS.uri());
    try (HintTransport t = f.create(); var a = admin.connect(ByteArrayCodec.INSTANCE)) {
      RedisCommands<byte[], byte[]> sync = a.sync();
      t.connect();
      // the longest entry a router writes at the default prefix length: 1 MiB and one hint
      String routers = t.append(new byte[RedisReplication.MAX_BATCH_BYTES + (64 << 10)]);
      long opened = info(sync, "stats", "total_connections_received");
      assertThat(t.read(HintTransport.OLDEST, 10, Duration.ofMillis(100), stored -> 0))
          .extracting(HintTransport.Entry::id).containsExactly(routers);
      assertThat(t.holdsAfter(routers)).isTrue();
      assertThat(info(sync, "stats", "total_connections_received"))
          .as("connections opened after reading a router's longest entry").isEqualTo(opened);

      int longBytes = RedisStreamTransport.RECYCLE_ABOVE_BYTES + 1;
      String batchField = sync.xadd(k, Map.of("b".getBytes(StandardCharsets.US_ASCII),
          new byte[longBytes]));
      String otherField = sync.xadd(k, Map.of("x".getBytes(StandardCharsets.US_ASCII),
          new byte[longBytes]));
      // skipped unread, as the reader does with an entry longer than any router writes
      assertThat(t.read(routers, 1, Duration.ofMillis(100), stored -> 0))
          .extracting(HintTransport.Entry::id, HintTransport.Entry::size)
          .containsExactly(org.assertj.core.groups.Tuple.tuple(batchField, longBytes));
      // the gap check asks for that entry again: a new connection, replaced in turn
      assertThat(t.holdsAfter(batchField)).isTrue();
      // a long value of another field (the reader keeps none of it) grows the buffer alike
      assertThat(t.read(batchField, 1, Duration.ofMillis(100), stored -> 0))
          .extracting(HintTransport.Entry::id).containsExactly(otherField);
      // short answers: the connection this one opens stays
      assertThat(t.nowMillis()).isPositive();
      assertThat(t.read(otherField, 10, Duration.ofMillis(100), stored -> 0)).isEmpty();
      assertThat(info(sync, "stats", "total_connections_received") - opened)
          .as("connections opened: one after each command that received a long value")
          .isEqualTo(3);
      // and the ones replaced were closed: the admin's and the transport's are left
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (info(sync, "clients", "connected_clients") != 2 && System.nanoTime() < deadline) {
        Thread.sleep(20);
      }
      assertThat(info(sync, "clients", "connected_clients")).isEqualTo(2);
    } finally {
      admin.shutdown();
      f.close();
    }
  }

  /**
   * Lettuce's handshake timeout fires on another thread than the handshake's: when the handshake
   * succeeds just as the timeout fires, connect() returns the connection and the timeout closes
   * its channel right after. The first command then found it closed and failed ("not
   * connected"): the publisher logged {@code Redis unreachable (publisher: IllegalStateException)}
   * with Redis up, dropped the batch it had assembled and backed off. Here the server closes the
   * connection between connect() and the first command (CLIENT KILL, then waiting until the
   * client has seen it close): that command opens a new connection and succeeds. A connection
   * that served a command and then closed still fails the next one, for the replication loop to
   * reconnect and check what it missed.
   */
  @Test
  void aConnectionClosedBeforeItsFirstCommandIsReplacedByThatCommand() throws Exception {
    String key = newKey();
    byte[] k = key.getBytes(StandardCharsets.UTF_8);
    RedisStreamTransport.Factory f = factory(Duration.ofSeconds(10), key);
    RedisClient admin = RedisClient.create(REDIS.uri());
    try (var a = admin.connect(ByteArrayCodec.INSTANCE)) {
      RedisStreamTransport t = (RedisStreamTransport) f.create();
      RedisCommands<byte[], byte[]> sync = a.sync();
      t.connect();
      long opened = info(sync, "stats", "total_connections_received");
      killOthersAndAwaitClosed(sync, t);

      String id = t.append(new byte[] {1});
      assertThat(sync.xlen(k)).isEqualTo(1);
      assertThat(t.read(HintTransport.OLDEST, 10, Duration.ofMillis(100)))
          .extracting(HintTransport.Entry::id).containsExactly(id);
      assertThat(info(sync, "stats", "total_connections_received") - opened)
          .as("connections opened by the first command").isEqualTo(1);

      // this connection served commands: its loss is the caller's to handle
      killOthersAndAwaitClosed(sync, t);
      assertThatThrownBy(() -> t.append(new byte[] {2}))
          .isInstanceOf(IllegalStateException.class);
      assertThat(sync.xlen(k)).isEqualTo(1);
      t.close();
    } finally {
      admin.shutdown();
      f.close();
    }
  }

  /** Has the server close every client but {@code sync}'s and waits until {@code t} saw it. */
  private static void killOthersAndAwaitClosed(RedisCommands<byte[], byte[]> sync,
      RedisStreamTransport t) throws InterruptedException {
    assertThat(t.connectionOpen()).isTrue();
    // at least t's: the server may still list a connection that an earlier test closed and
    // whose close it has not handled yet. That t's was among them is what the wait below checks
    assertThat(sync.clientKill(io.lettuce.core.KillArgs.Builder.typeNormal().skipme()))
        .isPositive();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (t.connectionOpen() && System.nanoTime() < deadline) {
      Thread.sleep(5);
    }
    assertThat(t.connectionOpen()).as("the client saw its connection close").isFalse();
  }
}
