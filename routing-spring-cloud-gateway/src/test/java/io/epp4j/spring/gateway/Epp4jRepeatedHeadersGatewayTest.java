package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.netty.buffer.Unpooled;
import java.io.ByteArrayOutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
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
import reactor.netty.http.HttpProtocol;
import reactor.netty.http.client.HttpClient;

/**
 * A request header sent on several lines, through the real gateway (Netty): the router reads it
 * as its values joined in order, as the ext_proc server reads what Envoy sends, whatever the
 * lines' casing; header bytes above 0x7F read one character per byte.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jRepeatedHeadersGatewayTest.App.class,
    properties = {
        "server.http2.enabled=true", // h2c with prior knowledge beside HTTP/1.1
        "spring.cloud.gateway.server.webflux.routes[0].id=llm",
        "spring.cloud.gateway.server.webflux.routes[0].uri=http://replica.invalid",
        "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Path=/v1/**",
        "spring.cloud.gateway.server.webflux.routes[0].filters[0]=Epp4j",
        "epp4j.metrics.enabled=false"})
@Timeout(60)
class Epp4jRepeatedHeadersGatewayTest {
  static final StandInReplica A = StandInReplica.start("a");
  static final String BODY = "{\"model\":\"m\",\"prompt\":\"p\"}";

  @DynamicPropertySource
  static void replicas(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", A::id);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Seen seen() {
      return new Seen();
    }
  }

  /** Each routed request as the router read it. */
  static final class Seen implements RequestListener {
    final BlockingQueue<InferenceRequest> requests = new LinkedBlockingQueue<>();

    @Override
    public void afterRouting(InferenceRequest request, CycleState state,
        RoutingDecision decision) {
      requests.add(request);
    }
  }

  @Value("${local.server.port}")
  int port;
  @Autowired
  Seen seen;

  @BeforeEach
  void forgetEarlierRequests() {
    seen.requests.clear();
  }

  @AfterAll
  static void stop() {
    A.close();
  }

  /** Sends {@code head} (header lines, each ending in CRLF) with a JSON body; the answer. */
  String http1(byte[] head) throws Exception {
    byte[] body = BODY.getBytes(StandardCharsets.UTF_8);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.writeBytes(("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + "Content-Type: application/json\r\nConnection: close\r\nContent-Length: "
        + body.length + "\r\n").getBytes(StandardCharsets.US_ASCII));
    out.writeBytes(head);
    out.writeBytes("\r\n".getBytes(StandardCharsets.US_ASCII));
    out.writeBytes(body);
    try (Socket socket = new Socket(InetAddress.getLoopbackAddress(), port)) {
      socket.setSoTimeout(20_000);
      socket.getOutputStream().write(out.toByteArray());
      return new String(socket.getInputStream().readAllBytes(), StandardCharsets.ISO_8859_1);
    }
  }

  InferenceRequest next() throws InterruptedException {
    InferenceRequest r = seen.requests.poll(10, TimeUnit.SECONDS);
    assertThat(r).as("a request was routed").isNotNull();
    return r;
  }

  @Test
  void aHeaderSentOnSeveralLinesIsReadAsItsValuesJoinedInOrder() throws Exception {
    // before, the filter took each header's first line: two session ids routed as the first,
    // where the ext_proc server reads "s-1,s-2", and the second cookie line was never read.
    // The lines differ in case: Netty keeps each name as sent
    ByteArrayOutputStream head = new ByteArrayOutputStream();
    head.writeBytes(("X-Session-Id: s-1\r\nCookie: a=1\r\nx-session-id: s-2\r\n"
        + "cookie: sid=7\r\n").getBytes(StandardCharsets.US_ASCII));
    assertThat(http1(head.toByteArray())).startsWith("HTTP/1.1 200");
    InferenceRequest r = next();
    assertThat(r.sessionKey()).isEqualTo("s-1,s-2");
    assertThat(r.header("x-session-id")).isEqualTo("s-1,s-2");
    assertThat(r.header("cookie")).isEqualTo("a=1; sid=7");
  }

  @Test
  void headerBytesAboveAsciiAreReadOneCharacterPerByteAsTheExtProcServerReadsThem() throws Exception {
    // "café" sent as UTF-8 and a byte that is no UTF-8 at all: each byte one character, so the
    // two session ids stay apart and read as the ext_proc server reads Envoy's raw_value
    ByteArrayOutputStream head = new ByteArrayOutputStream();
    head.writeBytes("x-session-id: caf".getBytes(StandardCharsets.US_ASCII));
    head.writeBytes(new byte[] {(byte) 0xc3, (byte) 0xa9, '\r', '\n'});
    head.writeBytes("x-session-id: t".getBytes(StandardCharsets.US_ASCII));
    head.writeBytes(new byte[] {(byte) 0xff, '\r', '\n'});
    assertThat(http1(head.toByteArray())).startsWith("HTTP/1.1 200");
    assertThat(next().sessionKey()).isEqualTo("caf\u00c3\u00a9,t\u00ff");
  }

  @Test
  void aPrioritySentTwiceIsRefusedNamingTheHeader() throws Exception {
    // one of the two was taken before: the request was queued at a priority the client did not
    // give alone; as through Envoy, two priorities are no integer
    String answer = http1(("x-request-priority: 5\r\nx-request-priority: -1\r\n")
        .getBytes(StandardCharsets.US_ASCII));
    assertThat(answer).startsWith("HTTP/1.1 400").contains("routing_invalid_request")
        .contains("x-request-priority");
  }

  @Test
  void overH2cTheLinesOfAHeaderAreJoinedTheSameWay() throws Exception {
    // HTTP/2 sends each cookie pair as a field of its own (RFC 9113 8.2.3); Netty joins them
    // with "; " before the filter sees them, the other headers' lines the filter joins
    HttpClient h2c = HttpClient.create().protocol(HttpProtocol.H2C)
        .responseTimeout(Duration.ofSeconds(20));
    Integer status = h2c.headers(h -> h.set("content-type", "application/json")
            .add("x-session-id", "s-1").add("x-session-id", "s-2")
            .add("cookie", "a=1").add("cookie", "sid=7"))
        .post().uri("http://127.0.0.1:" + port + "/v1/completions")
        .send(Mono.fromSupplier(() -> Unpooled.wrappedBuffer(
            BODY.getBytes(StandardCharsets.UTF_8))))
        .responseSingle((resp, b) -> b.asString().defaultIfEmpty("")
            .map(s -> resp.status().code()))
        .block(Duration.ofSeconds(20));
    assertThat(status).isEqualTo(200);
    InferenceRequest r = next();
    assertThat(r.sessionKey()).isEqualTo("s-1,s-2");
    assertThat(r.header("cookie")).isEqualTo("a=1; sid=7");
  }
}
