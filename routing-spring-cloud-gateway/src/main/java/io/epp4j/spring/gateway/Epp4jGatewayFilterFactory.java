package io.epp4j.spring.gateway;

import io.epp4j.core.Router;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.springframework.cloud.gateway.filter.GatewayFilter;
import org.springframework.cloud.gateway.filter.GatewayFilterChain;
import org.springframework.cloud.gateway.filter.OrderedGatewayFilter;
import org.springframework.cloud.gateway.filter.RouteToRequestUrlFilter;
import org.springframework.cloud.gateway.filter.factory.AbstractGatewayFilterFactory;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * The {@code Epp4j} filter: {@code filters: [Epp4j]} in a route definition, or
 * {@code f.filter(factory.filter())} in the Java DSL. It routes each OpenAI request of the route
 * to the replica epp4j picks; see {@link Epp4jGatewayFilter}.
 *
 * <p>Without arguments the filter uses the default router (the {@code epp4j.*} properties);
 * {@code Epp4j=llama} (or {@code args: {pool: llama}}, or {@code factory.filter("llama")}) uses
 * the router of the named pool {@code epp4j.pools.llama.*}, with that pool's scheme and body
 * size limit. A name no pool has fails the building of the route; the pool itself is looked up
 * at each request, so a pool added, rebuilt or removed at runtime is followed.
 */
public class Epp4jGatewayFilterFactory
    extends AbstractGatewayFilterFactory<Epp4jGatewayFilterFactory.Config> {

  /**
   * After {@link RouteToRequestUrlFilter} (10000), whose URL it rewrites, and before the
   * load-balancer filter (10150), which then leaves the {@code http} URL alone.
   */
  public static final int ORDER = RouteToRequestUrlFilter.ROUTE_TO_URL_FILTER_ORDER + 100;

  /** The shortcut argument: {@code Epp4j=<pool>}. */
  public static final String POOL_KEY = "pool";

  private final Router router;
  private final String scheme;
  private final int maxBodyBytes;
  private final Epp4jPools pools;
  /**
   * The pools of {@code epp4j.pools.<name>.*} when this factory was built without them (an
   * application's own factory made with the three-argument constructor): only so that a route
   * naming one of them is refused saying why, rather than as a pool nobody defined.
   */
  private volatile @Nullable Epp4jPools poolsNotGiven;

  /** A factory with the default router only. */
  public Epp4jGatewayFilterFactory(Router router, String scheme, int maxBodyBytes) {
    this(router, scheme, maxBodyBytes, Epp4jPools.none());
  }

  /** A factory with the default router and the named pools a route may select. */
  public Epp4jGatewayFilterFactory(Router router, String scheme, int maxBodyBytes,
      Epp4jPools pools) {
    super(Config.class);
    if (!scheme.equals("http") && !scheme.equals("https")) {
      throw new Epp4jConfigurationException("epp4j.scheme must be http or https, got '" + scheme + "'");
    }
    this.router = router;
    this.scheme = scheme;
    this.maxBodyBytes = maxBodyBytes;
    this.pools = pools;
  }

  /** The scheme of the default router's replicas. */
  String scheme() {
    return scheme;
  }

  /** The body size limit of the default router's routes. */
  int maxBodyBytes() {
    return maxBodyBytes;
  }

  /** The named pools a route may select. */
  Epp4jPools pools() {
    return pools;
  }

  /**
   * Notes the named pools this factory was not given, which a route's {@code Epp4j=<name>} then
   * cannot select; set by the auto-configuration's startup check.
   */
  void poolsNotGiven(Epp4jPools defined) {
    this.poolsNotGiven = defined;
  }

  /** The filter with the default router, for the Java DSL. */
  public GatewayFilter filter() {
    return apply(new Config());
  }

  /**
   * The filter with the router of the named pool, for the Java DSL.
   *
   * @throws IllegalArgumentException naming the known pools when there is no such pool
   */
  public GatewayFilter filter(String pool) {
    return apply(new Config().setPool(pool));
  }

  @Override
  public List<String> shortcutFieldOrder() {
    return List.of(POOL_KEY);
  }

  @Override
  public GatewayFilter apply(Config config) {
    String name = config.getPool();
    if (name == null || name.isBlank()) {
      return new OrderedGatewayFilter(new Epp4jGatewayFilter(router, scheme, maxBodyBytes), ORDER);
    }
    String pool = name.strip();
    try {
      pools.pool(pool); // a name no pool has is a mistake in the route: say so now
    } catch (IllegalArgumentException e) {
      Epp4jPools defined = poolsNotGiven;
      if (defined != null && !defined.names().isEmpty()) {
        // "known pools: none (define them ...)" would send the user to define pools they have
        List<String> named = new java.util.ArrayList<>();
        defined.names().forEach(n -> named.add(PoolSettings.poolPrefix(n)));
        throw new Epp4jConfigurationException("Epp4j filter: epp4j: pool '" + pool + "': "
            + (defined.find(pool) != null ? "it is defined" : "no such pool; defined are "
                + String.join(", ", named) + ",")
            + " but the application's own Epp4jGatewayFilterFactory bean was built without the"
            + " named pools: build it with new Epp4jGatewayFilterFactory(router, scheme,"
            + " maxBodyBytes, pools), pools being the Epp4jPools bean", e);
      }
      throw new Epp4jConfigurationException("Epp4j filter: " + e.getMessage(), e);
    }
    return new OrderedGatewayFilter(new NamedPoolFilter(pools, pool, maxBodyBytes), ORDER);
  }

  /**
   * Finds its pool at each request, so that a pool rebuilt or removed at runtime is followed:
   * a removed pool's route answers 503 ({@code routing_no_endpoints}), as a router without
   * endpoints does, until the pool is added again.
   */
  private static final class NamedPoolFilter implements Epp4jRouting {
    private final Epp4jPools pools;
    private final String name;
    // the top-level epp4j.max-body-size, which pools inherit: the limit while the pool is gone
    private final int topLevelLimit;

    NamedPoolFilter(Epp4jPools pools, String name, int topLevelLimit) {
      this.pools = pools;
      this.name = name;
      this.topLevelLimit = topLevelLimit;
    }

    @Override
    public Mono<Void> filter(ServerWebExchange exchange, GatewayFilterChain chain) {
      Epp4jPools.@Nullable Pool pool = pools.find(name);
      if (pool != null) {
        return pool.filter.filter(exchange, chain);
      }
      if (exchange.getResponse().isCommitted()) {
        return Mono.empty(); // a Retry filter's repeat after this 503: it is final
      }
      return Epp4jGatewayFilter.error(exchange, 503, "routing_no_endpoints",
          "epp4j pool '" + name + "' is not configured");
    }

    /**
     * The pool's limit; while the pool is gone, the top-level one: the route answers 503 then,
     * and SCG's body cache (behind a {@code Retry} filter) must not read a body of any length
     * first.
     */
    @Override
    public int maxBodyBytes() {
      Epp4jPools.@Nullable Pool pool = pools.find(name);
      return pool == null ? topLevelLimit : pool.filter.maxBodyBytes();
    }

    @Override
    public String toString() {
      return "Epp4j=" + name;
    }
  }

  /** The filter's one option: the named pool to route with; unset for the default router. */
  public static class Config {
    private @Nullable String pool;

    public @Nullable String getPool() {
      return pool;
    }

    public Config setPool(@Nullable String pool) {
      this.pool = pool;
      return this;
    }
  }
}
