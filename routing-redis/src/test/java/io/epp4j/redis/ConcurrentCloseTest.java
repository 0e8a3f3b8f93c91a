package io.epp4j.redis;

import static io.epp4j.redis.ReplicationLogicTest.await;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Parameters;
import io.epp4j.api.PluginContext;
import io.epp4j.api.RouterHints;
import io.epp4j.api.Ticker;
import io.epp4j.core.Router;
import io.opentelemetry.api.OpenTelemetry;
import java.lang.reflect.Field;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * {@code close()} called by two threads at once (a plugin may be closed more than once, e.g. by
 * an application's shutdown hook while the router closes it) undoes what the instance did once.
 */
class ConcurrentCloseTest {
  private final Router router = Router.builder().endpoints(ReplicationLogicTest.eightEndpoints())
      .build();

  @AfterEach
  void close() {
    router.close();
  }

  private static PluginContext context(RouterHints hints) {
    return new PluginContext() {
      @Override
      public String pluginName() {
        return RedisReplication.TYPE;
      }

      @Override
      public Ticker ticker() {
        return Ticker.system();
      }

      @Override
      public <T> Optional<T> service(Class<T> type) {
        return type == RouterHints.class ? Optional.of(type.cast(hints)) : Optional.empty();
      }
    };
  }

  @Test
  void twoConcurrentClosesOfAReplacedInstanceLeaveTheRunningOneSharingState() throws Exception {
    RouterHints hints = router.hints();
    InMemoryLog log = new InMemoryLog();
    RedisReplication replaced = (RedisReplication) new RedisReplication.Provider(log::factory)
        .create(context(hints), Parameters.of(Map.of("pool", "p"))).value();
    // a reload's new instance of the same router and pool
    RedisReplication running = (RedisReplication) new RedisReplication.Provider(log::factory)
        .create(context(hints), Parameters.of(Map.of("pool", "p", "batchSize", 128))).value();
    try {
      // both closes are held where an instance leaves its seat (under the seats' lock), so that
      // neither has finished when the other starts
      Field f = RouterSeat.class.getDeclaredField("SEATS");
      f.setAccessible(true);
      Object seats = f.get(null);
      Thread one = new Thread(replaced::close, "close-1");
      Thread two = new Thread(replaced::close, "close-2");
      Set<Thread.State> heldOrDone = Set.of(Thread.State.BLOCKED, Thread.State.TERMINATED);
      synchronized (seats) {
        one.start();
        two.start();
        await("both closes are held or done", () -> heldOrDone.contains(one.getState())
            && heldOrDone.contains(two.getState()));
      }
      one.join(10_000);
      two.join(10_000);
      assertThat(replaced.closed()).isTrue();
      assertThat(hints.sharesState()).as("the running instance's shared-state tie-break")
          .isTrue();
    } finally {
      running.close();
    }
    assertThat(hints.sharesState()).isFalse();
  }
}
