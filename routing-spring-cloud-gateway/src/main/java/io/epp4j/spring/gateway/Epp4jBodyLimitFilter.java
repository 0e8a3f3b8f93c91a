package io.epp4j.spring.gateway;

import static org.springframework.cloud.gateway.support.ServerWebExchangeUtils.CACHED_REQUEST_BODY_ATTR;
import static org.springframework.cloud.gateway.support.ServerWebExchangeUtils.GATEWAY_ROUTE_ATTR;

import java.util.Set;
import org.springframework.cloud.gateway.filter.AdaptCachedBodyGlobalFilter;
import org.springframework.cloud.gateway.filter.GatewayFilterChain;
import org.springframework.cloud.gateway.filter.GlobalFilter;
import org.springframework.cloud.gateway.route.Route;
import org.springframework.core.Ordered;
import org.springframework.http.HttpMethod;
import org.springframework.http.server.reactive.ServerHttpRequest;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * Puts the body size limit of a route's {@code Epp4j} filter on the request before SCG's
 * {@link AdaptCachedBodyGlobalFilter} reads the body into its cache. That filter caches the whole
 * body of the routes whose filters ask for it (SCG's {@code Retry} filter does, so that each
 * attempt can send it again) before any route filter runs, so the {@code Epp4j} filter's own
 * check would only see the body once it was read in full, however large. With this one just
 * ahead of it, a declared length above the limit is answered 413 without keeping the body (it is
 * discarded as it arrives, or, far above the limit, left unread and the connection closed), and
 * the read stops with a 413 once its bytes pass the limit, closing the connection, as the
 * {@code Epp4j} filter's own 413 does.
 *
 * <p>Only {@code POST}s, {@code PUT}s and {@code PATCH}es of routes whose filter list shows the
 * {@code Epp4j} filter ({@link Epp4jRouting#on}) are touched: the cache reads a {@code PUT}'s
 * body as it does a {@code POST}'s, although the {@code Epp4j} filter reads only a
 * {@code POST}'s. The limit is that of the router the filter routes with, a named pool's own
 * when it has one.
 */
public class Epp4jBodyLimitFilter implements GlobalFilter, Ordered {
  /** Just ahead of {@link AdaptCachedBodyGlobalFilter} ({@code HIGHEST_PRECEDENCE + 1000}). */
  public static final int ORDER = Ordered.HIGHEST_PRECEDENCE + 999;

  /** The methods whose requests carry a body (a GET's, a websocket upgrade's, is left alone). */
  private static final Set<HttpMethod> WITH_BODY =
      Set.of(HttpMethod.POST, HttpMethod.PUT, HttpMethod.PATCH);

  @Override
  public int getOrder() {
    return ORDER;
  }

  @Override
  public Mono<Void> filter(ServerWebExchange exchange, GatewayFilterChain chain) {
    ServerHttpRequest request = exchange.getRequest();
    // a PUT's or a PATCH's body too: the body cache reads it whole, though the Epp4j filter
    // routes those by their headers
    if (!WITH_BODY.contains(request.getMethod())
        || exchange.getAttribute(CACHED_REQUEST_BODY_ATTR) != null) {
      return chain.filter(exchange);
    }
    Route route = exchange.getAttribute(GATEWAY_ROUTE_ATTR);
    Epp4jRouting epp4j = route == null ? null : Epp4jRouting.on(route);
    int limit = epp4j == null ? -1 : epp4j.maxBodyBytes();
    if (limit < 0) {
      return chain.filter(exchange);
    }
    long declared = request.getHeaders().getContentLength();
    if (declared > limit) {
      return Epp4jGatewayFilter.declaredTooLarge(exchange, limit, declared);
    }
    ServerWebExchange limited = exchange.mutate()
        .request(new Epp4jGatewayFilter.LimitedBody(request, limit)).build();
    // the pieces read now are copies under the limit: the Epp4j filter takes them as they are
    exchange.getAttributes().put(Epp4jGatewayFilter.BODY_COPIED_ATTRIBUTE, limit);
    return chain.filter(limited).onErrorResume(Epp4jGatewayFilter.BodyTooLarge.class,
        e -> exchange.getResponse().isCommitted()
            ? Mono.error(e) : Epp4jGatewayFilter.tooLarge(exchange, limit, true));
  }
}
