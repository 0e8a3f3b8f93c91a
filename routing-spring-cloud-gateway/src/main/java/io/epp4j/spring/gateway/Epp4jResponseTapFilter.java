package io.epp4j.spring.gateway;

import java.util.concurrent.CancellationException;
import org.reactivestreams.Publisher;
import org.springframework.cloud.gateway.filter.GatewayFilterChain;
import org.springframework.cloud.gateway.filter.GlobalFilter;
import org.springframework.cloud.gateway.filter.NettyWriteResponseFilter;
import org.springframework.core.Ordered;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.http.server.reactive.ServerHttpResponse;
import org.springframework.http.server.reactive.ServerHttpResponseDecorator;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * Lets the {@link DecisionTap} of a routed request see the answer. The gateway writes the
 * response in {@link NettyWriteResponseFilter} (order -1) to the response it was handed, so the
 * wrapper has to be in place before that filter runs, well before the {@code Epp4j} filter
 * itself (order {@value Epp4jGatewayFilterFactory#ORDER}) picks the replica.
 *
 * <p>Which routes carry the {@code Epp4j} filter cannot be told from their filter lists: an
 * application may put it inside a filter of its own (a delegating, timing or logging wrapper)
 * that hides it. So every request (the filter routes every method) gets the wrapper, which does
 * nothing but look up the exchange attribute {@link DecisionTap#ATTRIBUTE} the {@code Epp4j}
 * filter sets when it routes: without it, writes pass through as they are. A websocket upgrade
 * is not wrapped (its answer is no body written here).
 *
 * <p>It also finishes the decision when the exchange ends without the answer having been
 * written through the tap (an error, the client leaving before the status line, or the end of
 * a websocket session).
 */
public class Epp4jResponseTapFilter implements GlobalFilter, Ordered {
  public static final int ORDER = NettyWriteResponseFilter.WRITE_RESPONSE_FILTER_ORDER - 1;

  @Override
  public int getOrder() {
    return ORDER;
  }

  @Override
  public Mono<Void> filter(ServerWebExchange exchange, GatewayFilterChain chain) {
    ServerWebExchange tapped = "websocket".equalsIgnoreCase(
        exchange.getRequest().getHeaders().getUpgrade()) ? exchange
        : exchange.mutate().response(new TappedResponse(exchange.getResponse(), exchange)).build();
    return chain.filter(tapped)
        .doOnSuccess(v -> {
          DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
          if (tap != null) {
            tap.finished(); // ignored when the answer's end reported already
          }
        })
        .doOnError(e -> {
          DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
          if (tap != null) {
            tap.decision().onFailure(e);
          }
        })
        .doOnCancel(() -> {
          DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
          if (tap != null) {
            tap.decision().onFailure(new CancellationException("client went away"));
          }
        });
  }

  /** Passes writes through the exchange's tap once the {@code Epp4j} filter has set one. */
  private static final class TappedResponse extends ServerHttpResponseDecorator {
    private final ServerWebExchange exchange;

    TappedResponse(ServerHttpResponse delegate, ServerWebExchange exchange) {
      super(delegate);
      this.exchange = exchange;
    }

    @Override
    public Mono<Void> writeWith(Publisher<? extends DataBuffer> body) {
      DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
      return super.writeWith(tap == null ? body : tap.watch(body));
    }

    @Override
    public Mono<Void> writeAndFlushWith(Publisher<? extends Publisher<? extends DataBuffer>> body) {
      DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
      return super.writeAndFlushWith(tap == null ? body : tap.watchChunks(body));
    }
  }
}
