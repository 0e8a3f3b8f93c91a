package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * What request bodies cost the emulator's heap: a prompt of token IDs is read into an
 * {@code int[]}, not a {@code JsonNode} per ID, and the bodies held at once over every connection
 * are bounded by {@code --max-held-body-bytes}, a body that does not fit waiting unread.
 */
@Timeout(120)
class ServeRequestMemoryTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  @Test
  void aPromptOfTokenIdsIsReadWithoutANodePerId() throws Exception {
    // IDs of two digits and a comma, 3 bytes each: Jackson shares the nodes of -1..10 only
    int ids = 19_000_000;
    byte[] body = tokenIdBody(ids);
    assertThat(body.length).isLessThan(EmulatedServer.MAX_BODY_BYTES);
    com.sun.management.ThreadMXBean threads =
        (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    try (OneReplica replica = new OneReplica()) {
      int port = replica.start();
      // classes loaded and the request path run once before measuring
      assertThat(answer(port, tokenIdBody(100)).status).isEqualTo(200);
      long before = allocated(threads);
      Answer a = answer(port, body);
      long during = allocated(threads) - before;
      assertThat(a.status).as(a.body).isEqualTo(400);
      assertThat(JSON.readTree(a.body).at("/error/message").asText())
          .contains("maximum context length", String.valueOf(ids));
      // Read into an int[], an ID costs 4 bytes, twice over (filled in chunks, then copied into
      // one array): 8/3 per byte of the body, besides the body's own copy (1 per byte). A node
      // per ID costs at least 16 bytes more (16/3 per byte): the bound lies between the two.
      assertThat((double) during / body.length).as("bytes allocated per body byte")
          .isLessThan(1 + 8.0 / 3 + 1);
    }
  }

  @Test
  void aBodyThatDoesNotFitTheDefaultBudgetWaitsUnreadUntilABodyBeforeItIsParsed()
      throws Exception {
    // bodies of 60 MiB: four fit the default budget (256 MiB), a fifth does not
    int bodyBytes = 60 << 20;
    int fit = (int) (BodyBudget.DEFAULT_BYTES / bodyBytes);
    assertThat(fit).isEqualTo(4);
    byte[] body = paddedBody(bodyBytes);
    byte[] head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        + "\r\nContent-Length: " + bodyBytes + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII);
    List<Socket> sockets = new ArrayList<>();
    try (OneReplica replica = new OneReplica()) {
      int port = replica.start();
      // four bodies begun, a byte each: their bytes are reserved while they are read
      for (int i = 0; i < fit; i++) {
        Socket s = new Socket(InetAddress.getLoopbackAddress(), port);
        sockets.add(s);
        s.getOutputStream().write(head);
        s.getOutputStream().write(body, 0, 1);
        s.getOutputStream().flush();
      }
      Thread.sleep(300);
      Socket last = new Socket(InetAddress.getLoopbackAddress(), port);
      sockets.add(last);
      Thread writer = new Thread(() -> {
        try {
          OutputStream out = last.getOutputStream();
          out.write(head);
          out.write(body);
          out.flush();
        } catch (IOException closed) {
          // the socket is closed at the end of the test
        }
      }, "last-client");
      writer.setDaemon(true);
      writer.start();
      // the fifth request, whole, is neither read nor answered
      last.setSoTimeout(1_500);
      assertThat(readsNothing(last)).as("the request over the budget waits").isTrue();
      assertThat(replica.serve().requestsRead(0)).isZero();

      // one body before it ends: it is read and parsed, its bytes given back, and the waiting
      // request is read and answered
      Socket first = sockets.get(0);
      first.getOutputStream().write(body, 1, body.length - 1);
      first.getOutputStream().flush();
      first.setSoTimeout(30_000);
      assertThat(statusLine(first)).isEqualTo("HTTP/1.1 200 OK");
      last.setSoTimeout(30_000);
      assertThat(statusLine(last)).isEqualTo("HTTP/1.1 200 OK");
      writer.join(TimeUnit.SECONDS.toMillis(10));
      assertThat(replica.serve().requestsRead(0)).isEqualTo(2);
    } finally {
      for (Socket s : sockets) {
        s.close();
      }
    }
  }

  private static boolean readsNothing(Socket s) throws IOException {
    try {
      s.getInputStream().read();
      return false;
    } catch (SocketTimeoutException e) {
      return true;
    }
  }

  private static String statusLine(Socket s) throws IOException {
    return new BufferedReader(new InputStreamReader(s.getInputStream(),
        StandardCharsets.US_ASCII)).readLine();
  }

  /** {@code {"prompt":[11,11,...],"max_tokens":1}} with {@code ids} IDs. */
  private static byte[] tokenIdBody(int ids) {
    byte[] start = "{\"prompt\":[".getBytes(StandardCharsets.US_ASCII);
    byte[] end = "],\"max_tokens\":1}".getBytes(StandardCharsets.US_ASCII);
    byte[] b = new byte[start.length + 3 * ids - 1 + end.length];
    System.arraycopy(start, 0, b, 0, start.length);
    int at = start.length;
    for (int i = 0; i < ids; i++) {
      b[at++] = '1';
      b[at++] = '1';
      if (i < ids - 1) {
        b[at++] = ',';
      }
    }
    System.arraycopy(end, 0, b, at, end.length);
    return b;
  }

  /**
   * A small completion padded with a field the emulator ignores to {@code bytes} bytes
   * ({@code {"prompt":[1,2,3],"max_tokens":1,"pad":"ppp..."}}).
   */
  static byte[] paddedBody(int bytes) {
    String head = "{\"prompt\":[1,2,3],\"max_tokens\":1,\"pad\":\"";
    byte[] b = new byte[bytes];
    Arrays.fill(b, (byte) 'p');
    System.arraycopy(head.getBytes(StandardCharsets.US_ASCII), 0, b, 0, head.length());
    b[bytes - 2] = '"';
    b[bytes - 1] = '}';
    return b;
  }

  private record Answer(int status, String body) {}

  /** One request on a connection of its own, written from a byte array (no client copies). */
  private static Answer answer(int port, byte[] body) throws IOException {
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(60_000);
      OutputStream out = s.getOutputStream();
      out.write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          + "Connection: close\r\nContent-Length: " + body.length + "\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(body);
      out.flush();
      String all = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      int status = Integer.parseInt(all.substring(9, 12));
      return new Answer(status, all.substring(all.indexOf("\r\n\r\n") + 4));
    }
  }

  private static long allocated(com.sun.management.ThreadMXBean threads) {
    long sum = 0;
    for (long a : threads.getThreadAllocatedBytes(threads.getAllThreadIds())) {
      sum += Math.max(a, 0);
    }
    return sum;
  }
}
