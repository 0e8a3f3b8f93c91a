package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import java.io.ByteArrayOutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Headers a routing plugin asks for whose name is no HTTP token or whose value holds a control
 * character, through the real gateway (Netty): the request is routed and answered with the
 * plugins' other headers, those are left out, and each is logged naming the header, never its
 * value.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jPluginHeadersGatewayTest.App.class,
    properties = {
        "spring.cloud.gateway.server.webflux.routes[0].id=llm",
        "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=Epp4j",
        "epp4j.metrics.enabled=false"})
@Timeout(60)
class Epp4jPluginHeadersGatewayTest {
  /** The forwarded requests' headers, as the replica got them. */
  static final BlockingQueue<Map<String, List<String>>> FORWARDED = new LinkedBlockingQueue<>();
  /** The forwarded requests' bodies, as the replica read them. */
  static final BlockingQueue<String> BODIES = new LinkedBlockingQueue<>();
  static final HttpServer REPLICA = replica();

  static HttpServer replica() {
    try {
      HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
      s.createContext("/", ex -> {
        BODIES.add(new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8));
        Map<String, List<String>> copy = new java.util.TreeMap<>(String.CASE_INSENSITIVE_ORDER);
        ex.getRequestHeaders().forEach((k, v) -> copy.put(k, new ArrayList<>(v)));
        FORWARDED.add(copy);
        byte[] b = "{\"choices\":[{\"text\":\"ok\"}]}".getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("content-type", "application/json");
        ex.sendResponseHeaders(200, b.length);
        ex.getResponseBody().write(b);
        ex.close();
      });
      s.start();
      return s;
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", () -> "127.0.0.1:" + REPLICA.getAddress().getPort());
  }

  static final io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader METRICS =
      io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader.create();

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    io.opentelemetry.api.OpenTelemetry otel() {
      return io.opentelemetry.sdk.OpenTelemetrySdk.builder()
          .setMeterProvider(io.opentelemetry.sdk.metrics.SdkMeterProvider.builder()
              .registerMetricReader(METRICS).build())
          .build();
    }

