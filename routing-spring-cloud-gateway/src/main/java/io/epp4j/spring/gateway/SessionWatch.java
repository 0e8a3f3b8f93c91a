package io.epp4j.spring.gateway;

import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import java.io.IOException;
import java.net.URI;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import org.jspecify.annotations.Nullable;
import org.reactivestreams.Publisher;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.core.io.buffer.DataBufferFactory;
import org.springframework.web.reactive.socket.CloseStatus;
import org.springframework.web.reactive.socket.HandshakeInfo;
import org.springframework.web.reactive.socket.WebSocketHandler;
import org.springframework.web.reactive.socket.WebSocketMessage;
import org.springframework.web.reactive.socket.WebSocketSession;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;

/**
 * How the replica's side of a websocket session routed by the {@code Epp4j} filter ended, seen
 * through the session SCG's proxy opens to the replica.
 *
 * <p>A session either side closes normally completes its decision (when the client's connection
 * closes, see {@link Epp4jResponseTapFilter}). A session the replica ends otherwise fails it:
 * its connection dropped without a close frame (its process died, say), or it closed with a
 * code other than 1000 (normal closure). A session the client ended (the proxy passed the
 * client's close, or its connection's end, on to the replica) never fails here. A replica's close
 * code reaches the client through the proxy; when the replica's connection drops without a close
 * frame, the client's session is closed here with 1011 (internal error) and a reason saying the
 * replica's connection was lost, where the proxy alone would close it without a status (1005).
 *
 * <p>When the replica's connection fails before the upgrade is answered (refused, reset) and the
 * decision names another endpoint, the session is opened there instead ({@link #fallbackAfter}):
 * the client's connection, upgraded already, waits meanwhile.
 *
 * <p>The replica's close status is the one its session reported through
 * {@link WebSocketSession#closeStatus()}, which SCG's proxy subscribes to when the session opens.
 */
final class SessionWatch {
  private final DecisionTap tap;
  /** The decision's endpoint the replica's session is being opened to. */
  private int attempt;
  private volatile boolean closedForClient;
  private volatile @Nullable WebSocketSession replica;
  private volatile @Nullable WebSocketSession client;
  private volatile @Nullable CloseStatus replicaStatus;

  SessionWatch(DecisionTap tap) {
    this.tap = tap;
  }

  /** The client's session, which the proxy relays to the replica's. */
  void clientSession(WebSocketSession session) {
    client = session;
  }

  /**
   * The decision's next endpoint, told to the decision ({@code onFallback}), when the session to
   * the current one failed to open with {@code error}, a connection failure (refused, reset,
   * closed before the upgrade's answer), and the decision names another; else null. A replica
   * that answered the upgrade (with a 404, say) is no connection failure: its session fails, as
   * a request with an HTTP answer does not fall back either.
   */
  @Nullable Endpoint fallbackAfter(Throwable error) {
    RoutingDecision d = tap.decision();
    List<Endpoint> endpoints = d.endpoints();
    if (replica != null || attempt + 1 >= endpoints.size()
        || !Epp4jGatewayFilter.connectionFailure(error)) {
      return null;
    }
    Endpoint next = endpoints.get(++attempt);
    d.onFallback(next);
    return next;
  }

  /** {@code url} with the authority of {@code endpoint}: scheme, path and query kept. */
  static URI retarget(URI url, Endpoint endpoint) {
    StringBuilder sb = new StringBuilder(64).append(url.getScheme()).append("://")
        .append(endpoint.id());
    String path = url.getRawPath();
    sb.append(path == null || path.isEmpty() ? "/" : path);
    if (url.getRawQuery() != null) {
      sb.append('?').append(url.getRawQuery());
    }
    return URI.create(sb.toString());
  }

