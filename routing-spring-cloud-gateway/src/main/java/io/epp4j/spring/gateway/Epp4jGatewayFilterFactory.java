package io.epp4j.spring.gateway;

import io.epp4j.core.Router;
import org.springframework.cloud.gateway.filter.GatewayFilter;
import org.springframework.cloud.gateway.filter.OrderedGatewayFilter;
import org.springframework.cloud.gateway.filter.RouteToRequestUrlFilter;
import org.springframework.cloud.gateway.filter.factory.AbstractGatewayFilterFactory;

/**
 * The {@code Epp4j} filter: {@code filters: [Epp4j]} in a route definition, or
 * {@code f.filter(factory.filter())} in the Java DSL. It routes each OpenAI request of the route
 * to the replica epp4j picks; see {@link Epp4jGatewayFilter}.
 */
public class Epp4jGatewayFilterFactory
    extends AbstractGatewayFilterFactory<Epp4jGatewayFilterFactory.Config> {

  /**
   * After {@link RouteToRequestUrlFilter} (10000), whose URL it rewrites, and before the
   * load-balancer filter (10150), which then leaves the {@code http} URL alone.
   */
  public static final int ORDER = RouteToRequestUrlFilter.ROUTE_TO_URL_FILTER_ORDER + 100;

  private final Router router;
  private final String scheme;
  private final int maxBodyBytes;

  public Epp4jGatewayFilterFactory(Router router, String scheme, int maxBodyBytes) {
    super(Config.class);
    if (!scheme.equals("http") && !scheme.equals("https")) {
      throw new IllegalArgumentException("epp4j.scheme must be http or https, got '" + scheme + "'");
    }
    this.router = router;
    this.scheme = scheme;
    this.maxBodyBytes = maxBodyBytes;
  }

  /** The filter, for the Java DSL. */
  public GatewayFilter filter() {
    return apply(new Config());
  }

  @Override
  public GatewayFilter apply(Config config) {
    return new OrderedGatewayFilter(new Epp4jGatewayFilter(router, scheme, maxBodyBytes), ORDER);
  }

  /** The filter has no per-route options yet; the {@code epp4j.*} properties apply to all. */
  public static class Config {}
}
