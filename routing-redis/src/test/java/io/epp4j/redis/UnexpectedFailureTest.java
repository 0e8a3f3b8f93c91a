package io.epp4j.redis;

import static io.epp4j.redis.ReplicationLogicTest.await;
import static io.epp4j.redis.ReplicationLogicTest.prompt;
import static io.epp4j.redis.ReplicationLogicTest.replication;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.CycleState;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.RouterHints;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Ticker;
import io.epp4j.api.Usage;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import io.epp4j.testkit.CapturedLog;
import io.opentelemetry.api.OpenTelemetry;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A failure outside the transport calls (a plugin's {@link PrefixBlocks} that throws, a router
 * that throws while a hint is applied, a bug) costs the hint or batch it happened on, is logged
 * and counted, and replication goes on: the publisher and the reader outlive it.
 */
class UnexpectedFailureTest {
  private final List<Router> routers = new ArrayList<>();
  private final List<RedisReplication> plugins = new ArrayList<>();

  @AfterEach
  void close() {
    routers.forEach(Router::close);
    plugins.forEach(RedisReplication::close);
  }

  private Router router(InMemoryLog log, String id) {
    Router r = Router.builder().endpoints(ReplicationLogicTest.eightEndpoints())
        .registry(PluginRegistry.fromServiceLoader()
            .with(new RedisReplication.Provider(log::factory)))
        .configYaml(ReplicationLogicTest.configYaml("prefix-cache-scorer",
            "pool: p, routerId: %s, flushIntervalMillis: 1".formatted(id), ""), id)
        .randomSeed(id.hashCode()).build();
    routers.add(r);
    return r;
  }

  /** Block hashes whose reading throws {@code failure}, as a faulty plugin's might. */
  private static PrefixBlocks throwing(RuntimeException failure) {
    return throwingBlocks(() -> {
      throw failure;
    });
  }

  private static PrefixBlocks throwingError(Error failure) {
    return throwingBlocks(() -> {
      throw failure;
    });
  }

  private static PrefixBlocks throwingBlocks(Runnable onHash) {
    return new PrefixBlocks() {
      @Override
      public int blockSizeTokens() {
        return 16;
      }

      @Override
      public int size() {
        return 4;
      }

      @Override
      public long hash(int i) {
        onHash.run();
        return i;
      }
    };
  }

  /** Routes a prompt on {@code a}, then hands its plugin a hint with {@code blocks} as well. */
  private static void queueBrokenHint(Router a, PrefixBlocks blocks) {
    RoutingDecision d = a.route(prompt(1));
    CycleState state = new CycleState(System.nanoTime(), new Random(1));
    state.put(PrefixBlocks.KEY, blocks);
    replication(a).afterRouting(prompt(1), state, d);
    d.onComplete(new Usage(1, 0, 1));
  }

