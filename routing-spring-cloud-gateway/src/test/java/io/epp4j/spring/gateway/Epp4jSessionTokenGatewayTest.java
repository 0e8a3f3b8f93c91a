package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.RoutingDecision;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Base64;
import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * llm-d's default session affinity through the real gateway: {@code session-affinity-scorer}
 * writes the endpoint that served a request in {@code x-session-token} on the answer, and a
 * client that sends it back is served by that endpoint again. Two stand-in replicas; the
 * profile's only other input is a tie broken at random.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jSessionTokenGatewayTest.App.class,
    properties = {
        "spring.cloud.gateway.server.webflux.routes[0].id=llm",
        "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=Epp4j",
        "epp4j.metrics.enabled=false"})
@Timeout(60)
class Epp4jSessionTokenGatewayTest {
  static final StandInReplica A = StandInReplica.start("a");
  static final StandInReplica B = StandInReplica.start("b");
  static final Path CONFIG = config();

  static Path config() {
    try {
      Path f = Files.createTempFile("session-token", ".yaml");
      Files.writeString(f, """
          plugins:
          - type: session-affinity-scorer
          - type: max-score-picker
          schedulingProfiles:
          - name: default
            plugins: [{pluginRef: session-affinity-scorer}, {pluginRef: max-score-picker}]
          """);
      return f;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", () -> A.id() + "," + B.id());
    registry.add("epp4j.config-file", CONFIG::toString);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {}

  @Value("${local.server.port}")
  int port;

  @AfterAll
  static void stop() throws IOException {
    A.close();
    B.close();
    Files.deleteIfExists(CONFIG);
  }

  HttpResponse<String> post(@org.jspecify.annotations.Nullable String token) throws Exception {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port
        + "/v1/completions")).timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"m\",\"prompt\":\"p\"}"));
    if (token != null) {
      b.header("x-session-token", token);
    }
    HttpResponse<String> r = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build()
        .send(b.build(), HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).isEqualTo(200);
    return r;
  }

  static String served(HttpResponse<String> r) {
    return r.headers().firstValue(RoutingDecision.DESTINATION_HEADER).orElseThrow();
  }

  @Test
  void aClientThatSendsTheTokenBackStaysOnItsReplica() throws Exception {
    HttpResponse<String> first = post(null);
    String home = served(first);
    String token = first.headers().firstValue("x-session-token").orElseThrow();
    assertThat(new String(Base64.getDecoder().decode(token), StandardCharsets.UTF_8))
        .isEqualTo(home);
    for (int i = 0; i < 12; i++) {
      HttpResponse<String> again = post(token);
      assertThat(served(again)).isEqualTo(home);
      assertThat(again.headers().firstValue("x-session-token")).contains(token);
    }
    // without the token the tie is drawn at random: both replicas serve (all 24 on one would
    // happen with probability 2^-23)
    Set<String> seen = new HashSet<>();
    for (int i = 0; i < 24; i++) {
      seen.add(served(post(null)));
    }
    assertThat(seen).containsExactlyInAnyOrder(A.id(), B.id());
  }
}
