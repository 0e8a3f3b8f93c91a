package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
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
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
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
import org.springframework.boot.test.util.TestPropertyValues;
import org.springframework.cloud.context.environment.EnvironmentChangeEvent;
import org.springframework.cloud.gateway.event.RefreshRoutesEvent;
import org.springframework.cloud.gateway.route.RouteLocator;
import org.springframework.cloud.gateway.route.builder.RouteLocatorBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.core.env.MapPropertySource;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The real gateway on a random port in front of two named pools and the default one: route
 * {@code /llama/v1/**} with {@code Epp4j=llama} (shortcut), route {@code /qwen/v1/**} with the
 * {@code Epp4j} filter and {@code args.pool=qwen}, route {@code /dsl/v1/**} with
 * {@code factory.filter("llama")} in the Java DSL, and {@code /v1/**} with the plain
 * {@code Epp4j} filter on the default router. {@code StripPrefix=1} gives the filter the OpenAI
 * path ({@code /v1/completions}) the router parses.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jPoolsGatewayTest.App.class,
    properties = {
        "spring.cloud.gateway.server.webflux.routes[0].id=default",
        "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=Epp4j",
        "spring.cloud.gateway.server.webflux.routes[1].id=llama",
        "spring.cloud.gateway.server.webflux.routes[1].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[1].predicates[0]=Path=/llama/v1/**",
        "spring.cloud.gateway.server.webflux.routes[1].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[1].filters[1]=Epp4j=llama",
        "spring.cloud.gateway.server.webflux.routes[2].id=qwen",
        "spring.cloud.gateway.server.webflux.routes[2].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[2].predicates[0]=Path=/qwen/v1/**",
        "spring.cloud.gateway.server.webflux.routes[2].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[2].filters[1].name=Epp4j",
        "spring.cloud.gateway.server.webflux.routes[2].filters[1].args.pool=qwen",
        // a route that names two pools: the first one routes
        "spring.cloud.gateway.server.webflux.routes[3].id=both",
        "spring.cloud.gateway.server.webflux.routes[3].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[3].predicates[0]=Path=/both/v1/**",
        "spring.cloud.gateway.server.webflux.routes[3].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[3].filters[1]=Epp4j=llama",
        "spring.cloud.gateway.server.webflux.routes[3].filters[2]=Epp4j=qwen",
        "epp4j.metrics.enabled=false",
        "management.endpoint.health.show-details=always",
        "epp4j.max-body-size=32KB",
        // llama has a limit of its own; qwen inherits epp4j.max-body-size
        "epp4j.pools.llama.max-body-size=64KB"})
@Timeout(60)
class Epp4jPoolsGatewayTest {
  static final StandInReplica D = StandInReplica.start("d");
  static final StandInReplica L1 = StandInReplica.start("l1");
  static final StandInReplica L2 = StandInReplica.start("l2");
  static final StandInReplica Q = StandInReplica.start("q");
  static final ObjectMapper JSON = new ObjectMapper();
  static final HttpClient CLIENT = HttpClient.newBuilder()
      .version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(5)).build();

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", D::id);
    registry.add("epp4j.pools.llama.endpoints", () -> L1.id() + "," + L2.id());
    registry.add("epp4j.pools.qwen.endpoints", Q::id);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Completions completions() {
      return new Completions();
    }

    @Bean
    RouteLocator dslRoutes(RouteLocatorBuilder routes, Epp4jGatewayFilterFactory epp4j) {
      return routes.routes()
          .route("dsl", r -> r.path("/dsl/v1/**")
              .filters(f -> f.stripPrefix(1).filter(epp4j.filter("llama")))
              .uri("http://replica.invalid"))
          .build();
    }
  }

  /** Endpoints of the completions the routers heard of, through the response tap. */
  static final class Completions implements RequestListener {
    final List<String> endpoints = new CopyOnWriteArrayList<>();
    final List<Usage> usages = new CopyOnWriteArrayList<>();
    final List<String> failedOn = new CopyOnWriteArrayList<>();

    @Override
    public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
      endpoints.add(endpoint.id());
      usages.add(usage);
    }

    @Override
    public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
      failedOn.add(endpoint.id());
    }
  }

  @Value("${local.server.port}")
  int port;
  @Autowired
  Router defaultRouter;
  @Autowired
  Epp4jPools pools;
  @Autowired
  Completions completions;
  @Autowired
  ConfigurableApplicationContext ctx;

  @AfterAll
  static void stopReplicas() {
    D.close();
    L1.close();
    L2.close();
    Q.close();
  }

  @Test
  void eachRouteLandsOnlyOnItsOwnPoolAndNothingStaysInFlight() throws Exception {
    assertThat(pools.names()).containsExactly("llama", "qwen");
    int q = Q.served.get();
    int d = D.served.get();
    int l = L1.served.get() + L2.served.get();
    int completed = completions.endpoints.size();
    Set<String> llama = new HashSet<>();
    Set<String> qwen = new HashSet<>();
    Set<String> dsl = new HashSet<>();
    Set<String> plain = new HashSet<>();
    for (int i = 0; i < 8; i++) {
      llama.add(replica(post("/llama/v1/completions", prompt("llama " + i))));
      qwen.add(replica(post("/qwen/v1/completions", prompt("qwen " + i))));
      dsl.add(replica(post("/dsl/v1/completions", prompt("dsl " + i))));
      plain.add(replica(post("/v1/completions", prompt("default " + i))));
    }
    assertThat(llama).isNotEmpty().isSubsetOf("l1", "l2");
    assertThat(dsl).isNotEmpty().isSubsetOf("l1", "l2");
    assertThat(qwen).containsExactly("q");
    assertThat(plain).containsExactly("d");
    assertThat(Q.served.get() - q).isEqualTo(8);
    assertThat(D.served.get() - d).isEqualTo(8);
    assertThat(L1.served.get() + L2.served.get() - l).isEqualTo(16);

    // every answer went through the response tap: completions with the replica's usage,
    // and no request stays counted on any router
    await(() -> completions.endpoints.size() >= completed + 32);
    await(() -> inFlight(pools.router("llama")) == 0 && inFlight(pools.router("qwen")) == 0
        && inFlight(defaultRouter) == 0);
    List<String> seen = completions.endpoints.subList(completed, completed + 32);
    assertThat(seen.stream().filter(Q.id()::equals).count()).isEqualTo(8);
    assertThat(seen.stream().filter(D.id()::equals).count()).isEqualTo(8);
    assertThat(seen.stream().filter(id -> id.equals(L1.id()) || id.equals(L2.id())).count())
        .isEqualTo(16);
    assertThat(completions.usages.subList(completed, completed + 32))
        .allSatisfy(u -> assertThat(u.cachedTokens()).isEqualTo(StandInReplica.CACHED));
  }

  /**
   * A route with two {@code Epp4j} filters: the second routed the request the first had routed
   * already, which failed the first pool's decision as if a retry had replaced it, and the
   * request went to the second pool, while the body limit was the first pool's. The first filter
   * routes now, as its body limit says; the second leaves the request as it is.
   */
  @Test
  void aRouteWithTwoEpp4jFiltersIsRoutedByTheFirstAndNoDecisionFails() throws Exception {
    int q = Q.served.get();
    int failed = completions.failedOn.size();
    Set<String> served = new HashSet<>();
    for (int i = 0; i < 4; i++) {
      HttpResponse<String> r = post("/both/v1/completions", prompt("both " + i));
      assertThat(r.statusCode()).isEqualTo(200);
      served.add(replica(r));
    }
    assertThat(served).as("the first filter's pool, llama").isNotEmpty().isSubsetOf("l1", "l2");
    assertThat(Q.served.get()).as("nothing reached qwen").isEqualTo(q);
    await(() -> inFlight(pools.router("llama")) == 0 && inFlight(pools.router("qwen")) == 0);
    assertThat(completions.failedOn.subList(failed, completions.failedOn.size()))
        .as("decisions failed").isEmpty();
  }

  @Test
  void aPoolWithoutItsOwnBodyLimitTakesTheTopLevelOne() throws Exception {
    String body40k = "{\"model\":\"m\",\"prompt\":\"" + "x".repeat(40 * 1024) + "\"}";
    String body20k = "{\"model\":\"m\",\"prompt\":\"" + "x".repeat(20 * 1024) + "\"}";
    // qwen sets no max-body-size: epp4j.max-body-size=32KB, not the 16MB built-in default
    HttpResponse<String> inherited = post("/qwen/v1/completions", body40k);
    assertThat(inherited.statusCode()).isEqualTo(413);
    assertThat(inherited.body()).contains("request_too_large").contains(" 32768 bytes");
    assertThat(post("/qwen/v1/completions", body20k).statusCode()).isEqualTo(200);
    // llama has its own 64KB
    assertThat(post("/llama/v1/completions", body40k).statusCode()).isEqualTo(200);
    assertThat(post("/v1/completions", body40k).statusCode()).isEqualTo(413);
    await(() -> inFlight(pools.router("llama")) == 0 && inFlight(pools.router("qwen")) == 0);
  }

  @Test
  void refreshingOnePoolsEndpointsChangesOnlyThatPool() throws Exception {
    try {
      TestPropertyValues.of("epp4j.pools.llama.endpoints=" + L2.id()).applyTo(ctx);
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.pools.llama.endpoints")));
      assertThat(ids(pools.router("llama"))).containsExactly(L2.id());
      assertThat(ids(pools.router("qwen"))).containsExactly(Q.id());
      assertThat(ids(defaultRouter)).containsExactly(D.id());
      for (int i = 0; i < 4; i++) {
        assertThat(replica(post("/llama/v1/completions", prompt("after " + i)))).isEqualTo("l2");
      }
      assertThat(replica(post("/qwen/v1/completions", prompt("still q")))).isEqualTo("q");

      // an invalid change to qwen is dropped whole; llama is not touched by it
      TestPropertyValues.of("epp4j.pools.qwen.endpoints=" + D.id() + ",no-port").applyTo(ctx);
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.pools.qwen.endpoints")));
      assertThat(ids(pools.router("qwen"))).containsExactly(Q.id());
      assertThat(ids(pools.router("llama"))).containsExactly(L2.id());
    } finally {
      TestPropertyValues.of("epp4j.pools.llama.endpoints=" + L1.id() + "," + L2.id(),
          "epp4j.pools.qwen.endpoints=" + Q.id()).applyTo(ctx);
      ctx.publishEvent(new EnvironmentChangeEvent(ctx,
          Set.of("epp4j.pools.llama.endpoints", "epp4j.pools.qwen.endpoints")));
    }
    assertThat(ids(pools.router("llama"))).containsExactlyInAnyOrder(L1.id(), L2.id());
  }

  @Test
  void aPoolAndARouteAddedAtRuntimeServeAndARemovedPoolsRouteAnswers503() throws Exception {
    // what a config server push does: new properties, an environment change, then the routes
    // built again
    Map<String, Object> pushed = new ConcurrentHashMap<>();
    pushed.put("epp4j.pools.mistral.endpoints", Q.id());
    // a list binds from one property source: the pushed one carries the routes there were too
    String routes = "spring.cloud.gateway.server.webflux.routes[";
    for (var source : ctx.getEnvironment().getPropertySources()) {
      if (source instanceof org.springframework.core.env.EnumerablePropertySource<?> e) {
        for (String name : e.getPropertyNames()) {
          if (name.startsWith(routes)) {
            pushed.putIfAbsent(name, ctx.getEnvironment().getProperty(name, ""));
          }
        }
      }
    }
    String route = routes + "3].";
    pushed.put(route + "id", "mistral");
    pushed.put(route + "uri", "http://replica.invalid");
    pushed.put(route + "predicates[0]", "Path=/mistral/v1/**");
    pushed.put(route + "filters[0]", "StripPrefix=1");
    pushed.put(route + "filters[1]", "Epp4j=mistral");
    ctx.getEnvironment().getPropertySources().addFirst(new MapPropertySource("pushed", pushed));
    try {
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.copyOf(pushed.keySet())));
      ctx.publishEvent(new RefreshRoutesEvent(this));
      await(() -> status("/mistral/v1/completions", prompt("probe")) == 200);
      int q = Q.served.get();
      for (int i = 0; i < 4; i++) {
        assertThat(replica(post("/mistral/v1/completions", prompt("mistral " + i))))
            .isEqualTo("q");
      }
      assertThat(Q.served.get() - q).isEqualTo(4);
      Router mistral = pools.router("mistral");
      await(() -> inFlight(mistral) == 0);
      assertThat(replica(post("/llama/v1/completions", prompt("llama")))).isIn("l1", "l2");

      // the pool goes, the route stays: an OpenAI-shaped 503, the router closed
      pushed.remove("epp4j.pools.mistral.endpoints");
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.of("epp4j.pools.mistral.endpoints")));
      assertThat(pools.names()).containsExactly("llama", "qwen");
      HttpResponse<String> gone = post("/mistral/v1/completions", prompt("after"));
      assertThat(gone.statusCode()).isEqualTo(503);
      assertThat(JSON.readTree(gone.body()).at("/error/type").asText())
          .isEqualTo("routing_no_endpoints");
      assertThat(gone.body()).contains("pool 'mistral' is not configured");
      HttpResponse<String> goneGet = CLIENT.send(HttpRequest.newBuilder(
              URI.create("http://127.0.0.1:" + port + "/mistral/v1/models"))
          .timeout(Duration.ofSeconds(20)).GET().build(), HttpResponse.BodyHandlers.ofString());
      assertThat(goneGet.statusCode()).isEqualTo(503);
      assertThat(goneGet.body()).contains("pool 'mistral' is not configured");
      assertThat(mistral.route("/v1/completions", Map.of(), new byte[0]).rejection())
          .isNotNull();
    } finally {
      ctx.getEnvironment().getPropertySources().remove("pushed");
      ctx.publishEvent(new EnvironmentChangeEvent(ctx, Set.copyOf(pushed.keySet())));
      ctx.publishEvent(new RefreshRoutesEvent(this));
    }
  }

  @Test
  void actuatorHealthShowsEveryRouter() throws Exception {
    HttpResponse<String> r = CLIENT.send(HttpRequest.newBuilder(
            URI.create("http://127.0.0.1:" + port + "/actuator/health/epp4j"))
        .timeout(Duration.ofSeconds(10)).GET().build(), HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
    var health = JSON.readTree(r.body());
    assertThat(health.at("/status").asText()).isEqualTo("UP");
    assertThat(health.at("/details/default/endpoints").asInt()).isEqualTo(1);
    assertThat(health.at("/details/pools/llama/endpoints").asInt()).isEqualTo(2);
    assertThat(health.at("/details/pools/qwen/endpoints").asInt()).isEqualTo(1);
  }

  private static String prompt(String text) {
    return "{\"model\":\"m\",\"prompt\":\"" + text + "\"}";
  }

  private static String replica(HttpResponse<String> r) {
    assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
    assertThat(r.headers().firstValue(RoutingDecision.DESTINATION_HEADER)).isPresent();
    return r.headers().firstValue("x-replica").orElseThrow();
  }

  private static Set<String> ids(Router router) {
    Set<String> ids = new HashSet<>();
    router.endpoints().forEach(c -> ids.add(c.id()));
    return ids;
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
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("condition not met within 10 s");
      }
      Thread.sleep(10);
    }
  }

  /** The status of a POST, or -1 when it could not be sent. */
  private int status(String path, String body) {
    try {
      return post(path, body).statusCode();
    } catch (Exception e) {
      return -1;
    }
  }

  private HttpResponse<String> post(String path, String body) throws Exception {
    return CLIENT.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
        .timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofString());
  }
}
