package io.epp4j.spring.gateway;

import io.epp4j.core.OpenAiRequestParser;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.util.unit.DataSize;

/**
 * The {@code epp4j.*} properties: the replica pool, the routing configuration and the knobs of
 * the gateway filter; {@code epp4j.pools.<name>.*} adds further pools, each with a router of its
 * own, which a route selects with {@code Epp4j=<name>}.
 *
 * <p>An {@code epp4j.*} property that binds to none of these fields (a misspelled
 * {@code epp4j.endpoint}, say, or {@code epp4j.pools.llama.endpoint}) fails startup naming it,
 * in any of Spring's relaxed forms: it would otherwise be ignored, leaving a pool empty.
 */
@ConfigurationProperties(prefix = "epp4j", ignoreUnknownFields = false)
public class Epp4jProperties {
  /** Replicas as {@code host:port}, e.g. {@code 10.0.0.1:8000,10.0.0.2:8000}. */
  private List<String> endpoints = new ArrayList<>();

  /**
   * Scheme of the requests the gateway sends to the replicas, and of the metrics scrapes; unset:
   * {@code http} for the requests, and for the scrapes the {@code scheme} of the routing
   * configuration's {@code metrics-data-source} plugin (else {@code http}). Set, it is the scrape
   * scheme too, whatever the configuration says.
   */
  private @Nullable String scheme;

  /**
   * Path of an EndpointPickerConfig YAML file. When neither this nor {@code preset} is set, the
   * EPP default profile is used.
   */
  private @Nullable String configFile;

  /**
   * Name of a shipped configuration ({@code epp4j}). Set together with {@code config-file}, it
   * fails startup naming both: each is a whole routing configuration.
   */
  private @Nullable String preset;

  /** Largest request body the filter reads; a larger one is answered 413. */
  private DataSize maxBodySize = DataSize.ofBytes(OpenAiRequestParser.DEFAULT_MAX_BODY_BYTES);

  /**
   * Request headers that carry the session key, tried in order. Each must be an HTTP header name
   * (letters, digits and {@code !#$%&'*+-.^_`|~}); a blank one or one with spaces or other
   * separators fails startup naming this property.
   */
  private List<String> sessionHeaders = new ArrayList<>(OpenAiRequestParser.DEFAULT_SESSION_HEADERS);

  /**
   * A routed request still in flight after this long is released from the load counters, in case
   * its outcome was never reported; at least 400ms, since the filter renews a served request's
   * decision every quarter of it, but no more often than every 100 ms. Unset: the router's
   * default (10 minutes).
   */
  private @Nullable Duration inFlightMaxAge;

  /** Scraping of the replicas' Prometheus metrics (queue, KV-cache use). */
  private final Metrics metrics = new Metrics();

  /** The pool from a Spring Cloud DiscoveryClient instead of {@code endpoints}. */
  private final Discovery discovery = new Discovery();

  /**
   * Named pools, each with its own router, for routes with {@code Epp4j=<name>}. A name is made
   * of letters, digits, {@code -} and {@code _}. Unset {@code scheme}, {@code max-body-size},
   * {@code session-headers}, {@code in-flight-max-age}, {@code discovery.refresh-interval} and
   * {@code metrics.*} take the top-level {@code epp4j.*} value; {@code endpoints},
   * {@code config-file}, {@code preset} and {@code discovery.service-id} are the pool's own.
   */
  private final Map<String, Pool> pools = new LinkedHashMap<>();

  public List<String> getEndpoints() {
    return endpoints;
  }

  public void setEndpoints(List<String> endpoints) {
    this.endpoints = endpoints;
  }

  public @Nullable String getScheme() {
    return scheme;
  }

