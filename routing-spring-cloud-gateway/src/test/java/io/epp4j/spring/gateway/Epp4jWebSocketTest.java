package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.AppenderBase;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.WebSocket;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.slf4j.LoggerFactory;
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
 * A websocket upgrade on an {@code Epp4j} route (vLLM's {@code /v1/realtime} is one): the real
 * gateway on a random port, two stand-in websocket replicas on loopback (Reactor Netty servers
 * that echo each text frame with their name in front), a JDK websocket client.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jWebSocketTest.App.class,
    properties = {
        "spring.cloud.gateway.server.webflux.routes[0].id=llm",
        "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=Epp4j",
        "spring.cloud.gateway.server.webflux.routes[1].id=dead",
        "spring.cloud.gateway.server.webflux.routes[1].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[1].predicates[0]=Path=/dead/v1/**",
        "spring.cloud.gateway.server.webflux.routes[1].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[1].filters[1]=Epp4j=dead",
        "spring.cloud.gateway.server.webflux.routes[2].id=fallback",
        "spring.cloud.gateway.server.webflux.routes[2].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[2].predicates[0]=Path=/fallback/v1/**",
        "spring.cloud.gateway.server.webflux.routes[2].filters[0]=StripPrefix=1",
        "spring.cloud.gateway.server.webflux.routes[2].filters[1]=Epp4j=fallback",
        "epp4j.metrics.enabled=false",
        // short, so that a session outlives it within a test
        "epp4j.in-flight-max-age=1s"})
@Timeout(60)
class Epp4jWebSocketTest {
  static final DisposableServer A = echo("a");
  static final DisposableServer B = echo("b");

  /** A websocket replica at {@code /v1/realtime}: each text frame back as {@code name:text}. */
  static DisposableServer echo(String name) {
    return HttpServer.create().host("127.0.0.1").port(0)
        .route(routes -> routes.ws("/v1/realtime", (in, out) -> out.sendString(
            in.receive().asString().map(text -> name + ":" + text)))
            // echoes each frame until one says "crash": then the connection drops without a close
            // frame, as when the replica's process dies mid-session
            .ws("/v1/crash", (in, out) -> in.receive().asString()
                .concatMap(text -> text.equals("crash")
                    ? Mono.<Void>fromRunnable(() -> in.withConnection(c -> c.channel().close()))
                    : out.sendString(Mono.just(name + ":" + text)).then())
                .then())
            // echoes each frame until one says "bye" (it closes the session normally) or "fail"
            // (it closes it with 1011, an internal error)
            .ws("/v1/bye", (in, out) -> in.receive().asString()
                .concatMap(text -> text.equals("bye") ? out.sendClose(1000, "bye")
                    : text.equals("fail") ? out.sendClose(1011, "engine error")
                    : out.sendString(Mono.just(name + ":" + text)).then())
                .then()))
        .bindNow();
  }

