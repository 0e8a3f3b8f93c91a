package io.epp4j.spring.gateway;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Modifier;
import java.util.List;
import java.util.logging.Logger;
import org.aopalliance.intercept.MethodInterceptor;
import org.springframework.aop.framework.AopConfigException;
import org.springframework.aop.framework.ProxyFactory;
import org.springframework.context.Lifecycle;
import org.springframework.web.reactive.socket.WebSocketHandler;
import org.springframework.web.reactive.socket.WebSocketSession;
import org.springframework.web.reactive.socket.client.WebSocketClient;
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
 * <p>A session the replica ends other than with a normal close (its connection drops without a
 * close frame, or it closes with a code other than 1000) fails the decision as well: see
 * {@link SessionWatch}, which needs the gateway's {@code WebSocketClient} proxied too
 * ({@link #watchReplicaSessions}). The decision of a session is finished only once both the
 * client's connection has closed and this handler has ended, so that such a failure, which the
 * handler learns last, is not preceded by a completion.
 *
 * <p>Every {@link WebSocketService} bean of the context is wrapped; exchanges the {@code Epp4j}
 * filter did not route pass through untouched.
 */
final class Epp4jWebSocketService implements WebSocketService, Lifecycle {
  private static final Logger LOG = Logger.getLogger(Epp4jWebSocketService.class.getName());
  private final WebSocketService delegate;

  Epp4jWebSocketService(WebSocketService delegate) {
    this.delegate = delegate;
  }

  /**
   * The gateway's websocket client, proxied so that the replica's session of a watched exchange
   * passes through its {@link SessionWatch}. The proxy keeps the bean's class (SCG declares a
   * {@code ReactorNettyWebSocketClient}), or its interfaces when the class is final; only
   * {@code execute} with a handler is intercepted.
   */
  static Object watchReplicaSessions(WebSocketClient client) {
    try {
      return proxy(client);
    } catch (AopConfigException e) {
      // the session's decision still fails when the replica refuses or cannot be reached
      LOG.warning("websocket client " + client.getClass().getName() + " cannot be proxied ("
          + e.getMessage() + "): a websocket session whose replica drops its connection or"
          + " closes it abnormally completes its decision instead of failing it");
      return client;
    }
  }

  private static Object proxy(WebSocketClient client) {
    ProxyFactory pf = new ProxyFactory(client);
    pf.setProxyTargetClass(!Modifier.isFinal(client.getClass().getModifiers()));
    pf.addAdvice((MethodInterceptor) call -> {
      Object[] args = call.getArguments();
      if (!call.getMethod().getName().equals("execute") || args.length == 0
          || !(args[args.length - 1] instanceof WebSocketHandler handler)) {
        return call.proceed();
      }
      return Mono.deferContextual(ctx -> {
        SessionWatch watch = ctx.getOrDefault(SessionWatch.class, null);
        if (watch == null) {
          return execute(call.getMethod(), client, args);
        }
        Object[] a = args.clone();
        a[a.length - 1] = watch.replicaHandler(handler);
        return executeWatched(call.getMethod(), client, a, watch)
            .then(Mono.defer(watch::replicaEnded));
      });
    });
    return pf.getProxy();
  }

  /**
   * Opens the replica's session; when its connection fails before the upgrade is answered, opens
   * it to the decision's next endpoint instead (the first argument is the replica's URL).
   */
  private static Mono<Void> executeWatched(java.lang.reflect.Method execute, WebSocketClient client,
      Object[] args, SessionWatch watch) {
    return execute(execute, client, args).onErrorResume(e -> {
      if (!(args[0] instanceof java.net.URI url)) {
        return Mono.error(e);
      }
      io.epp4j.api.Endpoint next = watch.fallbackAfter(e);
      if (next == null) {
        return Mono.error(e);
      }
      Object[] again = args.clone();
      again[0] = SessionWatch.retarget(url, next);
      return executeWatched(execute, client, again, watch);
    });
  }

  private static Mono<Void> execute(java.lang.reflect.Method execute, WebSocketClient client,
      Object[] args) {
    try {
      // WebSocketClient.execute answers a Mono<Void>
      return ((Mono<?>) execute.invoke(client, args)).then();
    } catch (InvocationTargetException e) {
      return Mono.error(e.getCause() == null ? e : e.getCause());
    } catch (IllegalAccessException e) {
      return Mono.error(e);
    }
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

  /**
   * The gateway's proxy handler, its error reported to the decision, and the session's end
   * watched through the replica's side ({@link SessionWatch}, found in the Reactor context by the
   * wrapped {@link org.springframework.web.reactive.socket.client.WebSocketClient}).
   */
  private record Watched(WebSocketHandler handler, DecisionTap tap) implements WebSocketHandler {
    @Override
    public List<String> getSubProtocols() {
      return handler.getSubProtocols();
    }

    @Override
    public Mono<Void> handle(WebSocketSession session) {
      SessionWatch watch = new SessionWatch(tap);
      watch.clientSession(session);
      tap.sessionHandlerStarted();
      return handler.handle(session)
          .doOnError(tap::failed)
          .doFinally(signal -> tap.sessionHandlerEnded())
          .contextWrite(ctx -> ctx.put(SessionWatch.class, watch));
    }
  }
}
