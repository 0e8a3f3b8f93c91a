package com.example.epp4j.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A gateway asked to stop (SIGTERM, as in a rolling update) while it relays a stream. */
class GracefulStopTest {

  @Test
  @Timeout(60)
  void aStopLetsTheStreamBeingRelayedEndWholeThenExits() throws Exception {
    // 20 tokens 100 ms apart: the stream is still going when the stop comes
    try (StandInVllm replica = StandInVllm.start(
            new InetSocketAddress(InetAddress.getLoopbackAddress(), 0),
            StandInVllm.Options.defaults().withModel("qwen3")
                .withLatency(Duration.ZERO, Duration.ofMillis(100)));
        GatewayProcess g = GatewayProcess.start(List.of(),
            "--port", "0", "--endpoints", "127.0.0.1:" + replica.port())) {
      HttpClient client = HttpClient.newHttpClient();
      HttpResponse<InputStream> r = client.send(HttpRequest.newBuilder(
              URI.create("http://127.0.0.1:" + g.port + "/v1/completions"))
          .timeout(Duration.ofSeconds(20))
          .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"qwen3\",\"prompt\":\"hi\","
              + "\"max_tokens\":20,\"stream\":true}")).build(),
          HttpResponse.BodyHandlers.ofInputStream());
      assertThat(r.statusCode()).isEqualTo(200);
      try (InputStream in = r.body()) {
        byte[] first = new byte[16];
        assertThat(in.read(first)).as("the stream began").isPositive();
        long stopAsked = System.nanoTime();
        g.process.destroy(); // SIGTERM
        String rest = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        assertThat(rest).as("the stream ends whole").endsWith("data: [DONE]\n\n");
        assertThat(g.process.waitFor(20, TimeUnit.SECONDS)).as("then the gateway exits").isTrue();
        assertThat(Duration.ofNanos(System.nanoTime() - stopAsked))
            .as("without waiting out the whole grace").isLessThan(Duration.ofSeconds(20));
      }
    }
  }
}
