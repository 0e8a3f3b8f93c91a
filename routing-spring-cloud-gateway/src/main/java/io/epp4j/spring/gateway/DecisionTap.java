package io.epp4j.spring.gateway;

import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.UsageScanner;
import java.io.IOException;
import java.time.Duration;
import java.util.concurrent.CancellationException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.jspecify.annotations.Nullable;
import org.reactivestreams.Publisher;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpStatusCode;
import org.springframework.http.MediaType;
import org.springframework.http.server.reactive.ServerHttpResponse;
import reactor.core.Disposable;
import reactor.core.Fuseable;
import reactor.core.publisher.Flux;

/**
 * Watches the replica's answer on its way to the client, buffer by buffer as the gateway writes
 * it (streamed answers keep their flush per chunk; nothing is held back), and reports the outcome
 * to the decision: the first byte of a 2xx answer is the first token, the end of the answer
 * completes it with the {@code usage} the answer carried (read by routing-core's
 * {@link UsageScanner} as the buffers pass, holding at most {@value UsageScanner#LIMIT} bytes),
 * an error or the client going away fails it. A server-sent stream is whole at
 * {@code data: [DONE]}: a replica connection that breaks after it ends the answer cleanly and
 * completes the decision.
 *
 * <p>The {@code Epp4j} filter creates it and leaves it in the exchange attribute
 * {@link #ATTRIBUTE}; {@link Epp4jResponseTapFilter}, which runs before the gateway writes the
 * response, wraps the response so that the writes pass through {@link #watch}.
 *
 * <p>An answer the replica did not serve is no success of the replica's: a request that no
 * routing filter sent (a filter after the {@code Epp4j} filter answered it, an authorization
 * check's 401 say) fails its decision whatever its status, and an answer written after the chain
 * failed (the gateway's own 504 when the replica is too slow) is the gateway's
 * ({@link #servedByReplica}).
 */
final class DecisionTap {
  /** Exchange attribute holding the tap of a routed request. */
  static final String ATTRIBUTE = DecisionTap.class.getName();

  private final RoutingDecision decision;
  private final ServerHttpResponse response;
  /** The shortest time between two renewals of a served request's decision. */
  static final Duration MIN_RENEWAL = Duration.ofMillis(100);
  /**
   * The longest period Reactor's interval takes (it counts in nanoseconds): a router whose
   * {@code inFlightMaxAge} is longer than that (its safety net off, as with
   * {@code ChronoUnit.FOREVER}) would otherwise fail every request it routes.
   */
  private static final Duration MAX_RENEWAL = Duration.ofNanos(Long.MAX_VALUE);
  private final Duration renewEvery;
  // whether a routing filter took the request (SCG's GATEWAY_ALREADY_ROUTED_ATTR)
  private final BooleanSupplier sent;
  // the chain after the Epp4j filter ended in an error, or was cancelled before its end: an
  // answer written now is the gateway's (its error page, a circuit breaker's 504)
  private volatile boolean chainFailed;
  private volatile boolean answered;
  private volatile boolean finished;
  private boolean success;
  // the 5xx status the response had when the chain after the Epp4j filter ended, set by the
  // replica's answer: a filter in front (SCG's CircuitBreaker with statusCodes and a fallbackUri)
  // may clear it and write an answer of its own, which the replica did not serve
  private volatile @Nullable HttpStatusCode replicaFailure;
  // created with the first buffer of a 2xx answer, from its content type
  private @Nullable UsageScanner usage;
  // the answer's Content-Length (-1 without one), read at its first buffer, and the bytes of it
  // handed to the writer so far: all of them, the answer is whole whatever the client does next
  private long declaredLength = -1;
  private long bytesSeen;
  private volatile boolean declaredLengthSeen;
  // a server-sent answer's data: [DONE] line (with its line end) was handed to the writer
  private volatile boolean doneSeen;

  DecisionTap(ServerHttpResponse response, RoutingDecision decision) {
    this(response, decision, Duration.ofMinutes(10), () -> true);
  }

  /**
   * @param inFlightMaxAge the router's; a websocket session renews its decision every quarter
   *                       of it while it is open ({@link #renewEvery})
   * @param sent           whether a routing filter has taken the request, towards the replica
   */
  DecisionTap(ServerHttpResponse response, RoutingDecision decision, Duration inFlightMaxAge,
      BooleanSupplier sent) {
    this.response = response;
    this.decision = decision;
    this.sent = sent;
    Duration quarter = inFlightMaxAge.dividedBy(4);
    this.renewEvery = quarter.compareTo(MIN_RENEWAL) < 0 ? MIN_RENEWAL
        : quarter.compareTo(MAX_RENEWAL) > 0 ? MAX_RENEWAL : quarter;
  }

  // the timer of renewWhileServed: it holds the decision, and through it the request with its
  // prompt, so it must end with the exchange, not at its first tick after the decision finished
  private volatile @Nullable Disposable renewals;

