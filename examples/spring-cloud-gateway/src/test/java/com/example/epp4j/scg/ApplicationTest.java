package com.example.epp4j.scg;

import static org.assertj.core.api.Assertions.assertThat;

import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/** The example as shipped (its application.yaml), in front of one replica on loopback. */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    properties = "epp4j.metrics.enabled=false")
@Timeout(60)
class ApplicationTest {
  static final HttpServer REPLICA = replica();

  @DynamicPropertySource
  static void endpoints(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", () -> "127.0.0.1:" + REPLICA.getAddress().getPort());
  }

  @Value("${local.server.port}")
  int port;

  @AfterAll
  static void stop() {
    REPLICA.stop(0);
  }

  @Test
  void routesACompletionThroughEpp4j() throws Exception {
    HttpResponse<String> r = HttpClient.newHttpClient().send(HttpRequest.newBuilder(
            URI.create("http://127.0.0.1:" + port + "/v1/completions"))
        .timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"m\",\"prompt\":\"hello\"}"))
        .build(), HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).isEqualTo(200);
    assertThat(r.body()).contains("\"text\":\"hi\"");
    assertThat(r.headers().firstValue("x-gateway-destination-endpoint"))
        .contains("127.0.0.1:" + REPLICA.getAddress().getPort());
  }

  private static HttpServer replica() {
    try {
      HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
      s.createContext("/v1/", ex -> {
        ex.getRequestBody().readAllBytes();
        byte[] b = "{\"choices\":[{\"text\":\"hi\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}"
            .getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("content-type", "application/json");
        ex.sendResponseHeaders(200, b.length);
        ex.getResponseBody().write(b);
        ex.close();
      });
      s.start();
      return s;
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }
}