  @Test
  void aHintThatThrowsWhenEncodedIsSkippedAndThePublisherGoesOn() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "a");
    Router b = router(log, "b");
    queueBrokenHint(a, throwing(new IllegalStateException("a faulty plugin")));
    for (int i = 2; i <= 4; i++) {
      a.route(prompt(i)).onComplete(new Usage(1, 0, 1));
    }
    // prompt 1 as routed, then 2 to 4: the broken hint between them costs only itself
    await("b applied the prefixes a routed after the broken hint",
        () -> replication(b).appliedPrefixes() >= 4);
    assertThat(replication(a).errors("publisher")).isEqualTo(1);
    assertThat(replication(a).dropped()).as("the broken hint's prefix record").isEqualTo(1);
    assertThat(replication(a).queued()).isZero();
  }

  @Test
  void aPluginsFailureIsLoggedWithItsClassButNotItsMessage() throws Exception {
    String secret = "my-bank-password-is-hunter2";
    // everything the log would show, formatted as a log file would: messages, causes, frames
    try (CapturedLog logged = CapturedLog.of("io.epp4j")) {
      InMemoryLog log = new InMemoryLog();
      Router a = router(log, "a");
      queueBrokenHint(a, throwing(new IllegalStateException("cannot hash '" + secret + "'")));
      await("the publisher failed on the broken hint",
          () -> logged.records().stream().anyMatch(l -> l.contains("failed unexpectedly")));
      String all = logged.text();
      assertThat(all).doesNotContain(secret).contains("java.lang.IllegalStateException")
          .contains("UnexpectedFailureTest"); // the frame that threw
    }
  }

  @Test
  void anErrorOnThePublisherIsSurvivedAfterABackoff() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "a");
    Router b = router(log, "b");
    queueBrokenHint(a, throwingError(new OutOfMemoryError("simulated")));
    await("the publisher met the error", () -> replication(a).errors("publisher") == 1);
    for (int i = 2; i <= 4; i++) {
      a.route(prompt(i)).onComplete(new Usage(1, 0, 1));
    }
    await("b applied the prefixes a routed after the error",
        () -> replication(b).appliedPrefixes() >= 3);
    assertThat(replication(a).errors("publisher")).isEqualTo(1);
    assertThat(replication(a).queued()).isZero();
  }

  /** A router whose prefix hints for endpoint "bad" throw {@code failure} when applied. */
  private static final class FailingHints implements RouterHints {
    final Set<String> prefixes = ConcurrentHashMap.newKeySet();
    final Throwable failure;

    FailingHints(Throwable failure) {
      this.failure = failure;
    }

    @Override
    public void prefixSent(String endpointId, PrefixBlocks blocks) {
      if (endpointId.equals("bad")) {
        if (failure instanceof Error e) {
          throw e;
        }
        throw (RuntimeException) failure;
      }
      prefixes.add(endpointId);
    }

    @Override
    public void sessionBound(String sessionKey, String endpointId) {}

    @Override
    public void inFlight(String origin, String endpointId, int requests, long tokens) {}

    @Override
    public void forget(String origin) {}

    @Override
    public void forEachLocalInFlight(InFlightVisitor visitor) {}
  }

  private RedisReplication reader(InMemoryLog log, RouterHints hints) {
    RedisReplication r = new RedisReplication(new RedisReplication.Settings("p", "s", "reader",
        256, 1_000_000L, 1000, 1L << 20, 1_000_000_000L), "t", hints, log.factory(),
        OpenTelemetry.noop(), Ticker.system());
    plugins.add(r);
    return r;
  }

  private static byte[] batch(String endpointId) {
    HintCodec.Writer w = new HintCodec.Writer();
    w.prefix(RedisReplication.epochMicros(), endpointId, 16, new long[] {1, 2, 3});
    return w.finish("p", "other", RedisReplication.epochMicros());
  }

  @Test
  void aBatchThatThrowsWhenAppliedIsSkippedAndTheReaderGoesOn() throws Exception {
    InMemoryLog log = new InMemoryLog();
    FailingHints hints = new FailingHints(new IllegalStateException("a faulty router"));
    RedisReplication r = reader(log, hints);
    log.append(batch("bad"));
    log.append(batch("good"));
    await("the batch after the one that threw was applied",
        () -> hints.prefixes.contains("good"));
    assertThat(r.errors("reader")).isEqualTo(1);
    log.append(batch("later"));
    await("a later batch was applied", () -> hints.prefixes.contains("later"));
    assertThat(r.errors("reader")).isEqualTo(1);
  }

  @Test
  void anErrorOnTheReaderIsSurvivedAfterABackoffWithoutApplyingTheBatchAgain() throws Exception {
    InMemoryLog log = new InMemoryLog();
    FailingHints hints = new FailingHints(new OutOfMemoryError("simulated"));
    RedisReplication r = reader(log, hints);
    log.append(batch("bad"));
    log.append(batch("good"));
    await("the batch after the one that threw was applied",
        () -> hints.prefixes.contains("good"));
    log.append(batch("later"));
    await("a later batch was applied", () -> hints.prefixes.contains("later"));
    assertThat(r.errors("reader")).as("the batch that threw is not read again").isEqualTo(1);
  }
}
