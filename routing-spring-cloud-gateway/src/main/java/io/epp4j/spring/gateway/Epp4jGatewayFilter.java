package io.epp4j.spring.gateway;

import static org.springframework.cloud.gateway.support.ServerWebExchangeUtils.CACHED_REQUEST_BODY_ATTR;
import static org.springframework.cloud.gateway.support.ServerWebExchangeUtils.GATEWAY_REQUEST_URL_ATTR;
import static org.springframework.cloud.gateway.support.ServerWebExchangeUtils.GATEWAY_SCHEME_PREFIX_ATTR;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.epp4j.api.Endpoint;
import io.epp4j.api.HeaderChecks;
import io.epp4j.api.Rejection;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.RedactedException;
import io.epp4j.api.RepeatedHeaders;
import io.epp4j.api.Ticker;
import io.epp4j.core.Router;
import io.epp4j.scorers.PdProfileHandler;
import java.net.ConnectException;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;
import org.springframework.cloud.gateway.filter.GatewayFilterChain;
import org.springframework.cloud.gateway.support.ServerWebExchangeUtils;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.core.io.buffer.DataBufferUtils;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpMethod;
import org.springframework.http.HttpStatusCode;
import org.springframework.http.MediaType;
import org.springframework.http.server.reactive.ServerHttpRequest;
import org.springframework.http.server.reactive.ServerHttpRequestDecorator;
import org.springframework.http.server.reactive.ServerHttpResponse;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;

/**
 * Routes one OpenAI request: reads the body once (SCG's body cache, bounded by the size limit),
 * asks the router for a replica, points the gateway's request URL at it and lets the rest of the
 * chain send the request. The answer streams through a {@link DecisionTap} (installed by
 * {@link Epp4jResponseTapFilter}) that reports first token, usage and failure to the decision. A
 * request that is not a {@code POST} ({@code GET /v1/models}, ...) has no body to read: it is
 * routed by load with {@link Router#routeHeaders}, its headers read as a {@code POST}'s, and its
 * decision finished as a {@code POST}'s is; so is a {@code POST} without a body.
 *
 * <p>When the connection to the picked replica fails before any byte of an answer (refused,
 * reset), the request is sent to the decision's next endpoint, in order.
 *
 * <p>The route's {@code uri} is never used, whatever its scheme: on a route
 * {@code lb:ws://service} the gateway's load-balancer filter, which runs after this one, would
 * otherwise take the request (see {@link #send}).
 */
final class Epp4jGatewayFilter implements Epp4jRouting {
  private static final Logger LOG = Logger.getLogger(Epp4jGatewayFilter.class.getName());
  private static final ObjectMapper JSON = new ObjectMapper();
  /**
   * Set while an {@code Epp4j} filter's part of the chain runs, from its routing to the end of the
   * rest of the chain: another {@code Epp4j} filter further along that chain (a route listing two)
   * finds the request routed. Cleared before the end reaches SCG's {@code Retry} filter, which
   * then runs the chain again to be routed anew.
   */
  static final String ROUTING_ATTRIBUTE = Epp4jGatewayFilter.class.getName() + ".routing";
  /** Routes already warned about for listing more than one {@code Epp4j} filter. */
  private static final java.util.Set<String> WARNED_ROUTES =
      java.util.concurrent.ConcurrentHashMap.newKeySet();
  /**
   * The headers routing plugins asked for that this gateway left out: a name that is no HTTP
   * token or a value holding a control character, which Reactor Netty refuses (the request failed
   * with a 500 and was never sent) or, on an answer, would write as it is. Each is logged,
   * throttled per header name, naming the header and never its value; the count is the
   * {@value Epp4jAutoConfiguration#HEADERS_LEFT_OUT_METRIC} metric.
   */
  static final HeaderChecks.Refusals HEADER_REFUSALS = new HeaderChecks.Refusals(LOG,
      Ticker.system());

  private final Router router;
  private final String scheme;
  private final int maxBodyBytes;

