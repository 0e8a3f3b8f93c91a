package io.epp4j.spring.gateway;

import io.epp4j.api.Endpoint;
import io.epp4j.api.PoolListener;
import io.epp4j.api.RequestListener;
import io.epp4j.core.MetricsScraper;
import io.epp4j.core.OpenAiRequestParser;
import io.epp4j.core.Router;
import io.epp4j.scorers.Epp4jPreset;
import io.opentelemetry.api.OpenTelemetry;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.Set;
import java.util.List;
import java.util.Objects;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.cloud.client.discovery.DiscoveryClient;
import org.springframework.cloud.gateway.filter.factory.GatewayFilterFactory;
import org.springframework.context.annotation.Bean;
import org.springframework.core.env.Environment;

/**
 * Builds the epp4j {@link Router}, the {@link MetricsScraper} that keeps its replica metrics
 * fresh, and the {@code Epp4j} gateway filter from the {@code epp4j.*} properties. Each bean
 * yields to one of the same type the application defines.
 */
// after the discovery clients, so that @ConditionalOnBean(DiscoveryClient) sees them
@AutoConfiguration(afterName = {
    "org.springframework.cloud.client.discovery.simple.SimpleDiscoveryClientAutoConfiguration",
    "org.springframework.cloud.client.discovery.composite.CompositeDiscoveryClientAutoConfiguration"})
@ConditionalOnClass(GatewayFilterFactory.class)
@EnableConfigurationProperties(Epp4jProperties.class)
public class Epp4jAutoConfiguration {

  /**
   * The router; closed with the context. The application's {@link OpenTelemetry} bean, when there
   * is one, receives the router's metrics; {@link RequestListener} and {@link PoolListener} beans
   * are registered with it.
   */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  public Router epp4jRouter(Epp4jProperties properties, ObjectProvider<OpenTelemetry> otel,
      ObjectProvider<RequestListener> requestListeners, ObjectProvider<PoolListener> poolListeners) {
    Router.Builder b = Router.builder()
        .endpoints(endpoints(properties.getEndpoints()))
        .requestParser(OpenAiRequestParser.of(maxBodyBytes(properties), properties.getSessionHeaders()));
    String file = properties.getConfigFile();
    String preset = properties.getPreset();
    if (file != null && !file.isBlank()) {
      b.configFile(Path.of(file));
    } else if (preset != null && !preset.isBlank()) {
      b.configYaml(presetYaml(preset), preset);
    }
    if (properties.getInFlightMaxAge() != null) {
      b.inFlightMaxAge(properties.getInFlightMaxAge());
    }
    Set<Object> listeners = new LinkedHashSet<>(); // a bean that is both is registered once
    requestListeners.orderedStream().forEach(listeners::add);
    poolListeners.orderedStream().forEach(listeners::add);
    listeners.forEach(b::listener);
    OpenTelemetry telemetry = otel.getIfAvailable();
    if (telemetry != null) {
      b.openTelemetry(telemetry);
    }
    return b.build();
  }

  /** Scrapes every replica's Prometheus metrics; off with {@code epp4j.metrics.enabled=false}. */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  @ConditionalOnProperty(prefix = "epp4j.metrics", name = "enabled", matchIfMissing = true)
  public MetricsScraper epp4jMetricsScraper(Router router, Epp4jProperties properties) {
    return MetricsScraper.builder(router)
        .interval(properties.getMetrics().getInterval())
        .path(properties.getMetrics().getPath())
        .scheme(properties.getScheme())
        .start();
  }

  /** The {@code Epp4j} filter of route definitions and the Java DSL. */
  @Bean
  @ConditionalOnMissingBean
  public Epp4jGatewayFilterFactory epp4jGatewayFilterFactory(Router router,
      Epp4jProperties properties) {
    return new Epp4jGatewayFilterFactory(router, properties.getScheme(), maxBodyBytes(properties));
  }

  /** Lets the {@code Epp4j} filter watch the answers of the routes it is on. */
  @Bean
  @ConditionalOnMissingBean
  public Epp4jResponseTapFilter epp4jResponseTapFilter() {
    return new Epp4jResponseTapFilter();
  }

  /**
   * The pool from Spring Cloud service discovery, when {@code epp4j.discovery.service-id} is set
   * and the application has a {@code DiscoveryClient}.
   */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  @ConditionalOnClass(name = "org.springframework.cloud.client.discovery.DiscoveryClient")
  @ConditionalOnBean(DiscoveryClient.class)
  @ConditionalOnProperty(prefix = "epp4j.discovery", name = "service-id")
  public Epp4jDiscoveryPool epp4jDiscoveryPool(Router router, DiscoveryClient discovery,
      Epp4jProperties properties) {
    String id = Objects.requireNonNull(properties.getDiscovery().getServiceId());
    return new Epp4jDiscoveryPool(router, discovery, id,
        properties.getDiscovery().getRefreshInterval());
  }

  /** Applies changed {@code epp4j.*} properties on a Spring Cloud environment change. */
  @Bean
  @ConditionalOnMissingBean
  @ConditionalOnClass(name = "org.springframework.cloud.context.environment.EnvironmentChangeEvent")
  public Epp4jRefresher epp4jRefresher(Router router, Environment environment,
      ObjectProvider<Epp4jDiscoveryPool> discoveryPool) {
    return new Epp4jRefresher(router, environment,
        () -> discoveryPool.getIfAvailable() != null);
  }

  static List<Endpoint> endpoints(List<String> hostPorts) {
    List<Endpoint> out = new ArrayList<>(hostPorts.size());
    for (String hp : hostPorts) {
      String s = hp.strip();
      if (s.isEmpty()) {
        continue;
      }
      try {
        out.add(Endpoint.parse(s));
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException(
            "epp4j.endpoints: '" + s + "' is not host:port (" + e.getMessage() + ")", e);
      }
    }
    return out;
  }

  static int maxBodyBytes(Epp4jProperties properties) {
    long bytes = properties.getMaxBodySize().toBytes();
    if (bytes <= 0 || bytes > Integer.MAX_VALUE) {
      throw new IllegalArgumentException(
          "epp4j.max-body-size must be between 1 byte and 2 GB, got " + properties.getMaxBodySize());
    }
    return (int) bytes;
  }

  static String presetYaml(@Nullable String preset) {
    if (Epp4jPreset.NAME.equals(preset)) {
      return Epp4jPreset.yaml();
    }
    throw new IllegalArgumentException("epp4j.preset: unknown preset '" + preset
        + "'; known: " + Epp4jPreset.NAME + " (or set epp4j.config-file)");
  }
}
