package io.epp4j.spring.gateway;

import io.epp4j.core.MetricsScraper;
import io.epp4j.core.Router;
import io.opentelemetry.api.OpenTelemetry;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.function.Consumer;
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
 *
 * <p>Pools may be added and removed while the gateway runs ({@link Epp4jRefresher} does when
 * their properties appear or go). A route finds its pool by name at each request, so a route
 * naming a removed pool answers 503 until the pool comes back or the route goes. Reading the
 * pools takes no lock; adding and removing are serialised.
 */
public final class Epp4jPools implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(Epp4jPools.class.getName());

  /** One named pool and what it owns. */
  static final class Pool {
    final PoolSettings settings;
    final Router router;
    final @Nullable MetricsScraper scraper;
    final @Nullable Epp4jDiscoveryPool discovery;

    // the filter of every route naming this pool
    final Epp4jGatewayFilter filter;

    Pool(PoolSettings settings, Router router, @Nullable MetricsScraper scraper,
        @Nullable Epp4jDiscoveryPool discovery) {
      this.settings = settings;
      this.router = router;
      this.scraper = scraper;
      this.discovery = discovery;
      this.filter = new Epp4jGatewayFilter(router, settings.scheme, settings.maxBodyBytes());
    }

    boolean discoveryOwnsPool() {
      return discovery != null;
    }
  }

  /** What building a pool needs besides its settings. */
  private record Context(List<Object> listeners, @Nullable OpenTelemetry otel,
      @Nullable DiscoveryClient discoveryClient, Consumer<Router.Builder> services) {}

  // replaced whole, under the lock, by add and remove; read without it
  private volatile Map<String, Pool> pools;
  private final @Nullable Context context; // null: pools cannot be added
  private final Object lock = new Object();
  private boolean closed; // under the lock

  private Epp4jPools(Map<String, Pool> pools, @Nullable Context context) {
    this.pools = Collections.unmodifiableMap(pools);
    this.context = context;
  }

  /** No named pools, and none can be added. */
  static Epp4jPools none() {
    return new Epp4jPools(new LinkedHashMap<>(), null);
  }

  /**
   * Builds every pool of {@code properties.getPools()}. Each value is checked first, and that
   * each pool has endpoints or a service id ({@link #checkHasReplicas}), all pools before any is
   * built; when one fails to build, those built already are closed again.
   *
   * @param listeners request and pool listeners registered with every pool's router
   * @param otel receives each pool's router metrics with the attribute {@code pool=<name>}
   */
  static Epp4jPools build(Epp4jProperties properties, List<Object> listeners,
      @Nullable OpenTelemetry otel, @Nullable DiscoveryClient discoveryClient) {
    return build(properties, listeners, otel, discoveryClient, b -> {});
  }

  /**
   * As {@link #build(Epp4jProperties, List, OpenTelemetry, DiscoveryClient)}, with
   * {@code services} applied to every pool's router builder, for the pools built now and those
   * added later (the router services the application shares, see {@link SharedRouterServices}).
   */
  static Epp4jPools build(Epp4jProperties properties, List<Object> listeners,
      @Nullable OpenTelemetry otel, @Nullable DiscoveryClient discoveryClient,
      Consumer<Router.Builder> services) {
    List<PoolSettings> all = new ArrayList<>();
    for (Map.Entry<String, Epp4jProperties.Pool> e : properties.getPools().entrySet()) {
      PoolSettings s = PoolSettings.of(properties, e.getKey(), e.getValue());
      s.validate();
      checkHasReplicas(s);
      all.add(s);
    }
    Context context = new Context(List.copyOf(listeners), otel, discoveryClient, services);
    Map<String, Pool> built = new LinkedHashMap<>();
    try {
      for (PoolSettings s : all) {
        String name = Objects.requireNonNull(s.name);
        built.put(name, buildOne(s, context));
      }
    } catch (RuntimeException e) {
      new Epp4jPools(built, null).close();
      throw e;
    }
    return new Epp4jPools(built, context);
  }

  /**
   * A named pool with no endpoint and no service id to look its replicas up with would start
   * empty, and every route naming it would answer 503: a configuration error (an empty variable
   * behind {@code endpoints} or {@code discovery.service-id}, say). The default pool is not
   * checked: a gateway may route with named pools only.
   */
  static void checkHasReplicas(PoolSettings s) {
    if (!s.hasServiceId() && s.parsedEndpoints().isEmpty()) {
      String id = s.serviceId;
      throw new Epp4jConfigurationException(s.prefix + " has nothing to route to: "
          + s.property("endpoints") + " lists no endpoint and "
          + s.property("discovery.service-id") + " is "
          + (id == null ? "unset" : "blank ('" + id + "')")
          + "; give the pool endpoints or a service id (an empty variable behind either"
          + " property leaves it without), or remove the pool's properties");
    }
  }

  /**
   * Builds and adds a pool while the gateway runs, with the listeners, telemetry and discovery
   * client the pools were built with. Routes naming it find it from their next request.
   *
   * @throws IllegalArgumentException naming the property when a setting is invalid, when the
   *     pool has neither endpoints nor a service id ({@link #checkHasReplicas}), or when a pool
   *     of that name exists; nothing is added then
   * @throws IllegalStateException when these pools are closed or cannot build pools
   */
  void add(PoolSettings s) {
    String name = Objects.requireNonNull(s.name);
    synchronized (lock) {
      if (closed) {
        throw new IllegalStateException("epp4j: the pools are closed");
      }
      Context c = context;
      if (c == null) {
        throw new IllegalStateException("epp4j: these pools cannot build pools");
      }
      if (pools.containsKey(name)) {
        throw new IllegalArgumentException("epp4j: pool '" + name + "' exists already");
      }
      s.validate();
      checkHasReplicas(s);
      Pool built = buildOne(s, c);
      Map<String, Pool> next = new LinkedHashMap<>(pools);
      next.put(name, built);
      pools = Collections.unmodifiableMap(next);
    }
  }

  /**
   * Removes a pool while the gateway runs and closes its scraper, discovery and router; its
   * requests in flight still finish and release their counts. Routes naming it answer 503.
   *
   * @return whether there was such a pool
   */
  boolean remove(String name) {
    Pool removed;
    synchronized (lock) {
      removed = pools.get(name);
      if (removed == null || closed) {
        return false;
      }
      Map<String, Pool> next = new LinkedHashMap<>(pools);
      next.remove(name);
      pools = Collections.unmodifiableMap(next);
    }
    closeAll(List.of(removed));
    return true;
  }

  private static Pool buildOne(PoolSettings s, Context c) {
    String name = Objects.requireNonNull(s.name);
    OpenTelemetry otel = c.otel();
    DiscoveryClient discoveryClient = c.discoveryClient();
    Router.Builder b = s.routerBuilder();
    c.services().accept(b);
    c.listeners().forEach(b::listener);
    if (otel != null) {
      b.openTelemetry(PoolTelemetry.withPool(otel, name));
    }
    Router router = s.build(b); // a config file with errors: names the pool's property
    MetricsScraper scraper = null;
    Epp4jDiscoveryPool discovery = null;
    try {
      if (s.metricsEnabled) {
        scraper = Epp4jAutoConfiguration.scraper(router, s);
      }
      if (s.hasServiceId() && discoveryClient != null) {
        discovery = new Epp4jDiscoveryPool(router, discoveryClient,
            Objects.requireNonNull(s.serviceId), s.refreshInterval,
            s.source("discovery.refresh-interval"), "epp4j-discovery-" + name);
      } else if (s.hasServiceId()) {
        // the pool's own refresh interval does nothing either; an inherited one is the
        // top-level property's, which the startup check names when nothing uses it
        String noEffect = s.property("discovery.service-id");
        if (s.setHere("discovery.refresh-interval")) {
          noEffect += ", " + s.property("discovery.refresh-interval");
        }
        LOG.warning("epp4j: " + noEffect + " set, but there is no DiscoveryClient: no lookup"
            + " runs with them, and pool '" + name + "' keeps " + s.property("endpoints"));
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

  /** The names of the pools: those configured at start in their order, then those added. */
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
    Map<String, Pool> now = pools;
    Pool p = now.get(name);
    if (p == null) {
      throw new Epp4jConfigurationException("epp4j: unknown pool '" + name + "'; known pools: "
          + (now.isEmpty() ? "none (define them under epp4j.pools.<name>.*)"
              : String.join(", ", now.keySet())));
    }
    return p;
  }

  @Nullable Pool find(String name) {
    return pools.get(name);
  }

  /** Stops every scraper and discovery timer, then closes every router. */
  @Override
  public void close() {
    Map<String, Pool> all;
    synchronized (lock) {
      if (closed) {
        return;
      }
      closed = true;
      all = pools;
    }
    closeAll(all.values());
  }

  private static void closeAll(Collection<Pool> all) {
    for (Pool p : all) {
      quietly(p.discovery, "discovery of pool '" + p.settings.name + "'");
      quietly(p.scraper, "metrics scraper of pool '" + p.settings.name + "'");
    }
    for (Pool p : all) {
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
