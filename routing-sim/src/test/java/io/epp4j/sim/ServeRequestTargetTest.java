package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The request target's path is routed as sent: a path starting with {@code //} (a base URL with
 * a trailing slash joined to {@code /v1/...}) is that path, answered 404 as vLLM's router answers
 * it, not read as a host name followed by the rest ({@code //metrics/health} was served as
 * {@code /health}).
 */
@Timeout(60)
class ServeRequestTargetTest {
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private static String get(int port, String target) throws Exception {
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(20_000);
      OutputStream out = s.getOutputStream();
      out.write(("GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.flush();
      InputStream in = s.getInputStream();
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
  }

  @Test
  void aPathStartingWithTwoSlashesIsAPathNotAHost() throws Exception {
    int port = replica.start();
    assertThat(get(port, "/health")).startsWith("HTTP/1.1 200");
    assertThat(get(port, "/v1/models?x=1")).startsWith("HTTP/1.1 200");
    assertThat(get(port, "/v1/%6dodels")).startsWith("HTTP/1.1 200");
    assertThat(get(port, "//metrics/health")).startsWith("HTTP/1.1 404");
    assertThat(get(port, "//v1/models")).startsWith("HTTP/1.1 404")
        .endsWith("{\"detail\":\"Not Found\"}");
    assertThat(get(port, "http://127.0.0.1/v1/models")).startsWith("HTTP/1.1 200");
  }
}
