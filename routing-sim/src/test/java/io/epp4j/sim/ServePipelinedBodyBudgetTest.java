package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A request pipelined behind a long generation on its connection gives its body's bytes back to
 * the body budget once the body is read and parsed, not when its turn comes: until then the
 * budget held bytes of a body already read, and another connection's upload waited for the
 * earlier generation to end.
 */
@Timeout(120)
class ServePipelinedBodyBudgetTest {
  @Test
  void aPipelinedBodyHoldsNoBudgetWhileTheRequestBeforeItGenerates() throws Exception {
    // bodies of 40 and 30 MiB: together over a budget of one largest body (64 MiB)
    int pipelinedBytes = 40 << 20;
    int otherBytes = 30 << 20;
    assertThat((long) pipelinedBytes + otherBytes).isGreaterThan(BodyBudget.MIN_BYTES);
    try (OneReplica replica = new OneReplica();
        Socket pipelining = new Socket();
        Socket other = new Socket()) {
      // real time: 20,000 tokens take far longer than the test's bounds
      int port = replica.start(base -> new Serve.Options(1, base, base + 1_000, false, 1,
          HardwareProfile.qwen3H100Mps6(), 1, List.of(), null, 0, 1,
          KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES, BodyBudget.MIN_BYTES));
      pipelining.connect(new java.net.InetSocketAddress(InetAddress.getLoopbackAddress(), port));
      OutputStream out = pipelining.getOutputStream();
      out.write(request("{\"prompt\":[1,2,3],\"max_tokens\":20000}"
          .getBytes(StandardCharsets.UTF_8)));
      out.write(request(ServeRequestMemoryTest.paddedBody(pipelinedBytes)));
      out.flush();
      // both requests read: the second waits for the first's answer
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (replica.serve().requestsRead(0) < 2 && System.nanoTime() < deadline) {
        Thread.sleep(10);
      }
      assertThat(replica.serve().requestsRead(0)).as("requests read").isEqualTo(2);

      other.connect(new java.net.InetSocketAddress(InetAddress.getLoopbackAddress(), port));
      byte[] otherRequest = request(ServeRequestMemoryTest.paddedBody(otherBytes));
      Thread writer = new Thread(() -> {
        try {
          other.getOutputStream().write(otherRequest);
          other.getOutputStream().flush();
        } catch (IOException closed) {
          // the socket is closed at the end of the test
        }
      }, "other-client");
      writer.setDaemon(true);
      writer.start();
      other.setSoTimeout(30_000);
      assertThat(new BufferedReader(new InputStreamReader(other.getInputStream(),
          StandardCharsets.US_ASCII)).readLine())
          .as("the other connection's answer").isEqualTo("HTTP/1.1 200 OK");
      assertThat(replica.serve().cluster().idle(0))
          .as("the first request is still generating").isFalse();
      writer.join(TimeUnit.SECONDS.toMillis(10));
    }
  }

  private static byte[] request(byte[] body) {
    byte[] head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        + "\r\nContent-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII);
    byte[] all = Arrays.copyOf(head, head.length + body.length);
    System.arraycopy(body, 0, all, head.length, body.length);
    return all;
  }
}
