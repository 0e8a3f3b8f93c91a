package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.WebSocket;
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
import org.springframework.context.annotation.Bean;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import reactor.core.publisher.Mono;
import reactor.netty.DisposableServer;
import reactor.netty.http.server.HttpServer;

/**
 * Routes whose {@code uri} has the load-balancer scheme, {@code lb://service} and
 * {@code lb:ws://service}: the replica the {@code Epp4j} filter picked serves the request, not an
 * instance the gateway's load-balancer filter (order 10150, after the {@code Epp4j} filter) would
 * choose. Without spring-cloud-loadbalancer on the classpath that filter is SCG's
 * {@code NoLoadBalancerClientFilter}, which answers 503 to every request it takes; its test of the
 * URL (scheme {@code lb}, or the {@code lb} prefix {@code RouteToRequestUrlFilter} noted) is the
 * one {@code ReactiveLoadBalancerClientFilter} makes before choosing an instance.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jLoadBalancerUriTest.App.class,
    properties = {
        "spring.cloud.gateway.server.webflux.routes[0].id=lb",
        "spring.cloud.gateway.server.webflux.routes[0].uri=lb://replicas",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/lb/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[0].filters[1]=Epp4j",
        "spring.cloud.gateway.server.webflux.routes[1].id=lb-ws",
        "spring.cloud.gateway.server.webflux.routes[1].uri=lb:ws://replicas",
        "spring.cloud.gateway.server.webflux.routes[1].predicates[0]=Path=/lbws/v1/**",
        "spring.cloud.gateway.server.webflux.routes[1].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[1].filters[1]=Epp4j",
        "epp4j.metrics.enabled=false"})
@Timeout(60)
class Epp4jLoadBalancerUriTest {
  /** Completions at {@code /v1/completions}, an echo websocket at {@code /v1/realtime}. */
  static final DisposableServer REPLICA = HttpServer.create().host("127.0.0.1").port(0)
      .route(routes -> routes
          .post("/v1/completions", (req, res) -> req.receive().then()
              .then(res.header("x-replica", "a").header("content-type", "application/json")
                  .sendString(Mono.just("{\"choices\":[{\"text\":\"ok\"}],\"usage\":"
                      + "{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}"))
                  .then()))
          .ws("/v1/realtime", (in, out) -> out.sendString(
              in.receive().asString().map(text -> "a:" + text))))
      .bindNow();

  static String id() {
    return "127.0.0.1:" + REPLICA.port();
  }

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", Epp4jLoadBalancerUriTest::id);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Outcomes outcomes() {
      return new Outcomes();
    }
  }

  /** Where the router heard decisions end. */
  static final class Outcomes implements RequestListener {
    final List<String> completedOn = new CopyOnWriteArrayList<>();
    final List<Throwable> failures = new CopyOnWriteArrayList<>();

    @Override
    public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
      completedOn.add(endpoint.id());
    }

    @Override
    public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
      failures.add(cause);
    }
  }

  @Value("${local.server.port}")
  int port;
  @Autowired
  Router router;
  @Autowired
  Outcomes outcomes;

  @AfterAll
  static void stopReplica() {
    REPLICA.disposeNow();
  }

  @Test
  void aPostOnAnLbRouteGoesToThePickedReplica() throws Exception {
    assertPostServedByThePick("/lb/v1/completions");
  }

  @Test
  void aPostOnAnLbWsRouteGoesToThePickedReplica() throws Exception {
    assertPostServedByThePick("/lbws/v1/completions");
  }

  @Test
  void aWebsocketSessionOnAnLbWsRouteIsOpenedToThePickedReplica() throws Exception {
    int completed = outcomes.completedOn.size();
    Epp4jWebSocketTest.Frames frames = new Epp4jWebSocketTest.Frames();
    WebSocket ws = HttpClient.newHttpClient().newWebSocketBuilder()
        .connectTimeout(Duration.ofSeconds(10))
        .buildAsync(URI.create("ws://127.0.0.1:" + port + "/lbws/v1/realtime"), frames)
        .get(20, TimeUnit.SECONDS);
    ws.sendText("hello", true).get(10, TimeUnit.SECONDS);
    assertThat(frames.next()).isEqualTo("a:hello");
    assertThat(inFlight()).as("the open session counts on the picked replica").isEqualTo(1);
    ws.sendClose(WebSocket.NORMAL_CLOSURE, "done").get(10, TimeUnit.SECONDS);
    await(() -> outcomes.completedOn.size() > completed);
    await(() -> inFlight() == 0);
    assertThat(outcomes.completedOn.subList(completed, outcomes.completedOn.size()))
        .containsExactly(id());
    assertThat(outcomes.failures).isEmpty();
  }

  private void assertPostServedByThePick(String path) throws Exception {
    int completed = outcomes.completedOn.size();
    HttpResponse<String> r = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build()
        .send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
            .timeout(Duration.ofSeconds(20))
            .header("content-type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"m\",\"prompt\":\"p\"}"))
            .build(), HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
    assertThat(r.headers().firstValue("x-replica")).contains("a");
    assertThat(r.headers().firstValue(RoutingDecision.DESTINATION_HEADER)).contains(id());
    await(() -> outcomes.completedOn.size() > completed);
    await(() -> inFlight() == 0);
    assertThat(outcomes.completedOn.subList(completed, outcomes.completedOn.size()))
        .containsExactly(id());
    assertThat(outcomes.failures).isEmpty();
  }

  private int inFlight() {
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
}
