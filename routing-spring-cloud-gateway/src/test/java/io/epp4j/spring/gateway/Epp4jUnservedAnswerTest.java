package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.cloud.gateway.filter.GatewayFilter;
import org.springframework.cloud.gateway.route.RouteLocator;
import org.springframework.cloud.gateway.route.builder.RouteLocatorBuilder;
import org.springframework.context.annotation.Bean;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.server.reactive.ServerHttpResponse;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import reactor.core.publisher.Mono;

/**
 * Answers no replica served, though the {@code Epp4j} filter had picked one: a filter ordered
 * after it that answers by itself (an authorization check, say) and the gateway's own 504 when
 * the replica does not answer within the silent route's {@code response-timeout}. The real
 * gateway on a random port; a stand-in replica, and a replica that accepts connections and never
 * answers.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jUnservedAnswerTest.App.class,
    properties = {
        "spring.cloud.gateway.server.webflux.routes[0].id=llm",
        "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=Epp4j",
        "spring.cloud.gateway.server.webflux.routes[1].id=silent",
        "spring.cloud.gateway.server.webflux.routes[1].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[1].predicates[0]=Path=/silent/v1/**",
        "spring.cloud.gateway.server.webflux.routes[1].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[1].filters[1]=Epp4j=silent",
        // the silent route's own timeout (milliseconds): the others keep the gateway's default,
        // so that a first answer slow to come on a loaded machine is no 504
        "spring.cloud.gateway.server.webflux.routes[1].metadata.response-timeout=1000",
        "epp4j.metrics.enabled=false"})
@Timeout(60)
class Epp4jUnservedAnswerTest {
  static final StandInReplica A = StandInReplica.start("a");
  static final SilentReplica SILENT = new SilentReplica();

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", A::id);
    registry.add("epp4j.pools.silent.endpoints", SILENT::id);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Outcomes outcomes() {
      return new Outcomes();
    }

    /** Routes whose filter after {@code Epp4j} answers the request itself. */
    @Bean
    RouteLocator deniedRoutes(RouteLocatorBuilder routes, Epp4jGatewayFilterFactory epp4j) {
      return routes.routes()
          .route("unauthorized", r -> r.path("/unauthorized/v1/**")
              .filters(f -> f.stripPrefix(1).filter(epp4j.filter())
                  .filter(UNAUTHORIZED, Epp4jGatewayFilterFactory.ORDER + 10))
              .uri("http://replica.invalid"))
          .route("forbidden", r -> r.path("/forbidden/v1/**")
              .filters(f -> f.stripPrefix(1).filter(epp4j.filter())
                  .filter(FORBIDDEN, Epp4jGatewayFilterFactory.ORDER + 10))
              .uri("http://replica.invalid"))
          .build();
    }
  }

  /** Sets 401 and completes the response, without a body and without the rest of the chain. */
  static final GatewayFilter UNAUTHORIZED = (exchange, chain) -> {
    exchange.getResponse().setStatusCode(HttpStatus.UNAUTHORIZED);
    return exchange.getResponse().setComplete();
  };

  /** Writes a 403 with a JSON body, without the rest of the chain. */
  static final GatewayFilter FORBIDDEN = (exchange, chain) -> {
    ServerHttpResponse response = exchange.getResponse();
    response.setStatusCode(HttpStatus.FORBIDDEN);
    response.getHeaders().setContentType(MediaType.APPLICATION_JSON);
    byte[] body = "{\"error\":\"forbidden\"}".getBytes(StandardCharsets.UTF_8);
    return response.writeWith(Mono.just(response.bufferFactory().wrap(body)));
  };

  /** What the routers heard back, per endpoint. */
  static final class Outcomes implements RequestListener {
    final List<String> completedOn = new CopyOnWriteArrayList<>();
    final List<String> failedOn = new CopyOnWriteArrayList<>();

    @Override
    public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
      completedOn.add(endpoint.id());
    }

    @Override
    public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
      failedOn.add(endpoint.id());
    }
  }

  @Value("${local.server.port}")
  int port;
  @Autowired
  Router router;
  @Autowired
  Epp4jPools pools;
  @Autowired
  Outcomes outcomes;

  @AfterAll
  static void stopReplicas() {
    A.close();
    SILENT.close();
  }

  @Test
  void aReplicasAnswerNamesItInTheDestinationHeaderAndCompletesTheDecision() throws Exception {
    int completed = outcomes.completedOn.size();
    HttpResponse<String> r = post("/v1/completions");
    assertThat(r.statusCode()).isEqualTo(200);
    assertThat(r.headers().firstValue(RoutingDecision.DESTINATION_HEADER)).contains(A.id());
    await(() -> outcomes.completedOn.size() > completed);
    assertThat(outcomes.completedOn.subList(completed, outcomes.completedOn.size()))
        .containsExactly(A.id());
  }

  @Test
  void aFilterAfterEpp4jThatCompletesTheResponseItselfFailsTheDecision() throws Exception {
    assertAnsweredWithoutTheReplica("/unauthorized/v1/completions", 401);
  }

  @Test
  void aFilterAfterEpp4jThatWritesAnAnswerItselfFailsTheDecision() throws Exception {
    assertAnsweredWithoutTheReplica("/forbidden/v1/completions", 403);
  }

  @Test
  void aWebsocketUpgradeAFilterAfterEpp4jRefusesFailsTheDecision() throws Exception {
    int completed = outcomes.completedOn.size();
    int failed = outcomes.failedOn.size();
    java.util.concurrent.CompletableFuture<java.net.http.WebSocket> upgrade =
        HttpClient.newHttpClient().newWebSocketBuilder()
            .connectTimeout(Duration.ofSeconds(10))
            .buildAsync(URI.create("ws://127.0.0.1:" + port + "/unauthorized/v1/realtime"),
                new java.net.http.WebSocket.Listener() {});
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> upgrade.get(20, TimeUnit.SECONDS))
        .hasRootCauseMessage("Unexpected HTTP response status code 401");
    await(() -> outcomes.failedOn.size() > failed || outcomes.completedOn.size() > completed);
    await(() -> inFlight(router) == 0);
    assertThat(outcomes.completedOn.subList(completed, outcomes.completedOn.size())).isEmpty();
    assertThat(outcomes.failedOn.subList(failed, outcomes.failedOn.size()))
        .containsExactly(A.id());
    assertThat(inFlight(router)).isZero();
  }

  private void assertAnsweredWithoutTheReplica(String path, int status) throws Exception {
    int served = A.served.get();
    int completed = outcomes.completedOn.size();
    int failed = outcomes.failedOn.size();
    HttpResponse<String> r = post(path);
    assertThat(r.statusCode()).isEqualTo(status);
    await(() -> outcomes.failedOn.size() > failed || outcomes.completedOn.size() > completed);
    await(() -> inFlight(router) == 0);
    assertThat(A.served.get()).as("requests the replica received").isEqualTo(served);
    // the picked endpoint is not credited with a request it never received
    assertThat(outcomes.completedOn.subList(completed, outcomes.completedOn.size())).isEmpty();
    assertThat(outcomes.failedOn.subList(failed, outcomes.failedOn.size()))
        .containsExactly(A.id());
    assertThat(inFlight(router)).isZero();
    // no replica served the answer: the header would tell the client one did
    assertThat(r.headers().firstValue(RoutingDecision.DESTINATION_HEADER)).isEmpty();
  }

  @Test
  void theGateways504ForAReplicaThatDoesNotAnswerInTimeNamesNoEndpointAndFailsTheDecision()
      throws Exception {
    int failed = outcomes.failedOn.size();
    HttpResponse<String> r = post("/silent/v1/completions");
    assertThat(r.statusCode()).isEqualTo(504);
    assertThat(SILENT.accepted.get()).as("connections the silent replica accepted").isPositive();
    await(() -> outcomes.failedOn.size() > failed);
    assertThat(outcomes.failedOn.subList(failed, outcomes.failedOn.size()))
        .containsExactly(SILENT.id());
    Router silentPool = pools.router("silent");
    await(() -> inFlight(silentPool) == 0);
    assertThat(inFlight(silentPool)).isZero();
    // the gateway answered, not the replica: the header would tell the client the replica did
    assertThat(r.headers().firstValue(RoutingDecision.DESTINATION_HEADER)).isEmpty();
  }

  private HttpResponse<String> post(String path) throws Exception {
    return HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build().send(
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
            .timeout(Duration.ofSeconds(20))
            .header("content-type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"m\",\"prompt\":\"p\"}"))
            .build(), HttpResponse.BodyHandlers.ofString());
  }

  private static int inFlight(Router router) {
    int n = 0;
    for (Candidate c : router.endpoints()) {
      n += c.inFlightRequests();
    }
    return n;
  }

  private static void await(BooleanSupplier condition) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!condition.getAsBoolean() && System.nanoTime() < deadline) {
      Thread.sleep(10);
    }
  }

  /** Accepts connections on loopback, reads nothing and never answers. */
  static final class SilentReplica implements AutoCloseable {
    final java.util.concurrent.atomic.AtomicInteger accepted =
        new java.util.concurrent.atomic.AtomicInteger();
    private final ServerSocket server;
    private final List<Socket> open = new CopyOnWriteArrayList<>();

    SilentReplica() {
      try {
        server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
      Thread t = new Thread(() -> {
        while (!server.isClosed()) {
          try {
            open.add(server.accept());
            accepted.incrementAndGet();
          } catch (IOException e) {
            return; // closed
          }
        }
      }, "silent-replica");
      t.setDaemon(true);
      t.start();
    }

    String id() {
      return "127.0.0.1:" + server.getLocalPort();
    }

    @Override
    public void close() {
      try {
        server.close();
        for (Socket s : open) {
          s.close();
        }
      } catch (IOException ignored) {
        // closing a test's sockets
      }
    }
  }
}
