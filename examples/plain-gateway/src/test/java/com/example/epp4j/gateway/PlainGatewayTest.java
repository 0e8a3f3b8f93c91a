package com.example.epp4j.gateway;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** Stand-in vLLM replicas (and a few deliberately broken ones) on loopback behind the gateway. */
class PlainGatewayTest {
  static final ObjectMapper JSON = new ObjectMapper();
  static final Duration DEADLINE = Duration.ofSeconds(10);

  final List<AutoCloseable> open = new ArrayList<>();
  final HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
  final Outcomes outcomes = new Outcomes();
  PlainGateway gateway;

  /** Records what the router was told about each request. */
  static class Outcomes implements RequestListener {
    final AtomicInteger firstTokens = new AtomicInteger();
    final List<Usage> completions = new CopyOnWriteArrayList<>();
    final List<Throwable> failures = new CopyOnWriteArrayList<>();
    final List<String> completedOn = new CopyOnWriteArrayList<>();
    final List<String> fallbacks = new CopyOnWriteArrayList<>();

    @Override
    public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
      fallbacks.add(from.id() + ">" + to.id());
    }

    @Override
    public void onFirstToken(InferenceRequest request, Endpoint endpoint) {
      firstTokens.incrementAndGet();
    }

    @Override
    public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
      completions.add(usage);
      completedOn.add(endpoint.id());
    }

    @Override
    public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
      failures.add(cause);
    }
  }

  StandInVllm standIn(Duration ttft, Duration itl) throws IOException {
    StandInVllm s = StandInVllm.start(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0),
        StandInVllm.Options.defaults().withModel("qwen3").withLatency(ttft, itl)
            .withPromptTokensDetails(true));
    open.add(s);
    return s;
  }

  StandInVllm standIn() throws IOException {
    return standIn(Duration.ZERO, Duration.ZERO);
  }

  static Endpoint at(int port) {
    return Endpoint.of("127.0.0.1", port);
  }

  /**
   * A gateway whose decisions name two endpoints, taking turns for the primary (round robin):
   * every request whose primary is the first replica names the second as its fallback.
   */
  void startFallbackGateway(Endpoint first, Endpoint second) throws IOException {
    Router router = Router.builder().endpoints(List.of(first, second)).listener(outcomes)
        .configYaml("""
            plugins:
            - type: round-robin-picker
              parameters: {maxNumOfEndpoints: 2}
            schedulingProfiles:
            - name: default
              plugins:
              - pluginRef: round-robin-picker
            """, "fallback").build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router);
  }

  void startGateway(RequestListener listener, Endpoint... replicas) throws IOException {
    Router router = Router.builder().endpoints(List.of(replicas)).listener(listener).build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router);
  }

  /** A replica whose every answer is produced by {@code handler}. */
  int fakeReplica(com.sun.net.httpserver.HttpHandler handler) throws IOException {
    HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    s.createContext("/v1/", handler);
    s.start();
    open.add(() -> s.stop(0));
    return s.getAddress().getPort();
  }

  static int portWithNothingListening() throws IOException {
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    }
  }

  @AfterEach
  void stop() throws Exception {
    if (gateway != null) {
      gateway.close();
    }
    for (AutoCloseable c : open) {
      c.close();
    }
  }

  URI uri(String path) {
    return URI.create("http://127.0.0.1:" + gateway.port() + path);
  }

  HttpResponse<String> post(String path, String body) throws Exception {
    return client.send(HttpRequest.newBuilder(uri(path)).timeout(DEADLINE)
        .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
  }

  HttpResponse<String> get(String path) throws Exception {
    return client.send(HttpRequest.newBuilder(uri(path)).timeout(DEADLINE).GET().build(),
        HttpResponse.BodyHandlers.ofString());
  }

  static void await(String what, BooleanSupplier condition) throws InterruptedException {
    long end = System.nanoTime() + DEADLINE.toNanos();
    while (!condition.getAsBoolean()) {
      assertThat(System.nanoTime() < end).as("within %s: %s", DEADLINE, what).isTrue();
      Thread.sleep(5);
    }
  }

  int inFlight() {
    return gateway.router().endpoints().stream().mapToInt(Candidate::inFlightRequests).sum();
  }

  static String completion(String prompt) {
    return "{\"model\":\"qwen3\",\"prompt\":\"" + prompt + "\",\"max_tokens\":5}";
  }

  @Test
  void routesProxiesAndLearnsPrefixes() throws Exception {
    StandInVllm a = standIn();
    StandInVllm b = standIn();
    startGateway(outcomes, at(a.port()), at(b.port()));
    String system = "You are the ACME assistant. Answer briefly and cite the manual. ".repeat(30);
    String first = null;
    for (int i = 0; i < 12; i++) {
      HttpResponse<String> r = post("/v1/completions", completion(system + "Question " + i));
      assertThat(r.statusCode()).isEqualTo(200);
      String dest = r.headers().firstValue("x-gateway-destination-endpoint").orElseThrow();
      if (first == null) {
        first = dest;
      }
      assertThat(dest).as("a shared prompt prefix keeps going where it is cached").isEqualTo(first);
      int cached = JSON.readTree(r.body()).path("usage").path("prompt_tokens_details")
          .path("cached_tokens").asInt(-1);
      assertThat(cached).as("the replica had the system prompt cached").isGreaterThan(i == 0 ? -1 : 0);
      // completion is reported before the client sees the end of the answer: no waiting here
      assertThat(inFlight()).as("request %d was reported complete", i).isZero();
    }
    assertThat(outcomes.completions).hasSize(12).allSatisfy(u -> assertThat(u.promptTokens())
        .isGreaterThan(400));
    assertThat(outcomes.failures).isEmpty();
  }

  @Test
  void theQueryStringTravelsToTheReplica() throws Exception {
    java.util.concurrent.atomic.AtomicReference<String> seen = new java.util.concurrent.atomic.AtomicReference<>();
    int port = fakeReplica(ex -> {
      seen.set(ex.getRequestURI().getRawPath() + "?" + ex.getRequestURI().getRawQuery());
      ex.getRequestBody().readAllBytes();
      byte[] answer = "{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}"
          .getBytes(java.nio.charset.StandardCharsets.UTF_8);
      ex.getResponseHeaders().add("content-type", "application/json");
      ex.sendResponseHeaders(200, answer.length);
      ex.getResponseBody().write(answer);
      ex.close();
    });
    startGateway(outcomes, at(port));
    HttpResponse<String> r = post("/v1/completions?api-version=2024-10%2B1&x=a%20b", completion("hi"));
    assertThat(r.statusCode()).isEqualTo(200);
    // before, the gateway forwarded the path alone and the replica never saw the query
    assertThat(seen.get()).isEqualTo("/v1/completions?api-version=2024-10%2B1&x=a%20b");
  }

  @Test
  void aReplicaThatRefusesTheConnectionHandsTheRequestToTheDecisionsNextEndpoint()
      throws Exception {
    StandInVllm alive = standIn();
    Endpoint dead = at(portWithNothingListening());
    // round-robin takes turns for the primary; with two endpoints per decision every request
    // whose primary is the dead replica names the live one as its fallback
    startFallbackGateway(dead, at(alive.port()));
    for (int i = 0; i < 4; i++) {
      HttpResponse<String> r = post("/v1/completions", completion("question " + i));
      assertThat(r.statusCode()).as("request %d", i).isEqualTo(200);
      assertThat(r.headers().firstValue("x-gateway-destination-endpoint"))
          .hasValue(at(alive.port()).id());
    }
    assertThat(outcomes.completions).hasSize(4);
    assertThat(outcomes.failures).isEmpty();
    assertThat(inFlight()).isZero();
    // the router heard that the live replica served every request: the two whose primary was
    // the dead one went there as fallbacks
    assertThat(outcomes.completedOn).containsOnly(at(alive.port()).id());
    assertThat(outcomes.fallbacks).containsExactly(dead.id() + ">" + at(alive.port()).id(),
        dead.id() + ">" + at(alive.port()).id());
  }

  @Test
  void theOwnTimeListenerHearsEveryAnsweredRequest() throws Exception {
    StandInVllm a = standIn(Duration.ofMillis(20), Duration.ZERO);
    startGateway(outcomes, at(a.port()));
    List<long[]> heard = new CopyOnWriteArrayList<>();
    gateway.ownTimeListener((own, upstream) -> heard.add(new long[] {own, upstream}));
    for (int i = 0; i < 3; i++) {
      assertThat(post("/v1/completions", completion("q" + i)).statusCode()).isEqualTo(200);
    }
    assertThat(heard).hasSize(3).allSatisfy(t -> {
      assertThat(t[0]).isNotNegative();
      // the stand-in waits 20 ms before its first token; the gateway's share is not in it
      assertThat(t[1]).isGreaterThanOrEqualTo(Duration.ofMillis(20).toNanos());
    });
  }

  @Test
  void completionIsReportedBeforeTheClientSeesTheEndOfTheAnswer() throws Exception {
    StandInVllm a = standIn();
    CountDownLatch clientHasAnswer = new CountDownLatch(1);
    CountDownLatch reported = new CountDownLatch(1);
    AtomicBoolean answerArrivedFirst = new AtomicBoolean();
    // Holds the report open for a while: if the gateway ended the answer before reporting, the
    // client gets it within that time.
    RequestListener slowReport = new RequestListener() {
      @Override
      public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
        try {
          answerArrivedFirst.set(clientHasAnswer.await(500, TimeUnit.MILLISECONDS));
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        } finally {
          reported.countDown();
        }
      }
    };
    startGateway(slowReport, at(a.port()));
    assertThat(post("/v1/completions", completion("hello")).statusCode()).isEqualTo(200);
    clientHasAnswer.countDown();
    assertThat(reported.await(DEADLINE.toMillis(), TimeUnit.MILLISECONDS)).isTrue();
    assertThat(answerArrivedFirst).as("the client had the whole answer before completion was reported")
        .isFalse();
  }

  @Test
  void aStreamThatOutlastsTheRoutersInFlightMaxAgeKeepsCountingInFlight() throws Exception {
    // the router releases a decision older than inFlightMaxAge as one the gateway lost; a stream
    // still relaying tokens is not lost: the gateway renews it while tokens arrive
    Duration maxAge = Duration.ofSeconds(1);
    StandInVllm a = standIn(Duration.ZERO, Duration.ofMillis(20)); // 200 tokens: 4 s
    Router router = Router.builder().endpoints(List.of(at(a.port()))).listener(outcomes)
        .inFlightMaxAge(maxAge).build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router);
    long start = System.nanoTime();
    HttpResponse<InputStream> r = client.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(DEADLINE).POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"qwen3\","
            + "\"prompt\":\"hi\",\"max_tokens\":200,\"stream\":true}")).build(),
        HttpResponse.BodyHandlers.ofInputStream());
    assertThat(r.statusCode()).isEqualTo(200);
    boolean checked = false;
    try (java.io.BufferedReader lines = new java.io.BufferedReader(
        new java.io.InputStreamReader(r.body(), StandardCharsets.UTF_8))) {
      for (String line = lines.readLine(); line != null; line = lines.readLine()) {
        // well past the age (the scraper's metrics updates check it every 50 ms), stream open
        if (!checked && System.nanoTime() - start > maxAge.multipliedBy(5).dividedBy(2).toNanos()
            && !line.contains("[DONE]")) {
          assertThat(inFlight()).as("in flight %s into the stream",
              Duration.ofNanos(System.nanoTime() - start)).isEqualTo(1);
          checked = true;
        }
      }
    }
    assertThat(checked).as("the stream lasted past 2.5 x inFlightMaxAge").isTrue();
    assertThat(outcomes.completions).hasSize(1);
    assertThat(inFlight()).isZero();
  }

  @Test
  void streamedAnswerIsRelayedAndItsUsageChunkReported() throws Exception {
    StandInVllm a = standIn();
    startGateway(outcomes, at(a.port()));
    String prompt = "x".repeat(400); // 100 tokens at the stand-in's four bytes per token
    HttpResponse<String> r = post("/v1/chat/completions", "{\"model\":\"qwen3\",\"max_tokens\":7,"
        + "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        + "\"messages\":[{\"role\":\"user\",\"content\":\"" + prompt + "\"}]}");
    assertThat(r.statusCode()).isEqualTo(200);
    assertThat(r.headers().firstValue("content-type").orElseThrow()).startsWith("text/event-stream");
    assertThat(r.body()).endsWith("data: [DONE]\n\n");
    assertThat(inFlight()).isZero();
    assertThat(outcomes.firstTokens).hasValue(1);
    assertThat(outcomes.completions).hasSize(1);
    Usage u = outcomes.completions.get(0);
    assertThat(u.completionTokens()).isEqualTo(7);
    assertThat(u.promptTokens()).isGreaterThanOrEqualTo(100);
  }

  @Test
  void aClientThatLeavesBeforeTheReplicasFirstByteIsNoticedOnlyOnceTheReplicaAnswers()
      throws Exception {
    // the limit the README states: the JDK server does not watch a connection while a handler
    // runs, so the decision stays in flight until a write to the client fails
    CountDownLatch asked = new CountDownLatch(1);
    CountDownLatch answer = new CountDownLatch(1);
    AtomicBoolean replicaCutOff = new AtomicBoolean();
    int port = fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      asked.countDown();
      try {
        answer.await(30, TimeUnit.SECONDS);
        ex.getResponseHeaders().set("content-type", "text/event-stream");
        ex.sendResponseHeaders(200, 0);
        for (int i = 0; i < 3000; i++) { // until the gateway closes this stream
          ex.getResponseBody().write("data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
              .getBytes(StandardCharsets.UTF_8));
          ex.getResponseBody().flush();
          Thread.sleep(10);
        }
      } catch (IOException cut) {
        replicaCutOff.set(true);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } finally {
        ex.close();
      }
    });
    startGateway(outcomes, at(port));
    byte[] body = completion("leave early").getBytes(StandardCharsets.UTF_8);
    try (java.net.Socket s =
        new java.net.Socket(InetAddress.getLoopbackAddress(), gateway.port())) {
      s.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
          + "Content-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
      s.getOutputStream().write(body);
      s.getOutputStream().flush();
      assertThat(asked.await(30, TimeUnit.SECONDS)).as("the replica has the request").isTrue();
    } // the client leaves before any byte of the answer
    assertThat(inFlight()).as("still in flight: nothing noticed the client leave").isEqualTo(1);
    assertThat(outcomes.failures).isEmpty();
    answer.countDown();
    await("the failed write reports the request failed", () -> outcomes.failures.size() == 1);
    assertThat(outcomes.failures.get(0)).hasMessageContaining("client disconnected");
    assertThat(inFlight()).isZero();
    await("the replica's stream is closed", replicaCutOff::get);
    assertThat(outcomes.completions).isEmpty();
  }

  @Test
  void clientThatGoesAwayMidStreamFailsTheDecisionAndStopsTheReplica() throws Exception {
    StandInVllm a = standIn(Duration.ZERO, Duration.ofMillis(10));
    startGateway(outcomes, at(a.port()));
    HttpResponse<InputStream> r = client.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(DEADLINE).POST(HttpRequest.BodyPublishers.ofString(
            "{\"model\":\"qwen3\",\"prompt\":\"hi\",\"max_tokens\":5000,\"stream\":true}")).build(),
        HttpResponse.BodyHandlers.ofInputStream());
    try (InputStream in = r.body()) {
      assertThat(in.read(new byte[16])).as("the stream started").isPositive();
    } // closing before the end drops the connection
    await("the gateway reports the request failed", () -> outcomes.failures.size() == 1);
    assertThat(outcomes.failures.get(0)).hasMessageContaining("client disconnected");
    assertThat(inFlight()).isZero();
    await("the replica stops generating", () -> a.runningRequests() == 0);
    assertThat(a.abortedRequests()).isEqualTo(1);
    assertThat(outcomes.completions).isEmpty();
  }

  /** A server-sent answer but its end: a token, then its usage (3 prompt tokens, 1 generated). */
  static final String TOKEN_AND_USAGE = "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
      + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n";

  /**
   * A replica whose every answer is a 200 server-sent stream of {@code sse}, after which the
   * connection drops before the body's end (the server drops it when the handler throws).
   */
  int replicaThatBreaksOffAfter(String sse) throws IOException {
    return fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      ex.getResponseHeaders().set("content-type", "text/event-stream");
      ex.sendResponseHeaders(200, 0);
      ex.getResponseBody().write(sse.getBytes(StandardCharsets.UTF_8));
      ex.getResponseBody().flush();
      throw new IOException("replica crashed");
    });
  }

  /**
   * Posts a completion: the client gets the whole answer, ending in {@code end}, and the
   * decision completes with {@link #TOKEN_AND_USAGE}'s usage, nothing failed and nothing left in
   * flight.
   */
  void assertCompletesWhole(String end) throws Exception {
    HttpResponse<String> r = post("/v1/completions", completion("hi"));
    assertThat(r.statusCode()).isEqualTo(200);
    assertThat(r.body()).endsWith(end);
    await("the gateway reports the request complete", () -> outcomes.completions.size() == 1);
    assertThat(outcomes.completions.get(0)).as(end).isEqualTo(new Usage(3, 0, 1));
    assertThat(outcomes.failures).as(end).isEmpty();
    assertThat(inFlight()).isZero();
  }

  @Test
  void replicaThatBreaksOffMidAnswerFailsTheDecisionAndCutsTheClientOff() throws Exception {
    int port = replicaThatBreaksOffAfter("data: {\"choices\":[{\"text\":\"a\"}]}\n\n");
    startGateway(outcomes, at(port));
    assertThatThrownBy(() -> post("/v1/completions", completion("hi")))
        .as("a cut-off answer must not look complete to the client")
        .isInstanceOf(IOException.class);
    await("the gateway reports the request failed", () -> outcomes.failures.size() == 1);
    assertThat(inFlight()).isZero();
    assertThat(outcomes.completions).isEmpty();
  }

  @Test
  void replicaThatGoesSilentMidStreamIsGivenUpAfterTheStreamIdleTimeout() throws Exception {
    // a replica that sends a token, then nothing, and keeps its connection open: the client and
    // a gateway thread waited as long as the connection stayed open, the decision in flight
    CountDownLatch testOver = new CountDownLatch(1);
    open.add(testOver::countDown); // before the replica stops: its handler is waiting on this
    int port = fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      ex.getResponseHeaders().set("content-type", "text/event-stream");
      ex.sendResponseHeaders(200, 0);
      ex.getResponseBody().write("data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
          .getBytes(StandardCharsets.UTF_8));
      ex.getResponseBody().flush();
      try {
        testOver.await();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      ex.close();
    });
    Router router = Router.builder().endpoints(List.of(at(port))).listener(outcomes).build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router,
        PlainGateway.Options.defaults().withStreamIdleTimeout(Duration.ofMillis(300)));
    HttpResponse<InputStream> r = client.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(DEADLINE).POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"qwen3\","
            + "\"prompt\":\"hi\",\"stream\":true}")).build(),
        HttpResponse.BodyHandlers.ofInputStream());
    assertThat(r.statusCode()).isEqualTo(200);
    java.util.concurrent.CompletableFuture<Throwable> end =
        java.util.concurrent.CompletableFuture.supplyAsync(() -> {
          try (InputStream in = r.body()) {
            in.readAllBytes();
            return new AssertionError("the answer ended cleanly, as if whole");
          } catch (IOException cutOff) {
            return cutOff;
          }
        });
    assertThat(end.get(DEADLINE.toMillis(), TimeUnit.MILLISECONDS))
        .as("the client's answer is cut off").isInstanceOf(IOException.class);
    await("the gateway reports the request failed", () -> outcomes.failures.size() == 1);
    assertThat(outcomes.failures.get(0)).hasMessageContaining("stream idle timeout")
        .hasMessageContaining(at(port).id());
    assertThat(outcomes.completions).isEmpty();
    assertThat(inFlight()).isZero();
  }

  @Test
  void aClientThatStopsReadingAStreamIsCutOffAfterTheStreamIdleTimeoutAndItsThreadFreed()
      throws Exception {
    // the JDK's HTTP server has no write timeout: a write to a client that stopped reading (its
    // receive window full) blocked for good, holding the only handler thread and the decision
    AtomicBoolean testOver = new AtomicBoolean();
    open.add(() -> testOver.set(true)); // before the replica stops: its handler loops until then
    AtomicInteger asked = new AtomicInteger();
    byte[] chunk = ("data: {\"choices\":[{\"text\":\"" + "a".repeat(16_000) + "\"}]}\n\n")
        .getBytes(StandardCharsets.UTF_8);
    int port = fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      ex.getResponseHeaders().set("content-type", "text/event-stream");
      ex.sendResponseHeaders(200, 0);
      if (asked.incrementAndGet() == 1) {
        // streams without end, far more than the sockets' buffers hold, until the gateway
        // drops the connection
        try {
          while (!testOver.get()) {
            ex.getResponseBody().write(chunk);
          }
        } catch (IOException dropped) {
          // the gateway gave up on the answer
        }
      } else {
        ex.getResponseBody().write((TOKEN_AND_USAGE + "data: [DONE]\n\n")
            .getBytes(StandardCharsets.UTF_8));
      }
      ex.close();
    });
    Router router = Router.builder().endpoints(List.of(at(port))).listener(outcomes).build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router,
        PlainGateway.Options.defaults().withStreamIdleTimeout(Duration.ofMillis(500))
            .withMaxConcurrentRequests(1));
    java.net.Socket stalled = new java.net.Socket();
    open.add(stalled);
    stalled.setReceiveBufferSize(4096);
    stalled.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), gateway.port()));
    String body = "{\"model\":\"qwen3\",\"prompt\":\"hi\",\"stream\":true}";
    stalled.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nhost: gateway\r\n"
        + "content-type: application/json\r\ncontent-length: " + body.length() + "\r\n\r\n"
        + body).getBytes(StandardCharsets.US_ASCII));
    stalled.getOutputStream().flush();
    // ... and never reads a byte of the answer

    await("the gateway reports the request failed", () -> outcomes.failures.size() == 1);
    assertThat(outcomes.failures.get(0)).hasMessageContaining("client read nothing")
        .hasMessageContaining("stream idle timeout");
    assertThat(outcomes.completions).isEmpty();
    assertThat(inFlight()).isZero();
    // the only handler thread is free again: the next request is served, not turned away
    await("a request is served again", () -> {
      try {
        return post("/v1/completions", completion("next")).statusCode() == 200;
      } catch (Exception e) {
        throw new AssertionError(e);
      }
    });
    assertThat(outcomes.completions).hasSize(1);
  }

  @Test
  void requestsBeyondTheLimitAreTurnedAwayWith503UntilAThreadIsFree() throws Exception {
    // the gateway started a thread for every request it was sent, without limit: a flood of
    // requests (or of slow streams) made it start threads until memory ran out
    CountDownLatch release = new CountDownLatch(1);
    open.add(release::countDown); // before the replica stops: its handler is waiting on this
    AtomicInteger asked = new AtomicInteger();
    int port = fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      ex.getResponseHeaders().set("content-type", "text/event-stream");
      ex.sendResponseHeaders(200, 0);
      ex.getResponseBody().write(TOKEN_AND_USAGE.getBytes(StandardCharsets.UTF_8));
      ex.getResponseBody().flush();
      if (asked.incrementAndGet() == 1) { // the first stream goes on until the test says
        try {
          release.await();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      ex.getResponseBody().write("data: [DONE]\n\n".getBytes(StandardCharsets.UTF_8));
      ex.close();
    });
    Router router = Router.builder().endpoints(List.of(at(port))).listener(outcomes).build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router,
        PlainGateway.Options.defaults().withMaxConcurrentRequests(1));
    HttpResponse<InputStream> held = client.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(DEADLINE).POST(HttpRequest.BodyPublishers.ofString(completion("first")))
        .build(), HttpResponse.BodyHandlers.ofInputStream());
    assertThat(held.statusCode()).isEqualTo(200);

    HttpResponse<String> over = post("/v1/completions", completion("second"));
    assertThat(over.statusCode()).isEqualTo(503);
    assertThat(over.headers().firstValue("retry-after")).hasValue("1");
    assertThat(JSON.readTree(over.body()).path("error").path("type").asText())
        .isEqualTo("gateway_overloaded");
    assertThat(asked).as("the request turned away was not forwarded").hasValue(1);

    release.countDown();
    try (InputStream in = held.body()) {
      assertThat(new String(in.readAllBytes(), StandardCharsets.UTF_8)).endsWith("[DONE]\n\n");
    }
    // the thread is free again once the first answer has ended
    await("a request is served again", () -> {
      try {
        return post("/v1/completions", completion("third")).statusCode() == 200;
      } catch (Exception e) {
        throw new AssertionError(e);
      }
    });
    assertThat(outcomes.failures).isEmpty();
    assertThat(inFlight()).isZero();
  }

  @Test
  void replicaThatBreaksOffAfterDataDoneCompletesTheDecisionAndTheAnswer() throws Exception {
    // a server-sent stream is whole at data: [DONE] (clients stop reading there); a replica whose
    // connection broke after it had sent the whole answer was counted as a failed request, and
    // the client, which had the answer, was cut off
    startGateway(outcomes, at(replicaThatBreaksOffAfter(TOKEN_AND_USAGE + "data: [DONE]\n\n")));
    assertCompletesWhole("data: [DONE]\n\n");
  }

  @Test
  void replicaThatBreaksOffRightAfterAnUnterminatedDataDoneCompletesTheDecision() throws Exception {
    // the stream's last bytes are data: [DONE] with no line end, then the connection breaks:
    // that last line is ended by the stream's end, and the answer is whole; it was counted as a
    // failed request and the client was cut off
    for (String done : new String[] {"data: [DONE]", "data: [DONE]\r"}) {
      startGateway(outcomes, at(replicaThatBreaksOffAfter(TOKEN_AND_USAGE + done)));
      assertCompletesWhole(done);
      gateway.close();
      gateway = null;
      outcomes.completions.clear();
    }
  }

  @Test
  void aClosingGatewayTurnsNewRequestsAwayWhileItsStreamEnds() throws Exception {
    StandInVllm a = standIn(Duration.ZERO, Duration.ofMillis(50)); // 40 tokens: about 2 s
    startGateway(outcomes, at(a.port()));
    HttpResponse<InputStream> stream = client.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(DEADLINE).POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"qwen3\","
            + "\"prompt\":\"hi\",\"max_tokens\":40,\"stream\":true,"
            + "\"stream_options\":{\"include_usage\":true}}")).build(),
        HttpResponse.BodyHandlers.ofInputStream());
    Thread closing = new Thread(() -> gateway.close(DEADLINE));
    closing.start();
    // A request that reaches the gateway before close() has begun is one in progress: it is
    // routed and served like any other. How many do depends on when the closing thread runs,
    // so they are counted rather than assumed to be none.
    AtomicInteger servedBeforeTheStop = new AtomicInteger();
    await("the gateway is draining", () -> {
      try {
        HttpResponse<String> r = post("/v1/completions", completion("late"));
        if (r.statusCode() == 200) {
          servedBeforeTheStop.incrementAndGet();
          return false;
        }
        assertThat(r.statusCode()).as("a request during the stop").isEqualTo(503);
        return true;
      } catch (Exception e) {
        throw new AssertionError(e);
      }
    });
    HttpResponse<String> late = post("/v1/completions", completion("late"));
    assertThat(late.statusCode()).isEqualTo(503);
    assertThat(late.headers().firstValue("retry-after")).hasValue("1");
    assertThat(JSON.readTree(late.body()).path("error").path("type").asText())
        .isEqualTo("gateway_stopping");
    try (InputStream in = stream.body()) {
      assertThat(new String(in.readAllBytes(), StandardCharsets.UTF_8)).endsWith("data: [DONE]\n\n");
    }
    closing.join(DEADLINE.toMillis());
    assertThat(closing.isAlive()).as("closed once the stream ended").isFalse();
    assertThat(outcomes.failures).isEmpty();
    // the stream completed with its usage; requests turned away were never routed
    assertThat(outcomes.completions).hasSize(1 + servedBeforeTheStop.get())
        .anySatisfy(u -> assertThat(u.completionTokens()).isEqualTo(40));
  }

  /**
   * The stop waited only for requests whose handling had begun: one whose headers were still
   * arriving (its connection already on a handler thread, reading them), or one waiting for the
   * threads that turn requests beyond the limit away, was cut off without an answer as soon as
   * nothing else was in progress. Each is now waited for and, once it can be read, answered 503
   * gateway_stopping.
   */
  @Test
  void aStopAnswersTheRequestsWhoseHeadersAreStillArrivingOrThatWaitForAThread() throws Exception {
    Router router = Router.builder().endpoints(List.of(at(standIn().port()))).listener(outcomes)
        .build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router,
        PlainGateway.Options.defaults().withMaxConcurrentRequests(1));
    // one request on the only handler thread, four on the threads that turn requests away, and
    // one queued for those: all six are reading (or waiting to read) their headers
    List<java.net.Socket> partial = new ArrayList<>();
    try {
      for (int i = 0; i < 6; i++) {
        java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(),
            gateway.port());
        socket.setSoTimeout((int) DEADLINE.toMillis());
        partial.add(socket);
        socket.getOutputStream().write("POST /v1/completions HTTP/1.1\r\nHost: gw\r\n"
            .getBytes(StandardCharsets.US_ASCII));
        socket.getOutputStream().flush();
      }
      await("five gateway threads are reading request headers",
          () -> threadsReadingRequestHeaders() == 5);

      Thread closing = new Thread(() -> gateway.close(DEADLINE));
      closing.start();
      // every thread is taken, so no request could tell that the stop has begun: the closing
      // thread can, by sleeping in its wait (or by having stopped the gateway already)
      await("the stop has begun", () -> closing.getState() == Thread.State.TIMED_WAITING
          || !closing.isAlive());

      String body = completion("held");
      for (java.net.Socket socket : partial) {
        socket.getOutputStream().write(("Content-Type: application/json\r\nContent-Length: "
            + body.length() + "\r\n\r\n" + body).getBytes(StandardCharsets.US_ASCII));
        socket.getOutputStream().flush();
      }
      for (java.net.Socket socket : partial) {
        String answer;
        try {
          answer = new String(socket.getInputStream().readAllBytes(), StandardCharsets.US_ASCII);
        } catch (IOException cut) {
          answer = "cut off: " + cut;
        }
        assertThat(answer).as("the answer to a request whose headers were arriving")
            .startsWith("HTTP/1.1 503").contains("gateway_stopping");
      }
      closing.join(DEADLINE.toMillis());
      assertThat(closing.isAlive()).as("closed once they were answered").isFalse();
      assertThat(outcomes.completions).as("none of them was routed").isEmpty();
    } finally {
      for (java.net.Socket socket : partial) {
        socket.close();
      }
    }
  }

  /**
   * An answer that went out during a stop kept its connection open (keep-alive), and the stop
   * closed that connection only when the last request in progress ended: a client that sent its
   * next request on it then lost it to a reset, not knowing whether it had been served. Such an
   * answer now says Connection: close and its connection is closed after it, while the stop
   * still waits for the other request.
   */
  @Test
  void anAnswerGivenDuringAStopClosesItsConnection() throws Exception {
    CountDownLatch arrived = new CountDownLatch(2);
    CountDownLatch releaseFirst = new CountDownLatch(1);
    CountDownLatch releaseSecond = new CountDownLatch(1);
    // a thread per request: both are held at once
    HttpServer replica = HttpServer.create(
        new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    java.util.concurrent.ExecutorService threads =
        java.util.concurrent.Executors.newCachedThreadPool();
    replica.setExecutor(threads);
    open.add(threads::shutdownNow);
    replica.createContext("/v1/", ex -> {
      String asked = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
      arrived.countDown();
      try {
        (asked.contains("first") ? releaseFirst : releaseSecond).await(30, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      byte[] b = "{\"object\":\"text_completion\",\"choices\":[]}"
          .getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("content-type", "application/json");
      ex.sendResponseHeaders(200, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    replica.start();
    open.add(() -> replica.stop(0));
    startGateway(outcomes, at(replica.getAddress().getPort()));
    List<java.net.Socket> sockets = new ArrayList<>();
    try {
      for (String prompt : List.of("first", "second")) {
        java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(),
            gateway.port());
        socket.setSoTimeout((int) DEADLINE.toMillis());
        sockets.add(socket);
        String body = completion(prompt);
        socket.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nHost: gw\r\n"
            + "Content-Type: application/json\r\nContent-Length: " + body.length() + "\r\n\r\n"
            + body).getBytes(StandardCharsets.US_ASCII));
        socket.getOutputStream().flush();
      }
      assertThat(arrived.await(DEADLINE.toSeconds(), TimeUnit.SECONDS))
          .as("both requests reached the replica").isTrue();
      Thread closing = new Thread(() -> gateway.close(DEADLINE));
      closing.start();
      await("the stop has begun", () -> closing.getState() == Thread.State.TIMED_WAITING);

      releaseFirst.countDown();
      String first;
      try {
        // to its end: the gateway closes the connection after the answer
        first = new String(sockets.get(0).getInputStream().readAllBytes(),
            StandardCharsets.US_ASCII);
      } catch (java.net.SocketTimeoutException keptOpen) {
        throw new AssertionError("the connection of an answer given during the stop was kept"
            + " open for the client's next request", keptOpen);
      }
      assertThat(first).startsWith("HTTP/1.1 200").containsIgnoringCase("connection: close")
          .contains("text_completion").endsWith("0\r\n\r\n");
      assertThat(closing.isAlive()).as("the stop still waits for the second request").isTrue();

      releaseSecond.countDown();
      String second = new String(sockets.get(1).getInputStream().readAllBytes(),
          StandardCharsets.US_ASCII);
      assertThat(second).startsWith("HTTP/1.1 200").containsIgnoringCase("connection: close");
      closing.join(DEADLINE.toMillis());
      assertThat(closing.isAlive()).as("closed once both were answered").isFalse();
      assertThat(outcomes.completions).hasSize(2);
    } finally {
      releaseFirst.countDown();
      releaseSecond.countDown();
      for (java.net.Socket socket : sockets) {
        socket.close();
      }
    }
  }

  /**
   * The stop looked once more for requests in progress and, finding none, closed the server: a
   * request whose first bytes came in between was handed to a gateway thread, which began to
   * read it, and the closing cut it off without an answer. The wait now ends atomically with
   * refusing what the server hands over: such a request is never read (its connection is closed
   * unread), and the stop still closes.
   */
  @Test
  void aRequestArrivingAsTheStopEndsItsWaitIsNeverReadAndCutOff() throws Exception {
    startGateway(outcomes, at(standIn().port()));
    java.net.Socket socket = new java.net.Socket();
    open.add(socket);
    AtomicBoolean closedByGateway = new AtomicBoolean();
    AtomicBoolean readBegun = new AtomicBoolean();
    java.io.ByteArrayOutputStream answer = new java.io.ByteArrayOutputStream();
    List<Throwable> hookFailed = new CopyOnWriteArrayList<>();
    Thread reader = new Thread(() -> {
      try {
        socket.getInputStream().transferTo(answer);
      } catch (IOException reset) {
        // a reset is a close too
      }
      closedByGateway.set(true);
    });
    gateway.stopWaitEnded = () -> {
      try {
        // the stop found nothing in progress; a request's first bytes arrive now, before the
        // server closes
        socket.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), gateway.port()));
        socket.setSoTimeout((int) DEADLINE.toMillis());
        socket.getOutputStream().write("POST /v1/completions HTTP/1.1\r\nHost: gw\r\n"
            .getBytes(StandardCharsets.US_ASCII));
        socket.getOutputStream().flush();
        reader.start();
        // the server either hands it to a thread, which reads its headers, or closes it unread
        await("the request was taken or turned away",
            () -> threadsReadingRequestHeaders() > 0 || closedByGateway.get());
        readBegun.set(threadsReadingRequestHeaders() > 0);
      } catch (Throwable t) {
        hookFailed.add(t);
      }
    };

    gateway.close(DEADLINE);
    reader.join(DEADLINE.toMillis());

    assertThat(hookFailed).isEmpty();
    assertThat(reader.isAlive()).as("the connection is closed once the gateway stopped").isFalse();
    assertThat(readBegun.get())
        .as("a gateway thread began reading a request that the stop then cut off; answer: '%s'",
            answer.toString(StandardCharsets.US_ASCII))
        .isFalse();
    assertThat(answer.size()).as("nothing was answered to a request that was never read")
        .isZero();
    assertThat(outcomes.completions).isEmpty();
  }

  /** This gateway's threads blocked in the JDK server's reading of a request's headers. */
  static long threadsReadingRequestHeaders() {
    return Thread.getAllStackTraces().entrySet().stream()
        .filter(e -> e.getKey().getName().startsWith("plain-gateway-"))
        .filter(e -> java.util.Arrays.stream(e.getValue())
            .anyMatch(f -> f.getClassName().equals("sun.net.httpserver.Request")))
        .count();
  }

  @Test
  void aRejectionTheClientMayRetryCarriesRetryAfter() throws Exception {
    // 503 (no endpoint) and 429 (shed) tell the client to come back; the Spring and Envoy
    // gateways say when (Retry-After: 1), this one said nothing, and a 400 must not say it
    startGateway(outcomes);
    HttpResponse<String> r = post("/v1/completions", completion("hi"));
    assertThat(r.statusCode()).isEqualTo(503);
    assertThat(r.headers().firstValue("retry-after")).hasValue("1");
    assertThat(JSON.readTree(r.body()).path("error").path("type").asText())
        .isEqualTo("routing_no_endpoints");
    HttpResponse<String> bad = post("/v1/completions", "{\"prompt\":\"no model\"}");
    assertThat(bad.statusCode()).isEqualTo(400);
    assertThat(bad.headers().firstValue("retry-after")).isEmpty();
  }

  /** A replica that refuses every request with {@code status} and {@code Retry-After: 7}. */
  int refusingReplica(int status) throws IOException {
    return fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      byte[] b = ("{\"error\":{\"message\":\"busy\",\"code\":" + status + "}}")
          .getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("retry-after", "7");
      ex.getResponseHeaders().set("x-request-id", "req-1");
      ex.getResponseHeaders().set("connection", "x-replica-hop");
      ex.getResponseHeaders().set("x-replica-hop", "for the gateway's connection only");
      ex.sendResponseHeaders(status, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
  }

  @Test
  void aReplicasRefusalReachesTheClientWithItsRetryAfter() throws Exception {
    // a replica behind its own rate limiter says when to come back; the client's retry logic
    // (OpenAI's libraries read Retry-After) must hear the replica, not a gateway that dropped it
    for (int status : new int[] {429, 503}) {
      int port = refusingReplica(status);
      startGateway(outcomes, at(port));
      HttpResponse<String> r = post("/v1/completions", completion("hi"));
      assertThat(r.statusCode()).isEqualTo(status);
      assertThat(r.headers().firstValue("retry-after")).as("status %d", status).hasValue("7");
      assertThat(r.headers().firstValue("x-request-id")).hasValue("req-1");
      assertThat(r.headers().firstValue("x-replica-hop"))
          .as("a header the replica's Connection names is hop-by-hop").isEmpty();
      assertThat(r.body()).contains("busy");
      assertThat(inFlight()).isZero();
      gateway.close();
      gateway = null;
    }
  }

  @Test
  void aReplicaThatTurnsTheRequestAwayHandsItToTheDecisionsNextEndpoint() throws Exception {
    StandInVllm alive = standIn();
    Endpoint refusing = at(refusingReplica(429));
    startFallbackGateway(refusing, at(alive.port()));
    for (int i = 0; i < 4; i++) { // half of them name the refusing replica first
      HttpResponse<String> r = post("/v1/completions", completion("question " + i));
      assertThat(r.statusCode()).as("request %d", i).isEqualTo(200);
      assertThat(r.headers().firstValue("x-gateway-destination-endpoint"))
          .hasValue(at(alive.port()).id());
    }
    assertThat(outcomes.completedOn).hasSize(4).containsOnly(at(alive.port()).id());
    assertThat(outcomes.fallbacks).hasSize(2);
    assertThat(inFlight()).isZero();
  }

  @Test
  void whenEveryEndpointRefusesTheClientSeesTheRefusalAndItsRetryAfter() throws Exception {
    startFallbackGateway(at(refusingReplica(503)), at(refusingReplica(503)));
    HttpResponse<String> r = post("/v1/completions", completion("hi"));
    assertThat(r.statusCode()).isEqualTo(503);
    assertThat(r.headers().firstValue("retry-after")).hasValue("7");
    assertThat(outcomes.fallbacks).hasSize(1);
    assertThat(outcomes.failures).hasSize(1);
    assertThat(inFlight()).isZero();
  }

  @Test
  void modelsRefusedByEveryReplicaRelayTheRefusalAndItsRetryAfter() throws Exception {
    // replicas still loading answer 503: the client is told that, and when to come back,
    // rather than a 502 saying no replica answered
    startGateway(outcomes, at(refusingReplica(503)), at(refusingReplica(503)));
    HttpResponse<String> r = get("/v1/models");
    assertThat(r.statusCode()).isEqualTo(503);
    assertThat(r.headers().firstValue("retry-after")).hasValue("7");
    assertThat(r.body()).contains("busy");
  }

  @Test
  void replicaErrorIsRelayedAndCountsAsFailure() throws Exception {
    int port = fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      byte[] b = "{\"error\":{\"message\":\"engine dead\",\"code\":503}}".getBytes(
          StandardCharsets.UTF_8);
      ex.sendResponseHeaders(503, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    startGateway(outcomes, at(port));
    HttpResponse<String> r = post("/v1/completions", completion("hi"));
    assertThat(r.statusCode()).isEqualTo(503);
    assertThat(r.body()).contains("engine dead");
    assertThat(inFlight()).isZero();
    assertThat(outcomes.failures).hasSize(1);
    assertThat(outcomes.completions).isEmpty();
    assertThat(outcomes.firstTokens).as("an error body is not a first token").hasValue(0);
  }

  /** A replica that answers every request with {@code status} and a JSON error body. */
  int erringReplica(int status) throws IOException {
    return fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      byte[] b = "{\"error\":{\"message\":\"no\"}}".getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(status, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
  }

  @Test
  void aClientErrorCountsAsCompletion() throws Exception {
    // a 400 for a bad prompt is the client's fault: the replica served the request
    startGateway(outcomes, at(erringReplica(400)));
    assertThat(post("/v1/completions", completion("hi")).statusCode()).isEqualTo(400);
    assertThat(inFlight()).isZero();
    assertThat(outcomes.failures).isEmpty();
    assertThat(outcomes.completions).containsExactly(Usage.NONE);
  }

  @Test
  void aTooManyRequestsAnswerCountsAsFailure() throws Exception {
    // a 429 is the replica refusing under load, as a 503 is
    startGateway(outcomes, at(erringReplica(429)));
    assertThat(post("/v1/completions", completion("hi")).statusCode()).isEqualTo(429);
    assertThat(inFlight()).isZero();
    assertThat(outcomes.completions).isEmpty();
    assertThat(outcomes.failures).singleElement().satisfies(
        e -> assertThat(e).hasMessageEndingWith(" answered 429"));
  }

  @Test
  void aListenerThatThrowsDoesNotLeaveTheRequestInFlight() throws Exception {
    StandInVllm a = standIn();
    RequestListener broken = new RequestListener() {
      @Override
      public void onFirstToken(InferenceRequest request, Endpoint endpoint) {
        throw new IllegalStateException("listener broke");
      }
    };
    startGateway(broken, at(a.port()));
    try {
      post("/v1/completions", completion("hi"));
    } catch (IOException cutOff) {
      // either outcome is fine for the client; what matters is the router's count
    }
    await("the request is no longer counted in flight", () -> inFlight() == 0);
  }

  @Test
  void somethingThatThrowsBeforeTheAnswerBeganIsAnOpenAiError() throws Exception {
    // a plugin whose header value throws when the gateway reads it to build the forwarded
    // request: the gateway throws before anything went to the client
    RequestListener asker = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        decision.setRequestHeaderFor("x-kv-source", d -> {
          throw new IllegalStateException("plugin bug on '" + request.prompt() + "'");
        });
      }
    };
    StandInVllm replica = standIn();
    Router router = Router.builder().endpoints(List.of(at(replica.port()))).listener(outcomes)
        .listener(asker).build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router);
    String body = completion("my-bank-password-is-hunter2");
    try (io.epp4j.testkit.CapturedLog log = io.epp4j.testkit.CapturedLog.of("com.example");
        java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(),
        gateway.port())) {
      socket.setSoTimeout((int) DEADLINE.toMillis());
      socket.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
          + "Content-Type: application/json\r\n"
          + "Connection: close\r\nContent-Length: " + body.length() + "\r\n\r\n" + body)
          .getBytes(StandardCharsets.ISO_8859_1));
      String answer = new String(socket.getInputStream().readAllBytes(),
          StandardCharsets.ISO_8859_1);
      assertThat(answer).startsWith("HTTP/1.1 500");
      assertThat(answer.toLowerCase(java.util.Locale.ROOT))
          .contains("content-type: application/json");
      JsonNode error = JSON.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4))
          .path("error");
      assertThat(error.path("type").asText()).isEqualTo("internal_error");
      assertThat(error.path("code").asInt()).isEqualTo(500);
      assertThat(answer).doesNotContain("hunter2");
      // the gateway's warning names the failure and the frame, not the prompt it quoted
      assertThat(log.text()).contains("failed unexpectedly")
          .contains("java.lang.IllegalStateException").contains("PlainGatewayTest")
          .doesNotContain("hunter2");
    }
    assertThat(outcomes.failures).hasSize(1);
    assertThat(inFlight()).isZero();
  }

  @Test
  void anEndpointTheHttpClientCannotAddressHandsTheRequestToTheNextOne() throws Exception {
    // a host name with '_' (a compose service, say): the JDK's HTTP client builds no request for
    // it, so nothing was sent and the decision's next endpoint takes the request
    StandInVllm alive = standIn();
    Endpoint unaddressable = Endpoint.of("replica_a", 8000);
    startFallbackGateway(unaddressable, at(alive.port()));
    for (int i = 0; i < 4; i++) {
      assertThat(post("/v1/completions", completion("q" + i)).statusCode()).as("request %d", i)
          .isEqualTo(200);
    }
    assertThat(outcomes.completedOn).containsOnly(at(alive.port()).id());
    assertThat(outcomes.fallbacks).containsExactly(unaddressable.id() + ">" + at(alive.port()).id(),
        unaddressable.id() + ">" + at(alive.port()).id());
    assertThat(inFlight()).isZero();
    gateway.close();
    // with no other endpoint: a 502 naming it, as an unreachable replica gets
    outcomes.failures.clear();
    startGateway(outcomes, unaddressable);
    HttpResponse<String> r = post("/v1/completions", completion("hi"));
    assertThat(r.statusCode()).isEqualTo(502);
    assertThat(JSON.readTree(r.body()).path("error").path("message").asText())
        .contains(unaddressable.id());
    assertThat(outcomes.failures).hasSize(1);
    assertThat(inFlight()).isZero();
  }

  @Test
  void theSessionTokenAPluginAsksForReachesTheClientAndBringsItBackToItsReplica()
      throws Exception {
    // session-affinity-scorer writes the endpoint that served a request on the answer
    // (x-session-token); a client that sends it back, to any gateway replica, returns there
    StandInVllm a = standIn();
    StandInVllm b = standIn();
    Router router = Router.builder().endpoints(List.of(at(a.port()), at(b.port())))
        .listener(outcomes).configYaml("""
            plugins:
            - type: session-affinity-scorer
            - type: max-score-picker
            schedulingProfiles:
            - name: default
              plugins:
              - pluginRef: session-affinity-scorer
              - pluginRef: max-score-picker
            """, "affinity").build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router);
    HttpResponse<String> first = post("/v1/completions", completion("q0"));
    assertThat(first.statusCode()).isEqualTo(200);
    String servedBy = first.headers().firstValue("x-gateway-destination-endpoint").orElseThrow();
    String token = first.headers().firstValue("x-session-token").orElse(null);
    assertThat(token).as("the session token on the answer").isNotNull();
    assertThat(new String(java.util.Base64.getDecoder().decode(token), StandardCharsets.UTF_8))
        .isEqualTo(servedBy);
    for (int i = 1; i <= 6; i++) {
      HttpResponse<String> r = client.send(HttpRequest.newBuilder(uri("/v1/completions"))
          .timeout(DEADLINE).header("x-session-token", token)
          .POST(HttpRequest.BodyPublishers.ofString(completion("q" + i))).build(),
          HttpResponse.BodyHandlers.ofString());
      assertThat(r.statusCode()).isEqualTo(200);
      assertThat(r.headers().firstValue("x-gateway-destination-endpoint")).as("request %d", i)
          .hasValue(servedBy);
    }
    assertThat(inFlight()).isZero();
  }

  @Test
  void requestHeadersAPluginAsksForReachTheReplicaThatServesTheRequest() throws Exception {
    // p2p-source-producer's way: a header per attempt, naming the endpoint it goes to; and a
    // header the client sent that a plugin asked to remove does not travel on
    List<String> received = new CopyOnWriteArrayList<>();
    int port = fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      received.add(ex.getRequestHeaders().getFirst("x-kv-source") + " auth="
          + ex.getRequestHeaders().getFirst("authorization"));
      byte[] ok = "{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}"
          .getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("content-type", "application/json");
      ex.sendResponseHeaders(200, ok.length);
      ex.getResponseBody().write(ok);
      ex.close();
    });
    RequestListener asker = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        decision.setRequestHeaderFor("x-kv-source", d -> "source-for-" + d.servedBy().id());
        decision.setRequestHeader("authorization", null);
      }
    };
    Endpoint dead = at(portWithNothingListening());
    Router router = Router.builder().endpoints(List.of(dead, at(port))).listener(outcomes)
        .listener(asker).configYaml("""
            plugins:
            - type: round-robin-picker
              parameters: {maxNumOfEndpoints: 2}
            schedulingProfiles:
            - name: default
              plugins:
              - pluginRef: round-robin-picker
            """, "fallback").build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router);
    for (int i = 0; i < 2; i++) { // one of them is sent to the dead endpoint first
      HttpResponse<String> r = client.send(HttpRequest.newBuilder(uri("/v1/completions"))
          .timeout(DEADLINE).header("authorization", "Bearer sk-client")
          .POST(HttpRequest.BodyPublishers.ofString(completion("q" + i))).build(),
          HttpResponse.BodyHandlers.ofString());
      assertThat(r.statusCode()).isEqualTo(200);
    }
    assertThat(outcomes.fallbacks).hasSize(1);
    assertThat(received).containsExactly("source-for-" + at(port).id() + " auth=null",
        "source-for-" + at(port).id() + " auth=null");
    assertThat(inFlight()).isZero();
  }

  @Test
  void headersAPluginAsksForThatCannotBeSentAreLeftOutLoggedByNameAndCounted() throws Exception {
    // before, those the JDK's HTTP client refused and answer values holding a control character
    // were dropped without a word, and an answer header whose name held a space went out as it
    // was ("X bad: v")
    List<String> received = new CopyOnWriteArrayList<>();
    int port = fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      ex.getRequestHeaders().forEach((name, values) -> received.add(
          name.toLowerCase(java.util.Locale.ROOT) + "=" + String.join(",", values)));
      byte[] ok = "{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}"
          .getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("content-type", "application/json");
      ex.sendResponseHeaders(200, ok.length);
      ex.getResponseBody().write(ok);
      ex.close();
    });
    RequestListener asker = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        decision.setRequestHeader("x-good", "fine");
        decision.setRequestHeader("x-tag", "prompt words\r\nx-injected: b");
        decision.setRequestHeader("x bad", "v");
        decision.setRequestHeader("host", "elsewhere"); // reserved: the picked endpoint's
        decision.setRequestHeader("upgrade", "h2c"); // the JDK's HTTP client sets it
        decision.setResponseHeader("x-also-good", d -> "fine too");
        decision.setResponseHeader("x-bad", d -> "prompt words\nx-injected: c");
        decision.setResponseHeader("x bad", d -> "v");
        decision.setResponseHeader("x-wide", d -> "prompt words \u0100");
      }
    };
    startGateway(asker, at(port));
    List<String> warnings = new CopyOnWriteArrayList<>();
    java.util.logging.Logger log = java.util.logging.Logger.getLogger(PlainGateway.class.getName());
    java.util.logging.Handler capture = new java.util.logging.Handler() {
      @Override
      public void publish(java.util.logging.LogRecord record) {
        if (record.getLevel() == java.util.logging.Level.WARNING) {
          warnings.add(record.getMessage());
        }
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    log.addHandler(capture);
    String answer;
    byte[] body = completion("hi").getBytes(StandardCharsets.UTF_8);
    try (java.net.Socket s =
        new java.net.Socket(InetAddress.getLoopbackAddress(), gateway.port())) {
      s.setSoTimeout((int) DEADLINE.toMillis());
      s.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
          + "Connection: close\r\nContent-Length: " + body.length + "\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      s.getOutputStream().write(body);
      answer = new String(s.getInputStream().readAllBytes(), StandardCharsets.ISO_8859_1);
    } finally {
      log.removeHandler(capture);
    }
    assertThat(answer).startsWith("HTTP/1.1 200");
    String head = answer.substring(0, answer.indexOf("\r\n\r\n")).toLowerCase(java.util.Locale.ROOT);
    assertThat(head).contains("x-also-good: fine too").doesNotContain("x bad")
        .doesNotContain("x-bad").doesNotContain("x-injected").doesNotContain("x-wide");
    assertThat(received).contains("x-good=fine").noneMatch(h -> h.startsWith("x-tag")
        || h.startsWith("x bad") || h.startsWith("x-injected") || h.contains("elsewhere"));
    assertThat(gateway.headersLeftOut()).isEqualTo(7);
    assertThat(warnings).hasSize(7).noneMatch(w -> w.contains("prompt words"));
    assertThat(warnings).anyMatch(w -> w.contains("request header") && w.contains("'x-tag'")
        && w.contains("U+000D"));
    assertThat(warnings).anyMatch(w -> w.contains("request header") && w.contains("'x bad'"));
    assertThat(warnings).anyMatch(w -> w.contains("'host'")
        && w.contains("the request's authority"));
    assertThat(warnings).anyMatch(w -> w.contains("'upgrade'") && w.contains("HTTP client"));
    assertThat(warnings).anyMatch(w -> w.contains("response header") && w.contains("'x-bad'"));
    assertThat(warnings).anyMatch(w -> w.contains("response header") && w.contains("'x bad'"));
    assertThat(warnings).anyMatch(w -> w.contains("'x-wide'") && w.contains("U+0100"));
  }

  @Test
  void theClientsEndToEndHeadersReachTheReplicaAndItsHopByHopOnesDoNot() throws Exception {
    // trace context and request IDs went no further than the gateway: a replica's logs and
    // traces could not be tied to the client's request
    java.util.Map<String, com.sun.net.httpserver.Headers> received =
        new java.util.concurrent.ConcurrentHashMap<>();
    int port = fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      com.sun.net.httpserver.Headers copy = new com.sun.net.httpserver.Headers();
      copy.putAll(ex.getRequestHeaders());
      received.put(ex.getRequestURI().getPath(), copy);
      byte[] ok = (ex.getRequestURI().getPath().equals("/v1/models")
          ? "{\"object\":\"list\",\"data\":[]}"
          : "{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}")
          .getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("content-type", "application/json");
      ex.sendResponseHeaders(200, ok.length);
      ex.getResponseBody().write(ok);
      ex.close();
    });
    startGateway(outcomes, at(port));
    String body = completion("hi");
    String traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    String endToEnd = "Traceparent: " + traceparent + "\r\n"
        + "Tracestate: congo=t61rcWkgMzE\r\n"
        + "X-Request-Id: req-42\r\n"
        + "X-Multi: one\r\nX-Multi: two\r\n"
        + "Authorization: Bearer sk-client\r\n";
    String notForwarded = "Connection: keep-alive, X-Hop\r\n"
        + "X-Hop: for-the-gateway\r\n"
        + "Keep-Alive: timeout=5\r\n"
        + "Proxy-Authorization: Basic Z3c6Z3c=\r\n"
        + "Accept-Encoding: gzip\r\n"
        // the gateway's own routing headers: a client must not pick the endpoint or KV source
        + "X-Gateway-Destination-Endpoint: 10.0.0.1:1\r\n"
        + "X-Prefiller-Host-Port: 10.0.0.9:1\r\n";
    for (String request : List.of(
        "POST /v1/completions HTTP/1.1\r\nHost: gw.example\r\nContent-Type: text/plain\r\n"
            + "Content-Length: " + body.length() + "\r\n" + endToEnd + notForwarded + "\r\n"
            + body,
        "GET /v1/models HTTP/1.1\r\nHost: gw.example\r\n" + endToEnd + notForwarded + "\r\n")) {
      try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(),
          gateway.port())) {
        socket.setSoTimeout((int) DEADLINE.toMillis());
        assertThat(exchange(socket.getOutputStream(), socket.getInputStream(), request))
            .startsWith("HTTP/1.1 200");
      }
    }
    for (String path : List.of("/v1/completions", "/v1/models")) {
      com.sun.net.httpserver.Headers h = received.get(path);
      assertThat(h).as(path).isNotNull();
      assertThat(h.getFirst("traceparent")).as(path).isEqualTo(traceparent);
      assertThat(h.getFirst("tracestate")).as(path).isEqualTo("congo=t61rcWkgMzE");
      assertThat(h.getFirst("x-request-id")).as(path).isEqualTo("req-42");
      assertThat(h.get("x-multi")).as(path).containsExactly("one", "two");
      assertThat(h.getFirst("authorization")).as(path).isEqualTo("Bearer sk-client");
      assertThat(h.getFirst("host")).as(path).isEqualTo(at(port).id());
      for (String dropped : List.of("x-hop", "keep-alive", "proxy-authorization",
          "accept-encoding", "x-prefiller-host-port")) {
        assertThat(h.containsKey(dropped)).as("%s: %s", path, dropped).isFalse();
      }
    }
    com.sun.net.httpserver.Headers routed = received.get("/v1/completions");
    assertThat(routed.getFirst("content-type")).isEqualTo("application/json");
    assertThat(routed.get("x-gateway-destination-endpoint")).containsExactly(at(port).id());
    assertThat(received.get("/v1/models").containsKey("x-gateway-destination-endpoint")).isFalse();
  }

  @Test
  void badBodyIs400AndDeadReplicaIs502() throws Exception {
    startGateway(outcomes, at(portWithNothingListening()));
    HttpResponse<String> bad = post("/v1/completions", "{\"model\":");
    assertThat(bad.statusCode()).isEqualTo(400);
    JsonNode error = JSON.readTree(bad.body()).path("error");
    assertThat(error.path("message").asText()).isNotEmpty();
    assertThat(error.path("code").asInt()).isEqualTo(400);
    HttpResponse<String> r = post("/v1/completions", "{\"model\":\"m\",\"prompt\":\"hi\"}");
    assertThat(r.statusCode()).isEqualTo(502);
    assertThat(JSON.readTree(r.body()).path("error").path("message").asText()).contains("unavailable");
    assertThat(inFlight()).isZero();
    assertThat(outcomes.failures).hasSize(1);
  }

  /**
   * A compressed body is no JSON the router can read: it is refused as the Spring Cloud Gateway
   * filter refuses it, 415 naming {@code Content-Encoding} and the coding, with
   * {@code Accept-Encoding: identity}, before routing, not as a 400 about the bytes; the
   * connection serves the client's next request.
   */
  @Test
  void aCompressedBodyIsA415NamingContentEncodingAndIsNotRouted() throws Exception {
    StandInVllm replica = standIn();
    startGateway(outcomes, at(replica.port()));
    byte[] json = completion("compressed").getBytes(StandardCharsets.UTF_8);
    java.io.ByteArrayOutputStream zipped = new java.io.ByteArrayOutputStream();
    try (java.util.zip.GZIPOutputStream gz = new java.util.zip.GZIPOutputStream(zipped)) {
      gz.write(json);
    }
    HttpResponse<String> r = client.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(DEADLINE).header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .POST(HttpRequest.BodyPublishers.ofByteArray(zipped.toByteArray())).build(),
        HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).isEqualTo(415);
    JsonNode error = JSON.readTree(r.body()).path("error");
    assertThat(error.path("type").asText()).isEqualTo("unsupported_content_encoding");
    assertThat(error.path("code").asInt()).isEqualTo(415);
    assertThat(error.path("message").asText()).contains("Content-Encoding", "gzip");
    assertThat(r.headers().firstValue("accept-encoding")).hasValue("identity");
    assertThat(r.headers().firstValue("x-gateway-destination-endpoint")).isEmpty();
    assertThat(replica.finishedRequests() + replica.abortedRequests()).isZero();
    assertThat(outcomes.completions).isEmpty();
    assertThat(outcomes.failures).isEmpty();
    assertThat(inFlight()).isZero();

    // identity is no coding: such a body is routed as any other
    HttpResponse<String> identity = client.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(DEADLINE).header("content-type", "application/json")
        .header("content-encoding", "identity")
        .POST(HttpRequest.BodyPublishers.ofByteArray(json)).build(),
        HttpResponse.BodyHandlers.ofString());
    assertThat(identity.statusCode()).isEqualTo(200);
    await("the identity request completes", () -> outcomes.completions.size() == 1);
  }

  @Test
  void aBodyAboveTheLimitIsA413BeforeItIsReadWhole() throws Exception {
    StandInVllm replica = standIn();
    startGateway(new Outcomes(), Endpoint.of("127.0.0.1", replica.port()));
    // a declared length far above the limit is refused at once: the gateway neither waits for
    // nor holds the gigabyte
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(),
        gateway.port())) {
      socket.setSoTimeout((int) DEADLINE.toMillis());
      socket.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
          + "Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n"
          + "{\"model\":\"stand-in\",\"prompt\":\"").getBytes(StandardCharsets.US_ASCII));
      socket.getOutputStream().flush();
      java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(
          socket.getInputStream(), StandardCharsets.US_ASCII));
      assertThat(in.readLine()).startsWith("HTTP/1.1 413");
    }
    // a chunked body, without a length, is cut off once it passes the limit
    byte[] big = ("{\"model\":\"stand-in\",\"prompt\":\""
        + "x".repeat(io.epp4j.core.OpenAiRequestParser.DEFAULT_MAX_BODY_BYTES) + "\"}")
        .getBytes(StandardCharsets.UTF_8);
    HttpResponse<String> chunked = client.send(HttpRequest.newBuilder(uri("/v1/completions"))
        .timeout(DEADLINE)
        .POST(HttpRequest.BodyPublishers.ofInputStream(() -> new java.io.ByteArrayInputStream(big)))
        .build(), HttpResponse.BodyHandlers.ofString());
    assertThat(chunked.statusCode()).isEqualTo(413);
    assertThat(JSON.readTree(chunked.body()).path("error").path("type").asText())
        .isEqualTo("request_too_large");
    assertThat(replica.finishedRequests() + replica.abortedRequests()).isZero();
  }

  @Test
  void modelsAreListedByAReplicaEvenWhenAnotherIsDown() throws Exception {
    StandInVllm a = standIn();
    startGateway(outcomes, at(portWithNothingListening()), at(a.port()));
    for (int turn = 0; turn < 2; turn++) { // the gateway starts at a different replica each time
      HttpResponse<String> r = get("/v1/models");
      assertThat(r.statusCode()).isEqualTo(200);
      JsonNode models = JSON.readTree(r.body());
      assertThat(models.path("object").asText()).isEqualTo("list");
      assertThat(models.path("data").get(0).path("id").asText()).isEqualTo("qwen3");
    }
    HttpResponse<String> post = post("/v1/models", "{}");
    assertThat(post.statusCode()).isEqualTo(405);
    assertThat(post.headers().firstValue("allow")).hasValue("GET, HEAD");
    HttpResponse<String> getCompletions = get("/v1/completions");
    assertThat(getCompletions.statusCode()).isEqualTo(405);
    assertThat(getCompletions.headers().firstValue("allow")).hasValue("POST");
  }

  @Test
  void modelsSkipAReplicaThatStopsSendingItsAnswer() throws Exception {
    // a replica that sends its status line and part of the body, then nothing: the client is
    // answered by the next replica instead of waiting with a gateway thread for good
    ServerSocket stalling = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    open.add(stalling);
    List<java.net.Socket> held = new CopyOnWriteArrayList<>();
    open.add(() -> {
      for (java.net.Socket s : held) {
        s.close();
      }
    });
    Thread acceptor = new Thread(() -> {
      try {
        for (;;) {
          java.net.Socket s = stalling.accept();
          held.add(s);
          s.getInputStream().read(new byte[8192]);
          s.getOutputStream().write(("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
              + "content-length: 1000\r\n\r\n{\"object\":").getBytes(StandardCharsets.US_ASCII));
          s.getOutputStream().flush();
        }
      } catch (IOException closed) {
        // the test is over
      }
    });
    acceptor.setDaemon(true);
    acceptor.start();
    StandInVllm a = standIn();
    startGateway(outcomes, at(stalling.getLocalPort()), at(a.port()));
    for (int turn = 0; turn < 2; turn++) { // each turn starts at the other replica
      HttpResponse<String> r = get("/v1/models");
      assertThat(r.statusCode()).as("turn %d: %s", turn, r.body()).isEqualTo(200);
      assertThat(r.headers().firstValue("x-gateway-destination-endpoint"))
          .hasValue(at(a.port()).id());
    }
    assertThat(held).as("the stalling replica was asked").isNotEmpty();
  }

  @Test
  void modelsAnswerAboveTheBodyLimitIsNotHeldOrRelayed() throws Exception {
    // a replica that answers /v1/models without end (a wrong port, a broken proxy) must not make
    // the gateway collect it all in memory: above the limit it counts as no answer
    byte[] chunk = new byte[64 * 1024];
    java.util.Arrays.fill(chunk, (byte) ' ');
    int port = fakeReplica(ex -> {
      ex.getResponseHeaders().set("content-type", "application/json");
      ex.sendResponseHeaders(200, 0); // chunked: no length says how much will come
      try (var out = ex.getResponseBody()) {
        for (long sent = 0; sent <= PlainGateway.MAX_BODY_BYTES; sent += chunk.length) {
          out.write(chunk);
        }
      } catch (IOException cutOff) {
        // the gateway stopped reading: what the test expects
      }
    });
    startGateway(outcomes, at(port));
    HttpResponse<String> r = get("/v1/models");
    assertThat(r.statusCode()).isEqualTo(502);
    assertThat(r.body().length()).isLessThan(1024);
  }

  @Test
  void modelsSkipAReplicaTheHttpClientCannotAddress() throws Exception {
    // a host name with '_' (a compose service, say): no request can be built for it, so the
    // models request goes to the next replica, as for one that cannot be reached
    StandInVllm a = standIn();
    startGateway(outcomes, Endpoint.of("replica_a", 8000), at(a.port()));
    for (int turn = 0; turn < 2; turn++) { // each turn starts at the other replica
      HttpResponse<String> r = get("/v1/models");
      assertThat(r.statusCode()).as("turn %d: %s", turn, r.body()).isEqualTo(200);
      assertThat(r.headers().firstValue("x-gateway-destination-endpoint"))
          .hasValue(at(a.port()).id());
      assertThat(JSON.readTree(r.body()).path("data").get(0).path("id").asText())
          .isEqualTo("qwen3");
    }
  }

  @Test
  void modelsCarryTheClientsAuthorizationToTheReplica() throws Exception {
    // a replica started with --api-key checks every /v1 path, /v1/models too
    int port = fakeReplica(ex -> {
      ex.getRequestBody().readAllBytes();
      boolean allowed = "Bearer sk-test".equals(ex.getRequestHeaders().getFirst("authorization"));
      byte[] b = (allowed ? "{\"object\":\"list\",\"data\":[{\"id\":\"qwen3\"}]}"
          : "{\"error\":\"Unauthorized\"}").getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("content-type", "application/json");
      ex.sendResponseHeaders(allowed ? 200 : 401, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    startGateway(outcomes, at(port));
    HttpResponse<String> r = client.send(HttpRequest.newBuilder(uri("/v1/models")).timeout(DEADLINE)
        .header("Authorization", "Bearer sk-test").GET().build(),
        HttpResponse.BodyHandlers.ofString());
    assertThat(r.statusCode()).isEqualTo(200);
    assertThat(JSON.readTree(r.body()).path("data").get(0).path("id").asText()).isEqualTo("qwen3");
  }

  @Test
  void aPathOutsideV1IsA404InTheOpenAiShape() throws Exception {
    StandInVllm a = standIn();
    startGateway(outcomes, at(a.port()));
    // an OpenAI client whose base URL lacks /v1 asks for /completions
    for (HttpResponse<String> r : List.of(post("/completions", completion("hi")), get("/v1"))) {
      assertThat(r.statusCode()).isEqualTo(404);
      assertThat(r.headers().firstValue("content-type")).hasValue("application/json");
      JsonNode error = JSON.readTree(r.body()).path("error");
      assertThat(error.path("type").asText()).isEqualTo("invalid_request_error");
      assertThat(error.path("code").asInt()).isEqualTo(404);
    }
    assertThat(a.finishedRequests()).isZero();
  }

  /** One answer's status line and headers, read byte by byte so that nothing after them is taken. */
  static String readHeaderBlock(InputStream in) throws IOException {
    StringBuilder head = new StringBuilder();
    while (!head.toString().endsWith("\r\n\r\n")) {
      int b = in.read();
      if (b < 0) {
        throw new java.io.EOFException("the connection closed after: " + head);
      }
      head.append((char) b);
    }
    return head.toString();
  }

  /** Writes {@code request}, a request's head, to {@code out} and reads the answer's head. */
  static String exchange(java.io.OutputStream out, InputStream in, String request)
      throws IOException {
    out.write(request.getBytes(StandardCharsets.US_ASCII));
    out.flush();
    return readHeaderBlock(in);
  }

  static @org.jspecify.annotations.Nullable String header(String block, String name) {
    for (String line : block.split("\r\n")) {
      int colon = line.indexOf(':');
      if (colon > 0 && line.substring(0, colon).strip().equalsIgnoreCase(name)) {
        return line.substring(colon + 1).strip();
      }
    }
    return null;
  }

  @Test
  void headIsAnsweredWithHeadersOnlyAndKeepsTheConnection() throws Exception {
    StandInVllm a = standIn();
    startGateway(outcomes, at(a.port()));
    int modelsLength = get("/v1/models").body().getBytes(StandardCharsets.UTF_8).length;
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(),
        gateway.port())) {
      socket.setSoTimeout((int) DEADLINE.toMillis());
      java.io.OutputStream out = socket.getOutputStream();
      InputStream in = socket.getInputStream();
      // HEAD of what GET serves: GET's status and headers (its length too), no body
      String models = exchange(out, in, "HEAD /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n");
      assertThat(models).startsWith("HTTP/1.1 200");
      assertThat(header(models, "content-type")).startsWith("application/json");
      assertThat(header(models, "content-length")).isEqualTo(String.valueOf(modelsLength));
      // HEAD of a POST-only path and of a path outside /v1/: their errors' headers, no body
      String completions = exchange(out, in,
          "HEAD /v1/completions HTTP/1.1\r\nHost: localhost\r\n\r\n");
      assertThat(completions).startsWith("HTTP/1.1 405");
      assertThat(header(completions, "allow")).isEqualTo("POST");
      assertThat(exchange(out, in, "HEAD /health HTTP/1.1\r\nHost: localhost\r\n\r\n"))
          .startsWith("HTTP/1.1 404");
      // the connection is still open, and no body bytes came before the next answer
      String next = exchange(out, in,
          "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
      assertThat(next).startsWith("HTTP/1.1 200");
      JsonNode body = JSON.readTree(in.readAllBytes());
      assertThat(body.path("data").get(0).path("id").asText()).isEqualTo("qwen3");
    }
    assertThat(a.finishedRequests()).isZero();
  }

  @Test
  void anAuthorizationTheHttpClientCannotForwardIsA400ThatQuotesAndLogsNoneOfIt() throws Exception {
    // the JDK's server takes a header value with a control character, its HTTP client refuses
    // to send one, and its refusal quotes the value: the client's credential
    StandInVllm a = standIn();
    startGateway(outcomes, at(a.port()));
    // the log as a log file shows it: messages, exceptions with theirs, frames
    try (io.epp4j.testkit.CapturedLog logged =
        io.epp4j.testkit.CapturedLog.of(PlainGateway.class.getName())) {
      for (String request : List.of(
          "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
              + "Authorization: Bearer sk-secret\u0001xyz\r\nContent-Length: "
              + completion("hi").length() + "\r\n\r\n" + completion("hi"),
          "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
              + "Authorization: Bearer sk-secret\u0001xyz\r\n\r\n",
          // on a second line: it was not checked, and left out when the request was forwarded
          "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
              + "Authorization: Bearer fine\r\nAuthorization: Bearer sk-secret\u0001xyz\r\n"
              + "Content-Length: " + completion("hi").length() + "\r\n\r\n" + completion("hi"))) {
        try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(),
            gateway.port())) {
          socket.setSoTimeout((int) DEADLINE.toMillis());
          String head = exchange(socket.getOutputStream(), socket.getInputStream(), request);
          String body = new String(socket.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
          assertThat(head).as(request).startsWith("HTTP/1.1 400");
          JsonNode error = JSON.readTree(body).path("error");
          assertThat(error.path("type").asText()).isEqualTo("invalid_request_error");
          assertThat(error.path("message").asText()).contains("authorization")
              .doesNotContain("sk-secret");
        }
      }
      assertThat(logged.text()).doesNotContain("sk-secret");
    }
    // refused before routing: no decision was made, none is in flight, the replica saw nothing
    assertThat(outcomes.failures).isEmpty();
    assertThat(outcomes.completions).isEmpty();
    assertThat(inFlight()).isZero();
    assertThat(a.finishedRequests() + a.abortedRequests()).isZero();
  }

  @Test
  void modelsWithNoReplicaUpIs502() throws Exception {
    startGateway(outcomes, at(portWithNothingListening()));
    assertThat(get("/v1/models").statusCode()).isEqualTo(502);
  }

  /** Each routed request as the router read it. */
  static final class Seen implements RequestListener {
    final java.util.concurrent.BlockingQueue<InferenceRequest> requests =
        new java.util.concurrent.LinkedBlockingQueue<>();

    @Override
    public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
        io.epp4j.api.RoutingDecision decision) {
      requests.add(request);
    }

    InferenceRequest next() throws InterruptedException {
      InferenceRequest r = requests.poll(DEADLINE.toMillis(), TimeUnit.MILLISECONDS);
      assertThat(r).as("a request was routed").isNotNull();
      return r;
    }
  }

  /** POSTs a completion with {@code head} (header lines ending in CRLF) added; the answer. */
  String postWithHeaderLines(byte[] head) throws IOException {
    byte[] body = completion("p").getBytes(StandardCharsets.UTF_8);
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
    out.writeBytes(("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
        + "Content-Type: application/json\r\nConnection: close\r\nContent-Length: "
        + body.length + "\r\n").getBytes(StandardCharsets.US_ASCII));
    out.writeBytes(head);
    out.writeBytes("\r\n".getBytes(StandardCharsets.US_ASCII));
    out.writeBytes(body);
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(),
        gateway.port())) {
      socket.setSoTimeout((int) DEADLINE.toMillis());
      socket.getOutputStream().write(out.toByteArray());
      return new String(socket.getInputStream().readAllBytes(), StandardCharsets.ISO_8859_1);
    }
  }

  @Test
  void aHeaderSentOnSeveralLinesIsReadAsItsValuesJoinedInOrder() throws Exception {
    // before, the gateway took each header's first line: two session ids routed as the first,
    // where Envoy's ext_proc server reads "s-1,s-2", and the second cookie line was never read
    Seen seen = new Seen();
    startGateway(seen, at(standIn().port()));
    String answer = postWithHeaderLines(("X-Session-Id: s-1\r\nCookie: a=1\r\n"
        + "x-session-id: s-2\r\ncookie: sid=7\r\n").getBytes(StandardCharsets.US_ASCII));
    assertThat(answer).startsWith("HTTP/1.1 200");
    InferenceRequest r = seen.next();
    assertThat(r.sessionKey()).isEqualTo("s-1,s-2");
    assertThat(r.header("x-session-id")).isEqualTo("s-1,s-2");
    assertThat(r.header("cookie")).isEqualTo("a=1; sid=7");
  }

  @Test
  void headerBytesAboveAsciiAreReadOneCharacterPerByteAsTheExtProcServerReadsThem()
      throws Exception {
    // "café" sent as UTF-8 and a byte that is no UTF-8 at all, on two lines of one header
    Seen seen = new Seen();
    startGateway(seen, at(standIn().port()));
    java.io.ByteArrayOutputStream head = new java.io.ByteArrayOutputStream();
    head.writeBytes("x-session-id: caf".getBytes(StandardCharsets.US_ASCII));
    head.writeBytes(new byte[] {(byte) 0xc3, (byte) 0xa9, '\r', '\n'});
    head.writeBytes("x-session-id: t".getBytes(StandardCharsets.US_ASCII));
    head.writeBytes(new byte[] {(byte) 0xff, '\r', '\n'});
    assertThat(postWithHeaderLines(head.toByteArray())).startsWith("HTTP/1.1 200");
    assertThat(seen.next().sessionKey()).isEqualTo("caf\u00c3\u00a9,t\u00ff");
  }

  @Test
  void aPrioritySentTwiceIsRefusedNamingTheHeader() throws Exception {
    // one of the two was taken before; as through Envoy, two priorities are no integer
    StandInVllm replica = standIn();
    startGateway(outcomes, at(replica.port()));
    String answer = postWithHeaderLines(("x-request-priority: 5\r\nx-request-priority: -1\r\n")
        .getBytes(StandardCharsets.US_ASCII));
    assertThat(answer).startsWith("HTTP/1.1 400").contains("routing_invalid_request")
        .contains("x-request-priority");
    assertThat(replica.finishedRequests() + replica.abortedRequests()).isZero();
  }

  @Test
  void theRouterReadsThePathWithItsQueryAndTheClientsAddressAsThroughEnvoy() throws Exception {
    // the gateway gave the router the client's headers alone: query:<name> hash and session
    // keys found no key, and source-ip keys read the x-forwarded-for the client wrote
    Seen seen = new Seen();
    StandInVllm a = standIn();
    StandInVllm b = standIn();
    StandInVllm c = standIn();
    Router router = Router.builder().endpoints(List.of(at(a.port()), at(b.port()), at(c.port())))
        .listener(seen).configYaml("""
            plugins:
            - type: ring-hash-picker
              parameters: {hashOn: "query:user"}
            schedulingProfiles:
            - name: default
              plugins: [{pluginRef: ring-hash-picker}]
            """, "query").build();
    gateway = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router);
    java.util.Set<String> places = new java.util.HashSet<>();
    for (int i = 0; i < 12; i++) {
      HttpResponse<String> r = client.send(HttpRequest.newBuilder(
              uri("/v1/completions?user=alice&n=" + i)).timeout(DEADLINE)
          .header("content-type", "application/json")
          .header("x-forwarded-for", "198.51.100." + i)
          .POST(HttpRequest.BodyPublishers.ofString(completion("p"))).build(),
          HttpResponse.BodyHandlers.ofString());
      assertThat(r.statusCode()).isEqualTo(200);
      places.add(r.headers().firstValue("x-gateway-destination-endpoint").orElseThrow());
      InferenceRequest seenRequest = seen.next();
      assertThat(seenRequest.header(":path")).isEqualTo("/v1/completions?user=alice&n=" + i);
      assertThat(seenRequest.header(":source-ip"))
          .isEqualTo(InetAddress.getLoopbackAddress().getHostAddress());
    }
    assertThat(places).as("one user's requests hashed to one place").hasSize(1);
  }
}