  Epp4jGatewayFilter(Router router, String scheme, int maxBodyBytes) {
    this.router = router;
    this.scheme = scheme;
    this.maxBodyBytes = maxBodyBytes;
  }

  @Override
  public int maxBodyBytes() {
    return maxBodyBytes;
  }

  @Override
  public Mono<Void> filter(ServerWebExchange exchange, GatewayFilterChain chain) {
    ServerHttpRequest request = exchange.getRequest();
    if (exchange.getResponse().isCommitted()) {
      // SCG's Retry filter repeats after a 5xx this filter answered itself (502, 503): that
      // answer is written and final, so the request is not routed again
      return Mono.empty();
    }
    if (exchange.getAttribute(ROUTING_ATTRIBUTE) != null) {
      // an Epp4j filter earlier in this chain routed the request: routing it again would fail
      // that decision as replaced and send the request to this filter's pool instead, while the
      // body limit applied was the first filter's
      warnSecondFilter(exchange);
      return chain.filter(exchange);
    }
    if (!HttpMethod.POST.equals(request.getMethod())) {
      // GET /v1/models and the like carry no prompt: routed by load, their headers read as a
      // POST's (priority, so shedding and a 400 for a malformed one; session key; request id)
      return route(exchange, chain, request, null);
    }
    long declared = request.getHeaders().getContentLength();
    if (declared > maxBodyBytes) {
      return declaredTooLarge(exchange, maxBodyBytes, declared);
    }
    // Epp4jBodyLimitFilter read the body's pieces as copies under this filter's limit already
    boolean copied = Integer.valueOf(maxBodyBytes)
        .equals(exchange.getAttribute(BODY_COPIED_ATTRIBUTE));
    Object cached = exchange.getAttribute(CACHED_REQUEST_BODY_ATTR);
    if (cached instanceof DataBuffer buffer) {
      // SCG read it already: the Retry filter's body cache, through Epp4jBodyLimitFilter's limit,
      // or a predicate reading the body (ReadBody), before any filter, whole
      boolean over = buffer.readableByteCount() > maxBodyBytes;
      if (!copied) {
        keepCachedBodyApart(exchange, buffer, over);
      }
      return over ? tooLarge(exchange, false) : route(exchange, chain, request, bodyOrNone(buffer));
    }
    if (cached != null) {
      // SCG's CacheRequestBody filter leaves the body decoded (a String, a Map) in the attribute,
      // and the request replaying the bytes it read: those are what the replica gets
      return DataBufferUtils.join(request.getBody())
          .map(joined -> {
            try {
              return bytes(joined);
            } finally {
              DataBufferUtils.release(joined);
            }
          })
          .defaultIfEmpty(new byte[0])
          .flatMap(body -> body.length > maxBodyBytes ? tooLarge(exchange, false)
              : route(exchange, chain, request, body.length == 0 ? null : body));
    }
    ServerWebExchange limited = copied ? exchange : exchange.mutate()
        .request(new LimitedBody(request, maxBodyBytes)).build();
    return ServerWebExchangeUtils.cacheRequestBody(limited, replaying -> {
      DataBuffer body = exchange.getAttribute(CACHED_REQUEST_BODY_ATTR);
      return route(exchange, chain, replaying, bodyOrNone(body))
          .then(Mono.just(Boolean.TRUE));
    }).onErrorResume(BodyTooLarge.class,
        e -> tooLarge(exchange, true).then(Mono.just(Boolean.TRUE)))
        .then();
  }

  /**
   * Exchange attribute holding the body buffer SCG cached before this filter ran, once the cache
   * attribute holds a copy instead ({@link #keepCachedBodyApart}); {@link Epp4jResponseTapFilter}
   * releases it, once, when the exchange ends.
   */
  static final String SCG_CACHED_BODY_ATTRIBUTE = Epp4jGatewayFilter.class.getName() + ".scgBody";

