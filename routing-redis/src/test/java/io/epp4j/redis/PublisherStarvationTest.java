package io.epp4j.redis;

import io.epp4j.api.Candidate;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The README: in-flight figures are "sent when they change and every heartbeat". A publisher
 * that cannot empty its queue (hints come in faster than a slow Redis takes batches: a busy
 * gateway, a far or loaded server) must still send them: the other routers would otherwise keep
 * this router's load as it was when the backlog began.
 */
class PublisherStarvationTest {
  private final List<Router> routers = new ArrayList<>();

  @AfterEach
  void close() {
    routers.forEach(Router::close);
  }

  Router router(Supplier<HintTransport.Factory> transports, String id, String parameters) {
    String yaml = ReplicationLogicTest.configYaml("prefix-cache-scorer",
        "pool: p, routerId: " + id + ", " + parameters, "");
    Router r = Router.builder().endpoints(ReplicationLogicTest.eightEndpoints())
        .registry(PluginRegistry.fromServiceLoader()
            .with(new RedisReplication.Provider(transports)))
        .configYaml(yaml, id).randomSeed(id.hashCode()).build();
    routers.add(r);
    return r;
  }

  /** The log's transports, each append taking {@code millis} (a slow server). */
  static HintTransport.Factory slow(InMemoryLog log, long millis) {
    HintTransport.Factory f = log.factory();
    return () -> {
      HintTransport t = f.create();
      return new HintTransport() {
        @Override
        public void connect() throws Exception {
          t.connect();
        }

        @Override
        public String append(byte[] batch) throws Exception {
          Thread.sleep(millis);
          return t.append(batch);
        }

        @Override
        public List<Entry> read(String afterId, int max, Duration maxWait) throws Exception {
          return t.read(afterId, max, maxWait);
        }

        @Override
        public boolean holdsAfter(String afterId) throws Exception {
          return t.holdsAfter(afterId);
        }

        @Override
        public void close() {
          t.close();
        }
      };
    };
  }

  static int inFlightSum(Router r) {
    return r.endpoints().stream().mapToInt(Candidate::inFlightRequests).sum();
  }

  @Test
  void inFlightFiguresStillGoOutWhileThePublisherHasABacklog() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Router a = router(() -> slow(log, 5), "a",
        "batchSize: 4, flushIntervalMillis: 1, heartbeatMillis: 100, queueCapacity: 1000");
    Router b = router(log::factory, "b", "heartbeatMillis: 100");
    ReplicationLogicTest.await("connected", () -> ReplicationLogicTest.replication(a).connected()
        && ReplicationLogicTest.replication(b).connected());
    List<RoutingDecision> open = new ArrayList<>();
    for (int i = 0; i < 20; i++) {
      open.add(a.route(ReplicationLogicTest.prompt(i)));
    }
    ReplicationLogicTest.await("b counts a's 20 requests", () -> inFlightSum(b) == 20);

    // a busy router: far more hints than 4 per 5 ms, each request ended at once
    AtomicBoolean stop = new AtomicBoolean();
    Thread load = new Thread(() -> {
      long i = 1000;
      while (!stop.get()) {
        a.route(ReplicationLogicTest.prompt(i++)).onComplete(new Usage(1, 0, 1));
      }
    });
    load.start();
    try {
      Thread.sleep(300);
      open.forEach(d -> d.onComplete(new Usage(1, 0, 1)));
      // while the load goes on the queue never empties (a routes far faster than 4 hints per
      // 5 ms): a publisher that sent its figures only with an empty queue never sends these,
      // however long the wait. So the bound is one a loaded 2-core machine needs, not a few
      // heartbeats: a fixed 3 s could run out while the machine was busy with other builds
      ReplicationLogicTest.await("b counts at most 1 of a's requests (a has at most 1 open now)",
          () -> inFlightSum(b) <= 1);
    } finally {
      stop.set(true);
      load.join(10_000);
    }
  }
}