  /**
   * Renews the decision every {@link #renewEvery} until it is finished or {@link #stopRenewing}
   * is called, whichever comes first: a request is served until its decision is finished, and an
   * answer may take longer than the router's {@code inFlightMaxAge}.
   */
  void renewWhileServed() {
    renewals = Flux.interval(renewEvery).takeWhile(tick -> !decision.isFinished())
        .subscribe(tick -> decision.onActivity());
  }

  /**
   * Ends the renewals of {@link #renewWhileServed}: the exchange has ended (its answer is
   * written, or it failed or was cancelled), so the decision is finished, or, for a websocket
   * session, renewed by the session's own timer.
   */
  void stopRenewing() {
    Disposable r = renewals;
    if (r != null) {
      r.dispose();
    }
  }

  /**
   * How often an open websocket session tells its decision it is still served
   * ({@link RoutingDecision#onActivity()}), so that the router's {@code inFlightMaxAge} does not
   * release a session that is merely long.
   */
  Duration renewEvery() {
    return renewEvery;
  }

  RoutingDecision decision() {
    return decision;
  }

  /** Whether any byte of an answer reached this response. */
  boolean answered() {
    return answered;
  }

  /**
   * Whether the answer being written is the replica's, which the response's
   * {@value RoutingDecision#DESTINATION_HEADER} names: a routing filter sent the request and the
   * chain after the {@code Epp4j} filter did not fail. A websocket upgrade counts once SCG's
   * websocket routing filter took it, as its 101 is written before the replica's session opens.
   */
  boolean servedByReplica() {
    return sent.getAsBoolean() && !chainFailed;
  }

  /**
   * The chain after the {@code Epp4j} filter failed, or was cancelled before its end: whatever
   * is written now (the gateway's 504, say) is not the replica's answer.
   */
  void chainFailed() {
    chainFailed = true;
  }

  /**
   * The chain after the {@code Epp4j} filter ended well: the response's status is the replica's
   * (or the filter's own error). A 5xx or a 429 fails the decision whatever is written after it
   * (see {@link RoutingDecision#endpointFailed}).
   */
  void routed() {
    HttpStatusCode status = response.getStatusCode();
    if (status != null && RoutingDecision.endpointFailed(status.value())) {
      replicaFailure = status;
    }
  }

  /** The body of a {@code writeWith}, watched. */
  Flux<DataBuffer> watch(Publisher<? extends DataBuffer> body) {
    return watchEnd(Flux.<DataBuffer>from(body).doOnNext(this::seen), this::finished);
  }

  /**
   * The body of a {@code writeAndFlushWith}, watched chunk by chunk. The writer takes chunks
   * ahead of writing them (Reactor Netty's {@code sendGroups} is a {@code concatMap} with a
   * prefetch of 32), so the body may end, or break off, while chunks it handed out (the usage
   * chunk, {@code data: [DONE]}) wait to be written. A chunk that is a constant (the gateway
   * hands each buffer as {@code Flux.just(buffer)}) is read as it is handed out, so that the
   * body's end tells how the answer ended; any other chunk as it is written, and the answer then
   * ends once the body has ended and every such chunk has been read.
   */
  Flux<Publisher<DataBuffer>> watchChunks(Publisher<? extends Publisher<? extends DataBuffer>> body) {
    AtomicInteger open = new AtomicInteger(1); // the body itself, then each chunk read as written
    Runnable ended = () -> {
      if (open.decrementAndGet() == 0) {
        finished();
      }
    };
    return watchEnd(Flux.from(body).map(chunk -> {
      if (chunk instanceof Fuseable.ScalarCallable<?> constant) {
        if (constantOf(constant) instanceof DataBuffer buffer) {
          seen(buffer);
        }
        @SuppressWarnings("unchecked")
        Publisher<DataBuffer> same = (Publisher<DataBuffer>) chunk;
        return same;
      }
      open.incrementAndGet();
      return Flux.<DataBuffer>from(chunk).doOnNext(this::seen).doOnComplete(ended);
    }), ended);
  }

  private static @Nullable Object constantOf(Fuseable.ScalarCallable<?> constant) {
    try {
      return constant.call();
    } catch (Exception e) { // a constant has no reason to throw: the chunk is passed on as is
      return null;
    }
  }

  private <T> Flux<T> watchEnd(Flux<T> body, Runnable ended) {
    return body
        // the replica's connection broke after a whole answer: it ends cleanly and completes
        .onErrorResume(e -> wholeAnswerSeen(), e -> Flux.empty())
        .doOnComplete(ended)
        .doOnError(decision::onFailure)
        .doOnCancel(this::clientLeft);
  }