  /**
   * Exchange attribute {@link Epp4jBodyLimitFilter} sets, to the limit it put on the body, when it
   * made the request's body a {@link LimitedBody}: the pieces read from it are copies of their
   * own under that limit, whether SCG's body cache (behind {@code Retry}) or this filter reads
   * them, so this filter, when its limit is the same, neither copies them again nor puts a copy
   * of the cached body in the cache ({@link #keepCachedBodyApart}).
   */
  static final String BODY_COPIED_ATTRIBUTE = Epp4jGatewayFilter.class.getName() + ".bodyCopied";

  /**
   * Puts a copy of a body SCG cached before this filter ran (the {@code ReadBody} predicate's, or
   * the body cache of {@code Retry} ahead of an {@code Epp4j} filter hidden in an application
   * filter) into the cache attribute, and keeps the buffer SCG cached, which its cached request
   * replays, for release once when the exchange ends. SCG's {@code RemoveCachedBodyFilter}
   * releases whatever the cache attribute holds until it is freed; over HTTP/2 a body of one DATA
   * frame is cached as that frame's content, sharing the reference count of the connection's read
   * buffer, so an answer written at once (a 400, a 429) had that buffer freed under Netty's HTTP/2
   * decoder, which failed and closed the connection with the client's other requests on it. The
   * copy is the cache's alone to free. Once per exchange: a repeat behind {@code Retry} finds it.
   * A body above the limit ({@code refused}) is never sent, so the cache gets an empty buffer
   * instead of a copy: the filter copies no more than the limit.
   */
  private static void keepCachedBodyApart(ServerWebExchange exchange, DataBuffer cached,
      boolean refused) {
    Map<String, Object> attributes = exchange.getAttributes();
    if (attributes.containsKey(SCG_CACHED_BODY_ATTRIBUTE)) {
      return;
    }
    DataBuffer copy = refused ? cached.factory().allocateBuffer(0)
        : cached.factory().wrap(bytes(cached));
    attributes.put(SCG_CACHED_BODY_ATTRIBUTE, cached);
    attributes.put(CACHED_REQUEST_BODY_ATTR, copy);
  }

