package io.epp4j.redis;

import static io.epp4j.redis.ReplicationLogicTest.await;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Ticker;
import io.opentelemetry.api.OpenTelemetry;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A router counts a request before it queues the request's hint, so a batch that carries the
 * hint's prefix must carry the figure the request raised, or follow one that did: another router
 * that learns where the prompt went also counts the request there, and does not send more
 * traffic to the endpoint the prefix draws it to as if that endpoint had nothing to do.
 */
class FigureBeforePrefixTest {
  private static final Endpoint E = Endpoint.parse("10.2.0.1:8000");

  private final List<RedisReplication> plugins = new ArrayList<>();

  @AfterEach
  void close() {
    plugins.forEach(RedisReplication::close);
  }

  /**
   * A router whose own figures are {@code local}; it records, for each prefix it hears, the
   * figure it held for the prefix's endpoint then. {@link #holdNextLocalRead} stops the next
   * reading of the local figures once it is done, until released.
   */
  private static final class Hints extends FakeHints {
    final List<Integer> figureAtPrefix = new CopyOnWriteArrayList<>();
    private final AtomicReference<CountDownLatch> hold = new AtomicReference<>();
    final CountDownLatch localRead = new CountDownLatch(1);

    Hints() {
      super(new ConcurrentHashMap<>());
    }

    void holdNextLocalRead(CountDownLatch release) {
      hold.set(release);
    }

    @Override
    public void prefixSent(String endpointId, PrefixBlocks blocks) {
      figureAtPrefix.add(remote.getOrDefault(endpointId, 0));
    }

    @Override
    public void forEachLocalInFlight(InFlightVisitor visitor) {
      super.forEachLocalInFlight(visitor);
      CountDownLatch release = hold.getAndSet(null);
      if (release != null) {
        localRead.countDown();
        try {
          release.await(30, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
    }
  }

  private RedisReplication replication(InMemoryLog log, String routerId, Hints hints) {
    // a flush every millisecond; a heartbeat of a minute, so that only changes go out
    RedisReplication r = new RedisReplication(new RedisReplication.Settings("p", "s", routerId,
        256, 1_000_000L, 1000, 1L << 20, 60_000_000_000L), "t", hints, log.factory(),
        OpenTelemetry.noop(), Ticker.system());
    plugins.add(r);
    return r;
  }

  /** What {@code Router.route} does: counts the request on its endpoint, then queues its hint. */
  private static void route(RedisReplication a, Hints hints) {
    hints.local.merge(E.id(), 1, Integer::sum);
    CycleState state = new CycleState(System.nanoTime(), new Random(1));
    state.put(PrefixBlocks.KEY, PrefixBlocks.of(16, new long[] {1, 2, 3}));
    InferenceRequest request = InferenceRequest.builder().model("m").prompt("p").build();
    a.afterRouting(request, state, RoutingDecision.routed("default",
        Map.of("default", new ProfileResult("default", List.of(E)))));
  }

  /**
   * The request is routed while a flush reads the figures: the flush took the figures before the
   * request counted, then the hint the request queued meanwhile, and sent the prefix in a batch
   * without its figure. The other router then held the prefix without the load for a flush
   * interval (under a loaded machine, longer).
   */
  @Test
  void aPrefixQueuedWhileAFlushReadsTheFiguresGoesOutWithItsFigure() throws Exception {
    InMemoryLog log = new InMemoryLog();
    Hints bHints = new Hints();
    replication(log, "b", bHints);
    Hints aHints = new Hints();
    RedisReplication a = replication(log, "a", aHints);
    await("a is connected", a::connected);

    CountDownLatch release = new CountDownLatch(1);
    aHints.holdNextLocalRead(release);
    assertThat(aHints.localRead.await(30, TimeUnit.SECONDS))
        .as("a flush read a's figures").isTrue();
    route(a, aHints); // while that flush is between its figures and its hints
    release.countDown();

    await("b applied the prefix", () -> !bHints.figureAtPrefix.isEmpty());
    assertThat(bHints.figureAtPrefix).as("b's figure of a's request when b learnt its prefix")
        .containsExactly(1);
    await("b counts a's request", () -> bHints.remote.equals(Map.of(E.id(), 1)));
  }
}