  /** The proxy's handler of the replica's session, noting the replica's close status. */
  WebSocketHandler replicaHandler(WebSocketHandler handler) {
    return new WebSocketHandler() {
      @Override
      public List<String> getSubProtocols() {
        return handler.getSubProtocols();
      }

      @Override
      public Mono<Void> handle(WebSocketSession session) {
        replica = session;
        return handler.handle(new Session(session) {
          @Override
          public Mono<Void> send(Publisher<WebSocketMessage> messages) {
            // the proxy sends the client's messages on: when the replica's connection ends, the
            // sending is cancelled, and the client's session must hear it before the proxy's
            // handler ends, which would close it without a status
            return super.send(Flux.from(messages).doOnCancel(
                () -> closeClientIfReplicaLost().subscribe()));
          }

          @Override
          public Mono<CloseStatus> closeStatus() {
            return super.closeStatus().doOnNext(s -> replicaStatus = s);
          }

          @Override
          public Mono<Void> close(CloseStatus status) {
            if (replicaStatus == null) {
              // the proxy passes the client's close on; after the replica's own close it only
              // answers the client's echo of it
              closedForClient = true;
            }
            return super.close(status);
          }
        });
      }
    };
  }

  /**
   * The replica's session is over (the websocket client's {@code execute} completed, which it
   * does when the replica's connection closes, cancelling the proxy's handler if need be): fails
   * the decision unless the client ended the session or the replica closed it normally.
   */
  Mono<Void> replicaEnded() {
    if (replica == null || closedForClient) {
      return Mono.empty();
    }
    // a close frame's status is reported as the frame arrives, before the connection's end
    CloseStatus status = replicaStatus;
    String problem = status == null ? "the replica's connection closed without a close frame"
        : problem(status);
    if (problem.isEmpty()) {
      return Mono.empty();
    }
    tap.failed(new IOException(problem));
    return Mono.empty();
  }

  /**
   * When the replica's connection ended without a close frame (the client did not end the
   * session) and the client's session is still open, closes that with {@link #REPLICA_LOST}.
   */
  private Mono<Void> closeClientIfReplicaLost() {
    WebSocketSession c = client;
    if (closedForClient || replicaStatus != null || c == null || !c.isOpen()) {
      return Mono.empty();
    }
    return c.close(REPLICA_LOST).onErrorResume(e -> Mono.empty());
  }

  /** What the client's session is closed with when the replica's connection drops. */
  static final CloseStatus REPLICA_LOST =
      CloseStatus.SERVER_ERROR.withReason("the replica's connection was lost");

  /** What is wrong with a close status the replica sent; empty for a normal closure. */
  private static String problem(CloseStatus status) {
    if (status.getCode() == CloseStatus.NORMAL.getCode()) {
      return "";
    }
    if (status.getCode() == CloseStatus.NO_CLOSE_FRAME.getCode()) {
      return "the replica's connection closed without a close frame";
    }
    return "the replica closed the session with code " + status.getCode()
        + (status.getReason() == null || status.getReason().isEmpty()
            ? "" : " (" + status.getReason() + ")");
  }

  /** A session passing every call to another. */
  private static class Session implements WebSocketSession {
    private final WebSocketSession d;

    Session(WebSocketSession d) {
      this.d = d;
    }

    @Override
    public String getId() {
      return d.getId();
    }

    @Override
    public HandshakeInfo getHandshakeInfo() {
      return d.getHandshakeInfo();
    }

    @Override
    public DataBufferFactory bufferFactory() {
      return d.bufferFactory();
    }

    @Override
    public Map<String, Object> getAttributes() {
      return d.getAttributes();
    }

    @Override
    public Flux<WebSocketMessage> receive() {
      return d.receive();
    }

    @Override
    public Mono<Void> send(Publisher<WebSocketMessage> messages) {
      return d.send(messages);
    }

    @Override
    public boolean isOpen() {
      return d.isOpen();
    }

    @Override
    public Mono<Void> close(CloseStatus status) {
      return d.close(status);
    }

    @Override
    public Mono<CloseStatus> closeStatus() {
      return d.closeStatus();
    }

    @Override
    public WebSocketMessage textMessage(String payload) {
      return d.textMessage(payload);
    }

    @Override
    public WebSocketMessage binaryMessage(Function<DataBufferFactory, DataBuffer> payload) {
      return d.binaryMessage(payload);
    }

    @Override
    public WebSocketMessage pingMessage(Function<DataBufferFactory, DataBuffer> payload) {
      return d.pingMessage(payload);
    }

    @Override
    public WebSocketMessage pongMessage(Function<DataBufferFactory, DataBuffer> payload) {
      return d.pongMessage(payload);
    }
  }
}
