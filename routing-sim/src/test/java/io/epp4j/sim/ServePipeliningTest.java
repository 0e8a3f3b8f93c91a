package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** HTTP/1.1 pipelining on one connection: answered in order, and held back when too deep. */
class ServePipeliningTest {

  private static String completion(int maxTokens) {
    String body = "{\"model\":\"qwen3-1.7b\",\"prompt\":\"hello there\",\"max_tokens\":"
        + maxTokens + "}";
    return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + "Content-Length: " + body.getBytes(StandardCharsets.UTF_8).length + "\r\n\r\n" + body;
  }

  /** A GET /health padded to about 1 KiB, so that one read of the socket holds few of them. */
  private static final String HEALTH = "GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: "
      + "p".repeat(1_000) + "\r\n\r\n";

  @Test
  void aClientThatPipelinesThousandsOfRequestsIsNotReadAheadOfItsAnswers() throws Exception {
    try (OneReplica replica = new OneReplica()) {
      int port = replica.start();
      int pipelined = 3_000;
      AtomicInteger written = new AtomicInteger();
      try (Socket socket = new Socket(InetAddress.getLoopbackAddress(), port)) {
        OutputStream out = socket.getOutputStream();
        // the first request keeps the connection busy for a while (a long answer at speed 20)
        out.write(completion(30_000).getBytes(StandardCharsets.US_ASCII));
        out.flush();
        Thread writer = new Thread(() -> {
          try {
            for (int i = 0; i < pipelined; i++) {
              out.write(HEALTH.getBytes(StandardCharsets.US_ASCII));
              written.incrementAndGet();
            }
            out.flush();
          } catch (IOException closed) {
            // the socket is closed at the end of the test while this waits to write
          }
        }, "pipelining-client");
        writer.setDaemon(true);
        writer.start();
        // give the server every chance to read what the client sent
        writer.join(TimeUnit.SECONDS.toMillis(3));
        Thread.sleep(500);
        long read = replica.serve().requestsRead(0);
        // MAX_PIPELINED, then at most one read's worth (64 KiB) of the 1 KiB requests
        assertThat(read).as("requests read of %d pipelined", pipelined + 1)
            .isLessThanOrEqualTo(EmulatedServer.MAX_PIPELINED + 70);
        assertThat(read).isGreaterThanOrEqualTo(EmulatedServer.MAX_PIPELINED);
      }
    }
  }

  @Test
  void pipelinedRequestsPastTheBoundAreAllAnsweredInOrder() throws Exception {
    try (OneReplica replica = new OneReplica()) {
      int port = replica.start();
      int pipelined = 200;
      try (Socket socket = new Socket(InetAddress.getLoopbackAddress(), port)) {
        socket.setSoTimeout(30_000);
        StringBuilder all = new StringBuilder(completion(100));
        for (int i = 0; i < pipelined; i++) {
          all.append("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        }
        all.append(completion(3));
        OutputStream out = socket.getOutputStream();
        out.write(all.toString().getBytes(StandardCharsets.US_ASCII));
        out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(socket.getInputStream(),
            StandardCharsets.US_ASCII));
        StringBuilder order = new StringBuilder();
        for (int i = 0; i < pipelined + 2; i++) {
          String status = in.readLine();
          assertThat(status).as("answer %d", i).isEqualTo("HTTP/1.1 200 OK");
          int length = -1;
          for (String h = in.readLine(); !h.isEmpty(); h = in.readLine()) {
            if (h.toLowerCase(java.util.Locale.ROOT).startsWith("content-length:")) {
              length = Integer.parseInt(h.substring(15).trim());
            }
          }
          assertThat(length).as("answer %d's length", i).isNotNegative();
          char[] body = new char[length];
          int n = 0;
          while (n < length) {
            int r = in.read(body, n, length - n);
            assertThat(r).isPositive();
            n += r;
          }
          order.append(new String(body).contains("\"usage\"") ? 'C' : 'h');
        }
        assertThat(order.toString()).isEqualTo("C" + "h".repeat(pipelined) + "C");
      }
    }
  }

  @Test
  void largePipelinedBodiesAreNotReadAheadBeyondOneBodysLimitOfBytes() throws Exception {
    // six bodies of 40 MiB behind a long answer: under MAX_PIPELINED by count, but reading them
    // all would hold 240 MiB for one connection (a GiB at 16 bodies of the largest size)
    int bodyBytes = 40 << 20;
    String head = "{\"prompt\":[1,2,3],\"max_tokens\":1,\"pad\":\"";
    byte[] body = new byte[bodyBytes];
    java.util.Arrays.fill(body, (byte) 'p');
    System.arraycopy(head.getBytes(StandardCharsets.US_ASCII), 0, body, 0, head.length());
    body[bodyBytes - 2] = '"';
    body[bodyBytes - 1] = '}';
    byte[] request = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
        + "Content-Type: application/json\r\nContent-Length: " + bodyBytes + "\r\n\r\n")
        .getBytes(StandardCharsets.US_ASCII);
    try (OneReplica replica = new OneReplica()) {
      // real time: the first answer's 30,000 tokens take far longer than the test
      int port = replica.start(java.util.List.of(), 1);
      try (Socket socket = new Socket(InetAddress.getLoopbackAddress(), port)) {
        OutputStream out = socket.getOutputStream();
        out.write(completion(30_000).getBytes(StandardCharsets.US_ASCII));
        out.flush();
        Thread writer = new Thread(() -> {
          try {
            for (int i = 0; i < 6; i++) {
              out.write(request);
              out.write(body);
            }
            out.flush();
          } catch (IOException closed) {
            // the socket is closed at the end of the test while this waits to write
          }
        }, "pipelining-client");
        writer.setDaemon(true);
        writer.start();
        writer.join(TimeUnit.SECONDS.toMillis(5));
        Thread.sleep(500);
        // the long answer, then bodies until their bytes reach MAX_BODY_BYTES (two of 40 MiB);
        // the next is not read to its end while the first is still being answered (Netty's
        // aggregator asks for the rest of a request it has begun: that read is held back too)
        assertThat(replica.serve().requestsRead(0)).as("requests read of 7 pipelined")
            .isLessThanOrEqualTo(3);
      }
    }
  }
}
