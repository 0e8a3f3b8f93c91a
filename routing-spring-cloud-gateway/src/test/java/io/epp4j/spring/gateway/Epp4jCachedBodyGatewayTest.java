package io.epp4j.spring.gateway;

import static io.epp4j.spring.gateway.Http2Requests.await;
import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.PooledByteBufAllocator;
import io.netty.util.ResourceLeakDetector;
import java.io.ByteArrayInputStream;
import java.lang.reflect.Field;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.cloud.gateway.route.RouteLocator;
import org.springframework.cloud.gateway.route.builder.RouteLocatorBuilder;
import org.springframework.context.annotation.Bean;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Routes where the application has the body read before the {@code Epp4j} filter: SCG's
 * {@code ReadBody} predicate, its {@code CacheRequestBody} filter (which leaves the decoded body,
 * a {@code String} here, in the exchange's cached-body attribute), each with and without the
 * {@code Retry} filter in front; and a route with {@code Retry} alone, whose body cache holds
 * the copies {@link Epp4jBodyLimitFilter} made, kept as they are. The replica must get the
 * client's body, streamed answers must arrive whole, a body above the limit is a 413 and a
 * malformed one a 400, and no buffer may be released twice or leak (Netty's leak detector, at its paranoid level, watches every buffer).
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jCachedBodyGatewayTest.App.class,
    properties = {
        "spring.cloud.gateway.server.webflux.routes[0].id=cached",
        "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/cached/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[0].filters[1].name=CacheRequestBody",
        "spring.cloud.gateway.server.webflux.routes[0].filters[1].args.bodyClass=java.lang.String",
        "spring.cloud.gateway.server.webflux.routes[0].filters[2]=Epp4j",
        "spring.cloud.gateway.server.webflux.routes[1].id=cached-retried",
        "spring.cloud.gateway.server.webflux.routes[1].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[1].predicates[0]=Path=/cached-retried/v1/**",
        "spring.cloud.gateway.server.webflux.routes[1].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[1].filters[1].name=CacheRequestBody",
        "spring.cloud.gateway.server.webflux.routes[1].filters[1].args.bodyClass=java.lang.String",
        "spring.cloud.gateway.server.webflux.routes[1].filters[2].name=Retry",
        "spring.cloud.gateway.server.webflux.routes[1].filters[2].args.retries=2",
        "spring.cloud.gateway.server.webflux.routes[1].filters[2].args.methods=POST",
        "spring.cloud.gateway.server.webflux.routes[1].filters[2].args.series=SERVER_ERROR",
        "spring.cloud.gateway.server.webflux.routes[1].filters[3]=Epp4j",
        "spring.cloud.gateway.server.webflux.routes[2].id=retried",
        "spring.cloud.gateway.server.webflux.routes[2].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[2].predicates[0]=Path=/retried/v1/**",
        "spring.cloud.gateway.server.webflux.routes[2].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[2].filters[1].name=Retry",
        "spring.cloud.gateway.server.webflux.routes[2].filters[1].args.retries=2",
        "spring.cloud.gateway.server.webflux.routes[2].filters[1].args.methods=POST",
        "spring.cloud.gateway.server.webflux.routes[2].filters[1].args.series=SERVER_ERROR",
        "spring.cloud.gateway.server.webflux.routes[2].filters[2]=Epp4j",
        "epp4j.metrics.enabled=false",
        "epp4j.max-body-size=32KB"})
@Timeout(90)
class Epp4jCachedBodyGatewayTest {
  static final StandInReplica A = StandInReplica.start("a");
  static final ObjectMapper JSON = new ObjectMapper();
  static final HttpClient CLIENT = HttpClient.newBuilder()
      .version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(5)).build();
  /** Every route of the test: the prefix its requests take. */
  static final List<String> ROUTES = List.of("/cached", "/cached-retried", "/read",
      "/read-retried", "/retried");
  /** The leaks Netty's detector reported while the test ran. */
  static final List<String> LEAKS = new CopyOnWriteArrayList<>();
  private static ResourceLeakDetector.Level levelBefore;

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", A::id);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Completed completed() {
      return new Completed();
    }

    /** The ReadBody predicate has no shortcut in properties: it takes a Java predicate. */
    @Bean
    RouteLocator readBodyRoutes(RouteLocatorBuilder routes, Epp4jGatewayFilterFactory epp4j) {
      return routes.routes()
          .route("read", r -> r.path("/read/v1/**").and()
              .readBody(String.class, body -> true)
              .filters(f -> f.stripPrefix(1).filter(epp4j.filter()))
              .uri("http://replica.invalid"))
          .route("read-retried", r -> r.path("/read-retried/v1/**").and()
              .readBody(String.class, body -> true)
              .filters(f -> f.stripPrefix(1)
                  .retry(c -> c.setRetries(2).setMethods(org.springframework.http.HttpMethod.POST)
                      .setSeries(org.springframework.http.HttpStatus.Series.SERVER_ERROR))
                  .filter(epp4j.filter()))
              .uri("http://replica.invalid"))
          .build();
    }
  }

  /** The usage of each completed decision. */
  static final class Completed implements RequestListener {
    final List<Usage> usages = new CopyOnWriteArrayList<>();

    @Override
    public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
      usages.add(usage);
    }
  }

  @Value("${local.server.port}")
  int port;
  @Autowired
  Router router;
  @Autowired
  Completed completed;

  @BeforeAll
  static void watchForLeaks() throws ReflectiveOperationException, InterruptedException {
    levelBefore = ResourceLeakDetector.getLevel();
    ResourceLeakDetector.setLevel(ResourceLeakDetector.Level.PARANOID);
    // buffers earlier test classes in this JVM dropped are reported (logged) before listening
    collectAndReport();
    leakDetector().setLeakListener((type, records) -> LEAKS.add(type + ": " + records));
  }

  @AfterAll
  static void stopReplica() throws ReflectiveOperationException {
    A.close();
    leakDetector().setLeakListener(null);
    ResourceLeakDetector.setLevel(levelBefore);
  }

  /** The detector every Netty buffer is tracked by. */
  @SuppressWarnings("unchecked")
  private static ResourceLeakDetector<ByteBuf> leakDetector()
      throws ReflectiveOperationException {
    Field f = io.netty.buffer.AbstractByteBuf.class.getDeclaredField("leakDetector");
    f.setAccessible(true);
    return (ResourceLeakDetector<ByteBuf>) f.get(null);
  }

  @Test
  void eachRouteSendsTheClientsBodyAndStreamsTheAnswerWhole() throws Exception {
    for (String route : ROUTES) {
      for (boolean chunked : List.of(false, true)) {
        String as = route + (chunked ? " chunked" : "");
        int before = completed.usages.size();
        String body = "{\"model\":\"m\",\"prompt\":\"read before epp4j " + as + "\"}";
        HttpResponse<String> r = post(route + "/v1/completions", body, chunked);
        assertThat(r.statusCode()).as(as).isEqualTo(200);
        assertThat(A.lastBody.get()).as(as).isEqualTo(body);
        assertThat(r.body()).as(as).contains("\"cached_tokens\":" + StandInReplica.CACHED);
        await(() -> completed.usages.size() > before);

        String stream = "{\"model\":\"m\",\"stream\":true,\"stream_options\":"
            + "{\"include_usage\":true},\"prompt\":\"stream " + as + "\"}";
        HttpResponse<String> s = post(route + "/v1/completions", stream, chunked);
        assertThat(s.statusCode()).as(as).isEqualTo(200);
        assertThat(A.lastBody.get()).as(as).isEqualTo(stream);
        assertThat(s.body()).as(as).contains("\"text\":\"a\"", "\"text\":\"b\"", "\"usage\":{")
            .endsWith("data: [DONE]\n\n");
      }
    }
    awaitNoneInFlight();
    assertNoLeak();
  }

  @Test
  void aBodyAboveTheLimitIs413AndAMalformedOne400OnEachRoute() throws Exception {
    int served = A.served.get();
    String big = "{\"model\":\"m\",\"prompt\":\"" + "x".repeat(40 << 10) + "\"}";
    for (String route : ROUTES) {
      for (boolean chunked : List.of(false, true)) {
        String as = route + (chunked ? " chunked" : "");
        HttpResponse<String> tooLarge = post(route + "/v1/completions", big, chunked);
        assertThat(tooLarge.statusCode()).as(as).isEqualTo(413);
        assertThat(JSON.readTree(tooLarge.body()).path("error").path("type").asText()).as(as)
            .isEqualTo("request_too_large");

        HttpResponse<String> malformed = post(route + "/v1/chat/completions", "{\"model\":",
            chunked);
        assertThat(malformed.statusCode()).as(as).isEqualTo(400);
        assertThat(JSON.readTree(malformed.body()).path("error").path("type").asText()).as(as)
            .isEqualTo("routing_invalid_request");
      }
    }
    assertThat(A.served.get()).isEqualTo(served);
    awaitNoneInFlight();
    assertNoLeak();
  }

  @Test
  void behindTheRetryFilterAnAttemptThatFailedIsRepeatedWithTheSameBody() throws Exception {
    for (String route : List.of("/cached-retried", "/read-retried", "/retried")) {
      A.failNext.set(1); // the first attempt is a 500, the Retry filter sends the body again
      int served = A.served.get();
      String body = "{\"model\":\"m\",\"prompt\":\"again " + route + "\"}";
      HttpResponse<String> r = post(route + "/v1/completions", body, false);
      assertThat(r.statusCode()).as(route).isEqualTo(200);
      assertThat(A.lastBody.get()).as(route).isEqualTo(body);
      assertThat(A.served.get()).as(route).isEqualTo(served + 2);
    }
    awaitNoneInFlight();
    assertNoLeak();
  }

  private HttpResponse<String> post(String path, String body, boolean chunked) throws Exception {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    HttpRequest.BodyPublisher publisher = chunked
        ? HttpRequest.BodyPublishers.ofInputStream(() -> new ByteArrayInputStream(bytes))
        : HttpRequest.BodyPublishers.ofByteArray(bytes);
    HttpRequest request = HttpRequest.newBuilder(
            URI.create("http://127.0.0.1:" + port + path))
        .timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json")
        .POST(publisher)
        .build();
    return CLIENT.send(request, HttpResponse.BodyHandlers.ofString());
  }

  /**
   * Collects garbage and has Netty track new buffers, which is when its detector reports the
   * tracked buffers that were collected without having been released.
   */
  private static void assertNoLeak() throws InterruptedException {
    collectAndReport();
    assertThat(LEAKS).isEmpty();
  }

  /** Collects dropped buffers and has the detector report them, as buffers are allocated. */
  private static void collectAndReport() throws InterruptedException {
    for (int round = 0; round < 5; round++) {
      System.gc();
      Thread.sleep(50);
      List<ByteBuf> probes = new ArrayList<>();
      for (int i = 0; i < 64; i++) {
        probes.add(PooledByteBufAllocator.DEFAULT.directBuffer(16));
      }
      probes.forEach(ByteBuf::release);
    }
  }

  private void awaitNoneInFlight() throws InterruptedException {
    Http2Requests.awaitNoneInFlight(router);
  }
}