    /** Asks for bad request headers when the prompt says "request", bad response ones else. */
    @Bean
    RequestListener asksForBadHeaders() {
      return new RequestListener() {
        @Override
        public void afterRouting(InferenceRequest request, CycleState state,
            RoutingDecision decision) {
          decision.setRequestHeader("x-good", "fine");
          decision.setResponseHeader("x-also-good", d -> "fine too");
          if ("framing".equals(request.prompt())) {
            decision.setRequestHeader("content-length", "1");
            decision.setRequestHeader("Host", "elsewhere.invalid");
            decision.setResponseHeader("Content-Length", d -> "3");
          } else if ("request".equals(request.prompt())) {
            decision.setRequestHeader("x-tag", "prompt words\r\nx-injected: b");
            decision.setRequestHeader("x bad", "v");
          } else {
            decision.setResponseHeader("x-bad", d -> "prompt words\nx-injected: c");
          }
        }
      };
    }
  }

  @Value("${local.server.port}")
  int port;

  final List<LogRecord> logged = new CopyOnWriteArrayList<>();

  @BeforeEach
  void capture() {
    FORWARDED.clear();
    BODIES.clear();
  }

  @AfterAll
  static void stop() {
    REPLICA.stop(0);
  }

  String post(String prompt) throws Exception {
    byte[] body = ("{\"model\":\"m\",\"prompt\":\"" + prompt + "\"}")
        .getBytes(StandardCharsets.UTF_8);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.writeBytes(("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + "Content-Type: application/json\r\nConnection: close\r\nContent-Length: "
        + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
    out.writeBytes(body);
    Logger log = Logger.getLogger(Epp4jGatewayFilter.class.getName());
    Handler handler = new Handler() {
      @Override
      public void publish(LogRecord record) {
        logged.add(record);
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    log.addHandler(handler);
    try (Socket socket = new Socket(InetAddress.getLoopbackAddress(), port)) {
      socket.setSoTimeout(20_000);
      socket.getOutputStream().write(out.toByteArray());
      return new String(socket.getInputStream().readAllBytes(), StandardCharsets.ISO_8859_1);
    } finally {
      log.removeHandler(handler);
    }
  }

  static String head(String answer) {
    int end = answer.indexOf("\r\n\r\n");
    return (end < 0 ? answer : answer.substring(0, end)).toLowerCase(java.util.Locale.ROOT);
  }

  List<String> warnings() {
    return logged.stream().filter(r -> r.getLevel() == java.util.logging.Level.WARNING)
        .map(LogRecord::getMessage).toList();
  }

  static long leftOutMetric() {
    return METRICS.collectAllMetrics().stream()
        .filter(m -> m.getName().equals(Epp4jAutoConfiguration.HEADERS_LEFT_OUT_METRIC))
        .flatMap(m -> m.getLongSumData().getPoints().stream())
        .mapToLong(io.opentelemetry.sdk.metrics.data.LongPointData::getValue).sum();
  }

  @Test
  void badRequestHeadersAreLeftOutAndTheRequestIsSentWithTheOthers() throws Exception {
    // before, Netty refused the header ("Validation failed for header 'x-tag'"): the client got
    // a 500 and the request never reached the replica
    long before = Epp4jGatewayFilter.HEADER_REFUSALS.count();
    String answer = post("request");
    assertThat(answer).startsWith("HTTP/1.1 200");
    Map<String, List<String>> forwarded = FORWARDED.poll(10, TimeUnit.SECONDS);
    assertThat(forwarded).as("the request reached the replica").isNotNull();
    assertThat(forwarded.get("x-good")).containsExactly("fine");
    assertThat(forwarded).doesNotContainKeys("x-tag", "x bad", "x-injected");
    assertThat(head(answer)).contains("x-also-good: fine too");
    assertThat(Epp4jGatewayFilter.HEADER_REFUSALS.count() - before).isEqualTo(2);
    assertThat(leftOutMetric()).isGreaterThanOrEqualTo(2);
    assertThat(warnings()).anySatisfy(w -> assertThat(w).contains("request header")
        .contains("'x-tag'").contains("U+000D"));
    assertThat(warnings()).anySatisfy(w -> assertThat(w).contains("'x bad'"));
    assertThat(warnings()).noneSatisfy(w -> assertThat(w).contains("prompt words"));
  }

  @Test
  void aBadResponseHeaderIsLeftOutAndTheAnswerGoesOutWithTheOthers() throws Exception {
    long before = Epp4jGatewayFilter.HEADER_REFUSALS.count();
    String answer = post("response");
    assertThat(answer).startsWith("HTTP/1.1 200");
    assertThat(head(answer)).contains("x-also-good: fine too").doesNotContain("x-bad")
        .doesNotContain("x-injected");
    assertThat(answer).contains("\"text\":\"ok\"");
    assertThat(Epp4jGatewayFilter.HEADER_REFUSALS.count() - before).isEqualTo(1);
    assertThat(warnings()).anySatisfy(w -> assertThat(w).contains("response header")
        .contains("'x-bad'").contains("U+000A"));
    assertThat(warnings()).noneSatisfy(w -> assertThat(w).contains("prompt words"));
  }

  /**
   * The body's framing and the request's authority are the gateway's to set: a plugin's
   * content-length would cut the request or the answer short, its host would name another
   * server than the endpoint picked.
   */
  @Test
  void framingAndHostAskedForByAPluginAreLeftOutAndTheBodiesPassWhole() throws Exception {
    long before = Epp4jGatewayFilter.HEADER_REFUSALS.count();
    String answer = post("framing");
    assertThat(answer).startsWith("HTTP/1.1 200");
    assertThat(answer).contains("{\"choices\":[{\"text\":\"ok\"}]}");
    assertThat(head(answer)).doesNotContain("content-length: 3");
    Map<String, List<String>> forwarded = FORWARDED.poll(10, TimeUnit.SECONDS);
    assertThat(forwarded).as("the request reached the replica").isNotNull();
    assertThat(BODIES.poll(10, TimeUnit.SECONDS)).isEqualTo("{\"model\":\"m\",\"prompt\":\"framing\"}");
    assertThat(forwarded.get("host")).noneSatisfy(h -> assertThat(h).contains("elsewhere"));
    assertThat(forwarded.get("content-length")).doesNotContain("1");
    assertThat(Epp4jGatewayFilter.HEADER_REFUSALS.count() - before).isEqualTo(3);
    assertThat(warnings()).anySatisfy(w -> assertThat(w).contains("'content-length' frames the body"));
    // the decision keeps header names in lower case
    assertThat(warnings()).anySatisfy(w -> assertThat(w).contains("'host' is the request's authority"));
  }
}
