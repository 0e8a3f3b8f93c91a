package io.epp4j.spring.gateway;

import org.jspecify.annotations.Nullable;
import org.springframework.cloud.gateway.filter.GatewayFilter;
import org.springframework.cloud.gateway.filter.OrderedGatewayFilter;
import org.springframework.cloud.gateway.route.Route;

/**
 * A filter that routes a request with epp4j: the {@code Epp4j} filter of a route, on the default
 * router or on a named pool.
 */
interface Epp4jRouting extends GatewayFilter {

  /**
   * The request body size limit of the router this filter routes with now; for a named pool that
   * is not configured at the moment, the top-level {@code epp4j.max-body-size}; -1 for none.
   */
  int maxBodyBytes();

  /**
   * The {@code Epp4j} filter in the route's filter list, seen through Spring's
   * {@link OrderedGatewayFilter} (the factory's own, and the Java DSL's
   * {@code filter(f, order, true)} around it); null when the list shows none, which includes a
   * filter of the application's own around it.
   */
  static @Nullable Epp4jRouting on(Route route) {
    for (GatewayFilter f : route.getFilters()) {
      GatewayFilter inner = f;
      while (inner instanceof OrderedGatewayFilter o) {
        inner = o.getDelegate();
      }
      if (inner instanceof Epp4jRouting epp4j) {
        return epp4j;
      }
    }
    return null;
  }
}
