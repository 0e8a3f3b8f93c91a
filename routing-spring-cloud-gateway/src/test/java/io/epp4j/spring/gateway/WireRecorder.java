package io.epp4j.spring.gateway;

import io.netty.buffer.ByteBuf;
import io.netty.channel.Channel;
import io.netty.channel.ChannelDuplexHandler;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelPromise;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.reactivestreams.Publisher;
import org.springframework.boot.reactor.netty.NettyServerCustomizer;
import org.springframework.cloud.gateway.config.HttpClientCustomizer;
import org.springframework.cloud.gateway.filter.GatewayFilterChain;
import org.springframework.cloud.gateway.filter.GlobalFilter;
import org.springframework.cloud.gateway.support.ServerWebExchangeUtils;
import org.springframework.core.Ordered;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.http.server.reactive.ServerHttpRequestDecorator;
import org.springframework.http.server.reactive.ServerHttpResponse;
import org.springframework.http.server.reactive.ServerHttpResponseDecorator;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.Scannable;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;
import reactor.core.publisher.Operators;
import reactor.netty.Connection;

/**
 * What the gateway did with the answer of each request tagged with an {@code x-tag} header, at
 * three places: the bytes read from the replica's connection, the chunks handed to the response
 * write (and how that write ended), and the bytes written to the client's connection. A test
 * whose answer stalls reports it, which tells where the bytes stopped.
 *
 * <p>Register the three beans ({@link #clientCustomizer}, {@link #serverCustomizer},
 * {@link #filter}) in the test's application.
 */
final class WireRecorder {
  private static final int TAIL = 320;
  private final Map<String, StringBuffer> steps = new ConcurrentHashMap<>();
  private final Map<Channel, StringBuffer> read = new ConcurrentHashMap<>();
  private final Map<Channel, StringBuffer> written = new ConcurrentHashMap<>();
  private final Map<String, Channel[]> channels = new ConcurrentHashMap<>();
  /** The subscriber the response write put on the latest chunk of each tagged stream. */
  private final Map<String, Object> writers = new ConcurrentHashMap<>();
  /** The replica connection's inbound (Reactor Netty's receiver) of each tagged stream. */
  private final Map<String, Object> inbounds = new ConcurrentHashMap<>();

  /** Records the bytes each connection to a replica reads. */
  HttpClientCustomizer clientCustomizer() {
    return client -> client.doOnConnected(c -> {
      if (c.channel().pipeline().get("wire-recorder") == null) {
        c.channel().pipeline().addFirst("wire-recorder", new Tail(true));
      }
    });
  }

  /** Records the bytes each client connection writes. */
  NettyServerCustomizer serverCustomizer() {
    return server -> server.doOnConnection(c -> {
      if (c.channel().pipeline().get("wire-recorder") == null) {
        c.channel().pipeline().addFirst("wire-recorder", new Tail(false));
      }
    });
  }

  /** Records the chunks handed to the response write of each tagged request. */
  GlobalFilter filter() {
    return new Filter();
  }

  /**
   * Everything recorded for a tag, and the last bytes its replica connection read and its client
   * connection wrote, as they are now.
   */
  String report(String tag) {
    StringBuffer s = steps.get(tag);
    Channel[] ch = channels.get(tag);
    return "gateway: " + (s == null ? "nothing recorded" : s)
        + (ch == null ? "" : " now: replica read [" + tail(read, ch[0]) + "], client written ["
            + tail(written, ch[1]) + "], replica inbound " + inbound(tag))
        + (writers.containsKey(tag) ? ", writer " + writer(tag) : "");
  }

  /**
   * The state of each subscriber from the latest chunk down the response write (Reactor's
   * {@link Scannable} attributes): whether it ended or was cancelled, what it holds and what was
   * asked of it.
   */
  private String writer(String tag) {
    Object sub = writers.get(tag);
    return Scannable.from(sub).actuals().map(s -> s.name() + "[terminated="
        + s.scan(Scannable.Attr.TERMINATED) + ", cancelled=" + s.scan(Scannable.Attr.CANCELLED)
        + ", buffered=" + s.scan(Scannable.Attr.BUFFERED) + ", requested="
        + s.scan(Scannable.Attr.REQUESTED_FROM_DOWNSTREAM) + "]")
        .collect(java.util.stream.Collectors.joining(" > ", "[", "]"));
  }

  /** Drops what was recorded for a tag whose answer came whole (long stress runs). */
  void forget(String tag) {
    steps.remove(tag);
    writers.remove(tag);
    channels.remove(tag);
    inbounds.remove(tag);
  }

  /**
   * Reactor Netty's state of the replica connection's inbound for a tag: whether it ended, was
   * cancelled (discarded: its queued content dropped), and how much content it still queues.
   */
  private String inbound(String tag) {
    Object in = inbounds.get(tag);
    return in == null ? "?" : in.toString();
  }

  private void step(String tag, String what) {
    steps.computeIfAbsent(tag, t -> new StringBuffer()).append(what).append("; ");
  }

  private static String text(ByteBuf buf) {
    String s = buf.toString(buf.readerIndex(), Math.min(buf.readableBytes(), 4096),
        StandardCharsets.UTF_8);
    return s.replace("\r", "\\r").replace("\n", "\\n");
  }