  /**
   * The client went away before the end of the replica's body reached the gateway: completion
   * when the answer was whole by then, else failure. A client that read the whole answer may close
   * before the body's end arrives: curl hangs up once it has the Content-Length's bytes, a
   * streaming client once it has {@code data: [DONE]}, while the replica's chunked body has yet
   * to end. The replica served it all; the answer counts as whole once its last bytes were
   * handed to the writer.
   */
  void clientLeft() {
    if (declaredLengthSeen || doneSeen) {
      finished();
    } else {
      decision.onFailure(new CancellationException("client went away"));
    }
  }

  /**
   * Whether the answer seen before an upstream error is whole: a server-sent stream that reached
   * {@code data: [DONE]}, where clients stop reading (its last line counts without a line end,
   * which the stream's end supplies), as the plain gateway and the Envoy server take it.
   */
  private boolean wholeAnswerSeen() {
    UsageScanner u = usage;
    if (u == null || finished) {
      return false;
    }
    u.finish(); // the stream has ended; finished() reads the same usage again
    return u.sawDone();
  }

  private void seen(DataBuffer buffer) {
    if (!answered) {
      HttpStatusCode status = response.getStatusCode();
      // a filter after the Epp4j filter answering by itself: no first token of the replica's
      success = replicaFailure == null && sent.getAsBoolean()
          && (status == null || status.is2xxSuccessful());
      if (success) {
        MediaType type = response.getHeaders().getContentType();
        usage = new UsageScanner(type == null ? null : type.toString(),
            response.getHeaders().getFirst(HttpHeaders.CONTENT_ENCODING));
      }
      declaredLength = response.getHeaders().getContentLength();
      answered = true;
    }
    bytesSeen += buffer.readableByteCount();
    if (declaredLength >= 0 && bytesSeen >= declaredLength) {
      declaredLengthSeen = true;
    }
    if (buffer.readableByteCount() == 0) {
      return;
    }
    UsageScanner u = usage;
    if (u == null) {
      return;
    }
    decision.onFirstToken(); // only the first call counts
    try (DataBuffer.ByteBufferIterator it = buffer.readableByteBuffers()) {
      while (it.hasNext()) {
        u.feed(it.next());
      }
    }
    if (!doneSeen && u.sawDone()) {
      doneSeen = true;
    }
  }

  /**
   * The exchange is routed again (SCG's {@code Retry} filter repeats the chain after an answer it
   * discards, a 5xx say): this attempt's answer never reaches the client, so its decision fails.
   */
  void superseded() {
    stopRenewing();
    if (finished) {
      return;
    }
    finished = true;
    usage = null;
    HttpStatusCode status = response.getStatusCode();
    decision.onFailure(new IOException("the request was routed again"
        + (status == null ? "" : " after an answer " + status.value())));
  }

  /**
   * The replica's side failed after the exchange had ended well: a websocket session the replica
   * refused or could not take, which the gateway reports only by closing the client's session.
   */
  void failed(Throwable cause) {
    stopRenewing();
    if (finished) {
      return;
    }
    finished = true;
    usage = null;
    decision.onFailure(cause);
  }

  // a websocket session: whether the client's connection has closed, and how many of the
  // gateway's session handlers (Epp4jWebSocketService) have not ended yet
  private boolean connectionClosed;
  private int sessionHandlers;

  /** A websocket session's handler began: the decision waits for its end too. */
  synchronized void sessionHandlerStarted() {
    sessionHandlers++;
  }

  /**
   * A websocket session's handler ended (it reported a failure of the replica's side first):
   * the session is finished once the client's connection has closed as well.
   */
  void sessionHandlerEnded() {
    synchronized (this) {
      if (--sessionHandlers > 0 || !connectionClosed) {
        return;
      }
    }
    finished();
  }

  /**
   * The client's connection of a websocket session closed: the session is finished, once the
   * handler of the session, which may still learn that the replica's side failed, has ended.
   */
  void connectionClosed() {
    synchronized (this) {
      connectionClosed = true;
      if (sessionHandlers > 0) {
        return;
      }
    }
    finished();
  }

  /**
   * The answer ended (or the chain ended without one): completion, unless the replica failed or
   * the request never reached it.
   */
  void finished() {
    stopRenewing();
    if (finished) { // the end of the answer, then the end of the exchange: one report, one parse
      return;
    }
    finished = true;
    if (!sent.getAsBoolean()) {
      // a filter after the Epp4j filter answered without sending the request: the endpoint
      // never received it, so it is not credited with a request served
      usage = null;
      HttpStatusCode status = response.getStatusCode();
      decision.onFailure(new IOException("the request was answered"
          + (status == null ? "" : " " + status.value())
          + " by a filter after the Epp4j filter and never sent to the endpoint"));
      return;
    }
    HttpStatusCode failure = replicaFailure;
    HttpStatusCode status = failure != null ? failure : response.getStatusCode();
    if (status != null && RoutingDecision.endpointFailed(status.value())) {
      decision.onFailure(new IOException("upstream answered " + status.value()));
    } else {
      UsageScanner u = usage;
      usage = null;
      decision.onComplete(u == null ? Usage.NONE : u.finish());
    }
  }
}