  /** Routes the request with its {@code body}, or by its headers alone when it has none. */
  private Mono<Void> route(ServerWebExchange exchange, GatewayFilterChain chain,
      ServerHttpRequest request, byte @Nullable [] body) {
    DecisionTap previous = exchange.getAttribute(DecisionTap.ATTRIBUTE);
    if (previous != null) { // SCG's Retry filter repeats the chain: the earlier attempt ends here
      previous.superseded();
    }
    String coding = body == null ? null : contentCoding(request);
    if (coding != null) {
      return unsupportedCoding(exchange, coding);
    }
    // a header sent on several lines is its values joined in order (',', '; ' for cookie), as
    // Envoy and the ext_proc server read it (RepeatedHeaders), never its first line alone.
    // headerSet() gives each name once whatever its casing on the wire, with all its values:
    // Netty keeps X-Session-Id and x-session-id apart, and the request's forEach (the read-only
    // headers SCG hands filters) gives each of them with every value, joined twice
    Map<String, List<String>> lines = new LinkedHashMap<>();
    for (Map.Entry<String, List<String>> line : request.getHeaders().headerSet()) {
      lines.put(line.getKey(), line.getValue());
    }
    Map<String, String> headers = new HashMap<>(RepeatedHeaders.of(lines));
    // the request target, query included, as Envoy hands it over: hash and session keys may come
    // from a query parameter (query:<name>), which the plugins read from :path; the path is the
    // one route filters before this one (StripPrefix, RewritePath) left, which the replica gets
    URI target = request.getURI();
    String rawPath = target.getRawPath();
    String rawQuery = target.getRawQuery();
    headers.put(":path", (rawPath == null || rawPath.isEmpty() ? "/" : rawPath)
        + (rawQuery == null ? "" : "?" + rawQuery));
    // the client's address as the connection shows it (after Spring's ForwardedHeaderTransformer
    // when the application trusts its proxies' forwarded headers), for source-ip keys: the first
    // x-forwarded-for entry is whatever the client wrote
    java.net.InetSocketAddress remote = request.getRemoteAddress();
    if (remote != null && remote.getAddress() != null) {
      headers.put(":source-ip", remote.getAddress().getHostAddress());
    }
    RoutingDecision d = body == null ? router.routeHeaders(headers)
        : router.route(request.getURI().getPath(), headers, body);
    Rejection rejected = d.rejection();
    if (rejected != null) {
      return error(exchange, rejected.httpStatus(),
          "routing_" + rejected.reason().name().toLowerCase(Locale.ROOT), rejected.message());
    }
    URI url = exchange.getAttribute(GATEWAY_REQUEST_URL_ATTR);
    URI base = url != null ? url : request.getURI();
    // with prefill/decode disaggregation the decode server's sidecar learns where to prefill
    // from this header; without a prefill pick, a value the client sent is dropped, so that no
    // client chooses where its request is prefilled
    Endpoint prefill = PdProfileHandler.prefillEndpoint(d);
    java.util.Set<String> removed;
    Map<String, String> set;
    try {
      removed = HEADER_REFUSALS.removable(d.removedRequestHeaders());
      set = HEADER_REFUSALS.settable(d.requestHeaders(), HeaderChecks.Refusals.Kind.REQUEST_SET);
    } catch (RuntimeException e) {
      return headerAskFailed(exchange, d, e);
    }
    ServerHttpRequest forwarded = request.mutate()
        .header(RoutingDecision.DESTINATION_HEADER, d.destinationHeaderValue())
        .headers(h -> {
          if (prefill != null) {
            h.set(PdProfileHandler.PREFILLER_HEADER, prefill.id());
          } else {
            h.remove(PdProfileHandler.PREFILLER_HEADER);
          }
          // what the routing plugins asked for (p2p-source-producer's KV cache source)
          removed.forEach(h::remove);
          set.forEach(h::set);
        }).build();
    DecisionTap tap = new DecisionTap(exchange.getResponse(), d, router.inFlightMaxAge(),
        () -> ServerWebExchangeUtils.isAlreadyRouted(exchange));
    // a request is served until its decision is finished: an answer that is not streamed shows
    // nothing until its end, and one that streams may last longer than the router's
    // inFlightMaxAge, which would otherwise release the decision while the replica works on it;
    // the renewals end with the exchange (Epp4jResponseTapFilter) or the decision
    tap.renewWhileServed();
    ServerWebExchange routed = exchange.mutate().request(forwarded).build();
    if (previous == null) { // once per exchange: it reads the tap of the attempt that answers
      namesOnlyTheReplicasAnswers(exchange);
    }
    routed.getAttributes().put(DecisionTap.ATTRIBUTE, tap);
    Map<String, Object> attributes = exchange.getAttributes();
    attributes.put(ROUTING_ATTRIBUTE, tap);
    Mono<Void> sent;
    try {
      sent = send(routed, chain, base, d, 0, tap);
    } catch (RuntimeException e) {
      attributes.remove(ROUTING_ATTRIBUTE, tap);
      d.onFailure(e);
      throw e;
    }
    // the rest of the chain ends once the replica's status line is in; the answer is written
    // after it and watched by the tap
    AtomicBoolean ended = new AtomicBoolean();
    return sent
        // the status the replica answered, which a circuit breaker's fallback may replace
        .doOnSuccess(v -> tap.routed())
        .onErrorResume(e -> connectionFailure(e) && !tap.answered()
            && !exchange.getResponse().isCommitted(), e -> {
          d.onFailure(e);
          // the header names the endpoint that served the answer: none did
          exchange.getResponse().getHeaders().remove(RoutingDecision.DESTINATION_HEADER);
          return error(exchange, 502, "upstream_unavailable",
              "no replica of the decision could be reached");
        })
        .doOnTerminate(() -> {
          ended.set(true);
          attributes.remove(ROUTING_ATTRIBUTE, tap);
        })
        .doOnError(e -> {
          tap.chainFailed(); // what the client gets now is the gateway's error, a 504 say
          d.onFailure(e);
        })
        // a cancel after the end is no client leaving: SCG's Retry filter cancels the attempt it
        // is done with; the tap reports the answer that is still to be written
        .doOnCancel(() -> {
          attributes.remove(ROUTING_ATTRIBUTE, tap);
          if (!ended.get()) {
            tap.chainFailed(); // a filter in front gave up waiting (a circuit breaker's timeout)
            d.onFailure(new CancellationException("client went away"));
          }
        });
  }

