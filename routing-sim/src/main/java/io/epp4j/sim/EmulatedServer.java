package io.epp4j.sim;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.MissingNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.kvevents.Tokenizer;
import io.netty.bootstrap.ServerBootstrap;
import io.netty.buffer.ByteBufUtil;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOutboundHandlerAdapter;
import io.netty.channel.ChannelOption;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.SimpleChannelInboundHandler;
import io.netty.channel.group.ChannelGroup;
import io.netty.channel.group.DefaultChannelGroup;
import io.netty.channel.nio.NioIoHandler;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.handler.codec.DateFormatter;
import io.netty.handler.codec.http.DefaultFullHttpResponse;
import io.netty.handler.codec.http.DefaultHttpContent;
import io.netty.handler.codec.http.DefaultHttpResponse;
import io.netty.handler.codec.http.FullHttpRequest;
import io.netty.handler.codec.http.FullHttpResponse;
import io.netty.handler.codec.http.HttpHeaderNames;
import io.netty.handler.codec.http.HttpHeaderValues;
import io.netty.handler.codec.http.HttpMessage;
import io.netty.handler.codec.http.HttpObjectAggregator;
import io.netty.handler.codec.http.HttpRequest;
import io.netty.handler.codec.http.HttpResponse;
import io.netty.handler.codec.http.HttpResponseStatus;
import io.netty.handler.codec.http.HttpServerCodec;
import io.netty.handler.codec.http.HttpUtil;
import io.netty.handler.codec.http.HttpVersion;
import io.netty.handler.codec.http.LastHttpContent;
import io.netty.handler.timeout.IdleStateEvent;
import io.netty.handler.timeout.IdleStateHandler;
import io.netty.util.ReferenceCountUtil;
import io.netty.util.concurrent.DefaultThreadFactory;
import io.netty.util.internal.logging.InternalLoggerFactory;
import io.netty.util.internal.logging.JdkLoggerFactory;
import java.io.IOException;
import java.math.BigDecimal;
import java.net.BindException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.jspecify.annotations.Nullable;

/**
 * One emulated replica's OpenAI-compatible HTTP API on a loopback port, in vLLM's shapes:
 * {@code /v1/completions}, {@code /v1/chat/completions} (streaming and not), {@code /v1/models},
 * {@code /health} (and {@code /ping}), {@code /version}, {@code /tokenize}, {@code /detokenize} and
 * {@code /metrics} (vLLM's Prometheus names), each on the methods vLLM's route takes.
 *
 * <p>Text is tokenized by the {@link Tokenizer} given (the model's own, loaded from its
 * {@code tokenizer.json}), or else by {@link #tokenize(String)}, a deterministic stand-in that is
 * not the model's tokenizer. The generated text is filler, one word per token.
 *
 * <p>HTTP/1.1 is served by Netty on one I/O thread; each request is handled on a thread of its
 * own (it waits for its tokens there), and a connection's requests are answered in the order they
 * came. The I/O thread keeps reading every connection while its answer is generated, so a client
 * that closes its connection is heard at once, streaming or not, and its request is aborted as
 * vLLM aborts it: it leaves the batch and frees its KV blocks.
 */
final class EmulatedServer implements AutoCloseable {
  /** Output tokens when the request names none (vLLM's default for completions). */
  static final int DEFAULT_MAX_TOKENS = 16;
  // writes the answers; request bodies are read by RequestBody
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String FILLER = " lorem";
  private static final AtomicLong IDS = new AtomicLong();
  /** Largest request body read; a larger one is refused with 413 (vLLM's own server has none). */
  static final int MAX_BODY_BYTES = 64 << 20;
  // what a request's queue hears when its client closed the connection; two elements, so that
  // the loops reading tokens (one element each) end on it
  private static final int[] CLIENT_GONE = {-3, 0};
  private static final byte[] EMPTY = new byte[0];
  private static final String PROMPT_REQUIRED = "field 'prompt' is required";
  /**
   * Requests of one connection read and not yet answered in full at which the server stops
   * reading it, until one is answered: a client that pipelines thousands of requests is held back
   * by TCP's flow control instead of having them all queued in memory. Past this, at most what
   * one read of the socket had already fetched (64 KiB at most) is decoded. Reading also stops
   * while the bodies of those requests hold {@link #MAX_BODY_BYTES} or more, so that a connection
   * holds about one largest body's worth, not sixteen.
   */
  static final int MAX_PIPELINED = 16;

  static {
    // Netty logs through SLF4J when it finds it on the class path, and SLF4J without a provider
    // prints a warning of its own to stderr: the JDK's logging instead, which stays quiet below
    // warnings (and the handler below leaves nothing for Netty to warn about)
    InternalLoggerFactory.setDefaultFactory(JdkLoggerFactory.INSTANCE);
  }

  private final EmulatedCluster cluster;
  private final int replica;
  private final String model;
  // what every answer names in system_fingerprint
  private final String systemFingerprint;
  private final List<String> loraAdapters;
  // an adapter's path (its root in /v1/models) by its name, for the adapters given one
  private final Map<String, String> loraPaths;
  private final EventLoopGroup io;
  private final Channel serverChannel;
  private final ChannelGroup connections;
  private final ExecutorService executor;
  private final @Nullable Tokenizer tokenizer;
  // vLLM's --exclude-tools-when-tool-choice-none
  private final boolean excludeToolsWhenToolChoiceNone;
  // vLLM's --enable-prompt-tokens-details: usage names the prompt's cached tokens
  private final boolean promptTokensDetails;
  // vLLM's --enable-force-include-usage: every stream ends with the usage chunk
  private final boolean forceIncludeUsage;
  private final BodyBudget budget;
  private final AtomicLong requestsRead = new AtomicLong();
  // requests whose answer ended with finish_reason "stop" (the rest of those the engine finished
  // ended on "length")
  private final AtomicLong finishedOnStop = new AtomicLong();
  private volatile boolean stopping;
  private boolean closed;

  /**
   * Binds {@code 127.0.0.1:port}, with the stand-in tokenizer.
   *
   * @throws IllegalStateException naming the port when it is taken
   */
  EmulatedServer(EmulatedCluster cluster, int replica, int port) {
    this(cluster, replica, port, List.of(), null,
        Math.round(Serve.DEFAULT_KEEP_ALIVE_SECONDS * 1e9));
  }

  /** With a body budget of its own, of the default size. */
  EmulatedServer(EmulatedCluster cluster, int replica, int port, List<String> loraAdapters,
      @Nullable Tokenizer tokenizer, long keepAliveNanos) {
    this(cluster, replica, port, loraAdapters, tokenizer, keepAliveNanos,
        new BodyBudget(BodyBudget.DEFAULT_BYTES));
  }

  /**
   * Binds {@code 127.0.0.1:port}, also serving the LoRA adapters {@code loraAdapters}: as with
   * vLLM's {@code --lora-modules}, a request names one in its {@code model} field.
   *
   * @param tokenizer the tokenizer of text prompts and chats; {@code null} for the stand-in
   * @param keepAliveNanos how long a connection may stay idle (nothing read or written, no
   *     request being answered) before the server closes it, as vLLM's server does after 5 s;
   *     0 to keep it open until the client closes it
   * @param budget the bytes of request bodies held at once, shared with the other replicas
   * @throws IllegalStateException naming the port when it is taken
   */
  EmulatedServer(EmulatedCluster cluster, int replica, int port, List<String> loraAdapters,
      @Nullable Tokenizer tokenizer, long keepAliveNanos, BodyBudget budget) {
    this(cluster, replica, port, loraAdapters, tokenizer, keepAliveNanos, budget, false);
  }

  /**
   * As above; with {@code excludeToolsWhenToolChoiceNone} (vLLM's
   * {@code --exclude-tools-when-tool-choice-none}) a chat completion whose {@code tool_choice}
   * is {@code "none"} is rendered without its {@code tools}. {@code /tokenize} renders the tools
   * it is given either way, as vLLM's does.
   */
  EmulatedServer(EmulatedCluster cluster, int replica, int port, List<String> loraAdapters,
      @Nullable Tokenizer tokenizer, long keepAliveNanos, BodyBudget budget,
      boolean excludeToolsWhenToolChoiceNone) {
    this(cluster, replica, port, loraAdapters, tokenizer, keepAliveNanos, budget,
        excludeToolsWhenToolChoiceNone, false);
  }

  /**
   * As above; with {@code promptTokensDetails} (vLLM's {@code --enable-prompt-tokens-details})
   * an answer's usage names the prompt tokens found in the prefix cache in
   * {@code prompt_tokens_details.cached_tokens}. Without it, as vLLM by default, a whole answer's
   * usage has {@code "prompt_tokens_details": null} and a stream's usage chunk no such key.
   */
  EmulatedServer(EmulatedCluster cluster, int replica, int port, List<String> loraAdapters,
      @Nullable Tokenizer tokenizer, long keepAliveNanos, BodyBudget budget,
      boolean excludeToolsWhenToolChoiceNone, boolean promptTokensDetails) {
    this(cluster, replica, port, loraAdapters, tokenizer, keepAliveNanos, budget,
        excludeToolsWhenToolChoiceNone, promptTokensDetails, false);
  }

  /**
   * As above; with {@code forceIncludeUsage} (vLLM's {@code --enable-force-include-usage}) every
   * stream ends with the usage chunk, whether or not the request asked for it with
   * {@code stream_options}, as if its {@code include_usage} were true.
   */
  EmulatedServer(EmulatedCluster cluster, int replica, int port, List<String> loraAdapters,
      @Nullable Tokenizer tokenizer, long keepAliveNanos, BodyBudget budget,
      boolean excludeToolsWhenToolChoiceNone, boolean promptTokensDetails,
      boolean forceIncludeUsage) {
    this(cluster, replica, port, loraAdapters, tokenizer, keepAliveNanos, budget,
        excludeToolsWhenToolChoiceNone, promptTokensDetails, forceIncludeUsage, Map.of());
  }

