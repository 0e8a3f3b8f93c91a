package io.epp4j.envoy;

import static org.assertj.core.api.Assertions.assertThat;

import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingRequest;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse;
import io.grpc.netty.shaded.io.netty.bootstrap.Bootstrap;
import io.grpc.netty.shaded.io.netty.buffer.ByteBuf;
import io.grpc.netty.shaded.io.netty.buffer.Unpooled;
import io.grpc.netty.shaded.io.netty.channel.Channel;
import io.grpc.netty.shaded.io.netty.channel.ChannelHandlerContext;
import io.grpc.netty.shaded.io.netty.channel.ChannelInboundHandlerAdapter;
import io.grpc.netty.shaded.io.netty.channel.ChannelInitializer;
import io.grpc.netty.shaded.io.netty.channel.EventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.nio.NioEventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.socket.nio.NioSocketChannel;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.DefaultHttp2DataFrame;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.DefaultHttp2Headers;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.DefaultHttp2HeadersFrame;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.DefaultHttp2ResetFrame;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.Http2DataFrame;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.Http2Error;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.Http2FrameCodecBuilder;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.Http2HeadersFrame;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.Http2MultiplexHandler;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.Http2ResetFrame;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.Http2StreamChannel;
import io.grpc.netty.shaded.io.netty.handler.codec.http2.Http2StreamChannelBootstrap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Plays Envoy's part of {@code Process} streams at the HTTP/2 frame level, so that a stream can be
 * ended exactly as Envoy's {@code ExternalProcessorStreamImpl::close()} ends it: an empty DATA
 * frame with END_STREAM ({@code closeStream()}) and, right behind it on the wire, RST_STREAM
 * CANCEL ({@code resetStream()}; Envoy's HTTP/2 codec defers that reset until the END_STREAM
 * frame has gone out).
 */
final class RawEnvoy implements AutoCloseable {
  private final EventLoopGroup group = new NioEventLoopGroup(1);
  private final Channel parent;

  RawEnvoy(int port) throws InterruptedException {
    parent = new Bootstrap().group(group).channel(NioSocketChannel.class)
        .handler(new ChannelInitializer<Channel>() {
          @Override
          protected void initChannel(Channel ch) {
            ch.pipeline().addLast(Http2FrameCodecBuilder.forClient().build(),
                new Http2MultiplexHandler(new ChannelInboundHandlerAdapter()));
          }
        })
        .connect("127.0.0.1", port).sync().channel();
  }

  Stream open() throws Exception {
    Stream s = new Stream();
    Http2StreamChannel ch = new Http2StreamChannelBootstrap(parent).handler(s).open()
        .get(5, TimeUnit.SECONDS);
    s.ch = ch;
    DefaultHttp2Headers h = new DefaultHttp2Headers();
    h.method("POST").scheme("http").authority("epp4j")
        .path("/envoy.service.ext_proc.v3.ExternalProcessor/Process");
    h.add("content-type", "application/grpc");
    h.add("te", "trailers");
    ch.writeAndFlush(new DefaultHttp2HeadersFrame(h, false)).get(5, TimeUnit.SECONDS);
    return s;
  }

  @Override
  public void close() throws Exception {
    parent.close().sync();
    group.shutdownGracefully(0, 1, TimeUnit.SECONDS).sync();
  }

  static final class Stream extends ChannelInboundHandlerAdapter {
    Http2StreamChannel ch;
    private final LinkedBlockingQueue<ProcessingResponse> received = new LinkedBlockingQueue<>();
    private ByteBuf pending = Unpooled.buffer();
    /** The grpc-status of the trailers, or "reset". */
    final CompletableFuture<String> closed = new CompletableFuture<>();

    void send(ProcessingRequest r) throws Exception {
      byte[] m = r.toByteArray();
      ByteBuf b = Unpooled.buffer(5 + m.length).writeByte(0).writeInt(m.length).writeBytes(m);
      ch.writeAndFlush(new DefaultHttp2DataFrame(b, false)).get(5, TimeUnit.SECONDS);
    }

    /** Envoy's close(): END_STREAM, then RST_STREAM CANCEL right behind it. */
    void closeAndReset() throws Exception {
      ch.eventLoop().submit(() -> {
        ch.writeAndFlush(new DefaultHttp2DataFrame(true));
        ch.writeAndFlush(new DefaultHttp2ResetFrame(Http2Error.CANCEL));
      }).get(5, TimeUnit.SECONDS);
    }

    ProcessingResponse next() throws InterruptedException {
      ProcessingResponse r = received.poll(5, TimeUnit.SECONDS);
      assertThat(r).as("an answer from the ext_proc server within 5 s").isNotNull();
      return r;
    }

    @Override
    public void channelRead(ChannelHandlerContext ctx, Object msg) throws Exception {
      if (msg instanceof Http2DataFrame d) {
        pending.writeBytes(d.content());
        d.release();
        while (pending.readableBytes() >= 5) {
          int len = pending.getInt(pending.readerIndex() + 1);
          if (pending.readableBytes() < 5 + len) {
            break;
          }
          pending.skipBytes(5);
          byte[] m = new byte[len];
          pending.readBytes(m);
          received.add(ProcessingResponse.parseFrom(m));
        }
        pending.discardReadBytes();
      } else if (msg instanceof Http2HeadersFrame h) {
        CharSequence status = h.headers().get("grpc-status");
        if (h.isEndStream()) {
          closed.complete(status == null ? "?" : status.toString());
        }
      } else if (msg instanceof Http2ResetFrame) {
        closed.complete("reset");
      }
    }
  }
}
