package io.epp4j.envoy;

import io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode;
import io.envoyproxy.envoy.service.ext_proc.v3.ExternalProcessorGrpc;
import io.epp4j.core.Router;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.ServerBuilder;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.services.HealthStatusManager;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * An Envoy external processing (ext_proc) server that picks the endpoint of every request with a
 * {@link Router}: Envoy's {@code ext_proc} HTTP filter streams each request to it, and it answers
 * with the {@code x-gateway-destination-endpoint} header and {@code envoy.lb} dynamic metadata
 * that an {@code ORIGINAL_DST} cluster routes by, as the Gateway API Inference Extension's
 * endpoint picker does. It then watches the answer and reports first token, usage and failure to
 * the router. It also serves the standard gRPC health service, on a port of its own too when
 * asked ({@link Builder#healthPort(int)}), as the upstream picker does.
 *
 * <pre>{@code
 * Router router = Router.builder().endpoints(List.of(Endpoint.parse("10.0.0.1:8000"))).build();
 * try (ExtProcServer server = ExtProcServer.builder(router).port(9002).start()) {
 *   server.awaitTermination();
 * }
 * }</pre>
 *
 * <p>Thread-safe. The router stays the caller's: closing the server does not close it.
 */
public final class ExtProcServer implements AutoCloseable {
  /** The port the upstream endpoint picker serves ext_proc on. */
  public static final int DEFAULT_PORT = 9002;
  /**
   * The port the upstream endpoint picker serves its gRPC health probes on
   * ({@code --grpc-health-port}); {@link Builder#healthPort(int)} serves health there too.
   */
  public static final int DEFAULT_HEALTH_PORT = 9003;
  /** Default bound on a request body: 16 MiB, as the request parser's and the SCG filter's. */
  public static final int DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024;
  /**
   * Default bound on one gRPC message from Envoy: 64 MiB (or {@code maxBodyBytes} + 1 MiB when
   * that is more). BUFFERED sends a whole response body as one message, as large as Envoy's
   * buffer limit for the stream allows, which users raise for long answers.
   */
  public static final int DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
  /** Room for the rest of a body message (metadata, framing) besides the body itself. */
  static final int MESSAGE_HEADROOM_BYTES = 1024 * 1024;
  /** Default wait for open streams at {@link #close()}. */
  public static final Duration DEFAULT_DRAIN_TIMEOUT = Duration.ofSeconds(30);
  /**
   * Health service names this server reports on besides the whole server ({@code ""}) and the
   * ext_proc service, as the upstream endpoint picker's probes name them: {@code liveness} and
   * {@code readiness} (its chart with several replicas) and {@code inference-extension} (its
   * chart with one replica, and its conformance Deployment, for which upstream answers any name).
   */
  public static final List<String> PROBE_SERVICES =
      List.of("liveness", "readiness", "inference-extension");

  /** Idle time after which the server pings Envoy's connection (HTTP/2 PING). */
  static final long KEEPALIVE_SECONDS = 60;
  /** How long a ping may go unanswered before the connection and its streams are closed. */
  static final long KEEPALIVE_TIMEOUT_SECONDS = 20;
  /** How long health watches may take to hear NOT_SERVING at close before they are cut off. */
  private static final long WATCH_GRACE_MILLIS = 500;
  private static final Logger LOG = Logger.getLogger(ExtProcServer.class.getName());

  private final Server server;
  /** The health-only server of {@link Builder#healthPort(int)}; null without one. */
  private final @Nullable Server healthServer;
  private final HealthStatusManager health;
  private final LiveStreams live;
  private final Duration drainTimeout;
  private final AtomicBoolean closed = new AtomicBoolean();
  /** {@code Process} streams still open when the drain timeout passed, cancelled by close(). */
  private volatile int cutAtClose;
  /** Renews the decisions of the open streams (see {@link #renewOpenStreams}). */
  private final java.util.concurrent.ScheduledExecutorService renewal;

  private final HeaderRefusals refusals;

  private ExtProcServer(Server server, @Nullable Server healthServer, HealthStatusManager health,
      LiveStreams live, Duration drainTimeout, long renewNanos, HeaderRefusals refusals) {
    this.refusals = refusals;
    this.server = server;
    this.healthServer = healthServer;
    this.health = health;
    this.live = live;
    this.drainTimeout = drainTimeout;
    this.renewal = java.util.concurrent.Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "epp4j-ext-proc-renewal");
      t.setDaemon(true);
      return t;
    });
    renewal.scheduleAtFixedRate(this::renewOpenStreams, renewNanos, renewNanos,
        TimeUnit.NANOSECONDS);
  }

  /**
   * Tells the decision of every request whose stream is open that it is still being served: an
   * answer that is not streamed shows Envoy nothing until it is done, and without this its
   * decision would be released at the router's {@code inFlightMaxAge} while the replica still
   * works on it. Run every quarter of that age.
   */
  void renewOpenStreams() {
    try {
      live.renewOpen();
    } catch (RuntimeException e) {
      LOG.log(java.util.logging.Level.WARNING, "renewing the open streams' decisions failed: "
          + e.getClass().getName(), io.epp4j.api.RedactedException.of(e));
    }
  }

  /** A builder serving {@code router}'s picks. */
  public static Builder builder(Router router) {
    return new Builder(router);
  }

  /** The port the server listens on (the chosen one when built with port 0); -1 in process. */
  public int port() {
    return server.getPort();
  }

  /**
   * The port of the health-only server ({@link Builder#healthPort(int)}; the chosen one when
   * built with 0), or -1 when there is none.
   */
  public int healthPort() {
    return healthServer == null ? -1 : healthServer.getPort();
  }

  /**
   * How many times a header went out of an answer to Envoy, or a request was refused, because
   * Envoy would have refused the header mutation (and replied 500 in place of the request or the
   * endpoint's answer): a header a routing plugin asked to set with a name that is not an HTTP
   * token or a value holding a control character (NUL, CR, LF, ...), one it asked to remove
   * with such a name, or an endpoint id with a control character in the pick (502). Each is also
   * logged, at most one record a minute per kind. Counts since the server started.
   */
  public long refusedHeaders() {
    return refusals.count();
  }

  /** {@code Process} streams open now: requests between their headers and the answer's end. */
  int openStreams() {
    return live.open();
  }

  /** How many {@code Process} streams {@link #close()} cancelled when the drain timeout passed. */
  int streamsCutAtClose() {
    return cutAtClose;
  }

  /** Blocks until the server has stopped (after {@link #close()}, from another thread). */
  public void awaitTermination() throws InterruptedException {
    server.awaitTermination();
  }

  /**
   * Stops gracefully: every health status turns NOT_SERVING (watchers hear it at once; the
   * health-only port answers NOT_SERVING until the drain is over), new streams are refused, open
   * {@code Process} streams get up to the drain timeout to end; those
   * still open then are cancelled, failing their decisions before this returns (whatever runs
   * the callbacks), so that no pick of theirs stays counted in flight. Idempotent; blocks for at
   * most the drain timeout plus a few seconds.
   */
  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    health.enterTerminalState();
    server.shutdown();
    try {
      // saturated: a timeout too long for nanoseconds (toNanos() would throw) waits that long
      if (!live.awaitNone(TimeUnit.NANOSECONDS.convert(drainTimeout))) {
        int open = live.open();
        cutAtClose = open;
        if (open > 0) {
          // the requests these streams carry lose their answers: say so, and how many
          LOG.warning(open + " ext_proc stream(s) still open after the drain timeout of "
              + drainTimeout + ": cancelling them, their requests fail");
        }
      }
      // health watches never end by themselves: a moment for the NOT_SERVING just sent to reach
      // their clients, then they and the streams the drain did not see end are cut off
      if (healthServer != null) {
        healthServer.shutdown();
      }
      server.awaitTermination(WATCH_GRACE_MILLIS, TimeUnit.MILLISECONDS);
      server.shutdownNow();
      server.awaitTermination(5, TimeUnit.SECONDS);
      if (healthServer != null) {
        healthServer.shutdownNow();
        healthServer.awaitTermination(5, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      server.shutdownNow();
      if (healthServer != null) {
        healthServer.shutdownNow();
      }
      Thread.currentThread().interrupt();
    } finally {
      // the cut streams' cancellations run on the callbacks' executor: a user's pool runs them
      // after this returns, or never once it is shut down. Their requests can get no answer
      // through this server any more: their picks are released now, not at inFlightMaxAge
      live.abandonOpen();
      renewal.shutdownNow(); // after the drain: a draining request is still being served
    }
  }

  /** How long a routed request may stream before its decision hears it is still served. */
  static final long MIN_RENEWAL_NANOS = TimeUnit.MILLISECONDS.toNanos(100);

  /**
   * A quarter of the router's {@code inFlightMaxAge} (at least 100 ms): an answer that streams
   * longer than that age renews its decision ({@code RoutingDecision.onActivity()}) at least
   * every quarter of it, so the router does not release a request that is still being served.
   */
  static long renewEveryNanos(Duration inFlightMaxAge) {
    return Math.max(MIN_RENEWAL_NANOS, TimeUnit.NANOSECONDS.convert(inFlightMaxAge) / 4);
  }

  /**
   * Builds an {@link ExtProcServer}. Defaults: port {@value #DEFAULT_PORT} on every interface,
   * request bodies up to 16 MiB, a 30 s drain, callbacks on the transport's threads, and FULL_DUPLEX_STREAMED
   * assumed for both bodies when Envoy does not announce its modes.
   */
  public static final class Builder {
    private final Router router;
    private int port = DEFAULT_PORT;
    private int healthPort = -1; // none
    private @Nullable String host;
    private int maxBodyBytes = DEFAULT_MAX_BODY_BYTES;
    private int maxMessageBytes; // 0: the default, which follows maxBodyBytes
    private BodySendMode requestMode = BodySendMode.FULL_DUPLEX_STREAMED;
    private BodySendMode responseMode = BodySendMode.FULL_DUPLEX_STREAMED;
    private Duration drainTimeout = DEFAULT_DRAIN_TIMEOUT;
    private boolean subsetHints = true;
    private @Nullable Executor executor;
    private @Nullable ServerBuilder<?> transport;
    private io.grpc.@Nullable ServerCredentials tls;

    private Builder(Router router) {
      this.router = Objects.requireNonNull(router, "router");
    }

    /** Port to listen on; 0 picks a free one ({@link #port()} tells which). */
    public Builder port(int port) {
      if (port < 0 || port > 65535) {
        throw new IllegalArgumentException("port must be 0..65535, got " + port);
      }
      this.port = port;
      return this;
    }

    /**
     * Serves the gRPC health service (only) on this port too, in plaintext whatever
     * {@link #tls} says, as the upstream endpoint picker serves its probes on
     * {@code --grpc-health-port} ({@value #DEFAULT_HEALTH_PORT}): Kubernetes gRPC probes do not
     * speak TLS. Health stays on the ext_proc port as well. 0 picks a free port
     * ({@link #healthPort()} tells which). Default: no such port. Same host as ext_proc.
     */
    public Builder healthPort(int port) {
      if (port < 0 || port > 65535) {
        throw new IllegalArgumentException("healthPort must be 0..65535, got " + port);
      }
      this.healthPort = port;
      return this;
    }

    /** No health-only port (the default); undoes {@link #healthPort(int)}. */
    Builder withoutHealthPort() {
      this.healthPort = -1;
      return this;
    }

    /**
     * Address to listen on, e.g. {@code 127.0.0.1}; default every interface. An empty one is
     * refused: the JDK would take it for the loopback address.
     */
    public Builder host(String host) {
      Objects.requireNonNull(host, "host");
      if (host.isBlank()) {
        throw new IllegalArgumentException("host must not be empty (leave it unset to listen on "
            + "every interface), got '" + host + "'");
      }
      this.host = host;
      return this;
    }

    /**
     * Largest request body taken; a larger one is answered 413 as soon as its bytes pass the
     * limit. Answers are not bounded by it (see {@link #maxMessageBytes(int)}).
     */
    public Builder maxBodyBytes(int bytes) {
      if (bytes <= 0) {
        throw new IllegalArgumentException("maxBodyBytes must be > 0, got " + bytes);
      }
      this.maxBodyBytes = bytes;
      return this;
    }

    /**
     * Largest gRPC message taken from Envoy; gRPC refuses a larger one and resets its stream
     * (RESOURCE_EXHAUSTED on this side; Envoy then answers the client 500). BUFFERED sends a whole body as one message, so this
     * must hold the largest answer Envoy buffers (its {@code per_connection_buffer_limit_bytes}
     * or the route's {@code per_request_buffer_limit_bytes}, 1 MiB unless raised) and a request
     * body of {@code maxBodyBytes} with 1 MiB to spare, which {@link #start()} checks. Default
     * {@value #DEFAULT_MAX_MESSAGE_BYTES} bytes, or {@code maxBodyBytes} + 1 MiB when larger.
     */
    public Builder maxMessageBytes(int bytes) {
      if (bytes <= 0) {
        throw new IllegalArgumentException("maxMessageBytes must be > 0, got " + bytes);
      }
      this.maxMessageBytes = bytes;
      return this;
    }

    /**
     * The body modes to assume when Envoy's first message carries no {@code protocol_config}
     * (Envoy releases before it sent one): they must match the filter's {@code processing_mode}.
     * Envoy that announces its modes is followed whatever these say. A STREAMED request body is
     * refused here: it needs {@code send_body_without_waiting_for_header_response: true}, which
     * only {@link #assumedBodyModes(BodySendMode, BodySendMode, boolean)} can state.
     */
    public Builder assumedBodyModes(BodySendMode request, BodySendMode response) {
      return assumed("assumedBodyModes(request, response): ", request, response, false);
    }

    /**
     * The body modes to assume when Envoy's first message carries no {@code protocol_config},
     * with the filter's {@code send_body_without_waiting_for_header_response}, the three things
     * that message would announce. A STREAMED request body is served only when that setting is
     * true: the pick depends on the body, so the request headers are answered after it, and
     * without the setting Envoy holds the body back until they are answered, so every request
     * would wait for Envoy's {@code message_timeout}. Envoy ignores the setting in the other
     * modes.
     */
    public Builder assumedBodyModes(BodySendMode request, BodySendMode response,
        boolean sendBodyWithoutWaitingForHeaderResponse) {
      return assumed(
          "assumedBodyModes(request, response, sendBodyWithoutWaitingForHeaderResponse): ",
          request, response, sendBodyWithoutWaitingForHeaderResponse);
    }

    private Builder assumed(String knob, BodySendMode request, BodySendMode response,
        boolean sendBodyWithoutWaiting) {
      BodySendMode requestChecked = check(knob, "request", request);
      BodySendMode responseChecked = check(knob, "response", response);
      if (requestChecked == BodySendMode.STREAMED && !sendBodyWithoutWaiting) {
        // the check ProcessStream makes of an announced protocol_config, made of the assumed one
        throw new IllegalArgumentException(knob + "request is STREAMED, which needs the filter's "
            + "send_body_without_waiting_for_header_response: true (the pick depends on the body, "
            + "so the headers are answered after it, and without that setting Envoy holds the "
            + "body back until they are answered); with it set, say so: assumedBodyModes(STREAMED, "
            + response + ", true); or use FULL_DUPLEX_STREAMED or BUFFERED");
      }
      this.requestMode = requestChecked;
      this.responseMode = responseChecked;
      return this;
    }

    /** Refusals name the setting and its argument as the caller wrote them. */
    private static BodySendMode check(String setting, String argument, BodySendMode mode) {
      String knob = setting + argument;
      Objects.requireNonNull(mode, () -> knob + " is null");
      boolean request = argument.equals("request");
      if (mode == BodySendMode.UNRECOGNIZED) {
        throw new IllegalArgumentException(knob + " is UNRECOGNIZED, which is no body mode; use "
            + (request ? ProcessStream.REQUEST_MODES : ProcessStream.RESPONSE_MODES));
      }
      if (request && mode == BodySendMode.NONE) {
        throw new IllegalArgumentException(knob + " is NONE, which cannot be served: the pick "
            + "depends on the request body; use " + ProcessStream.REQUEST_MODES);
      }
      return mode;
    }

    /**
     * Whether the proxy's subset hint ({@code envoy.lb.subset_hint} /
     * {@code x-gateway-destination-endpoint-subset} in {@code metadata_context}) limits the pick;
     * default true, as the protocol asks. False reads no hint at all, so a request is routed
     * among every endpoint of the router and a malformed hint is not an error, as the upstream
     * picker does with {@code --disable-endpoint-subset-filter}.
     */
    public Builder subsetHints(boolean respected) {
      this.subsetHints = respected;
      return this;
    }

    /**
     * How long {@link #close()} waits for open streams before cancelling them; one too long for
     * a {@code long} of nanoseconds (about 292 years) waits as long as it takes.
     */
    public Builder drainTimeout(Duration timeout) {
      Objects.requireNonNull(timeout, "drainTimeout");
      if (timeout.isNegative()) {
        throw new IllegalArgumentException("drainTimeout must be >= 0, got " + timeout);
      }
      this.drainTimeout = timeout;
      return this;
    }

    /**
     * Executor for the streams' callbacks. Default: none, the callbacks run on the transport's
     * own threads (gRPC's {@code directExecutor}), since they never block: routing is CPU work
     * and plugins must not block (the SPI's contract). That saves a thread hand-off for every
     * message; {@code ExtProcBenchmark} measured a whole stream at 0.46–0.85 × its time on gRPC's
     * shared pool. Give a pool here when plugins of your own may block.
     */
    public Builder executor(Executor executor) {
      this.executor = Objects.requireNonNull(executor, "executor");
      return this;
    }

    /**
     * Serves TLS with the PEM certificate chain (the server's certificate first) and its
     * unencrypted PEM private key, as the upstream endpoint picker serves {@code tls.crt} and
     * {@code tls.key}: PKCS#8 ({@code -----BEGIN PRIVATE KEY-----}), PKCS#1
     * ({@code -----BEGIN RSA PRIVATE KEY-----}) or SEC1 ({@code -----BEGIN EC PRIVATE KEY-----},
     * naming its curve), the forms Go's {@code tls.LoadX509KeyPair} reads; ext_proc and health
     * share the port. Default: plaintext. The files are read now, once.
     *
     * @throws IllegalArgumentException naming the file, when one is missing or unreadable, holds
     *     no certificate or key (or an encrypted key), or the key is not the certificate's
     */
    public Builder tls(Path certificateChain, Path privateKey) {
      return tls(certificateChain, privateKey, false);
    }

    /**
     * As {@link #tls(Path, Path)}; with {@code reloadWhenChanged} the files are read again when
     * their modification time or size changes (looked at on a handshake, at most once a second),
     * as the upstream endpoint picker's {@code --enable-cert-reload}: new connections get the new
     * certificate, open ones keep theirs. New files that cannot be read or do not match are
     * logged and the certificate in use stays.
     */
    public Builder tls(Path certificateChain, Path privateKey, boolean reloadWhenChanged) {
      Objects.requireNonNull(certificateChain, "certificateChain");
      Objects.requireNonNull(privateKey, "privateKey");
      this.tls = reloadWhenChanged
          ? new ReloadingKeyManager(certificateChain, privateKey).credentials()
          : ServerTls.fromPem(certificateChain, privateKey).credentials();
      return this;
    }

    /**
     * Serves TLS with a certificate made now: a new EC P-256 key, self-signed, for Envoy clusters
     * that encrypt without validating the picker's certificate (the upstream endpoint picker's
     * behaviour without a cert path). Default: plaintext.
     */
    public Builder selfSignedTls() {
      this.tls = ServerTls.selfSigned().credentials();
      return this;
    }

    /** A transport other than Netty TCP (tests use gRPC's in-process one). */
    Builder transport(ServerBuilder<?> serverBuilder) {
      this.transport = serverBuilder;
      return this;
    }

    /**
     * Starts listening.
     *
     * @throws IOException when the port cannot be bound (the message names it)
     * @throws IllegalArgumentException when {@code maxMessageBytes} leaves no room for a
     *     request body of {@code maxBodyBytes}
     */
    public ExtProcServer start() throws IOException {
      int parserLimit = router.requestParser().maxBodyBytes();
      if (maxBodyBytes > parserLimit) {
        // the router would answer a body between the two limits 400 ("above the limit"): the
        // limit given here would not hold
        throw new IllegalArgumentException("maxBodyBytes (" + maxBodyBytes + ") is above the "
            + "router's request parser limit (" + parserLimit + "): build the router with "
            + "requestParser(OpenAiRequestParser.of(" + maxBodyBytes + ", ...))");
      }
      long bodyMessage = maxBodyBytes + (long) MESSAGE_HEADROOM_BYTES;
      if (maxMessageBytes != 0 && maxMessageBytes < bodyMessage) {
        throw new IllegalArgumentException("maxMessageBytes (" + maxMessageBytes + ") must be at "
            + "least maxBodyBytes (" + maxBodyBytes + ") + 1 MiB: BUFFERED sends a request body "
            + "as one message, and one within the limit must get through to be answered");
      }
      int messageLimit = maxMessageBytes != 0 ? maxMessageBytes
          : (int) Math.min(Integer.MAX_VALUE, Math.max(DEFAULT_MAX_MESSAGE_BYTES, bodyMessage));
      LiveStreams live = new LiveStreams();
      ProcessStream.Settings settings =
          new ProcessStream.Settings(router, maxBodyBytes, requestMode, responseMode,
              renewEveryNanos(router.inFlightMaxAge()), subsetHints,
              new HeaderRefusals(router.ticker()));
      HealthStatusManager health = new HealthStatusManager();
      ServerBuilder<?> b = transport;
      if (b == null) {
        b = NettyServerBuilder.forAddress(address(host, port),
                tls == null ? InsecureServerCredentials.create() : tls)
            // Envoy may be set to ping idle connections; tolerate any sane interval
            .permitKeepAliveTime(10, TimeUnit.SECONDS)
            .permitKeepAliveWithoutCalls(true)
            // and find a connection that died silently: its streams end (failing their
            // decisions) instead of counting as requests still served, which the renewal timer
            // would otherwise keep renewing
            .keepAliveTime(KEEPALIVE_SECONDS, TimeUnit.SECONDS)
            .keepAliveTimeout(KEEPALIVE_TIMEOUT_SECONDS, TimeUnit.SECONDS);
      }
      b.maxInboundMessageSize(messageLimit)
          .addService(new ExtProcService(settings, live))
          .addService(health.getHealthService());
      if (executor != null) {
        b.executor(executor);
      } else {
        b.directExecutor();
      }
      Server server = b.build();
      try {
        server.start();
      } catch (IOException e) {
        throw new IOException("cannot listen on " + (host == null ? "port " : host + ":") + port
            + ": " + e.getMessage(), e);
      }
      Server healthServer = null;
      if (healthPort >= 0) {
        healthServer = NettyServerBuilder.forAddress(address(host, healthPort),
                InsecureServerCredentials.create())
            .addService(health.getHealthService())
            .directExecutor() // Check and Watch answer from memory
            .build();
        try {
          healthServer.start();
        } catch (IOException e) {
          server.shutdownNow();
          throw new HealthPortUnavailable("cannot listen on "
              + (host == null ? "port " : host + ":") + healthPort + " (gRPC health): "
              + e.getMessage(), e);
        }
      }
      health.setStatus(HealthStatusManager.SERVICE_NAME_ALL_SERVICES, ServingStatus.SERVING);
      health.setStatus(ExternalProcessorGrpc.SERVICE_NAME, ServingStatus.SERVING);
      for (String probe : PROBE_SERVICES) {
        health.setStatus(probe, ServingStatus.SERVING);
      }
      return new ExtProcServer(server, healthServer, health, live, drainTimeout,
          settings.renewNanos(), settings.refusals());
    }

    private static InetSocketAddress address(@Nullable String host, int port) {
      return host == null ? new InetSocketAddress(port) : new InetSocketAddress(host, port);
    }
  }

  /** The health-only port of {@link Builder#healthPort(int)} could not be bound. */
  static final class HealthPortUnavailable extends IOException {
    private static final long serialVersionUID = 1L;

    HealthPortUnavailable(String message, IOException cause) {
      super(message, cause);
    }
  }
}
