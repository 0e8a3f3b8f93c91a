package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.core.Router;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.reactor.netty.NettyServerCustomizer;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.util.TestPropertyValues;
import org.springframework.cloud.context.environment.EnvironmentChangeEvent;
import org.springframework.cloud.gateway.config.HttpClientCustomizer;
import org.springframework.cloud.gateway.filter.GlobalFilter;
import org.springframework.context.annotation.Bean;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Config reload while requests (JSON and SSE) stream through the real gateway: the pool and the
 * routing config change twice under traffic, and no request may fail, lose its stream or leak an
 * in-flight count.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jReloadUnderTrafficTest.App.class,
    properties = {
        "spring.cloud.gateway.server.webflux.routes[0].id=llm",
        "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=Epp4j",
        "epp4j.metrics.enabled=false"})
@Timeout(90)
class Epp4jReloadUnderTrafficTest {
  static final StandInReplica A = StandInReplica.start("a");
  static final StandInReplica B = StandInReplica.start("b");
  static final StandInReplica C = StandInReplica.start("c");
  static final HttpClient CLIENT = HttpClient.newBuilder()
      .version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(5)).build();
  static final int THREADS = 4;
  /** Requests each phase (before, between and after the reloads) must have answered, at least. */
  static final int PER_PHASE = 60;

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", () -> A.id() + "," + B.id());
  }

  static final WireRecorder WIRE = new WireRecorder();

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    HttpClientCustomizer wireRecorderClient() {
      return WIRE.clientCustomizer();
    }

    @Bean
    NettyServerCustomizer wireRecorderServer() {
      return WIRE.serverCustomizer();
    }

    @Bean
    GlobalFilter wireRecorderFilter() {
      return WIRE.filter();
    }
  }

  @Value("${local.server.port}")
  int port;
  @Autowired
  Router router;
  @Autowired
  ConfigurableApplicationContext ctx;

  @AfterAll
  static void stopReplicas() {
    A.close();
    B.close();
    C.close();
  }

  /** One answered request: which replica served it, and whether it was sent after a reload. */
  record Answer(int sentAfterReload, String replica) {}

  @Test
  void reloadsUnderStreamingTrafficLoseNoRequestAndTheNewPoolTakesOver() throws Exception {
    // 0: none yet; 1: after the first reload finished; 2: after the second
    AtomicInteger reloadsDone = new AtomicInteger();
    AtomicInteger sent = new AtomicInteger();
    // answers per phase the request was sent in, so each wait counts only traffic sent after the
    // reload before it: requests already in flight when a reload starts cannot satisfy it
    AtomicInteger[] answeredIn = {new AtomicInteger(), new AtomicInteger(), new AtomicInteger()};
    ConcurrentLinkedQueue<Answer> answers = new ConcurrentLinkedQueue<>();
    ConcurrentLinkedQueue<String> problems = new ConcurrentLinkedQueue<>();
    java.util.concurrent.atomic.AtomicBoolean sending =
        new java.util.concurrent.atomic.AtomicBoolean(true);
    ExecutorService clients = Executors.newFixedThreadPool(THREADS);
    List<Future<?>> running = new ArrayList<>();
    long stopAt = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    try {
      for (int t = 0; t < THREADS; t++) {
        int thread = t;
        running.add(clients.submit(() -> {
          for (int i = 0; sending.get() && System.nanoTime() < stopAt; i++) {
            boolean stream = (i + thread) % 2 == 0;
            int phase = reloadsDone.get();
            sent.incrementAndGet();
            Partial partial = new Partial();
            try {
              // the request's own timeout ends at the headers; a stream that stalls after them
              // must show up as a problem, not hang the test, saying how far it got
              HttpResponse<String> r = CLIENT.sendAsync(request(thread + "-" + i, stream),
                  partial).get(30, TimeUnit.SECONDS);
              String body = r.body();
              boolean whole = stream
                  ? body.contains("\"cached_tokens\":" + StandInReplica.CACHED)
                      && body.trim().endsWith("data: [DONE]")
                  : body.contains("\"cached_tokens\":" + StandInReplica.CACHED)
                      && body.trim().endsWith("}");
              if (r.statusCode() != 200 || !whole) {
                problems.add("request " + thread + "-" + i + (stream ? " (stream)" : "")
                    + ": status " + r.statusCode() + ", body " + body);
              } else {
                answers.add(new Answer(phase, r.headers().firstValue("x-replica").orElse("?")));
              }
            } catch (Exception e) {
              problems.add("request " + thread + "-" + i + (stream ? " (stream)" : "")
                  + " sent in phase " + phase + ": " + e + "; " + partial + "; replicas: "
                  + replicaSteps(thread + "-" + i) + "; " + WIRE.report(thread + "-" + i));
            }
            answeredIn[phase].incrementAndGet();
          }
        }));
      }

      // first reload: A leaves, C joins, the preset replaces the default profile
      await(() -> answeredIn[0].get() >= PER_PHASE, "traffic before the first reload");
      reload("epp4j.endpoints=" + B.id() + "," + C.id(), "epp4j.preset=epp4j");
      assertThat(router.config().plugins()).containsKey("token-cost-picker");
      reloadsDone.set(1);

      // second reload: only C, with a config file whose picker names two endpoints
      await(() -> answeredIn[1].get() >= PER_PHASE, "traffic sent between the reloads");
      Path twoPicks = Path.of(getClass().getResource("/two-picks.yaml").toURI());
      reload("epp4j.endpoints=" + C.id(), "epp4j.preset=", "epp4j.config-file=" + twoPicks);
      assertThat(router.config().plugins()).containsKey("max-score-picker")
          .doesNotContainKey("token-cost-picker");
      reloadsDone.set(2);

      await(() -> answeredIn[2].get() >= PER_PHASE, "traffic sent after the second reload");
      sending.set(false);
      for (Future<?> f : running) {
        // each thread's last request ends within 30 s of its start
        f.get(40, TimeUnit.SECONDS);
      }
    } finally {
      sending.set(false);
      clients.shutdownNow();
      assertThat(clients.awaitTermination(10, TimeUnit.SECONDS)).isTrue();
    }

    assertThat(problems).isEmpty();
    // the record a stalled answer would be described with: request 0-0 is a stream sent first
    assertThat(replicaSteps("0-0")).contains(
        "received, a flushed, b flushed, usage flushed, [DONE] flushed, closed");
    assertThat(WIRE.report("0-0")).contains("writeAndFlushWith", "chunks onComplete",
        "write onComplete", "chain onComplete", "concatMap[terminated=true",
        "sendMany[terminated=true");
    assertThat(answers).hasSize(sent.get());
    // a request sent after a reload finished is routed by the new pool, never the old one
    assertThat(answers).filteredOn(a -> a.sentAfterReload() == 1).hasSizeGreaterThanOrEqualTo(
        PER_PHASE).extracting(Answer::replica).allMatch(r -> Set.of("b", "c").contains(r));
    assertThat(answers).filteredOn(a -> a.sentAfterReload() == 2).hasSizeGreaterThanOrEqualTo(
        PER_PHASE).extracting(Answer::replica).containsOnly("c");
    assertThat(router.endpoints()).extracting(Candidate::id).containsExactly(C.id());
    await(() -> inFlight() == 0, "in-flight back to 0 (now " + inFlight() + ")");
  }

  private void reload(String... properties) {
    reload(ctx, properties);
  }

  /** Applies {@code properties} to the context and publishes their change, as a refresh does. */
  static void reload(ConfigurableApplicationContext ctx, String... properties) {
    TestPropertyValues.of(properties).applyTo(ctx);
    Set<String> keys = new java.util.HashSet<>();
    for (String p : properties) {
      keys.add(p.substring(0, p.indexOf('=')));
    }
    ctx.publishEvent(new EnvironmentChangeEvent(ctx, keys));
  }

  private HttpRequest request(String tag, boolean stream) {
    return request(port, tag, stream);
  }

  /** A tagged completion request to the gateway on {@code port}, streamed or not. */
  static HttpRequest request(int port, String tag, boolean stream) {
    String body = "{\"model\":\"m\"," + (stream
        ? "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        : "") + "\"prompt\":\"reload under traffic, tag " + tag + "\"}";
    return HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/v1/completions"))
        .timeout(Duration.ofSeconds(20))
        .header("content-type", "application/json")
        .header("x-tag", tag)
        .POST(HttpRequest.BodyPublishers.ofString(body))
        .build();
  }

  /**
   * The body as a string, keeping what arrived so far, the status and the replica, so that an
   * answer that stalls can be described.
   */
  private static final class Partial implements HttpResponse.BodyHandler<String> {
    private final StringBuilder received = new StringBuilder();
    private volatile String head = "no status line";
    private volatile boolean ended;

    @Override
    public HttpResponse.BodySubscriber<String> apply(HttpResponse.ResponseInfo info) {
      head = "status " + info.statusCode() + " from replica "
          + info.headers().firstValue("x-replica").orElse("?");
      return HttpResponse.BodySubscribers.fromSubscriber(
          new java.util.concurrent.Flow.Subscriber<List<java.nio.ByteBuffer>>() {
            @Override
            public void onSubscribe(java.util.concurrent.Flow.Subscription s) {
              s.request(Long.MAX_VALUE);
            }

            @Override
            public void onNext(List<java.nio.ByteBuffer> buffers) {
              synchronized (received) {
                for (java.nio.ByteBuffer b : buffers) {
                  received.append(java.nio.charset.StandardCharsets.UTF_8.decode(b));
                }
              }
            }

            @Override
            public void onError(Throwable t) {
              ended = true;
            }

            @Override
            public void onComplete() {
              ended = true;
            }
          },
          subscriber -> {
            synchronized (received) {
              return received.toString();
            }
          });
    }

    @Override
    public String toString() {
      synchronized (received) {
        return head + (ended ? ", body ended" : ", body open") + " after "
            + received.length() + " chars: " + received;
      }
    }
  }

  /** What each replica did for the request with this tag. */
  private static String replicaSteps(String tag) {
    StringBuilder b = new StringBuilder();
    for (StandInReplica r : List.of(A, B, C)) {
      b.append(r.name).append(": ").append(r.progress.getOrDefault(tag, "never saw it"))
          .append(r == C ? "" : "; ");
    }
    return b.toString();
  }

  private int inFlight() {
    int n = 0;
    for (Candidate c : router.endpoints()) {
      n += c.inFlightRequests();
    }
    return n;
  }

  private static void await(BooleanSupplier done, String what) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (!done.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out waiting for " + what);
      }
      Thread.sleep(5);
    }
  }
}
