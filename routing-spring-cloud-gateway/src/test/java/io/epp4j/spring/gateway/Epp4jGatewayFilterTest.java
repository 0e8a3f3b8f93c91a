package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
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
import org.springframework.cloud.gateway.filter.GatewayFilterChain;
import org.springframework.cloud.gateway.route.RouteLocator;
import org.springframework.cloud.gateway.route.builder.RouteLocatorBuilder;
import org.springframework.context.annotation.Bean;
import org.springframework.core.Ordered;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * The real gateway on a random port, one route {@code /v1/**} with the {@code Epp4j} filter from
 * properties, two stand-in replicas on loopback; a second route {@code /retried/v1/**} puts
 * SCG's {@code Retry} filter (POST, on 5xx) in front of it; a third, {@code /wrapped/v1/**} from
 * the Java DSL, has the {@code Epp4j} filter inside a filter of the application's own.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jGatewayFilterTest.App.class,
    properties = {
        "spring.cloud.gateway.server.webflux.routes[0].id=llm",
        "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=Epp4j",
        "spring.cloud.gateway.server.webflux.routes[1].id=retried",
        "spring.cloud.gateway.server.webflux.routes[1].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[1].predicates[0]=Path=/retried/v1/**",
        "spring.cloud.gateway.server.webflux.routes[1].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[1].filters[1].name=Retry",
        "spring.cloud.gateway.server.webflux.routes[1].filters[1].args.retries=2",
        "spring.cloud.gateway.server.webflux.routes[1].filters[1].args.methods=POST",
        "spring.cloud.gateway.server.webflux.routes[1].filters[1].args.series=SERVER_ERROR",
        "spring.cloud.gateway.server.webflux.routes[1].filters[2]=Epp4j",
        "epp4j.metrics.enabled=false",
        "epp4j.max-body-size=32KB"})
@Timeout(60)
class Epp4jGatewayFilterTest {
  static final StandInReplica A = StandInReplica.start("a");
  static final StandInReplica B = StandInReplica.start("b");
  static final ObjectMapper JSON = new ObjectMapper();
  static final HttpClient CLIENT = HttpClient.newBuilder()
      .version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(5)).build();

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", () -> A.id() + "," + B.id());
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Outcomes outcomes() {
      return new Outcomes();
    }

    @Bean
    RouteLocator wrappedRoute(RouteLocatorBuilder routes, Epp4jGatewayFilterFactory epp4j) {
      return routes.routes().route("wrapped", r -> r.path("/wrapped/v1/**")
          .filters(f -> f.stripPrefix(1).filter(new Timed(epp4j.filter())))
          .uri("http://replica.invalid")).build();
    }
  }

  /** An application's own filter around the Epp4j filter, as a timing wrapper would be. */
  record Timed(GatewayFilter delegate) implements GatewayFilter, Ordered {
    @Override
    public Mono<Void> filter(ServerWebExchange exchange, GatewayFilterChain chain) {
      long start = System.nanoTime();
      return delegate.filter(exchange, chain)
          .doFinally(s -> exchange.getAttributes().put("timed", System.nanoTime() - start));
    }

    @Override
    public int getOrder() {
      return Epp4jGatewayFilterFactory.ORDER;
    }
  }

  /** What the router heard back from the filter, through the decisions' listeners. */
  static final class Outcomes implements RequestListener {
    final List<Usage> completed = new CopyOnWriteArrayList<>();
    final AtomicInteger firstTokens = new AtomicInteger();
    final AtomicInteger failures = new AtomicInteger();

    @Override
    public void onFirstToken(InferenceRequest request, Endpoint endpoint) {
      firstTokens.incrementAndGet();
    }

    @Override
    public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
        RoutingDecision d) {
      // a header a routing plugin asks for on the endpoint's answer, as a session token is
      d.setResponseHeader("x-served-token", decision -> decision.servedBy().id());
    }

    @Override
    public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
      completed.add(usage);
    }

    /** Run at each failure, when set. */
    final java.util.concurrent.atomic.AtomicReference<Runnable> onFailure =
        new java.util.concurrent.atomic.AtomicReference<>();

    @Override
    public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
      failures.incrementAndGet();
      Runnable hook = onFailure.get();
      if (hook != null) {
        hook.run();
      }
    }
  }

  @Value("${local.server.port}")
  int port;
  @Autowired
  Router router;
  @Autowired
  Outcomes outcomes;

  @AfterAll
  static void stopReplicas() {
    A.close();
    B.close();
  }

  @Test
  void requestsSharingALongPrefixLandOnTheSameReplicaAndReportUsage() throws Exception {
    String prefix = "You are a careful assistant. ".repeat(300); // ~8.7 kB, many KV blocks
    Set<String> replicas = new HashSet<>();
    Set<String> destinations = new HashSet<>();
    int before = outcomes.completed.size();
    for (int i = 0; i < 6; i++) {
      HttpResponse<String> r = post("/v1/completions",
          "{\"model\":\"m\",\"prompt\":\"" + prefix + "question " + i + "\"}");
      assertThat(r.statusCode()).isEqualTo(200);
      replicas.add(r.headers().firstValue("x-replica").orElseThrow());
      destinations.add(r.headers().firstValue(RoutingDecision.DESTINATION_HEADER).orElseThrow());
      awaitNoneInFlight();
    }
    assertThat(replicas).hasSize(1);
    assertThat(destinations).hasSize(1);
    String expected = replicas.contains("a") ? A.id() : B.id();
    assertThat(destinations).containsExactly(expected);
    await(() -> outcomes.completed.size() >= before + 6);
    assertThat(outcomes.completed.subList(before, before + 6))
        .allSatisfy(u -> {
          assertThat(u.cachedTokens()).isEqualTo(StandInReplica.CACHED);
          assertThat(u.completionTokens()).isEqualTo(2);
          assertThat(u.promptTokens()).isGreaterThan(1000);
        });
  }

  @Test
  void sseChunksReachTheClientBeforeTheReplicaSendsItsLastAndUsageIsReported() throws Exception {
    CountDownLatch gate = new CountDownLatch(1);
    A.gate.set(gate);
    B.gate.set(gate);
    int lastBefore = A.lastChunksSent.get() + B.lastChunksSent.get();
    int before = outcomes.completed.size();
    try {
      HttpRequest req = HttpRequest.newBuilder(uri("/v1/chat/completions"))
          .timeout(Duration.ofSeconds(20))
          .header("content-type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"m\",\"stream\":true,"
              + "\"stream_options\":{\"include_usage\":true},"
              + "\"messages\":[{\"role\":\"user\",\"content\":\"stream me\"}]}"))
          .build();
      HttpResponse<InputStream> r = CLIENT.send(req, HttpResponse.BodyHandlers.ofInputStream());
      assertThat(r.statusCode()).isEqualTo(200);
      assertThat(r.headers().firstValue("content-type").orElse("")).startsWith("text/event-stream");
      try (BufferedReader in = new BufferedReader(
          new InputStreamReader(r.body(), StandardCharsets.UTF_8))) {
        String first = CompletableFuture.supplyAsync(() -> firstDataLine(in))
            .get(10, TimeUnit.SECONDS);
        assertThat(first).contains("\"text\":\"a\"");
        // the replica is still held at its gate: the chunk was not buffered until the end
        assertThat(A.lastChunksSent.get() + B.lastChunksSent.get()).isEqualTo(lastBefore);
        assertThat(outcomes.firstTokens.get()).isPositive();
        gate.countDown();
        StringBuilder rest = new StringBuilder();
        CompletableFuture.runAsync(() -> in.lines().forEach(l -> rest.append(l).append('\n')))
            .get(10, TimeUnit.SECONDS);
        assertThat(rest.toString()).contains("\"usage\":{").endsWith("data: [DONE]\n\n");
      }
    } finally {
      gate.countDown();
    }
    awaitNoneInFlight();
    await(() -> outcomes.completed.size() > before);
    Usage u = outcomes.completed.get(outcomes.completed.size() - 1);
    assertThat(u.cachedTokens()).isEqualTo(StandInReplica.CACHED);
    assertThat(u.completionTokens()).isEqualTo(2);
  }

  @Test
  void aClientThatGoesAwayMidStreamIsReportedAndNothingStaysInFlight() throws Exception {
    CountDownLatch gate = new CountDownLatch(1);
    A.gate.set(gate);
    B.gate.set(gate);
    int failuresBefore = outcomes.failures.get();
    int completedBefore = outcomes.completed.size();
    byte[] body = ("{\"model\":\"m\",\"stream\":true,\"prompt\":\"leave early\"}")
        .getBytes(StandardCharsets.UTF_8);
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(10_000);
      OutputStream out = s.getOutputStream();
      writePost(out, "/v1/completions", body);
      BufferedReader in = new BufferedReader(
          new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
      assertThat(firstDataLine(in)).contains("\"text\":\"a\"");
      assertThat(inFlight()).isEqualTo(1);
    } // the client hangs up while the replica is still generating
    try {
      awaitNoneInFlight();
      await(() -> outcomes.failures.get() > failuresBefore);
    } finally {
      gate.countDown();
    }
    // once, as a failure: the replica's stream, released by the gate, ends no second time
    Thread.sleep(300);
    assertThat(outcomes.failures.get()).isEqualTo(failuresBefore + 1);
    assertThat(outcomes.completed).hasSize(completedBefore);
    assertThat(inFlight()).isZero();
  }

  /**
   * curl and other clients close the connection once they have read the Content-Length's bytes,
   * which may be before the end of the replica's body reaches the filter: such a request was
   * failed as a client going away (about one in seven on loopback), though the replica served it
   * all and the client got it whole.
   */
  @Test
  void aClientThatHangsUpOnceItHasTheWholeAnswerCompletesItsDecision() throws Exception {
    int completedBefore = outcomes.completed.size();
    int failuresBefore = outcomes.failures.get();
    int n = 60;
    for (int i = 0; i < n; i++) {
      byte[] body = ("{\"model\":\"m\",\"prompt\":\"read whole " + i + "\"}")
          .getBytes(StandardCharsets.UTF_8);
      try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
        s.setSoTimeout(10_000);
        writePost(s.getOutputStream(), "/v1/completions", body);
        BufferedReader in = asciiReader(s);
        assertThat(in.readLine()).startsWith("HTTP/1.1 200");
        assertThat(readKeptAliveAnswer(in, false)).contains("\"text\"");
      } // hangs up at once
    }
    awaitNoneInFlight();
    await(() -> outcomes.completed.size() + outcomes.failures.get()
        >= completedBefore + failuresBefore + n);
    assertThat(outcomes.failures.get()).isEqualTo(failuresBefore);
    assertThat(outcomes.completed).hasSize(completedBefore + n);
  }

  /**
   * A streaming client stops reading at {@code data: [DONE]} and may hang up before the end of
   * the replica's chunked body reaches the gateway: the replica served the whole stream and the
   * client got all of it, so the decision completes with the stream's usage.
   */
  @Test
  void aStreamingClientThatHangsUpRightAfterDataDoneCompletesItsDecision() throws Exception {
    CountDownLatch hold = new CountDownLatch(1);
    A.holdAfterDone.set(hold);
    B.holdAfterDone.set(hold);
    int failuresBefore = outcomes.failures.get();
    int completedBefore = outcomes.completed.size();
    byte[] body = ("{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        + "\"prompt\":\"hang up at done\"}").getBytes(StandardCharsets.UTF_8);
    try {
      try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
        s.setSoTimeout(10_000);
        writePost(s.getOutputStream(), "/v1/completions", body);
        BufferedReader in = asciiReader(s);
        assertThat(in.readLine()).startsWith("HTTP/1.1 200");
        boolean done = false;
        for (String line; !done && (line = in.readLine()) != null; ) {
          done = line.equals("data: [DONE]");
        }
        assertThat(done).as("the stream reached data: [DONE]").isTrue();
        // the replica holds the end of its body: the gateway is still relaying the stream
        assertThat(inFlight()).isEqualTo(1);
      } // hangs up, as a client that has its [DONE] does
      awaitNoneInFlight();
    } finally {
      hold.countDown();
      A.holdAfterDone.set(new CountDownLatch(0));
      B.holdAfterDone.set(new CountDownLatch(0));
    }
    await(() -> outcomes.completed.size() + outcomes.failures.get()
        > completedBefore + failuresBefore);
    assertThat(outcomes.failures.get()).isEqualTo(failuresBefore);
    assertThat(outcomes.completed).hasSize(completedBefore + 1);
    assertThat(outcomes.completed.get(completedBefore).completionTokens()).isEqualTo(2);
  }

  /**
   * A client that asks before it sends its body ({@code Expect: 100-continue}, as curl does for
   * large bodies) gets the interim 100, and its body is routed and served.
   */
  @Test
  void aClientExpecting100ContinueGetsItAndItsBodyIsRouted() throws Exception {
    int completedBefore = outcomes.completed.size();
    byte[] body = "{\"model\":\"m\",\"prompt\":\"continue\"}".getBytes(StandardCharsets.UTF_8);
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(10_000);
      OutputStream out = s.getOutputStream();
      out.write(("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
          + "Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: "
          + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
      out.flush();
      BufferedReader in = asciiReader(s);
      assertThat(in.readLine()).startsWith("HTTP/1.1 100");
      assertThat(in.readLine()).isEmpty();
      out.write(body);
      out.flush();
      assertThat(in.readLine()).startsWith("HTTP/1.1 200");
      assertThat(readKeptAliveAnswer(in, true)).contains("\"text\"");
    }
    awaitNoneInFlight();
    await(() -> outcomes.completed.size() > completedBefore);
  }

  @Test
  void aReplicaThatBreaksOffMidStreamFailsTheDecisionAndCutsTheClientOff() throws Exception {
    int failuresBefore = outcomes.failures.get();
    int completedBefore = outcomes.completed.size();
    A.breakOffAfterDone = false;
    B.breakOffAfterDone = false;
    A.breakOffNext.set(1);
    B.breakOffNext.set(1);
    try {
      HttpRequest req = HttpRequest.newBuilder(uri("/v1/completions"))
          .timeout(Duration.ofSeconds(20)).header("content-type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString(
              "{\"model\":\"m\",\"stream\":true,\"prompt\":\"break off\"}")).build();
      HttpResponse<InputStream> r = CLIENT.send(req, HttpResponse.BodyHandlers.ofInputStream());
      assertThat(r.statusCode()).isEqualTo(200);
      StringBuilder got = new StringBuilder();
      boolean cut = false;
      try (BufferedReader in = new BufferedReader(
          new InputStreamReader(r.body(), StandardCharsets.UTF_8))) {
        for (String line; (line = in.readLine()) != null; ) {
          got.append(line).append('\n');
        }
      } catch (java.io.IOException e) {
        cut = true;
      }
      // what of the first chunk the client's reader hands over before the cut varies
      assertThat(got.toString()).doesNotContain("[DONE]");
      assertThat(cut).as("a cut-off answer must not end cleanly").isTrue();
    } finally {
      A.breakOffNext.set(0);
      B.breakOffNext.set(0);
    }
    awaitNoneInFlight();
    await(() -> outcomes.failures.get() > failuresBefore);
    assertThat(outcomes.completed).hasSize(completedBefore);
  }

  @Test
  void aReplicaThatBreaksOffAfterDataDoneCompletesTheDecision() throws Exception {
    // a server-sent stream is whole at data: [DONE] (clients stop reading there), as the plain
    // gateway and the Envoy server take it: the connection breaking after it is no failure
    int failuresBefore = outcomes.failures.get();
    int completedBefore = outcomes.completed.size();
    A.breakOffAfterDone = true;
    B.breakOffAfterDone = true;
    A.breakOffNext.set(1);
    B.breakOffNext.set(1);
    try {
      HttpRequest req = HttpRequest.newBuilder(uri("/v1/completions"))
          .timeout(Duration.ofSeconds(20)).header("content-type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"m\",\"stream\":true,"
              + "\"stream_options\":{\"include_usage\":true},\"prompt\":\"break after\"}"))
          .build();
      HttpResponse<String> r = CLIENT.send(req, HttpResponse.BodyHandlers.ofString());
      assertThat(r.statusCode()).isEqualTo(200);
      assertThat(r.body()).endsWith("data: [DONE]\n\n");
    } finally {
      A.breakOffNext.set(0);
      B.breakOffNext.set(0);
      A.breakOffAfterDone = false;
      B.breakOffAfterDone = false;
    }
    awaitNoneInFlight();
    await(() -> outcomes.completed.size() > completedBefore);
    assertThat(outcomes.completed.get(outcomes.completed.size() - 1).completionTokens())
        .isEqualTo(2);
    assertThat(outcomes.failures.get()).isEqualTo(failuresBefore);
  }

  @Test
  void aStreamBehindTheRetryFilterStaysInFlightUntilItsAnswerEndsAndIsCompleted()
      throws Exception {
    CountDownLatch gate = new CountDownLatch(1);
    A.gate.set(gate);
    B.gate.set(gate);
    int failuresBefore = outcomes.failures.get();
    int completedBefore = outcomes.completed.size();
    try {
      HttpRequest req = HttpRequest.newBuilder(uri("/retried/v1/completions"))
          .timeout(Duration.ofSeconds(20))
          .header("content-type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"m\",\"stream\":true,"
              + "\"stream_options\":{\"include_usage\":true},\"prompt\":\"retry if you must\"}"))
          .build();
      HttpResponse<InputStream> r = CLIENT.send(req, HttpResponse.BodyHandlers.ofInputStream());
      assertThat(r.statusCode()).isEqualTo(200);
      try (BufferedReader in = new BufferedReader(
          new InputStreamReader(r.body(), StandardCharsets.UTF_8))) {
        assertThat(CompletableFuture.supplyAsync(() -> firstDataLine(in))
            .get(10, TimeUnit.SECONDS)).contains("\"text\":\"a\"");
        // the replica is still generating: the request is still counted where it runs
        assertThat(inFlight()).isEqualTo(1);
        assertThat(outcomes.failures.get()).isEqualTo(failuresBefore);
        gate.countDown();
        StringBuilder rest = new StringBuilder();
        CompletableFuture.runAsync(() -> in.lines().forEach(l -> rest.append(l).append('\n')))
            .get(10, TimeUnit.SECONDS);
        assertThat(rest.toString()).endsWith("data: [DONE]\n\n");
      }
    } finally {
      gate.countDown();
    }
    awaitNoneInFlight();
    await(() -> outcomes.completed.size() > completedBefore);
    assertThat(outcomes.completed.get(outcomes.completed.size() - 1).completionTokens())
        .isEqualTo(2);
    assertThat(outcomes.failures.get()).isEqualTo(failuresBefore);
  }

  @Test
  void anAttemptTheRetryFilterRepeatsIsFinishedAndNothingStaysInFlight() throws Exception {
    int failuresBefore = outcomes.failures.get();
    int completedBefore = outcomes.completed.size();
    A.failNext.set(1); // whichever replica the first attempt lands on answers 500 once
    B.failNext.set(1);
    try {
      HttpResponse<String> r = post("/retried/v1/completions",
          "{\"model\":\"m\",\"prompt\":\"retry me\"}");
      assertThat(r.statusCode()).isEqualTo(200);
      assertThat(r.body()).contains("\"usage\"");
    } finally {
      A.failNext.set(0);
      B.failNext.set(0);
    }
    // each attempt had a decision of its own: the repeated ones failed, the last completed
    awaitNoneInFlight();
    await(() -> outcomes.failures.get() > failuresBefore);
    await(() -> outcomes.completed.size() > completedBefore);
  }

  @Test
  void aRepeatTheRouterRefusesDoesNotNameTheEarlierAttemptsEndpoint() throws Exception {
    // the 503 of the repeat carried x-gateway-destination-endpoint of the attempt before it,
    // whose 500 the client never saw: it named an endpoint that served nothing
    List<Endpoint> pool = new ArrayList<>();
    for (Candidate c : router.endpoints()) {
      pool.add(c.endpoint());
    }
    A.failNext.set(1); // whichever replica the first attempt lands on answers 500 once
    B.failNext.set(1);
    // the first attempt fails when the repeat supersedes it: the pool is gone by then
    outcomes.onFailure.set(() -> router.setEndpoints(List.of()));
    byte[] body = "{\"model\":\"m\",\"prompt\":\"retry me\"}".getBytes(StandardCharsets.US_ASCII);
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(10_000);
      OutputStream out = s.getOutputStream();
      BufferedReader in = asciiReader(s);
      writePost(out, "/retried/v1/completions", body);
      assertThat(in.readLine()).startsWith("HTTP/1.1 503");
      List<String> headers = new ArrayList<>();
      String answer = readKeptAliveAnswer(in, true, headers);
      assertThat(answer).contains("routing_no_endpoints");
      assertThat(headers).noneMatch(h -> h.startsWith(
          RoutingDecision.DESTINATION_HEADER.toLowerCase(java.util.Locale.ROOT) + ":"));
      // nor the headers the plugins asked for on the earlier attempt's answer
      assertThat(headers).noneMatch(h -> h.toLowerCase(java.util.Locale.ROOT)
          .startsWith("x-served-token:"));
      // Retry repeats after that 503 too: the repeat must leave the written answer alone (its
      // reset removed the first attempt's upstream headers from the committed, read-only
      // response, and the gateway closed the connection)
      outcomes.onFailure.set(null);
      A.failNext.set(0); // the replica the first attempt missed would still answer 500 once
      B.failNext.set(0);
      router.setEndpoints(pool);
      writePost(out, "/v1/completions", body);
      assertThat(in.readLine()).as("a second request on the same connection")
          .startsWith("HTTP/1.1 200");
    } finally {
      outcomes.onFailure.set(null);
      A.failNext.set(0);
      B.failNext.set(0);
      router.setEndpoints(pool);
    }
    awaitNoneInFlight(); // the second answer, left unread, is over before the next test counts
  }

  @Test
  void aRouteWithTheEpp4jFilterInsideTheApplicationsOwnFilterCompletesItsDecisions()
      throws Exception {
    // the response tap looked for the Epp4j filter in the route's filter list, where the
    // application's wrapper hid it: the answer went out unwatched and the decision stayed in
    // flight until in-flight-max-age
    int completedBefore = outcomes.completed.size();
    HttpResponse<String> r = post("/wrapped/v1/completions",
        "{\"model\":\"m\",\"prompt\":\"wrapped\"}");
    assertThat(r.statusCode()).isEqualTo(200);
    assertThat(r.headers().firstValue(RoutingDecision.DESTINATION_HEADER)).isPresent();
    awaitNoneInFlight();
    await(() -> outcomes.completed.size() > completedBefore);
    assertThat(outcomes.completed.get(outcomes.completed.size() - 1).completionTokens())
        .isEqualTo(2);
  }

  @Test
  void aMalformedRequestIsA400WithAnOpenAiError() throws Exception {
    int served = servedSoFar();
    HttpResponse<String> r = post("/v1/completions", "{\"prompt\":\"no model\"}");
    assertThat(r.statusCode()).isEqualTo(400);
    JsonNode error = JSON.readTree(r.body()).path("error");
    assertThat(error.path("type").asText()).isEqualTo("routing_invalid_request");
    assertThat(error.path("code").asInt()).isEqualTo(400);
    assertThat(error.path("message").asText()).contains("model");
    assertThat(r.headers().firstValue("Retry-After")).isEmpty();
    assertThat(servedSoFar()).isEqualTo(served);
  }

  /**
   * The router reads the body as sent: a compressed one is no JSON it can read, and before it was
   * refused as a 400 about invalid UTF-8, which named neither the header nor the cause. Identity
   * is no coding: that body is routed.
   */
  @Test
  void aCompressedBodyIsA415NamingContentEncodingAndIsNotRouted() throws Exception {
    int served = servedSoFar();
    byte[] json = "{\"model\":\"m\",\"prompt\":\"compressed\"}".getBytes(StandardCharsets.UTF_8);
    java.io.ByteArrayOutputStream zipped = new java.io.ByteArrayOutputStream();
    try (java.util.zip.GZIPOutputStream gz = new java.util.zip.GZIPOutputStream(zipped)) {
      gz.write(json);
    }
    HttpResponse<String> r = CLIENT.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json").header("content-encoding", "gzip")
        .POST(HttpRequest.BodyPublishers.ofByteArray(zipped.toByteArray())).build(),
        HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).isEqualTo(415);
    JsonNode error = JSON.readTree(r.body()).path("error");
    assertThat(error.path("type").asText()).isEqualTo("unsupported_content_encoding");
    assertThat(error.path("message").asText()).contains("Content-Encoding", "gzip");
    assertThat(r.headers().firstValue("accept-encoding")).hasValue("identity");
    assertThat(r.headers().firstValue(RoutingDecision.DESTINATION_HEADER)).isEmpty();
    assertThat(servedSoFar()).isEqualTo(served);
    assertThat(inFlight()).isZero();

    HttpResponse<String> identity = CLIENT.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json").header("content-encoding", "identity")
        .POST(HttpRequest.BodyPublishers.ofByteArray(json)).build(),
        HttpResponse.BodyHandlers.ofString());
    assertThat(identity.statusCode()).isEqualTo(200);
    awaitNoneInFlight();
  }

  @Test
  void aBodyAboveTheLimitIsA413WhetherItsLengthIsDeclaredOrNot() throws Exception {
    String big = "{\"model\":\"m\",\"prompt\":\"" + "x".repeat(40 * 1024) + "\"}";
    int served = A.served.get() + B.served.get();
    HttpResponse<String> declared = post("/v1/completions", big);
    assertThat(declared.statusCode()).isEqualTo(413);
    assertThat(JSON.readTree(declared.body()).path("error").path("type").asText())
        .isEqualTo("request_too_large");

    HttpRequest chunked = HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofInputStream(
            () -> new ByteArrayInputStream(big.getBytes(StandardCharsets.UTF_8))))
        .build();
    HttpResponse<String> streamed = CLIENT.send(chunked, HttpResponse.BodyHandlers.ofString());
    assertThat(streamed.statusCode()).isEqualTo(413);
    assertThat(JSON.readTree(streamed.body()).path("error").path("code").asInt()).isEqualTo(413);
    // refused mid-body: the rest is not read through before the next request on the connection
    assertThat(streamed.headers().firstValue("connection")).hasValue("close");
    assertThat(A.served.get() + B.served.get()).isEqualTo(served);
  }

  @Test
  void aDeclaredLengthALittleAboveTheLimitIsReadAndDroppedSoThe413ArrivesAndTheConnectionStays()
      throws Exception {
    // answered and closed while the client was still sending, the 413 was lost under a reset
    // now and then; a body this size is taken and dropped, and the connection serves on
    byte[] body = ("{\"model\":\"m\",\"prompt\":\"" + "x".repeat(40 * 1024) + "\"}")
        .getBytes(StandardCharsets.US_ASCII);
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(10_000);
      OutputStream out = s.getOutputStream();
      BufferedReader in = asciiReader(s);
      for (int i = 0; i < 2; i++) {
        writePost(out, "/v1/completions", body);
        assertThat(in.readLine()).as("request %d", i).startsWith("HTTP/1.1 413");
        assertThat(readKeptAliveAnswer(in, true)).contains("request_too_large");
      }
    }
  }

  /** A reader of a raw connection's answers. */
  private static BufferedReader asciiReader(Socket s) throws java.io.IOException {
    return new BufferedReader(new InputStreamReader(s.getInputStream(),
        StandardCharsets.US_ASCII));
  }

  /** Sends a JSON POST of {@code body} to {@code path} on a raw connection. */
  private static void writePost(OutputStream out, String path, byte[] body)
      throws java.io.IOException {
    out.write(("POST " + path + " HTTP/1.1\r\nHost: localhost\r\n"
        + "Content-Type: application/json\r\nContent-Length: " + body.length + "\r\n\r\n")
        .getBytes(StandardCharsets.US_ASCII));
    out.write(body);
    out.flush();
  }

  /**
   * Reads the headers after the status line and the body of one answer on a raw connection;
   * with {@code keepsConnection}, asserts the answer does not close it.
   */
  private static String readKeptAliveAnswer(BufferedReader in, boolean keepsConnection)
      throws java.io.IOException {
    return readKeptAliveAnswer(in, keepsConnection, new ArrayList<>());
  }

  /** {@link #readKeptAliveAnswer(BufferedReader, boolean)}, adding each header, lower case. */
  private static String readKeptAliveAnswer(BufferedReader in, boolean keepsConnection,
      List<String> headers) throws java.io.IOException {
    int length = -1;
    for (String line = in.readLine(); !line.isEmpty(); line = in.readLine()) {
      String lower = line.toLowerCase(java.util.Locale.ROOT);
      headers.add(lower);
      if (keepsConnection) {
        assertThat(lower).doesNotStartWith("connection: close");
      }
      if (lower.startsWith("content-length:")) {
        length = Integer.parseInt(lower.substring(15).trim());
      }
    }
    char[] answer = new char[length];
    for (int got = 0; got < length; ) {
      got += in.read(answer, got, length - got);
    }
    return new String(answer);
  }

  @Test
  void a413ForADeclaredLengthAboveTheLimitClosesTheConnection() throws Exception {
    // Reactor Netty reads and drops the rest of a body the answer did not read: on a keep-alive
    // connection it went on taking the whole declared gigabyte, which the client need not send
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(10_000);
      OutputStream out = s.getOutputStream();
      out.write(("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
          + "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n"
          + "{\"model\":\"m\",\"prompt\":\"").getBytes(StandardCharsets.US_ASCII));
      out.flush();
      // the whole answer, up to the server closing the connection (a timeout fails the test)
      String answer = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertThat(answer).startsWith("HTTP/1.1 413");
      assertThat(answer.toLowerCase(java.util.Locale.ROOT)).contains("\r\nconnection: close\r\n")
          .contains("request_too_large");
    }
  }

  @Test
  void aBodyAboveTheLimitThatAnotherFilterCachedIsA413() throws Exception {
    // the Retry filter has the gateway cache the body before the route's filters run
    String big = "{\"model\":\"m\",\"prompt\":\"" + "x".repeat(40 * 1024) + "\"}";
    int served = servedSoFar();
    HttpRequest chunked = HttpRequest.newBuilder(uri("/retried/v1/completions"))
        .timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofInputStream(
            () -> new ByteArrayInputStream(big.getBytes(StandardCharsets.UTF_8))))
        .build();
    HttpResponse<String> r = CLIENT.send(chunked, HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).isEqualTo(413);
    JsonNode error = JSON.readTree(r.body()).path("error");
    assertThat(error.path("type").asText()).isEqualTo("request_too_large");
    assertThat(error.path("code").asInt()).isEqualTo(413);
    assertThat(servedSoFar()).isEqualTo(served);
  }

  @Test
  void behindTheRetryFilterABodyIsRefusedOnceItPassesTheLimitNotAfterItWasReadWhole()
      throws Exception {
    // the Retry filter has SCG read the whole body into its cache before the route's filters
    // run: the Epp4j filter's size check came after the body was buffered in full, and the
    // request waited for all of it, however long. Here the client sends more than the limit
    // (32 KB) and stops without ending the body: the 413 must come all the same
    int served = servedSoFar();
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(10_000);
      OutputStream out = s.getOutputStream();
      StringBuilder request = new StringBuilder("POST /retried/v1/completions HTTP/1.1\r\n"
          + "Host: localhost\r\nContent-Type: application/json\r\n"
          + "Transfer-Encoding: chunked\r\n\r\n");
      for (int i = 0; i < 8; i++) { // 8 chunks of 4 KB: the limit, not above it
        request.append("1000\r\n").append("x".repeat(4096)).append("\r\n");
      }
      // one byte more passes the limit; it is the last byte sent (not even the chunk's line end
      // follows), so the server's close leaves nothing of ours unread, which would reset the
      // connection under its answer
      request.append("1\r\nx");
      out.write(request.toString().getBytes(StandardCharsets.US_ASCII));
      out.flush(); // the body never ends
      // the whole answer, up to the server closing the connection (a timeout fails the test)
      String answer = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertThat(answer).startsWith("HTTP/1.1 413");
      assertThat(answer.toLowerCase(java.util.Locale.ROOT)).contains("\r\nconnection: close\r\n")
          .contains("request_too_large");
    }
    assertThat(servedSoFar()).isEqualTo(served);
  }

  @Test
  void behindTheRetryFilterADeclaredLengthAboveTheLimitIsRefusedBeforeTheBodyIsRead()
      throws Exception {
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(10_000);
      OutputStream out = s.getOutputStream();
      out.write(("POST /retried/v1/completions HTTP/1.1\r\nHost: localhost\r\n"
          + "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n"
          + "{\"model\":\"m\",\"prompt\":\"").getBytes(StandardCharsets.US_ASCII));
      out.flush();
      String answer = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertThat(answer).startsWith("HTTP/1.1 413");
      assertThat(answer.toLowerCase(java.util.Locale.ROOT)).contains("\r\nconnection: close\r\n")
          .contains("request_too_large");
    }
  }

  @Test
  void anEmptyPoolIsA503WithRetryAfter() throws Exception {
    List<Endpoint> pool = new ArrayList<>();
    for (Candidate c : router.endpoints()) {
      pool.add(c.endpoint());
    }
    router.setEndpoints(List.of());
    try {
      HttpResponse<String> r = post("/v1/completions", "{\"model\":\"m\",\"prompt\":\"hi\"}");
      assertThat(r.statusCode()).isEqualTo(503);
      assertThat(r.headers().firstValue("Retry-After")).contains("1");
      JsonNode error = JSON.readTree(r.body()).path("error");
      assertThat(error.path("type").asText()).isEqualTo("routing_no_endpoints");
      assertThat(error.path("code").asInt()).isEqualTo(503);
    } finally {
      router.setEndpoints(pool);
    }
  }

  @Test
  void behindTheRetryFilterTheFiltersOwn502IsFinalAndNotRoutedAgain() throws Exception {
    // the Retry filter (POST, 5xx) repeated after the 502 the filter had written already: each
    // repeat routed the request again (a decision of its own, failed on the committed response),
    // with an error logged and the client's connection closed
    List<Endpoint> pool = new ArrayList<>();
    for (Candidate c : router.endpoints()) {
      pool.add(c.endpoint());
    }
    int deadPort;
    try (java.net.ServerSocket closed = new java.net.ServerSocket(0, 1,
        InetAddress.getLoopbackAddress())) {
      deadPort = closed.getLocalPort(); // refuses connections once closed
    }
    byte[] body = "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.US_ASCII);
    router.setEndpoints(List.of(Endpoint.of("127.0.0.1", deadPort)));
    int failuresBefore = outcomes.failures.get();
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(10_000);
      OutputStream out = s.getOutputStream();
      BufferedReader in = asciiReader(s);
      // the second request is read once the first exchange has ended, repeats included
      for (int i = 0; i < 2; i++) {
        writePost(out, "/retried/v1/completions", body);
        assertThat(in.readLine()).as("request %d", i).startsWith("HTTP/1.1 502");
        assertThat(readKeptAliveAnswer(in, false)).contains("upstream_unavailable");
      }
      // one decision per request, failed once its replica could not be reached
      assertThat(outcomes.failures.get() - failuresBefore).isEqualTo(2);
    } finally {
      router.setEndpoints(pool);
    }
    awaitNoneInFlight();
  }

  @Test
  void aSheddableRequestOnASaturatedPoolIsA429WithRetryAfter() throws Exception {
    // no metrics are scraped in this test, and the EPP counts an endpoint without metrics as full
    int served = servedSoFar();
    HttpResponse<String> r = CLIENT.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json")
        .header("x-request-priority", "-1")
        .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"m\",\"prompt\":\"hi\"}"))
        .build(), HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).isEqualTo(429);
    assertThat(r.headers().firstValue("Retry-After")).contains("1");
    JsonNode error = JSON.readTree(r.body()).path("error");
    assertThat(error.path("type").asText()).isEqualTo("routing_shed");
    assertThat(error.path("code").asInt()).isEqualTo(429);
    assertThat(servedSoFar()).isEqualTo(served);
  }

  @Test
  void aGetIsRoutedByLoadToAReplicaAndItsDecisionCompleted() throws Exception {
    // a GET passed through to the route's placeholder URI: a 500 and an unknown host logged
    assertServedByAReplicaAndCompleted(() -> get("/v1/models"));
  }

  /** The request {@code send} makes is answered by a replica of the pool, and completed. */
  private void assertServedByAReplicaAndCompleted(
      java.util.concurrent.Callable<HttpResponse<String>> send) throws Exception {
    int served = servedSoFar();
    int completed = outcomes.completed.size();
    HttpResponse<String> r = send.call();
    assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
    assertThat(r.headers().firstValue(RoutingDecision.DESTINATION_HEADER))
        .hasValueSatisfying(v -> assertThat(v).isIn(A.id(), B.id()));
    assertThat(servedSoFar()).isEqualTo(served + 1);
    await(() -> outcomes.completed.size() > completed);
    awaitNoneInFlight();
  }

  /**
   * vLLM takes some POSTs without a body ({@code /reset_prefix_cache}, {@code /sleep}): such a
   * request is routed by load on its headers, as a GET is. Before, it was a 400 (an empty body is
   * no OpenAI request).
   */
  @Test
  void aPostWithoutABodyIsRoutedByLoadAndItsDecisionCompleted() throws Exception {
    assertServedByAReplicaAndCompleted(() -> CLIENT.send(
        HttpRequest.newBuilder(uri("/v1/reset_prefix_cache")).timeout(Duration.ofSeconds(20))
            .POST(HttpRequest.BodyPublishers.noBody()).build(),
        HttpResponse.BodyHandlers.ofString()));
  }

  @Test
  void aGetWhoseReplicaAnswers5xxFailsItsDecisionAndNothingStaysInFlight() throws Exception {
    int failuresBefore = outcomes.failures.get();
    A.failNext.set(1);
    B.failNext.set(1);
    try {
      HttpResponse<String> r = get("/v1/models");
      assertThat(r.statusCode()).isEqualTo(500);
      await(() -> outcomes.failures.get() > failuresBefore);
      awaitNoneInFlight();
    } finally {
      A.failNext.set(0);
      B.failNext.set(0);
    }
  }

  @Test
  void aGetsHeadersCountAsAPostsPrioritySheddingAndMalformedPriority() throws Exception {
    // no metrics are scraped in this test, and the EPP counts an endpoint without metrics as full
    int served = servedSoFar();
    HttpResponse<String> shed = CLIENT.send(HttpRequest.newBuilder(uri("/v1/models"))
        .timeout(Duration.ofSeconds(20)).header("x-request-priority", "-1").GET().build(),
        HttpResponse.BodyHandlers.ofString());
    assertThat(shed.statusCode()).isEqualTo(429);
    assertThat(shed.headers().firstValue("Retry-After")).contains("1");
    assertThat(JSON.readTree(shed.body()).at("/error/type").asText()).isEqualTo("routing_shed");
    HttpResponse<String> bad = CLIENT.send(HttpRequest.newBuilder(uri("/v1/models"))
        .timeout(Duration.ofSeconds(20)).header("x-request-priority", "high").GET().build(),
        HttpResponse.BodyHandlers.ofString());
    assertThat(bad.statusCode()).isEqualTo(400);
    JsonNode error = JSON.readTree(bad.body()).path("error");
    assertThat(error.path("type").asText()).isEqualTo("routing_invalid_request");
    assertThat(error.path("message").asText()).contains("x-request-priority");
    assertThat(servedSoFar()).isEqualTo(served);
    assertThat(inFlight()).isZero();
  }

  private HttpResponse<String> get(String path) throws Exception {
    return CLIENT.send(HttpRequest.newBuilder(uri(path))
        .timeout(Duration.ofSeconds(20)).GET().build(), HttpResponse.BodyHandlers.ofString());
  }

  private int servedSoFar() {
    return A.served.get() + B.served.get();
  }

  private static String firstDataLine(BufferedReader in) {
    try {
      for (String line; (line = in.readLine()) != null; ) {
        if (line.startsWith("data:")) {
          return line;
        }
      }
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
    throw new AssertionError("stream ended without data");
  }

  private int inFlight() {
    int n = 0;
    for (Candidate c : router.endpoints()) {
      n += c.inFlightRequests();
    }
    return n;
  }

  private void awaitNoneInFlight() throws InterruptedException {
    await(() -> inFlight() == 0);
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

  private URI uri(String path) {
    return URI.create("http://127.0.0.1:" + port + path);
  }

  private HttpResponse<String> post(String path, String body) throws Exception {
    return CLIENT.send(HttpRequest.newBuilder(uri(path))
        .timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofString());
  }
}
