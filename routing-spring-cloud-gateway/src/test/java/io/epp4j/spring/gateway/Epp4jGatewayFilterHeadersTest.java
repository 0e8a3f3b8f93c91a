package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.scorers.PdProfileHandler;
import io.epp4j.testkit.CapturedLog;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.springframework.http.MediaType;
import org.springframework.mock.http.server.reactive.MockServerHttpRequest;
import org.springframework.mock.web.server.MockServerWebExchange;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/** What the filter hands the router, and what it forwards, beyond the destination. */
class Epp4jGatewayFilterHeadersTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"), Endpoint.parse("10.0.0.3:8000"),
      Endpoint.parse("10.0.0.4:8000"), Endpoint.parse("10.0.0.5:8000"));
  static final String BODY = "{\"model\":\"m\",\"prompt\":\"tell me a story\"}";

  final List<Router> routers = new ArrayList<>();

  @AfterEach
  void close() {
    routers.forEach(Router::close);
  }

  Router router(String yaml) {
    return keep(Router.builder().endpoints(POOL).configYaml(yaml, "test").build());
  }

  Router router(String yaml, io.epp4j.api.RequestListener listener) {
    return keep(Router.builder().endpoints(POOL).configYaml(yaml, "test").listener(listener)
        .build());
  }

  private Router keep(Router r) {
    routers.add(r);
    return r;
  }

  /** Routes one request through the filter; returns the exchange the rest of the chain saw. */
  static ServerWebExchange send(Router router, MockServerHttpRequest request) {
    AtomicReference<ServerWebExchange> forwarded = new AtomicReference<>();
    MockServerWebExchange exchange = MockServerWebExchange.from(request);
    new Epp4jGatewayFilter(router, "http", 1 << 20).filter(exchange, e -> {
      forwarded.set(e);
      return Mono.empty();
    }).block();
    ServerWebExchange seen = forwarded.get();
    assertThat(seen).as("the chain went on").isNotNull();
    return seen;
  }

  static String destination(ServerWebExchange e) {
    return e.getRequest().getHeaders().getFirst(RoutingDecision.DESTINATION_HEADER);
  }

  @Test
  void aHeaderAskThatThrowsQuotingThePromptIsA500AndIsLoggedWithoutItsMessage() {
    String secret = "my-bank-password-is-hunter2";
    Router router = router("""
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: queue-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
        """, new io.epp4j.api.RequestListener() {
          @Override
          public void afterRouting(io.epp4j.api.InferenceRequest request,
              io.epp4j.api.CycleState state, RoutingDecision decision) {
            String prompt = String.valueOf(request.prompt());
            decision.setRequestHeaderFor("x-broken", d -> {
              throw new IllegalStateException("cannot tag '" + prompt + "'",
                  new IllegalArgumentException(prompt));
            });
          }
        });
    // everything the log would show, formatted as a log file would: messages, causes, frames
    try (CapturedLog logged = CapturedLog.of("io.epp4j")) {
      MockServerWebExchange exchange = MockServerWebExchange.from(MockServerHttpRequest
          .post("/v1/completions").contentType(MediaType.APPLICATION_JSON)
          .body("{\"model\":\"m\",\"prompt\":\"please remember " + secret + "\"}"));
      AtomicReference<ServerWebExchange> forwarded = new AtomicReference<>();
      new Epp4jGatewayFilter(router, "http", 1 << 20).filter(exchange, e -> {
        forwarded.set(e);
        return Mono.empty();
      }).block(java.time.Duration.ofSeconds(10));
      assertThat(forwarded.get()).as("nothing was forwarded").isNull();
      assertThat(exchange.getResponse().getStatusCode().value()).isEqualTo(500);
      String body = exchange.getResponse().getBodyAsString().block(java.time.Duration.ofSeconds(10));
      assertThat(body).contains("IllegalStateException").doesNotContain(secret);
      // the decision is over: the request no longer counts in flight
      assertThat(router.endpoints()).allSatisfy(c -> assertThat(c.inFlightRequests()).isZero());
      String all = logged.text();
      assertThat(all).doesNotContain(secret)
          .contains("java.lang.IllegalStateException")
          .contains("Caused by: java.lang.IllegalArgumentException")
          .contains("Epp4jGatewayFilterHeadersTest"); // the frame that threw
    }
  }

  @Test
  void aHashKeyFromTheQueryStringKeepsARequestOnItsPlace() {
    // ring-hash-picker on query:user reads the key from :path; the filter gave the router the
    // headers only, so every request was hashed without a key, to a random place
    Router router = router("""
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: ring-hash-picker
          parameters: {hashOn: "query:user"}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: ring-hash-picker}]
        """);
    for (String user : List.of("alice", "bob", "carol")) {
      String first = null;
      for (int i = 0; i < 12; i++) {
        String d = destination(send(router, MockServerHttpRequest
            .post("/v1/completions?user=" + user + "&n=" + i)
            .contentType(MediaType.APPLICATION_JSON).body(BODY)));
        if (first == null) {
          first = d;
        }
        assertThat(d).as("%s, request %d", user, i).isEqualTo(first);
      }
    }
  }

  @Test
  void aSourceIpKeyIsTheClientsAddressNotTheForwardedForItWrote() {
    // source-ip keys read the first x-forwarded-for entry, which a client writes as it likes:
    // each request naming another "client" landed somewhere else
    Router router = router("""
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: ring-hash-picker
          parameters: {hashOn: source-ip}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: ring-hash-picker}]
        """);
    java.util.Set<String> places = new java.util.HashSet<>();
    for (int i = 0; i < 12; i++) {
      places.add(destination(send(router, MockServerHttpRequest.post("/v1/completions")
          .remoteAddress(new java.net.InetSocketAddress("192.0.2.7", 40000 + i))
          .header("x-forwarded-for", "198.51.100." + i)
          .contentType(MediaType.APPLICATION_JSON).body(BODY))));
    }
    assertThat(places).hasSize(1);
  }

  static final String PD = """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: pd-profile-handler
      - type: prefill-header-handler
      - type: queue-scorer
      - type: max-score-picker
      schedulingProfiles:
      - name: decode
        plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
      - name: prefill
        plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
      """;

  @Test
  void thePrefillPickIsNamedToTheDecodeServerInsteadOfTheClientsOwn() {
    // the decode server's sidecar learns where to prefill from x-prefiller-host-port, which only
    // the gateway can write from the decision: the filter wrote none, and a client's own value
    // went through, choosing where its request was prefilled
    List<RoutingDecision> decisions = new ArrayList<>();
    Router router = router(PD, new io.epp4j.api.RequestListener() {
      @Override
      public void afterRouting(io.epp4j.api.InferenceRequest request,
          io.epp4j.api.CycleState state, RoutingDecision decision) {
        decisions.add(decision);
      }
    });
    ServerWebExchange seen = send(router, MockServerHttpRequest.post("/v1/completions")
        .header(PdProfileHandler.PREFILLER_HEADER, "10.9.9.9:1")
        .contentType(MediaType.APPLICATION_JSON).body(BODY));
    assertThat(decisions).hasSize(1);
    Endpoint prefill = PdProfileHandler.prefillEndpoint(decisions.get(0));
    assertThat(prefill).as("the handler picked a prefill endpoint").isNotNull();
    assertThat(seen.getRequest().getHeaders().get(PdProfileHandler.PREFILLER_HEADER))
        .containsExactly(prefill.id());
  }

  @Test
  void withoutAPrefillPickAClientsPrefillerHeaderIsDropped() {
    Router router = router("""
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: queue-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
        """);
    ServerWebExchange seen = send(router, MockServerHttpRequest.post("/v1/completions")
        .header(PdProfileHandler.PREFILLER_HEADER, "10.9.9.9:1")
        .contentType(MediaType.APPLICATION_JSON).body(BODY));
    assertThat(destination(seen)).isNotNull();
    assertThat(seen.getRequest().getHeaders().containsHeader(PdProfileHandler.PREFILLER_HEADER))
        .isFalse();
  }
}
