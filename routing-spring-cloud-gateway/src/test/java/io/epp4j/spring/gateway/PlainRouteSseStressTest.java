package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.http.HttpClient;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A manual stress run, not part of the build: the SSE answers of {@link StandInReplica} through a
 * plain Spring Cloud Gateway route to one fixed replica, without any epp4j filter on the route
 * (with {@code -Dsse.stress.epp4j=true}: through the {@code Epp4j} filter to two replicas), for
 * {@code -Dsse.stress.minutes=N} minutes on four client threads. It asks whether the rare
 * stall {@link Epp4jReloadUnderTrafficTest} meets (the gateway's write to the client never
 * completes, the replica having sent everything) happens in the gateway without epp4j:
 *
 * <pre>
 * ./mvnw -B -q -pl routing-spring-cloud-gateway -am test -Dtest=PlainRouteSseStressTest \
 *     -Dsurefire.failIfNoSpecifiedTests=false -Dsse.stress.minutes=10
 * </pre>
 *
 * Each stalled request is printed with what the replica and the wire recorder saw.
 */
@EnabledIfSystemProperty(named = "sse.stress.minutes", matches = "\\d+(\\.\\d+)?")
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jReloadUnderTrafficTest.App.class,
    properties = "epp4j.metrics.enabled=false")
class PlainRouteSseStressTest {
  static final StandInReplica A = StandInReplica.start("a");
  static final StandInReplica B = StandInReplica.start("b");
  static final StandInReplica C = StandInReplica.start("c");
  /**
   * {@code -Dsse.stress.reloadSeconds=S}: every S seconds the pool and the profile change, as in
   * the reload test ({@code a,b} with the default profile and {@code b,c} with the {@code epp4j}
   * preset, in turn), published as an {@code EnvironmentChangeEvent}.
   */
  static final double RELOAD_SECONDS =
      Double.parseDouble(System.getProperty("sse.stress.reloadSeconds", "0"));
  /** {@code -Dsse.stress.epp4j=true}: the route goes through the {@code Epp4j} filter to A and B. */
  static final boolean EPP4J = Boolean.getBoolean("sse.stress.epp4j");
  /** {@code -Dsse.stress.mixed=true}: every other request asks for a JSON answer, as in the reload test. */
  static final boolean MIXED = Boolean.getBoolean("sse.stress.mixed");
  static final HttpClient CLIENT = HttpClient.newBuilder()
      .version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(5)).build();
  // the reload test's application and recorder
  static final WireRecorder WIRE = Epp4jReloadUnderTrafficTest.WIRE;
  static final int THREADS = 4;

  @DynamicPropertySource
  static void replica(DynamicPropertyRegistry registry) {
    // the whole route here: a list bound from two property sources takes only one's elements
    registry.add("spring.cloud.gateway.server.webflux.routes[0].id", () -> "plain");
    registry.add("spring.cloud.gateway.server.webflux.routes[0].uri",
        () -> EPP4J ? "http://replica.invalid" : "http://" + A.id());
    registry.add("spring.cloud.gateway.server.webflux.routes[0].predicates[0]",
        () -> "Path=/v1/**");
    if (EPP4J) {
      registry.add("spring.cloud.gateway.server.webflux.routes[0].filters[0]", () -> "Epp4j");
    }
    registry.add("epp4j.endpoints", () -> A.id() + "," + B.id());
  }

  @Value("${local.server.port}")
  int port;
  @org.springframework.beans.factory.annotation.Autowired
  org.springframework.context.ConfigurableApplicationContext ctx;

  @AfterAll
  static void stopReplica() {
    A.close();
    B.close();
    C.close();
  }

  @Test
  void streamsThroughAPlainRouteNeverStall() throws Exception {
    double minutes = Double.parseDouble(System.getProperty("sse.stress.minutes"));
    long stopAt = System.nanoTime() + (long) (minutes * 60e9);
    AtomicInteger sent = new AtomicInteger();
    ConcurrentLinkedQueue<String> problems = new ConcurrentLinkedQueue<>();
    ExecutorService clients = Executors.newFixedThreadPool(THREADS);
    List<Future<?>> running = new ArrayList<>();
    for (int t = 0; t < THREADS; t++) {
      int thread = t;
      running.add(clients.submit(() -> {
        for (int i = 0; System.nanoTime() < stopAt; i++) {
          String tag = thread + "-" + i;
          boolean stream = !MIXED || (i + thread) % 2 == 0;
          sent.incrementAndGet();
          try {
            HttpResponse<String> r = CLIENT.sendAsync(
                Epp4jReloadUnderTrafficTest.request(port, tag, stream),
                HttpResponse.BodyHandlers.ofString()).get(30, TimeUnit.SECONDS);
            if (r.statusCode() != 200
                || !r.body().trim().endsWith(stream ? "data: [DONE]" : "}")) {
              problems.add(tag + ": status " + r.statusCode() + ", body " + r.body());
            }
          } catch (Exception e) {
            String p = tag + ": " + e + "; replica: "
                + A.progress.getOrDefault(tag, "-") + " / " + B.progress.getOrDefault(tag, "-")
                + " / " + C.progress.getOrDefault(tag, "-")
                + "; " + WIRE.report(tag);
            problems.add(p);
            System.err.println("STALL " + p);
          }
          A.progress.remove(tag);
          B.progress.remove(tag);
          C.progress.remove(tag);
          WIRE.forget(tag);
        }
      }));
    }
    int reloads = 0;
    if (RELOAD_SECONDS > 0) {
      while (System.nanoTime() < stopAt) {
        Thread.sleep((long) (RELOAD_SECONDS * 1000));
        boolean odd = reloads++ % 2 == 0;
        Epp4jReloadUnderTrafficTest.reload(ctx, odd ? "epp4j.endpoints=" + B.id() + "," + C.id()
                : "epp4j.endpoints=" + A.id() + "," + B.id(),
            odd ? "epp4j.preset=epp4j" : "epp4j.preset=");
      }
    }
    for (Future<?> f : running) {
      f.get((long) (minutes * 60) + 60, TimeUnit.SECONDS);
    }
    System.err.println("reloads: " + reloads);
    clients.shutdownNow();
    System.err.println((EPP4J ? "Epp4j route: " : "plain route: ") + sent.get()
        + (MIXED ? " requests (half streams), " : " streams, ") + problems.size() + " problems");
    assertThat(problems).isEmpty();
  }
}
