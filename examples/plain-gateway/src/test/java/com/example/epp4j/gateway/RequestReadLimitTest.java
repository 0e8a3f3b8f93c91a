package com.example.epp4j.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A client that stops sending its request: the gateway must not wait for it forever. The JDK
 * server reads its limit once per JVM, so the gateway runs in a process of its own.
 */
class RequestReadLimitTest {

  @Test
  void theGatewaySetsALimitOnReceivingARequest() throws Exception {
    // without one the JDK server waits for a request's headers and body forever
    try (PlainGateway g = new PlainGateway(0, List.of(io.epp4j.api.Endpoint.of("127.0.0.1", 1)))) {
      assertThat(System.getProperty("sun.net.httpserver.maxReqTime")).as("seconds")
          .isEqualTo("60");
      assertThat(g.port()).isPositive();
    }
  }

  @Test
  @Timeout(60)
  void aClientThatStopsSendingIsCutOffAndTheGatewayKeepsServing() throws Exception {
    int replica;
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      replica = s.getLocalPort(); // nothing listens there: /v1/models gets 502
    }
    try (GatewayProcess g = GatewayProcess.start(List.of("-Dsun.net.httpserver.maxReqTime=1"),
        "--port", "0", "--endpoints", "127.0.0.1:" + replica)) {
      int port = g.port;

      // a body shorter than its Content-Length: the request cannot be routed
      assertThat(closedAfter(port, "POST /v1/completions HTTP/1.1\r\nHost: gw\r\n"
          + "Content-Length: 100\r\n\r\n{\"model\":")).isEmpty();
      // headers that never end
      assertThat(closedAfter(port, "POST /v1/completions HTTP/1.1\r\nHost: gw\r\n")).isEmpty();
      // /v1/models reads no body, but the server drains what was declared before it takes the
      // connection's next request, and the connection is closed when that stalls. Whether the
      // answer goes out first depends on the JDK: Java 17 sends it, Java 25 closes without it
      assertThat(new String(closedAfter(port, "GET /v1/models HTTP/1.1\r\nHost: gw\r\n"
          + "Content-Length: 100\r\n\r\n{"), StandardCharsets.US_ASCII))
          .satisfiesAnyOf(a -> assertThat(a).isEmpty(), a -> assertThat(a).startsWith("HTTP/1.1 502"));

      try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
        s.setSoTimeout(10_000);
        s.getOutputStream().write("GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"
            .getBytes(StandardCharsets.US_ASCII));
        String status = new BufferedReader(new InputStreamReader(s.getInputStream(),
            StandardCharsets.US_ASCII)).readLine();
        assertThat(status).as("the gateway still answers").startsWith("HTTP/1.1 502");
      }
    }
  }

  /**
   * The JDK server reads its settings once, when its first server is created: in an application
   * that had started a JDK server of its own before the gateway's class loaded, the gateway's
   * limit on receiving a request was silently not in effect, and a client that stopped sending
   * held a gateway thread for good. The gateway now says so when it starts.
   */
  @Test
  @Timeout(60)
  void aGatewayStartedAfterAnotherJdkServerWarnsThatItsServerSettingsAreNotInEffect()
      throws Exception {
    String warned = runEmbedding(true);
    assertThat(warned).contains("sun.net.httpserver.maxReqTime")
        .contains("sun.net.httpserver.nodelay").contains("embedded: started");
    assertThat(runEmbedding(false)).as("the gateway's class loaded first: its settings apply")
        .doesNotContain("sun.net.httpserver.maxReqTime").contains("embedded: started");
  }

  /** Runs {@link Embedding} in a JVM of its own; returns what it printed, stderr included. */
  static String runEmbedding(boolean serverFirst) throws Exception {
    List<String> cmd = List.of(
        java.nio.file.Path.of(System.getProperty("java.home"), "bin", "java").toString(),
        "-Xmx128m", "-cp", System.getProperty("java.class.path"), Embedding.class.getName(),
        Boolean.toString(serverFirst));
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    byte[] out = p.getInputStream().readAllBytes();
    assertThat(p.waitFor(30, java.util.concurrent.TimeUnit.SECONDS)).isTrue();
    return new String(out, StandardCharsets.UTF_8);
  }

  /** An application that embeds the gateway, maybe after starting a JDK server of its own. */
  static final class Embedding {
    public static void main(String[] args) throws Exception {
      if (Boolean.parseBoolean(args[0])) {
        com.sun.net.httpserver.HttpServer own = com.sun.net.httpserver.HttpServer.create(
            new java.net.InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        own.stop(0);
      }
      try (PlainGateway g = new PlainGateway(0, List.of(io.epp4j.api.Endpoint.of("127.0.0.1", 1)))) {
        System.out.println("embedded: started on " + g.port());
      }
    }
  }

  /**
   * Sends {@code partial}, expects the gateway to close the connection within 10 s and returns
   * what it answered before.
   */
  static byte[] closedAfter(int port, String partial) throws IOException {
    String first = partial.lines().findFirst().orElse("");
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(10_000);
      OutputStream o = s.getOutputStream();
      o.write(partial.getBytes(StandardCharsets.US_ASCII));
      o.flush();
      InputStream in = s.getInputStream();
      java.io.ByteArrayOutputStream answer = new java.io.ByteArrayOutputStream();
      byte[] buf = new byte[4096];
      try {
        for (int n; (n = in.read(buf)) >= 0; ) {
          answer.write(buf, 0, n);
        }
      } catch (SocketTimeoutException stillOpen) {
        throw new AssertionError("after 10 s the gateway still waits for the rest of: " + first,
            stillOpen);
      } catch (IOException reset) {
        // closed with a reset: cut off as well
      }
      return answer.toByteArray();
    }
  }
}
