package io.epp4j.spring.gateway;

import org.reactivestreams.Publisher;
import org.springframework.cloud.gateway.filter.GatewayFilterChain;
import org.springframework.cloud.gateway.filter.GlobalFilter;
import org.springframework.cloud.gateway.filter.NettyWriteResponseFilter;
import org.springframework.core.Ordered;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.core.io.buffer.DataBufferUtils;
import org.springframework.http.server.reactive.ServerHttpRequestDecorator;
import org.springframework.http.server.reactive.ServerHttpResponse;
import org.springframework.http.server.reactive.ServerHttpResponseDecorator;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.Disposable;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;
import reactor.netty.Connection;

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
 * written through the tap (an error, the client leaving before the status line).
 *
 * <p>A websocket session (vLLM's {@code /v1/realtime}) keeps its replica working for as long as
 * it is open, so its decision stays in flight until the client's connection closes, whichever
 * side ends the session, and is completed then; meanwhile it is renewed every quarter of the
 * router's {@code inFlightMaxAge} ({@code RoutingDecision.onActivity()}), so a long session is
 * not released as a decision the gateway forgot. The chain itself ends as soon as the gateway has
 * upgraded the connection, which would have completed the decision while the session had only
 * begun.
 */
public class Epp4jResponseTapFilter implements GlobalFilter, Ordered {
  public static final int ORDER = NettyWriteResponseFilter.WRITE_RESPONSE_FILTER_ORDER - 1;

  @Override
  public int getOrder() {
    return ORDER;
  }

  @Override
  public Mono<Void> filter(ServerWebExchange exchange, GatewayFilterChain chain) {
    boolean websocket = "websocket".equalsIgnoreCase(
        exchange.getRequest().getHeaders().getUpgrade());
    ServerWebExchange tapped = websocket ? exchange
        : exchange.mutate().response(new TappedResponse(exchange.getResponse(), exchange)).build();
    return chain.filter(tapped)
        .doOnSuccess(v -> {
          DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
          if (tap == null) {
            return;
          }
          if (websocket && finishAtClose(exchange, tap)) {
            return;
          }
          tap.finished(); // ignored when the answer's end reported already
        })
        .doOnError(e -> {
          DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
          if (tap != null) {
            tap.decision().onFailure(e);
          }
        })
        // the client went away; one that hung up once it had the whole answer (its
        // Content-Length's bytes, a stream's data: [DONE]) was served
        .doOnCancel(() -> {
          DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
          if (tap != null) {
            tap.clientLeft();
          }
        })
        // the exchange is over: its decision is finished (a websocket session's has a timer of
        // its own, from finishAtClose), and the renewal timer would hold it, with its prompt,
        // until its next tick
        .doFinally(signal -> {
          DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
          if (tap != null) {
            tap.stopRenewing();
          }
          // the body buffer SCG cached before the Epp4j filter, whose cache attribute holds a
          // copy now: this exchange's one reference to it, released once
          Object scgBody = exchange.getAttributes()
              .remove(Epp4jGatewayFilter.SCG_CACHED_BODY_ATTRIBUTE);
          if (scgBody instanceof DataBuffer buffer) {
            DataBufferUtils.release(buffer);
          }
        });
  }

  /**
   * Finishes the decision of an upgraded websocket exchange when the client's connection closes
   * (at once if it has already); false when the server is not Reactor Netty, whose connection
   * tells that, and the decision is then finished with the upgrade.
   */
  private static boolean finishAtClose(ServerWebExchange exchange, DecisionTap tap) {
    Object connection = ServerHttpRequestDecorator.getNativeRequest(exchange.getRequest());
    if (connection instanceof Connection c) {
      // the session is served for as long as it is open, however long that is
      Disposable renewals = Flux.interval(tap.renewEvery())
          .subscribe(tick -> tap.decision().onActivity());
      c.onDispose(() -> {
        renewals.dispose();
        tap.connectionClosed();
      });
      return true;
    }
    return false;
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
