package io.epp4j.spring.gateway;

import java.util.List;
import org.springframework.context.Lifecycle;
import org.springframework.web.reactive.socket.WebSocketHandler;
import org.springframework.web.reactive.socket.WebSocketSession;
import org.springframework.web.reactive.socket.server.WebSocketService;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * Lets the decision of a websocket session routed by the {@code Epp4j} filter hear that the
 * session to the replica failed. SCG's {@code WebsocketRoutingFilter} upgrades the client's
 * connection first and only then opens the replica's, inside the handler it hands to this
 * service; a replica that refuses the upgrade (a 404, say) or cannot be reached makes that handler
 * fail, which Reactor Netty turns into a close frame for the client (code 1002) and a log line,
 * while the exchange itself has already ended well. Wrapped here, the handler's error fails the
 * decision ({@code onFailure}) before the client's connection closes, where the
 * {@link Epp4jResponseTapFilter} would otherwise complete it.
 *
 * <p>Every {@link WebSocketService} bean of the context is wrapped; exchanges the {@code Epp4j}
 * filter did not route pass through untouched.
 */
final class Epp4jWebSocketService implements WebSocketService, Lifecycle {
  private final WebSocketService delegate;

  Epp4jWebSocketService(WebSocketService delegate) {
    this.delegate = delegate;
  }

  @Override
  public Mono<Void> handleRequest(ServerWebExchange exchange, WebSocketHandler handler) {
    DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
    return delegate.handleRequest(exchange, tap == null ? handler : new Watched(handler, tap));
  }

  @Override
  public void start() {
    if (delegate instanceof Lifecycle l) {
      l.start();
    }
  }

  @Override
  public void stop() {
    if (delegate instanceof Lifecycle l) {
      l.stop();
    }
  }

  @Override
  public boolean isRunning() {
    return !(delegate instanceof Lifecycle l) || l.isRunning();
  }

  /** The gateway's proxy handler, its error reported to the decision. */
  private record Watched(WebSocketHandler handler, DecisionTap tap) implements WebSocketHandler {
    @Override
    public List<String> getSubProtocols() {
      return handler.getSubProtocols();
    }

    @Override
    public Mono<Void> handle(WebSocketSession session) {
      return handler.handle(session).doOnError(tap::failed);
    }
  }
}
