package io.epp4j.spring.gateway;

import io.epp4j.core.MetricsScraper;
import io.epp4j.core.Router;
import io.opentelemetry.api.OpenTelemetry;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;
import org.springframework.cloud.client.discovery.DiscoveryClient;

/**
 * The named pools of {@code epp4j.pools.<name>.*}: for each, its own {@link Router}, its
 * {@link MetricsScraper} (unless its metrics are off) and its {@link Epp4jDiscoveryPool} (when it
 * names a discovery service and the application has a {@code DiscoveryClient}). A route selects
 * one with {@code Epp4j=<name>}. Closing it (the context does) closes them all: scrapers and
 * discovery timers first, then the routers.
 */
public final class Epp4jPools implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(Epp4jPools.class.getName());

  /** One named pool and what it owns. */
  static final class Pool {
    final PoolSettings settings;
    final Router router;
    final @Nullable MetricsScraper scraper;
    final @Nullable Epp4jDiscoveryPool discovery;

    Pool(PoolSettings settings, Router router, @Nullable MetricsScraper scraper,
        @Nullable Epp4jDiscoveryPool discovery) {
      this.settings = settings;
      this.router = router;
      this.scraper = scraper;
      this.discovery = discovery;
    }

    String scheme() {
      return settings.scheme;
    }

    int maxBodyBytes() {
      return settings.maxBodyBytes();
    }

    boolean discoveryOwnsPool() {
      return discovery != null;
    }
  }

  private final Map<String, Pool> pools;

  private Epp4jPools(Map<String, Pool> pools) {
    this.pools = Collections.unmodifiableMap(pools);
  }

  /** No named pools. */
  static Epp4jPools none() {
    return new Epp4jPools(new LinkedHashMap<>());
  }

  /**
   * Builds every pool of {@code properties.getPools()}. Each value is checked first, all pools
   * before any is built; when one fails to build, those built already are closed again.
   *
   * @param listeners request and pool listeners registered with every pool's router
   * @param otel receives each pool's router metrics with the attribute {@code pool=<name>}
   */
  static Epp4jPools build(Epp4jProperties properties, List<Object> listeners,
      @Nullable OpenTelemetry otel, @Nullable DiscoveryClient discoveryClient) {
    List<PoolSettings> all = new ArrayList<>();
    for (Map.Entry<String, Epp4jProperties.Pool> e : properties.getPools().entrySet()) {
      PoolSettings s = PoolSettings.of(properties, e.getKey(), e.getValue());
      s.validate();
      all.add(s);
    }
    Map<String, Pool> built = new LinkedHashMap<>();
    Epp4jPools pools = new Epp4jPools(built);
    try {
      for (PoolSettings s : all) {
        String name = Objects.requireNonNull(s.name);
        built.put(name, buildOne(s, listeners, otel, discoveryClient));
      }
    } catch (RuntimeException e) {
      pools.close();
      throw e;
    }
    return pools;
  }

  private static Pool buildOne(PoolSettings s, List<Object> listeners,
      @Nullable OpenTelemetry otel, @Nullable DiscoveryClient discoveryClient) {
    String name = Objects.requireNonNull(s.name);
    Router.Builder b = s.routerBuilder();
    listeners.forEach(b::listener);
    if (otel != null) {
      b.openTelemetry(PoolTelemetry.withPool(otel, name));
    }
    Router router;
    try {
      router = b.build();
    } catch (RuntimeException e) { // a config file with errors: say which pool's
      throw new IllegalArgumentException(s.prefix + ": " + e.getMessage(), e);
    }
    MetricsScraper scraper = null;
    Epp4jDiscoveryPool discovery = null;
    try {
      if (s.metricsEnabled) {
        scraper = Epp4jAutoConfiguration.scraper(router, s);
      }
      if (s.hasServiceId() && discoveryClient != null) {
        discovery = new Epp4jDiscoveryPool(router, discoveryClient,
            Objects.requireNonNull(s.serviceId), s.refreshInterval,
            s.property("discovery.refresh-interval"), "epp4j-discovery-" + name);
      } else if (s.hasServiceId()) {
        LOG.warning("epp4j: " + s.property("discovery.service-id") + " is set but there is no"
            + " DiscoveryClient; pool '" + name + "' keeps " + s.property("endpoints"));
      }
    } catch (RuntimeException e) {
      if (scraper != null) {
        scraper.close();
      }
      router.close();
      throw e;
    }
    return new Pool(s, router, scraper, discovery);
  }

  /** The names of the pools, in the order they were configured. */
  public Set<String> names() {
    return pools.keySet();
  }

  /**
   * The router of pool {@code name}.
   *
   * @throws IllegalArgumentException naming the known pools when there is no such pool
   */
  public Router router(String name) {
    return pool(name).router;
  }

  /** The scraper of pool {@code name}, {@code null} when its metrics are off. */
  public @Nullable MetricsScraper scraper(String name) {
    return pool(name).scraper;
  }

  /** The discovery of pool {@code name}, {@code null} when its replicas are not discovered. */
  public @Nullable Epp4jDiscoveryPool discovery(String name) {
    return pool(name).discovery;
  }

  Pool pool(String name) {
    Pool p = pools.get(name);
    if (p == null) {
      throw new IllegalArgumentException("epp4j: unknown pool '" + name + "'; known pools: "
          + (pools.isEmpty() ? "none (define them under epp4j.pools.<name>.*)"
              : String.join(", ", pools.keySet())));
    }
    return p;
  }

  @Nullable Pool find(String name) {
    return pools.get(name);
  }

  /** Stops every scraper and discovery timer, then closes every router. */
  @Override
  public void close() {
    for (Pool p : pools.values()) {
      quietly(p.discovery, "discovery of pool '" + p.settings.name + "'");
      quietly(p.scraper, "metrics scraper of pool '" + p.settings.name + "'");
    }
    for (Pool p : pools.values()) {
      quietly(p.router, "router of pool '" + p.settings.name + "'");
    }
  }

  private static void quietly(@Nullable AutoCloseable c, String what) {
    if (c == null) {
      return;
    }
    try {
      c.close();
    } catch (Exception e) {
      LOG.log(Level.WARNING, "epp4j: closing the " + what + " failed", e);
    }
  }
}
