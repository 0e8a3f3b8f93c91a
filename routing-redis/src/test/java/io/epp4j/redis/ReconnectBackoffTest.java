package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The README: "each thread reconnects with exponential backoff from 100 ms to 5 s with jitter".
 * A short {@code heartbeatMillis} (10 ms is accepted) must not turn that into a reconnection
 * loop against a server that refuses every command.
 */
class ReconnectBackoffTest {
  private final List<Router> routers = new ArrayList<>();

  @AfterEach
  void close() {
    routers.forEach(Router::close);
  }

  Router router(InMemoryLog log, String id, int heartbeatMillis) {
    String yaml = ReplicationLogicTest.configYaml("prefix-cache-scorer",
        "pool: p, routerId: %s, heartbeatMillis: %d".formatted(id, heartbeatMillis), "");
    List<Endpoint> eps = ReplicationLogicTest.eightEndpoints();
    Router r = Router.builder().endpoints(eps)
        .registry(PluginRegistry.fromServiceLoader()
            .with(new RedisReplication.Provider(log::factory)))
        .configYaml(yaml, id).randomSeed(id.hashCode()).build();
    routers.add(r);
    return r;
  }

  @Test
  void aShortHeartbeatDoesNotCapTheReconnectionBackoff() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.refuseCommands(true);
    Router a = router(log, "a", 10);
    RoutingDecision open = a.route(InferenceRequest.builder().model("m").prompt("hello")
        .maxTokens(4).build());
    Thread.sleep(3_000);
    open.onComplete(new Usage(1, 0, 1));
    for (String thread : List.of("epp4j-redis-replication-publish",
        "epp4j-redis-replication-read")) {
      // 100 ms doubling (at least half of each step with jitter): 50 + 100 + 200 + 400 + 800 +
      // 1600 ms is past 3 s, so at most 7 connections
      assertThat(log.connectTimes(thread).size())
          .as("%s: connections in 3 s to a server refusing every command", thread)
          .isLessThanOrEqualTo(10);
    }
  }

  /**
   * The backoff starts again from 100 ms once a command succeeds, also on a router that sends
   * nothing (no routes, nothing in flight): its publisher's only commands are the checks it makes
   * each heartbeat that the server still takes writes. Those used to leave the backoff where an
   * earlier outage had taken it, so that the next outage's first reconnection waited up to 5 s
   * (here at least 1.6 s), the gauge reading 0 all that time.
   */
  @Test
  void anIdlePublisherStartsTheNextOutageFromTheFirstBackoffStep() throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.checkAppends();
    Router a = router(log, "a", 100);
    RedisReplication r = ReplicationLogicTest.replication(a);
    String publisher = "epp4j-redis-replication-publish";
    ReplicationLogicTest.await("connected", r::connected);
    // long enough for the steps to pass 1.6 s: 100 + 200 + 400 + 800 + 1600 ms at most (jitter
    // waits half to all of each) take 3.1 s, so the step after them is 3.2 s, waited 1.6 to 3.2 s
    log.down();
    Thread.sleep(4_000);
    log.up();
    ReplicationLogicTest.await("connected again", r::connected);
    Thread.sleep(500); // five heartbeats, each with its check
    int before = log.connectTimes(publisher).size();
    long start = System.nanoTime();
    log.down(); // breaks the connections ...
    log.up(); // ... and takes new ones at once
    ReplicationLogicTest.await("the publisher connected again",
        () -> log.connectTimes(publisher).size() > before);
    long millis = (log.connectTimes(publisher).get(before) - start) / 1_000_000;
    // two heartbeats to find the connection broken (200 ms) and the first step (100 ms at most):
    // 300 ms, with room for a loaded machine, and well below the 1.6 s of a step not reset
    assertThat(millis).as("ms from the connection's loss to the publisher's next connection")
        .isLessThan(1_200);
  }

  /** While the backoff waits seconds, another router's figures still leave after five heartbeats. */
  @Test
  void silentOriginsAreForgottenWhileTheBackoffWaits() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(log, "a", 100);
    Router b = router(log, "b", 100);
    ReplicationLogicTest.await("both connected", () -> ReplicationLogicTest.replication(a)
        .connected() && ReplicationLogicTest.replication(b).connected());
    RoutingDecision open = a.route(InferenceRequest.builder().model("m").prompt("hello")
        .maxTokens(4).build());
    String ep = open.primary().id();
    ReplicationLogicTest.await("b counts a's request", () -> b.endpoints().stream()
        .anyMatch(c -> c.id().equals(ep) && c.inFlightRequests() == 1));
    long start = System.nanoTime();
    log.down();
    ReplicationLogicTest.await("b forgot a's request", () -> b.endpoints().stream()
        .allMatch(c -> c.inFlightRequests() == 0));
    // five heartbeats are 500 ms; b's backoff meanwhile waits 100, 200, 400, 800 ms...
    assertThat((System.nanoTime() - start) / 1_000_000).isLessThan(1_500);
    open.onComplete(new Usage(1, 0, 1));
  }
}