  /** Longest {@code Content-Encoding} value quoted back in the 415. */
  private static final int MAX_QUOTED_CODING = 64;

  /**
   * The body's {@code Content-Encoding} when it names a coding other than {@code identity}, or
   * null. The router parses the bytes as sent: a compressed body is no JSON it can read.
   */
  private static @Nullable String contentCoding(ServerHttpRequest request) {
    List<String> values = request.getHeaders().get(HttpHeaders.CONTENT_ENCODING);
    if (values == null) {
      return null;
    }
    for (String value : values) {
      for (String coding : value.split(",")) {
        String c = coding.trim();
        if (!c.isEmpty() && !c.equalsIgnoreCase("identity")) {
          return String.join(", ", values).trim();
        }
      }
    }
    return null;
  }

  /**
   * The 415 for a body with a content coding (RFC 9110, 15.5.16, with {@code Accept-Encoding}
   * naming the one taken), before routing: the router would refuse its bytes as JSON that is not
   * valid UTF-8, a 400 naming neither the header nor the cause.
   */
  private static Mono<Void> unsupportedCoding(ServerWebExchange exchange, String coding) {
    String quoted = coding.length() > MAX_QUOTED_CODING
        ? coding.substring(0, MAX_QUOTED_CODING) + "..." : coding;
    exchange.getResponse().getHeaders().set(HttpHeaders.ACCEPT_ENCODING, "identity");
    return error(exchange, 415, "unsupported_content_encoding", "request body has"
        + " Content-Encoding '" + quoted + "', which the router cannot read: send it uncompressed");
  }

  /** Once per route: a route whose chain holds two {@code Epp4j} filters is routed by the first. */
  private static void warnSecondFilter(ServerWebExchange exchange) {
    org.springframework.cloud.gateway.route.Route route =
        exchange.getAttribute(ServerWebExchangeUtils.GATEWAY_ROUTE_ATTR);
    String id = route == null ? "?" : route.getId();
    if (WARNED_ROUTES.add(id)) {
      LOG.warning("epp4j: route '" + id + "' has more than one Epp4j filter; the first routes"
          + " its requests and the others do nothing: give the route one Epp4j filter");
    }
  }

  /**
   * Removes {@value RoutingDecision#DESTINATION_HEADER}, set for the replica's answer, from an
   * answer the replica did not serve, as the response is committed: one a filter after this one
   * wrote without sending the request (a 401), or the gateway's own error after the chain failed
   * (its 504 when the replica does not answer within the response timeout). The header would tell
   * the client that the replica answered. On an answer a replica served, sets the headers the
   * routing plugins asked for ({@link RoutingDecision#responseHeaders()}, such as the session
   * token of {@code session-affinity-scorer}), replacing the replica's own of the same name.
   */
  private static void namesOnlyTheReplicasAnswers(ServerWebExchange exchange) {
    ServerHttpResponse response = exchange.getResponse();
    response.beforeCommit(() -> {
      DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
      if (tap != null && !tap.servedByReplica()) {
        response.getHeaders().remove(RoutingDecision.DESTINATION_HEADER);
      } else if (tap != null) {
        Map<String, String> asked;
        try {
          asked = tap.decision().responseHeaders();
        } catch (RuntimeException e) {
          // the replica's answer goes out as it is, without the plugins' headers
          LOG.log(Level.WARNING, "epp4j: a response header a routing plugin asked for threw "
              + e.getClass().getName() + "; the answer goes out without the plugins' headers",
              RedactedException.of(e));
          return Mono.empty();
        }
        // a name that is no token or a value with a control character is left out, reported
        HEADER_REFUSALS.settable(asked, HeaderChecks.Refusals.Kind.RESPONSE_SET)
            .forEach(response.getHeaders()::set);
      }
      return Mono.empty();
    });
  }

