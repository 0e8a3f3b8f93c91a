package io.epp4j.redis;

import static io.epp4j.redis.ReplicationLogicTest.await;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Parameters;
import io.epp4j.api.PluginContext;
import io.epp4j.api.RouterHints;
import io.epp4j.api.Ticker;
import io.epp4j.core.Router;
import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.metrics.Meter;
import io.opentelemetry.api.trace.TracerProvider;
import io.opentelemetry.context.propagation.ContextPropagators;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A {@code redis-replication} whose construction fails (here: the router's OpenTelemetry throws
 * when the plugin registers its instruments) leaves nothing behind: no seat for its router, no
 * shared-state tie-break, no transport and no thread.
 */
class ConstructionFailureTest {
  private Router router = Router.builder().endpoints(ReplicationLogicTest.eightEndpoints())
      .build();

  @AfterEach
  void close() {
    router.close();
  }

  /** An OpenTelemetry whose meters cannot be had. */
  private static final OpenTelemetry BROKEN = new OpenTelemetry() {
    @Override
    public TracerProvider getTracerProvider() {
      return TracerProvider.noop();
    }

    @Override
    public ContextPropagators getPropagators() {
      return ContextPropagators.noop();
    }

    @Override
    public Meter getMeter(String instrumentationScopeName) {
      throw new IllegalStateException("no meter");
    }
  };

  private static PluginContext context(RouterHints hints, OpenTelemetry otel) {
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
        if (type == RouterHints.class) {
          return Optional.of(type.cast(hints));
        }
        if (type == OpenTelemetry.class) {
          return Optional.of(type.cast(otel));
        }
        return Optional.empty();
      }
    };
  }

  private static List<Thread> replicationThreads() {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(t -> t.getName().startsWith("epp4j-redis-replication-")).toList();
  }

  @Test
  void aConstructionThatFailsLeavesNoSeatNoTieBreakNoTransportAndNoThread() throws Exception {
    // those of other tests' routers may still be ending: only new ones count
    List<Thread> before = replicationThreads();
    RouterHints hints = router.hints();
    InMemoryLog log = new InMemoryLog();
    AtomicInteger closes = new AtomicInteger();
    RedisReplication.Provider provider = new RedisReplication.Provider(() ->
        new HintTransport.Factory() {
          @Override
          public HintTransport create() {
            return log.factory().create();
          }

          @Override
          public void close() {
            closes.incrementAndGet();
          }
        });
    assertThatThrownBy(() -> provider.create(context(hints, BROKEN),
        Parameters.of(Map.of("pool", "p", "routerId", "a"))))
        .isInstanceOf(IllegalStateException.class).hasMessage("no meter");
    assertThat(RouterSeat.registered(hints, "p")).as("the router's seat in pool p").isFalse();
    assertThat(hints.sharesState()).as("the shared-state tie-break").isFalse();
    assertThat(closes.get()).as("the transport factory closed").isEqualTo(1);
    assertThat(replicationThreads()).as("threads started").isSubsetOf(before);
  }

  /**
   * A reload whose new instance fails to build leaves the running instance as it was: still the
   * seat's owner, still sharing state.
   */
  @Test
  void aFailedSecondInstanceLeavesTheRunningOneInCharge() throws Exception {
    RouterHints hints = router.hints();
    InMemoryLog log = new InMemoryLog();
    RedisReplication running = (RedisReplication) new RedisReplication.Provider(log::factory)
        .create(context(hints, OpenTelemetry.noop()),
            Parameters.of(Map.of("pool", "p", "routerId", "a"))).value();
    try {
      await("the running instance connected", running::connected);
      assertThatThrownBy(() -> new RedisReplication.Provider(log::factory).create(
          context(hints, BROKEN), Parameters.of(Map.of("pool", "p", "routerId", "a2"))))
          .isInstanceOf(IllegalStateException.class);
      assertThat(RouterSeat.registered(hints, "p")).isTrue();
      assertThat(hints.sharesState()).isTrue();
      assertThat(running.connected()).isTrue();
    } finally {
      running.close();
    }
    assertThat(RouterSeat.registered(hints, "p")).isFalse();
    assertThat(hints.sharesState()).isFalse();
  }
}
