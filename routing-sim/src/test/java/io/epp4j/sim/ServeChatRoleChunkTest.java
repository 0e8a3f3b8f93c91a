package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A streamed chat's first event, the role chunk, goes out as vLLM's does: with the engine's first
 * output, not when the request is queued. Sent at once, a client that times its first event saw
 * no prefill at all (and vLLM's TTFT as seen by a gateway measuring the first byte was zero).
 */
@Timeout(60)
class ServeChatRoleChunkTest {
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void theRoleChunkComesWithTheFirstToken() throws Exception {
    // slow enough that the prefill of a few thousand tokens takes a visible share of a second
    int port = replica.start(List.of(), 0.05);
    String body = "{\"messages\":[{\"role\":\"user\",\"content\":\"" + "word ".repeat(4_000)
        + "\"}],\"max_tokens\":2,\"stream\":true}";
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      OutputStream out = s.getOutputStream();
      out.write(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
          + "\r\nContent-Length: " + bytes.length + "\r\nConnection: close\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(bytes);
      out.flush();
      BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(),
          StandardCharsets.UTF_8));
      String line;
      while ((line = in.readLine()) != null && !line.contains("data: ")) {
        // the head and the first chunk's size
      }
      assertThat(line).as("the first event").isNotNull().contains("\"role\":\"assistant\"");
      // the event was written after the engine produced the first token, not before its prefill
      assertThat(replica.serve().cluster().stats(0).generationTokens())
          .as("tokens generated when the role chunk arrived").isPositive();
    }
  }

  @Test
  void aChatStoppedBeforeItsFirstTokenGetsTheErrorEventAlone() throws Exception {
    // so slow that the first step does not end before the stop
    int port = replica.start(List.of(), 0.001);
    String body = "{\"messages\":[{\"role\":\"user\",\"content\":\"" + "word ".repeat(4_000)
        + "\"}],\"max_tokens\":2,\"stream\":true}";
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      OutputStream out = s.getOutputStream();
      out.write(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
          + "\r\nContent-Length: " + bytes.length + "\r\nConnection: close\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(bytes);
      out.flush();
      BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(),
          StandardCharsets.UTF_8));
      String line;
      while ((line = in.readLine()) != null && !line.isEmpty()) {
        // the head: the answer has begun
      }
      long deadline = System.nanoTime() + 10_000_000_000L;
      while (replica.serve().cluster().stats(0).running() == 0 && System.nanoTime() < deadline) {
        Thread.sleep(5);
      }
      replica.close();
      StringBuilder events = new StringBuilder();
      while ((line = in.readLine()) != null) {
        if (line.startsWith("data: ")) {
          events.append(line).append('\n');
        }
      }
      assertThat(events.toString()).doesNotContain("\"role\"").contains("\"error\"")
          .endsWith("data: [DONE]\n");
    }
  }
}
