package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Candidate;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.MetricsScraper;
import io.epp4j.core.Router;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.metrics.data.PointData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.util.TestPropertyValues;
import org.springframework.cloud.client.DefaultServiceInstance;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.discovery.DiscoveryClient;
import org.springframework.cloud.context.environment.EnvironmentChangeEvent;
import org.springframework.context.ConfigurableApplicationContext;

/** The {@code epp4j.pools.<name>.*} pools: building, checking, refreshing and closing them. */
class Epp4jPoolsTest {
  private static final byte[] BODY =
      "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8);

  private final ApplicationContextRunner runner = new ApplicationContextRunner()
      .withConfiguration(AutoConfigurations.of(Epp4jAutoConfiguration.class))
      .withPropertyValues("epp4j.metrics.enabled=false", "epp4j.endpoints=127.0.0.1:9000");

  @Test
  void eachPoolGetsItsOwnRouterWithItsEndpointsAndConfiguration() {
    runner.withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9001,127.0.0.1:9002",
            "epp4j.pools.llama.preset=epp4j",
            "epp4j.pools.qwen.endpoints=127.0.0.1:9011",
            "epp4j.pools.qwen.session-headers=x-user")
        .run(ctx -> {
          assertThat(ctx).hasNotFailed().hasSingleBean(Router.class)
              .hasSingleBean(Epp4jPools.class);
          Epp4jPools pools = ctx.getBean(Epp4jPools.class);
          assertThat(pools.names()).containsExactly("llama", "qwen");
          Router llama = pools.router("llama");
          Router qwen = pools.router("qwen");
          assertThat(ids(ctx.getBean(Router.class))).containsExactly("127.0.0.1:9000");
          assertThat(ids(llama)).containsExactlyInAnyOrder("127.0.0.1:9001", "127.0.0.1:9002");
          assertThat(ids(qwen)).containsExactly("127.0.0.1:9011");
          assertThat(llama.config().plugins()).containsKey("token-cost-picker");
          assertThat(qwen.config().plugins()).doesNotContainKey("token-cost-picker");
          assertThat(pools.scraper("llama")).isNull(); // epp4j.metrics.enabled=false inherited
          RoutingDecision d = qwen.route("/v1/completions", Map.of("x-user", "u1"), BODY);
          assertThat(d.isRouted()).isTrue();
          d.onComplete(Usage.NONE);
          assertThatThrownBy(() -> pools.router("mistral"))
              .hasMessageContaining("unknown pool 'mistral'")
              .hasMessageContaining("known pools: llama, qwen");
        });
  }

  @Test
  void withoutPoolsThereAreNone() {
    runner.run(ctx -> assertThat(ctx.getBean(Epp4jPools.class).names()).isEmpty());
  }

  @Test
  void misspelledPropertiesFailStartupNamingEachOne() {
    // epp4j.endpoint (for endpoints) was ignored: the pool started empty, every request a 503
    runner.withPropertyValues("epp4j.endpoint=127.0.0.1:9001",
            "epp4j.pools.llama.endpoint=127.0.0.1:9002", "epp4j.metrics.intreval=1s")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.endpoint")
            .hasStackTraceContaining("epp4j.pools.llama.endpoint")
            .hasStackTraceContaining("epp4j.metrics.intreval"));
    runner.withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9002",
            "epp4j.pools.llama.discovery.service=llama")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.pools.llama.discovery.service"));
  }

  @Test
  void aRefreshWithMisspelledPropertiesIsRefusedWholeNamingEachOne() {
    // a refresh bound without startup's check: epp4j.pools.llama.endpoint (for endpoints)
    // silently removed the pool, and a typo next to a valid change let the change through
    List<String> warnings = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.logging.Logger log =
        java.util.logging.Logger.getLogger(Epp4jRefresher.class.getName());
    java.util.logging.Handler capture = new java.util.logging.Handler() {
      @Override
      public void publish(java.util.logging.LogRecord r) {
        if (r.getLevel().intValue() >= java.util.logging.Level.WARNING.intValue()) {
          warnings.add(r.getMessage());
        }
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    Map<String, Object> source = new java.util.concurrent.ConcurrentHashMap<>();
    source.put("epp4j.pools.llama.endpoints", "127.0.0.1:9001");
    source.put("epp4j.pools.qwen.endpoints", "127.0.0.1:9011");
    log.addHandler(capture);
    try {
      runner.withInitializer(c -> c.getEnvironment().getPropertySources().addFirst(
              new org.springframework.core.env.MapPropertySource("runtime", source)))
          .run(ctx -> {
            assertThat(ctx).hasNotFailed();
            Epp4jPools pools = ctx.getBean(Epp4jPools.class);
            Router llama = pools.router("llama");
            Router qwen = pools.router("qwen");
            Router dflt = ctx.getBean(Router.class);

            // the pool's only key misspelled: the pool stays, with its endpoints
            source.remove("epp4j.pools.llama.endpoints");
            source.put("epp4j.pools.llama.endpoint", "127.0.0.1:9002");
            ctx.publishEvent(new EnvironmentChangeEvent(ctx,
                Set.of("epp4j.pools.llama.endpoints", "epp4j.pools.llama.endpoint")));
            assertThat(pools.names()).containsExactly("llama", "qwen");
            assertThat(pools.router("llama")).isSameAs(llama);
            assertThat(ids(llama)).containsExactly("127.0.0.1:9001");
            assertThat(warnings).singleElement().asString()
                .contains("epp4j.pools.llama.endpoint").contains("unknown");
            warnings.clear();

            // a typo next to valid changes of other pools and the default router: nothing of
            // the refresh is applied, and every unknown key is named
            source.put("epp4j.pools.qwen.endpoints", "127.0.0.1:9012");
            source.put("epp4j.endpoints", "127.0.0.1:9005");
            source.put("epp4j.metrics.intreval", "1s");
            ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of(
                "epp4j.pools.qwen.endpoints", "epp4j.endpoints", "epp4j.metrics.intreval")));
            assertThat(ids(qwen)).containsExactly("127.0.0.1:9011");
            assertThat(ids(dflt)).containsExactly("127.0.0.1:9000");
            assertThat(ids(llama)).containsExactly("127.0.0.1:9001");
            assertThat(warnings).singleElement().asString()
                .contains("epp4j.metrics.intreval").contains("epp4j.pools.llama.endpoint");
            warnings.clear();

            // once the keys are right, the next refresh applies all of it
            source.remove("epp4j.pools.llama.endpoint");
            source.remove("epp4j.metrics.intreval");
            source.put("epp4j.pools.llama.endpoints", "127.0.0.1:9002");
            ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of(
                "epp4j.pools.llama.endpoint", "epp4j.pools.llama.endpoints",
                "epp4j.metrics.intreval")));
            assertThat(ids(llama)).containsExactly("127.0.0.1:9002");
            assertThat(ids(qwen)).containsExactly("127.0.0.1:9012");
            assertThat(ids(dflt)).containsExactly("127.0.0.1:9005");
            assertThat(warnings).isEmpty();
          });
    } finally {
      log.removeHandler(capture);
    }
  }

  @Test
  void aRefreshThroughContextRefresherWithAMisspelledKeyLeavesThePropertiesBeanAsItWas()
      throws Exception {
    // Spring Cloud's ConfigurationPropertiesRebinder rebinds Epp4jProperties on every refresh,
    // with ignoreUnknownFields = false: a misspelled key made it throw out of the refresh (the
    // other beans were not rebound, /actuator/refresh answered 500), after it had bound part of
    // the new values into the bean
    List<String> warnings = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.logging.Logger log =
        java.util.logging.Logger.getLogger(Epp4jRefresher.class.getName());
    java.util.logging.Handler capture = new java.util.logging.Handler() {
      @Override
      public void publish(java.util.logging.LogRecord r) {
        if (r.getLevel().intValue() >= java.util.logging.Level.WARNING.intValue()) {
          warnings.add(r.getMessage());
        }
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    Epp4jWebSocketTest.Problems problems = new Epp4jWebSocketTest.Problems(); // logback, any logger
    ch.qos.logback.classic.Logger root = (ch.qos.logback.classic.Logger)
        org.slf4j.LoggerFactory.getLogger(org.slf4j.Logger.ROOT_LOGGER_NAME);
    // a file the refresh reads again, as /actuator/refresh does after it was edited
    java.nio.file.Path file = java.nio.file.Files.createTempFile("epp4j-refresh", ".properties");
    java.nio.file.Files.writeString(file, "epp4j.endpoints=127.0.0.1:9000\n"
        + "epp4j.pools.llama.endpoints=127.0.0.1:9001\nother.name=before\n");
    SpringApplicationBuilder app = new SpringApplicationBuilder(RefreshApp.class)
        .web(WebApplicationType.REACTIVE)
        .properties("server.port=0", "epp4j.metrics.enabled=false",
            "spring.config.import=file:" + file);
    log.addHandler(capture);
    try (ConfigurableApplicationContext ctx = app.run()) {
      problems.start();
      root.addAppender(problems);
      org.springframework.cloud.context.refresh.ContextRefresher refresher =
          ctx.getBean(org.springframework.cloud.context.refresh.ContextRefresher.class);
      Epp4jProperties properties = ctx.getBean(Epp4jProperties.class);
      OtherProperties other = ctx.getBean(OtherProperties.class);
      Router llama = ctx.getBean(Epp4jPools.class).router("llama");
      Router dflt = ctx.getBean(Router.class);
      assertThat(other.getName()).isEqualTo("before");

      // a typo next to a valid change: refused for epp4j as a whole, one warning naming it
      java.nio.file.Files.writeString(file, "epp4j.endpoints=127.0.0.1:9005\n"
          + "epp4j.pools.llama.endpoint=127.0.0.1:9002\nother.name=after\n");
      assertThat(refresher.refresh()).contains("epp4j.pools.llama.endpoint", "other.name");
      assertThat(ids(dflt)).containsExactly("127.0.0.1:9000");
      assertThat(ids(llama)).containsExactly("127.0.0.1:9001");
      assertThat(warnings).singleElement().asString().contains("epp4j.pools.llama.endpoint");
      // that warning, through any logging bridge, is all epp4j logs: no stack trace
      assertThat(problems.logged).filteredOn(p -> p.toLowerCase(java.util.Locale.ROOT)
          .contains("epp4j")).singleElement().asString()
          .startsWith("WARN " + Epp4jRefresher.class.getName()).doesNotContain("Exception");
      // the other beans are rebound; epp4j's keeps what the routers run
      assertThat(other.getName()).isEqualTo("after");
      assertThat(properties.getEndpoints()).containsExactly("127.0.0.1:9000");
      assertThat(properties.getPools()).containsOnlyKeys("llama");
      assertThat(properties.getPools().get("llama").getEndpoints())
          .containsExactly("127.0.0.1:9001");
      warnings.clear();
      problems.logged.clear();

      // corrected: the routers and the bean take the new values
      java.nio.file.Files.writeString(file, "epp4j.endpoints=127.0.0.1:9005\n"
          + "epp4j.pools.llama.endpoints=127.0.0.1:9002\nother.name=after\n");
      refresher.refresh();
      assertThat(ids(dflt)).containsExactly("127.0.0.1:9005");
      assertThat(ids(llama)).containsExactly("127.0.0.1:9002");
      assertThat(properties.getEndpoints()).containsExactly("127.0.0.1:9005");
      assertThat(properties.getPools().get("llama").getEndpoints())
          .containsExactly("127.0.0.1:9002");
      assertThat(ctx.getBean(Epp4jProperties.class)).isSameAs(properties);
      assertThat(warnings).isEmpty();
      assertThat(problems.logged).noneMatch(p -> p.toLowerCase(java.util.Locale.ROOT)
          .contains("epp4j"));
    } finally {
      log.removeHandler(capture);
      root.detachAppender(problems);
      problems.stop();
      java.nio.file.Files.deleteIfExists(file);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  @org.springframework.boot.context.properties.EnableConfigurationProperties(OtherProperties.class)
  static class RefreshApp {}

  /** Another application's properties, rebound by the same refresh. */
  @org.springframework.boot.context.properties.ConfigurationProperties("other")
  public static class OtherProperties {
    private String name = "";

    public String getName() {
      return name;
    }

    public void setName(String name) {
      this.name = name;
    }
  }

  @Test
  void sessionHeadersThatAreNoHttpHeaderNameFailStartupNamingTheProperty() {
    // such entries were accepted and never matched a request's header
    runner.withPropertyValues("epp4j.session-headers[0]=x-session-id",
            "epp4j.session-headers[1]= ")
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.session-headers: '' is not an HTTP header name"));
    runner.withPropertyValues("epp4j.session-headers=x session")
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.session-headers: 'x session' is not an HTTP header name"));
    runner.withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.session-headers=x-user,x-session:id")
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.pools.llama.session-headers: 'x-session:id' is not an HTTP header name"));
    // a pool inheriting it names the property the value came from
    runner.withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9001",
            "epp4j.session-headers=x-user,x(session)")
        .withBean(Router.class, () -> Router.builder().build())
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.session-headers: 'x(session)' is not an HTTP header name"));
    runner.withPropertyValues("epp4j.session-headers=X-Session-Id,x-user~1",
            "epp4j.pools.llama.endpoints=127.0.0.1:9001")
        .run(ctx -> assertThat(ctx).hasNotFailed());
  }

  @Test
  void sessionHeadersNamingNoHeaderFailStartupNamingTheProperty() {
    // an empty list (an unset environment variable behind the property, say) turned session
    // keys off without a word
    runner.withPropertyValues("epp4j.session-headers=")
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.session-headers names no header"));
    runner.withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.session-headers=")
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.pools.llama.session-headers names no header"));
  }

  @Test
  void relaxedFormsOfThePropertiesStillBind() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.maxBodySize=1MB",
            "epp4j.in_flight_max_age=1m", "epp4j.pools.llama.endpoints=127.0.0.1:9002",
            "epp4j.pools.llama.maxBodySize=2MB", "epp4j.pools.llama.session_headers=x-user")
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          Epp4jProperties p = ctx.getBean(Epp4jProperties.class);
          assertThat(p.getMaxBodySize().toBytes()).isEqualTo(1L << 20);
          assertThat(p.getPools().get("llama").getMaxBodySize().toBytes()).isEqualTo(2L << 20);
          assertThat(p.getPools().get("llama").getSessionHeaders()).containsExactly("x-user");
        });
    Map<String, Object> env = Map.of("EPP4J_ENDPOINTS", "127.0.0.1:9001",
        "EPP4J_MAXBODYSIZE", "3MB", "EPP4J_POOLS_LLAMA_ENDPOINTS", "127.0.0.1:9002",
        "EPP4J_POOLS_LLAMA_METRICS_ENABLED", "false");
    runner.withInitializer(c -> c.getEnvironment().getPropertySources().addFirst(
            new org.springframework.core.env.SystemEnvironmentPropertySource("test-"
                + org.springframework.core.env.StandardEnvironment
                    .SYSTEM_ENVIRONMENT_PROPERTY_SOURCE_NAME, env)))
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          Epp4jProperties p = ctx.getBean(Epp4jProperties.class);
          assertThat(p.getMaxBodySize().toBytes()).isEqualTo(3L << 20);
          assertThat(ctx.getBean(Epp4jPools.class).router("llama").endpoints()).hasSize(1);
        });
  }

  @Test
  void badPoolPropertiesFailStartupNamingTheProperty() {
    runner.withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9001",
            "epp4j.pools.x.endpoints=not-an-endpoint")
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.pools.x.endpoints: 'not-an-endpoint' is not host:port or host:port=role ("));
    runner.withPropertyValues("epp4j.pools.x.preset=nope").run(ctx -> assertThat(ctx)
        .getFailure().hasStackTraceContaining("epp4j.pools.x.preset: unknown preset 'nope'"));
    runner.withPropertyValues("epp4j.pools.x.scheme=ftp").run(ctx -> assertThat(ctx)
        .getFailure().hasStackTraceContaining("epp4j.pools.x.scheme must be http or https"));
    runner.withPropertyValues("epp4j.pools.x.max-body-size=0B").run(ctx -> assertThat(ctx)
        .getFailure().hasStackTraceContaining("epp4j.pools.x.max-body-size must be between"));
    runner.withPropertyValues("epp4j.pools.x.metrics.enabled=true",
            "epp4j.pools.x.metrics.interval=0s")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.pools.x.metrics.interval must be positive"));
    runner.withPropertyValues("epp4j.pools[a.b].endpoints=127.0.0.1:9001").run(ctx ->
        assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.pools[a.b]: a pool name is letters, digits, '-' and '_'"));
  }

  @Test
  void aBadTopLevelValueAPoolInheritsFailsStartupNamingTheTopLevelProperty() {
    // the pool's own property was named (epp4j.pools.llama.scheme), which is not set: with the
    // application's own Router bean the pools are checked before the top-level values
    String[][] cases = {
        {"epp4j.in-flight-max-age=-5s", "epp4j.in-flight-max-age must be positive"},
        {"epp4j.metrics.interval=0s", "epp4j.metrics.interval must be positive"},
        {"epp4j.scheme=ftp", "epp4j.scheme must be http or https"},
        {"epp4j.max-body-size=0B", "epp4j.max-body-size must be between"},
        {"epp4j.metrics.path=metrics", "epp4j.metrics.path must start with '/'"},
        {"epp4j.metrics.path=/a b", "epp4j.metrics.path is not valid in a URI"},
        {"epp4j.discovery.refresh-interval=-1s",
            "epp4j.discovery.refresh-interval must be positive"}};
    for (String[] c : cases) {
      ApplicationContextRunner inheriting = runner.withPropertyValues(c[0],
          "epp4j.pools.llama.endpoints=127.0.0.1:9001",
          "epp4j.pools.llama.discovery.service-id=llm");
      inheriting.withBean(Router.class, () -> Router.builder().build())
          .run(ctx -> assertThat(ctx).as(c[0]).getFailure().hasStackTraceContaining(c[1])
              .rootCause().message().doesNotContain("epp4j.pools."));
      inheriting.run(ctx -> assertThat(ctx).as(c[0]).getFailure().hasStackTraceContaining(c[1])
          .rootCause().message().doesNotContain("epp4j.pools."));
    }
    // a pool's own bad value is still named as the pool's
    runner.withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.discovery.service-id=llm",
            "epp4j.pools.llama.discovery.refresh-interval=0s")
        .withBean(Router.class, () -> Router.builder().build())
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.pools.llama.discovery.refresh-interval must be positive"));
  }

  @Test
  void unsetValuesComeFromTheTopLevelAndSetOnesWin() {
    Epp4jProperties top = new Epp4jProperties();
    top.setScheme("https");
    top.setSessionHeaders(List.of("x-top"));
    top.setInFlightMaxAge(java.time.Duration.ofMinutes(3));
    top.getMetrics().setPath("/top-metrics");
    top.getDiscovery().setRefreshInterval(java.time.Duration.ofSeconds(7));
    top.setConfigFile("/top.yaml");
    Epp4jProperties.Pool pool = new Epp4jProperties.Pool();
    pool.getMetrics().setInterval(java.time.Duration.ofSeconds(2));
    PoolSettings s = PoolSettings.of(top, "llama", pool);
    assertThat(s.scheme).isEqualTo("https");
    assertThat(s.sessionHeaders).containsExactly("x-top");
    assertThat(s.inFlightMaxAge).isEqualTo(java.time.Duration.ofMinutes(3));
    assertThat(s.metricsPath).isEqualTo("/top-metrics");
    assertThat(s.metricsInterval).isEqualTo(java.time.Duration.ofSeconds(2));
    assertThat(s.refreshInterval).isEqualTo(java.time.Duration.ofSeconds(7));
    assertThat(s.configFile).isNull(); // the pool's own, not inherited
    assertThat(s.property("endpoints")).isEqualTo("epp4j.pools.llama.endpoints");
  }

  @Test
  void anUnknownPoolInARouteFailsStartupNamingItAndTheKnownOnes() {
    SpringApplicationBuilder app = new SpringApplicationBuilder(GatewayApp.class)
        .web(WebApplicationType.REACTIVE)
        .properties("server.port=0", "epp4j.metrics.enabled=false",
            "epp4j.endpoints=127.0.0.1:9000",
            "epp4j.pools.llama.endpoints=127.0.0.1:9001",
            "epp4j.pools.qwen.endpoints=127.0.0.1:9002",
            "spring.cloud.gateway.server.webflux.routes[0].id=bad",
            "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
            "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/v1/**",
            "spring.cloud.gateway.server.webflux.routes[0].filters[0]=Epp4j=mistral");
    assertThatThrownBy(() -> {
      try (ConfigurableApplicationContext ctx = app.run()) {
        ctx.getBean(Router.class);
      }
    }).hasStackTraceContaining("unknown pool 'mistral'; known pools: llama, qwen");
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class GatewayApp {}

  @Test
  void aChangeUnderOnePoolIsAppliedToThatPoolOnlyAllOrNothing() {
    runner.withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9001",
            "epp4j.pools.qwen.endpoints=127.0.0.1:9011")
        .run(ctx -> {
          Epp4jPools pools = ctx.getBean(Epp4jPools.class);
          Router llama = pools.router("llama");
          Router qwen = pools.router("qwen");
          Router dflt = ctx.getBean(Router.class);
          Object qwenConfig = qwen.config();

          TestPropertyValues.of("epp4j.pools.llama.endpoints=127.0.0.1:9002",
              "epp4j.pools.llama.preset=epp4j").applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx,
              Set.of("epp4j.pools.llama.endpoints", "epp4j.pools.llama.preset")));
          assertThat(ids(llama)).containsExactly("127.0.0.1:9002");
          assertThat(llama.config().plugins()).containsKey("token-cost-picker");
          assertThat(ids(qwen)).containsExactly("127.0.0.1:9011");
          assertThat(qwen.config()).isSameAs(qwenConfig);
          assertThat(ids(dflt)).containsExactly("127.0.0.1:9000");

          // an unknown preset next to a valid new pool: nothing of qwen's change is applied
          TestPropertyValues.of("epp4j.pools.qwen.endpoints=127.0.0.1:9012",
              "epp4j.pools.qwen.preset=nope").applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx,
              Set.of("epp4j.pools.qwen.endpoints", "epp4j.pools.qwen.preset")));
          assertThat(ids(qwen)).containsExactly("127.0.0.1:9011");
          assertThat(qwen.config()).isSameAs(qwenConfig);

          // a pool added at runtime is built; the others are not touched
          TestPropertyValues.of("epp4j.pools.mistral.endpoints=127.0.0.1:9021").applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx,
              Set.of("epp4j.pools.mistral.endpoints")));
          assertThat(pools.names()).containsExactly("llama", "qwen", "mistral");
          assertThat(ids(pools.router("mistral"))).containsExactly("127.0.0.1:9021");
          assertThat(pools.router("llama")).isSameAs(llama);
          assertThat(ids(llama)).containsExactly("127.0.0.1:9002");
        });
  }

  @Test
  void aPoolNamedWithAnUnderscoreIsRefreshed() {
    // a pool name with '_' (which the README allows) is written in Spring's bracket notation,
    // which map keys with characters other than lower-case letters, digits and '-' need; a
    // refresh of such a key (epp4j.pools[my_pool].endpoints) was taken for a change of the
    // default router, and the pool kept its old endpoints
    runner.withPropertyValues("epp4j.pools[my_pool].endpoints=127.0.0.1:9001")
        .run(ctx -> {
          Epp4jPools pools = ctx.getBean(Epp4jPools.class);
          assertThat(pools.names()).containsExactly("my_pool");
          Router pool = pools.router("my_pool");

          TestPropertyValues.of("epp4j.pools[my_pool].endpoints=127.0.0.1:9002").applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx,
              Set.of("epp4j.pools[my_pool].endpoints")));
          assertThat(ids(pool)).containsExactly("127.0.0.1:9002");
          assertThat(ids(ctx.getBean(Router.class))).containsExactly("127.0.0.1:9000");
        });
  }

  @Test
  void poolsAddedAndRemovedAtRuntimeAreBuiltWithTheListenersAndClosed() {
    List<String> completed = new java.util.concurrent.CopyOnWriteArrayList<>();
    io.epp4j.api.RequestListener listener = new io.epp4j.api.RequestListener() {
      @Override
      public void onComplete(io.epp4j.api.InferenceRequest request,
          io.epp4j.api.Endpoint endpoint, Usage usage) {
        completed.add(endpoint.id());
      }
    };
    Map<String, Object> added = new java.util.concurrent.ConcurrentHashMap<>();
    runner.withBean(io.epp4j.api.RequestListener.class, () -> listener).run(ctx -> {
      // no pool at start: one can still be added
      Epp4jPools pools = ctx.getBean(Epp4jPools.class);
      assertThat(pools.names()).isEmpty();
      ctx.getEnvironment().getPropertySources().addFirst(
          new org.springframework.core.env.MapPropertySource("runtime", added));
      added.put("epp4j.pools.mistral.endpoints", "127.0.0.1:9021");
      added.put("epp4j.pools.mistral.preset", "epp4j");
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.copyOf(added.keySet())));
      Router mistral = pools.router("mistral");
      assertThat(ids(mistral)).containsExactly("127.0.0.1:9021");
      assertThat(mistral.config().plugins()).containsKey("token-cost-picker");
      mistral.route("/v1/completions", Map.of(), BODY).onComplete(Usage.NONE);
      assertThat(completed).as("the application's listeners hear the added pool")
          .containsExactly("127.0.0.1:9021");

      // a pool whose properties cannot build it is not added, and the others stay
      added.put("epp4j.pools.bad.endpoints", "not-an-endpoint");
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.pools.bad.endpoints")));
      assertThat(pools.names()).containsExactly("mistral");
      added.remove("epp4j.pools.bad.endpoints");

      // nor is one with nothing to route to (a preset, no endpoints, no service id) until a
      // later refresh gives it endpoints
      added.put("epp4j.pools.empty.preset", "epp4j");
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.pools.empty.preset")));
      assertThat(pools.names()).containsExactly("mistral");
      added.put("epp4j.pools.empty.endpoints", "127.0.0.1:9031");
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.pools.empty.endpoints")));
      assertThat(pools.names()).containsExactly("mistral", "empty");
      assertThat(ids(pools.router("empty"))).containsExactly("127.0.0.1:9031");
      assertThat(pools.remove("empty")).isTrue();
      added.remove("epp4j.pools.empty.preset");
      added.remove("epp4j.pools.empty.endpoints");

      // a pool whose properties are gone is removed and its router closed
      added.clear();
      ctx.publishEvent(new EnvironmentChangeEvent(ctx,
          Set.of("epp4j.pools.mistral.endpoints", "epp4j.pools.mistral.preset")));
      assertThat(pools.names()).isEmpty();
      assertThat(pools.find("mistral")).isNull();
      RoutingDecision late = mistral.route("/v1/completions", Map.of(), BODY);
      assertThat(late.rejection()).isNotNull();
      assertThat(late.rejection().message()).contains("closed");

      // and comes back when its properties do
      added.put("epp4j.pools.mistral.endpoints", "127.0.0.1:9022");
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.pools.mistral.endpoints")));
      assertThat(ids(pools.router("mistral"))).containsExactly("127.0.0.1:9022");
    });
  }

  @Test
  void addingToPoolsIsCheckedAndRefusedOnceClosed() {
    runner.withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9001").run(ctx -> {
      Epp4jPools pools = ctx.getBean(Epp4jPools.class);
      Epp4jProperties top = ctx.getBean(Epp4jProperties.class);
      Epp4jProperties.Pool llama = new Epp4jProperties.Pool();
      llama.setEndpoints(List.of("127.0.0.1:9005"));
      assertThatThrownBy(() -> pools.add(PoolSettings.of(top, "llama", llama)))
          .hasMessageContaining("pool 'llama' exists already");
      Epp4jProperties.Pool bad = new Epp4jProperties.Pool();
      bad.setEndpoints(List.of("no-port"));
      assertThatThrownBy(() -> pools.add(PoolSettings.of(top, "x", bad)))
          .hasMessageContaining("epp4j.pools.x.endpoints");
      Epp4jProperties.Pool empty = new Epp4jProperties.Pool();
      empty.setPreset("epp4j");
      assertThatThrownBy(() -> pools.add(PoolSettings.of(top, "x", empty)))
          .hasMessageContaining("epp4j.pools.x has nothing to route to");
      assertThat(pools.names()).containsExactly("llama");
      assertThat(pools.remove("nope")).isFalse();
      pools.close();
      Epp4jProperties.Pool later = new Epp4jProperties.Pool();
      later.setEndpoints(List.of("127.0.0.1:9006"));
      assertThatThrownBy(() -> pools.add(PoolSettings.of(top, "later", later)))
          .isInstanceOf(IllegalStateException.class).hasMessageContaining("closed");
      assertThatThrownBy(() -> Epp4jPools.none().add(PoolSettings.of(top, "later", later)))
          .isInstanceOf(IllegalStateException.class);
    });
  }

  @Test
  void aDiscoveredPoolFollowsItsServiceAndKeepsItWhenItsPresetChanges() {
    List<ServiceInstance> instances = new java.util.concurrent.CopyOnWriteArrayList<>(List.of(
        new DefaultServiceInstance("q1", "qwen-svc", "10.0.1.1", 8000, false)));
    runner.withBean(DiscoveryClient.class, () -> registry("qwen-svc", instances))
        .withPropertyValues("epp4j.pools.qwen.discovery.service-id=qwen-svc",
            "epp4j.pools.qwen.discovery.refresh-interval=20ms",
            "epp4j.pools.llama.endpoints=127.0.0.1:9001")
        .run(ctx -> {
          Epp4jPools pools = ctx.getBean(Epp4jPools.class);
          assertThat(pools.discovery("qwen")).isNotNull();
          assertThat(pools.discovery("llama")).isNull();
          assertThat(ctx).doesNotHaveBean(Epp4jDiscoveryPool.class); // the default has none
          Router qwen = pools.router("qwen");
          awaitPool(qwen, Set.of("10.0.1.1:8000"));
          instances.add(new DefaultServiceInstance("q2", "qwen-svc", "10.0.1.2", 8000, false));
          awaitPool(qwen, Set.of("10.0.1.1:8000", "10.0.1.2:8000"));

          TestPropertyValues.of("epp4j.pools.qwen.preset=epp4j").applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.pools.qwen.preset")));
          assertThat(qwen.config().plugins()).containsKey("token-cost-picker");
          assertThat(ids(qwen)).containsExactlyInAnyOrder("10.0.1.1:8000", "10.0.1.2:8000");
          assertThat(ids(pools.router("llama"))).containsExactly("127.0.0.1:9001");
        });
  }

  @Test
  void closingTheContextClosesEveryPoolsRouterScraperAndDiscoveryThread() throws Exception {
    Set<Thread> before = Thread.getAllStackTraces().keySet();
    List<ServiceInstance> instances = List.of(
        new DefaultServiceInstance("q1", "qwen-svc", "127.0.0.1", 9011, false));
    Router[] routers = new Router[2];
    Set<Thread> ours = new HashSet<>();
    runner.withBean(DiscoveryClient.class, () -> registry("qwen-svc", instances))
        .withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.metrics.enabled=true", "epp4j.pools.llama.metrics.interval=1h",
            "epp4j.pools.qwen.discovery.service-id=qwen-svc",
            "epp4j.pools.qwen.discovery.refresh-interval=20ms",
            "epp4j.pools.qwen.metrics.enabled=true", "epp4j.pools.qwen.metrics.interval=1h")
        .run(ctx -> {
          Epp4jPools pools = ctx.getBean(Epp4jPools.class);
          assertThat(pools.scraper("llama")).isNotNull();
          assertThat(pools.scraper("qwen")).isNotNull();
          assertThat(ctx).doesNotHaveBean(MetricsScraper.class); // top-level metrics are off
          routers[0] = pools.router("llama");
          routers[1] = pools.router("qwen");
          awaitPool(routers[1], Set.of("127.0.0.1:9011"));
          for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (!before.contains(t) && (t.getName().equals("epp4j-discovery-qwen")
                || t.getName().equals("epp4j-metrics-scraper"))) {
              ours.add(t);
            }
          }
          assertThat(ours).extracting(Thread::getName).contains("epp4j-discovery-qwen",
              "epp4j-metrics-scraper");
          assertThat(ours.stream().filter(t -> t.getName().equals("epp4j-metrics-scraper")))
              .hasSize(2);
        });
    for (Router r : routers) {
      RoutingDecision d = r.route("/v1/completions", Map.of(), BODY);
      assertThat(d.rejection()).isNotNull();
      assertThat(d.rejection().message()).contains("closed");
    }
    for (Thread t : ours) {
      t.join(TimeUnit.SECONDS.toMillis(10));
      assertThat(t.isAlive()).as(t.getName() + " still runs").isFalse();
    }
  }

  @Test
  void aPoolThatFailsToBuildClosesThePoolsBuiltBeforeIt() throws Exception {
    Set<Thread> before = Thread.getAllStackTraces().keySet();
    // pool a's router announces its endpoint to the application's PoolListener beans once it is
    // built: proof that a was built (and its scraper started) before b failed
    Set<String> announced = java.util.concurrent.ConcurrentHashMap.newKeySet();
    io.epp4j.api.PoolListener heard = new io.epp4j.api.PoolListener() {
      @Override
      public void onEndpointAdded(io.epp4j.api.Endpoint endpoint) {
        announced.add(endpoint.id());
      }
    };
    runner.withBean(io.epp4j.api.PoolListener.class, () -> heard)
        .withPropertyValues("epp4j.pools.a.endpoints=127.0.0.1:9001",
            "epp4j.pools.a.metrics.enabled=true", "epp4j.pools.a.metrics.interval=1h",
            "epp4j.pools.b.endpoints=127.0.0.1:9002",
            "epp4j.pools.b.config-file=/does/not/exist.yaml")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.pools.b.config-file: "));
    assertThat(announced).as("pool a built before pool b failed").contains("127.0.0.1:9001");
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (Thread.getAllStackTraces().keySet().stream().anyMatch(
        t -> !before.contains(t) && t.getName().equals("epp4j-metrics-scraper") && t.isAlive())) {
      assertThat(System.nanoTime()).as("pool a's scraper still runs").isLessThan(deadline);
      Thread.sleep(10);
    }
  }

  @Test
  void eachPoolsRouterMetricsCarryThePoolAttribute() {
    InMemoryMetricReader reader = InMemoryMetricReader.create();
    OpenTelemetrySdk otel = OpenTelemetrySdk.builder()
        .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(reader).build())
        .build();
    runner.withBean(io.opentelemetry.api.OpenTelemetry.class, () -> otel)
        .withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9001,127.0.0.1:9002",
            "epp4j.pools.qwen.endpoints=127.0.0.1:9011")
        .run(ctx -> {
          Epp4jPools pools = ctx.getBean(Epp4jPools.class);
          pools.router("llama").route("/v1/completions", Map.of(), BODY).onComplete(Usage.NONE);
          pools.router("llama").route("/v1/completions", Map.of(), BODY).onComplete(Usage.NONE);
          pools.router("qwen").route("/v1/completions", Map.of(), BODY).onComplete(Usage.NONE);
          ctx.getBean(Router.class).route("/v1/completions", Map.of(), BODY)
              .onComplete(Usage.NONE);
          Collection<MetricData> metrics = reader.collectAllMetrics();
          Map<String, Long> endpointsByPool = new HashMap<>();
          Map<String, Long> decisionsByPool = new HashMap<>();
          for (MetricData m : metrics) {
            if (m.getName().equals("epp4j.pool.endpoints")) {
              m.getLongGaugeData().getPoints().forEach(p ->
                  endpointsByPool.put(pool(p), p.getValue()));
            }
            if (m.getName().equals("epp4j.routing.decisions")) {
              m.getLongSumData().getPoints().forEach(p ->
                  decisionsByPool.merge(pool(p), p.getValue(), Long::sum));
            }
          }
          assertThat(endpointsByPool).containsEntry("llama", 2L).containsEntry("qwen", 1L)
              .containsEntry("(default)", 1L);
          assertThat(decisionsByPool).containsEntry("llama", 2L).containsEntry("qwen", 1L)
              .containsEntry("(default)", 1L);
        });
    otel.close();
  }

  private static String pool(PointData p) {
    String pool = p.getAttributes().get(AttributeKey.stringKey("pool"));
    return pool == null ? "(default)" : pool;
  }

  private static DiscoveryClient registry(String service, List<ServiceInstance> instances) {
    return new DiscoveryClient() {
      @Override
      public String description() {
        return "test registry";
      }

      @Override
      public List<ServiceInstance> getInstances(String id) {
        return id.equals(service) ? instances : List.of();
      }

      @Override
      public List<String> getServices() {
        return List.of(service);
      }
    };
  }

  private static void awaitPool(Router router, Set<String> ids) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!ids(router).equals(ids)) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("pool is " + ids(router) + ", expected " + ids);
      }
      Thread.sleep(5);
    }
  }

  private static Set<String> ids(Router router) {
    Set<String> ids = new HashSet<>();
    for (Candidate c : router.endpoints()) {
      ids.add(c.id());
    }
    return ids;
  }
}
