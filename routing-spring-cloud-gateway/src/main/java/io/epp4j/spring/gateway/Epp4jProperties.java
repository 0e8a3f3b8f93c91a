package io.epp4j.spring.gateway;

import io.epp4j.core.OpenAiRequestParser;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.util.unit.DataSize;

/**
 * The {@code epp4j.*} properties: the replica pool, the routing configuration and the knobs of
 * the gateway filter.
 */
@ConfigurationProperties("epp4j")
public class Epp4jProperties {
  /** Replicas as {@code host:port}, e.g. {@code 10.0.0.1:8000,10.0.0.2:8000}. */
  private List<String> endpoints = new ArrayList<>();

  /** Scheme of the requests the gateway sends to the replicas. */
  private String scheme = "http";

  /**
   * Path of an EndpointPickerConfig YAML file. When neither this nor {@code preset} is set, the
   * EPP default profile is used.
   */
  private @Nullable String configFile;

  /** Name of a shipped configuration ({@code epp4j}); ignored when {@code config-file} is set. */
  private @Nullable String preset;

  /** Largest request body the filter reads; a larger one is answered 413. */
  private DataSize maxBodySize = DataSize.ofBytes(OpenAiRequestParser.DEFAULT_MAX_BODY_BYTES);

  /** Request headers that carry the session key, tried in order. */
  private List<String> sessionHeaders = new ArrayList<>(OpenAiRequestParser.DEFAULT_SESSION_HEADERS);

  /**
   * A routed request still in flight after this long is released from the load counters, in case
   * its outcome was never reported. Unset: the router's default.
   */
  private @Nullable Duration inFlightMaxAge;

  /** Scraping of the replicas' Prometheus metrics (queue, KV-cache use). */
  private final Metrics metrics = new Metrics();

  /** The pool from a Spring Cloud DiscoveryClient instead of {@code endpoints}. */
  private final Discovery discovery = new Discovery();

  public List<String> getEndpoints() {
    return endpoints;
  }

  public void setEndpoints(List<String> endpoints) {
    this.endpoints = endpoints;
  }

  public String getScheme() {
    return scheme;
  }

  public void setScheme(String scheme) {
    this.scheme = scheme;
  }

  public @Nullable String getConfigFile() {
    return configFile;
  }

  public void setConfigFile(@Nullable String configFile) {
    this.configFile = configFile;
  }

  public @Nullable String getPreset() {
    return preset;
  }

  public void setPreset(@Nullable String preset) {
    this.preset = preset;
  }

  public DataSize getMaxBodySize() {
    return maxBodySize;
  }

  public void setMaxBodySize(DataSize maxBodySize) {
    this.maxBodySize = maxBodySize;
  }

  public List<String> getSessionHeaders() {
    return sessionHeaders;
  }

  public void setSessionHeaders(List<String> sessionHeaders) {
    this.sessionHeaders = sessionHeaders;
  }

  public @Nullable Duration getInFlightMaxAge() {
    return inFlightMaxAge;
  }

  public void setInFlightMaxAge(@Nullable Duration inFlightMaxAge) {
    this.inFlightMaxAge = inFlightMaxAge;
  }

  public Metrics getMetrics() {
    return metrics;
  }

  public Discovery getDiscovery() {
    return discovery;
  }

  /** The {@code epp4j.discovery.*} properties. */
  public static class Discovery {
    /**
     * Spring Cloud DiscoveryClient service id whose instances are the pool; replaces
     * {@code endpoints} once the first lookup returns.
     */
    private @Nullable String serviceId;

    /** Time between two lookups of the service's instances. */
    private Duration refreshInterval = Duration.ofSeconds(5);

    public @Nullable String getServiceId() {
      return serviceId;
    }

    public void setServiceId(@Nullable String serviceId) {
      this.serviceId = serviceId;
    }

    public Duration getRefreshInterval() {
      return refreshInterval;
    }

    public void setRefreshInterval(Duration refreshInterval) {
      this.refreshInterval = refreshInterval;
    }
  }

  /** The {@code epp4j.metrics.*} properties. */
  public static class Metrics {
    /** Whether the replicas' metrics endpoints are scraped. */
    private boolean enabled = true;

    /** Time between two scrapes of one replica. */
    private Duration interval = Duration.ofMillis(200);

    /** Path of the Prometheus metrics on each replica. */
    private String path = "/metrics";

    public boolean isEnabled() {
      return enabled;
    }

    public void setEnabled(boolean enabled) {
      this.enabled = enabled;
    }

    public Duration getInterval() {
      return interval;
    }

    public void setInterval(Duration interval) {
      this.interval = interval;
    }

    public String getPath() {
      return path;
    }

    public void setPath(String path) {
      this.path = path;
    }
  }
}
