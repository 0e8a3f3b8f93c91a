package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.Status;
import org.springframework.boot.test.context.FilteredClassLoader;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/** {@code epp4j} in {@code /actuator/health}. */
class Epp4jHealthIndicatorTest {
  private static final byte[] BODY =
      "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8);

  private final ApplicationContextRunner runner = new ApplicationContextRunner()
      .withConfiguration(AutoConfigurations.of(Epp4jAutoConfiguration.class))
      .withPropertyValues("epp4j.metrics.enabled=false");

  @Test
  @SuppressWarnings("unchecked")
  void upWithWhatEachRouterRoutesOver() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9000,127.0.0.1:9001",
            "epp4j.pools.llama.endpoints=127.0.0.1:9011")
        .run(ctx -> {
          Router dflt = ctx.getBean(Router.class);
          dflt.updateMetrics("127.0.0.1:9000", EndpointMetrics.builder().waitingRequests(2)
              .kvCacheUsage(0.5).build());
          RoutingDecision d = ctx.getBean(Epp4jPools.class).router("llama")
              .route("/v1/completions", Map.of(), BODY);
          assertThat(d.isRouted()).isTrue();

          Health h = ctx.getBean(Epp4jHealthIndicator.class).health();
          assertThat(h.getStatus()).isEqualTo(Status.UP);
          Map<String, Object> def = (Map<String, Object>) h.getDetails().get("default");
          assertThat(def).containsEntry("endpoints", 2).containsEntry("asleep", 0)
              .containsEntry("withoutMetrics", 1)
              .containsEntry("inFlight", 0L).doesNotContainKey("scrapeFailures");
          assertThat((Long) def.get("oldestMetricsMillis")).isBetween(0L, 60_000L);
          Map<String, Object> llama = (Map<String, Object>)
              ((Map<String, Object>) h.getDetails().get("pools")).get("llama");
          assertThat(llama).containsEntry("endpoints", 1).containsEntry("withoutMetrics", 1)
              .containsEntry("oldestMetricsMillis", -1L).containsEntry("inFlight", 1L);
          d.onComplete(Usage.NONE);
          llama = (Map<String, Object>) ((Map<String, Object>) ctx.getBean(
              Epp4jHealthIndicator.class).health().getDetails().get("pools")).get("llama");
          assertThat(llama).containsEntry("inFlight", 0L);
        });
  }

  @Test
  void downWhenNoRouterHasAnEndpointAndUpWhenOnlyANamedPoolHas() {
    runner.run(ctx -> {
      Health h = ctx.getBean(Epp4jHealthIndicator.class).health();
      assertThat(h.getStatus()).isEqualTo(Status.DOWN);
      assertThat((String) h.getDetails().get("reason")).contains("no router has an endpoint");
    });
    // a gateway that routes only through named pools: its default router has none
    runner.withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9011").run(ctx ->
        assertThat(ctx.getBean(Epp4jHealthIndicator.class).health().getStatus())
            .isEqualTo(Status.UP));
  }

  @Test
  @SuppressWarnings("unchecked")
  void sleepingEnginesAreCountedApartAndOutOfServiceWhenNoneIsAwake() {
    EndpointMetrics asleep = EndpointMetrics.builder().asleep(true).build();
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9000,127.0.0.1:9001",
            "epp4j.pools.llama.endpoints=127.0.0.1:9011")
        .run(ctx -> {
          Router dflt = ctx.getBean(Router.class);
          Router llama = ctx.getBean(Epp4jPools.class).router("llama");
          Epp4jHealthIndicator indicator = ctx.getBean(Epp4jHealthIndicator.class);
          dflt.updateMetrics("127.0.0.1:9000", asleep);
          dflt.updateMetrics("127.0.0.1:9001", asleep);

          // the named pool's engine is awake: the gateway still routes to an awake engine
          Health h = indicator.health();
          assertThat(h.getStatus()).isEqualTo(Status.UP);
          assertThat((Map<String, Object>) h.getDetails().get("default"))
              .containsEntry("endpoints", 2).containsEntry("asleep", 2);
          assertThat((Map<String, Object>) ((Map<String, Object>) h.getDetails().get("pools"))
              .get("llama")).containsEntry("endpoints", 1).containsEntry("asleep", 0);

          // every engine sleeps: routed requests go to sleeping engines, which answer 503
          llama.updateMetrics("127.0.0.1:9011", asleep);
          h = indicator.health();
          assertThat(h.getStatus()).isEqualTo(Status.OUT_OF_SERVICE);
          assertThat((String) h.getDetails().get("reason")).contains("asleep");

          // one wakes up
          dflt.updateMetrics("127.0.0.1:9001", EndpointMetrics.builder().build());
          h = indicator.health();
          assertThat(h.getStatus()).isEqualTo(Status.UP);
          assertThat((Map<String, Object>) h.getDetails().get("default"))
              .containsEntry("asleep", 1);
        });
  }

  @Test
  void theScrapersFailuresAreReported() {
    // port 1: nothing listens, every scrape fails
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:1", "epp4j.metrics.enabled=true",
        "epp4j.metrics.interval=20ms").run(ctx -> {
          Epp4jHealthIndicator indicator = ctx.getBean(Epp4jHealthIndicator.class);
          long deadline = System.nanoTime() + 10_000_000_000L;
          long failures = 0;
          while (failures == 0 && System.nanoTime() < deadline) {
            @SuppressWarnings("unchecked")
            Map<String, Object> def =
                (Map<String, Object>) indicator.health().getDetails().get("default");
            failures = (Long) def.get("scrapeFailures");
            Thread.sleep(10);
          }
          assertThat(failures).isPositive();
        });
  }

  @Test
  void offWhenDisabledOrWithoutSpringBootHealth() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9000",
            "management.health.epp4j.enabled=false")
        .run(ctx -> assertThat(ctx).hasNotFailed().doesNotHaveBean(Epp4jHealthIndicator.class));
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9000")
        .withClassLoader(new FilteredClassLoader("org.springframework.boot.health"))
        .run(ctx -> assertThat(ctx).hasNotFailed().hasSingleBean(Router.class)
            .doesNotHaveBean(Epp4jHealthIndicator.class));
  }
}
