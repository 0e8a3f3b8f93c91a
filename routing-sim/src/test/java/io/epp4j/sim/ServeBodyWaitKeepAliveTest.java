package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A request whose body waits for the body budget (its connection unread by the server's choice)
 * is not closed by the keep-alive timeout meanwhile: the README promises a slower upload, never
 * an error vLLM would not send, and the connection is idle only because the server paused it.
 */
@Timeout(60)
class ServeBodyWaitKeepAliveTest {
  @Test
  void aRequestWaitingForTheBodyBudgetOutlastsTheKeepAliveTimeout() throws Exception {
    double keepAlive = 0.3;
    try (OneReplica replica = new OneReplica()) {
      // a budget of one largest body, which the first client's upload holds while it trickles in
      int port = replica.start(base -> new Serve.Options(1, base, base + 1_000, false, 20,
          HardwareProfile.qwen3H100Mps6(), 1, List.of(), null, keepAlive, 1,
          KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES, BodyBudget.MIN_BYTES));
      try (Socket slow = new Socket(InetAddress.getLoopbackAddress(), port);
          Socket waiting = new Socket(InetAddress.getLoopbackAddress(), port)) {
        OutputStream slowOut = slow.getOutputStream();
        slowOut.write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
            + "application/json\r\nContent-Length: " + BodyBudget.MIN_BYTES + "\r\n\r\n ")
            .getBytes(StandardCharsets.US_ASCII));
        slowOut.flush();
        Thread.sleep(100);
        byte[] body = "{\"prompt\":[1,2,3],\"max_tokens\":1}".getBytes(StandardCharsets.UTF_8);
        OutputStream out = waiting.getOutputStream();
        out.write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            + "\r\nContent-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
        out.write(body);
        out.flush();
        // the first upload goes on, a byte at a time, for several keep-alive timeouts
        for (int i = 0; i < 15; i++) {
          Thread.sleep(100);
          slowOut.write(' ');
          slowOut.flush();
        }
        // then its client gives up: its reservation goes back and the waiting body is read
        slow.close();
        waiting.setSoTimeout(20_000);
        BufferedReader in = new BufferedReader(new InputStreamReader(waiting.getInputStream(),
            StandardCharsets.US_ASCII));
        assertThat(in.readLine()).as("the waiting request's answer").isEqualTo("HTTP/1.1 200 OK");
      }
    }
  }
}
