package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A stop (what SIGTERM runs: {@link Serve#close()}) while answers stream: every stream in flight
 * gets the error event and {@code data: [DONE]} before its connection closes, whether its client
 * reads along or has fallen behind; the close never cuts them off first.
 */
@Timeout(120)
class ServeShutdownTest {
  private static final String ERROR_EVENT = "\"type\":\"ServiceUnavailableError\"";

  @Test
  void everyStreamInFlightGetsTheErrorEventAndDoneBeforeTheClose() throws Exception {
    int streams = 16;
    List<Socket> sockets = new ArrayList<>();
    try (OneReplica replica = new OneReplica()) {
      // real time: 2,000 tokens take far longer than the test
      int port = replica.start(List.of(), 1);
      for (int i = 0; i < streams; i++) {
        Socket s = new Socket(InetAddress.getLoopbackAddress(), port);
        sockets.add(s);
        s.setSoTimeout(30_000);
        send(s, "{\"prompt\":[" + (i + 1) + ",2,3],\"max_tokens\":2000,\"stream\":true}");
      }
      // each stream under way: its first token has come
      List<StringBuilder> read = new ArrayList<>();
      for (Socket s : sockets) {
        StringBuilder b = new StringBuilder();
        readUntil(s.getInputStream(), b, "\"text\"");
        read.add(b);
      }
      replica.serve().close();
      for (int i = 0; i < streams; i++) {
        StringBuilder b = read.get(i);
        readToEnd(sockets.get(i).getInputStream(), b);
        String answer = b.toString();
        assertThat(answer).as("stream %d", i).contains(ERROR_EVENT);
        assertThat(answer.indexOf("data: [DONE]")).as("stream %d", i)
            .isGreaterThan(answer.indexOf(ERROR_EVENT));
      }
    } finally {
      for (Socket s : sockets) {
        s.close();
      }
    }
  }

  @Test
  void aStreamWhoseClientFellBehindGetsTheErrorEventAfterWhatWasQueuedForIt() throws Exception {
    try (OneReplica replica = new OneReplica();
        Socket s = new Socket()) {
      // a small receive window: the answer piles up in the server's buffers while it is not read
      s.setReceiveBufferSize(4096);
      int port = replica.start(List.of(), 20);
      s.connect(new java.net.InetSocketAddress(InetAddress.getLoopbackAddress(), port));
      s.setSoTimeout(30_000);
      // every chunk made fat (running usage, the token's ID) and many of them
      send(s, "{\"prompt\":[1,2,3],\"max_tokens\":32000,\"stream\":true,\"return_token_ids\":true,"
          + "\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true}}");
      StringBuilder b = new StringBuilder();
      readUntil(s.getInputStream(), b, "\"text\"");
      // not read for a while: megabytes of chunks wait in the server's buffers
      Thread.sleep(3_000);
      CompletableFuture<Void> closed = CompletableFuture.runAsync(replica.serve()::close);
      readToEnd(s.getInputStream(), b);
      closed.get(30, TimeUnit.SECONDS);
      String answer = b.toString();
      assertThat(answer).as("the end of the answer").contains(ERROR_EVENT);
      assertThat(answer.indexOf("data: [DONE]")).isGreaterThan(answer.indexOf(ERROR_EVENT));
    }
  }

  private static void send(Socket s, String body) throws IOException {
    byte[] b = body.getBytes(StandardCharsets.UTF_8);
    OutputStream out = s.getOutputStream();
    out.write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + "Content-Length: " + b.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
    out.write(b);
    out.flush();
  }

  private static void readUntil(InputStream in, StringBuilder b, String marker)
      throws IOException {
    byte[] buf = new byte[8192];
    while (b.indexOf(marker) < 0) {
      int n = in.read(buf);
      assertThat(n).as("bytes before %s", marker).isPositive();
      b.append(new String(buf, 0, n, StandardCharsets.UTF_8));
    }
  }

  private static void readToEnd(InputStream in, StringBuilder b) throws IOException {
    byte[] buf = new byte[1 << 16];
    java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
    try {
      for (int n; (n = in.read(buf)) > 0; ) {
        all.write(buf, 0, n);
      }
    } catch (java.net.SocketException reset) {
      // what was read before the reset is the answer
    }
    b.append(all.toString(StandardCharsets.UTF_8));
  }
}