  public void setScheme(@Nullable String scheme) {
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

  public Map<String, Pool> getPools() {
    return pools;
  }

  /**
   * The {@code epp4j.pools.<name>.*} properties of one named pool. A property left unset takes
   * the top-level {@code epp4j.*} value, except {@code endpoints}, {@code config-file},
   * {@code preset} and {@code discovery.service-id}, which belong to the pool alone.
   */
  public static class Pool {
    /** Replicas of this pool as {@code host:port}. */
    private List<String> endpoints = new ArrayList<>();

    /** Path of this pool's EndpointPickerConfig YAML file; unset: the EPP default profile. */
    private @Nullable String configFile;

    /**
     * Shipped configuration of this pool by name. Set together with this pool's
     * {@code config-file}, it fails startup naming both.
     */
    private @Nullable String preset;

    /**
     * Scheme towards this pool's replicas and of its metrics scrapes; unset: {@code epp4j.scheme}
     * (both unset: as there).
     */
    private @Nullable String scheme;

    /** Largest request body of this pool's routes; unset: {@code epp4j.max-body-size}. */
    private @Nullable DataSize maxBodySize;

    /**
     * Headers carrying the session key, each an HTTP header name; unset:
     * {@code epp4j.session-headers}.
     */
    private @Nullable List<String> sessionHeaders;

    /** Safety net for unfinished decisions; unset: {@code epp4j.in-flight-max-age}. */
    private @Nullable Duration inFlightMaxAge;

    /** Scraping of this pool's replica metrics; each unset value: {@code epp4j.metrics.*}. */
    private final PoolMetrics metrics = new PoolMetrics();

    /** This pool's replicas from a Spring Cloud DiscoveryClient service. */
    private final PoolDiscovery discovery = new PoolDiscovery();

    public List<String> getEndpoints() {
      return endpoints;
    }

    public void setEndpoints(List<String> endpoints) {
      this.endpoints = endpoints;
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

    public @Nullable String getScheme() {
      return scheme;
    }

    public void setScheme(@Nullable String scheme) {
      this.scheme = scheme;
    }

    public @Nullable DataSize getMaxBodySize() {
      return maxBodySize;
    }

    public void setMaxBodySize(@Nullable DataSize maxBodySize) {
      this.maxBodySize = maxBodySize;
    }

    public @Nullable List<String> getSessionHeaders() {
      return sessionHeaders;
    }

    public void setSessionHeaders(@Nullable List<String> sessionHeaders) {
      this.sessionHeaders = sessionHeaders;
    }

    public @Nullable Duration getInFlightMaxAge() {
      return inFlightMaxAge;
    }

    public void setInFlightMaxAge(@Nullable Duration inFlightMaxAge) {
      this.inFlightMaxAge = inFlightMaxAge;
    }

    public PoolMetrics getMetrics() {
      return metrics;
    }

    public PoolDiscovery getDiscovery() {
      return discovery;
    }
  }

  /** The {@code epp4j.pools.<name>.discovery.*} properties. */
  public static class PoolDiscovery {
    /**
     * DiscoveryClient service id whose instances are this pool; replaces its endpoints. Blank is
     * unset; whitespace before or after the name fails startup.
     */
    private @Nullable String serviceId;

    /** Time between two lookups; unset: {@code epp4j.discovery.refresh-interval}. */
    private @Nullable Duration refreshInterval;

    public @Nullable String getServiceId() {
      return serviceId;
    }

    public void setServiceId(@Nullable String serviceId) {
      this.serviceId = serviceId;
    }

    public @Nullable Duration getRefreshInterval() {
      return refreshInterval;
    }

    public void setRefreshInterval(@Nullable Duration refreshInterval) {
      this.refreshInterval = refreshInterval;
    }
  }

  /** The {@code epp4j.pools.<name>.metrics.*} properties; each unset one inherits. */
  public static class PoolMetrics {
    /** Whether this pool's replicas are scraped; unset: {@code epp4j.metrics.enabled}. */
    private @Nullable Boolean enabled;

    /** Time between two scrapes of one replica; unset: {@code epp4j.metrics.interval}. */
    private @Nullable Duration interval;

    /**
     * Metrics path on each replica; unset: {@code epp4j.metrics.path} (both unset: the pool's
     * {@code metrics-data-source}, else {@code /metrics}).
     */
    private @Nullable String path;

    /**
     * Whether this pool's https scrapes take any certificate the replicas present; unset:
     * {@code epp4j.metrics.insecure-skip-verify} (both unset: the pool's
     * {@code metrics-data-source}, else false).
     */
    private @Nullable Boolean insecureSkipVerify;

    public @Nullable Boolean getInsecureSkipVerify() {
      return insecureSkipVerify;
    }

    public void setInsecureSkipVerify(@Nullable Boolean insecureSkipVerify) {
      this.insecureSkipVerify = insecureSkipVerify;
    }

    public @Nullable Boolean getEnabled() {
      return enabled;
    }

    public void setEnabled(@Nullable Boolean enabled) {
      this.enabled = enabled;
    }

    public @Nullable Duration getInterval() {
      return interval;
    }

    public void setInterval(@Nullable Duration interval) {
      this.interval = interval;
    }

    public @Nullable String getPath() {
      return path;
    }

    public void setPath(@Nullable String path) {
      this.path = path;
    }
  }

  /** The {@code epp4j.discovery.*} properties. */
  public static class Discovery {
    /**
     * Spring Cloud DiscoveryClient service id whose instances are the pool; replaces
     * {@code endpoints} once the first lookup returns. Blank is unset; whitespace before or
     * after the name fails startup.
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

    /**
     * Path of the Prometheus metrics on each replica; unset: the {@code path} of the routing
     * configuration's {@code metrics-data-source} plugin (followed across reloads), else
     * {@code /metrics}. Set, it wins over the configuration.
     */
    private @Nullable String path;

    /**
     * Whether https scrapes take any certificate the replicas present (self-signed, expired,
     * issued for another name) instead of checking it against the JVM's trust store and the
     * replica's address. The scrape stays encrypted but is no longer authenticated: whoever can
     * intercept it can feed the router made-up load figures, so only for a trusted network.
     * Unset: the {@code insecureSkipVerify} of the routing configuration's
     * {@code metrics-data-source} plugin (followed across reloads), else false. Set, true or
     * false, it wins over the configuration. No effect on http scrapes.
     */
    private @Nullable Boolean insecureSkipVerify;

    public @Nullable Boolean getInsecureSkipVerify() {
      return insecureSkipVerify;
    }

    public void setInsecureSkipVerify(@Nullable Boolean insecureSkipVerify) {
      this.insecureSkipVerify = insecureSkipVerify;
    }

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

    public @Nullable String getPath() {
      return path;
    }

    public void setPath(@Nullable String path) {
      this.path = path;
    }
  }
}