  /**
   * Sends to the decision's endpoint {@code i}; on a connection failure before any answer, to
   * the next, telling the decision, so the router counts the request where it is served.
   */
  private Mono<Void> send(ServerWebExchange attempted, GatewayFilterChain chain, URI base,
      RoutingDecision d, int i, DecisionTap tap) {
    List<Endpoint> endpoints = d.endpoints();
    Endpoint target = endpoints.get(i);
    ServerWebExchange exchange = i > 0 ? fallingBack(attempted, d, target) : attempted;
    exchange.getAttributes().put(GATEWAY_REQUEST_URL_ATTR, retarget(base, target));
    // a route uri lb:ws://service leaves the prefix lb noted, which makes the load-balancer
    // filter (order 10150) take the request whatever its URL says: it would look the picked
    // endpoint's host up as a service (SCG's NoLoadBalancerClientFilter, without
    // spring-cloud-loadbalancer, answers 503). The URL names the replica already
    exchange.getAttributes().remove(GATEWAY_SCHEME_PREFIX_ATTR);
    exchange.getResponse().getHeaders().set(RoutingDecision.DESTINATION_HEADER, target.id());
    Mono<Void> attempt = chain.filter(exchange);
    if (i + 1 >= endpoints.size()) {
      return attempt;
    }
    return attempt.onErrorResume(
        e -> connectionFailure(e) && !tap.answered() && !exchange.getResponse().isCommitted(),
        e -> {
          // the routing filters mark the exchange routed; the next attempt must route again
          ServerWebExchangeUtils.reset(exchange);
          exchange.getAttributes().remove(ServerWebExchangeUtils.GATEWAY_ALREADY_ROUTED_ATTR);
          exchange.getAttributes().remove(ServerWebExchangeUtils.CLIENT_RESPONSE_ATTR);
          exchange.getAttributes().remove(ServerWebExchangeUtils.CLIENT_RESPONSE_CONN_ATTR);
          return send(exchange, chain, base, d, i + 1, tap);
        });
  }

  /**
   * Tells the decision that the request goes to {@code target} now, and sets the request headers
   * the plugins asked for again: a value may depend on the endpoint of the attempt
   * ({@code p2p-source-producer} never names the endpoint that computes the prompt as its
   * source).
   */
  private static ServerWebExchange fallingBack(ServerWebExchange exchange, RoutingDecision d,
      Endpoint target) {
    d.onFallback(target);
    java.util.Set<String> removed;
    java.util.Map<String, String> asked;
    java.util.Map<String, String> set;
    try {
      removed = HEADER_REFUSALS.removable(d.removedRequestHeaders());
      asked = d.requestHeaders();
      set = HEADER_REFUSALS.settable(asked, HeaderChecks.Refusals.Kind.REQUEST_SET);
    } catch (RuntimeException e) {
      // ends this attempt with an error whoever logs it (Spring's error handler) cannot quote
      // the prompt from: the class and the frames, not the message
      throw RedactedException.of(e);
    }
    if (removed.isEmpty() && asked.isEmpty()) {
      return exchange;
    }
    ServerHttpRequest again = exchange.getRequest().mutate().headers(h -> {
      removed.forEach(h::remove);
      // a header left out for this attempt does not keep the value set for an earlier one
      asked.keySet().forEach(name -> {
        if (!set.containsKey(name)) {
          h.remove(name);
        }
      });
      set.forEach(h::set);
    }).build();
    return exchange.mutate().request(again).build();
  }

