package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.Candidate;
import io.epp4j.spring.gateway.Http2Requests.Answer;
import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.netty.handler.ssl.util.SelfSignedCertificate;
import java.security.cert.CertificateException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import reactor.netty.http.Http2SslContextSpec;
import reactor.netty.http.HttpProtocol;
import reactor.netty.http.client.HttpClient;

/**
 * The gateway serving HTTP/2 over TLS (h2, negotiated by ALPN; Spring Boot's {@code server.ssl}
 * with a self-signed certificate made for the test) in front of HTTP/1.1 replicas: the
 * {@code Epp4j} filter routes, streams the answer, and answers 400, 413, 429 and 503 on an HTTP/2
 * stream, after which the connection serves the next request; with SCG's {@code Retry} filter in
 * front (the body cached before any route filter) as well as without.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    classes = Epp4jH2TlsTest.App.class,
    properties = {
        "server.http2.enabled=true",
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
@Timeout(90)
@SuppressWarnings("deprecation") // SelfSignedCertificate: Netty's successor is not on this classpath
class Epp4jH2TlsTest {
  static final StandInReplica A = StandInReplica.start("a");
  static final ObjectMapper JSON = new ObjectMapper();
  static final SelfSignedCertificate CERT = certificate();
  static final HttpClient H2 = HttpClient.create().protocol(HttpProtocol.H2)
      .secure(ssl -> ssl.sslContext(
          Http2SslContextSpec.forClient().configure(b -> b.trustManager(CERT.cert()))))
      .responseTimeout(Duration.ofSeconds(20));

  private static SelfSignedCertificate certificate() {
    try {
      return new SelfSignedCertificate("localhost");
    } catch (CertificateException e) {
      throw new IllegalStateException(e);
    }
  }

  @DynamicPropertySource
  static void replicasAndCertificate(DynamicPropertyRegistry registry) {
    registry.add("epp4j.endpoints", A::id);
    registry.add("server.ssl.certificate", () -> "file:" + CERT.certificate().getAbsolutePath());
    registry.add("server.ssl.certificate-private-key",
        () -> "file:" + CERT.privateKey().getAbsolutePath());
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {}

  @Value("${local.server.port}")
  int port;
  @Autowired
  Router router;

  @AfterAll
  static void stop() {
    A.close();
    CERT.delete();
  }

  @Test
  void completionsAndStreamsAreRoutedOverH2() throws Exception {
    for (String prefix : List.of("", "/retried")) {
      String body = "{\"model\":\"m\",\"prompt\":\"over h2 " + prefix + "\"}";
      Answer a = post(prefix + "/v1/completions", body, Map.of(), true);
      assertThat(a.version()).as(prefix).isEqualTo("HTTP/2.0");
      assertThat(a.status()).as(prefix).isEqualTo(200);
      assertThat(a.headers().get("x-replica")).as(prefix).isEqualTo("a");
      assertThat(a.headers().get(RoutingDecision.DESTINATION_HEADER)).as(prefix)
          .isEqualTo(A.id());
      assertThat(A.lastBody.get()).as(prefix).isEqualTo(body);

      Answer s = post(prefix + "/v1/completions", "{\"model\":\"m\",\"stream\":true,"
          + "\"stream_options\":{\"include_usage\":true},\"prompt\":\"stream over h2\"}",
          Map.of(), false);
      assertThat(s.version()).as(prefix).isEqualTo("HTTP/2.0");
      assertThat(s.status()).as(prefix).isEqualTo(200);
      assertThat(s.headers().get("content-type")).as(prefix).startsWith("text/event-stream");
      assertThat(s.body()).as(prefix).contains("\"text\":\"a\"", "\"text\":\"b\"", "\"usage\":{")
          .endsWith("data: [DONE]\n\n");
    }
    awaitNoneInFlight();
  }

  @Test
  void a400And413AreAnsweredOverH2AndTheConnectionServesTheNextRequest() throws Exception {
    String big = "{\"model\":\"m\",\"prompt\":\"" + "x".repeat(40 << 10) + "\"}";
    for (String prefix : List.of("", "/retried")) {
      for (boolean declared : List.of(true, false)) {
        String as = prefix + " declared " + declared;
        Answer malformed = post(prefix + "/v1/chat/completions", "{\"model\":", Map.of(),
            declared);
        assertThat(malformed.version()).as(as).isEqualTo("HTTP/2.0");
        assertThat(malformed.status()).as(as).isEqualTo(400);
        assertThat(errorType(malformed)).as(as).isEqualTo("routing_invalid_request");

        Answer tooLarge = post(prefix + "/v1/completions", big, Map.of(), declared);
        assertThat(tooLarge.version()).as(as).isEqualTo("HTTP/2.0");
        assertThat(tooLarge.status()).as(as).isEqualTo(413);
        assertThat(errorType(tooLarge)).as(as).isEqualTo("request_too_large");

        assertNextRequestServed(prefix, as, declared);
      }
    }
    awaitNoneInFlight();
  }

  @Test
  void a429And503AreAnsweredOverH2AndTheConnectionServesTheNextRequest() throws Exception {
    for (String prefix : List.of("", "/retried")) {
      for (boolean declared : List.of(true, false)) {
        String as = prefix + " declared " + declared;
        // no metrics are scraped here, and an endpoint without metrics counts as full
        Answer shed = post(prefix + "/v1/completions", "{\"model\":\"m\",\"prompt\":\"shed\"}",
            Map.of("x-request-priority", "-1"), declared);
        assertThat(shed.version()).as(as).isEqualTo("HTTP/2.0");
        assertThat(shed.status()).as(as).isEqualTo(429);
        assertThat(shed.headers().get("Retry-After")).as(as).isEqualTo("1");
        assertThat(errorType(shed)).as(as).isEqualTo("routing_shed");

        List<Endpoint> pool = new ArrayList<>();
        for (Candidate c : router.endpoints()) {
          pool.add(c.endpoint());
        }
        router.setEndpoints(List.of());
        Answer none;
        try {
          none = post(prefix + "/v1/completions", "{\"model\":\"m\",\"prompt\":\"none\"}",
              Map.of(), declared);
        } finally {
          router.setEndpoints(pool);
        }
        assertThat(none.version()).as(as).isEqualTo("HTTP/2.0");
        assertThat(none.status()).as(as).isEqualTo(503);
        assertThat(none.headers().get("Retry-After")).as(as).isEqualTo("1");
        assertThat(errorType(none)).as(as).isEqualTo("routing_no_endpoints");

        assertNextRequestServed(prefix, as, declared);
      }
    }
    awaitNoneInFlight();
  }

  /** The connection (the client's pool holds one) serves a request after an error answer. */
  private void assertNextRequestServed(String prefix, String as, boolean declared) {
    String body = "{\"model\":\"m\",\"prompt\":\"next " + as + "\"}";
    Answer next = post(prefix + "/v1/completions", body, Map.of(), declared);
    assertThat(next.status()).as(as).isEqualTo(200);
    assertThat(A.lastBody.get()).as(as).isEqualTo(body);
  }

  private static String errorType(Answer a) throws Exception {
    return JSON.readTree(a.body()).path("error").path("type").asText();
  }

  private Answer post(String path, String body, Map<String, String> headers,
      boolean declareLength) {
    return Http2Requests.post(H2, "https://localhost:" + port + path, body, headers, declareLength);
  }

  private void awaitNoneInFlight() throws InterruptedException {
    Http2Requests.awaitNoneInFlight(router);
  }
}
