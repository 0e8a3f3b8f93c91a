package com.example.epp4j.gateway;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Rejection;
import io.epp4j.api.HeaderChecks;
import io.epp4j.api.RepeatedHeaders;
import io.epp4j.api.Ticker;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.MetricsScraper;
import io.epp4j.core.OpenAiRequestParser;
import io.epp4j.core.Router;
import io.epp4j.core.UsageScanner;
import io.epp4j.scorers.PdProfileHandler;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpHeaders;
import java.net.http.HttpTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * A complete, minimal OpenAI-compatible gateway: the JDK's HTTP server takes
 * {@code /v1/completions} and {@code /v1/chat/completions}, epp4j picks the replica, the JDK's
 * HTTP client forwards the body and streams the answer back, and the outcome (first byte, usage,
 * failure) flows into the router. {@code GET /v1/models} is passed to a replica. A scraper keeps
 * replica metrics fresh.
 *
 * <p>Every routed request reports exactly one outcome to its {@link RoutingDecision}: completion
 * when the replica's answer ended (reported before the client sees the end, so a client's next
 * request finds the counters released), failure when the replica could not be reached, answered
 * 5xx, broke off or sent nothing for {@link Options#streamIdleTimeout()} mid-answer, when the
 * client went away or read nothing for that long, or when anything in between threw.
 *
 * <p>Run it with {@link Main}; see the module's README.
 */
public final class PlainGateway implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(PlainGateway.class.getName());
  /**
   * The headers routing plugins asked for that the gateway left out (a name that is no HTTP
   * token, a value holding a control character, one the JDK's HTTP client or server cannot
   * send): counted, and logged throttled per header name, never with the value.
   */
  private final HeaderChecks.Refusals headerRefusals = new HeaderChecks.Refusals(LOG,
      Ticker.system());
  private static final ObjectMapper JSON = new ObjectMapper();
  /** Larger request bodies get 413: the default request parser's limit, enforced while reading. */
  public static final int MAX_BODY_BYTES = OpenAiRequestParser.DEFAULT_MAX_BODY_BYTES;
  /** The JDK server's limit on receiving a request's headers and body, in seconds. */
  static final String MAX_REQUEST_TIME_PROPERTY = "sun.net.httpserver.maxReqTime";
  /**
   * How long a client has to send a whole request (headers and body) unless the JDK property
   * {@code sun.net.httpserver.maxReqTime} says otherwise; then the connection is closed.
   */
  public static final long MAX_REQUEST_SECONDS = 60;

  /**
   * The gateway's own settings; {@link #defaults()} gives the documented defaults.
   *
   * @param streamIdleTimeout how long a replica may send nothing while its answer is relayed,
   *     from its status line to the answer's end, before the gateway gives up on it: the client's
   *     connection is dropped (a cut-off answer) and the decision fails. It also bounds a write
   *     to a client that stopped reading (the JDK's HTTP server has no write timeout): the write
   *     is broken off, the connection dropped and the decision fails. Default
   *     {@link #DEFAULT_STREAM_IDLE_TIMEOUT}.
   * @param maxConcurrentRequests how many requests the gateway handles at once, each on a thread
   *     of its own from reading it to the end of its answer (a stream holds its thread until it
   *     ends); a request beyond them gets 503 {@code gateway_overloaded} with
   *     {@code Retry-After}. Idle keep-alive connections hold no thread. Default
   *     {@link #DEFAULT_MAX_CONCURRENT_REQUESTS}.
   */
  public record Options(Duration streamIdleTimeout, int maxConcurrentRequests) {
    /**
     * Five minutes, Envoy's default {@code stream_idle_timeout}: a replica streams tokens every
     * few milliseconds, but the first one may come only after the request has queued and been
     * prefilled, which under load legitimately takes long.
     */
    public static final Duration DEFAULT_STREAM_IDLE_TIMEOUT = Duration.ofMinutes(5);

    /**
     * 1,024, as many as the stand-in's threads: four vLLM replicas' worth of full batches at
     * vLLM's default {@code max_num_seqs} of 256, with the threads' stacks still bounded.
     */
    public static final int DEFAULT_MAX_CONCURRENT_REQUESTS = 1024;

    public Options {
      java.util.Objects.requireNonNull(streamIdleTimeout, "streamIdleTimeout");
      if (streamIdleTimeout.isNegative() || streamIdleTimeout.isZero()) {
        throw new IllegalArgumentException(
            "streamIdleTimeout must be above zero, was " + streamIdleTimeout);
      }
      if (maxConcurrentRequests < 1) {
        throw new IllegalArgumentException(
            "maxConcurrentRequests must be 1 or more, was " + maxConcurrentRequests);
      }
    }

    /** Every setting at its default. */
    public static Options defaults() {
      return new Options(DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_MAX_CONCURRENT_REQUESTS);
    }

    public Options withStreamIdleTimeout(Duration timeout) {
      return new Options(timeout, maxConcurrentRequests);
    }

    public Options withMaxConcurrentRequests(int max) {
      return new Options(streamIdleTimeout, max);
    }
  }

  private final Router router;
  private final Options options;
  private final MetricsScraper scraper;
  private final HttpServer server;
  private final ExecutorService executor;
  /**
   * Answers the requests beyond {@link Options#maxConcurrentRequests()} with 503: a few threads
   * and a bounded queue, so that a flood of requests starts no more threads than that. When it
   * is full too, the JDK server closes the connection without an answer.
   */
  private final java.util.concurrent.ThreadPoolExecutor overflow;
  /** Threads of the overflow executor, and only those, turn their requests away. */
  private static final int OVERFLOW_THREADS = 4;
  private static final int OVERFLOW_QUEUE = 1024;
  private static final ThreadLocal<Boolean> TURNED_AWAY = ThreadLocal.withInitial(() -> false);
  /** Runs the stream idle checks ({@link IdleWatch}). */
  private final java.util.concurrent.ScheduledExecutorService idleTimer;
  private final AtomicInteger modelsTurn = new AtomicInteger();
  private final AtomicBoolean closed = new AtomicBoolean();
  /**
   * Requests the server has handed over, each from the moment its connection had bytes to read
   * (its headers are read on the handler thread) until its answer has ended, including those
   * waiting for an overflow thread: what {@link #close(Duration)} waits for.
   */
  private final AtomicInteger taken = new AtomicInteger();
  /**
   * Added to {@link #taken} when the stop ends its wait, making it negative: from then on the
   * executor refuses what the server hands over, so that the server closes that connection
   * without reading from it, instead of a handler beginning to read a request that closing the
   * server then cuts off.
   */
  private static final int SHUT = Integer.MIN_VALUE;
  /** Runs when the stop's wait has ended, just before the server closes; for tests. */
  volatile @Nullable Runnable stopWaitEnded;
  /** Set by {@link #close(Duration)}: new requests are turned away while those in progress end. */
  private volatile boolean stopping;
  private final HttpClient client = HttpClient.newBuilder()
      .connectTimeout(Duration.ofSeconds(2)).version(HttpClient.Version.HTTP_1_1).build();
  private volatile @Nullable OwnTimeListener ownTime;
  /** How often a relayed answer renews its decision: a quarter of the router's in-flight age. */
  private final long renewEveryNanos;

  /**
   * The thread a JDK server starts when it enforces {@code maxReqTime} (or {@code maxRspTime}),
   * one per server; the name is the same on Java 17 and 25.
   */
  static final String REQUEST_TIMER_THREAD = "req-rsp-timeout-task";
  /** Warned once per JVM: the JDK server read its settings before this class set them. */
  private static final AtomicBoolean WARNED_SETTINGS_MISSED = new AtomicBoolean();
  /** Whether {@code sun.net.httpserver.nodelay} was set here rather than by the user. */
  private static final boolean NODELAY_SET_HERE;

  static {
    // The JDK server leaves Nagle's algorithm on, which holds a relayed SSE chunk back until the
    // client acknowledges the previous one (up to 40 ms with delayed ACKs): streamed tokens would
    // arrive in bursts. Read once, when the first server starts; a value the user set wins.
    NODELAY_SET_HERE = System.getProperty("sun.net.httpserver.nodelay") == null;
    if (NODELAY_SET_HERE) {
      System.setProperty("sun.net.httpserver.nodelay", "true");
    }
    // vLLM closes a keep-alive connection after 5 s idle; the JDK's client keeps idle connections
    // for 1,200 s on Java 17 (30 s on later releases), so a request could go out on a connection
    // the replica is closing at that moment and fail before any answer. Read once, when the JVM's
    // first HTTP client pools a connection; a value the user set wins.
    if (System.getProperty("jdk.httpclient.keepalive.timeout") == null) {
      System.setProperty("jdk.httpclient.keepalive.timeout", "4");
    }
    // The JDK server reads a request's headers and body on a handler thread and by default waits
    // for them forever: a client that stops sending (a body shorter than its Content-Length,
    // headers that never end) would hold a thread, and its connection, for good. With a limit the
    // server closes such a connection and the blocked read fails. Seconds, despite the JDK's
    // documentation saying milliseconds; it covers the request only, not a streamed answer.
    if (System.getProperty(MAX_REQUEST_TIME_PROPERTY) == null) {
      System.setProperty(MAX_REQUEST_TIME_PROPERTY, Long.toString(MAX_REQUEST_SECONDS));
    }
  }

  /**
   * Hears, for every routed request whose answer began, how long the gateway itself held it up
   * before the client got the first bytes, next to how long the replica took to answer.
   */
  @FunctionalInterface
  public interface OwnTimeListener {
    /**
     * @param ownNanos      the request's time in the gateway before its first answer bytes went
     *     to the client, less {@code upstreamNanos}: reading the body, routing, building the
     *     forwarded request, relaying the first chunk (and any replica that refused it)
     * @param upstreamNanos from handing the request to the HTTP client (connecting, sending) to
     *     the replica's first answer bytes
     */
    void onFirstBytes(long ownNanos, long upstreamNanos);
  }

  /** A gateway on {@code port} (0: any free port) routing with the EPP default profile. */
  public PlainGateway(int port, List<Endpoint> replicas) throws IOException {
    this(new InetSocketAddress(port), Router.builder().endpoints(replicas).build());
  }

  /**
   * A gateway on {@code address} routing with a router you built (a config file, listeners,
   * knobs), with {@link Options#defaults()}. The gateway takes the router over: it closes it in
   * {@link #close()}, or at once when it cannot listen on {@code address}.
   */
  public PlainGateway(InetSocketAddress address, Router router) throws IOException {
    this(address, router, Options.defaults());
  }

  /**
   * A gateway on {@code address} routing with a router you built and with {@code options}. The
   * gateway takes the router over, as {@link #PlainGateway(InetSocketAddress, Router)} does.
   */
  public PlainGateway(InetSocketAddress address, Router router, Options options)
      throws IOException {
    java.util.Objects.requireNonNull(options, "options");
    java.util.Set<Thread> timersBefore = requestTimers();
    try {
      this.server = HttpServer.create(address, 0); // before any thread starts
    } catch (IOException e) {
      router.close();
      throw e;
    }
    warnIfServerSettingsMissed(timersBefore);
    this.router = router;
    this.options = options;
    long maxAge;
    try {
      maxAge = router.inFlightMaxAge().toNanos();
    } catch (ArithmeticException forever) { // no age limit: nothing to renew
      maxAge = Long.MAX_VALUE;
    }
    this.renewEveryNanos = Math.max(1, maxAge / 4);
    this.scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(50)).start();
    java.util.concurrent.ScheduledThreadPoolExecutor timer =
        new java.util.concurrent.ScheduledThreadPoolExecutor(1, r -> {
          Thread t = new Thread(r, "plain-gateway-stream-idle");
          t.setDaemon(true);
          return t;
        });
    // every relayed answer cancels its check when it ends, mostly long before it was due: a
    // cancelled check leaves the queue at once instead of piling up for the whole timeout
    timer.setRemoveOnCancelPolicy(true);
    this.idleTimer = timer;
    server.createContext("/v1/", this::handle);
    // every other path: the JDK server's own 404 is an HTML page
    server.createContext("/", this::unknownPath);
    // one thread per open request, up to the limit: a streamed answer holds its thread until it
    // ends. No queue: a request beyond the limit is handed to the overflow threads at once.
    java.util.concurrent.ThreadPoolExecutor handlers = new java.util.concurrent.ThreadPoolExecutor(
        0, options.maxConcurrentRequests(), 60, java.util.concurrent.TimeUnit.SECONDS,
        new java.util.concurrent.SynchronousQueue<>(), named("plain-gateway-", false));
    this.executor = handlers;
    this.overflow = new java.util.concurrent.ThreadPoolExecutor(OVERFLOW_THREADS,
        OVERFLOW_THREADS, 60, java.util.concurrent.TimeUnit.SECONDS,
        new java.util.concurrent.ArrayBlockingQueue<>(OVERFLOW_QUEUE),
        named("plain-gateway-overflow-", true));
    overflow.allowCoreThreadTimeOut(true);
    server.setExecutor(exchange -> {
      // counted from here, before its headers are read: a stop that begins while they arrive
      // waits for the request and answers it, rather than closing its connection under it. Once
      // the stop's wait has ended, nothing is read any more: the server closes the connection
      if (!enter()) {
        throw new java.util.concurrent.RejectedExecutionException("the gateway has stopped");
      }
      Runnable counted = () -> {
        try {
          exchange.run();
        } finally {
          taken.decrementAndGet();
        }
      };
      try {
        handlers.execute(counted);
      } catch (java.util.concurrent.RejectedExecutionException full) {
        // every handler thread is busy: answered 503 by an overflow thread; when that is full
        // too (or the gateway is closing), the exception makes the server close the connection
        try {
          overflow.execute(() -> {
            TURNED_AWAY.set(true);
            try {
              counted.run();
            } finally {
              TURNED_AWAY.set(false);
            }
          });
        } catch (java.util.concurrent.RejectedExecutionException none) {
          taken.decrementAndGet();
          throw none;
        }
      }
    });
    server.start();
  }

  /**
   * Counts a request the server hands over, unless the stop's wait has ended: one read from then
   * on would be cut off by the server's closing, with no answer, although it had been received.
   */
  private boolean enter() {
    for (int n = taken.get(); ; n = taken.get()) {
      if (n < 0) {
        return false;
      }
      if (taken.compareAndSet(n, n + 1)) {
        return true;
      }
    }
  }

  /**
   * The JDK server reads its settings once per JVM, when its first server is created: an
   * application that created one before this class loaded (its own server, a library's) has
   * them without the values set above, whatever the properties say now. That cannot be read
   * back, but it shows: a server created with a request time limit starts a timer thread of its
   * own, and none started for this one although the property asks for a limit.
   */
  private static void warnIfServerSettingsMissed(java.util.Set<Thread> timersBefore) {
    if (!asksForRequestLimit() || !requestTimers().equals(timersBefore)
        || WARNED_SETTINGS_MISSED.getAndSet(true)) {
      return;
    }
    // nodelay cannot be seen; it was missed with maxReqTime unless the user had set it already
    LOG.warning("the JDK's HTTP server was set up in this JVM before the gateway set its"
        + " properties, so sun.net.httpserver.maxReqTime (a client has "
        + System.getProperty(MAX_REQUEST_TIME_PROPERTY) + " s to send a request)"
        + (NODELAY_SET_HERE ? " and sun.net.httpserver.nodelay (streamed chunks go out at once)"
            + " are" : " is")
        + " not in effect: a client that stops sending holds a gateway thread until it"
        + " disconnects. Give them on the java command line (-Dsun.net.httpserver.maxReqTime="
        + MAX_REQUEST_SECONDS + " -Dsun.net.httpserver.nodelay=true), or create the gateway"
        + " before any other JDK HTTP server");
  }

  private static boolean asksForRequestLimit() {
    try {
      return Long.parseLong(System.getProperty(MAX_REQUEST_TIME_PROPERTY, "-1").strip()) > 0;
    } catch (NumberFormatException e) {
      return false; // the JDK takes it for no limit as well
    }
  }

  /** The request time limit threads of every JDK server in this JVM. */
  private static java.util.Set<Thread> requestTimers() {
    java.util.Set<Thread> timers = new java.util.HashSet<>();
    for (Thread t : Thread.getAllStackTraces().keySet()) {
      if (REQUEST_TIMER_THREAD.equals(t.getName())) {
        timers.add(t);
      }
    }
    return timers;
  }

  private static java.util.concurrent.ThreadFactory named(String prefix, boolean daemon) {
    AtomicInteger n = new AtomicInteger();
    return r -> {
      Thread t = new Thread(r, prefix + n.incrementAndGet());
      t.setDaemon(daemon);
      return t;
    };
  }

  /** Reports each routed request's own time to {@code listener} (replacing any earlier one). */
  public void ownTimeListener(@Nullable OwnTimeListener listener) {
    this.ownTime = listener;
  }

  /** The port the gateway listens on. */
  public int port() {
    return server.getAddress().getPort();
  }

  public Router router() {
    return router;
  }

  /** The settings the gateway was built with. */
  public Options options() {
    return options;
  }

  /**
   * Closes the exchange only when the answer is complete. An exception that escapes (the replica
   * broke off, or something threw after the status line went out) reaches the HTTP server, which
   * then drops the connection: the client sees a cut-off answer, not a clean but truncated one.
   * Something that throws before the status line went out gets a 500 in the OpenAI shape instead:
   * a connection dropped without an answer would tell the client nothing.
   */
  private void handle(HttpExchange ex) throws IOException {
    if (stopping) {
      // the gateway is draining: this client should try another replica of the gateway
      ex.getResponseHeaders().set("connection", "close");
      replyError(ex, 503, "gateway_stopping", "gateway is stopping");
      ex.close();
      return;
    }
    if (TURNED_AWAY.get()) {
      // every handler thread is busy; the body is not read (the server drains or drops it)
      replyError(ex, 503, "gateway_overloaded", "the gateway is handling "
          + options.maxConcurrentRequests() + " requests, its limit; try again shortly");
      ex.close();
      return;
    }
    try {
      serve(ex, System.nanoTime());
    } catch (RuntimeException e) {
      if (ex.getResponseCode() != -1) { // the answer began
        throw e;
      }
      replyError(ex, 500, "internal_error", "the gateway failed to handle the request");
    }
    ex.close();
  }

  private void serve(HttpExchange ex, long receivedNanos) throws IOException {
    String path = ex.getRequestURI().getPath();
    String method = ex.getRequestMethod();
    List<String> auths = ex.getRequestHeaders().get("authorization");
    if (auths != null && !auths.stream().allMatch(PlainGateway::isFieldValue)) {
      // the JDK's server takes such a value, its HTTP client refuses to forward it and quotes it
      // in its refusal: answered here, without the credential, before any routing
      replyError(ex, 400, "invalid_request_error",
          "header 'authorization' holds a character a header value may not carry");
      return;
    }
    if (path.equals("/v1/models") || path.startsWith("/v1/models/")) {
      if ("GET".equals(method) || "HEAD".equals(method)) {
        models(ex);
      } else {
        ex.getResponseHeaders().set("allow", "GET, HEAD");
        replyError(ex, 405, "invalid_request_error", "use GET for " + path);
      }
      return;
    }
    if (!"POST".equals(method)) {
      ex.getResponseHeaders().set("allow", "POST");
      replyError(ex, 405, "invalid_request_error", "use POST for " + path);
      return;
    }
    byte[] body = readBody(ex);
    if (body == null) {
      tooLarge(ex);
      return;
    }
    String coding = body.length == 0 ? null : contentCoding(ex.getRequestHeaders());
    if (coding != null) {
      unsupportedCoding(ex, coding);
      return;
    }
    // a header sent on several lines is its values joined in order (',', '; ' for cookie), as
    // Envoy, the ext_proc server and the Spring Cloud Gateway filter read it, never its first
    // line alone; the JDK's Headers keep lines whose names differ only in case under one name
    Map<String, String> headers = new java.util.HashMap<>(
        RepeatedHeaders.of(ex.getRequestHeaders()));
    // pseudo-headers are the gateway's to write, as the ext_proc server and the SCG filter write
    // them: :path, query included, where query:<name> hash and session keys are found, and
    // :source-ip, the connection's peer, which source-ip keys read before x-forwarded-for, a
    // header any client writes (the JDK's server answers 400 to a header name starting with ':',
    // so no client sends either)
    URI asked = ex.getRequestURI();
    String rawPath = asked.getRawPath();
    headers.put(":path", (rawPath == null || rawPath.isEmpty() ? "/" : rawPath)
        + (asked.getRawQuery() == null ? "" : "?" + asked.getRawQuery()));
    InetSocketAddress peer = ex.getRemoteAddress();
    if (peer != null && peer.getAddress() != null) {
      headers.put(":source-ip", peer.getAddress().getHostAddress());
    }
    RoutingDecision d = router.route(path, headers, body);
    Rejection rejected = d.rejection(); // null when routed
    if (rejected != null) {
      replyError(ex, rejected.httpStatus(), "routing_" + rejected.reason().name()
          .toLowerCase(java.util.Locale.ROOT), rejected.message());
      return;
    }
    try {
      // the raw (still percent-encoded) path and query: decoded ones may not form a valid URI
      String target = asked.getRawPath()
          + (asked.getRawQuery() == null ? "" : "?" + asked.getRawQuery());
      proxy(ex, d, target, forwardable(ex.getRequestHeaders()), body, receivedNanos);
    } catch (Throwable t) {
      // proxy reports every outcome it foresees; this catches what it does not (a listener or
      // a bug that threw) so that the decision never stays in flight. A decision ignores every
      // terminal call after its first, so a failure already reported is not counted twice.
      d.onFailure(t);
      if (!(t instanceof ResponseCut)) {
        // redacted: a plugin's or listener's message may quote the request's prompt
        LOG.log(Level.WARNING, "forwarding to " + d.primary().id() + " failed unexpectedly",
            io.epp4j.api.RedactedException.of(t));
      }
      throw t;
    }
  }

  /**
   * Whether {@code value} is an HTTP field value the JDK's HTTP client forwards: spaces, tabs,
   * visible ASCII and bytes from 0x80 (RFC 9110's field-vchar), no other control character.
   */
  static boolean isFieldValue(String value) {
    for (int i = 0, n = value.length(); i < n; i++) {
      char c = value.charAt(i);
      if (c > 0xff || (c < 0x20 && c != '\t') || c == 0x7f) {
        return false;
      }
    }
    return true;
  }

  /**
   * The request body, or null when it is above {@value #MAX_BODY_BYTES} bytes: a declared length
   * is checked before anything is read, a chunked body is read only up to the limit.
   */
  private static byte @Nullable [] readBody(HttpExchange ex) throws IOException {
    String declared = ex.getRequestHeaders().getFirst("content-length");
    if (declared != null) {
      try {
        if (Long.parseLong(declared.strip()) > MAX_BODY_BYTES) {
          return null;
        }
      } catch (NumberFormatException e) {
        // the HTTP server refuses a malformed length before the handler runs
      }
    }
    byte[] body = ex.getRequestBody().readNBytes(MAX_BODY_BYTES + 1);
    return body.length > MAX_BODY_BYTES ? null : body;
  }

  /** Longest {@code Content-Encoding} value quoted back in the 415. */
  private static final int MAX_QUOTED_CODING = 64;

  /**
   * The request's {@code Content-Encoding}, all its values, when one names a coding other than
   * {@code identity}; null otherwise. The router parses the body's bytes as they came, and a
   * compressed body is no JSON to it.
   */
  private static @Nullable String contentCoding(com.sun.net.httpserver.Headers requestHeaders) {
    List<String> values = requestHeaders.get("content-encoding");
    if (values == null) {
      return null;
    }
    for (String value : values) {
      for (String coding : value.split(",")) {
        String c = coding.strip();
        if (!c.isEmpty() && !c.equalsIgnoreCase("identity")) {
          return String.join(", ", values).strip();
        }
      }
    }
    return null;
  }

  /**
   * Answers 415 for a compressed body, before routing, with {@code Accept-Encoding: identity}
   * naming the coding the gateway takes (RFC 9110, 15.5.16), as the Spring Cloud Gateway filter
   * does: routed, the body would be refused as JSON that is not valid UTF-8, a 400 that names
   * neither the header nor the cause. The body was read whole, so the connection stays open.
   */
  private void unsupportedCoding(HttpExchange ex, String coding) throws IOException {
    String quoted = coding.length() > MAX_QUOTED_CODING
        ? coding.substring(0, MAX_QUOTED_CODING) + "..." : coding;
    ex.getResponseHeaders().set("accept-encoding", "identity");
    replyError(ex, 415, "unsupported_content_encoding", "request body has Content-Encoding '"
        + quoted + "', which the router cannot read: send it uncompressed");
  }

  /**
   * Answers 413 and drops the connection: the rest of the body is not read (the server drains a
   * little of it, then closes). The answer is flushed first, so a client still sending sees it.
   */
  private void tooLarge(HttpExchange ex) throws IOException {
    ex.getResponseHeaders().set("connection", "close");
    replyError(ex, 413, "request_too_large",
        "request body is above the limit of " + MAX_BODY_BYTES + " bytes");
    ex.getResponseBody().flush();
  }

  /**
   * Forwards a routed request and relays the answer; reports the outcome to {@code d}. When a
   * replica answers nothing (refused or broken connection, see {@link #beforeAnyAnswer}) or
   * turns the request away with 429 or 503, the request goes to the decision's next endpoint, in
   * order (pickers name fallbacks with {@code maxNumOfEndpoints} > 1); the client gets 502 when
   * none answers, and the last endpoint's refusal when every one refused.
   */
  private void proxy(HttpExchange ex, RoutingDecision d, String path,
      Map<String, List<String>> clientHeaders, byte[] body, long receivedNanos)
      throws IOException {
    List<Endpoint> targets = d.endpoints();
    HttpResponse<InputStream> resp = null;
    Endpoint target = targets.get(0);
    long sentNanos = 0;
    for (int i = 0; i < targets.size() && resp == null; i++) {
      target = targets.get(i);
      if (i > 0) {
        d.onFallback(target); // the router counts the request where it is served
      }
      HttpRequest.Builder fwd;
      try {
        fwd = HttpRequest.newBuilder(URI.create("http://" + target.id() + path));
      } catch (IllegalArgumentException unaddressable) {
        // a host the JDK's HTTP client takes no request for (a name with '_', as compose service
        // names have): nothing was sent, so the next endpoint may take the request
        if (i + 1 < targets.size()) {
          continue;
        }
        d.onFailure(new IOException("upstream " + target.id() + " cannot be addressed",
            unaddressable));
        replyError(ex, 502, "upstream_unavailable",
            "upstream " + target.id() + " cannot be addressed by the gateway's HTTP client");
        return;
      }
      fwd.timeout(Duration.ofMinutes(10)) // until the status line: a long prefill is legitimate
          .POST(HttpRequest.BodyPublishers.ofByteArray(body));
      // the client's end-to-end headers: Authorization (a replica started with --api-key checks
      // it), trace context, request IDs, ...; not those a routing plugin asked to remove
      java.util.Set<String> removed = headerRefusals.removable(d.removedRequestHeaders());
      for (Map.Entry<String, List<String>> h : clientHeaders.entrySet()) {
        if (!removed.contains(h.getKey())) {
          for (String v : h.getValue()) {
            addIfAllowed(fwd, h.getKey(), v);
          }
        }
      }
      fwd.setHeader("content-type", "application/json")
          .setHeader(RoutingDecision.DESTINATION_HEADER, d.destinationHeaderValue());
      // what the routing plugins asked for (p2p-source-producer's KV cache source), read for
      // this attempt: after a fallback a value may name the endpoint now tried
      Map<String, String> asked = headerRefusals.settable(d.requestHeaders(),
          HeaderChecks.Refusals.Kind.REQUEST_SET);
      Endpoint prefill = PdProfileHandler.prefillEndpoint(d);
      if (prefill != null) {
        fwd.header(PdProfileHandler.PREFILLER_HEADER, prefill.id());
      }
      for (Map.Entry<String, String> h : asked.entrySet()) {
        setIfAllowed(fwd, h.getKey(), h.getValue());
      }
      sentNanos = System.nanoTime();
      try {
        resp = client.send(fwd.build(), HttpResponse.BodyHandlers.ofInputStream());
      } catch (IOException e) {
        if (i + 1 < targets.size() && beforeAnyAnswer(e)) {
          continue; // the replica answered nothing: the next one may take the request
        }
        d.onFailure(e);
        replyError(ex, 502, "upstream_unavailable", "upstream " + target.id() + " unavailable");
        return;
      } catch (InterruptedException e) {
        d.onFailure(e);
        Thread.currentThread().interrupt();
        replyError(ex, 503, "gateway_stopping", "gateway is stopping");
        return;
      }
      if (i + 1 < targets.size() && refused(resp.statusCode())) {
        // the replica turned the request away without serving it (its rate limit, or not
        // ready): the next endpoint may take it. The last endpoint's answer is relayed whatever
        // it is, so when every one refused, the client sees a refusal and its Retry-After.
        try {
          resp.body().close(); // drops the connection: its unread answer is of no use
        } catch (IOException alreadyBroken) {
          // nothing more is read from it either way
        }
        resp = null;
      }
    }
    if (resp == null) { // a decision always names an endpoint; this only keeps the compiler sure
      d.onFailure(new IOException("no endpoint to forward to"));
      replyError(ex, 502, "upstream_unavailable", "no endpoint to forward to");
      return;
    }
    // closing the answer's stream early (client gone) closes the replica's connection, which
    // makes vLLM abort the request instead of generating for nobody
    try (InputStream in = resp.body()) {
      IdleWatch idle = new IdleWatch(in, options.streamIdleTimeout(), idleTimer);
      try {
        relay(ex, d, target, resp.statusCode(), resp.headers(), in, idle, receivedNanos,
            sentNanos);
      } finally {
        idle.end();
      }
    }
  }

  /**
   * Closes a relayed answer's stream when the replica has sent nothing for the stream idle
   * timeout: the relaying thread's blocked read then fails, instead of waiting (with the client)
   * for as long as the replica keeps its connection open. One check is pending per answer,
   * due when the timeout would run out, and put off again while bytes keep arriving.
   *
   * <p>It watches the other direction too: a write to the client that has not returned after the
   * same timeout (a client that stopped reading, whose receive window stays full) would block
   * for good, since the JDK's HTTP server has no write timeout. The watch interrupts the writing
   * thread, which closes the connection's channel (an interruptible channel) and fails the
   * write. While the gateway writes to the client it reads nothing from the replica, so that
   * time does not count as the replica's silence.
   */
  private static final class IdleWatch implements Runnable {
    private final InputStream in;
    private final long limitNanos;
    private final java.util.concurrent.ScheduledExecutorService timer;
    private volatile long lastNanos = System.nanoTime();
    private volatile boolean fired;
    private boolean ended; // guarded by this
    private java.util.concurrent.@Nullable ScheduledFuture<?> pending; // guarded by this
    /** When the write to the client in progress began; 0 when none is. */
    private volatile long writingSinceNanos;
    private @Nullable Thread writer; // guarded by this
    private boolean writeBrokenOff; // guarded by this

    IdleWatch(InputStream in, Duration limit,
        java.util.concurrent.ScheduledExecutorService timer) {
      this.in = in;
      long nanos;
      try {
        nanos = limit.toNanos();
      } catch (ArithmeticException forever) {
        nanos = Long.MAX_VALUE / 2; // no limit in practice, and no overflow below
      }
      this.limitNanos = nanos;
      this.timer = timer;
      schedule(limitNanos);
    }

    /** Bytes of the answer arrived at {@code nanos}. */
    void arrived(long nanos) {
      lastNanos = nanos;
    }

    /** Whether the timeout ran out and the stream was closed for it. */
    boolean fired() {
      return fired;
    }

    /** The timeout, as an error message says it: {@code 300 s}, {@code 250 ms}. */
    String limit() {
      long ms = java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(limitNanos);
      return ms % 1000 == 0 ? ms / 1000 + " s" : ms + " ms";
    }

    /** The calling thread starts a write to the client. */
    synchronized void writing() {
      writer = Thread.currentThread();
      long now = System.nanoTime();
      writingSinceNanos = now == 0 ? 1 : now;
    }

    /**
     * The write to the client has returned (or thrown); false when it was broken off for making
     * no progress, and then the thread's interrupt is cleared.
     */
    synchronized boolean written() {
      writer = null;
      writingSinceNanos = 0;
      lastNanos = System.nanoTime(); // the replica's silence is counted from here
      if (writeBrokenOff) {
        Thread.interrupted();
        return false;
      }
      return true;
    }

    @Override
    public void run() {
      synchronized (this) {
        if (ended) {
          return;
        }
        long now = System.nanoTime();
        long since = writingSinceNanos;
        if (since != 0) {
          Thread w = writer;
          if (now - since >= limitNanos && w != null) {
            writeBrokenOff = true;
            w.interrupt(); // closes the client's channel: the blocked write fails
          } else {
            schedule(limitNanos - (now - since));
          }
          return;
        }
        long idle = now - lastNanos;
        if (idle < limitNanos) {
          schedule(limitNanos - idle); // bytes came meanwhile: check again when it could run out
          return;
        }
        fired = true;
      }
      try {
        in.close(); // cancels the replica's answer and closes its connection
      } catch (IOException alreadyBroken) {
        // the read fails either way
      }
    }

    private synchronized void schedule(long delayNanos) {
      if (ended) {
        return;
      }
      try {
        pending = timer.schedule(this, delayNanos, java.util.concurrent.TimeUnit.NANOSECONDS);
      } catch (java.util.concurrent.RejectedExecutionException closing) {
        // the gateway is closing, which stops the relaying threads itself
      }
    }

    /** The answer has ended: no more checks. */
    synchronized void end() {
      ended = true;
      if (pending != null) {
        pending.cancel(false);
      }
    }
  }

  /** A replica's status that says it did not serve the request and another may: 429, 503. */
  private static boolean refused(int status) {
    return status == 429 || status == 503;
  }

  /**
   * Request headers of the client's that the gateway does not forward: hop-by-hop ones (RFC 9110
   * section 7.6.1, with {@code http2-settings} of an h2c upgrade, and
   * {@code proxy-authorization}, meant for the gateway), those the HTTP client writes for its own
   * connection ({@code host}, {@code content-length}, {@code expect}), and {@code content-type},
   * which the gateway sets to {@code application/json} itself. {@code accept-encoding} is not
   * forwarded either: the gateway reads each answer's usage as it passes, which it could not in
   * a compressed answer.
   */
  private static final java.util.Set<String> NOT_FORWARDED = java.util.Set.of("connection",
      "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
      "http2-settings", "proxy-authorization", "host", "content-length", "expect",
      "content-type", "accept-encoding");

  /**
   * The client's request headers that go on to the replica, names in lower case: its end-to-end
   * headers ({@code authorization}, {@code traceparent} and {@code tracestate},
   * {@code x-request-id}, {@code user-agent}, ...) without those in {@link #NOT_FORWARDED}, those
   * the client's {@code Connection} header names, the gateway's own routing headers
   * ({@code x-gateway-destination-endpoint*} and {@code x-prefiller-host-port}, which only the
   * gateway may set), and values the HTTP client could not send.
   */
  static Map<String, List<String>> forwardable(com.sun.net.httpserver.Headers client) {
    java.util.Set<String> hopByHop = new java.util.HashSet<>(NOT_FORWARDED);
    List<String> connection = client.get("Connection");
    if (connection != null) {
      for (String named : connection) {
        for (String token : named.split(",")) {
          hopByHop.add(token.strip().toLowerCase(java.util.Locale.ROOT));
        }
      }
    }
    Map<String, List<String>> out = new java.util.LinkedHashMap<>();
    client.forEach((name, values) -> {
      String lower = name.toLowerCase(java.util.Locale.ROOT);
      if (hopByHop.contains(lower) || lower.startsWith(RoutingDecision.DESTINATION_HEADER)
          || lower.equals(PdProfileHandler.PREFILLER_HEADER)) {
        return;
      }
      List<String> kept = values.stream().filter(PlainGateway::isFieldValue).toList();
      if (!kept.isEmpty()) {
        out.put(lower, kept);
      }
    });
    return out;
  }

  /** Adds a client's header to the forwarded request, or leaves it out as the HTTP client asks. */
  private static void addIfAllowed(HttpRequest.Builder fwd, String name, String value) {
    try {
      fwd.header(name, value);
    } catch (IllegalArgumentException refused) {
      // a name the HTTP client manages or cannot send: the request goes without it
    }
  }

  /**
   * Sets a header a routing plugin asked for on the forwarded request, replacing the gateway's
   * own of that name; one the JDK's HTTP client does not let a caller set ({@code host},
   * {@code content-length}, {@code connection}, …) or a value it refuses is left out.
   */
  private void setIfAllowed(HttpRequest.Builder fwd, String name, String value) {
    try {
      fwd.setHeader(name, value);
    } catch (IllegalArgumentException refused) {
      // the HTTP client manages it or cannot send it: the request goes without it, reported
      // (its message quotes the value, which may come from the prompt: not logged)
      headerRefusals.leftOut(HeaderChecks.Refusals.Kind.REQUEST_SET, name, isFieldValue(value)
          ? " is a header the JDK's HTTP client does not let the gateway set"
          : " has a value holding " + beyondLatin1(value) + ", which the JDK's HTTP client"
              + " cannot send");
    }
  }

  /** The first character of {@code value} that {@link #isFieldValue} refuses, by its code. */
  private static String beyondLatin1(String value) {
    for (int i = 0; i < value.length(); i++) {
      if (!isFieldValue(String.valueOf(value.charAt(i)))) {
        return String.format("U+%04X at index %d", (int) value.charAt(i), i);
      }
    }
    return "nothing refused";
  }

  /** Headers routing plugins asked for that the gateway left out so far. */
  public long headersLeftOut() {
    return headerRefusals.count();
  }

  /**
   * Whether a send failed without the replica having answered anything, so that the request can
   * go to another replica: refused or timed-out connections, and connections that closed before
   * the status line (a replica that crashed, or a pooled connection it had already dropped). A
   * replica that is slow to answer ({@link HttpTimeoutException}) is not retried elsewhere.
   */
  private static boolean beforeAnyAnswer(IOException e) {
    return e instanceof HttpConnectTimeoutException || !(e instanceof HttpTimeoutException);
  }

  private void relay(HttpExchange ex, RoutingDecision d, Endpoint target, int status,
      HttpHeaders replica, InputStream in, IdleWatch idle, long receivedNanos, long sentNanos)
      throws IOException {
    java.util.Optional<String> contentType = replica.firstValue("content-type");
    relayHeaders(replica, ex);
    ex.getResponseHeaders().set("content-type", contentType.orElse("application/json"));
    ex.getResponseHeaders().set(RoutingDecision.DESTINATION_HEADER, target.id());
    // what the routing plugins asked to set on an answer a replica served (the session token of
    // session-affinity-scorer, naming the endpoint that served it)
    // a name that is no token (the JDK's server would write it as it is) or a value holding a
    // control character or a character it cannot send is left out, reported
    headerRefusals.settable(d.responseHeaders(), HeaderChecks.Refusals.Kind.RESPONSE_SET)
        .forEach((name, value) -> {
          if (isFieldValue(value)) {
            ex.getResponseHeaders().set(name, value);
          } else {
            headerRefusals.leftOut(HeaderChecks.Refusals.Kind.RESPONSE_SET, name,
                " has a value holding " + beyondLatin1(value) + ", which the JDK's HTTP server"
                    + " cannot send");
          }
        });
    closeAfterIfStopping(ex);
    OutputStream out = ex.getResponseBody();
    IOException notSent = null;
    idle.writing();
    try {
      ex.sendResponseHeaders(status, 0);
      // the status line goes out now, not with the first chunk: a replica that breaks off before
      // its first chunk then reaches the client as a cut-off answer, not as no answer at all
      out.flush();
    } catch (IOException clientGone) {
      notSent = clientGone;
    }
    if (!idle.written()) {
      throw clientStalled(d, idle, notSent);
    }
    if (notSent != null) {
      d.onFailure(new IOException("client disconnected", notSent));
      return;
    }
    // the answer's usage, read by the library's scanner as the bytes pass (at most 64 KiB held)
    UsageScanner usage = status < 300 ? new UsageScanner(contentType.orElse(null)) : null;
    byte[] buf = new byte[8192];
    boolean first = true;
    long renewedNanos = receivedNanos;
    for (;;) {
      int n;
      IOException broken = null;
      try {
        n = in.read(buf);
      } catch (IOException e) {
        n = -1;
        broken = e;
      }
      if (n < 0 && idle.fired()) {
        // the stream was closed for being idle: however the read ended, the answer is not whole
        broken = new IOException("upstream " + target.id() + " sent nothing for "
            + idle.limit() + " (stream idle timeout)", broken);
      }
      if (broken != null) {
        IOException e = broken;
        if (usage != null) {
          usage.finish(); // the stream has ended: its last line ends here, line end or not
          if (usage.sawDone()) {
            // a server-sent stream is whole at data: [DONE], where clients stop reading: the
            // replica's connection broke after the answer, which the client has in full
            break;
          }
        }
        d.onFailure(e);
        throw new ResponseCut("upstream " + target.id() + " broke off its answer", e);
      }
      if (n < 0) {
        break;
      }
      long readNanos = System.nanoTime();
      idle.arrived(readNanos);
      if (status < 300) {
        d.onFirstToken(); // only the first call counts; an error body is not a token
      }
      if (readNanos - renewedNanos >= renewEveryNanos) {
        // the router releases a decision older than its inFlightMaxAge as one the gateway lost;
        // a stream that is still relaying (a long generation) is not lost
        d.onActivity();
        renewedNanos = readNanos;
      }
      if (usage != null) {
        usage.feed(ByteBuffer.wrap(buf, 0, n));
      }
      idle.writing();
      try {
        out.write(buf, 0, n);
        out.flush();
      } catch (IOException clientGone) {
        notSent = clientGone;
      }
      if (!idle.written()) {
        throw clientStalled(d, idle, notSent);
      }
      if (notSent != null) {
        d.onFailure(new IOException("client disconnected", notSent));
        return;
      }
      OwnTimeListener l = ownTime;
      if (first && l != null && status < 300) {
        long upstream = readNanos - sentNanos;
        l.onFirstBytes(System.nanoTime() - receivedNanos - upstream, upstream);
      }
      first = false;
    }
    // The replica has finished; the client sees the end only when handle() closes the exchange,
    // after this report.
    if (RoutingDecision.endpointFailed(status)) {
      d.onFailure(new IOException("upstream " + target.id() + " answered " + status));
    } else {
      d.onComplete(usage == null ? Usage.NONE : usage.finish());
    }
    // the answer's end (the last chunk) goes out under the same watch: a client that stopped
    // reading just before it would otherwise hold this thread in handle()'s close
    idle.writing();
    out.close();
    if (!idle.written()) {
      throw new ResponseCut("client " + ex.getRemoteAddress() + " read nothing for "
          + idle.limit() + " (stream idle timeout)", null);
    }
  }

  /**
   * A write to the client made no progress for the stream idle timeout (its receive window stayed
   * full: it stopped reading) and was broken off: the decision fails and the connection is
   * dropped.
   */
  private static ResponseCut clientStalled(RoutingDecision d, IdleWatch idle,
      @Nullable IOException cause) {
    IOException e = new IOException("client read nothing for " + idle.limit()
        + " (stream idle timeout)", cause);
    d.onFailure(e);
    return new ResponseCut("client stopped reading the answer", e);
  }

  /**
   * Headers of a replica's answer that are not passed to the client: hop-by-hop ones (RFC 9110
   * section 7.6.1), which describe the replica's connection to the gateway, not the answer, and
   * the framing and date the gateway's server writes for its own connection.
   */
  private static final java.util.Set<String> NOT_RELAYED = java.util.Set.of("connection",
      "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
      "content-length", "date");

  /**
   * Copies the end-to-end headers of a replica's answer ({@code Retry-After} on a 429 or 503,
   * {@code Content-Encoding}, a request ID, …) onto the client's answer. Hop-by-hop headers, those
   * the replica's {@code Connection} header names, and values the gateway's server could not
   * write are left out.
   */
  static void relayHeaders(HttpHeaders replica, HttpExchange ex) {
    java.util.Set<String> hopByHop = new java.util.HashSet<>(NOT_RELAYED);
    for (String named : replica.allValues("connection")) {
      for (String token : named.split(",")) {
        hopByHop.add(token.strip().toLowerCase(java.util.Locale.ROOT));
      }
    }
    replica.map().forEach((name, values) -> {
      String lower = name.toLowerCase(java.util.Locale.ROOT);
      if (lower.startsWith(":") || hopByHop.contains(lower)) {
        return;
      }
      List<String> kept = values.stream().filter(PlainGateway::isFieldValue).toList();
      if (!kept.isEmpty()) {
        ex.getResponseHeaders().put(name, new java.util.ArrayList<>(kept));
      }
    });
  }

  /** Thrown after the status line went out, to make the server drop the client's connection. */
  private static final class ResponseCut extends IOException {
    ResponseCut(String message, @Nullable Throwable cause) {
      super(message, cause);
    }
  }

  /**
   * Passes {@code GET /v1/models} to one replica (taking turns), trying the next when one cannot
   * be reached or answers 5xx; when every one that answered gave a 5xx, the last such answer is
   * relayed. OpenAI clients call it before anything else. The client's end-to-end headers go
   * with it ({@link #forwardable}), {@code Authorization} among them, as with routed requests.
   */
  /** How long a replica has to answer {@code /v1/models} in full before the next one is asked. */
  private static final Duration MODELS_TIMEOUT = Duration.ofSeconds(5);

  private void models(HttpExchange ex) throws IOException {
    URI asked = ex.getRequestURI();
    String target = asked.getRawPath() + (asked.getRawQuery() == null ? "" : "?" + asked.getRawQuery());
    // Authorization among them: a replica started with --api-key checks /v1/models too
    Map<String, List<String>> clientHeaders = forwardable(ex.getRequestHeaders());
    List<Candidate> pool = router.endpoints();
    int start = Math.floorMod(modelsTurn.getAndIncrement(), Math.max(1, pool.size()));
    HttpResponse<byte[]> refused = null;
    Endpoint refusedBy = null;
    for (int i = 0; i < pool.size(); i++) {
      Endpoint e = pool.get((start + i) % pool.size()).endpoint();
      HttpRequest.Builder req;
      try {
        req = HttpRequest.newBuilder(URI.create("http://" + e.id() + target));
      } catch (IllegalArgumentException unaddressable) {
        continue; // a host the JDK's HTTP client takes no request for (see proxy): as unreachable
      }
      req.timeout(MODELS_TIMEOUT).GET();
      for (Map.Entry<String, List<String>> h : clientHeaders.entrySet()) {
        for (String v : h.getValue()) {
          addIfAllowed(req, h.getKey(), v);
        }
      }
      // the request's timeout ends when the status line arrives (on Java 17): a replica that
      // then stops sending its body would hold this thread for good, so the whole answer gets
      // the same time, and one that overruns it is treated as unreachable
      java.util.concurrent.CompletableFuture<HttpResponse<byte[]>> answer =
          client.sendAsync(req.build(), info -> new AtMost(MAX_BODY_BYTES));
      HttpResponse<byte[]> r;
      try {
        r = answer.get(MODELS_TIMEOUT.toNanos(), java.util.concurrent.TimeUnit.NANOSECONDS);
      } catch (java.util.concurrent.ExecutionException unreachable) {
        continue;
      } catch (java.util.concurrent.TimeoutException slow) {
        answer.cancel(true); // closes the connection to the replica
        continue;
      } catch (InterruptedException stopping) {
        answer.cancel(true);
        Thread.currentThread().interrupt();
        break;
      }
      if (r.statusCode() >= 500) {
        refused = r; // the next replica may answer; if none does, the client sees this answer
        refusedBy = e;
        continue;
      }
      relayModels(ex, r, e);
      return;
    }
    if (refused != null && refusedBy != null) {
      // every replica that answered refused (503 while loading, with its Retry-After): the
      // client learns that and when to come back, rather than a 502 saying nobody answered
      relayModels(ex, refused, refusedBy);
      return;
    }
    replyError(ex, 502, "upstream_unavailable", "no replica answered /v1/models");
  }

  /**
   * Collects an answer of at most {@code max} bytes and fails a longer one as soon as it passes
   * the limit (cancelling it, which closes the connection): a replica that answers without end
   * cannot make the gateway hold more than that for one request.
   */
  static final class AtMost implements HttpResponse.BodySubscriber<byte[]> {
    private final HttpResponse.BodySubscriber<byte[]> whole =
        HttpResponse.BodySubscribers.ofByteArray();
    private final long max;
    private long seen;
    private boolean over;
    private java.util.concurrent.Flow.@Nullable Subscription subscription;

    AtMost(long max) {
      this.max = max;
    }

    @Override
    public java.util.concurrent.CompletionStage<byte[]> getBody() {
      return whole.getBody();
    }

    @Override
    public void onSubscribe(java.util.concurrent.Flow.Subscription s) {
      subscription = s;
      whole.onSubscribe(s);
    }

    @Override
    public void onNext(List<ByteBuffer> item) {
      if (over) {
        return; // cancelled: what was already on its way is dropped
      }
      for (ByteBuffer b : item) {
        seen += b.remaining();
      }
      if (seen > max) {
        over = true;
        java.util.concurrent.Flow.Subscription s = subscription;
        if (s != null) {
          s.cancel();
        }
        whole.onError(new IOException("answer above " + max + " bytes"));
        return;
      }
      whole.onNext(item);
    }

    @Override
    public void onError(Throwable t) {
      if (!over) {
        whole.onError(t);
      }
    }

    @Override
    public void onComplete() {
      if (!over) {
        whole.onComplete();
      }
    }
  }

  private void relayModels(HttpExchange ex, HttpResponse<byte[]> r, Endpoint from)
      throws IOException {
    relayHeaders(r.headers(), ex);
    ex.getResponseHeaders().set("content-type",
        r.headers().firstValue("content-type").orElse("application/json"));
    ex.getResponseHeaders().set(RoutingDecision.DESTINATION_HEADER, from.id());
    send(ex, r.statusCode(), r.body());
  }

  /**
   * A path outside {@code /v1/} (a client whose base URL lacks {@code /v1}, say): 404 in the
   * OpenAI shape, worded as OpenAI words it.
   */
  private void unknownPath(HttpExchange ex) throws IOException {
    try (ex) {
      replyError(ex, 404, "invalid_request_error",
          "Invalid URL (" + ex.getRequestMethod() + " " + ex.getRequestURI().getPath() + ")");
    }
  }

  /**
   * An error in the OpenAI shape, which OpenAI client libraries turn into their exceptions; 429
   * and 503 (shed, no endpoint, stopping) say when to try again, {@code Retry-After: 1}, as the
   * Spring Cloud Gateway filter and the Envoy server do.
   */
  private void replyError(HttpExchange ex, int status, String type, String message)
      throws IOException {
    ObjectNode body = JSON.createObjectNode();
    body.putObject("error").put("message", message).put("type", type).put("code", status);
    byte[] b = body.toString().getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("content-type", "application/json");
    if (status == 429 || status == 503) {
      ex.getResponseHeaders().set("retry-after", "1");
    }
    send(ex, status, b);
  }

  /**
   * Sends a whole answer. To {@code HEAD} it sends the headers {@code GET} would get, its
   * {@code content-length} too, and no body: the JDK's server takes no length for a HEAD answer
   * (it would log a warning) and fails a body written after it, which dropped the connection.
   */
  private void send(HttpExchange ex, int status, byte[] body) throws IOException {
    closeAfterIfStopping(ex);
    if ("HEAD".equals(ex.getRequestMethod())) {
      ex.getResponseHeaders().set("content-length", Integer.toString(body.length));
      ex.sendResponseHeaders(status, -1);
      return;
    }
    ex.sendResponseHeaders(status, body.length == 0 ? -1 : body.length);
    ex.getResponseBody().write(body);
  }

  /**
   * An answer that goes out once a stop has begun says {@code Connection: close}, and the server
   * closes the connection after it. Left open, the connection would go back to the client's pool
   * and the stop would close it later, when the last request in progress ends: a client that
   * sent its next request on it at that moment would lose it to a reset, with no answer to tell
   * whether it was served (HTTP clients do not resend a POST). Told to close, the client sends
   * its next request on a new connection, which is answered 503 {@code gateway_stopping} while
   * the stop lasts and refused after it.
   */
  private void closeAfterIfStopping(HttpExchange ex) {
    if (stopping) {
      ex.getResponseHeaders().set("connection", "close");
    }
  }

  /** Stops at once: requests in progress are cut off (see {@link #close(Duration)}). */
  @Override
  public void close() {
    close(Duration.ZERO);
  }

  /**
   * Lets the requests in progress finish for up to {@code grace}, then cuts off what is left and
   * closes the router. Requests that arrive meanwhile get 503 {@code gateway_stopping} with
   * {@code Retry-After} and {@code Connection: close}, so that clients go to another replica of
   * the gateway. A stream being relayed when the process is asked to stop (a rolling update)
   * then ends whole instead of being cut off and reported as failed. Every answer that goes out
   * once the stop has begun says {@code Connection: close} and its connection is closed after it,
   * so that no client sends its next request on a connection the stop is about to close (a
   * stream whose status line went out before cannot say it; its connection stays open until the
   * stop ends).
   *
   * <p>The wait covers every request the server has taken, from its first bytes: one whose
   * headers are still arriving, or one queued for the threads that turn requests beyond
   * {@link Options#maxConcurrentRequests()} away, is answered 503 {@code gateway_stopping} once
   * it has been read. The JDK server cannot stop listening without closing every connection, so
   * it accepts connections until the wait ends, and a connection whose first bytes have not
   * reached it when the wait ends (or any request, when the grace runs out) is closed without an
   * answer. The wait ends when nothing is in progress, at the same instant as the gateway stops
   * taking what the server hands over: a request whose bytes arrive after that is closed unread,
   * not read in part and then cut off by the server's closing.
   */
  public void close(Duration grace) {
    if (closed.getAndSet(true)) {
      return;
    }
    stopping = true;
    // waited here rather than with the JDK server's stop(delay), which on Java 17 waits the whole
    // delay even when nothing is in progress
    long graceNanos;
    try {
      graceNanos = Math.max(0, grace.toNanos());
    } catch (ArithmeticException forever) { // ChronoUnit.FOREVER and the like: no limit
      graceNanos = Long.MAX_VALUE;
    }
    long end = System.nanoTime() + graceNanos;
    // the wait ends when nothing is in progress, atomically with refusing whatever the server
    // hands over after it: a request whose bytes arrive between the last look and the server's
    // closing is then never read, rather than read and cut off without an answer
    boolean shut = false;
    try {
      while (!(shut = taken.compareAndSet(0, SHUT)) && System.nanoTime() - end < 0) {
        Thread.sleep(10);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt(); // stop now
    }
    if (!shut) {
      taken.addAndGet(SHUT); // the grace ran out: those in progress are cut off below
    }
    Runnable hook = stopWaitEnded;
    if (hook != null) {
      hook.run();
    }
    server.stop(0);
    executor.shutdownNow();
    overflow.shutdownNow();
    idleTimer.shutdownNow();
    scraper.close();
    router.close();
  }
}