  /**
   * Whether {@code e} says the replica's connection failed before it answered: refused, reset,
   * or closed before any response.
   */
  static boolean connectionFailure(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof ConnectException || t instanceof ClosedChannelException) {
        return true;
      }
      String name = t.getClass().getName();
      // Reactor Netty's "connection closed before any response" and Netty's reset
      if (name.endsWith("PrematureCloseException")
          || (t instanceof java.io.IOException && String.valueOf(t.getMessage()).contains("reset"))) {
        return true;
      }
      if (t.getCause() == t) {
        break;
      }
    }
    return false;
  }

  private URI retarget(URI base, Endpoint target) {
    StringBuilder sb = new StringBuilder(64).append(scheme).append("://").append(target.id());
    String path = base.getRawPath();
    sb.append(path == null || path.isEmpty() ? "/" : path);
    if (base.getRawQuery() != null) {
      sb.append('?').append(base.getRawQuery());
    }
    return URI.create(sb.toString());
  }

  /**
   * The body's bytes, or null for a POST without a body (vLLM's {@code /reset_prefix_cache},
   * {@code /sleep}): routed on its headers as a GET is, where an empty body would be refused as
   * no OpenAI request.
   */
  private static byte @Nullable [] bodyOrNone(@Nullable DataBuffer body) {
    return body == null || body.readableByteCount() == 0 ? null : bytes(body);
  }

  /** The readable bytes, without moving the cached buffer's read position (it is replayed). */
  private static byte[] bytes(DataBuffer buffer) {
    int n = buffer.readableByteCount();
    ByteBuffer copy = ByteBuffer.allocate(n);
    buffer.toByteBuffer(buffer.readPosition(), copy, 0, n);
    return copy.array();
  }

  private Mono<Void> tooLarge(ServerWebExchange exchange, boolean unread) {
    return tooLarge(exchange, maxBodyBytes, unread);
  }

  /**
   * The 413; {@code unread}: the body was refused before its end, so the connection is closed
   * after the answer ({@code Connection: close}) rather than kept alive: Reactor Netty would read
   * and drop the rest of the body, however long it says it is, before the next request.
   */
  /**
   * Declared lengths up to this much above the limit are read and discarded before the 413, as
   * servlet containers swallow a refused body (Tomcat's {@code maxSwallowSize} is 2 MB): a
   * client that sends its whole body before it reads the answer (most do) would otherwise find
   * the connection reset under its unsent bytes and never see the 413.
   */
  static final long SWALLOW_BYTES = 2L << 20;

  /**
   * The 413 for a request whose declared length is above the limit: after discarding its body
   * when that is at most {@link #SWALLOW_BYTES} above the limit (memory stays one network
   * buffer), else at once, closing the connection.
   */
  static Mono<Void> declaredTooLarge(ServerWebExchange exchange, int limit, long declared) {
    if (declared - limit > SWALLOW_BYTES) {
      return tooLarge(exchange, limit, true);
    }
    return exchange.getRequest().getBody().doOnNext(DataBufferUtils::release)
        .then(Mono.defer(() -> tooLarge(exchange, limit, false)));
  }

  static Mono<Void> tooLarge(ServerWebExchange exchange, int limit, boolean unread) {
    if (unread) {
      exchange.getResponse().getHeaders().setConnection("close");
    }
    return error(exchange, 413, "request_too_large",
        "request body is above the limit of " + limit + " bytes");
  }

  /** An error in the OpenAI shape, which OpenAI client libraries turn into their exceptions. */
  /**
   * A header a routing plugin asked to set on the request threw: the request is not forwarded, its
   * decision fails, and the client gets a 500 naming the exception's class. The exception is
   * logged with its class and frames but not its message, which may quote the prompt.
   */
  private static Mono<Void> headerAskFailed(ServerWebExchange exchange, RoutingDecision d,
      RuntimeException e) {
    RedactedException redacted = RedactedException.of(e);
    LOG.log(Level.WARNING, "epp4j: a request header a routing plugin asked for threw "
        + e.getClass().getName() + "; the request got a 500", redacted);
    d.onFailure(redacted);
    return error(exchange, 500, "routing_error", "routing failed: "
        + e.getClass().getSimpleName() + " in a header a routing plugin asked for");
  }

  static Mono<Void> error(ServerWebExchange exchange, int status, String type, String message) {
    ServerHttpResponse response = exchange.getResponse();
    ObjectNode body = JSON.createObjectNode();
    body.putObject("error").put("message", message).put("type", type).put("code", status);
    byte[] b = body.toString().getBytes(StandardCharsets.UTF_8);
    response.setStatusCode(HttpStatusCode.valueOf(status));
    // the header names the endpoint that served the answer: none served this one (an earlier
    // attempt behind SCG's Retry filter may have set it)
    response.getHeaders().remove(RoutingDecision.DESTINATION_HEADER);
    DecisionTap tap = exchange.getAttribute(DecisionTap.ATTRIBUTE);
    if (tap != null) {
      // nor do the headers the routing plugins ask for on an endpoint's answer (a session token
      // naming the endpoint that could not be reached, or an earlier attempt's behind SCG's
      // Retry filter): this answer is the gateway's own
      tap.chainFailed();
    }
    response.getHeaders().setContentType(MediaType.APPLICATION_JSON);
    response.getHeaders().setContentLength(b.length);
    if (status == 429 || status == 503) {
      response.getHeaders().set("Retry-After", "1");
    }
    ServerWebExchangeUtils.setAlreadyRouted(exchange);
    // names of the headers an earlier attempt's replica answer added (SCG's Retry filter removed
    // them before this attempt): a further repeat would remove them again, from this answer's
    // headers, read-only once written, and the gateway would close the connection on the error
    exchange.getAttributes().remove(ServerWebExchangeUtils.CLIENT_RESPONSE_HEADER_NAMES);
    return response.writeWith(Mono.just(response.bufferFactory().wrap(b)));
  }

  /**
   * Fails the body read as soon as more than the limit arrived, before all of it is joined; and
   * hands on each piece as a copy of its own, releasing the server's.
   *
   * <p>The copy is for the body cache: SCG's {@code RemoveCachedBodyFilter}
   * ({@code ServerWebExchangeUtils.clearCachedRequestBody}) releases the cached body at the end
   * of the exchange until it is freed, not once. Over HTTP/2 a body that is one DATA frame is
   * cached as that frame's content, a slice sharing the reference count of the connection's read
   * buffer; when the exchange ended while that frame was still being decoded (a 400 or a shed
   * request, answered at once), the loop freed the connection's buffer under Netty's HTTP/2
   * decoder, which failed ({@code IllegalReferenceCountException}) and closed the connection,
   * with the client's other requests on it. A copy is the cache's alone to free.
   */
  static final class LimitedBody extends ServerHttpRequestDecorator {
    private final int limit;

    LimitedBody(ServerHttpRequest delegate, int limit) {
      super(delegate);
      this.limit = limit;
    }

    @Override
    public Flux<DataBuffer> getBody() {
      AtomicLong seen = new AtomicLong();
      return super.getBody().handle((buffer, sink) -> {
        if (seen.addAndGet(buffer.readableByteCount()) > limit) {
          DataBufferUtils.release(buffer);
          sink.error(new BodyTooLarge());
        } else {
          DataBuffer copy = buffer.factory().allocateBuffer(buffer.readableByteCount());
          try {
            copy.write(buffer);
          } catch (RuntimeException e) {
            DataBufferUtils.release(copy);
            throw e;
          } finally {
            DataBufferUtils.release(buffer);
          }
          sink.next(copy);
        }
      });
    }
  }

  static final class BodyTooLarge extends RuntimeException {
    private static final long serialVersionUID = 1L;

    BodyTooLarge() {
      super("request body too large", null, false, false);
    }
  }
}