  private static void append(Map<Channel, StringBuffer> map, Channel ch, String what) {
    StringBuffer b = map.computeIfAbsent(ch, k -> new StringBuffer());
    synchronized (b) {
      b.append(what);
      if (b.length() > TAIL) {
        b.delete(0, b.length() - TAIL);
      }
    }
  }

  private final class Tail extends ChannelDuplexHandler {
    private final boolean reads;

    Tail(boolean reads) {
      this.reads = reads;
    }

    @Override
    public void channelRead(ChannelHandlerContext ctx, Object msg) throws Exception {
      if (reads && msg instanceof ByteBuf b) {
        append(read, ctx.channel(), text(b));
      }
      super.channelRead(ctx, msg);
    }

    @Override
    public void channelInactive(ChannelHandlerContext ctx) throws Exception {
      append(reads ? read : written, ctx.channel(), "<closed>");
      super.channelInactive(ctx);
    }

    @Override
    public void write(ChannelHandlerContext ctx, Object msg, ChannelPromise promise)
        throws Exception {
      if (!reads && msg instanceof ByteBuf b) {
        append(written, ctx.channel(), text(b)); // handed to the socket (some promises are void)
      }
      super.write(ctx, msg, promise);
    }

    @Override
    public void flush(ChannelHandlerContext ctx) throws Exception {
      if (!reads) {
        append(written, ctx.channel(), "<flush>");
      }
      super.flush(ctx);
    }
  }

  private final class Filter implements GlobalFilter, Ordered {
    @Override
    public int getOrder() {
      return Epp4jResponseTapFilter.ORDER - 1; // outside the tap: its writes pass through here
    }

    @Override
    public Mono<Void> filter(ServerWebExchange exchange, GatewayFilterChain chain) {
      String tag = exchange.getRequest().getHeaders().getFirst("x-tag");
      if (tag == null) {
        return chain.filter(exchange);
      }
      ServerHttpResponse recorded = new ServerHttpResponseDecorator(exchange.getResponse()) {
        @Override
        public Mono<Void> writeWith(Publisher<? extends DataBuffer> body) {
          return super.writeWith(Flux.from(body).doOnNext(b -> step(tag, "write " + b)))
              .doOnEach(s -> step(tag, "writeWith " + s.getType()));
        }

        @Override
        public Mono<Void> writeAndFlushWith(
            Publisher<? extends Publisher<? extends DataBuffer>> body) {
          Object conn = exchange.getAttribute(ServerWebExchangeUtils.CLIENT_RESPONSE_CONN_ATTR);
          Channel up = conn instanceof Connection c ? c.channel() : null;
          Object down = ServerHttpRequestDecorator.getNativeRequest(exchange.getRequest());
          Channel client = down instanceof Connection c ? c.channel() : null;
          channels.put(tag, new Channel[] {up, client});
          if (conn instanceof Connection c) {
            inbounds.put(tag, c.inbound().receiveObject());
          }
          step(tag, "writeAndFlushWith");
          // the writer may ask for chunks ahead of writing them: "handed" counts what the
          // routing filter's body gave, "chunk of" what the writer took up
          java.util.concurrent.atomic.AtomicInteger handed =
              new java.util.concurrent.atomic.AtomicInteger();
          return super.writeAndFlushWith(Flux.from(body)
                  .doOnNext(chunk -> step(tag, "handed " + handed.incrementAndGet()))
                  .map(chunk -> Flux.from(Operators.<DataBuffer, DataBuffer>lift(
                      // the writer's subscribers of the latest chunk, down to Reactor Netty's
                      // MonoSendMany: their state tells which one holds an end that never came
                      (scannable, sub) -> {
                        writers.put(tag, sub);
                        return sub;
                      }).apply(Flux.<DataBuffer>from(chunk).doOnNext(b -> step(tag, "chunk of "
                          + b.readableByteCount() + " bytes"))
                      .doOnEach(s -> {
                        if (!s.isOnNext()) {
                          step(tag, "chunk " + s.getType());
                        }
                      }))))
                  .doOnEach(s -> {
                    if (!s.isOnNext()) {
                      // what the replica's connection had read when the body ended: a stream
                      // whose last chunk never reached the write says here whether it was read
                      step(tag, "chunks " + s.getType() + " (replica read by then ["
                          + tail(read, up) + "], inbound " + inbound(tag) + ")");
                    }
                  })
                  .doOnCancel(() -> step(tag, "chunks cancelled")))
              .doOnEach(s -> step(tag, "write " + s.getType()))
              .doOnCancel(() -> step(tag, "write cancelled"));
        }
      };
      return chain.filter(exchange.mutate().response(recorded).build())
          .doOnEach(s -> step(tag, "chain " + s.getType()))
          .doOnCancel(() -> step(tag, "chain cancelled"));
    }
  }

  private static String tail(Map<Channel, StringBuffer> map, Channel ch) {
    if (ch == null) {
      return "?";
    }
    StringBuffer b = map.get(ch);
    return (b == null ? "nothing" : b.toString()) + (ch.isActive() ? "" : " (inactive)")
        + (ch.config().isAutoRead() ? "" : " (autoRead off)");
  }
}
