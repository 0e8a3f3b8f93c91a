package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * A null given to a builder setting is refused at once, naming the setting: before, some were
 * taken as "not set" (a null configuration built the default profile, a null registry used
 * ServiceLoader discovery) and others failed later, at build, as a NullPointerException that said
 * nothing of which setting it came from.
 */
class BuilderNullSettingsTest {

  @Test
  void aNullConfigurationIsRefusedInsteadOfBuildingTheDefaultProfile() {
    assertThatThrownBy(() -> Router.builder().config(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("config");
    assertThatThrownBy(() -> Router.builder().configFile(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("configFile");
    assertThatThrownBy(() -> Router.builder().configYaml(null, "pool.yaml"))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("configYaml");
    assertThatThrownBy(() -> Router.builder().registry(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("registry");
  }

  @Test
  void aNullEndpointIsRefusedWhenGivenNotWhenBuilt() {
    assertThatThrownBy(() -> Router.builder().endpoint(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("endpoint");
    List<Endpoint> withNull = Arrays.asList(Endpoint.parse("10.0.0.1:8000"), null);
    assertThatThrownBy(() -> Router.builder().endpoints(withNull))
        .isInstanceOf(NullPointerException.class)
        .hasMessageContaining("endpoints").hasMessageContaining("index 1");
    assertThatThrownBy(() -> Router.builder().endpoints(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("endpoints");
  }

  @Test
  void otherNullSettingsNameTheSetting() {
    assertThatThrownBy(() -> Router.builder().ticker(null)).hasMessageContaining("ticker");
    assertThatThrownBy(() -> Router.builder().openTelemetry(null))
        .hasMessageContaining("openTelemetry");
    assertThatThrownBy(() -> Router.builder().requestParser(null))
        .hasMessageContaining("requestParser");
    assertThatThrownBy(() -> Router.builder().metricsStaleness(null))
        .hasMessageContaining("metricsStaleness");
    assertThatThrownBy(() -> Router.builder().inFlightMaxAge(null))
        .hasMessageContaining("inFlightMaxAge");
    assertThatThrownBy(() -> Router.builder().retiredPluginCloseDelay(null))
        .hasMessageContaining("retiredPluginCloseDelay");
    assertThatThrownBy(() -> Router.builder().service(String.class, null))
        .hasMessageContaining("service java.lang.String");
    assertThatThrownBy(() -> Router.builder().profile(null)).hasMessageContaining("profile");
    // a scorer given without a name is named after its class, which a null one has not
    assertThatThrownBy(() -> SchedulingProfile.builder("p").scorer(null))
        .isInstanceOf(NullPointerException.class).hasMessage("scorer");
    assertThatThrownBy(() -> SchedulingProfile.builder("p").scorer(null, 2))
        .isInstanceOf(NullPointerException.class).hasMessage("scorer");
  }

  @Test
  void metricsScraperSettingsNameTheSetting() {
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build()).build();
    try (router) {
      MetricsScraper.Builder b = MetricsScraper.builder(router);
      assertThatThrownBy(() -> b.interval(null)).hasMessageContaining("interval");
      assertThatThrownBy(() -> b.timeout(null)).hasMessageContaining("timeout");
      assertThatThrownBy(() -> b.scheme(null)).hasMessageContaining("scheme");
    }
  }

  /** The parser a router is given is a setting too: its header list says where a null sits. */
  @Test
  void aNullSessionHeaderListOrEntryIsNamed() {
    assertThatThrownBy(() -> OpenAiRequestParser.of(1024, null))
        .isInstanceOf(NullPointerException.class).hasMessage("sessionHeaders");
    List<String> withNull = Arrays.asList("x-session-id", null);
    assertThatThrownBy(() -> OpenAiRequestParser.of(1024, withNull))
        .isInstanceOf(NullPointerException.class)
        .hasMessage("sessionHeaders: the entry at index 1 is null");
  }

  /**
   * The README promises a NullPointerException naming the setting for every null, so that a
   * lookup that failed is told apart from a value of the wrong kind; these three answered with
   * an IllegalArgumentException about the value ("got 'null'", "must implement ...").
   */
  @Test
  void nullsTheValueChecksSawAreNullPointerExceptionsNamingTheSetting() {
    assertThatThrownBy(() -> Router.builder().listener(null))
        .isInstanceOf(NullPointerException.class).hasMessage("listener");
    Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build()).build();
    try (router) {
      MetricsScraper.Builder b = MetricsScraper.builder(router);
      assertThatThrownBy(() -> b.scheme(null))
          .isInstanceOf(NullPointerException.class).hasMessage("scheme");
      assertThatThrownBy(() -> b.path(null))
          .isInstanceOf(NullPointerException.class).hasMessage("path");
    }
  }
}
