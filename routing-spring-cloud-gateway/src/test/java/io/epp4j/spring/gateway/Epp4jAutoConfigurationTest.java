package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.MetricsScraper;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.context.annotation.ImportCandidates;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.util.TestPropertyValues;
import org.springframework.cloud.client.DefaultServiceInstance;
import org.springframework.cloud.client.discovery.DiscoveryClient;
import org.springframework.cloud.context.environment.EnvironmentChangeEvent;

class Epp4jAutoConfigurationTest {
  private final ApplicationContextRunner runner = new ApplicationContextRunner()
      .withConfiguration(AutoConfigurations.of(Epp4jAutoConfiguration.class))
      .withPropertyValues("epp4j.metrics.interval=1h");

  @Test
  void isRegisteredAsAnAutoConfiguration() {
    assertThat(ImportCandidates.load(AutoConfiguration.class, getClass().getClassLoader())
        .getCandidates()).contains(Epp4jAutoConfiguration.class.getName());
  }

  @Test
  void buildsTheRouterScraperAndFilterFromTheProperties() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001, 127.0.0.1:9002",
            "epp4j.preset=epp4j", "epp4j.session-headers=x-user")
        .run(ctx -> {
          assertThat(ctx).hasNotFailed().hasSingleBean(Router.class)
              .hasSingleBean(MetricsScraper.class)
              .hasSingleBean(Epp4jGatewayFilterFactory.class)
              .hasSingleBean(Epp4jResponseTapFilter.class);
          Router router = ctx.getBean(Router.class);
          assertThat(router.endpoints()).extracting(Candidate::id)
              .containsExactlyInAnyOrder("127.0.0.1:9001", "127.0.0.1:9002");
          RoutingDecision d = router.route("/v1/completions", Map.of("x-user", "u1"),
              "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8));
          assertThat(d.isRouted()).isTrue();
          d.onComplete(Usage.NONE);
        });
  }

  @Test
  void theScraperIsOffWhenMetricsAreDisabled() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.enabled=false")
        .run(ctx -> assertThat(ctx).hasSingleBean(Router.class)
            .doesNotHaveBean(MetricsScraper.class));
  }

  @Test
  void theScraperIsOffForEveryFalseValueThePropertyBindsAs() {
    // an environment variable or a .properties file keeps these as they are written; the
    // property binds each of them as false
    for (String off : List.of("off", "no", "0", "False")) {
      runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.enabled=" + off)
          .run(ctx -> {
            assertThat(ctx.getBean(Epp4jProperties.class).getMetrics().isEnabled()).isFalse();
            assertThat(ctx).as("epp4j.metrics.enabled=" + off).hasSingleBean(Router.class)
                .doesNotHaveBean(MetricsScraper.class);
          });
    }
  }

  @Test
  void aRouterOfTheApplicationReplacesOursAndIsUsedByTheFilter() {
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    runner.withBean(Router.class, () -> own)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001")
        .run(ctx -> {
          assertThat(ctx.getBean(Router.class)).isSameAs(own);
          assertThat(own.endpoints()).extracting(Candidate::id).containsExactly("10.0.0.9:8000");
        });
    own.close();
  }

  @Test
  void propertiesThatOnlyBuildOurRouterAreAWarningBesideTheApplicationsOwn() {
    // the application's Router bean takes none of them; before, they were ignored silently
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    List<String> set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(Router.class, () -> own)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.preset=epp4j",
            "epp4j.session-headers=x-user")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString().contains("own Router bean", "epp4j.endpoints",
        "epp4j.preset", "epp4j.session-headers").doesNotContain("in-flight-max-age");
    List<String> none = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(Router.class, () -> own).run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(none).as("nothing set").isEmpty();
    List<String> ours = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.preset=epp4j")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(ours).as("our router took them").isEmpty();
    own.close();
  }

  @Test
  void aBodyLimitAboveTheApplicationRoutersParserFailsStartupNamingBoth() {
    // the filter would let a 20 MB body through and the router (16 MiB parser) answer it 400
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    runner.withBean(Router.class, () -> own)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.max-body-size=32MB")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.max-body-size (33554432 bytes) is above the request"
                + " parser limit of the application's Router bean (16777216 bytes)"));
    Router raised = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000))
        .requestParser(io.epp4j.core.OpenAiRequestParser.of(32 << 20, List.of())).build();
    runner.withBean(Router.class, () -> raised)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.max-body-size=32MB")
        .run(ctx -> assertThat(ctx).hasNotFailed().hasSingleBean(Epp4jGatewayFilterFactory.class));
    own.close();
    raised.close();
  }

  @Test
  void theRouterIsClosedWithTheContext() {
    Router[] seen = new Router[1];
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001")
        .run(ctx -> seen[0] = ctx.getBean(Router.class));
    RoutingDecision d = seen[0].route("/v1/completions", Map.of(),
        "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8));
    assertThat(d.rejection()).isNotNull();
    assertThat(d.rejection().message()).contains("closed");
  }

  @Test
  void badPropertiesFailStartupNamingTheProperty() {
    runner.withPropertyValues("epp4j.preset=nope").run(ctx -> assertThat(ctx).getFailure()
        .hasStackTraceContaining("epp4j.preset: unknown preset"));
    runner.withPropertyValues("epp4j.endpoints=not-an-endpoint").run(ctx ->
        assertThat(ctx).getFailure().hasStackTraceContaining("epp4j.endpoints: 'not-an-endpoint'"));
  }

  @Test
  void aConfigFileThatCannotBeReadOrIsInvalidFailsStartupNamingTheProperty(
      @org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
    // the router's error named the file but not the property that pointed to it
    java.nio.file.Path invalid = dir.resolve("invalid.yaml");
    java.nio.file.Files.writeString(invalid, "plugins: [ {type: no-such-plugin, name: x} ]\n");
    for (String file : List.of(dir.resolve("missing.yaml").toString(), invalid.toString())) {
      runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.config-file=" + file)
          .run(ctx -> assertThat(ctx).getFailure()
              .hasStackTraceContaining("epp4j.config-file: ")
              .hasStackTraceContaining(file));
    }
  }

  @Test
  void aConfigFileThatCannotBeReadOrIsInvalidFailsStartupBesideTheApplicationsOwnRouter(
      @org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
    // the application's router does not take the file at startup, but a refresh applies it to
    // that router: a broken one started with only the "not applied" warning
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    java.nio.file.Path invalid = dir.resolve("invalid.yaml");
    java.nio.file.Files.writeString(invalid, "plugins: [ {type: no-such-plugin, name: x} ]\n");
    for (String file : List.of(dir.resolve("missing.yaml").toString(), invalid.toString())) {
      for (String metrics : List.of("true", "false")) {
        runner.withBean(Router.class, () -> own)
            .withPropertyValues("epp4j.metrics.enabled=" + metrics, "epp4j.config-file=" + file)
            .run(ctx -> assertThat(ctx).as(file + ", metrics " + metrics).getFailure()
                .hasStackTraceContaining(Epp4jConfigurationException.class.getName()
                    + ": epp4j.config-file: ")
                .hasStackTraceContaining(file)
                .hasStackTraceContaining("application's own Router bean"));
      }
    }
    java.nio.file.Path valid = dir.resolve("epp.yaml");
    java.nio.file.Files.writeString(valid, io.epp4j.scorers.Epp4jPreset.yaml());
    List<String> warnings = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(Router.class, () -> own)
        .withPropertyValues("epp4j.config-file=" + valid)
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          assertThat(ctx.getBean(Router.class)).isSameAs(own);
        }));
    assertThat(warnings).singleElement().asString().contains("own Router bean",
        "epp4j.config-file");
    own.close();
  }

  @Test
  void aPresetBesideAConfigFileFailsStartupNamingBoth(
      @org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
    java.nio.file.Path file = dir.resolve("epp.yaml");
    java.nio.file.Files.writeString(file, io.epp4j.scorers.Epp4jPreset.yaml());
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.config-file=" + file,
            "epp4j.preset=epp4j")
        .run(ctx -> assertThat(ctx).getFailure()
            .rootCause().isInstanceOf(Epp4jConfigurationException.class)
            .hasMessageContaining("epp4j.config-file and epp4j.preset are both set"));
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.pools.a.endpoints=127.0.0.1:9002",
            "epp4j.pools.a.config-file=" + file, "epp4j.pools.a.preset=epp4j")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.pools.a.config-file and epp4j.pools.a.preset"));
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.config-file=" + file)
        .run(ctx -> assertThat(ctx).hasNotFailed().hasSingleBean(Router.class));
  }

  @Test
  void theRefreshIntervalIsCheckedWithoutAServiceId() {
    // it was checked only beside a service id: a zero or negative one started, with at most the
    // warning that nothing uses it, and failed only once a service id was added
    for (String bad : List.of("0s", "-1s")) {
      runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
              "epp4j.discovery.refresh-interval=" + bad)
          .run(ctx -> assertThat(ctx).as(bad).getFailure().rootCause()
              .isInstanceOf(Epp4jConfigurationException.class)
              .hasMessage("epp4j.discovery.refresh-interval must be positive, got "
                  + java.time.Duration.parse("PT" + bad.toUpperCase())));
      Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
      runner.withBean(Router.class, () -> own)
          .withPropertyValues("epp4j.discovery.refresh-interval=" + bad)
          .run(ctx -> assertThat(ctx).as(bad + ", own router").getFailure()
              .hasStackTraceContaining("epp4j.discovery.refresh-interval must be positive"));
      own.close();
      runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
              "epp4j.pools.llama.endpoints=127.0.0.1:9011",
              "epp4j.pools.llama.discovery.refresh-interval=" + bad)
          .run(ctx -> assertThat(ctx).as(bad + ", pool").getFailure().hasStackTraceContaining(
              "epp4j.pools.llama.discovery.refresh-interval must be positive"));
    }
  }

  @Test
  void metricsSettingsAreCheckedWithScrapingOff() {
    runner.withPropertyValues("epp4j.metrics.enabled=false", "epp4j.metrics.interval=0s")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.metrics.interval must be positive"));
    runner.withPropertyValues("epp4j.metrics.enabled=false", "epp4j.metrics.path=metrics")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.metrics.path must start with '/'"));
  }

  @Test
  void settingsAreCheckedBesideTheApplicationsOwnRouterWithScrapingOff() {
    // neither our router nor our scraper is built then, and both checks were skipped: a bad
    // value started silently and failed only once scraping was switched on
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    for (String[] bad : List.of(
        new String[] {"epp4j.metrics.path=metrics", "epp4j.metrics.path must start with '/'"},
        new String[] {"epp4j.metrics.interval=0s", "epp4j.metrics.interval must be positive"},
        new String[] {"epp4j.in-flight-max-age=0s", "epp4j.in-flight-max-age must be positive"},
        new String[] {"epp4j.preset=nope", "epp4j.preset: unknown preset"},
        new String[] {"epp4j.endpoints=not-an-endpoint", "epp4j.endpoints: 'not-an-endpoint'"})) {
      runner.withBean(Router.class, () -> own)
          .withPropertyValues("epp4j.metrics.enabled=false", bad[0])
          .run(ctx -> assertThat(ctx).as(bad[0]).getFailure()
              .hasStackTraceContaining(bad[1]));
    }
    runner.withBean(Router.class, () -> own)
        .withPropertyValues("epp4j.metrics.enabled=false", "epp4j.metrics.path=/metrics")
        .run(ctx -> assertThat(ctx).hasNotFailed().doesNotHaveBean(MetricsScraper.class));
    own.close();
  }

  @Test
  void metricsSettingsThatNoScraperUsesAreAWarningNamingThem() {
    // scraping off: the interval and path were checked, then ignored without a word
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    List<String> set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(Router.class, () -> own)
        .withPropertyValues("epp4j.metrics.enabled=false", "epp4j.metrics.interval=1s",
            "epp4j.metrics.path=/stats")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString().contains("epp4j.metrics.interval",
        "epp4j.metrics.path", "no scraper uses them");
    // our router, and a named pool that does not scrape with its own interval
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.enabled=false",
            "epp4j.metrics.interval=1s", "epp4j.pools.llama.endpoints=127.0.0.1:9011",
            "epp4j.pools.llama.metrics.interval=2s")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString().contains("epp4j.metrics.interval",
        "epp4j.pools.llama.metrics.interval").doesNotContain("metrics.path");
    // a named pool that scrapes inherits the top-level values: they are used
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.enabled=false",
            "epp4j.metrics.interval=1s", "epp4j.metrics.path=/stats",
            "epp4j.pools.llama.endpoints=127.0.0.1:9011",
            "epp4j.pools.llama.metrics.enabled=true")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).noneMatch(w -> w.contains("no scraper uses them"));
    // insecure-skip-verify, top-level and a non-scraping pool's own, is named like the path
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.enabled=false",
            "epp4j.metrics.insecure-skip-verify=true",
            "epp4j.pools.llama.endpoints=127.0.0.1:9011",
            "epp4j.pools.llama.metrics.insecure-skip-verify=false")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString().contains("epp4j.metrics.insecure-skip-verify",
        "epp4j.pools.llama.metrics.insecure-skip-verify", "no scraper uses them");
    // inherited by a pool that scrapes, it is used
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.enabled=false",
            "epp4j.metrics.insecure-skip-verify=true",
            "epp4j.pools.llama.endpoints=127.0.0.1:9011",
            "epp4j.pools.llama.metrics.enabled=true")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).noneMatch(w -> w.contains("no scraper uses them"));
    // scraping on: nothing to say
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.interval=1s")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).isEmpty();
    own.close();
  }

  /**
   * Every bean of the auto-configuration yields to the application's own, and the property
   * checks ran in our filter factory's bean method: an application's own factory skipped them
   * all, and a property that built a bean the application replaced was ignored without a word.
   */
  @Test
  void theApplicationsOwnFilterFactoryKeepsThePropertyChecks() {
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    Epp4jGatewayFilterFactory factory = new Epp4jGatewayFilterFactory(own, "http", 1 << 20);
    ApplicationContextRunner withOwn = runner.withBean(Router.class, () -> own)
        .withBean(Epp4jGatewayFilterFactory.class, () -> factory);
    withOwn.withPropertyValues("epp4j.metrics.enabled=false", "epp4j.metrics.path=metrics")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.metrics.path must start with '/'"));
    List<String> set = warningsOf(Epp4jAutoConfiguration.class, () -> withOwn
        .withPropertyValues("epp4j.metrics.enabled=false", "epp4j.endpoints=127.0.0.1:9001",
            "epp4j.scheme=https", "epp4j.max-body-size=2MB")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).hasSize(3)
        .anySatisfy(w -> assertThat(w).contains("epp4j.metrics.interval", "no scraper uses"))
        .anySatisfy(w -> assertThat(w).contains("own Router bean", "epp4j.endpoints"))
        .anySatisfy(w -> assertThat(w).contains("own Epp4jGatewayFilterFactory bean",
            "epp4j.scheme (https; it routes with http)",
            "epp4j.max-body-size (2097152 bytes; it limits bodies to 1048576 bytes)"));
    // values the factory was built with are no warning
    set = warningsOf(Epp4jAutoConfiguration.class, () -> withOwn
        .withPropertyValues("epp4j.scheme=http", "epp4j.max-body-size=1MB")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).isEmpty();
    own.close();
  }

  @Test
  void namedPoolsTheApplicationsOwnFilterFactoryCannotSelectAreAWarning() {
    // the pools were built and scraped, but the factory, made without the Epp4jPools bean,
    // refused every Epp4j=<name> route with "known pools: none (define them under ...)"
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    Epp4jGatewayFilterFactory withoutPools =
        new Epp4jGatewayFilterFactory(own, "http", 16 << 20);
    List<String> set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(Router.class, () -> own)
        .withBean(Epp4jGatewayFilterFactory.class, () -> withoutPools)
        .withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9011",
            "epp4j.pools[my_pool].endpoints=127.0.0.1:9012")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString().contains("own Epp4jGatewayFilterFactory bean",
        "epp4j.pools.llama", "epp4j.pools[my_pool]", "Epp4jPools bean");
    // a factory given the pools selects them: nothing to say
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(Router.class, () -> own)
        .withUserConfiguration(OwnFactoryWithPools.class)
        .withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9011")
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          assertThat(ctx.getBean(Epp4jGatewayFilterFactory.class).filter("llama")).isNotNull();
        }));
    assertThat(set).isEmpty();
    own.close();
  }

  @Test
  void aRouteNamingAPoolTheApplicationsOwnFilterFactoryWasNotGivenSaysSo() {
    // it was refused with "known pools: none (define them under epp4j.pools.<name>.*)", though
    // the pools are defined
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    Epp4jGatewayFilterFactory withoutPools =
        new Epp4jGatewayFilterFactory(own, "http", 16 << 20);
    runner.withBean(Router.class, () -> own)
        .withBean(Epp4jGatewayFilterFactory.class, () -> withoutPools)
        .withPropertyValues("epp4j.pools.llama.endpoints=127.0.0.1:9011",
            "epp4j.pools[my_pool].endpoints=127.0.0.1:9012")
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          Epp4jGatewayFilterFactory f = ctx.getBean(Epp4jGatewayFilterFactory.class);
          assertThatThrownBy(() -> f.filter("llama"))
              .isInstanceOf(Epp4jConfigurationException.class)
              .hasMessageContaining("pool 'llama': it is defined")
              .hasMessageContaining("built without the named pools")
              .hasMessageContaining("new Epp4jGatewayFilterFactory(router, scheme, maxBodyBytes,"
                  + " pools)")
              .hasMessageNotContaining("define them");
          assertThatThrownBy(() -> f.filter("mistral"))
              .hasMessageContaining("pool 'mistral': no such pool; defined are epp4j.pools.llama,"
                  + " epp4j.pools[my_pool]")
              .hasMessageContaining("built without the named pools");
        });
    // without epp4j.pools.*, such a factory still says that none are defined
    Epp4jGatewayFilterFactory alone = new Epp4jGatewayFilterFactory(own, "http", 16 << 20);
    runner.withBean(Router.class, () -> own)
        .withBean(Epp4jGatewayFilterFactory.class, () -> alone)
        .run(ctx -> assertThatThrownBy(() -> alone.filter("llama"))
            .hasMessageContaining("known pools: none (define them under epp4j.pools.<name>.*)"));
    own.close();
  }

  @org.springframework.context.annotation.Configuration(proxyBeanMethods = false)
  static class OwnFactoryWithPools {
    @org.springframework.context.annotation.Bean
    Epp4jGatewayFilterFactory ownFactory(Router router, Epp4jPools pools) {
      return new Epp4jGatewayFilterFactory(router, "http", 16 << 20, pools);
    }
  }

  @Test
  void metricsSettingsTheApplicationsOwnScraperDoesNotTakeAreAWarning() {
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    MetricsScraper scraper = MetricsScraper.builder(own)
        .interval(java.time.Duration.ofHours(1)).start();
    List<String> set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(MetricsScraper.class, () -> scraper)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.path=/stats",
            "epp4j.metrics.insecure-skip-verify=true")
        .run(ctx -> assertThat(ctx).hasNotFailed().getBean(MetricsScraper.class)
            .isSameAs(scraper)));
    assertThat(set).singleElement().asString().contains("own MetricsScraper bean",
        "epp4j.metrics.interval", "epp4j.metrics.path", "epp4j.metrics.insecure-skip-verify");
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(MetricsScraper.class, () -> scraper)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.enabled=false")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString().contains("own MetricsScraper bean",
        "epp4j.metrics.enabled", "epp4j.metrics.interval");
    // a named pool that scrapes inherits the interval: it is used
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(MetricsScraper.class, () -> scraper)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.endpoints=127.0.0.1:9011")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).isEmpty();
    scraper.close();
    own.close();
  }

  @Test
  void theSchemeIsNoSchemeOfTheApplicationsOwnScraperAndTheWarningSaysSo() {
    // set, epp4j.scheme is the scheme of our scraper's scrapes; the application's scraper scrapes
    // with its own, and only the metrics properties were named
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    MetricsScraper scraper = MetricsScraper.builder(own)
        .interval(java.time.Duration.ofHours(1)).start();
    List<String> set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(MetricsScraper.class, () -> scraper)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.scheme=https")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString().contains("own MetricsScraper bean",
        "epp4j.scheme (as the scheme of the scrapes");
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(MetricsScraper.class, () -> scraper)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString().doesNotContain("epp4j.scheme");
    scraper.close();
    own.close();
  }

  @Test
  void discoverySettingsTheApplicationsOwnDiscoveryPoolDoesNotTakeAreAWarning() {
    DiscoveryClient registry = registry(List.of());
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    Epp4jDiscoveryPool pool = new Epp4jDiscoveryPool(own, registry, "llm",
        java.time.Duration.ofHours(1));
    List<String> set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(Router.class, () -> own)
        .withBean(DiscoveryClient.class, () -> registry)
        .withBean(Epp4jDiscoveryPool.class, () -> pool)
        .withPropertyValues("epp4j.discovery.service-id=qwen",
            "epp4j.discovery.refresh-interval=1s")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString().contains("own Epp4jDiscoveryPool bean",
        "epp4j.discovery.service-id (qwen; it looks up llm)",
        "epp4j.discovery.refresh-interval (PT1S; it looks up every PT1H)");
    // without a DiscoveryClient, beside the application's own Router too
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(Router.class, () -> own)
        .withPropertyValues("epp4j.discovery.service-id=llm")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString()
        .contains("epp4j.discovery.service-id", "no DiscoveryClient");
    pool.close();
    own.close();
  }

  @Test
  void aRefreshIntervalThatNoDiscoveryUsesIsAWarningNamingIt() {
    // no service id where it applies: no lookups run with it, and it was ignored without a word
    List<String> set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.discovery.refresh-interval=1s",
            "epp4j.pools.llama.endpoints=127.0.0.1:9011",
            "epp4j.pools.llama.discovery.refresh-interval=2s",
            "epp4j.pools[my_pool].endpoints=127.0.0.1:9012")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString().contains("epp4j.discovery.refresh-interval,"
        + " epp4j.pools.llama.discovery.refresh-interval set", "no discovery.service-id");
    // a named pool with a service id that leaves its own unset inherits the top-level one
    DiscoveryClient registry = registry(List.of());
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(DiscoveryClient.class, () -> registry)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.discovery.refresh-interval=1s",
            "epp4j.pools.llama.discovery.service-id=llm",
            "epp4j.pools.qwen.endpoints=127.0.0.1:9012",
            "epp4j.pools.qwen.discovery.refresh-interval=2s")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString()
        .contains("epp4j.pools.qwen.discovery.refresh-interval set")
        .doesNotContain("epp4j.discovery.refresh-interval,");
    // the default pool discovers with it, and a named pool's own beside its service id: used
    set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(DiscoveryClient.class, () -> registry)
        .withPropertyValues("epp4j.discovery.service-id=llm",
            "epp4j.discovery.refresh-interval=1s",
            "epp4j.pools.llama.discovery.service-id=llm",
            "epp4j.pools.llama.discovery.refresh-interval=2s")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).isEmpty();
  }

  /**
   * A pool name Spring binds only in bracket notation ({@code _}, upper case, a dot) was printed
   * dotted, {@code epp4j.pools.my_pool.metrics.path}, which binds another pool ({@code mypool})
   * when pasted back.
   */
  @Test
  void poolPropertiesAreNamedAsTheyAreWrittenInBracketNotation() {
    List<String> set = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.pools[my_pool].endpoints=127.0.0.1:9011",
            "epp4j.pools[my_pool].metrics.enabled=false",
            "epp4j.pools[my_pool].metrics.path=/stats",
            "epp4j.pools.llama.endpoints=127.0.0.1:9012",
            "epp4j.pools.llama.metrics.enabled=false",
            "epp4j.pools.llama.metrics.path=/stats")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(set).singleElement().asString()
        .contains("epp4j.pools[my_pool].metrics.path", "epp4j.pools.llama.metrics.path");
    runner.withPropertyValues("epp4j.pools[Qwen].endpoints=127.0.0.1:9011",
            "epp4j.pools[Qwen].metrics.interval=0s")
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.pools[Qwen].metrics.interval must be positive"));
    runner.withPropertyValues("epp4j.pools[my_pool].endpoints=127.0.0.1:9011",
            "epp4j.pools[my_pool].session-headers=x user")
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining(
            "epp4j.pools[my_pool].session-headers: 'x user' is not an HTTP header name"));
  }

  @Test
  void badDurationsAndMetricsPathFailStartupNamingTheProperty() {
    runner.withPropertyValues("epp4j.metrics.interval=0s").run(ctx -> assertThat(ctx)
        .getFailure().hasStackTraceContaining("epp4j.metrics.interval must be positive"));
    runner.withPropertyValues("epp4j.metrics.path=metrics").run(ctx -> assertThat(ctx)
        .getFailure().hasStackTraceContaining("epp4j.metrics.path must start with '/'"));
    runner.withPropertyValues("epp4j.in-flight-max-age=0s").run(ctx -> assertThat(ctx)
        .getFailure().hasStackTraceContaining("epp4j.in-flight-max-age must be positive"));
  }

  @Test
  void anInFlightAgeTheFiltersRenewalsCannotKeepUpWithFailsStartupNamingIt() {
    // renewals run every quarter of the age but at most every 100 ms: a positive age under
    // 400 ms started, and the router released requests still being served from its counters
    for (String prop : List.of("epp4j.in-flight-max-age", "epp4j.pools.llama.in-flight-max-age")) {
      runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
              "epp4j.pools.llama.endpoints=127.0.0.1:9011", prop + "=100ms")
          .run(ctx -> assertThat(ctx).as(prop).getFailure().rootCause()
              .isInstanceOf(Epp4jConfigurationException.class)
              .hasMessageStartingWith(prop + " must be at least 400ms, got PT0.1S"));
      runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
              "epp4j.pools.llama.endpoints=127.0.0.1:9011", prop + "=400ms")
          .run(ctx -> assertThat(ctx).as(prop).hasNotFailed());
    }
  }

  /**
   * An address listed twice in an endpoint list was one endpoint, with the labels of its last
   * entry: {@code 10.0.0.1:8000=prefill,10.0.0.1:8000=decode} silently became a decode server
   * only. A repeated address is a mistake in the list and fails startup naming the property.
   */
  @Test
  void anEndpointListedTwiceFailsStartupNamingThePropertyAndTheAddress() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001=prefill, 127.0.0.1:9002,"
            + " 127.0.0.1:9001=decode")
        .run(ctx -> assertThat(ctx).getFailure()
            .rootCause().isInstanceOf(Epp4jConfigurationException.class)
            .hasMessage("epp4j.endpoints: '127.0.0.1:9001' is listed twice (entries 1 and 3);"
                + " list each endpoint once"));
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.endpoints=[::1]:9002,[::1]:9002")
        .run(ctx -> assertThat(ctx).getFailure()
            .rootCause().isInstanceOf(Epp4jConfigurationException.class)
            .hasMessageStartingWith("epp4j.pools.llama.endpoints: '[::1]:9002' is listed twice"));
  }

  /**
   * A metrics path that starts with '/' but is no valid URI path as written (a space, a stray
   * '%', a '#') passed the property check and failed startup in the scraper's builder, with a
   * message that names no property and, for a named pool, not even the pool.
   */
  @Test
  void aMetricsPathThatIsNoUriPathFailsStartupNamingTheProperty() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.path=/my metrics")
        .run(ctx -> assertThat(ctx).getFailure()
            .rootCause().isInstanceOf(Epp4jConfigurationException.class)
            .hasMessageStartingWith("epp4j.metrics.path ")
            .hasMessageContaining("'/my metrics'"));
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.endpoints=127.0.0.1:9002",
            "epp4j.pools.llama.metrics.path=/metrics#all")
        .run(ctx -> assertThat(ctx).getFailure()
            .rootCause().isInstanceOf(Epp4jConfigurationException.class)
            .hasMessageStartingWith("epp4j.pools.llama.metrics.path ")
            .hasMessageContaining("'/metrics#all'"));
  }

  /**
   * A metrics path with characters invalid in a URI was caught only when the scraper was built:
   * with scraping off, startup went through and the mistake surfaced only once scraping was
   * switched on, unlike a path without a leading '/' or a zero interval, checked either way.
   */
  @Test
  void aMetricsPathThatIsNoUriPathFailsStartupWithScrapingOffToo() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.enabled=false",
            "epp4j.metrics.path=/my metrics")
        .run(ctx -> assertThat(ctx).getFailure()
            .rootCause().isInstanceOf(Epp4jConfigurationException.class)
            .hasMessageStartingWith("epp4j.metrics.path ")
            .hasMessageContaining("'/my metrics'"));
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.endpoints=127.0.0.1:9002",
            "epp4j.pools.llama.metrics.enabled=false",
            "epp4j.pools.llama.metrics.path=/metrics%zz")
        .run(ctx -> assertThat(ctx).getFailure()
            .rootCause().isInstanceOf(Epp4jConfigurationException.class)
            .hasMessageStartingWith("epp4j.pools.llama.metrics.path ")
            .hasMessageContaining("'/metrics%zz'"));
  }

  @Test
  void theScrapersPropertiesAreNamedWhenTheApplicationBringsItsOwnRouter() {
    // the scraper bean took them unchecked next to an application's own router: a bad path or
    // scheme failed startup with the scraper builder's message, which names no property
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    runner.withBean(Router.class, () -> own).withPropertyValues("epp4j.metrics.path=metrics")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.metrics.path must start with '/'"));
    runner.withBean(Router.class, () -> own).withPropertyValues("epp4j.metrics.interval=0s")
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("epp4j.metrics.interval must be positive"));
    runner.withBean(Router.class, () -> own).withPropertyValues("epp4j.scheme=ftp")
        .run(ctx -> assertThat(ctx).getFailure().hasStackTraceContaining("epp4j.scheme"));
    runner.withBean(Router.class, () -> own).run(ctx -> assertThat(ctx).hasNotFailed());
    own.close();
  }

  @Test
  void anEnvironmentChangeAppliesTheNewPoolAndConfigKeepingRequestsInFlight() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001,127.0.0.1:9002")
        .run(ctx -> {
          Router router = ctx.getBean(Router.class);
          RoutingDecision before = router.route("/v1/completions", Map.of(),
              "{\"model\":\"m\",\"prompt\":\"in flight\"}".getBytes(StandardCharsets.UTF_8));
          assertThat(before.isRouted()).isTrue();
          String kept = before.primary().id();

          TestPropertyValues.of("epp4j.endpoints=" + kept + ",127.0.0.1:9003",
              "epp4j.preset=epp4j").applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx,
              Set.of("epp4j.endpoints", "epp4j.preset")));

          assertThat(router.endpoints()).extracting(Candidate::id)
              .containsExactlyInAnyOrder(kept, "127.0.0.1:9003");
          assertThat(router.config().plugins()).containsKey("token-cost-picker");
          assertThat(inFlight(router)).isEqualTo(1); // the request routed before the change
          before.onComplete(Usage.NONE);
          assertThat(inFlight(router)).isZero();
        });
  }

  @Test
  void aRefreshThatDoesNotTouchTheEndpointsKeepsThePool() {
    // an application's own Router bean, its replicas given in code (epp4j.endpoints unset): a
    // refresh changing only another epp4j property (one that takes a restart, here) replaced
    // the pool with the empty epp4j.endpoints, and every request was answered 503
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.1", 8000)).build();
    runner.withBean(Router.class, () -> own).run(ctx -> {
      Router router = ctx.getBean(Router.class);
      assertThat(poolIds(router)).containsExactly("10.0.0.1:8000");

      TestPropertyValues.of("epp4j.metrics.interval=2h").applyTo(ctx);
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.metrics.interval")));

      assertThat(poolIds(router)).containsExactly("10.0.0.1:8000");
    });
    own.close();
  }

  @Test
  void clearingThePresetOrConfigFileGoesBackToTheDefaultProfile() {
    // with neither set the EPP default profile runs; a refresh that cleared them kept the
    // preset's configuration running, for the default router and a named pool alike
    Set<String> defaults;
    try (Router plain = Router.builder().build()) {
      defaults = plain.config().plugins().keySet();
    }
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.preset=epp4j",
            "epp4j.pools.llama.endpoints=127.0.0.1:9011", "epp4j.pools.llama.preset=epp4j")
        .run(ctx -> {
          Router router = ctx.getBean(Router.class);
          Router llama = ctx.getBean(Epp4jPools.class).router("llama");
          assertThat(router.config().plugins()).containsKey("token-cost-picker");
          assertThat(llama.config().plugins()).containsKey("token-cost-picker");

          TestPropertyValues.of("epp4j.preset=", "epp4j.pools.llama.preset=").applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx,
              Set.of("epp4j.preset", "epp4j.pools.llama.preset")));

          assertThat(router.config().plugins().keySet()).isEqualTo(defaults);
          assertThat(llama.config().plugins().keySet()).isEqualTo(defaults);
          assertThat(poolIds(router)).containsExactly("127.0.0.1:9001");
        });
  }

  @Test
  void aChangeThatOnlyARestartAppliesIsLoggedNamingTheProperties() {
    List<String> warnings = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.logging.Logger log = java.util.logging.Logger.getLogger(Epp4jRefresher.class.getName());
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
    log.addHandler(capture);
    try {
      runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
              "epp4j.pools.llama.endpoints=127.0.0.1:9011")
          .run(ctx -> {
            Router router = ctx.getBean(Router.class);
            Epp4jPools pools = ctx.getBean(Epp4jPools.class);

            // endpoints, config file and preset apply: nothing to warn about
            TestPropertyValues.of("epp4j.endpoints=127.0.0.1:9002", "epp4j.preset=epp4j")
                .applyTo(ctx);
            ctx.publishEvent(new EnvironmentChangeEvent(ctx,
                Set.of("epp4j.endpoints", "epp4j.endpoints[0]", "epp4j.preset",
                    "EPP4J_CONFIG_FILE")));
            assertThat(poolIds(router)).containsExactly("127.0.0.1:9002");
            assertThat(warnings).isEmpty();

            // the scheme and the session headers are read when the filter is built: the
            // endpoints change is applied, the rest is named
            TestPropertyValues.of("epp4j.endpoints=127.0.0.1:9003", "epp4j.scheme=https",
                "epp4j.session-headers=x-chat").applyTo(ctx);
            ctx.publishEvent(new EnvironmentChangeEvent(ctx,
                Set.of("epp4j.endpoints", "epp4j.scheme", "epp4j.session-headers[0]")));
            assertThat(poolIds(router)).containsExactly("127.0.0.1:9003");
            assertThat(warnings).singleElement().asString()
                .contains("epp4j.scheme, epp4j.session-headers[0]")
                .contains("after a restart").doesNotContain("epp4j.endpoints");
            warnings.clear();

            // a named pool's own restart-only property, through an environment variable
            TestPropertyValues.of("epp4j.pools.llama.endpoints=127.0.0.1:9012",
                "epp4j.pools.llama.metrics.interval=5s").applyTo(ctx);
            ctx.publishEvent(new EnvironmentChangeEvent(ctx,
                Set.of("epp4j.pools.llama.endpoints", "EPP4J_POOLS_LLAMA_METRICS_INTERVAL")));
            assertThat(poolIds(pools.router("llama"))).containsExactly("127.0.0.1:9012");
            assertThat(warnings).singleElement().asString()
                .contains("pool 'llama'").contains("EPP4J_POOLS_LLAMA_METRICS_INTERVAL")
                .doesNotContain("endpoints");
            warnings.clear();

            // a pool added by the change is built with all its values: nothing to warn about
            TestPropertyValues.of("epp4j.pools.qwen.endpoints=127.0.0.1:9021",
                "epp4j.pools.qwen.scheme=https").applyTo(ctx);
            ctx.publishEvent(new EnvironmentChangeEvent(ctx,
                Set.of("epp4j.pools.qwen.endpoints", "epp4j.pools.qwen.scheme")));
            assertThat(pools.names()).contains("qwen");
            assertThat(warnings).isEmpty();
          });
    } finally {
      log.removeHandler(capture);
    }
  }

  @Test
  void restartOnlyNamesTheKnownPropertiesARunningRouterCannotTakeInAnyRelaxedForm() {
    assertThat(Epp4jRefresher.restartOnly(".endpoints")).isFalse();
    assertThat(Epp4jRefresher.restartOnly(".endpoints[3]")).isFalse();
    assertThat(Epp4jRefresher.restartOnly(".endpoints.0.")).isFalse();
    assertThat(Epp4jRefresher.restartOnly(".config-file")).isFalse();
    assertThat(Epp4jRefresher.restartOnly(".configFile")).isFalse();
    assertThat(Epp4jRefresher.restartOnly(".config.file")).isFalse();
    assertThat(Epp4jRefresher.restartOnly(".preset")).isFalse();
    assertThat(Epp4jRefresher.restartOnly(".scheme")).isTrue();
    assertThat(Epp4jRefresher.restartOnly(".max-body-size")).isTrue();
    assertThat(Epp4jRefresher.restartOnly(".metrics.enabled")).isTrue();
    assertThat(Epp4jRefresher.restartOnly(".discovery.service-id")).isTrue();
    assertThat(Epp4jRefresher.restartOnly(".in-flight-max-age")).isTrue();
    assertThat(Epp4jRefresher.restartOnly(".session-headers[0]")).isTrue();
    assertThat(Epp4jRefresher.restartOnly(".in.flight.max.age")).isTrue(); // EPP4J_IN_FLIGHT_MAX_AGE
    // no property at all (a misspelled key being removed): nothing a restart would apply
    assertThat(Epp4jRefresher.restartOnly(".endpoint")).isFalse();
    assertThat(Epp4jRefresher.restartOnly(".metrics.intreval")).isFalse();
  }

  @Test
  void anInvalidChangeIsLoggedAndKeepsThePoolAndConfigWithoutFailingTheRefresh() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001")
        .run(ctx -> {
          Router router = ctx.getBean(Router.class);
          Object config = router.config();

          // an unknown preset next to a valid new pool: nothing of the change is applied
          TestPropertyValues.of("epp4j.endpoints=127.0.0.1:9002", "epp4j.preset=nope")
              .applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx,
              Set.of("epp4j.endpoints", "epp4j.preset")));
          assertThat(poolIds(router)).containsExactly("127.0.0.1:9001");
          assertThat(router.config()).isSameAs(config);

          // an endpoint that is not host:port
          TestPropertyValues.of("epp4j.endpoints=127.0.0.1:9002,no-port", "epp4j.preset=")
              .applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx,
              Set.of("epp4j.endpoints", "epp4j.preset")));
          assertThat(poolIds(router)).containsExactly("127.0.0.1:9001");
        });
  }

  @Test
  void theInstancesOfADiscoveredServiceBecomeThePoolAndFollowTheRegistry() {
    java.util.concurrent.CopyOnWriteArrayList<org.springframework.cloud.client.ServiceInstance>
        instances = new java.util.concurrent.CopyOnWriteArrayList<>(List.of(
            new DefaultServiceInstance("a", "llm", "10.0.0.1", 8000, false)));
    DiscoveryClient registry = registry(instances);
    runner.withBean(DiscoveryClient.class, () -> registry)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.discovery.service-id=llm",
            "epp4j.discovery.refresh-interval=20ms")
        .run(ctx -> {
          assertThat(ctx).hasSingleBean(Epp4jDiscoveryPool.class);
          Router router = ctx.getBean(Router.class);
          awaitPool(router, Set.of("10.0.0.1:8000"));
          instances.add(new DefaultServiceInstance("b", "llm", "10.0.0.2", 8000, false));
          awaitPool(router, Set.of("10.0.0.1:8000", "10.0.0.2:8000"));
        });
  }

  @Test
  void prefillAndDecodeRolesComeFromTheEndpointListAndFromDiscoveryMetadata() {
    // the role filters read llm-d.ai/role: without a way to give it, every SCG endpoint was
    // unlabelled, prefill-filter kept none and prefill/decode disaggregation never split
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001=prefill, 127.0.0.1:9002=decode,"
        + " 127.0.0.1:9003, 127.0.0.1:9004=zone=a").run(ctx -> {
          Router router = ctx.getBean(Router.class);
          assertThat(roles(router)).containsExactly(
              Map.entry("127.0.0.1:9001", "prefill"), Map.entry("127.0.0.1:9002", "decode"),
              Map.entry("127.0.0.1:9003", "-"), Map.entry("127.0.0.1:9004", "-"));
          // other labels, for the label plugins, as name=value items
          assertThat(router.endpoints().stream().filter(c -> c.id().equals("127.0.0.1:9004"))
              .findFirst().orElseThrow().endpoint().labels()).containsExactly(
                  Map.entry("zone", "a"));
        });
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001=prefil")
        .run(ctx -> assertThat(ctx).hasFailed().getFailure()
            .hasStackTraceContaining("epp4j.endpoints: '127.0.0.1:9001=prefil'")
            .hasStackTraceContaining("'prefil'"));

    DefaultServiceInstance p = new DefaultServiceInstance("p", "llm", "10.0.0.1", 8000, false,
        Map.of(Endpoint.ROLE_LABEL, "prefill", "zone", "a"));
    DefaultServiceInstance d = new DefaultServiceInstance("d", "llm", "10.0.0.2", 8000, false,
        Map.of(Endpoint.ROLE_LABEL, "decode"));
    DefaultServiceInstance plain = new DefaultServiceInstance("x", "llm", "10.0.0.3", 8000,
        false);
    DefaultServiceInstance bad = new DefaultServiceInstance("bad", "llm", "10.0.0.4", 8000,
        false, Map.of(Endpoint.ROLE_LABEL, "prefil"));
    runner.withBean(DiscoveryClient.class, () -> registry(List.of(p, d, plain, bad)))
        .withPropertyValues("epp4j.discovery.service-id=llm",
            "epp4j.discovery.refresh-interval=1h")
        .run(ctx -> {
          Router router = ctx.getBean(Router.class);
          awaitPool(router, Set.of("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"));
          assertThat(roles(router)).containsExactly(Map.entry("10.0.0.1:8000", "prefill"),
              Map.entry("10.0.0.2:8000", "decode"), Map.entry("10.0.0.3:8000", "-"));
          // the rest of the metadata (a pod's labels) is the endpoint's labels too, for the
          // label plugins; before, only the role was kept
          assertThat(router.endpoints().stream().filter(c -> c.id().equals("10.0.0.1:8000"))
              .findFirst().orElseThrow().endpoint().labels())
              .containsExactlyInAnyOrderEntriesOf(Map.of(Endpoint.ROLE_LABEL, "prefill",
                  "zone", "a"));
        });
  }

  /** Each endpoint's role label, {@code -} without one, by id. */
  private static Map<String, String> roles(Router router) {
    Map<String, String> out = new java.util.TreeMap<>();
    router.endpoints().forEach(c -> out.put(c.id(),
        c.endpoint().labels().getOrDefault(Endpoint.ROLE_LABEL, "-")));
    return out;
  }

  @Test
  void anInstanceWithoutAUsablePortIsSkippedAndTheRegistryIsStillFollowed() {
    // e.g. an instance registered before its port was known; Endpoint refuses port 0
    java.util.concurrent.CopyOnWriteArrayList<org.springframework.cloud.client.ServiceInstance>
        instances = new java.util.concurrent.CopyOnWriteArrayList<>(List.of(
            new DefaultServiceInstance("a", "llm", "10.0.0.1", 8000, false),
            new DefaultServiceInstance("broken", "llm", "10.0.0.9", 0, false)));
    runner.withBean(DiscoveryClient.class, () -> registry(instances))
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.discovery.service-id=llm",
            "epp4j.discovery.refresh-interval=20ms")
        .run(ctx -> {
          Router router = ctx.getBean(Router.class);
          awaitPool(router, Set.of("10.0.0.1:8000"));
          instances.add(new DefaultServiceInstance("b", "llm", "10.0.0.2", 8000, false));
          awaitPool(router, Set.of("10.0.0.1:8000", "10.0.0.2:8000"));
        });
  }

  @Test
  void aChangedPresetKeepsThePoolADiscoveredServiceGave() {
    List<org.springframework.cloud.client.ServiceInstance> instances = List.of(
        new DefaultServiceInstance("a", "llm", "10.0.0.1", 8000, false));
    runner.withBean(DiscoveryClient.class, () -> registry(instances))
        .withPropertyValues("epp4j.discovery.service-id=llm",
            "epp4j.discovery.refresh-interval=1h") // one lookup, at start
        .run(ctx -> {
          Router router = ctx.getBean(Router.class);
          awaitPool(router, Set.of("10.0.0.1:8000"));

          TestPropertyValues.of("epp4j.preset=epp4j").applyTo(ctx);
          ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.preset")));

          assertThat(router.config().plugins()).containsKey("token-cost-picker");
          // the registry, not the (unset) epp4j.endpoints, owns the pool
          assertThat(poolIds(router)).containsExactly("10.0.0.1:8000");
        });
  }

  private static DiscoveryClient registry(
      List<org.springframework.cloud.client.ServiceInstance> instances) {
    return new DiscoveryClient() {
      @Override
      public String description() {
        return "test registry";
      }

      @Override
      public List<org.springframework.cloud.client.ServiceInstance> getInstances(String id) {
        return id.equals("llm") ? instances : List.of();
      }

      @Override
      public List<String> getServices() {
        return List.of("llm");
      }
    };
  }

  @Test
  void theRouterReportsToTheApplicationsOpenTelemetry() {
    io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader reader =
        io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader.create();
    io.opentelemetry.sdk.OpenTelemetrySdk otel = io.opentelemetry.sdk.OpenTelemetrySdk.builder()
        .setMeterProvider(io.opentelemetry.sdk.metrics.SdkMeterProvider.builder()
            .registerMetricReader(reader).build())
        .build();
    runner.withBean(io.opentelemetry.api.OpenTelemetry.class, () -> otel)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.metrics.enabled=false")
        .run(ctx -> {
          RoutingDecision d = ctx.getBean(Router.class).route("/v1/completions", Map.of(),
              "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8));
          d.onComplete(Usage.NONE);
          assertThat(reader.collectAllMetrics())
              .extracting(io.opentelemetry.sdk.metrics.data.MetricData::getName)
              .contains("epp4j.routing.decisions");
        });
    otel.close();
  }

  @Test
  void aServiceIdWithoutADiscoveryClientIsAWarningNamingIt() {
    List<String> warnings = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.discovery.service-id=llm")
        .run(ctx -> {
          assertThat(ctx).hasNotFailed().doesNotHaveBean(Epp4jDiscoveryPool.class);
          assertThat(poolIds(ctx.getBean(Router.class))).containsExactly("127.0.0.1:9001");
        }));
    assertThat(warnings).singleElement().asString()
        .contains("epp4j.discovery.service-id", "no DiscoveryClient", "epp4j.endpoints");
  }

  @Test
  void aServiceIdWithoutADiscoveryClientNamesTheRefreshIntervalThatDoesNothingToo() {
    // the warning named the service id only: the refresh interval set beside it, which no
    // lookup uses either, went unmentioned
    List<String> warnings = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001", "epp4j.discovery.service-id=llm",
            "epp4j.discovery.refresh-interval=1s")
        .run(ctx -> assertThat(ctx).hasNotFailed().doesNotHaveBean(Epp4jDiscoveryPool.class)));
    assertThat(warnings).singleElement().asString().contains(
        "epp4j.discovery.service-id, epp4j.discovery.refresh-interval set, but there is no"
            + " DiscoveryClient", "the default pool keeps epp4j.endpoints");
    // a named pool's own, in the warning of that pool
    warnings = warningsOf(Epp4jPools.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.endpoints=127.0.0.1:9011",
            "epp4j.pools.llama.discovery.service-id=llm",
            "epp4j.pools.llama.discovery.refresh-interval=2s",
            "epp4j.pools.qwen.endpoints=127.0.0.1:9012",
            "epp4j.pools.qwen.discovery.service-id=qwen")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(warnings).containsExactly("epp4j: epp4j.pools.llama.discovery.service-id,"
            + " epp4j.pools.llama.discovery.refresh-interval set, but there is no DiscoveryClient:"
            + " no lookup runs with them, and pool 'llama' keeps epp4j.pools.llama.endpoints",
        "epp4j: epp4j.pools.qwen.discovery.service-id set, but there is no DiscoveryClient: no"
            + " lookup runs with them, and pool 'qwen' keeps epp4j.pools.qwen.endpoints");
    // the top-level one, which a named pool with a service id inherits, but looks nothing up
    // with: named as unused (it was taken as used by that pool)
    warnings = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.discovery.refresh-interval=1s",
            "epp4j.pools.llama.discovery.service-id=llm")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(warnings).singleElement().asString()
        .startsWith("epp4j: epp4j.discovery.refresh-interval set, but no discovery looks up");
    // beside the default pool's service id, it is named in that pool's warning
    warnings = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.discovery.service-id=qwen",
            "epp4j.discovery.refresh-interval=1s",
            "epp4j.pools.llama.discovery.service-id=llm")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(warnings).singleElement().asString().startsWith(
        "epp4j: epp4j.discovery.service-id, epp4j.discovery.refresh-interval set, but there is no"
            + " DiscoveryClient");
    // with a DiscoveryClient, the named pool's lookups run with it: nothing to say
    DiscoveryClient registry = registry(List.of());
    warnings = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withBean(DiscoveryClient.class, () -> registry)
        .withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.discovery.refresh-interval=1s",
            "epp4j.pools.llama.discovery.service-id=llm")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(warnings).isEmpty();
    // the interval left at its default is not named
    warnings = warningsOf(Epp4jAutoConfiguration.class, () -> runner
        .withPropertyValues("epp4j.discovery.service-id=llm")
        .run(ctx -> assertThat(ctx).hasNotFailed()));
    assertThat(warnings).singleElement().asString().startsWith(
        "epp4j: epp4j.discovery.service-id set, but there is no DiscoveryClient");
  }

  @Test
  void withoutAServiceIdThereIsNoDiscovery() {
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001")
        .run(ctx -> assertThat(ctx).doesNotHaveBean(Epp4jDiscoveryPool.class));
  }

  @Test
  void aBlankServiceIdIsNoDiscoveryAndKeepsTheEndpoints() {
    // e.g. EPP4J_DISCOVERY_SERVICE_ID= from a template; a registry knows no service ''
    DiscoveryClient registry = registry(List.of()); // knows "llm" only, with no instance
    for (String blank : List.of("", "  ")) {
      // a property source of its own: withPropertyValues trims values, so "  " would be ""
      runner.withBean(DiscoveryClient.class, () -> registry)
          .withPropertyValues("epp4j.endpoints=127.0.0.1:9001")
          .withInitializer(ctx -> ctx.getEnvironment().getPropertySources().addFirst(
              new org.springframework.core.env.MapPropertySource("variables",
                  Map.of("epp4j.discovery.service-id", blank))))
          .run(ctx -> {
            assertThat(ctx.getEnvironment().getProperty("epp4j.discovery.service-id"))
                .isEqualTo(blank);
            assertThat(ctx).hasNotFailed().doesNotHaveBean(Epp4jDiscoveryPool.class);
            assertThat(poolIds(ctx.getBean(Router.class))).containsExactly("127.0.0.1:9001");
          });
    }
  }

  @Test
  void aServiceIdWithWhitespaceAroundItFailsStartupNamingItAndShowingItQuoted() {
    // "llm " from an environment variable was looked up as written: the registry has no such
    // service, the pool stayed empty and every request got 503, without a word
    List<String> asked = new java.util.concurrent.CopyOnWriteArrayList<>();
    DiscoveryClient registry = new DiscoveryClient() {
      @Override
      public String description() {
        return "recording registry";
      }

      @Override
      public List<org.springframework.cloud.client.ServiceInstance> getInstances(String id) {
        asked.add(id);
        return id.equals("llm")
            ? List.of(new DefaultServiceInstance("a", "llm", "10.0.0.1", 8000, false))
            : List.of();
      }

      @Override
      public List<String> getServices() {
        return List.of("llm");
      }
    };
    for (String id : List.of("llm ", " llm", "llm\t")) {
      // withPropertyValues trims values; a property source of its own keeps them as written
      runner.withBean(DiscoveryClient.class, () -> registry)
          .withInitializer(ctx -> ctx.getEnvironment().getPropertySources().addFirst(
              new org.springframework.core.env.MapPropertySource("variables",
                  Map.of("epp4j.discovery.service-id", id))))
          .run(ctx -> assertThat(ctx).getFailure().rootCause()
              .isInstanceOf(Epp4jConfigurationException.class)
              .hasMessageStartingWith("epp4j.discovery.service-id has whitespace before or after"
                  + " the service name, got '" + id + "'"));
      runner.withBean(DiscoveryClient.class, () -> registry)
          .withPropertyValues("epp4j.endpoints=127.0.0.1:9001")
          .withInitializer(ctx -> ctx.getEnvironment().getPropertySources().addFirst(
              new org.springframework.core.env.MapPropertySource("variables",
                  Map.of("epp4j.pools.qwen.discovery.service-id", id))))
          .run(ctx -> assertThat(ctx).getFailure().rootCause()
              .hasMessageStartingWith("epp4j.pools.qwen.discovery.service-id has whitespace"
                  + " before or after the service name, got '" + id + "'"));
    }
    // beside the application's own Router, which checks nothing: refused by the discovery
    // pool's bean before its first lookup, which would have emptied that router's pool
    Router own = Router.builder().endpoint(Endpoint.of("10.0.0.9", 8000)).build();
    runner.withBean(Router.class, () -> own)
        .withBean(DiscoveryClient.class, () -> registry)
        .withInitializer(ctx -> ctx.getEnvironment().getPropertySources().addFirst(
            new org.springframework.core.env.MapPropertySource("variables",
                Map.of("epp4j.discovery.service-id", "llm "))))
        .run(ctx -> assertThat(ctx).getFailure()
            .hasStackTraceContaining("Error creating bean with name 'epp4jDiscoveryPool'")
            .hasStackTraceContaining("epp4j.discovery.service-id has whitespace"));
    assertThat(asked).as("no lookup ran with a service id refused").isEmpty();
    assertThat(poolIds(own)).containsExactly("10.0.0.9:8000");
    own.close();
    // the name as written, without whitespace, is still looked up
    runner.withBean(DiscoveryClient.class, () -> registry)
        .withPropertyValues("epp4j.discovery.service-id=llm")
        .run(ctx -> awaitPool(ctx.getBean(Router.class), Set.of("10.0.0.1:8000")));
  }

  @Test
  void aNamedPoolWithNoEndpointsAndABlankServiceIdFailsStartupNamingItsProperties() {
    // epp4j.pools.x.discovery.service-id= from an empty variable: the pool started empty, without
    // a word, and every route naming it answered 503
    runner.withPropertyValues("epp4j.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.endpoints=127.0.0.1:9011",
            "epp4j.pools.x.discovery.service-id=")
        .run(ctx -> assertThat(ctx).getFailure().rootCause()
            .isInstanceOf(Epp4jConfigurationException.class)
            .hasMessageStartingWith("epp4j.pools.x has nothing to route to:"
                + " epp4j.pools.x.endpoints lists no endpoint and"
                + " epp4j.pools.x.discovery.service-id is blank ('')"));
    // the same with an empty endpoints list, a service id of spaces, or neither property set
    DiscoveryClient registry = registry(List.of());
    runner.withBean(DiscoveryClient.class, () -> registry)
        .withPropertyValues("epp4j.pools[my_pool].endpoints=,",
            "epp4j.pools[my_pool].preset=epp4j")
        .withInitializer(ctx -> ctx.getEnvironment().getPropertySources().addFirst(
            new org.springframework.core.env.MapPropertySource("variables",
                Map.of("epp4j.pools[my_pool].discovery.service-id", "  "))))
        .run(ctx -> assertThat(ctx).getFailure().rootCause().hasMessageStartingWith(
            "epp4j.pools[my_pool] has nothing to route to: epp4j.pools[my_pool].endpoints lists"
                + " no endpoint and epp4j.pools[my_pool].discovery.service-id is blank ('  ')"));
    runner.withPropertyValues("epp4j.pools.x.max-body-size=1MB")
        .run(ctx -> assertThat(ctx).getFailure().rootCause().hasMessageContaining(
            "epp4j.pools.x.discovery.service-id is unset"));
    // a bad value of such a pool is still named first
    runner.withPropertyValues("epp4j.pools.x.scheme=ftp")
        .run(ctx -> assertThat(ctx).getFailure().rootCause()
            .hasMessageStartingWith("epp4j.pools.x.scheme must be http or https"));
    // endpoints beside a blank service id, or a service id alone: the pool has replicas
    runner.withPropertyValues("epp4j.pools.x.endpoints=127.0.0.1:9011",
            "epp4j.pools.x.discovery.service-id=")
        .run(ctx -> assertThat(poolIds(ctx.getBean(Epp4jPools.class).router("x")))
            .containsExactly("127.0.0.1:9011"));
    runner.withBean(DiscoveryClient.class, () -> registry)
        .withPropertyValues("epp4j.pools.x.discovery.service-id=llm")
        .run(ctx -> assertThat(ctx).hasNotFailed());
  }

  private static void awaitPool(Router router, Set<String> ids) throws InterruptedException {
    long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(10);
    while (!poolIds(router).equals(ids)) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("pool is " + poolIds(router) + ", expected " + ids);
      }
      Thread.sleep(5);
    }
  }

  private static Set<String> poolIds(Router router) {
    Set<String> ids = new java.util.HashSet<>();
    router.endpoints().forEach(c -> ids.add(c.id()));
    return ids;
  }

  private static int inFlight(Router router) {
    int n = 0;
    for (Candidate c : router.endpoints()) {
      n += c.inFlightRequests();
    }
    return n;
  }

  /** The warnings {@code logger} logs while {@code run} runs. */
  private static List<String> warningsOf(Class<?> logger, Runnable run) {
    java.util.logging.Logger log = java.util.logging.Logger.getLogger(logger.getName());
    List<String> warnings = new java.util.concurrent.CopyOnWriteArrayList<>();
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
    log.addHandler(capture);
    try {
      run.run();
    } finally {
      log.removeHandler(capture);
    }
    return warnings;
  }
}