  static String id(DisposableServer server) {
    return "127.0.0.1:" + server.port();
  }

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", () -> id(A) + "," + id(B));
    registry.add("epp4j.pools.dead.endpoints", () -> "127.0.0.1:" + CLOSED_PORT);
    // decisions name both: the unreachable one first in about half of them
    registry.add("epp4j.pools.fallback.endpoints", () -> "127.0.0.1:" + CLOSED_PORT + "," + id(A));
    registry.add("epp4j.pools.fallback.config-file", () -> {
      try {
        return Path.of(Epp4jWebSocketTest.class.getResource("/two-picks.yaml").toURI()).toString();
      } catch (java.net.URISyntaxException e) {
        throw new IllegalStateException(e);
      }
    });
  }

  /** A loopback port nothing listens on: a replica that cannot be reached. */
  static final int CLOSED_PORT = closedPort();

  private static int closedPort() {
    try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1,
        java.net.InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  @AfterAll
  static void stopReplicas() {
    A.disposeNow();
    B.disposeNow();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Outcomes outcomes() {
      return new Outcomes();
    }
  }

  /** What the router heard back from the filter, through the decisions' listeners. */
  static final class Outcomes implements RequestListener {
    final AtomicInteger completed = new AtomicInteger();
    final List<Throwable> failures = new CopyOnWriteArrayList<>();
    final List<String> fallbacks = new CopyOnWriteArrayList<>();
    final List<String> completedOn = new CopyOnWriteArrayList<>();
    final AtomicInteger unreachablePrimaries = new AtomicInteger();

    @Override
    public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
        io.epp4j.api.RoutingDecision d) {
      if (d.primary().id().equals("127.0.0.1:" + CLOSED_PORT)) {
        unreachablePrimaries.incrementAndGet();
      }
    }

    @Override
    public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
      fallbacks.add(from.id() + ">" + to.id());
    }

    @Override
    public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
      completedOn.add(endpoint.id());
      completed.incrementAndGet();
    }

    @Override
    public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
      failures.add(cause);
    }
  }

  /** Everything logged at WARN or above while a test runs, whatever the logger. */
  static final class Problems extends AppenderBase<ILoggingEvent> {
    final List<String> logged = new CopyOnWriteArrayList<>();

    @Override
    protected void append(ILoggingEvent e) {
      if (e.getLevel().isGreaterOrEqual(Level.WARN)) {
        logged.add(e.getLevel() + " " + e.getLoggerName() + ": " + e.getFormattedMessage()
            + (e.getThrowableProxy() == null ? "" : " " + e.getThrowableProxy().getClassName()
                + ": " + e.getThrowableProxy().getMessage()));
      }
    }
  }

  @Value("${local.server.port}")
  int port;
  @Autowired
  Router router;
  @Autowired
  Outcomes outcomes;
  @Autowired
  Epp4jPools pools;

  private final Problems problems = new Problems();

  @BeforeEach
  void captureLogs() {
    problems.start();
    root().addAppender(problems);
  }

  @AfterEach
  void releaseLogs() {
    root().detachAppender(problems);
    problems.stop();
  }

  private static ch.qos.logback.classic.Logger root() {
    return (ch.qos.logback.classic.Logger) LoggerFactory.getLogger(
        org.slf4j.Logger.ROOT_LOGGER_NAME);
  }

  @Test
  void aSessionIsRoutedToAReplicaCountedInFlightWhileOpenAndCompletedWhenItCloses()
      throws Exception {
    int completed = outcomes.completed.get();
    Frames frames = new Frames();
    WebSocket ws = open("/v1/realtime", frames);

    ws.sendText("hello", true).get(10, TimeUnit.SECONDS);
    String echoed = frames.next();
    assertThat(echoed).as("answered by a replica of the pool, not the route's placeholder")
        .isIn("a:hello", "b:hello");
    // the replica serves the session for as long as it is open (vLLM's /v1/realtime works on
    // the audio it receives throughout): it is counted in flight there until the socket closes
    String replica = echoed.startsWith("a:") ? id(A) : id(B);
    assertThat(inFlight(replica)).isEqualTo(1);
    ws.sendText("again", true).get(10, TimeUnit.SECONDS);
    assertThat(frames.next()).isEqualTo(echoed.substring(0, 2) + "again");
    assertThat(outcomes.completed.get()).isEqualTo(completed);

    ws.sendClose(WebSocket.NORMAL_CLOSURE, "done").get(10, TimeUnit.SECONDS);
    assertThat(frames.closed.get(10, TimeUnit.SECONDS)).isEqualTo(WebSocket.NORMAL_CLOSURE);
    await(() -> outcomes.completed.get() > completed);
    await(() -> inFlight() == 0);
    assertThat(outcomes.failures).isEmpty();
    assertThat(problems.logged).isEmpty();
  }

  @Test
  void aSessionOpenLongerThanTheInFlightMaxAgeStaysInFlightUntilItCloses() throws Exception {
    int completed = outcomes.completed.get();
    Frames frames = new Frames();
    WebSocket ws = open("/v1/realtime", frames);
    hello(ws, frames);
    // three times the maximum age of 1 s, with the sweeps that would release a forgotten decision
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(3);
    while (System.nanoTime() < end) {
      router.updateMetrics(id(A), EndpointMetrics.builder().build()); // sweeps when one is due
      assertThat(inFlight()).as("the open session counts in flight").isEqualTo(1);
      Thread.sleep(50);
    }
    ws.sendClose(WebSocket.NORMAL_CLOSURE, "done").get(10, TimeUnit.SECONDS);
    await(() -> outcomes.completed.get() > completed);
    await(() -> inFlight() == 0);
  }

  @Test
  void aSessionTheReplicaRefusesFailsItsDecisionAndNothingStaysInFlight() throws Exception {
    // the gateway upgrades the client's connection before it opens the replica's; a replica
    // answering the upgrade with a 404 closes the session at once. Its decision was completed,
    // crediting the replica with a success
    int completed = outcomes.completed.get();
    int failed = outcomes.failures.size();
    Frames frames = new Frames();
    open("/v1/not-a-socket", frames);
    assertThat(frames.closed.get(10, TimeUnit.SECONDS)).isNotEqualTo(WebSocket.NORMAL_CLOSURE);
    await(() -> inFlight() == 0);
    await(() -> outcomes.failures.size() > failed);
    assertThat(outcomes.failures.subList(failed, outcomes.failures.size())).singleElement()
        .asString().contains("404");
    assertThat(outcomes.completed.get()).isEqualTo(completed);
  }

  @Test
  void aSessionToAnUnreachableReplicaFailsItsDecision() throws Exception {
    Router dead = pools.router("dead");
    int completed = outcomes.completed.get();
    int failed = outcomes.failures.size();
    Frames frames = new Frames();
    open("/dead/v1/realtime", frames);
    assertThat(frames.closed.get(10, TimeUnit.SECONDS)).isNotEqualTo(WebSocket.NORMAL_CLOSURE);
    await(() -> outcomes.failures.size() > failed);
    assertThat(outcomes.failures).hasSize(failed + 1);
    assertThat(dead.endpoints()).allSatisfy(c -> assertThat(c.inFlightRequests()).isZero());
    assertThat(outcomes.completed.get()).isEqualTo(completed);
  }

  /**
   * A decision that names a second endpoint: when the replica's connection is refused, the
   * session is opened to the next endpoint, the decision told (onFallback), and the client gets
   * its session as if the first had answered.
   */
  @Test
  void aSessionWhosePrimaryRefusesTheConnectionIsOpenedToTheDecisionsNextEndpoint()
      throws Exception {
    Router fallback = pools.router("fallback");
    int failed = outcomes.failures.size();
    int fellBack = outcomes.fallbacks.size();
    int primariesBefore = outcomes.unreachablePrimaries.get();
    int completedBefore = outcomes.completedOn.size();
    int sessions = 10;
    for (int i = 0; i < sessions; i++) {
      Frames frames = new Frames();
      WebSocket ws = open("/fallback/v1/realtime", frames);
      ws.sendText("hello", true).get(10, TimeUnit.SECONDS);
      assertThat(frames.next()).as("session %d", i).isEqualTo("a:hello");
      ws.sendClose(WebSocket.NORMAL_CLOSURE, "done").get(10, TimeUnit.SECONDS);
      assertThat(frames.closed.get(10, TimeUnit.SECONDS)).isEqualTo(WebSocket.NORMAL_CLOSURE);
    }
    await(() -> outcomes.completedOn.size() >= completedBefore + sessions);
    // ties are broken at random: some decisions put the unreachable one first
    int unreachableFirst = outcomes.unreachablePrimaries.get() - primariesBefore;
    assertThat(unreachableFirst).isPositive();
    assertThat(outcomes.fallbacks.subList(fellBack, outcomes.fallbacks.size()))
        .hasSize(unreachableFirst)
        .allSatisfy(f -> assertThat(f).isEqualTo("127.0.0.1:" + CLOSED_PORT + ">" + id(A)));
    assertThat(outcomes.completedOn.subList(completedBefore, outcomes.completedOn.size()))
        .hasSize(sessions).containsOnly(id(A));
    assertThat(outcomes.failures).hasSize(failed);
    await(() -> fallback.endpoints().stream().allMatch(c -> c.inFlightRequests() == 0));
    assertThat(problems.logged).as("the refused connection, handled, is not logged").isEmpty();
  }

  @Test
  void aSessionWhoseReplicaDropsTheConnectionMidSessionFailsItsDecision() throws Exception {
    int completed = outcomes.completed.get();
    int failed = outcomes.failures.size();
    Frames frames = new Frames();
    WebSocket ws = open("/v1/crash", frames);
    hello(ws, frames);
    ws.sendText("crash", true).get(10, TimeUnit.SECONDS);
    // the replica's connection is gone without a close frame: the client's session is closed
    // as by a server error, saying why, and the replica did not serve it to its end
    assertThat(frames.closed.get(10, TimeUnit.SECONDS)).isEqualTo(1011);
    assertThat(frames.reason).isEqualTo("the replica's connection was lost");
    await(() -> inFlight() == 0);
    await(() -> outcomes.failures.size() > failed);
    assertThat(outcomes.failures.subList(failed, outcomes.failures.size())).singleElement()
        .asString().contains("without a close frame");
    assertThat(outcomes.completed.get()).isEqualTo(completed);
  }

  @Test
  void aSessionTheReplicaClosesNormallyCompletesItsDecision() throws Exception {
    int completed = outcomes.completed.get();
    int failed = outcomes.failures.size();
    Frames frames = new Frames();
    WebSocket ws = open("/v1/bye", frames);
    hello(ws, frames);
    ws.sendText("bye", true).get(10, TimeUnit.SECONDS);
    assertThat(frames.closed.get(10, TimeUnit.SECONDS)).isEqualTo(WebSocket.NORMAL_CLOSURE);
    await(() -> outcomes.completed.get() > completed);
    await(() -> inFlight() == 0);
    assertThat(outcomes.failures).hasSize(failed);
    assertThat(problems.logged).isEmpty();
  }

  @Test
  void aSessionTheReplicaClosesWithAnErrorCodeFailsItsDecision() throws Exception {
    int completed = outcomes.completed.get();
    int failed = outcomes.failures.size();
    Frames frames = new Frames();
    WebSocket ws = open("/v1/bye", frames);
    hello(ws, frames);
    ws.sendText("fail", true).get(10, TimeUnit.SECONDS);
    assertThat(frames.closed.get(10, TimeUnit.SECONDS)).isEqualTo(1011);
    await(() -> inFlight() == 0);
    await(() -> outcomes.failures.size() > failed);
    assertThat(outcomes.failures.subList(failed, outcomes.failures.size())).singleElement()
        .asString().contains("code 1011").contains("engine error");
    assertThat(outcomes.completed.get()).isEqualTo(completed);
  }

  /** A client session through the gateway at {@code path}, its frames going to {@code frames}. */
  private WebSocket open(String path, Frames frames) throws Exception {
    return HttpClient.newHttpClient().newWebSocketBuilder()
        .connectTimeout(Duration.ofSeconds(10))
        .buildAsync(URI.create("ws://127.0.0.1:" + port + path), frames)
        .get(20, TimeUnit.SECONDS);
  }

  /** Sends "hello" and checks a replica of the pool echoes it. */
  private static void hello(WebSocket ws, Frames frames) throws Exception {
    ws.sendText("hello", true).get(10, TimeUnit.SECONDS);
    assertThat(frames.next()).isIn("a:hello", "b:hello");
  }

  private int inFlight() {
    int n = 0;
    for (Candidate c : router.endpoints()) {
      n += c.inFlightRequests();
    }
    return n;
  }

  private int inFlight(String id) {
    for (Candidate c : router.endpoints()) {
      if (c.id().equals(id)) {
        return c.inFlightRequests();
      }
    }
    throw new AssertionError("no endpoint " + id);
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

  /** The text frames the client receives, and the close code. */
  static final class Frames implements WebSocket.Listener {
    final BlockingQueue<String> texts = new LinkedBlockingQueue<>();
    final CompletableFuture<Integer> closed = new CompletableFuture<>();
    volatile String reason;
    private final StringBuilder partial = new StringBuilder();

    @Override
    public CompletionStage<?> onText(WebSocket ws, CharSequence data, boolean last) {
      partial.append(data);
      if (last) {
        texts.add(partial.toString());
        partial.setLength(0);
      }
      ws.request(1);
      return null;
    }

    @Override
    public CompletionStage<?> onClose(WebSocket ws, int statusCode, String reason) {
      this.reason = reason;
      closed.complete(statusCode);
      return null;
    }

    @Override
    public void onError(WebSocket ws, Throwable error) {
      closed.completeExceptionally(error);
    }

    String next() throws InterruptedException {
      String text = texts.poll(10, TimeUnit.SECONDS);
      if (text == null) {
        throw new AssertionError("no frame within 10 s");
      }
      return text;
    }
  }
}
