package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.testkit.CapturedLog;
import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A Redis that hangs: its process stopped ({@code SIGSTOP}), so the kernel still accepts TCP
 * connections but nothing answers, as with a host that swaps itself to death, a stuck disk or a
 * paused VM. {@code connectTimeoutMillis} is documented as the "connect and command timeout".
 */
class RedisHangTest {
  @RegisterExtension
  static final RedisServer REDIS = new RedisServer();

  private final List<Router> routers = new ArrayList<>();
  private final String pool = "hang-" + ProcessHandle.current().pid() + "-" + System.nanoTime();

  @AfterEach
  void thawAndClose() throws Exception {
    REDIS.thaw();
    routers.forEach(Router::close);
  }

  Router router(String id) {
    return router(id, 500);
  }

  Router router(String id, int connectTimeoutMillis) {
    String yaml = ReplicationLogicTest.configYaml("prefix-cache-scorer",
        "uri: '%s', pool: %s, routerId: %s, heartbeatMillis: 200, connectTimeoutMillis: %d"
            .formatted(REDIS.uri(), pool, id, connectTimeoutMillis), "");
    Router r = Router.builder().endpoints(RedisReplicationTest.endpoints())
        .configYaml(yaml, "router " + id).randomSeed(id.hashCode()).build();
    routers.add(r);
    return r;
  }

  static int inFlight(Router r, String endpointId) {
    for (Candidate c : r.endpoints()) {
      if (c.id().equals(endpointId)) {
        return c.inFlightRequests();
      }
    }
    return -1;
  }

  /**
   * A connection attempt to a server that does not answer ends after the configured timeout.
   * The bound is far above the 300 ms configured, so that a loaded machine's scheduling cannot
   * fail it, and far below Lettuce's own default of 60 s, which an attempt that ignored the
   * setting would wait for: without a timeout the attempt would not end before the thaw below.
   */
  @Test
  void connectingToAHungServerFailsWithinTheConnectTimeout() throws Exception {
    RedisStreamTransport.Factory f = new RedisStreamTransport.Factory(
        RedisURI.create(REDIS.uri()), "epp4j:hang-test", 1000, Duration.ofMillis(300), null);
    try {
      HintTransport t = f.create();
      REDIS.freeze();
      CompletableFuture<Void> attempt = CompletableFuture.runAsync(() -> {
        try {
          t.connect();
        } catch (Exception expected) {
          // the server does not answer
        }
      });
      try {
        attempt.get(30, TimeUnit.SECONDS);
      } catch (java.util.concurrent.TimeoutException e) {
        // still connecting: asserted below
      }
      assertThat(attempt.isDone())
          .as("a connect to a hung server (connect timeout 300 ms) ended within 30 s").isTrue();
      t.close();
    } finally {
      REDIS.thaw();
      f.close();
    }
  }

  /**
   * The README: "Other routers' in-flight figures are dropped after five silent heartbeats, so
   * an outage leaves no phantom load". Here five heartbeats are one second.
   */
  @Test
  void aHungRedisLeavesNoPhantomLoadPastFiveHeartbeats() throws Exception {
    RoutingDecision d = forgottenWithinTenSecondsOfAHang(router("a"), router("b"), "");
    d.onComplete(RedisReplicationTest.DONE);
  }

  /**
   * Routes a request on {@code a}, waits until {@code b} counts it, hangs Redis and asserts that
   * {@code b} forgets it within 10 s; returns the request's decision, still open.
   */
  private RoutingDecision forgottenWithinTenSecondsOfAHang(Router a, Router b, String more)
      throws Exception {
    RedisReplicationTest.awaitConnected(a, b);
    RoutingDecision d = a.route(RedisReplicationTest.prompt(1, 64, null));
    String ep = d.primary().id();
    RedisReplicationTest.await("b counts a's request", () -> inFlight(b, ep) == 1);
    REDIS.freeze();
    long start = System.nanoTime();
    long deadline = start + TimeUnit.SECONDS.toNanos(10);
    while (inFlight(b, ep) != 0 && System.nanoTime() - deadline < 0) {
      Thread.sleep(10);
    }
    long tookMillis = (System.nanoTime() - start) / 1_000_000;
    assertThat(inFlight(b, ep)).as("a's request on b, %d ms after Redis hung (five heartbeats:"
        + " 1000 ms%s)", tookMillis, more).isZero();
    return d;
  }

  /**
   * The same with a command timeout far longer than the silence limit: b's reader is stuck in a
   * command that Redis does not answer for 30 s. Forgetting a router that went silent used to
   * wait for that command to give up, so a's request stayed on b for the whole timeout. The bound
   * of 10 s is ten times the limit of five 200 ms heartbeats and a third of the timeout.
   */
  @Test
  void aCommandStuckOnAHungRedisDoesNotHoldUpForgettingSilentRouters() throws Exception {
    RoutingDecision d = forgottenWithinTenSecondsOfAHang(router("a", 30_000),
        router("b", 30_000), "; command timeout 30 s");
    REDIS.thaw();
    d.onComplete(RedisReplicationTest.DONE);
  }

  /** Closing a router while Redis hangs returns promptly and leaves none of the plugin's threads. */
  @Test
  void closingWhileRedisHangsLeavesNoThreadOfThePlugin() throws Exception {
    Router a = router("a");
    RedisReplicationTest.awaitConnected(a);
    RoutingDecision d = a.route(RedisReplicationTest.prompt(1, 64, null));
    Thread.sleep(300);
    REDIS.freeze();
    Thread.sleep(1500); // publisher and reader time out and try to reconnect
    long start = System.nanoTime();
    a.close();
    long tookMillis = (System.nanoTime() - start) / 1_000_000;
    List<String> left = new ArrayList<>();
    for (Thread t : Thread.getAllStackTraces().keySet()) {
      if (t.isAlive() && t.getName().startsWith("epp4j-redis-replication")) {
        left.add(t.getName());
      }
    }
    d.onComplete(RedisReplicationTest.DONE);
    assertThat(left).as("threads of the plugin alive after close returned (close took %d ms)",
        tookMillis).isEmpty();
  }
  /**
   * A close that outlasts its wait: Redis hangs with hints queued and a command timeout of 20 s,
   * so the publisher's batch waits past the 3 s close gives it. close used to return with the
   * publisher still waiting; what it then failed to send was counted after the metrics had
   * closed, and nothing was logged. Now close ends the command, and before it returns every hint
   * routed is counted dropped, the publisher has ended and a warning gives the count.
   */
  @Test
  void aCloseThatCutsOffThePublisherCountsAndSaysWhatItCouldNotSend() throws Exception {
    try (CapturedLog log = CapturedLog.of(RedisReplication.class.getName())) {
      Router a = router("a", 20_000);
      RedisReplicationTest.awaitConnected(a);
      RedisReplication ra = RedisReplicationTest.replication(a);
      REDIS.freeze();
      int routed = 40; // one prefix record each, none of which can reach Redis
      for (int i = 0; i < routed; i++) {
        a.route(RedisReplicationTest.prompt(100 + i, 64, null))
            .onComplete(RedisReplicationTest.DONE);
      }
      routers.remove(a);
      a.close();
      assertThat(ra.publisherState()).as("the publisher once close returned")
          .isEqualTo(Thread.State.TERMINATED);
      assertThat(ra.dropped()).as("records routed, none sent").isEqualTo(routed);
      assertThat(log.records()).filteredOn(m -> m.contains("still sending"))
          .singleElement().asString().contains(routed + " records");
    }
  }
}
