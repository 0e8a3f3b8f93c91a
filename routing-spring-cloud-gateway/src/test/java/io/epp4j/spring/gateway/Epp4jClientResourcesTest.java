package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.DefaultClientResources;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/** An application's Lettuce {@code ClientResources} bean is every router's router service. */
class Epp4jClientResourcesTest {
  private static final String CONFIG = """
      plugins:
      - type: client-resources-probe
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: client-resources-probe
        - pluginRef: max-score-picker
      """;

  @TempDir Path dir;
  private final ApplicationContextRunner runner = new ApplicationContextRunner()
      .withConfiguration(AutoConfigurations.of(Epp4jAutoConfiguration.class))
      .withPropertyValues("epp4j.metrics.enabled=false");

  @BeforeEach
  void clear() {
    ClientResourcesProbe.SEEN.clear();
  }

  @Test
  void theApplicationsClientResourcesIsTheServiceOfTheDefaultRouterAndOfEveryPoolsRouter()
      throws Exception {
    Path file = Files.writeString(dir.resolve("probe.yaml"), CONFIG);
    ClientResources lettuce = DefaultClientResources.builder()
        .ioThreadPoolSize(1).computationThreadPoolSize(1).build();
    try {
      runner.withBean(ClientResources.class, () -> lettuce)
          .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.config-file=" + file,
              "epp4j.pools.a.endpoints=127.0.0.1:9011", "epp4j.pools.a.config-file=" + file,
              "epp4j.pools.b.endpoints=127.0.0.1:9021", "epp4j.pools.b.config-file=" + file)
          .run(ctx -> {
            assertThat(ctx).hasNotFailed();
            ctx.getBean(Epp4jPools.class); // the pools are built
            // before, no router was given it: each routing-redis plugin started its own threads
            assertThat(ClientResourcesProbe.SEEN).hasSize(3)
                .containsOnly(Optional.of(lettuce));
          });
    } finally {
      lettuce.shutdown(0, 1, TimeUnit.SECONDS).get(10, TimeUnit.SECONDS);
    }
  }

  @Test
  void withoutSuchABeanTheRoutersHaveNoneAndStartAsBefore() throws Exception {
    Path file = Files.writeString(dir.resolve("probe.yaml"), CONFIG);
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.config-file=" + file,
            "epp4j.pools.a.endpoints=127.0.0.1:9011", "epp4j.pools.a.config-file=" + file)
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          ctx.getBean(Epp4jPools.class);
          assertThat(ClientResourcesProbe.SEEN).hasSize(2).containsOnly(Optional.empty());
        });
  }
}
