package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/** A primary whose port refuses connections: the request goes to the decision's fallback. */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jFallbackTest.App.class,
    properties = {
        "spring.cloud.gateway.server.webflux.routes[0].id=llm",
        "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=Epp4j",
        "epp4j.metrics.enabled=false"})
@Timeout(60)
class Epp4jFallbackTest {
  static final StandInReplica LIVE = StandInReplica.start("live");
  static final String DEAD = "127.0.0.1:" + freePort();

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) throws Exception {
    registry.add("epp4j.endpoints", () -> DEAD + "," + LIVE.id());
    Path config = Path.of(Epp4jFallbackTest.class.getResource("/two-picks.yaml").toURI());
    registry.add("epp4j.config-file", config::toString);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    DeadPrimaries deadPrimaries() {
      return new DeadPrimaries();
    }
  }

  /** Counts decisions whose primary was the dead replica, fallbacks, and where requests ended. */
  static final class DeadPrimaries implements RequestListener {
    final AtomicInteger count = new AtomicInteger();
    final AtomicInteger fallbacksToLive = new AtomicInteger();
    final java.util.Set<String> completedOn = java.util.concurrent.ConcurrentHashMap.newKeySet();

    @Override
    public void onFallback(InferenceRequest request, io.epp4j.api.Endpoint from,
        io.epp4j.api.Endpoint to) {
      if (from.id().equals(DEAD) && to.id().equals(LIVE.id())) {
        fallbacksToLive.incrementAndGet();
      }
    }

    @Override
    public void onComplete(InferenceRequest request, io.epp4j.api.Endpoint e,
        io.epp4j.api.Usage usage) {
      completedOn.add(e.id());
    }

    @Override
    public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision d) {
      // a header a routing plugin asks for on the answer (session-affinity-scorer's token),
      // naming the endpoint that served it
      d.setResponseHeader("x-served-token", decision -> decision.servedBy().id());
      if (d.primary().id().equals(DEAD)) {
        count.incrementAndGet();
      }
    }
  }

  @Value("${local.server.port}")
  int port;
  @Autowired
  Router router;
  @Autowired
  DeadPrimaries deadPrimaries;

  @AfterAll
  static void stop() {
    LIVE.close();
  }

  @Test
  void aRefusedConnectionToThePrimaryGoesToTheFallback() throws Exception {
    HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
    for (int i = 0; i < 16; i++) {
      HttpResponse<String> r = client.send(HttpRequest.newBuilder(
              URI.create("http://127.0.0.1:" + port + "/v1/completions"))
          .timeout(Duration.ofSeconds(20))
          .header("content-type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"m\",\"prompt\":\"p" + i + "\"}"))
          .build(), HttpResponse.BodyHandlers.ofString());
      assertThat(r.statusCode()).as("request %d", i).isEqualTo(200);
      assertThat(r.headers().firstValue("x-replica")).contains("live");
      assertThat(r.headers().firstValue(RoutingDecision.DESTINATION_HEADER)).contains(LIVE.id());
      assertThat(r.headers().firstValue("x-served-token")).contains(LIVE.id());
      // the body read once by the filter is sent again, whole, on the second attempt
      assertThat(LIVE.lastBody.get()).isEqualTo("{\"model\":\"m\",\"prompt\":\"p" + i + "\"}");
    }
    // ties between the two are broken at random: some decisions put the dead one first
    assertThat(deadPrimaries.count.get()).isPositive();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (inFlight() != 0 && System.nanoTime() < deadline) {
      Thread.sleep(10);
    }
    assertThat(inFlight()).isZero();
    // the router heard where each request went: the plugins learnt nothing about the dead one
    assertThat(deadPrimaries.fallbacksToLive.get()).isEqualTo(deadPrimaries.count.get());
    assertThat(deadPrimaries.completedOn).containsExactly(LIVE.id());
  }

  @Test
  void whenNoReplicaOfTheDecisionAnswersTheClientGetsA502InTheOpenAiShape() throws Exception {
    java.util.List<io.epp4j.api.Endpoint> pool = router.endpoints().stream()
        .map(Candidate::endpoint).toList();
    router.setEndpoints(java.util.List.of(io.epp4j.api.Endpoint.parse(DEAD)));
    try {
      HttpResponse<String> r = HttpClient.newHttpClient().send(HttpRequest.newBuilder(
              URI.create("http://127.0.0.1:" + port + "/v1/completions"))
          .timeout(Duration.ofSeconds(20))
          .header("content-type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"m\",\"prompt\":\"p\"}"))
          .build(), HttpResponse.BodyHandlers.ofString());
      assertThat(r.statusCode()).isEqualTo(502);
      assertThat(r.body()).contains("\"type\":\"upstream_unavailable\"");
      // the header names the endpoint that served the answer; none did (it named the dead one)
      assertThat(r.headers().firstValue(io.epp4j.api.RoutingDecision.DESTINATION_HEADER))
          .isEmpty();
      // nor do the headers the routing plugins ask for on an endpoint's answer: this one is the
      // gateway's own (a session token would bind the client to the endpoint that was down)
      assertThat(r.headers().firstValue("x-served-token")).isEmpty();
      assertThat(inFlight()).isZero();
    } finally {
      router.setEndpoints(pool);
    }
  }

  private int inFlight() {
    int n = 0;
    for (Candidate c : router.endpoints()) {
      n += c.inFlightRequests();
    }
    return n;
  }

  private static int freePort() {
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    } catch (java.io.IOException e) {
      throw new IllegalStateException(e);
    }
  }
}