  /**
   * As above; {@code loraPaths} gives the path of an adapter by its name, which
   * {@code /v1/models} names as the adapter's {@code root}, as vLLM names the path of each of its
   * {@code --lora-modules} there. An adapter without one has its name there.
   */
  EmulatedServer(EmulatedCluster cluster, int replica, int port, List<String> loraAdapters,
      @Nullable Tokenizer tokenizer, long keepAliveNanos, BodyBudget budget,
      boolean excludeToolsWhenToolChoiceNone, boolean promptTokensDetails,
      boolean forceIncludeUsage, Map<String, String> loraPaths) {
    this.loraPaths = Map.copyOf(loraPaths);
    this.excludeToolsWhenToolChoiceNone = excludeToolsWhenToolChoiceNone;
    this.promptTokensDetails = promptTokensDetails;
    this.forceIncludeUsage = forceIncludeUsage;
    this.budget = budget;
    this.loraAdapters = List.copyOf(loraAdapters);
    this.cluster = cluster;
    this.replica = replica;
    this.tokenizer = tokenizer;
    this.model = cluster.profile().model();
    this.systemFingerprint = systemFingerprint(cluster.profile(), loraAdapters, tokenizer != null);
    io = new MultiThreadIoEventLoopGroup(1,
        new DefaultThreadFactory("epp4j-emulator-io-" + port, true), NioIoHandler.newFactory());
    connections = new DefaultChannelGroup(io.next());
    // a request waits for its tokens on a thread of its own, never on the I/O thread
    executor = Executors.newCachedThreadPool(r -> {
      Thread t = new Thread(r, "epp4j-emulator-http-" + port);
      t.setDaemon(true);
      return t;
    });
    ServerBootstrap bootstrap = new ServerBootstrap()
        .group(io)
        .channel(NioServerSocketChannel.class)
        .option(ChannelOption.SO_BACKLOG, 64)
        // vLLM's server sends each SSE chunk at once; with Nagle's algorithm a token (one small
        // write) would wait for the ACK of the one before, which delayed ACKs hold back
        .childOption(ChannelOption.TCP_NODELAY, true)
        .childHandler(new ChannelInitializer<SocketChannel>() {
          @Override
          protected void initChannel(SocketChannel ch) {
            connections.add(ch);
            if (keepAliveNanos > 0) {
              // output still draining to a slow client counts as activity (observeOutput)
              ch.pipeline().addLast(
                  new IdleStateHandler(true, 0, 0, keepAliveNanos, TimeUnit.NANOSECONDS));
            }
            ReadGate gate = new ReadGate();
            BodyReservation reservation = new BodyReservation(gate);
            ch.pipeline()
                .addLast(gate)
                .addLast(new HttpServerCodec(16 * 1024, 64 * 1024, 64 * 1024))
                .addLast(reservation)
                .addLast(new BodyLimit())
                .addLast(new Connection(gate, reservation));
          }
        });
    try {
      serverChannel = bootstrap.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port))
          .syncUninterruptibly().channel();
    } catch (Exception e) {
      shutDown();
      if (e instanceof BindException) {
        throw new IllegalStateException("HTTP port " + port + " on 127.0.0.1 is already in use",
            e);
      }
      throw new IllegalStateException("HTTP port " + port + " on 127.0.0.1 cannot be bound: "
          + e.getMessage(), e);
    }
  }

  /**
   * The {@code system_fingerprint} of this configuration's answers. Current vLLM writes one by
   * default ({@code --fingerprint-mode full}: {@code vllm-<version>-<hash8>}, the hash of its
   * configuration); the emulator writes {@code epp4j-serve-<hash8>}, not naming a vLLM release
   * it is not, its hash covering the hardware profile (model, context, KV cache, step times),
   * the LoRA adapters served and whether the model's tokenizer is used: replicas of one
   * configuration answer with the same fingerprint, and a change of it changes the fingerprint.
   */
  static String systemFingerprint(HardwareProfile profile, List<String> loraAdapters,
      boolean modelTokenizer) {
    String config = profile + "|" + loraAdapters + "|"
        + (modelTokenizer ? "tokenizer" : "stand-in");
    try {
      byte[] hash = java.security.MessageDigest.getInstance("SHA-256")
          .digest(config.getBytes(StandardCharsets.UTF_8));
      return "epp4j-serve-" + java.util.HexFormat.of().formatHex(hash, 0, 4);
    } catch (java.security.NoSuchAlgorithmException impossible) {
      throw new IllegalStateException(impossible);
    }
  }

  int port() {
    return ((InetSocketAddress) serverChannel.localAddress()).getPort();
  }

  /** Requests read so far, over every connection (whether answered yet or not). */
  long requestsRead() {
    return requestsRead.get();
  }

  /** Refuses new requests with 503 from now on. */
  void beginStopping() {
    stopping = true;
  }

  /**
   * Waits, until {@code deadlineNanos} ({@link System#nanoTime()}) at the latest, for the
   * requests read so far to be answered and for each connection's last answer to be written to
   * its socket: after {@link EmulatedCluster#close()}, a stream in flight ends with its error
   * event and {@code data: [DONE]}, and the close that follows must not cut them off (Netty drops
   * what a channel has not yet written when it closes). A client that reads nothing is waited for
   * until the deadline only.
   */
  void drain(long deadlineNanos) {
    for (Channel ch : connections) {
      Connection c = ch.pipeline().get(Connection.class);
      if (c == null) {
        continue;
      }
      try {
        c.previous.get(Math.max(0, deadlineNanos - System.nanoTime()), TimeUnit.NANOSECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
        // not answered in time: the close cuts it off
        continue;
      }
      Exchange last = c.last;
      ChannelFuture written = last == null ? null : last.lastWrite;
      if (written != null) {
        written.awaitUninterruptibly(Math.max(0, deadlineNanos - System.nanoTime()),
            TimeUnit.NANOSECONDS);
      }
    }
  }

  /**
   * Stops listening and closes every connection (their requests in flight are aborted, as when
   * their clients leave), then stops the server's threads. Alone, this is a crash: a request read
   * meanwhile is served or cut off, never answered 503 (which would tell a gateway not to try
   * another replica); a graceful stop calls {@link #beginStopping()} first.
   */
  @Override
  public void close() {
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
    }
    serverChannel.close().awaitUninterruptibly(5, TimeUnit.SECONDS);
    connections.close().awaitUninterruptibly(5, TimeUnit.SECONDS);
    shutDown();
  }

  private void shutDown() {
    // the request threads first (a waiting one is interrupted): none may write to a connection
    // once the I/O thread is gone, where Netty could only log that it cannot
    executor.shutdownNow();
    try {
      executor.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    io.shutdownGracefully(0, 5, TimeUnit.SECONDS).awaitUninterruptibly(10, TimeUnit.SECONDS);
  }

  /** Refuses a body over {@link #MAX_BODY_BYTES} with an OpenAI-shaped 413. */
  private static final class BodyLimit extends HttpObjectAggregator {
    BodyLimit() {
      super(MAX_BODY_BYTES);
    }

    @Override
    protected void handleOversizedMessage(ChannelHandlerContext ctx, HttpMessage oversized) {
      // the rest of the body is not read: the connection closes after the answer
      ctx.writeAndFlush(tooLarge()).addListener(ChannelFutureListener.CLOSE);
    }

    /**
     * A request that expects 100-continue (curl sends the header with any body over 1 MiB) and
     * declares a body over the limit is answered with the same 413 as one that sends it, not
     * Netty's own 413 without a body (which left the connection open, waiting for a body the
     * client would not send).
     */
    @Override
    protected @Nullable Object newContinueResponse(HttpMessage start, int maxContentLength,
        io.netty.channel.ChannelPipeline pipeline) {
      Object res = super.newContinueResponse(start, maxContentLength, pipeline);
      if (res instanceof HttpResponse r
          && r.status().equals(HttpResponseStatus.REQUEST_ENTITY_TOO_LARGE)) {
        ReferenceCountUtil.release(res);
        return tooLarge();
      }
      return res;
    }

    @Override
    protected boolean closeAfterContinueResponse(Object msg) {
      return msg instanceof HttpResponse r
          && r.status().equals(HttpResponseStatus.REQUEST_ENTITY_TOO_LARGE)
          || super.closeAfterContinueResponse(msg);
    }

    private static FullHttpResponse tooLarge() {
      FullHttpResponse res = response(413, "application/json", errorBody(413,
          "BadRequestError", "the request body is larger than " + MAX_BODY_BYTES + " bytes"));
      HttpUtil.setKeepAlive(res, false);
      return res;
    }
  }

  /**
   * Holds back the reads asked for while its connection is paused. Turning auto-read off alone
   * does not stop them: the aggregator asks for the rest of a request it has begun, and when one
   * read ends one body and begins the next, it goes on asking, request after request.
   */
  private static final class ReadGate extends ChannelOutboundHandlerAdapter {
    // only the I/O thread touches them: too many requests unanswered, a body waiting for the
    // budget
    private boolean pipelineFull;
    private boolean waitingForBudget;

    @Override
    public void read(ChannelHandlerContext ctx) {
      if (!paused()) {
        ctx.read();
      }
    }

    boolean paused() {
      return pipelineFull || waitingForBudget;
    }

    /** Reads the connection again if nothing holds it back any more. */
    void resumeIfFree(Channel channel) {
      if (!paused() && !channel.config().isAutoRead()) {
        channel.config().setAutoRead(true);
      }
    }
  }

  /**
   * Reserves each request body's bytes in the {@link BodyBudget} before the body is read: its
   * {@code Content-Length}, or the largest body when it comes in chunks (the surplus is given back
   * once it has been read). A request that does not fit waits with its connection unread; what
   * the codec had decoded of the connection meanwhile (one read's worth at most) is held here and
   * passed on in order once the bytes are granted.
   */
  private final class BodyReservation extends ChannelInboundHandlerAdapter
      implements BodyBudget.Waiter {
    private final ReadGate gate;
    private final ArrayDeque<Object> held = new ArrayDeque<>();
    private @Nullable ChannelHandlerContext context;
    // the I/O thread's alone: the bytes waited for (0 when not waiting), the reservation of the
    // request being read and not yet handed to the connection, whether the connection closed
    private long waitingFor;
    private long reserved;
    private boolean inactive;

    BodyReservation(ReadGate gate) {
      this.gate = gate;
    }

    @Override
    public void handlerAdded(ChannelHandlerContext ctx) {
      context = ctx;
    }

    /** Whether a request is waiting for its body's bytes, its connection unread meanwhile. */
    boolean waiting() {
      return waitingFor > 0;
    }

    /** Hands the reservation of the request just read over to its exchange. */
    long takeReserved() {
      long r = reserved;
      reserved = 0;
      return r;
    }

    @Override
    public void channelRead(ChannelHandlerContext ctx, Object msg) {
      if (waitingFor > 0) {
        held.add(msg);
        return;
      }
      pass(ctx, msg);
    }

    private void pass(ChannelHandlerContext ctx, Object msg) {
      if (msg instanceof HttpRequest head) {
        // a reservation still here belongs to a request the aggregator dropped unanswered
        // (an expectation it refused): a new request means that body is over
        budget.release(takeReserved());
        long need = bodyBytes(head);
        if (need > 0) {
          waitingFor = need;
          if (!budget.reserveOrWait(this)) {
            held.addFirst(msg);
            gate.waitingForBudget = true;
            ctx.channel().config().setAutoRead(false);
            return;
          }
          waitingFor = 0;
          reserved += need;
        }
      }
      ctx.fireChannelRead(msg);
    }

    @Override
    public long need() {
      return waitingFor;
    }

    @Override
    public void granted() {
      ChannelHandlerContext ctx = context;
      if (ctx != null) {
        ctx.executor().execute(() -> resume(ctx));
      }
    }

    private void resume(ChannelHandlerContext ctx) {
      long granted = waitingFor;
      waitingFor = 0;
      if (inactive) {
        budget.release(granted);
        return;
      }
      reserved += granted;
      gate.waitingForBudget = false;
      ctx.fireChannelRead(held.poll());
      while (waitingFor == 0 && !held.isEmpty()) {
        pass(ctx, held.poll());
      }
      if (waitingFor == 0) {
        ctx.fireChannelReadComplete();
        gate.resumeIfFree(ctx.channel());
      }
    }

    @Override
    public void channelInactive(ChannelHandlerContext ctx) throws Exception {
      inactive = true;
      for (Object m; (m = held.poll()) != null; ) {
        ReferenceCountUtil.release(m);
      }
      if (waitingFor > 0 && budget.cancel(this)) {
        waitingFor = 0;
      }
      // a body cut short by the close (one granted and not yet resumed is released then)
      budget.release(takeReserved());
      super.channelInactive(ctx);
    }
  }

  /**
   * The bytes a request's body may hold: its Content-Length, the largest body when chunked, 0
   * without a body or with one over the limit (refused before it is read).
   */
  private static long bodyBytes(HttpRequest head) {
    if (!head.decoderResult().isSuccess()) {
      return 0;
    }
    if (HttpUtil.isTransferEncodingChunked(head)) {
      return MAX_BODY_BYTES;
    }
    long length;
    try {
      length = HttpUtil.getContentLength(head, 0L);
    } catch (NumberFormatException e) {
      return 0;
    }
    return length > MAX_BODY_BYTES || length < 0 ? 0 : length;
  }

  /**
   * A connection's requests, read on the I/O thread and handled on the executor one after
   * another, so that pipelined requests are answered in order. While {@link #MAX_PIPELINED} of
   * them are unanswered the connection is not read (its client's further requests wait in the
   * socket buffers, then in the client), so that its memory stays bounded.
   */
  private final class Connection extends SimpleChannelInboundHandler<FullHttpRequest> {
    private final ReadGate gate;
    private final BodyReservation reservation;
    // written by the I/O thread, read by a stop's drain
    private volatile CompletableFuture<Void> previous = CompletableFuture.completedFuture(null);
    private volatile @Nullable Exchange last;
    // requests read and not yet answered in full, and their bodies' bytes; only the I/O thread
    // touches them
    private int unanswered;
    private long unansweredBytes;

    Connection(ReadGate gate, BodyReservation reservation) {
      this.gate = gate;
      this.reservation = reservation;
    }

    @Override
    protected void channelRead0(ChannelHandlerContext ctx, FullHttpRequest req) {
      Exchange ex = new Exchange(ctx.channel(), req, budget);
      last = ex;
      // the body read is held until it has been parsed; a chunked body's surplus goes back now
      long reserved = reservation.takeReserved();
      budget.release(reserved - ex.body.length);
      ex.reserved = Math.min(reserved, ex.body.length);
      requestsRead.incrementAndGet();
      unanswered++;
      long bodyBytes = ex.body.length;
      unansweredBytes += bodyBytes;
      if (unanswered >= MAX_PIPELINED || unansweredBytes >= MAX_BODY_BYTES) {
        // the read under way stops after the bytes it holds; none is asked for until one of
        // these is answered
        gate.pipelineFull = true;
        ctx.channel().config().setAutoRead(false);
      }
      if (!previous.isDone() && readsBody(ex)) {
        // it waits behind an earlier request of this connection, maybe for a long generation:
        // its body is parsed now, so that the bytes it holds in the budget (which other
        // connections' bodies may be waiting for) go back at once, not when its turn comes
        try {
          executor.execute(() -> ex.parse(vocab(), cluster.profile().vocab()));
        } catch (java.util.concurrent.RejectedExecutionException closing) {
          // the server is closing: the request is never handled, its body released below
        }
      }
      // a request that could not be handled (the server is closing) closes its connection;
      // the chain goes on for the next one
      previous = previous.thenRunAsync(() -> handle(ex), executor).exceptionally(notHandled -> {
        ctx.close();
        return null;
      }).whenComplete((done, never) -> {
        ex.answered();
        // queued behind the answer's writes, which the request's thread handed to this loop
        // before it returned: the count drops only once they are under way
        ctx.executor().execute(() -> {
          unanswered--;
          unansweredBytes -= bodyBytes;
          if (unanswered < MAX_PIPELINED && unansweredBytes < MAX_BODY_BYTES) {
            gate.pipelineFull = false;
            gate.resumeIfFree(ctx.channel());
          }
        });
      });
    }

    @Override
    public void userEventTriggered(ChannelHandlerContext ctx, Object evt) throws Exception {
      if (evt instanceof IdleStateEvent) {
        // the keep-alive timeout: close a connection that waits for its client's next request,
        // not one whose request is still being computed without a byte to send yet, nor one
        // left unread while its request waits for the body budget (the server paused it: its
        // client would see a close instead of the slower upload the budget promises)
        if (unanswered == 0 && !reservation.waiting()) {
          ctx.close();
        }
        return;
      }
      super.userEventTriggered(ctx, evt);
    }

    @Override
    public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
      // a connection reset, mostly: the client is gone, and its request (if any) hears of it
      // through the close
      ctx.close();
    }
  }

  private void handle(Exchange ex) {
    try {
      if (!ex.channel.isActive()) {
        return; // a pipelined request of a client that left
      }
      if (ex.malformed) {
        ex.keepAlive = false;
        error(ex, 400, "BadRequestError", "the request is not valid HTTP/1.1");
        return;
      }
      String path = path(ex.uri);
      if (path == null) {
        error(ex, 400, "BadRequestError", "the request target is not a valid URI");
        return;
      }
      String method = ex.method;
      if (stopping) {
        error(ex, 503, "ServiceUnavailableError", "the server is shutting down");
        return;
      }
      String allowed = allowedMethods(path);
      if (allowed == null) {
        // as vLLM's web framework answers a path it has no route for, not an OpenAI error
        frameworkError(ex, 404, "Not Found", null);
        return;
      }
      if (!allowed.isEmpty() && !List.of(allowed.split(", ")).contains(method)) {
        frameworkError(ex, 405, "Method Not Allowed", allowed);
        return;
      }
      switch (path) {
        // as vLLM's /health answers once its engine has died (EngineDeadError); /ping is
        // vLLM's alias of it (for SageMaker), on GET and POST. vLLM's answer has no body and
        // no content type
        case "/health", "/ping" ->
            send(ex, cluster.failure() == null ? 200 : 503, null, "");
        // the content type of prometheus_client's text format, as vLLM's /metrics answers
        case "/metrics" -> send(ex, 200, "text/plain; version=0.0.4; charset=utf-8", metrics());
        case "/v1/models" -> send(ex, 200, "application/json", models());
        case "/version" -> send(ex, 200, "application/json", VERSION_BODY);
        // vLLM serves /load whether or not it tracks the load: without
        // --enable-server-load-tracking, its default, the count stays 0
        case "/load" -> send(ex, 200, "application/json", LOAD_BODY);
        case "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize" -> {
          Object parsed = ex.parse(vocab(), cluster.profile().vocab());
          if (parsed instanceof String malformed) {
            error(ex, 400, "BadRequestError", malformed);
            return;
          }
          RequestBody body = (RequestBody) parsed;
          if (path.equals("/tokenize")) {
            tokenizeEndpoint(ex, body);
          } else if (path.equals("/detokenize")) {
            detokenizeEndpoint(ex, body);
          } else {
            complete(ex, body, path.equals("/v1/chat/completions"));
          }
        }
        default -> throw new IllegalStateException("a route without a handler: " + path);
      }
    } catch (IOException e) {
      // interrupted by close(); the connection is closed with the server
    } catch (RuntimeException e) {
      // a bug answers no request: the connection closes, as the JDK's server closed it
      ex.channel.close();
    }
  }

  /**
   * What {@code GET /version} names, where vLLM names its release: a version below every vLLM
   * release whose local label names the emulator, so that a client comparing versions to decide
   * what the server supports assumes nothing of a real release, while one that parses the version
   * (PEP 440, as Python clients do, or SemVer) still can.
   */
  static final String VERSION = "0.0.0+epp4j.serve";

  private static final String VERSION_BODY = "{\"version\":\"" + VERSION + "\"}";

  /**
   * What {@code GET /load} answers: vLLM's {@code {"server_load": n}} as it stands without
   * {@code --enable-server-load-tracking}, its default, where n stays 0.
   */
  private static final String LOAD_BODY = "{\"server_load\":0}";

  /**
   * The methods a path is served on, as vLLM's routes declare them ({@code "POST"},
   * {@code "GET, POST"}: the {@code Allow} header of a 405); empty for any method ({@code /metrics},
   * which vLLM mounts as an ASGI app); null for a path without a route. vLLM's routes take no
   * {@code HEAD} of their own.
   */
  private static @Nullable String allowedMethods(String path) {
    return switch (path) {
      case "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize" -> "POST";
      case "/health", "/v1/models", "/version", "/load" -> "GET";
      case "/ping" -> "GET, POST";
      case "/metrics" -> "";
      default -> null;
    };
  }

  /**
   * The answer of vLLM's web framework (FastAPI) to a path without a route (404) or a method the
   * route does not take (405, with {@code Allow}): {@code {"detail": "Not Found"}}, not vLLM's
   * OpenAI-shaped error object, which only its own handlers write.
   */
  private static void frameworkError(Exchange ex, int status, String detail,
      @Nullable String allow) {
    ObjectNode root = JSON.createObjectNode();
    root.put("detail", detail);
    FullHttpResponse res = response(status, "application/json", root.toString());
    if (allow != null) {
      res.headers().set(HttpHeaderNames.ALLOW, allow);
    }
    ex.send(res);
  }

  /**
   * The path of a request target, or null when the target is not a valid URI. Origin-form
   * ("/v1/models?x") is read after a scheme and host of its own, so that a path starting with
   * "//" stays a path instead of naming a host ("//v1/models" was path "/models" of host "v1").
   */
  private static @Nullable String path(String uri) {
    try {
      String path = URI.create(uri.startsWith("/") ? "http://localhost" + uri : uri).getPath();
      return path == null ? "" : path;
    } catch (IllegalArgumentException e) {
      return null;
    }
  }

  /** Whether {@link #handle} parses the request's body (a POST to an endpoint that has one). */
  private static boolean readsBody(Exchange ex) {
    if (ex.malformed || !ex.method.equals("POST")) {
      return false;
    }
    String path = path(ex.uri);
    return "/v1/completions".equals(path) || "/v1/chat/completions".equals(path)
        || "/tokenize".equals(path) || "/detokenize".equals(path);
  }

  /**
   * The prompt's token IDs, or a message naming what is wrong (never the prompt itself);
   * {@code generating} for a completion or a chat completion (not {@code /tokenize}), whose empty
   * prompt vLLM's engine refuses and whose tools vLLM's
   * {@code --exclude-tools-when-tool-choice-none} leaves out for {@code tool_choice}
   * {@code "none"}. {@code /tokenize} hands nothing to the engine, and counts an empty prompt as
   * no tokens.
   */
  private Object promptTokens(RequestBody body, boolean chat, boolean generating) {
    Object parsed = parsePrompt(body, chat, generating);
    if (generating && parsed instanceof int[] ids && ids.length == 0) {
      // vLLM's engine refuses a request whose prompt has no tokens in these words
      return "The decoder prompt cannot be empty";
    }
    return parsed;
  }

  private Object parsePrompt(RequestBody body, boolean chat, boolean generating) {
    // vLLM adds the tokenizer's special tokens to a completion's prompt and not to a chat's
    // (whose template writes them), unless the request says otherwise
    JsonNode specialNode = body.fields().path("add_special_tokens");
    boolean specialGiven = !specialNode.isMissingNode() && !specialNode.isNull();
    Boolean special = specialGiven ? laxBool(specialNode) : Boolean.valueOf(!chat);
    if (special == null) {
      return "field 'add_special_tokens' must be a boolean";
    }
    if (chat) {
      Object messages = body.messages();
      if (messages instanceof String msg) {
        return msg;
      }
      @SuppressWarnings("unchecked")
      List<ChatMessage> chatMessages = (List<ChatMessage>) messages;
      Object args = chatTemplateArgs(body.fields(), generating);
      if (args instanceof String bad) {
        return bad;
      }
      // what vLLM's chat parser refuses as it reads the parts, before rendering the template
      String partRefused = body.partRefused();
      if (partRefused != null) {
        return partRefused;
      }
      // the request's tools, which the model's template renders into the prompt as vLLM's does,
      // unless vLLM's --exclude-tools-when-tool-choice-none leaves them out: for a chat
      // completion whose tool_choice is "none" the template is handed no tools, as for a chat
      // without any (default tools and a tools key of chat_template_kwargs still apply)
      JsonNode tools = body.fields().path("tools");
      boolean excluded = generating && excludeToolsWhenToolChoiceNone
          && "none".equals(body.fields().path("tool_choice").textValue());
      return tokenizeChat(chatMessages, tools.isArray() && !excluded ? tools.toString() : null,
          (ChatTemplateArgs) args, special);
    }
    RequestBody.Prompt prompt = body.prompt();
    if (prompt == null) {
      return PROMPT_REQUIRED;
    }
    if (prompt instanceof RequestBody.Text t) {
      return tokenizeText(t.text(), special);
    }
    if (prompt instanceof RequestBody.Ids ids) {
      return ids.ids();
    }
    return ((RequestBody.Bad) prompt).message();
  }

  /**
   * Token IDs a prompt may hold: the model's vocabulary, or the stand-in's own (`load`'s prompts
   * are drawn from Qwen3's, whatever the profile), whichever is larger.
   */
  private int vocab() {
    return Math.max(cluster.profile().vocab(), SyntheticTokens.VOCAB);
  }

  private void complete(Exchange ex, RequestBody request, boolean chat) throws IOException {
    JsonNode body = request.fields();
    // First what vLLM's request model (pydantic) refuses, before any model is looked up or any
    // prompt tokenized: its validators on the raw body (stream options without a stream), then a
    // field of the wrong type, a missing prompt. Then the model (404), then the prompt's tokens
    // and the lengths, as vLLM's serving code checks them. A request wrong in several ways is
    // told what vLLM would tell it first.
    // vLLM's request model runs its validators on the raw body before any field's type is
    // checked, the one defined last first: for a chat check_tool_usage, then check_logprobs,
    // then validate_stream_options; for a completion validate_prompt_and_prompt_embeds, then
    // validate_stream_options, then check_logprobs (each refused in vLLM's words, naming the
    // field where vLLM's error does)
    // (each request model's check_cache_salt_support runs first, then a chat's
    // check_generation_prompt, both on the raw body: Python's truth of the values, so "false" is
    // true there)
    String[] invalid = cacheSaltInvalid(body);
    if (invalid == null && chat && pyTruthy(body.path("continue_final_message"))
        && pyTruthy(body.path("add_generation_prompt"))) {
      invalid = new String[] {GENERATION_PROMPT_CONFLICT, null};
    }
    if (invalid == null) {
      invalid = chat ? toolUsageInvalid(body) : promptMissing(request);
    }
    if (invalid == null && !chat) {
      invalid = streamOptionsInvalid(body);
    }
    // a chat's check_structured_outputs_count runs after its tools' validator, a completion's
    // last, after its log probabilities'
    if (invalid == null && chat) {
      invalid = structuredConstraintsInvalid(request, true);
    }
    if (invalid == null) {
      invalid = logprobsInvalid(body, chat);
    }
    if (invalid == null) {
      invalid = chat ? streamOptionsInvalid(body) : structuredConstraintsInvalid(request, false);
    }
    if (invalid != null) {
      error(ex, 400, "BadRequestError", invalid[0], invalid[1]);
      return;
    }
    JsonNode modelNode = body.get("model");
    if (modelNode != null && !modelNode.isNull() && !modelNode.isTextual()) {
      error(ex, 400, "BadRequestError", "field 'model' must be a string");
      return;
    }
    String badTools = chat ? toolsTypeInvalid(body) : null;
    if (badTools != null) {
      error(ex, 400, "BadRequestError", badTools, "tools");
      return;
    }
    JsonNode saltNode = body.get("cache_salt");
    String salt = saltNode == null || saltNode.isNull() ? null : saltNode.asText();
    Boolean streamValue = laxBool(body.path("stream"));
    if (streamValue == null) {
      error(ex, 400, "BadRequestError", "field 'stream' must be a boolean");
      return;
    }
    boolean stream = streamValue;
    JsonNode streamOptions = body.path("stream_options");
    if (!streamOptions.isMissingNode() && !streamOptions.isNull() && !streamOptions.isObject()) {
      error(ex, 400, "BadRequestError", "field 'stream_options' must be an object");
      return;
    }
    // vLLM generates n choices; this replica models one sequence per request, so a request for
    // more is refused rather than answered with one choice and a fraction of the work asked for
    JsonNode nNode = body.get("n");
    Integer n = nNode == null ? null : laxInt(nNode);
    // (n below 1 is vLLM's own refusal, in its words with the other sampling checks below; a
    // chat's n is typed int | None, a completion's int, whose null vLLM refuses)
    if (nNode != null && !(chat && nNode.isNull()) && !(n != null && n <= 1)) {
      // a number is quoted; anything else (a string of any length) only named by its type
      error(ex, 400, "BadRequestError", "field 'n' must be 1: the emulated replica generates one"
          + " choice per request, got " + (nNode.isNumber() ? nNode.toString()
              : "a " + nNode.getNodeType().name().toLowerCase(java.util.Locale.ROOT)));
      return;
    }
    // a chat's limit is max_completion_tokens unless null, else max_tokens; vLLM's request
    // model types both, so either of the wrong type is refused, the one it does not use too
    for (String f : chat ? List.of("max_tokens", "max_completion_tokens")
        : List.of("max_tokens")) {
      JsonNode v = body.path(f);
      if (!v.isMissingNode() && !v.isNull() && laxInt(v) == null) {
        error(ex, 400, "BadRequestError", "field '" + f + "' must be an integer >= 1");
        return;
      }
    }
    String maxField = chat && body.hasNonNull("max_completion_tokens")
        ? "max_completion_tokens" : "max_tokens";
    JsonNode maxNode = body.get(maxField);
    Integer max = maxNode == null || maxNode.isNull() ? null : laxInt(maxNode);
    // a chat without a limit (left out or null, max_completion_tokens too) runs to the rest of
    // the context; a completion's max_tokens left out or null is its field default of 16, as
    // current vLLM reads it (its request model turns an explicit null into the default)
    boolean noLimit = chat && max == null;
    // typed int, not int | None, in vLLM's request models: null is refused
    JsonNode minNode = body.get("min_tokens");
    Integer minValue = minNode == null ? Integer.valueOf(0) : laxInt(minNode);
    if (minValue == null) {
      error(ex, 400, "BadRequestError", "field 'min_tokens' must be an integer");
      return;
    }
    int minTokens = minValue;
    // vLLM's StreamOptions.include_usage defaults to true: stream_options without it (e.g. {} or
    // {"continuous_usage_stats": true}) asks for the usage chunk; an explicit null does not
    JsonNode includeUsageNode = streamOptions.path("include_usage");
    Boolean includeUsageValue = includeUsageNode.isMissingNode() ? Boolean.TRUE
        : laxBool(includeUsageNode);
    if (includeUsageValue == null) {
      error(ex, 400, "BadRequestError", "field 'stream_options.include_usage' must be a boolean");
      return;
    }
    // vLLM's --enable-force-include-usage asks for it on every stream, with stream_options or
    // without, whatever their include_usage says
    boolean includeUsage = streamOptions.isObject() && includeUsageValue || forceIncludeUsage;
    // and with continuous_usage_stats, every chunk carries the usage so far
    Boolean continuousValue = laxBool(streamOptions.path("continuous_usage_stats"));
    if (continuousValue == null) {
      error(ex, 400, "BadRequestError",
          "field 'stream_options.continuous_usage_stats' must be a boolean");
      return;
    }
    boolean continuousUsage = includeUsage && continuousValue;
    // vLLM (0.10.2 and later) names the prompt's and the generated token IDs when asked to
    Boolean returnTokenIdsValue = laxBool(body.path("return_token_ids"));
    if (returnTokenIdsValue == null) {
      error(ex, 400, "BadRequestError", "field 'return_token_ids' must be a boolean");
      return;
    }
    boolean returnTokenIds = returnTokenIdsValue;
    // vLLM's echo: a completion's answer starts with its prompt's text, a chat's with the content
    // of its last message when that message is the answer's own role
    // (a chat's echo is typed bool, a completion's bool | None)
    Boolean echoValue = chat ? nonNullBool(body.path("echo")) : laxBool(body.path("echo"));
    if (echoValue == null) {
      error(ex, 400, "BadRequestError", "field 'echo' must be a boolean");
      return;
    }
    boolean echo = echoValue;
    // vLLM's ignore_eos: the model's end of answer is ignored, so generation runs to the limit
    Boolean ignoreEosValue = nonNullBool(body.path("ignore_eos"));
    if (ignoreEosValue == null) {
      error(ex, 400, "BadRequestError", "field 'ignore_eos' must be a boolean", "ignore_eos");
      return;
    }
    boolean ignoreEos = ignoreEosValue;
    // vLLM's stop strings: a string or a list of them, each cutting the answer where it is generated
    JsonNode stopNode = body.path("stop");
    @Nullable List<String> stops = new ArrayList<>();
    if (stopNode.isTextual()) {
      stops.add(stopNode.asText());
    } else if (stopNode.isArray()) {
      for (JsonNode e : stopNode) {
        if (!e.isTextual()) {
          stops = null;
          break;
        }
        stops.add(e.asText());
      }
    } else if (!stopNode.isMissingNode() && !stopNode.isNull()) {
      stops = null;
    }
    if (stops == null) {
      error(ex, 400, "BadRequestError", "field 'stop' must be a string or an array of strings",
          "stop");
      return;
    }
    Boolean includeStopValue = nonNullBool(body.path("include_stop_str_in_output"));
    if (includeStopValue == null) {
      error(ex, 400, "BadRequestError", "field 'include_stop_str_in_output' must be a boolean",
          "include_stop_str_in_output");
      return;
    }
    boolean includeStop = includeStopValue;
    // stop_token_ids: the filler is drawn from the model's ordinary tokens, so an ID beyond them
    // (a special token such as an end of turn, what clients send here) is never generated and the
    // answer is as vLLM's would be; an ordinary ID the filler may generate but does not stop on
    // is refused rather than ignored
    JsonNode stopIdsNode = body.path("stop_token_ids");
    if (!stopIdsNode.isMissingNode() && !stopIdsNode.isNull()) {
      int ordinary = cluster.profile().ordinaryTokens();
      if (!stopIdsNode.isArray()) {
        error(ex, 400, "BadRequestError", "field 'stop_token_ids' must be an array of integers",
            "stop_token_ids");
        return;
      }
      for (JsonNode e : stopIdsNode) {
        Integer stopId = laxInt(e);
        if (stopId == null) {
          error(ex, 400, "BadRequestError", "field 'stop_token_ids' must be an array of integers",
              "stop_token_ids");
          return;
        }
        if (stopId >= 0 && stopId < ordinary) {
          error(ex, 400, "BadRequestError", "field 'stop_token_ids' holds " + stopId + ", an"
              + " ordinary token the emulated replica's filler output may generate without"
              + " stopping on it; only IDs from " + ordinary + " up (special tokens) are taken",
              "stop_token_ids");
          return;
        }
      }
    }
    // the sampling parameters the filler does not use, read as vLLM's request model types them
    // (a number, or a string of one): a value of another type is refused here, one out of
    // range once the prompt has been checked, as vLLM's sampling parameters refuse it
    double[] sampling = new double[SAMPLING.length];
    for (int i = 0; i < SAMPLING.length; i++) {
      JsonNode v = body.path(SAMPLING[i]);
      Double d = v.isMissingNode() || v.isNull() ? Double.valueOf(SAMPLING_DEFAULTS[i])
          : laxFloat(v);
      if (d == null) {
        error(ex, 400, "BadRequestError", "field '" + SAMPLING[i] + "' must be a number",
            SAMPLING[i]);
        return;
      }
      sampling[i] = d;
    }
    // top_k, min_p and seed, typed as vLLM's request model types them: the filler does not
    // sample, so top_k and min_p only have their ranges checked, as vLLM checks them; a seed makes
    // the same prompt generate the same token IDs, as it does in vLLM
    JsonNode topKNode = body.path("top_k");
    Integer topK = topKNode.isMissingNode() || topKNode.isNull() ? Integer.valueOf(0)
        : laxInt(topKNode);
    if (topK == null) {
      error(ex, 400, "BadRequestError", "field 'top_k' must be an integer", "top_k");
      return;
    }
    JsonNode minPNode = body.path("min_p");
    Double minP = minPNode.isMissingNode() || minPNode.isNull() ? Double.valueOf(0)
        : laxFloat(minPNode);
    if (minP == null) {
      error(ex, 400, "BadRequestError", "field 'min_p' must be a number", "min_p");
      return;
    }
    JsonNode seedNode = body.path("seed");
    if (!seedNode.isMissingNode() && !seedNode.isNull() && !isInt64(seedNode)) {
      error(ex, 400, "BadRequestError", "field 'seed' must be an integer from -2^63 to 2^63 - 1",
          "seed");
      return;
    }
    // priority, typed int (not null) from -2^63 to 2^63 - 1 by vLLM's request model
    JsonNode priorityNode = body.path("priority");
    if (!priorityNode.isMissingNode() && !isInt64(priorityNode)) {
      error(ex, 400, "BadRequestError", "field 'priority' must be an integer from -2^63 to"
          + " 2^63 - 1", "priority");
      return;
    }
    long priority = priorityNode.isMissingNode() ? 0 : int64(priorityNode);
    // truncate_prompt_tokens, typed int >= -1 (to 2^63 - 1) or null by vLLM's request models:
    // the prompt is cut to its last k tokens (-1: as many as the context leaves after the output
    // tokens asked for) before it reaches the engine
    JsonNode truncateNode = body.path("truncate_prompt_tokens");
    Long truncate = truncateNode.isMissingNode() || truncateNode.isNull() ? null
        : isInt64(truncateNode) ? Long.valueOf(int64(truncateNode)) : null;
    if (!truncateNode.isMissingNode() && !truncateNode.isNull()
        && (truncate == null || truncate < -1)) {
      error(ex, 400, "BadRequestError", "field 'truncate_prompt_tokens' must be null or an"
          + " integer from -1 to 2^63 - 1", "truncate_prompt_tokens");
      return;
    }
    String badFormat = responseFormatInvalid(body);
    if (badFormat != null) {
      error(ex, 400, "BadRequestError", badFormat, "response_format");
      return;
    }
    // logit_bias as vLLM's request model types it, dict[str, float]: an object of numbers, a
    // boolean being one in pydantic's lax mode (its keys become token IDs later, when the
    // sampling parameters are made)
    JsonNode biasNode = body.path("logit_bias");
    if (!biasNode.isMissingNode() && !biasNode.isNull() && (!biasNode.isObject()
        || !biasNode.valueStream().allMatch(b -> b.isBoolean() || laxFloat(b) != null))) {
      error(ex, 400, "BadRequestError", "field 'logit_bias' must be an object mapping token IDs"
          + " to numbers", "logit_bias");
      return;
    }
    // the fields the emulator does not use, typed as vLLM's request model types them
    String[] mistyped = request.mistypedField(chat);
    if (mistyped != null) {
      error(ex, 400, "BadRequestError", mistyped[0], mistyped[1]);
      return;
    }
    // vLLM takes a seed of -1 as none
    Long seed = seedNode.isMissingNode() || seedNode.isNull() ? null
        : Long.valueOf(int64(seedNode));
    if (seed != null && seed == -1) {
      seed = null;
    }
    // a chat's messages and a completion's prompt left out are the request model's errors too
    // (a prompt's bad token IDs are the engine's, after the model: they wait for the tokens)
    if (chat && request.messages() instanceof String bad) {
      error(ex, 400, "BadRequestError", bad);
      return;
    }
    if (!chat && request.prompt() == null && !request.promptEmbedsGiven()) {
      error(ex, 400, "BadRequestError", PROMPT_REQUIRED);
      return;
    }
    // a completion's suffix (fill in the middle): vLLM's request model takes a string or null,
    // and its serving code then refuses any string, once the model is found
    JsonNode suffix = chat ? null : body.get("suffix");
    if (suffix != null && !suffix.isNull() && !suffix.isTextual()) {
      error(ex, 400, "BadRequestError", "field 'suffix' must be a string");
      return;
    }
    // the fields that shape the prompt, typed by the request model too; their values are read
    // with the prompt, once the model is found
    String badPromptField = promptFieldsInvalid(body, chat, true);
    if (badPromptField != null) {
      error(ex, 400, "BadRequestError", badPromptField);
      return;
    }
    String requested = requestedModel(modelNode);
    int adapter = loraAdapters.indexOf(requested);
    if (!model.equals(requested) && adapter < 0) {
      modelNotFound(ex, requested);
      return;
    }
    if (suffix != null && !suffix.isNull()) {
      error(ex, 400, "BadRequestError", "suffix is not currently supported");
      return;
    }
    int maxLen = cluster.profile().maxModelLen();
    // as vLLM's tokenize parameters take truncate_prompt_tokens, once the model is found and
    // before the prompt is tokenized: at most the context less the output tokens asked for
    // (a chat's max_completion_tokens, else its max_tokens, else none; a completion's max_tokens,
    // 16 when left out or null), -1 being that many; the prompt keeps its last k tokens. A limit
    // over the whole context is refused below, without truncation, as the context's overflow
    int keep = -1;
    long askedOutput = max != null ? max : chat ? 0 : DEFAULT_MAX_TOKENS;
    if (truncate != null && askedOutput <= maxLen) {
      long maxInput = maxLen - askedOutput;
      if (truncate > maxInput) {
        error(ex, 400, "BadRequestError", "truncate_prompt_tokens=" + truncate + " cannot be"
            + " greater than max_model_len - " + maxField + " = " + maxInput + ". Please request"
            + " a smaller truncation size. (parameter=truncate_prompt_tokens, value=" + truncate
            + ")", "truncate_prompt_tokens");
        return;
      }
      keep = (int) (truncate == -1 ? maxInput : truncate);
    }
    // prompt embeddings, which vLLM takes only with --enable-prompt-embeds (and the emulated
    // replica not at all): refused as vLLM refuses them without it, as it loads them
    if (!chat && request.promptEmbedsGiven()) {
      error(ex, 400, "BadRequestError", "You must set `--enable-prompt-embeds` to input"
          + " `prompt_embeds`. (parameter=prompt_embeds)", "prompt_embeds");
      return;
    }
    Object parsed = parsePrompt(request, chat, true);
    if (parsed instanceof int[] ids && keep >= 0 && keep < ids.length) {
      parsed = java.util.Arrays.copyOfRange(ids, ids.length - keep, ids.length);
    }
    if (parsed instanceof int[] ids && ids.length == 0) {
      // vLLM's engine refuses a request whose prompt has no tokens in these words (one that
      // truncate_prompt_tokens 0 left without any too)
      parsed = "The decoder prompt cannot be empty";
    }
    if (parsed instanceof String msg) {
      error(ex, 400, "BadRequestError", msg);
      return;
    }
    int[] prompt = (int[]) parsed;
    int maxTokens = max != null ? max : DEFAULT_MAX_TOKENS;
    String echoText = "";
    if (echo) {
      Object text = echoText(request, chat, prompt, returnTokenIds);
      if (text instanceof String[] refused) {
        error(ex, 400, "BadRequestError", refused[0], "echo");
        return;
      }
      echoText = (String) text;
    }
    // a completion's echo with max_tokens 0 answers the prompt alone: vLLM runs the request for
    // one token (counted in its usage) and leaves that token out of the text
    boolean echoOnly = echo && !chat && max != null && max == 0;
    // vLLM's refusal of a request longer than the context, in its words (clients parse them for
    // the room left): the prompt and the output tokens asked for (none without a limit) over the
    // context. vLLM tokenizes a text prompt (a chat's too) to at most one token past the room
    // left, so it names that many "at least"; a prompt of token IDs is counted whole.
    int asked = noLimit ? 0 : maxTokens;
    if ((long) prompt.length + asked > maxLen) {
      boolean atLeast = (chat || request.prompt() instanceof RequestBody.Text) && asked <= maxLen;
      long counted = atLeast ? Math.min(prompt.length, (long) maxLen - asked + 1) : prompt.length;
      String bound = atLeast ? "at least " : "";
      error(ex, 400, "BadRequestError", "This model's maximum context length is " + maxLen
          + " tokens. However, you requested " + asked + " output tokens and your prompt contains "
          + bound + counted + " input tokens, for a total of " + bound + (counted + asked)
          + " tokens. Please reduce the length of the input prompt or the number of requested"
          + " output tokens. (parameter=input_tokens, value=" + counted + ")", "input_tokens");
      return;
    }
    // "length" when the answer ends on a limit, "stop" when the model ends it itself
    String finishReason = "length";
    if (noLimit) {
      // vLLM's chat default is the rest of the context: there vLLM generates until the model
      // ends its answer ("stop"), which the emulated model does after 16 tokens, or after
      // min_tokens (which vLLM makes the model generate before it may end), unless the context
      // ends first (a prompt that fills it leaves 0, refused below as vLLM refuses it); with
      // ignore_eos the model's end is ignored and vLLM generates to the context's end
      int ownEnd = ignoreEos ? maxLen - prompt.length : Math.max(maxTokens, minTokens);
      if (ownEnd < maxLen - prompt.length) {
        finishReason = "stop";
      }
      maxTokens = Math.min(ownEnd, maxLen - prompt.length);
    }
    // as vLLM's sampling parameters check them, after the model and the context's length, in
    // their order and words (clients match them): the penalties, temperature and top_p, then a
    // limit below 1, then min_tokens. Its sampling field is max_tokens whichever request field
    // set it, so a chat's max_completion_tokens is named max_tokens here too, as vLLM names it
    if (echoOnly) {
      maxTokens = 1;
    }
    // as vLLM makes its sampling parameters, before it checks their ranges: a json_schema
    // response format needs its schema, and logit_bias's keys become token IDs (Python's int())
    String[] unusable = unusableSamplingField(body, request.logitsProcessorsGiven());
    if (unusable != null) {
      error(ex, 400, "BadRequestError", unusable[0], unusable[1]);
      return;
    }
    String outOfRange = samplingOutOfRange(n == null ? 1 : n, sampling, topK, minP);
    if (outOfRange != null) {
      error(ex, 400, "BadRequestError", outOfRange, null);
      return;
    }
    if (maxTokens < 1) {
      error(ex, 400, "BadRequestError", "max_tokens must be at least 1, got " + maxTokens
          + ". (parameter=max_tokens, value=" + maxTokens + ")", "max_tokens");
      return;
    }
    if (minTokens < 0) {
      error(ex, 400, "BadRequestError", "min_tokens must be greater than or equal to 0, got "
          + minTokens + ".");
      return;
    }
    if (minTokens > maxTokens) {
      error(ex, 400, "BadRequestError", "min_tokens must be less than or equal to max_tokens="
          + maxTokens + ", got " + minTokens + ".");
      return;
    }
    for (String stop : stops) {
      if (stop.isEmpty()) {
        error(ex, 400, "BadRequestError", "stop cannot contain an empty string.");
        return;
      }
    }
    // then, as vLLM's engine checks them once the sampling parameters are made, counts above its
    // --max-logprobs (20 by default; -1 asks for the whole vocabulary)
    String[] tooMany = logprobsOverMax(body, chat, cluster.profile().vocab());
    if (tooMany != null) {
      error(ex, 400, "BadRequestError", tooMany[0], tooMany[1]);
      return;
    }
    // and then logit_bias's token IDs, each within the model's vocabulary
    String outOfVocab = logitBiasOutOfVocab(body, cluster.profile().vocab());
    if (outOfVocab != null) {
      error(ex, 400, "BadRequestError", outOfVocab, "logit_bias");
      return;
    }
    // allowed_token_ids, as vLLM's sampling parameters check it: not empty, each ID in the
    // vocabulary; the filler does not keep to the IDs, so any other is refused as log
    // probabilities are, rather than answered with tokens the request did not allow
    String[] allowed = allowedTokenIdsRefused(request);
    if (allowed != null) {
      error(ex, 400, "BadRequestError", allowed[0], "allowed_token_ids");
      return;
    }
    // the emulated engine schedules first come, first served, as vLLM does without
    // --scheduling-policy priority, whose engine then refuses any other priority than 0
    if (priority != 0) {
      error(ex, 400, "BadRequestError", "Got priority " + priority
          + " but Priority scheduling is not enabled.");
      return;
    }
    // vLLM answers log probabilities when asked; this replica's filler output has none, and a
    // client that asked for them would read "logprobs": null as a broken answer: refused, as n is
    String logprobsField = logprobsAsked(body, chat);
    if (logprobsField != null) {
      error(ex, 400, "BadRequestError", "field '" + logprobsField + "' asks for log"
          + " probabilities, which the emulated replica does not compute; leave it out",
          logprobsField);
      return;
    }
    // where a stop string ends the answer: the engine generates up to that token and no further,
    // as vLLM's does, and the answer ends with finish_reason "stop" naming the string
    StopPlan plan = StopPlan.of(stops, includeStop, minTokens, maxTokens);
    maxTokens = plan.tokens();
    if (plan.stopString() != null) {
      finishReason = "stop";
    }

    LinkedBlockingQueue<int[]> out = new LinkedBlockingQueue<>();
    // {token} for a token, {-1, prompt, cached, completion} when done, {-2, 0} when aborted:
    // only a token has one element
    SimRequest submitted = cluster.submit(replica, prompt, maxTokens, adapter + 1,
        adapter < 0 ? null : requested, salt, seed, new EmulatedCluster.Listener() {
      @Override
      public void onToken(int tokenId, boolean first) {
        out.add(new int[] {tokenId});
      }

      @Override
      public void onFinished(int promptTokens, int cachedTokens, int completionTokens) {
        out.add(new int[] {-1, promptTokens, cachedTokens, completionTokens});
      }

      @Override
      public void onAborted() {
        out.add(new int[] {-2, 0});
      }
    });
    if (submitted == null) {
      // the engine has stopped (a defect, or a stop under way): a 503 at once, streamed or not,
      // as vLLM checks for a dead engine before it begins a stream; a stream's 200 and an error
      // event would tell a gateway that this replica took the request
      error(ex, 503, "ServiceUnavailableError", "the server stopped before the request finished");
      return;
    }
    // As vLLM does when its client disconnects, streaming or not: the request stops generating
    // and frees its slot and blocks instead of running to max_tokens for nobody. The close is
    // heard on the I/O thread (which reads the connection all along), within moments of it.
    ChannelFutureListener clientGone = f -> {
      if (submitted != null) {
        cluster.abort(replica, submitted);
      }
      out.add(CLIENT_GONE);
    };
    ChannelFuture connectionClosed = ex.channel.closeFuture();
    connectionClosed.addListener(clientGone);
    // as vLLM names its answers: the X-Request-Id header, else the body's request_id, else an
    // id of its own
    String requestId = ex.requestIdHeader;
    if (requestId == null) {
      requestId = request.requestId();
    }
    if (requestId == null) {
      requestId = Long.toHexString(IDS.incrementAndGet());
    }
    String id = (chat ? "chatcmpl-" : "cmpl-") + requestId;
    String role = chat ? responseRole(request) : "";
    long created = System.currentTimeMillis() / 1000;
    // as vLLM's answers: the adapter the request ran on, else the base model
    String served = adapter < 0 ? model : requested;
    try {
      if (stream) {
        stream(ex, out, chat, id, created, served, includeUsage,
            continuousUsage ? prompt.length : -1, plan, returnTokenIds ? prompt : null,
            finishReason, new Echo(echoText, echoOnly, echo ? prompt : null), role);
      } else {
        whole(ex, out, chat, id, created, served, returnTokenIds ? prompt : null, finishReason,
            new Echo(echoText, echoOnly, null), role, plan);
      }
    } catch (IOException interrupted) {
      if (submitted != null) {
        cluster.abort(replica, submitted);
      }
      throw interrupted;
    } finally {
      connectionClosed.removeListener(clientGone);
    }
  }

  /**
   * How a request's answer ends under its stop strings: the tokens the engine generates
   * ({@code max_tokens}, or the one that completed a stop string), the stop string that ended it
   * (null for none), the length of the answer's text (a prefix of the filler: cut before the stop
   * string, or after it with {@code include_stop_str_in_output}), and the characters a stream
   * holds back until the end (the longest stop string's length less one, none when stop strings
   * are kept in the output), as vLLM's detokenizer holds them back.
   */
  record StopPlan(int tokens, @Nullable String stopString, int textLength, int hold) {
    /**
     * As vLLM's detokenizer checks stop strings: after each token past {@code min_tokens}, each
     * stop string in the request's order is looked for where the token's new characters could
     * complete it; the first found ends the answer.
     */
    static StopPlan of(List<String> stops, boolean include, int minTokens, int maxTokens) {
      if (stops.isEmpty()) {
        return new StopPlan(maxTokens, null, maxTokens * FILLER.length(), 0);
      }
      int longest = 0;
      for (String s : stops) {
        longest = Math.max(longest, s.length());
      }
      int hold = include ? 0 : longest - 1;
      // the filler repeats every token, so a stop string it can ever complete is completed
      // within a few tokens of the first one checked
      int last = (int) Math.min(maxTokens,
          Math.max(minTokens, 0) + 2L + (longest + FILLER.length() - 1) / FILLER.length());
      StringBuilder text = new StringBuilder();
      for (int k = 1; k <= last; k++) {
        text.append(FILLER);
        if (k <= minTokens) {
          continue;
        }
        for (String s : stops) {
          int at = text.indexOf(s, Math.max(0, text.length() + 1 - FILLER.length() - s.length()));
          if (at >= 0) {
            int end = include ? Math.min(at + s.length(), text.length()) : at;
            return new StopPlan(k, s, end, hold);
          }
        }
      }
      return new StopPlan(maxTokens, null, maxTokens * FILLER.length(), hold);
    }
  }

  /** Characters {@code from} to {@code to} of the filler repeated without end. */
  static String filler(int from, int to) {
    StringBuilder b = new StringBuilder(Math.max(0, to - from));
    for (int i = from; i < to; i++) {
      b.append(FILLER.charAt(i % FILLER.length()));
    }
    return b.toString();
  }

  /**
   * What an answer echoes: {@code text} before the generated text (empty for none), {@code only}
   * when the generated text is left out (a completion's echo with max_tokens 0), and the prompt's
   * IDs a completion stream names with its echo (null without one).
   */
  private record Echo(String text, boolean only, int @Nullable [] promptIds) {}

  /**
   * The text a request's echo puts before the answer: a completion's prompt (empty with
   * {@code return_token_ids}, as vLLM then leaves the text out), a chat's last message's content
   * when that message has the role of the answer (the assistant's, or with
   * {@code add_generation_prompt} false the last message's own); a {@code String[]} holding
   * why not when a prompt of token IDs cannot be turned back into text.
   */
  private Object echoText(RequestBody request, boolean chat, int[] prompt,
      boolean returnTokenIds) {
    if (chat) {
      @SuppressWarnings("unchecked")
      List<ChatMessage> messages = (List<ChatMessage>) request.messages();
      ChatMessage last = messages.get(messages.size() - 1);
      return last.role().equals(responseRole(request)) ? last.content() : "";
    }
    if (returnTokenIds) {
      return "";
    }
    if (request.prompt() instanceof RequestBody.Text t) {
      return t.text();
    }
    String text;
    try {
      text = decode(prompt);
    } catch (RuntimeException e) {
      return new String[] {"field 'echo' needs the text of the prompt, which the tokenizer given"
          + " with --tokenizer cannot decode: " + reason(e)};
    }
    return text != null ? text : new String[] {"field 'echo' needs the text of a prompt given as"
        + " token IDs, which the stand-in tokenizer cannot give back: start serve with"
        + " --tokenizer, or set return_token_ids"};
  }

  /**
   * The role of a chat's answer, as vLLM's {@code get_chat_request_role}: the assistant's, or with
   * {@code add_generation_prompt} false (the answer continues the last message) that message's
   * role. Called once the messages and template fields have been checked.
   */
  private static String responseRole(RequestBody request) {
    Object args = chatTemplateArgs(request.fields());
    if (args instanceof ChatTemplateArgs a && !a.addGenerationPrompt()
        && request.messages() instanceof List<?> messages && !messages.isEmpty()) {
      return ((ChatMessage) messages.get(messages.size() - 1)).role();
    }
    return "assistant";
  }

  /**
   * The text of token IDs through the tokenizer of {@code --tokenizer}; null with the stand-in,
   * whose IDs are hashes of words and cannot be turned back into them.
   */
  private @Nullable String decode(int[] ids) {
    Tokenizer t = tokenizer;
    if (t instanceof Serve.WithDefaultKwargs w) {
      t = w.tokenizer();
    }
    return t instanceof io.epp4j.kvevents.HuggingFaceTokenizer hf ? hf.decode(ids) : null;
  }

  /**
   * What vLLM's completion request model ({@code validate_prompt_and_prompt_embeds}) refuses, as
   * {message, field}, or null: a prompt left out, null or {@code ""} without prompt embeds (left
   * out, null or {@code []}). A list that holds no token is the engine's refusal, later.
   */
  static String @Nullable [] promptMissing(RequestBody request) {
    if (request.promptMissing()) {
      // a plain ValueError in vLLM, whose error names no param
      return new String[] {"Either prompt or prompt_embeds must be provided and non-empty.", null};
    }
    return null;
  }

  /**
   * What vLLM's {@code check_structured_outputs_count} refuses, as {message, field}, or null:
   * {@code structured_outputs} with more than one of {@code json}, {@code regex} and
   * {@code choice}; a completion's validator names the field, a chat's raises a plain error.
   */
  static String @Nullable [] structuredConstraintsInvalid(RequestBody request, boolean chat) {
    if (!request.severalStructuredConstraints()) {
      return null;
    }
    String message = "You can only use one kind of constraints for structured outputs ('json',"
        + " 'regex' or 'choice').";
    return chat ? new String[] {message, null}
        : new String[] {message + " (parameter=structured_outputs)", "structured_outputs"};
  }

  /**
   * What vLLM's {@code check_cache_salt_support} refuses, as {message, field}, or null: a
   * {@code cache_salt} given as anything but null or a non-empty string.
   */
  static String @Nullable [] cacheSaltInvalid(JsonNode body) {
    JsonNode salt = body.path("cache_salt");
    if (!salt.isMissingNode() && !salt.isNull() && (!salt.isTextual() || salt.asText().isEmpty())) {
      // a plain ValueError in vLLM, whose error names no param
      return new String[] {"Parameter 'cache_salt' must be a non-empty string if provided.", null};
    }
    return null;
  }

  /**
   * What vLLM's {@code validate_stream_options} refuses, as {message, field}, or null: stream
   * options without a stream, both tested for Python truth on the raw body (an empty object
   * passes, and so does a stream of "false", which the field then reads as false).
   */
  static String @Nullable [] streamOptionsInvalid(JsonNode body) {
    if (pyTruthy(body.path("stream_options")) && !pyTruthy(body.path("stream"))) {
      return new String[] {"Stream options can only be defined when `stream=True`."
          + " (parameter=stream_options)", "stream_options"};
    }
    return null;
  }

  /**
   * What vLLM's chat request model ({@code check_tool_usage}) refuses in {@code tools} and
   * {@code tool_choice}, as {message, field}, or null: an empty {@code tools} array, a
   * {@code tool_choice} other than "none" (or null) without {@code tools} (left out or null),
   * then a {@code tool_choice} that is neither "auto", "required" nor an object, and an object
   * whose {@code function} is not an object, has no {@code name}, a name that is not a non-empty
   * string, or one that names none of the tools.
   */
  static String @Nullable [] toolUsageInvalid(JsonNode body) {
    JsonNode tools = body.path("tools");
    if (tools.isArray() && tools.isEmpty()) {
      return new String[] {"`tools` must not be an empty array. Either provide at least one"
          + " tool or omit the field entirely. (parameter=tools)", "tools"};
    }
    JsonNode choice = body.path("tool_choice");
    if (choice.isMissingNode() || choice.isNull() || "none".equals(choice.textValue())) {
      return null;
    }
    if (tools.isMissingNode() || tools.isNull()) {
      return new String[] {"When using `tool_choice`, `tools` must be set."
          + " (parameter=tool_choice)", "tool_choice"};
    }
    // then what it chooses: "auto", "required", or a named function among the tools
    if (!choice.isObject()) {
      if ("auto".equals(choice.textValue()) || "required".equals(choice.textValue())) {
        return null;
      }
      return new String[] {"Invalid value for `tool_choice`: " + pyStr(choice) + "! Only named"
          + " tools, \"none\", \"auto\" or \"required\" are supported. (parameter=tool_choice)",
          "tool_choice"};
    }
    String usage = " Correct usage: `{\"type\": \"function\", \"function\": {\"name\":"
        + " \"my_function\"}}`";
    JsonNode function = choice.path("function");
    if (!function.isObject()) {
      return new String[] {"Invalid value for `function`: `" + pyStr(function) + "` in"
          + " `tool_choice`!" + usage + " (parameter=tool_choice.function)",
          "tool_choice.function"};
    }
    JsonNode name = function.path("name");
    if (name.isMissingNode()) {
      return new String[] {"Expected field `name` in `function` in `tool_choice`!" + usage
          + " (parameter=tool_choice.function.name)", "tool_choice.function.name"};
    }
    if (!name.isTextual() || name.textValue().isEmpty()) {
      return new String[] {"Invalid `name` in `function`: `" + pyStr(name) + "` in"
          + " `tool_choice`!" + usage + " (parameter=tool_choice.function.name)",
          "tool_choice.function.name"};
    }
    for (JsonNode tool : tools) {
      if (name.textValue().equals(tool.path("function").path("name").textValue())) {
        return null;
      }
    }
    return new String[] {"The tool specified in `tool_choice` does not match any of the"
        + " specified `tools` (parameter=tool_choice)", "tool_choice"};
  }

  /**
   * A JSON value as Python's {@code str} writes the value it parses to, for the values vLLM's
   * messages quote: a string as itself, null (or absent) as None, a boolean as True or False, a
   * number as Python writes it; an object or array as compact JSON, close to Python's form.
   */
  private static String pyStr(JsonNode v) {
    if (v.isMissingNode() || v.isNull()) {
      return "None";
    }
    if (v.isTextual()) {
      return v.textValue();
    }
    if (v.isNumber() || v.isBoolean()) {
      return pyNumber(v);
    }
    return v.toString();
  }

  /**
   * What vLLM's request models refuse in the type of a chat's {@code tools} (a list of
   * {@code ChatCompletionToolsParam}: {@code type} {@code "function"} or left out, and a
   * {@code function} object whose {@code name} is a string, {@code description} a string and
   * {@code parameters} an object, each of the last two null or left out), as a message naming
   * the field, or null when they are left out, null or well typed. Nothing of the tools is quoted.
   */
  static @Nullable String toolsTypeInvalid(JsonNode body) {
    JsonNode tools = body.path("tools");
    if (tools.isMissingNode() || tools.isNull()) {
      return null;
    }
    String shape = " must be an array of tools, each an object with \"type\": \"function\" (or"
        + " none) and a \"function\" object whose \"name\" is a string (its \"description\" a"
        + " string and its \"parameters\" an object, if given)";
    if (!tools.isArray()) {
      return "field 'tools'" + shape;
    }
    for (int i = 0; i < tools.size(); i++) {
      JsonNode tool = tools.get(i);
      JsonNode type = tool.path("type");
      JsonNode function = tool.path("function");
      boolean valid = tool.isObject()
          && (type.isMissingNode() || "function".equals(type.textValue()))
          && function.isObject() && function.path("name").isTextual()
          && nullOr(function.path("description"), JsonNode::isTextual)
          && nullOr(function.path("parameters"), JsonNode::isObject);
      if (!valid) {
        return "field 'tools[" + i + "]'" + shape.replace("an array of tools, each ", "");
      }
    }
    return null;
  }

  /**
   * What vLLM's request model refuses in the shape of {@code response_format}, as a message
   * naming the field, or null when it is left out, null or of a shape vLLM takes (its
   * {@code AnyResponseFormat}): an object whose {@code type} is {@code text}, {@code json_object}
   * or {@code json_schema}, with a {@code json_schema} object, if any, whose {@code name} is a
   * string ({@code description} a string, {@code schema} an object and {@code strict} a boolean,
   * if given); or a {@code structural_tag} with a {@code format}, or with {@code structures}
   * (objects with string {@code begin} and {@code end}, an object {@code schema} if given) and
   * {@code triggers} (strings). Other fields are allowed, as vLLM's models allow them. Nothing
   * the client sent is quoted. A {@code json_schema} format without its schema passes here: vLLM
   * refuses it later, when it makes the sampling parameters.
   */
  static @Nullable String responseFormatInvalid(JsonNode body) {
    JsonNode format = body.path("response_format");
    if (format.isMissingNode() || format.isNull()) {
      return null;
    }
    String type = format.path("type").textValue();
    if (!format.isObject() || type == null) {
      return "field 'response_format' must be an object whose 'type' is text, json_object,"
          + " json_schema or structural_tag";
    }
    switch (type) {
      case "text", "json_object", "json_schema" -> {
        JsonNode schema = format.path("json_schema");
        if (schema.isMissingNode() || schema.isNull()) {
          return null;
        }
        if (!schema.isObject()) {
          return "field 'response_format.json_schema' must be an object";
        }
        if (!schema.path("name").isTextual()) {
          return "field 'response_format.json_schema.name' must be a string";
        }
        if (!nullOr(schema.path("description"), JsonNode::isTextual)) {
          return "field 'response_format.json_schema.description' must be a string";
        }
        if (!nullOr(schema.path("schema"), JsonNode::isObject)) {
          return "field 'response_format.json_schema.schema' must be an object";
        }
        if (!nullOr(schema.path("strict"), v -> laxBool(v) != null)) {
          return "field 'response_format.json_schema.strict' must be a boolean";
        }
        return null;
      }
      case "structural_tag" -> {
        // vLLM's current structural tag format takes any format; its legacy one, structures
        // and triggers
        if (format.has("format")) {
          return null;
        }
        JsonNode structures = format.path("structures");
        JsonNode triggers = format.path("triggers");
        boolean valid = structures.isArray() && triggers.isArray();
        for (JsonNode s : structures) {
          valid &= s.isObject() && s.path("begin").isTextual() && s.path("end").isTextual()
              && nullOr(s.path("schema"), JsonNode::isObject);
        }
        for (JsonNode t : triggers) {
          valid &= t.isTextual();
        }
        return valid ? null : "field 'response_format' of type structural_tag must have a"
            + " 'format', or 'structures' (objects with string 'begin' and 'end') and"
            + " 'triggers' (strings)";
      }
      default -> {
        return "field 'response_format.type' must be text, json_object, json_schema or"
            + " structural_tag";
      }
    }
  }

  private static boolean nullOr(JsonNode v, java.util.function.Predicate<JsonNode> type) {
    return v.isMissingNode() || v.isNull() || type.test(v);
  }

  /** vLLM's {@code --max-logprobs} default: the most log probabilities a request may ask for. */
  static final int MAX_LOGPROBS = 20;

  /**
   * What vLLM's request model ({@code check_logprobs}, then its field types) refuses in the log
   * probability fields, as {message, field}, or null: {@code prompt_logprobs} and the count
   * field (a chat's {@code top_logprobs}, a completion's {@code logprobs}) must be numbers,
   * neither below 0 but for -1, {@code prompt_logprobs} above 0 or -1 not in a stream
   * ({@code stream} read as Python reads a value's truth, as vLLM's check reads it), a chat's
   * {@code top_logprobs} above 0 or -1 only with {@code logprobs} true; then a chat's
   * {@code logprobs} must be a boolean and the counts integers. A value that is not a number is
   * named by the field only, not quoted.
   */
  static String @Nullable [] logprobsInvalid(JsonNode body, boolean chat) {
    String countField = chat ? "top_logprobs" : "logprobs";
    for (String f : List.of("prompt_logprobs", countField)) {
      JsonNode v = body.path(f);
      if (!v.isMissingNode() && !v.isNull() && !v.isNumber() && !v.isBoolean()) {
        return new String[] {"`" + f + "` must be an integer.", f};
      }
    }
    JsonNode prompt = body.path("prompt_logprobs");
    if (prompt.isNumber() || prompt.isBoolean()) {
      double p = prompt.isBoolean() ? (prompt.booleanValue() ? 1 : 0) : prompt.asDouble();
      if (pyTruthy(body.path("stream")) && (p > 0 || p == -1)) {
        return new String[] {"`prompt_logprobs` are not available when `stream=True`."
            + " (parameter=prompt_logprobs)", "prompt_logprobs"};
      }
      if (p < 0 && p != -1) {
        return new String[] {"`prompt_logprobs` must be a positive value or -1."
            + " (parameter=prompt_logprobs, value=" + pyNumber(prompt) + ")", "prompt_logprobs"};
      }
    }
    JsonNode count = body.path(countField);
    if (count.isNumber() || count.isBoolean()) {
      double c = count.isBoolean() ? (count.booleanValue() ? 1 : 0) : count.asDouble();
      if (c < 0 && c != -1) {
        return new String[] {"`" + countField + "` must be a positive value or -1. (parameter="
            + countField + ", value=" + pyNumber(count) + ")", countField};
      }
      if (chat && (c == -1 || c > 0) && !pyTruthy(body.path("logprobs"))) {
        return new String[] {"when using `top_logprobs`, `logprobs` must be set to true."
            + " (parameter=top_logprobs)", "top_logprobs"};
      }
    }
    if (chat && laxBool(body.path("logprobs")) == null) {
      return new String[] {"field 'logprobs' must be a boolean", "logprobs"};
    }
    for (String f : List.of("prompt_logprobs", countField)) {
      JsonNode v = body.path(f);
      if (v.isNumber() && logprobsCount(v) == null) {
        return new String[] {"field '" + f + "' must be an integer", f};
      }
    }
    return null;
  }

  /**
   * A count of log probabilities that {@link #logprobsInvalid} let through above vLLM's
   * {@code --max-logprobs}, as {message, field} in the words of vLLM's engine, or null: the
   * sampled tokens' count (a chat's {@code top_logprobs} with {@code logprobs} true, a
   * completion's {@code logprobs}), then the prompt's ({@code prompt_logprobs}; an echo's, which
   * vLLM takes from the sampled count, is checked with it), -1 counting as the whole vocabulary.
   */
  static String @Nullable [] logprobsOverMax(JsonNode body, boolean chat, int vocab) {
    JsonNode countNode = body.path(chat ? "top_logprobs" : "logprobs");
    Integer count = logprobsCount(countNode);
    Integer sample = chat && !Boolean.TRUE.equals(laxBool(body.path("logprobs"))) ? null : count;
    Integer prompt = logprobsCount(body.path("prompt_logprobs"));
    String[] kinds = {"sample", "prompt"};
    String[] params = {"logprobs", "prompt_logprobs"};
    Integer[] asked = {sample, prompt};
    for (int i = 0; i < 2; i++) {
      if (asked[i] == null || asked[i] == 0) {
        continue;
      }
      long n = asked[i] == -1 ? vocab : asked[i];
      if (n > MAX_LOGPROBS) {
        return new String[] {"Requested " + kinds[i] + " logprobs of " + n + ", which is greater"
            + " than max allowed: " + MAX_LOGPROBS + " (parameter=" + params[i] + ", value=" + n
            + ")", params[i]};
      }
    }
    return null;
  }

  /**
   * A log probability count as vLLM's request model takes it: an integer, a float without a
   * fractional part, or a boolean (Python's bool is an int); null for anything else, or absent.
   */
  private static @Nullable Integer logprobsCount(JsonNode v) {
    if (v.isBoolean()) {
      return v.booleanValue() ? 1 : 0;
    }
    return v.isNumber() ? laxInt(v) : null;
  }

  /** Python's truth of a JSON value: null, false, 0, "" and empty containers are false. */
  static boolean pyTruthy(JsonNode v) {
    if (v.isMissingNode() || v.isNull()) {
      return false;
    }
    if (v.isBoolean()) {
      return v.booleanValue();
    }
    if (v.isNumber()) {
      return v.asDouble() != 0;
    }
    if (v.isTextual()) {
      return !v.textValue().isEmpty();
    }
    return !v.isEmpty();
  }

  /** A JSON number or boolean as Python's {@code str} writes the value it parses to. */
  private static String pyNumber(JsonNode v) {
    if (v.isBoolean()) {
      return v.booleanValue() ? "True" : "False";
    }
    return v.isIntegralNumber() ? v.bigIntegerValue().toString() : pyFloat(v.asDouble());
  }

  /**
   * The field of a request that asks for log probabilities, or null when none does: a chat's
   * {@code logprobs} (a boolean) or a positive {@code top_logprobs}, a completion's
   * {@code logprobs} (the number of top tokens, 0 for the sampled one alone), and either's
   * {@code prompt_logprobs}, as vLLM reads them (null or left out asks for none).
   */
  static @Nullable String logprobsAsked(JsonNode body, boolean chat) {
    JsonNode logprobs = body.path("logprobs");
    if (chat) {
      if (!Boolean.FALSE.equals(laxBool(logprobs))) {
        return "logprobs";
      }
      JsonNode top = body.path("top_logprobs");
      if (!top.isMissingNode() && !top.isNull()) {
        Integer n = logprobsCount(top);
        if (n == null || n != 0) {
          return "top_logprobs";
        }
      }
    } else if (!logprobs.isMissingNode() && !logprobs.isNull()) {
      return "logprobs";
    }
    JsonNode prompt = body.path("prompt_logprobs");
    return prompt.isMissingNode() || prompt.isNull() ? null : "prompt_logprobs";
  }

  /**
   * The sampling fields checked, in the order of vLLM's {@code SamplingParams._verify_args}, and
   * the value each takes when left out or null.
   */
  private static final String[] SAMPLING = {"presence_penalty", "frequency_penalty",
      "repetition_penalty", "temperature", "top_p"};
  private static final double[] SAMPLING_DEFAULTS = {0, 0, 1, 1, 1};

  /**
   * The first sampling value out of vLLM's range, in the order and words of its
   * {@code SamplingParams._verify_args}: {@code n}, {@link #SAMPLING}, then {@code top_k} and
   * {@code min_p}; null when all are in range.
   */
  static @Nullable String samplingOutOfRange(int n, double[] v, int topK, double minP) {
    if (n < 1) {
      return "n must be at least 1, got " + n + ".";
    }
    for (int i = 0; i < 2; i++) {
      if (!(v[i] >= -2 && v[i] <= 2)) {
        return SAMPLING[i] + " must be in [-2, 2], got " + pyFloat(v[i]) + ".";
      }
    }
    if (!Double.isFinite(v[2])) {
      return "repetition_penalty must be a finite number, got " + pyFloat(v[2]) + ".";
    }
    if (v[2] <= 0) {
      return "repetition_penalty must be greater than zero, got " + pyFloat(v[2]) + ".";
    }
    String t = pyFloat(v[3]);
    String param = " (parameter=temperature, value=" + t + ")";
    if (!Double.isFinite(v[3])) {
      return "temperature must be a finite number, got " + t + "." + param;
    }
    if (v[3] < 0) {
      return "temperature must be non-negative, got " + t + "." + param;
    }
    if (v[3] > 2) {
      return "temperature must be in [0, 2], got " + t + "." + param;
    }
    if (!(v[4] > 0 && v[4] <= 1)) {
      String p = pyFloat(v[4]);
      return "top_p must be in (0, 1], got " + p + ". (parameter=top_p, value=" + p + ")";
    }
    // -1 is taken as 0 (no top-k), as vLLM quietly takes it
    if (topK < -1) {
      return "top_k must be 0 (disable), or at least 1, got " + topK + ".";
    }
    if (!(minP >= 0 && minP <= 1)) {
      return "min_p must be in [0, 1], got " + pyFloat(minP) + ".";
    }
    return null;
  }

  /**
   * Whether a value is an integer vLLM's request model takes for a 64-bit field such as
   * {@code seed}: an integer, a float without a fractional part, or a string of decimal digits,
   * from -2^63 to 2^63 - 1, or a boolean (1 or 0, as pydantic's lax mode reads it).
   */
  static boolean isInt64(JsonNode v) {
    if (v.isBoolean()) {
      return true;
    }
    if (v.isIntegralNumber()) {
      return v.canConvertToLong();
    }
    if (v.isFloatingPointNumber()) {
      double d = v.asDouble();
      return d == Math.rint(d) && d >= -0x1p63 && d < 0x1p63;
    }
    if (v.isTextual() && v.asText().matches("[+-]?[0-9]{1,19}")) {
      return new java.math.BigInteger(v.asText()).bitLength() < 64;
    }
    return false;
  }

  /** The value of a field that {@link #isInt64} takes. */
  static long int64(JsonNode v) {
    return v.isBoolean() ? (v.booleanValue() ? 1 : 0)
        : new java.math.BigDecimal(v.asText()).longValueExact();
  }

  /** A float as Python's {@code str} writes it ({@code 3.0}, {@code 2.5}, {@code 1e-05}). */
  static String pyFloat(double d) {
    if (Double.isNaN(d)) {
      return "nan";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "inf" : "-inf";
    }
    double a = Math.abs(d);
    if (a == 0 || (a >= 1e-4 && a < 1e16)) {
      String plain = new java.math.BigDecimal(Double.toString(d)).toPlainString();
      return plain.contains(".") ? plain : plain + ".0";
    }
    // Python's exponent form: shortest digits, "e", a sign and at least two exponent digits
    String[] parts = Double.toString(d).split("E");
    String mantissa = parts[0].endsWith(".0")
        ? parts[0].substring(0, parts[0].length() - 2) : parts[0];
    int exp = parts.length > 1 ? Integer.parseInt(parts[1]) : 0;
    return mantissa + "e" + (exp < 0 ? "-" : "+") + String.format(java.util.Locale.ROOT, "%02d",
        Math.abs(exp));
  }

  /**
   * A float field's value as vLLM's request models (pydantic, lax mode) take it: a number, a
   * string holding one ({@code "inf"} and {@code "nan"} too) or a boolean (1.0 or 0.0); null for
   * anything else.
   */
  static @Nullable Double laxFloat(JsonNode v) {
    if (v.isBoolean()) {
      return v.booleanValue() ? 1.0 : 0.0;
    }
    if (v.isNumber()) {
      return v.asDouble();
    }
    if (v.isTextual()) {
      String t = v.asText().strip().toLowerCase(java.util.Locale.ROOT);
      switch (t) {
        case "inf", "+inf", "infinity", "+infinity" -> {
          return Double.POSITIVE_INFINITY;
        }
        case "-inf", "-infinity" -> {
          return Double.NEGATIVE_INFINITY;
        }
        case "nan" -> {
          return Double.NaN;
        }
        default -> {
          if (t.matches("[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)(e[+-]?[0-9]+)?")) {
            return Double.parseDouble(t);
          }
          return null;
        }
      }
    }
    return null;
  }

  /**
   * An integer field's value as vLLM's request models (pydantic, lax mode) take it: an integer,
   * a float without a fractional part, a string of decimal digits or a boolean (1 or 0); null
   * for anything else (or beyond an int).
   */
  static @Nullable Integer laxInt(JsonNode v) {
    if (v.isBoolean()) {
      return v.booleanValue() ? 1 : 0;
    }
    if (v.isIntegralNumber()) {
      return v.canConvertToInt() ? v.asInt() : null;
    }
    if (v.isFloatingPointNumber()) {
      double d = v.asDouble();
      return d == Math.rint(d) && d >= Integer.MIN_VALUE && d <= Integer.MAX_VALUE
          ? (int) d : null;
    }
    if (v.isTextual() && v.asText().matches("[+-]?[0-9]{1,10}")) {
      long l = Long.parseLong(v.asText());
      return l >= Integer.MIN_VALUE && l <= Integer.MAX_VALUE ? (int) l : null;
    }
    return null;
  }

  /**
   * A boolean field's value as vLLM's request models (pydantic, lax mode) take it: a boolean,
   * 0 or 1, or one of the strings pydantic reads as one ({@code "true"}, {@code "yes"},
   * {@code "off"}, ..., any case); false for a missing field or null, as for the fields' default;
   * null for anything else, which vLLM refuses with a 400 rather than reading it as false.
   */
  static @Nullable Boolean laxBool(JsonNode v) {
    if (v.isMissingNode() || v.isNull()) {
      return Boolean.FALSE;
    }
    if (v.isBoolean()) {
      return v.booleanValue();
    }
    if (v.isNumber()) {
      double d = v.asDouble();
      return d == 1 ? Boolean.TRUE : d == 0 ? Boolean.FALSE : null;
    }
    if (v.isTextual()) {
      return switch (v.asText().toLowerCase(java.util.Locale.ROOT)) {
        case "1", "on", "t", "true", "y", "yes" -> Boolean.TRUE;
        case "0", "off", "f", "false", "n", "no" -> Boolean.FALSE;
        default -> null;
      };
    }
    return null;
  }

  /**
   * {@link #laxBool} for a field vLLM's request model types {@code bool} with a default rather
   * than {@code bool | None} ({@code ignore_eos}, {@code add_special_tokens}, ...): left out it is
   * false, and null is refused (null here), as pydantic refuses it.
   */
  static @Nullable Boolean nonNullBool(JsonNode v) {
    return v.isNull() ? null : laxBool(v);
  }

  private static int[] take(LinkedBlockingQueue<int[]> out) throws IOException {
    try {
      return out.take();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted", e);
    }
  }

  /**
   * The whole answer.
   *
   * @param promptIds the prompt's token IDs when the request asked for {@code return_token_ids},
   *     else null
   */
  private void whole(Exchange ex, LinkedBlockingQueue<int[]> out, boolean chat, String id,
      long created, String served, int @Nullable [] promptIds, String finishReason, Echo echo,
      String role, StopPlan plan) throws IOException {
    StringBuilder text = new StringBuilder(echo.text());
    ArrayNode ids = JSON.createArrayNode();
    int[] m;
    while ((m = take(out)).length == 1) {
      ids.add(m[0]);
    }
    if (!echo.only()) {
      text.append(filler(0, plan.textLength()));
    }
    if (m == CLIENT_GONE) {
      return;
    }
    if (m[0] == -2) {
      error(ex, 503, "ServiceUnavailableError", "the server stopped before the request finished");
      return;
    }
    // vLLM writes a whole answer with every field of its response model (model_dump() with
    // nothing left out), in the model's order, null or empty where it has no value: the filler
    // has no tool call, reasoning or KV transfer to name, and a stop string only when one ended
    // it; the fingerprint is current vLLM's default, a string
    ObjectNode root = base(id, chat ? "chat.completion" : "text_completion", created, served);
    ObjectNode choice = root.putArray("choices").addObject();
    choice.put("index", 0);
    if (chat) {
      ObjectNode msg = choice.putObject("message");
      msg.put("role", role);
      msg.put("content", text.toString());
      msg.putNull("refusal");
      msg.putNull("annotations");
      msg.putNull("audio");
      msg.putNull("function_call");
      msg.putArray("tool_calls");
      msg.putNull("reasoning");
      msg.putNull("reasoning_content");
    } else {
      choice.put("text", text.toString());
    }
    choice.putNull("logprobs");
    choice.put("finish_reason", finishReason);
    countFinished(finishReason);
    if (plan.stopString() != null) {
      choice.put("stop_reason", plan.stopString());
    } else {
      choice.putNull("stop_reason");
    }
    // return_token_ids: a completion names the prompt's IDs in its choice, a chat at the top
    if (promptIds != null) {
      choice.set("token_ids", ids);
    } else {
      choice.putNull("token_ids");
    }
    if (!chat) {
      choice.putNull("prompt_logprobs");
      if (promptIds != null) {
        choice.putRawValue("prompt_token_ids", idsJson(promptIds));
      } else {
        choice.putNull("prompt_token_ids");
      }
    }
    root.putNull("service_tier");
    root.put("system_fingerprint", systemFingerprint);
    root.set("usage", usage(m[1], m[2], m[3], true));
    if (chat) {
      root.putNull("prompt_logprobs");
      if (promptIds != null) {
        root.putRawValue("prompt_token_ids", idsJson(promptIds));
      } else {
        root.putNull("prompt_token_ids");
      }
    }
    root.putNull("kv_transfer_params");
    send(ex, 200, "application/json", JSON.writeValueAsString(root));
  }

  /**
   * The answer as SSE events.
   *
   * @param promptIds the prompt's token IDs when the request asked for {@code return_token_ids},
   *     else null
   */
  private void stream(Exchange ex, LinkedBlockingQueue<int[]> out, boolean chat, String id,
      long created, String served, boolean includeUsage, int continuousPromptTokens,
      StopPlan plan, int @Nullable [] promptIds, String finishReason, Echo echo, String role)
      throws IOException {
    int maxTokens = plan.tokens();
    // the text sent so far: vLLM holds back the last characters a stop string could begin with
    // until the answer ends, so each chunk carries what became certain with its token
    int shown = 0;
    ex.startStream("text/event-stream; charset=utf-8");
    String object = chat ? "chat.completion.chunk" : "text_completion";
    int sent = 0;
    int[] m;
    while ((m = take(out)).length == 1) {
      if (chat && sent == 0) {
        // as vLLM's chat stream: the role chunk goes out with the first output of the engine,
        // just before the first token's chunk, not when the request is queued (a client timing
        // the first event would see no prefill at all), and a request that fails before its
        // first token gets the error event alone
        ObjectNode first = base(id, object, created, served);
        ObjectNode c = first.putArray("choices").addObject();
        c.put("index", 0);
        c.putObject("delta").put("role", role).put("content", "");
        c.putNull("logprobs");
        c.putNull("finish_reason");
        // as vLLM's chunks, written without their unset fields: usage only with
        // continuous_usage_stats, no "usage": null otherwise
        if (continuousPromptTokens >= 0) {
          first.set("usage", runningUsage(continuousPromptTokens, 0));
        }
        // vLLM's chat stream names the prompt's IDs once, in its first chunk, and builds that
        // chunk with the field set either way: null without return_token_ids
        if (promptIds != null) {
          first.putRawValue("prompt_token_ids", idsJson(promptIds));
        } else {
          first.putNull("prompt_token_ids");
        }
        event(ex, JSON.writeValueAsString(first));
        if (!echo.text().isEmpty()) {
          // vLLM's chat echo: the last message's content in a chunk of its own, after the role
          ObjectNode echoed = base(id, object, created, served);
          ObjectNode e = echoed.putArray("choices").addObject();
          e.put("index", 0);
          e.putObject("delta").put("content", echo.text());
          e.putNull("logprobs");
          e.putNull("finish_reason");
          if (continuousPromptTokens >= 0) {
            echoed.set("usage", runningUsage(continuousPromptTokens, 0));
          }
          event(ex, JSON.writeValueAsString(echoed));
        }
      }
      sent++;
      int visible = sent == maxTokens ? plan.textLength()
          : Math.max(shown, Math.min(plan.textLength(), sent * FILLER.length() - plan.hold()));
      String delta = filler(shown, visible);
      shown = visible;
      ObjectNode chunk = base(id, object, created, served);
      ObjectNode c = chunk.putArray("choices").addObject();
      c.put("index", 0);
      if (chat) {
        c.putObject("delta").put("content", delta);
      } else {
        // a completion's echo goes out with the first token (alone, for max_tokens 0)
        String prefix = sent == 1 ? echo.text() : "";
        c.put("text", echo.only() ? prefix : prefix + delta);
      }
      c.putNull("logprobs");
      if (sent == maxTokens) {
        c.put("finish_reason", finishReason);
      } else {
        c.putNull("finish_reason");
      }
      if (chat) {
        // as vLLM builds a chat token chunk's choice: token_ids always set (null unless asked
        // for), stop_reason set on the chunk that finishes (null unless a stop string ended the
        // answer), both written as null since set fields are written even when null
        if (sent == maxTokens) {
          if (plan.stopString() != null) {
            c.put("stop_reason", plan.stopString());
          } else {
            c.putNull("stop_reason");
          }
        }
        if (promptIds != null) {
          c.putArray("token_ids").add(m[0]);
        } else {
          c.putNull("token_ids");
        }
      } else {
        // vLLM builds each completion chunk's choice with every field of its model, so even
        // those it has no value for are written, as null: stop_reason (but on the last chunk of
        // an answer a stop string ended), and the IDs a request without return_token_ids does
        // not get; the prompt's IDs go out once, in the first token's choice
        if (sent == maxTokens && plan.stopString() != null) {
          c.put("stop_reason", plan.stopString());
        } else {
          c.putNull("stop_reason");
        }
        // the prompt's IDs go with the first token's chunk when asked for, and always with an
        // echo (vLLM returns them with the echoed prompt whether or not return_token_ids is set)
        int[] firstIds = promptIds != null ? promptIds : echo.promptIds();
        if (firstIds != null && sent == 1) {
          c.putRawValue("prompt_token_ids", idsJson(firstIds));
        } else {
          c.putNull("prompt_token_ids");
        }
        if (promptIds != null) {
          c.putArray("token_ids").add(m[0]);
        } else {
          c.putNull("token_ids");
        }
      }
      if (continuousPromptTokens >= 0) {
        chunk.set("usage", runningUsage(continuousPromptTokens, sent));
      }
      // as current vLLM: the fingerprint on the chunk that finishes the answer, unless a usage
      // chunk follows, which then carries it as the stream's last message
      if (sent == maxTokens && !includeUsage) {
        chunk.put("system_fingerprint", systemFingerprint);
      }
      event(ex, JSON.writeValueAsString(chunk));
    }
    if (m == CLIENT_GONE) {
      return;
    }
    if (m[0] == -2) {
      // vLLM reports an engine failure mid-stream as an error event, the same error object as
      // a whole answer's (its create_streaming_error_response dumps that model, param and all)
      event(ex, errorBody(503, "ServiceUnavailableError",
          "the server stopped before the request finished"));
    } else {
      countFinished(finishReason);
      if (includeUsage) {
        ObjectNode last = base(id, object, created, served);
        last.putArray("choices");
        last.set("usage", usage(m[1], m[2], m[3], false));
        last.put("system_fingerprint", systemFingerprint);
        event(ex, JSON.writeValueAsString(last));
      }
    }
    event(ex, "[DONE]");
    ex.endStream();
  }

  /** Counts a finished answer under its finish reason, for {@code vllm:request_success_total}. */
  private void countFinished(String finishReason) {
    if (finishReason.equals("stop")) {
      finishedOnStop.incrementAndGet();
    }
  }

  /**
   * Token IDs as a JSON array written straight into the answer: as a tree, a long prompt's IDs
   * were a node apiece.
   */
  private static com.fasterxml.jackson.databind.util.RawValue idsJson(int[] ids) {
    StringBuilder b = new StringBuilder(2 + 7 * ids.length);
    b.append('[');
    for (int i = 0; i < ids.length; i++) {
      if (i > 0) {
        b.append(',');
      }
      b.append(ids[i]);
    }
    return new com.fasterxml.jackson.databind.util.RawValue(b.append(']').toString());
  }

  /** One SSE event, sent at once. */
  private static void event(Exchange ex, String data) {
    ex.chunk(("data: " + data + "\n\n").getBytes(StandardCharsets.UTF_8));
  }

  private static ObjectNode base(String id, String object, long created, String served) {
    ObjectNode n = JSON.createObjectNode();
    n.put("id", id);
    n.put("object", object);
    n.put("created", created);
    n.put("model", served);
    return n;
  }

  /** The usage so far in a chunk of a stream, as vLLM's continuous_usage_stats reports it. */
  private static ObjectNode runningUsage(int prompt, int completion) {
    ObjectNode u = JSON.createObjectNode();
    u.put("prompt_tokens", prompt);
    u.put("total_tokens", prompt + completion);
    u.put("completion_tokens", completion);
    return u;
  }

  /**
   * An answer's usage, as vLLM's: {@code prompt_tokens_details.cached_tokens} (0 when nothing was
   * cached) only with {@code --enable-prompt-tokens-details}; without it the whole answer, which
   * vLLM writes with every field of its model, has {@code "prompt_tokens_details": null}, and the
   * stream's usage chunk, written without its null fields, has no such key.
   *
   * @param whole for a whole answer, not a stream's usage chunk
   */
  private ObjectNode usage(int prompt, int cached, int completion, boolean whole) {
    ObjectNode u = JSON.createObjectNode();
    u.put("prompt_tokens", prompt);
    u.put("total_tokens", prompt + completion);
    u.put("completion_tokens", completion);
    if (promptTokensDetails) {
      u.putObject("prompt_tokens_details").put("cached_tokens", cached);
    } else if (whole) {
      u.putNull("prompt_tokens_details");
    }
    return u;
  }

  /** As vLLM's model check: a name left out, null or empty is the base model. */
  private String requestedModel(@Nullable JsonNode modelNode) {
    return modelNode == null || modelNode.isNull() || modelNode.asText().isEmpty()
        ? model : modelNode.asText();
  }

  /**
   * vLLM's 404 for a model it does not serve, in its words, which clients and gateways match on
   * (the name is the request's own, not its prompt), naming {@code model} as its {@code param}
   * as current vLLM's model check does.
   */
  private static void modelNotFound(Exchange ex, String requested) {
    error(ex, 404, "NotFoundError", "The model `" + requested + "` does not exist.", "model");
  }

  private void tokenizeEndpoint(Exchange ex, RequestBody body) throws IOException {
    // vLLM's /tokenize checks the model as its generation endpoints do: a count from the base
    // model's tokenizer for a model it does not serve would be a wrong answer, not an error
    JsonNode modelNode = body.fields().get("model");
    if (modelNode != null && !modelNode.isNull() && !modelNode.isTextual()) {
      error(ex, 400, "BadRequestError", "field 'model' must be a string");
      return;
    }
    String badTools = body.hasMessages() ? toolsTypeInvalid(body.fields()) : null;
    if (badTools != null) {
      error(ex, 400, "BadRequestError", badTools, "tools");
      return;
    }
    // vLLM's request model for /tokenize takes a text prompt only (prompt: str), no token IDs or
    // batch, and refuses anything else before the model check
    if (!body.hasMessages() && body.prompt() == null) {
      error(ex, 400, "BadRequestError", PROMPT_REQUIRED);
      return;
    }
    if (!body.hasMessages() && !body.promptIsString()) {
      error(ex, 400, "BadRequestError", "field 'prompt' must be a string");
      return;
    }
    String badPromptField = promptFieldsInvalid(body.fields(), body.hasMessages(), false);
    if (badPromptField != null) {
      error(ex, 400, "BadRequestError", badPromptField);
      return;
    }
    // vLLM's return_token_strs (a boolean or null) asks for each token's string from the
    // tokenizer's vocabulary, which neither the stand-in (its IDs are hashes of words) nor the
    // tokenizer binding gives: refused once the model is found, where vLLM would compute them,
    // rather than answered with token_strs null as if not asked
    Boolean tokenStrs = laxBool(body.fields().path("return_token_strs"));
    if (tokenStrs == null) {
      error(ex, 400, "BadRequestError", "field 'return_token_strs' must be a boolean",
          "return_token_strs");
      return;
    }
    String requested = requestedModel(modelNode);
    if (!model.equals(requested) && !loraAdapters.contains(requested)) {
      modelNotFound(ex, requested);
      return;
    }
    if (tokenStrs) {
      error(ex, 400, "BadRequestError", "field 'return_token_strs' asks for the token strings,"
          + " which the emulated replica does not give; leave it out", "return_token_strs");
      return;
    }
    Object parsed = promptTokens(body, body.hasMessages(), false);
    if (parsed instanceof String msg) {
      error(ex, 400, "BadRequestError", msg);
      return;
    }
    int[] ids = (int[]) parsed;
    // written as it goes: a tree of the answer was a node per token again
    java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream(
        (int) Math.min(32 + 8L * ids.length, 1 << 30));
    try (com.fasterxml.jackson.core.JsonGenerator g = JSON.createGenerator(bytes)) {
      g.writeStartObject();
      g.writeNumberField("count", ids.length);
      g.writeNumberField("max_model_len", cluster.profile().maxModelLen());
      g.writeFieldName("tokens");
      g.writeArray(ids, 0, ids.length);
      // vLLM writes every field of its TokenizeResponse: the token strings, not asked for, null
      g.writeNullField("token_strs");
      g.writeEndObject();
    }
    ex.send(response(200, "application/json", bytes.toByteArray()));
  }

  /**
   * vLLM's {@code /detokenize}: {@code {"model", "tokens"}} answered {@code {"prompt": text}},
   * the model checked as {@code /tokenize} checks it. The text comes from the tokenizer of
   * {@code --tokenizer}; the stand-in's IDs are hashes of words that cannot be turned back, so
   * without one the request is refused (an answer with made-up text would be a wrong answer).
   */
  private void detokenizeEndpoint(Exchange ex, RequestBody body) throws IOException {
    JsonNode modelNode = body.fields().get("model");
    if (modelNode != null && !modelNode.isNull() && !modelNode.isTextual()) {
      error(ex, 400, "BadRequestError", "field 'model' must be a string", "model");
      return;
    }
    RequestBody.Prompt tokens = body.tokens();
    if (tokens == null) {
      error(ex, 400, "BadRequestError", "field 'tokens' is required", "tokens");
      return;
    }
    if (tokens instanceof RequestBody.Bad bad) {
      error(ex, 400, "BadRequestError", bad.message(), "tokens");
      return;
    }
    String requested = requestedModel(modelNode);
    if (!model.equals(requested) && !loraAdapters.contains(requested)) {
      modelNotFound(ex, requested);
      return;
    }
    String text;
    try {
      text = decode(((RequestBody.Ids) tokens).ids());
    } catch (RuntimeException e) {
      error(ex, 400, "BadRequestError", "the tokenizer given with --tokenizer cannot decode"
          + " field 'tokens': " + reason(e), "tokens");
      return;
    }
    if (text == null) {
      error(ex, 400, "BadRequestError", "/detokenize needs the model's tokenizer: the stand-in"
          + " tokenizer's IDs are hashes of words and cannot be turned back into text; start"
          + " serve with --tokenizer", "tokens");
      return;
    }
    ObjectNode root = JSON.createObjectNode();
    root.put("prompt", text);
    send(ex, 200, "application/json", JSON.writeValueAsString(root));
  }

  /**
   * The base model, then each LoRA adapter as a model of its own whose {@code parent} is the base
   * model and whose {@code root} is its path, as vLLM lists its {@code --lora-modules} (an
   * adapter given without a path has its name there). Every card has each field of vLLM's {@code ModelCard}, in its order, and
   * one {@code ModelPermission}; vLLM builds the cards for each request, so their
   * {@code created} is the time of the request in seconds.
   */
  private String models() throws IOException {
    long now = System.currentTimeMillis() / 1000;
    ObjectNode root = JSON.createObjectNode();
    root.put("object", "list");
    ArrayNode data = root.putArray("data");
    modelCard(data, model, model, null, cluster.profile().maxModelLen(), now);
    for (String adapter : loraAdapters) {
      modelCard(data, adapter, loraPaths.getOrDefault(adapter, adapter), model, null, now);
    }
    return JSON.writeValueAsString(root);
  }

  private static void modelCard(ArrayNode data, String id, String root, @Nullable String parent,
      @Nullable Integer maxModelLen, long created) {
    ObjectNode m = data.addObject();
    m.put("id", id);
    m.put("object", "model");
    m.put("created", created);
    m.put("owned_by", "vllm");
    m.put("root", root);
    m.put("parent", parent);
    m.put("max_model_len", maxModelLen);
    ObjectNode p = m.putArray("permission").addObject();
    p.put("id", "modelperm-" + UUID.randomUUID().toString().replace("-", ""));
    p.put("object", "model_permission");
    p.put("created", created);
    p.put("allow_create_engine", false);
    p.put("allow_sampling", true);
    p.put("allow_logprobs", true);
    p.put("allow_search_indices", false);
    p.put("allow_view", true);
    p.put("allow_fine_tuning", false);
    p.put("organization", "*");
    p.putNull("group");
    p.put("is_blocking", false);
  }

  /**
   * vLLM's {@code finished_reason} label values, one per member of its {@code FinishReason} enum
   * ({@code FINISH_REASON_STRINGS} in {@code vllm/v1/engine/__init__.py}), in its order.
   */
  static final List<String> FINISH_REASONS =
      List.of("stop", "length", "abort", "error", "repetition");

  /** vLLM's Prometheus exposition for this replica (engine 0). */
  String metrics() {
    EmulatedCluster.Stats s = cluster.stats(replica);
    String labels = "engine=\"0\",model_name=\"" + labelValue(model) + "\"";
    // a series' labels in name order, as vLLM's Prometheus client writes them: a label of its
    // own (finished_reason, le) between engine and model_name
    String engine = "engine=\"0\",";
    String modelName = ",model_name=\"" + labelValue(model) + "\"";
    StringBuilder b = new StringBuilder(4096);
    gauge(b, "vllm:num_requests_running", "Number of requests in model execution batches.",
        labels, s.running());
    gauge(b, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        labels, s.waiting());
    gauge(b, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        labels, s.kvUsage());
    counter(b, "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried"
        + " tokens.", labels, s.prefixQueries());
    counter(b, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
        labels, s.prefixHits());
    counter(b, "vllm:prompt_tokens", "Number of prefill tokens processed.", labels,
        s.promptTokens());
    counter(b, "vllm:generation_tokens", "Number of generation tokens processed.", labels,
        s.generationTokens());
    // vLLM creates this counter's series for every finish reason when it starts, so a scraper or
    // an alert finds each one at zero before the first request ending that way. An answer here
    // ends on its length, or on "stop" where the emulated model ended it itself; a request whose
    // client left is counted under none, as vLLM's abort path records no finished-request stats
    long finished = s.requestsFinished();
    long stopped = Math.min(finished, finishedOnStop.get());
    String success = "vllm:request_success_total";
    b.append("# HELP ").append(success).append(" Count of successfully processed requests.\n")
        .append("# TYPE ").append(success).append(" counter\n");
    for (String reason : FINISH_REASONS) {
      b.append(success).append('{').append(engine).append("finished_reason=\"").append(reason)
          .append('"').append(modelName).append("} ").append(reason.equals("length") ? (double) (finished - stopped)
              : reason.equals("stop") ? (double) stopped : 0.0)
          .append('\n');
    }
    // vLLM writes its whole CacheConfig as labels, each value Python's str() of the field; these
    // are the fields whose value the emulated engine has (KV cache in the model's bf16, "auto";
    // no block count override; no sliding window in either profile's model), in name order
    b.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n")
        .append("# TYPE vllm:cache_config_info gauge\n")
        .append("vllm:cache_config_info{block_size=\"").append(s.blockSize())
        .append("\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"0\"")
        .append(",gpu_memory_utilization=\"")
        .append(pythonFloat(cluster.profile().gpuMemoryUtilization()))
        .append("\",is_attention_free=\"False\",num_gpu_blocks=\"").append(s.numGpuBlocks())
        .append("\",num_gpu_blocks_override=\"None\",sliding_window=\"None\"} 1.0\n");
    if (!loraAdapters.isEmpty()) {
      // as vLLM with --enable-lora: one series whose value is when it was set
      int maxLoras = cluster.maxLoras();
      b.append("# HELP vllm:lora_requests_info Running stats on lora requests.\n")
          .append("# TYPE vllm:lora_requests_info gauge\n")
          .append("vllm:lora_requests_info{max_lora=\"")
          .append(maxLoras > 0 ? maxLoras : loraAdapters.size())
          .append("\",running_lora_adapters=\"")
          .append(labelValue(String.join(",", s.runningLoraAdapters())))
          .append("\",waiting_lora_adapters=\"")
          .append(labelValue(String.join(",", s.waitingLoraAdapters())))
          .append("\"} ").append(System.currentTimeMillis() / 1000.0).append('\n');
    }
    String h = "vllm:time_to_first_token_seconds";
    b.append("# HELP ").append(h).append(" Histogram of time to first token in seconds.\n")
        .append("# TYPE ").append(h).append(" histogram\n");
    long[] counts = s.ttftBucketCounts();
    for (int i = 0; i < counts.length; i++) {
      b.append(h).append("_bucket{").append(engine).append("le=\"")
          .append(EmulatedCluster.TTFT_BUCKETS[i]).append('"').append(modelName).append("} ")
          .append((double) counts[i]).append('\n');
    }
    b.append(h).append("_bucket{").append(engine).append("le=\"+Inf\"").append(modelName)
        .append("} ")
        .append((double) s.ttftCount()).append('\n');
    b.append(h).append("_count{").append(labels).append("} ").append((double) s.ttftCount())
        .append('\n');
    b.append(h).append("_sum{").append(labels).append("} ").append(s.ttftSumSeconds())
        .append('\n');
    return b.toString();
  }

  /**
   * A float as Python's {@code str()} writes it, as vLLM's info labels hold them: the shortest
   * digits that read back as the same double, {@code 0.9} and {@code 1.0} in positional notation
   * from 1e-4 to below 1e16, {@code 1e-05} and {@code 1.5e+16} in scientific notation outside.
   */
  static String pythonFloat(double v) {
    if (Double.isNaN(v)) {
      return "nan";
    }
    if (Double.isInfinite(v)) {
      return v > 0 ? "inf" : "-inf";
    }
    if (v == 0) {
      return 1 / v < 0 ? "-0.0" : "0.0";
    }
    BigDecimal d = new BigDecimal(Double.toString(v)).stripTrailingZeros();
    double abs = Math.abs(v);
    if (abs >= 1e-4 && abs < 1e16) {
      String plain = d.toPlainString();
      return plain.contains(".") ? plain : plain + ".0";
    }
    String digits = d.unscaledValue().abs().toString();
    int exponent = digits.length() - 1 - d.scale();
    return (v < 0 ? "-" : "") + digits.charAt(0)
        + (digits.length() > 1 ? "." + digits.substring(1) : "")
        + (exponent < 0 ? "e-" : "e+") + (Math.abs(exponent) < 10 ? "0" : "")
        + Math.abs(exponent);
  }

  /**
   * A label value as the exposition format writes it ({@code \\}, {@code "} and a line feed
   * escaped): written raw, a model or adapter name holding one ended the label early and made the
   * whole page unreadable to a scraper.
   */
  static String labelValue(String v) {
    StringBuilder b = new StringBuilder(v.length() + 8);
    for (int i = 0; i < v.length(); i++) {
      char c = v.charAt(i);
      switch (c) {
        case '\\' -> b.append("\\\\");
        case '"' -> b.append("\\\"");
        case '\n' -> b.append("\\n");
        default -> b.append(c);
      }
    }
    return b.toString();
  }

  private static void gauge(StringBuilder b, String name, String help, String labels,
      double v) {
    b.append("# HELP ").append(name).append(' ').append(help).append('\n')
        .append("# TYPE ").append(name).append(" gauge\n")
        .append(name).append('{').append(labels).append("} ").append(v).append('\n');
  }

  private static void counter(StringBuilder b, String name, String help, String labels,
      long v) {
    b.append("# HELP ").append(name).append("_total ").append(help).append('\n')
        .append("# TYPE ").append(name).append("_total counter\n")
        .append(name).append("_total{").append(labels).append("} ").append((double) v)
        .append('\n');
  }

  /** Sends {@code body} whole; without a {@code Content-Type} when {@code type} is null. */
  private static void send(Exchange ex, int status, @Nullable String type, String body) {
    ex.send(response(status, type, body));
  }

  /** A token ID as Python's int() reads a string: sign, digits, single underscores between. */
  private static final java.util.regex.Pattern PY_INT =
      java.util.regex.Pattern.compile("\\s*[+-]?[0-9]+(_[0-9]+)*\\s*");

  /**
   * The message and field for a response format or logit bias that vLLM's request cannot turn
   * into sampling parameters, or null: a {@code json_schema} response format without its
   * {@code json_schema} (vLLM refuses it with a 400 since it raises a ValueError there), a
   * {@code logit_bias} key that is not an integer (vLLM converts each key with int()). Neither
   * quotes what the client sent.
   */
  static String @Nullable [] unusableSamplingField(JsonNode body, boolean logitsProcessors) {
    JsonNode format = body.path("response_format");
    if (format.isObject() && "json_schema".equals(format.path("type").asText(null))
        && (format.path("json_schema").isMissingNode() || format.path("json_schema").isNull())) {
      return new String[] {"field 'response_format.json_schema' is required when"
          + " 'response_format.type' is json_schema", "response_format"};
    }
    // vLLM resolves a request's logits processors only with --logits-processor-pattern, which
    // it is not started with by default (and the filler has no logits to process)
    if (logitsProcessors) {
      return new String[] {"The `logits_processors` argument is not supported by this server."
          + " See --logits-processor-pattern engine argument for more information.", null};
    }
    JsonNode bias = body.path("logit_bias");
    if (bias.isObject()) {
      for (java.util.Iterator<String> keys = bias.fieldNames(); keys.hasNext(); ) {
        if (!PY_INT.matcher(keys.next()).matches()) {
          return new String[] {"field 'logit_bias' must map token IDs (integers) to biases; a key"
              + " is not an integer", "logit_bias"};
        }
      }
    }
    return null;
  }

  /**
   * Why {@code allowed_token_ids} is refused, as {message}, or null when the request has none
   * (left out or null): an empty list and IDs outside the model's vocabulary in vLLM's words,
   * the IDs named in the order given; any other list because the filler output does not keep to
   * it.
   */
  static String @Nullable [] allowedTokenIdsRefused(RequestBody request) {
    int count = request.allowedTokenIdsCount();
    if (count < 0) {
      return null;
    }
    if (count == 0) {
      return new String[] {"allowed_token_ids is not None and empty! (parameter=allowed_token_ids,"
          + " value=[])"};
    }
    List<String> invalid = request.allowedTokenIdsOutOfVocab();
    if (!invalid.isEmpty()) {
      return new String[] {"allowed_token_ids contains out-of-vocab token id! (parameter="
          + "allowed_token_ids, value=[" + String.join(", ", invalid) + "])"};
    }
    return new String[] {"field 'allowed_token_ids' limits the tokens generated, which the"
        + " emulated replica's filler output does not keep to; leave it out"};
  }

  /**
   * vLLM's refusal of {@code logit_bias} token IDs outside the model's vocabulary of
   * {@code vocab} rows (below 0, or at or above it), in its words, each ID once and in the order
   * the keys first give it, as Python's dict of the converted keys holds them; null when there is
   * none. Called once {@link #unusableSamplingField} has found every key an integer.
   */
  static @Nullable String logitBiasOutOfVocab(JsonNode body, int vocab) {
    JsonNode bias = body.path("logit_bias");
    if (!bias.isObject()) {
      return null;
    }
    java.util.Set<java.math.BigInteger> ids = new java.util.LinkedHashSet<>();
    for (java.util.Iterator<String> keys = bias.fieldNames(); keys.hasNext(); ) {
      ids.add(new java.math.BigInteger(keys.next().strip().replace("_", "")));
    }
    java.math.BigInteger size = java.math.BigInteger.valueOf(vocab);
    StringBuilder invalid = null;
    for (java.math.BigInteger id : ids) {
      if (id.signum() < 0 || id.compareTo(size) >= 0) {
        invalid = invalid == null ? new StringBuilder("[") : invalid.append(", ");
        invalid.append(id);
      }
    }
    if (invalid == null) {
      return null;
    }
    String list = invalid.append(']').toString();
    return "token_id(s) " + list + " in logit_bias contain out-of-vocab token ids. Vocabulary"
        + " size: " + vocab + " (parameter=logit_bias, value=" + list + ")";
  }

  /**
   * An OpenAI-shaped error: {@code {"error": {"message", "type", "param", "code"}}}, vLLM's
   * ErrorResponse, whose {@code param} is null here.
   */
  private static void error(Exchange ex, int status, String type, String message) {
    error(ex, status, type, message, null);
  }

  /**
   * The same, naming in {@code param} the request field that is wrong, as vLLM names the
   * parameter of its own validation errors ({@code VLLMValidationError}).
   */
  private static void error(Exchange ex, int status, String type, String message,
      @Nullable String param) {
    send(ex, status, "application/json", errorBody(status, type, message, param));
  }

  private static String errorBody(int status, String type, String message) {
    return errorBody(status, type, message, null);
  }

  private static String errorBody(int status, String type, String message,
      @Nullable String param) {
    ObjectNode root = JSON.createObjectNode();
    ObjectNode e = root.putObject("error");
    e.put("message", message);
    e.put("type", type);
    e.put("param", param);
    e.put("code", status);
    try {
      return JSON.writeValueAsString(root);
    } catch (IOException impossible) {
      throw new java.io.UncheckedIOException(impossible);
    }
  }

  /**
   * A whole answer with its Content-Length (0 for an empty body), and no Content-Type when
   * {@code type} is null.
   */
  private static FullHttpResponse response(int status, @Nullable String type, String body) {
    return response(status, type, body.getBytes(StandardCharsets.UTF_8));
  }

  private static FullHttpResponse response(int status, @Nullable String type, byte[] bytes) {
    FullHttpResponse res = new DefaultFullHttpResponse(HttpVersion.HTTP_1_1,
        HttpResponseStatus.valueOf(status), Unpooled.wrappedBuffer(bytes));
    res.headers().set(HttpHeaderNames.DATE, DateFormatter.format(new Date()));
    if (type != null) {
      res.headers().set(HttpHeaderNames.CONTENT_TYPE, type);
    }
    HttpUtil.setContentLength(res, bytes.length);
    return res;
  }

  /**
   * One request, as read by the I/O thread, and its answer. Written from the request's own
   * thread: Netty hands each write to the I/O thread, so a slow client holds up no one.
   */
  private static final class Exchange {
    final Channel channel;
    final String method;
    final String uri;
    // the request's body until it has been parsed
    byte[] body;
    // the body's bytes reserved in the budget, given back once
    long reserved;
    // the body once parsed (a RequestBody, or why it is malformed)
    private @Nullable Object parsed;
    private final BodyBudget budget;
    // the answer's last write handed to the I/O thread, for a stop to wait for
    volatile @Nullable ChannelFuture lastWrite;
    final boolean malformed;
    final boolean http10;
    // the request's X-Request-Id header (its first line), null without one
    final @Nullable String requestIdHeader;
    boolean keepAlive;

    Exchange(Channel channel, FullHttpRequest req, BodyBudget budget) {
      this.channel = channel;
      this.budget = budget;
      this.method = req.method().name();
      this.uri = req.uri();
      this.body = ByteBufUtil.getBytes(req.content());
      this.malformed = !req.decoderResult().isSuccess();
      this.http10 = req.protocolVersion().equals(HttpVersion.HTTP_1_0);
      this.keepAlive = HttpUtil.isKeepAlive(req);
      this.requestIdHeader = req.headers().get("X-Request-Id");
    }

    /**
     * The body parsed: a {@link RequestBody}, or the message naming why it is not valid JSON.
     * Parsed once, by whichever thread comes first (a pipelined request's is parsed as soon as it
     * is read; its turn finds it done), its bytes given back to the budget then.
     */
    synchronized Object parse(int vocab, int modelVocab) {
      Object p = parsed;
      if (p == null) {
        try {
          p = RequestBody.read(body, vocab, modelVocab);
        } catch (RequestBody.Malformed e) {
          p = String.valueOf(e.getMessage());
        } finally {
          releaseBody();
        }
        parsed = p;
      }
      return p;
    }

    /**
     * The request is answered: neither its body nor what was parsed of it is held any more (the
     * connection keeps its last exchange until the next request).
     */
    synchronized void answered() {
      parsed = null;
      releaseBody();
    }

    /** Drops the body (parsed, or never to be) and gives its bytes back to the budget. */
    void releaseBody() {
      long r;
      synchronized (this) {
        body = EMPTY;
        r = reserved;
        reserved = 0;
      }
      budget.release(r);
    }

    void send(FullHttpResponse res) {
      HttpUtil.setKeepAlive(res, keepAlive);
      ChannelFuture written = channel.writeAndFlush(res);
      lastWrite = written;
      if (!keepAlive) {
        written.addListener(ChannelFutureListener.CLOSE);
      }
    }

    /** The head of a 200 answer whose body follows in chunks (to HTTP/1.0: until the close). */
    void startStream(String type) {
      HttpResponse res = new DefaultHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.OK);
      res.headers().set(HttpHeaderNames.DATE, DateFormatter.format(new Date()));
      res.headers().set(HttpHeaderNames.CONTENT_TYPE, type);
      res.headers().set(HttpHeaderNames.CACHE_CONTROL, HttpHeaderValues.NO_CACHE);
      if (http10) {
        keepAlive = false; // no chunks in HTTP/1.0: the body ends where the connection does
      } else {
        HttpUtil.setTransferEncodingChunked(res, true);
      }
      HttpUtil.setKeepAlive(res, keepAlive);
      lastWrite = channel.writeAndFlush(res);
    }

    void chunk(byte[] bytes) {
      lastWrite = channel.writeAndFlush(new DefaultHttpContent(Unpooled.wrappedBuffer(bytes)));
    }

    void endStream() {
      ChannelFuture written = channel.writeAndFlush(LastHttpContent.EMPTY_LAST_CONTENT);
      lastWrite = written;
      if (!keepAlive) {
        written.addListener(ChannelFutureListener.CLOSE);
      }
    }
  }

  /**
   * Token IDs of a text prompt, with the tokenizer's special tokens added as vLLM's completions
   * endpoint adds them, or a message naming why the tokenizer could not produce them.
   */
  private Object tokenizeText(String text, boolean addSpecialTokens) {
    if (tokenizer == null) {
      return tokenize(text, cluster.profile().ordinaryTokens());
    }
    try {
      return addSpecialTokens ? tokenizer.encodePrompt(text) : tokenizer.encode(text);
    } catch (RuntimeException e) {
      return "the tokenizer given with --tokenizer cannot tokenize this prompt: " + reason(e);
    }
  }

  /** A chat completion's template fields, as {@link #chatTemplateArgs(JsonNode, boolean)}. */
  static Object chatTemplateArgs(JsonNode body) {
    return chatTemplateArgs(body, true);
  }

  /**
   * The chat template's fields of a chat completion or {@code /tokenize} body as vLLM's request
   * models read them ({@code add_generation_prompt} true unless set,
   * {@code continue_final_message}, {@code chat_template_kwargs} an object, and for a chat
   * completion {@code documents} and {@code reasoning_effort} merged into the kwargs), or a
   * message naming the field that is wrong; both booleans set true is refused, as vLLM refuses
   * it.
   *
   * @param chatCompletion false for {@code /tokenize}, whose request model (vLLM's
   *     {@code TokenizeChatRequest}) has no {@code documents} or {@code reasoning_effort}: vLLM
   *     ignores them there, as it ignores any field its request model does not have, so they are
   *     neither checked nor handed to the template
   */
  static Object chatTemplateArgs(JsonNode body, boolean chatCompletion) {
    JsonNode agpNode = body.path("add_generation_prompt");
    // both typed bool (not bool | None) in vLLM's request models: null is refused
    Boolean agp = agpNode.isMissingNode() ? Boolean.TRUE : nonNullBool(agpNode);
    if (agp == null) {
      return "field 'add_generation_prompt' must be a boolean";
    }
    Boolean cfm = nonNullBool(body.path("continue_final_message"));
    if (cfm == null) {
      return "field 'continue_final_message' must be a boolean";
    }
    if (cfm && agp && !agpNode.isMissingNode()) {
      return GENERATION_PROMPT_CONFLICT;
    }
    JsonNode kwargs = body.path("chat_template_kwargs");
    if (!kwargs.isMissingNode() && !kwargs.isNull() && !kwargs.isObject()) {
      return "field 'chat_template_kwargs' must be an object";
    }
    JsonNode own = body.path("chat_template");
    if (!own.isMissingNode() && !own.isNull() && !own.isTextual()) {
      return "field 'chat_template' must be a string";
    }
    // vLLM's build_chat_params merges documents into the template's kwargs, over a key of
    // that name (its request model takes a list of objects of strings), then reasoning_effort,
    // and enable_thinking from it unless the request's kwargs set that key
    boolean userSetsThinking = kwargs.has("enable_thinking");
    JsonNode effort = chatCompletion ? body.path("reasoning_effort")
        : MissingNode.getInstance();
    if (!effort.isMissingNode() && !effort.isNull()
        && !(effort.isTextual() && REASONING_EFFORTS.contains(effort.textValue()))) {
      return "field 'reasoning_effort' must be one of " + String.join(", ", REASONING_EFFORTS);
    }
    JsonNode documents = chatCompletion ? body.path("documents")
        : MissingNode.getInstance();
    if (!documents.isMissingNode() && !documents.isNull()) {
      boolean valid = documents.isArray();
      for (JsonNode d : documents) {
        valid &= d.isObject();
        for (JsonNode v : d) {
          valid &= v.isTextual();
        }
      }
      if (!valid) {
        return "field 'documents' must be an array of objects of strings";
      }
      ObjectNode merged = kwargs.isObject() ? ((ObjectNode) kwargs).deepCopy()
          : JsonNodeFactory.instance.objectNode();
      kwargs = merged.set("documents", documents);
    }
    if (effort.isTextual()) {
      ObjectNode merged = kwargs.isObject() ? ((ObjectNode) kwargs).deepCopy()
          : JsonNodeFactory.instance.objectNode();
      merged.set("reasoning_effort", effort);
      if (!userSetsThinking) {
        merged.put("enable_thinking", !effort.textValue().equals("none"));
      }
      kwargs = merged;
    }
    if (!own.isMissingNode() && !own.isNull()) {
      // vLLM without --trust-request-chat-template, its default (the router does not render
      // such a request either); a check of its serving code, after the fields' types
      return UNTRUSTED_CHAT_TEMPLATE;
    }
    return new ChatTemplateArgs(agp, cfm, kwargs.isObject() ? kwargs.toString() : null);
  }

  /**
   * The values of a chat completion's {@code reasoning_effort} that vLLM's request model takes
   * (its {@code Literal}, in its order; {@code "max"} is DeepSeek V4's); any other, or a value
   * that is not a string, is a 400 before the model is looked up, as pydantic refuses it.
   */
  static final List<String> REASONING_EFFORTS =
      List.of("none", "minimal", "low", "medium", "high", "xhigh", "max");

  /** vLLM's refusal of a request's own chat template without --trust-request-chat-template. */
  static final String UNTRUSTED_CHAT_TEMPLATE = "Chat template is passed with request, but"
      + " --trust-request-chat-template is not set. Refused request with untrusted chat template.";

  /**
   * What vLLM's request model refuses in the fields that shape the prompt, before any model is
   * looked up, as a message naming the field, or null: {@code add_special_tokens} that is not a
   * boolean, and for a chat the chat template's fields of {@link #chatTemplateArgs} (a boolean,
   * an object, a string of the wrong type, both booleans true). A request's own chat template is
   * not among them: vLLM refuses it once the model is found.
   *
   * @param chatCompletion false for {@code /tokenize}, as {@link #chatTemplateArgs(JsonNode,
   *     boolean)} reads it
   */
  static @Nullable String promptFieldsInvalid(JsonNode body, boolean chat,
      boolean chatCompletion) {
    if (nonNullBool(body.path("add_special_tokens")) == null) {
      return "field 'add_special_tokens' must be a boolean";
    }
    if (chat && chatTemplateArgs(body, chatCompletion) instanceof String bad
        && !bad.equals(UNTRUSTED_CHAT_TEMPLATE)) {
      return bad;
    }
    return null;
  }

  /**
   * Token IDs of a chat: through the tokenizer's chat template when there is a tokenizer (a
   * template it cannot render is the request's error, as in vLLM, not the server's), else
   * {@link #standInChat}.
   */
  private Object tokenizeChat(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args, boolean addSpecialTokens) {
    if (tokenizer == null) {
      return standInChat(messages, args, cluster.profile().ordinaryTokens());
    }
    try {
      return tokenizer.encodeChat(messages, toolsJson, args, addSpecialTokens);
    } catch (RuntimeException e) {
      return "the chat template of the tokenizer given with --tokenizer cannot render this chat: "
          + reason(e);
    }
  }

  /**
   * What transformers' {@code apply_chat_template} answers, and vLLM with it, for
   * {@code continue_final_message} while {@code add_generation_prompt} is true: the request model
   * only refuses the pair when both are given true, but the field defaults to true, so a request
   * that continues its last message must turn it off.
   */
  /**
   * vLLM's refusal of a chat whose {@code continue_final_message} and
   * {@code add_generation_prompt} are both given true, by its request models' validator.
   */
  static final String GENERATION_PROMPT_CONFLICT = "Cannot set both `continue_final_message` and"
      + " `add_generation_prompt` to True.";

  static final String CONTINUE_WITH_GENERATION_PROMPT = "continue_final_message and"
      + " add_generation_prompt are not compatible. Use continue_final_message when you want the"
      + " model to continue the final message, and add_generation_prompt when you want to add a"
      + " header that will prompt it to start a new assistant message instead.";

  /**
   * The stand-in's chat template: one {@code role: content} line per message, then, with
   * {@code add_generation_prompt} (vLLM's default), the opening of the assistant's reply,
   * {@code assistant:}, one token, as a model's template ends the prompt with the assistant's
   * header. Without it the prompt ends with the last message, and so it does with
   * {@code continue_final_message}, which continues that message (the stand-in writes no end of
   * message to leave out). So the prompt's tokens, and the blocks they fill, are the ones the
   * answer is generated after: a reply sent back as the next turn's assistant message extends
   * the same prefix.
   *
   * @return the token IDs, or the refusal of {@code continue_final_message} while
   *     {@code add_generation_prompt} is true, in transformers' words as vLLM answers it
   */
  static Object standInChat(List<ChatMessage> messages, ChatTemplateArgs args, int vocab) {
    if (args.continueFinalMessage() && args.addGenerationPrompt()) {
      return CONTINUE_WITH_GENERATION_PROMPT;
    }
    StringBuilder text = new StringBuilder();
    for (ChatMessage m : messages) {
      text.append(m.role()).append(": ").append(m.content()).append('\n');
    }
    if (args.addGenerationPrompt()) {
      text.append(GENERATION_PROMPT);
    }
    return tokenize(text.toString(), vocab);
  }

  /** The stand-in's generation prompt: the assistant's header, one token. */
  static final String GENERATION_PROMPT = "assistant:";

  /**
   * What went wrong, from the tokenizer's own message (which names the tokenizer and its
   * template, not the prompt); an unexpected failure is named by its type only, since its message
   * could quote the request.
   */
  private static String reason(RuntimeException e) {
    if (e instanceof Tokenizer.TokenizationException && e.getMessage() != null) {
      return e.getMessage();
    }
    return e.getClass().getSimpleName();
  }

  /**
   * The stand-in tokenizer: one token per whitespace-separated word, its ID a hash of the word
   * mapped into Qwen3's ordinary vocabulary. Deterministic, so equal leading words give equal
   * leading token IDs and a shared text prefix is a shared cache prefix; it is not the model's
   * tokenizer and its counts are not the model's.
   */
  static int[] tokenize(String text) {
    return tokenize(text, SyntheticTokens.VOCAB);
  }

  /** The stand-in tokenizer, into a vocabulary of {@code vocab} ordinary tokens. */
  static int[] tokenize(String text, int vocab) {
    // two passes, the first counting the words, so that the IDs are all that is allocated: a
    // body may hold tens of millions of words, and a boxed ID apiece ran the heap out of memory
    int n = text.length();
    int count = 0;
    for (int i = 0; i < n; ) {
      while (i < n && Character.isWhitespace(text.charAt(i))) {
        i++;
      }
      if (i < n) {
        count++;
      }
      while (i < n && !Character.isWhitespace(text.charAt(i))) {
        i++;
      }
    }
    int[] ids = new int[count];
    int k = 0;
    for (int i = 0; i < n; ) {
      while (i < n && Character.isWhitespace(text.charAt(i))) {
        i++;
      }
      int start = i;
      long h = 0xcbf29ce484222325L;
      while (i < n && !Character.isWhitespace(text.charAt(i))) {
        h = (h ^ text.charAt(i)) * 0x100000001b3L;
        i++;
      }
      if (i > start) {
        ids[k++] = (int) Math.floorMod(ChainedBlockHash.mix(h), (long) vocab);
      }
    }
    return ids;
  }
}
