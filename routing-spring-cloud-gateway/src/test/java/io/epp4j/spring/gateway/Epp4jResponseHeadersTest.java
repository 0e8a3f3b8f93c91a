package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.gateway.support.ServerWebExchangeUtils;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.mock.http.server.reactive.MockServerHttpRequest;
import org.springframework.mock.web.server.MockServerWebExchange;

/**
 * The headers routing plugins ask for on the answer ({@link RoutingDecision#responseHeaders()}):
 * set on an answer the replica served, replacing the replica's own, and left off one it did not.
 */
class Epp4jResponseHeadersTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"));
  final Router router = Router.builder().endpoints(POOL).configYaml("""
      plugins:
      - type: session-affinity-scorer
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins: [{pluginRef: session-affinity-scorer}, {pluginRef: max-score-picker}]
      """, "test").build();

  @AfterEach
  void close() {
    router.close();
  }

  static MockServerWebExchange exchange() {
    return MockServerWebExchange.from(MockServerHttpRequest.post("/v1/completions")
        .contentType(MediaType.APPLICATION_JSON).body("{\"model\":\"m\",\"prompt\":\"hi\"}"));
  }

  @Test
  void theSessionTokenNamesTheReplicaThatAnswered() {
    MockServerWebExchange exchange = exchange();
    new Epp4jGatewayFilter(router, "http", 1 << 20).filter(exchange, e -> {
      ServerWebExchangeUtils.setAlreadyRouted(e);
      e.getResponse().setStatusCode(HttpStatus.OK);
      e.getResponse().getHeaders().set("x-session-token", "the replica's own");
      return e.getResponse().setComplete();
    }).block();
    String destination = exchange.getResponse().getHeaders()
        .getFirst(RoutingDecision.DESTINATION_HEADER);
    assertThat(destination).isIn("10.0.0.1:8000", "10.0.0.2:8000");
    assertThat(exchange.getResponse().getHeaders().get("x-session-token")).containsExactly(
        Base64.getEncoder().encodeToString(destination.getBytes(StandardCharsets.UTF_8)));
  }

  @Test
  void anAnswerNoReplicaServedGetsNoToken() {
    MockServerWebExchange exchange = exchange();
    new Epp4jGatewayFilter(router, "http", 1 << 20).filter(exchange, e -> {
      e.getResponse().setStatusCode(HttpStatus.UNAUTHORIZED); // a filter that answers itself
      return e.getResponse().setComplete();
    }).block();
    assertThat(exchange.getResponse().getStatusCode()).isEqualTo(HttpStatus.UNAUTHORIZED);
    assertThat(exchange.getResponse().getHeaders().getFirst("x-session-token")).isNull();
  }

  @Test
  void theRequestHeadersThePluginsAskForAreSetAndRemovedOnTheForwardedRequest() {
    io.epp4j.api.RequestListener asks = new io.epp4j.api.RequestListener() {
      @Override
      public void afterRouting(io.epp4j.api.InferenceRequest request,
          io.epp4j.api.CycleState state, RoutingDecision decision) {
        decision.setRequestHeader("x-kv-cache-source-host-port", "10.0.0.9:8000");
        decision.setRequestHeader("x-drop-me", null);
      }
    };
    try (Router r = Router.builder().endpoints(POOL).listener(asks).build()) {
      MockServerWebExchange exchange = MockServerWebExchange.from(MockServerHttpRequest
          .post("/v1/completions").header("x-kv-cache-source-host-port", "client's")
          .header("x-drop-me", "client's").contentType(MediaType.APPLICATION_JSON)
          .body("{\"model\":\"m\",\"prompt\":\"hi\"}"));
      java.util.concurrent.atomic.AtomicReference<org.springframework.http.HttpHeaders> seen =
          new java.util.concurrent.atomic.AtomicReference<>();
      new Epp4jGatewayFilter(r, "http", 1 << 20).filter(exchange, e -> {
        seen.set(e.getRequest().getHeaders());
        return e.getResponse().setComplete();
      }).block();
      assertThat(seen.get().get("x-kv-cache-source-host-port")).containsExactly("10.0.0.9:8000");
      assertThat(seen.get().getFirst("x-drop-me")).isNull();
    }
  }

  @Test
  void aFallbackIsForwardedWithTheHeadersAskedForItsEndpoint() {
    io.epp4j.api.RequestListener asks = new io.epp4j.api.RequestListener() {
      @Override
      public void afterRouting(io.epp4j.api.InferenceRequest request,
          io.epp4j.api.CycleState state, RoutingDecision decision) {
        // as p2p-source-producer's source, a value chosen for the endpoint of each attempt
        decision.setRequestHeaderFor("x-attempt", d -> d.servedBy().id());
        decision.setRequestHeaderFor("x-primary-only",
            d -> d.servedBy().equals(d.primary()) ? "yes" : null);
      }
    };
    try (Router r = Router.builder().endpoints(POOL).listener(asks).configYaml("""
        plugins:
        - type: queue-scorer
        - type: max-score-picker
          parameters: {maxNumOfEndpoints: 2}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
        """, "two-picks").build()) {
      MockServerWebExchange exchange = exchange();
      List<org.springframework.http.HttpHeaders> attempts = new java.util.ArrayList<>();
      List<String> targets = new java.util.ArrayList<>();
      new Epp4jGatewayFilter(r, "http", 1 << 20).filter(exchange, e -> {
        attempts.add(e.getRequest().getHeaders());
        targets.add(String.valueOf(e.getAttributes()
            .get(ServerWebExchangeUtils.GATEWAY_REQUEST_URL_ATTR)));
        if (attempts.size() == 1) {
          return reactor.core.publisher.Mono.error(new java.net.ConnectException("refused"));
        }
        ServerWebExchangeUtils.setAlreadyRouted(e);
        e.getResponse().setStatusCode(HttpStatus.OK);
        return e.getResponse().setComplete();
      }).block();
      assertThat(attempts).hasSize(2);
      String primary = attempts.get(0).getFirst("x-attempt");
      String fallback = attempts.get(1).getFirst("x-attempt");
      assertThat(primary).isIn("10.0.0.1:8000", "10.0.0.2:8000");
      assertThat(fallback).isIn("10.0.0.1:8000", "10.0.0.2:8000").isNotEqualTo(primary);
      assertThat(targets.get(1)).contains(fallback);
      assertThat(attempts.get(0).getFirst("x-primary-only")).isEqualTo("yes");
      assertThat(attempts.get(1).getFirst("x-primary-only")).isNull();
    }
  }

  @Test
  void aFallbackIsForwardedWithoutTheHeadersNoGatewayCanSend() {
    // the fallback's headers are read again for its endpoint: one that is no token or holds a
    // control character is left out there too, and the others set
    io.epp4j.api.RequestListener asks = new io.epp4j.api.RequestListener() {
      @Override
      public void afterRouting(io.epp4j.api.InferenceRequest request,
          io.epp4j.api.CycleState state, RoutingDecision decision) {
        decision.setRequestHeaderFor("x-attempt", d -> d.servedBy().id());
        decision.setRequestHeaderFor("x-tag", d -> d.servedBy().equals(d.primary()) ? "fine"
            : "for the fallback\r\nx-injected: b");
      }
    };
    try (Router r = Router.builder().endpoints(POOL).listener(asks).configYaml("""
        plugins:
        - type: queue-scorer
        - type: max-score-picker
          parameters: {maxNumOfEndpoints: 2}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
        """, "two-picks").build()) {
      MockServerWebExchange exchange = exchange();
      List<org.springframework.http.HttpHeaders> attempts = new java.util.ArrayList<>();
      long before = Epp4jGatewayFilter.HEADER_REFUSALS.count();
      new Epp4jGatewayFilter(r, "http", 1 << 20).filter(exchange, e -> {
        attempts.add(e.getRequest().getHeaders());
        if (attempts.size() == 1) {
          return reactor.core.publisher.Mono.error(new java.net.ConnectException("refused"));
        }
        ServerWebExchangeUtils.setAlreadyRouted(e);
        e.getResponse().setStatusCode(HttpStatus.OK);
        return e.getResponse().setComplete();
      }).block();
      assertThat(attempts).hasSize(2);
      assertThat(attempts.get(0).getFirst("x-tag")).isEqualTo("fine");
      assertThat(attempts.get(1).getFirst("x-attempt")).isNotEqualTo(
          attempts.get(0).getFirst("x-attempt"));
      assertThat(attempts.get(1).getFirst("x-tag")).isNull();
      assertThat(Epp4jGatewayFilter.HEADER_REFUSALS.count() - before).isEqualTo(1);
    }
  }
}
