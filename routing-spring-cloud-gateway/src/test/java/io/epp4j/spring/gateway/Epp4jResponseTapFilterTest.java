package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;
import static org.springframework.cloud.gateway.support.ServerWebExchangeUtils.GATEWAY_ROUTE_ATTR;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.gateway.filter.GatewayFilter;
import org.springframework.cloud.gateway.filter.GatewayFilterChain;
import org.springframework.cloud.gateway.filter.OrderedGatewayFilter;
import org.springframework.cloud.gateway.route.Route;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.mock.http.server.reactive.MockServerHttpRequest;
import org.springframework.mock.web.server.MockServerWebExchange;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/** The tap filter on its own: which routes it watches, and what it reports for them. */
class Epp4jResponseTapFilterTest {
  final Router router = Router.builder().endpoint(Endpoint.of("10.0.0.1", 8000)).build();

  @AfterEach
  void close() {
    router.close();
  }

  int inFlight() {
    return router.endpoints().stream().mapToInt(Candidate::inFlightRequests).sum();
  }

  /** Serves one routed request through the tap filter on a route with {@code filter}. */
  void serve(GatewayFilter filter, RoutingDecision d) {
    Route route = Route.async().id("llm").uri(URI.create("http://replica.invalid"))
        .predicate(e -> true).filter(filter).build();
    MockServerWebExchange exchange = MockServerWebExchange.from(
        MockServerHttpRequest.post("/v1/completions"));
    exchange.getAttributes().put(GATEWAY_ROUTE_ATTR, route);
    // the rest of the gateway: the Epp4j filter leaves its tap, the writer writes the answer
    GatewayFilterChain chain = e -> {
      e.getAttributes().put(DecisionTap.ATTRIBUTE, new DecisionTap(e.getResponse(), d));
      e.getResponse().setStatusCode(HttpStatus.OK);
      e.getResponse().getHeaders().setContentType(MediaType.APPLICATION_JSON);
      byte[] body = "{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}"
          .getBytes(StandardCharsets.UTF_8);
      return e.getResponse().writeWith(Mono.just(e.getResponse().bufferFactory().wrap(body)));
    };
    new Epp4jResponseTapFilter().filter(exchange, chain).block(Duration.ofSeconds(10));
  }

  @Test
  void aRouteWhoseEpp4jFilterIsWrappedAgainIsStillWatched() {
    // the Java DSL's filter(f, order, true) wraps the factory's OrderedGatewayFilter in another
    // one: the tap looked one level deep only, so no answer of such a route was watched and
    // every decision stayed in flight until in-flight-max-age
    GatewayFilter epp4j = new Epp4jGatewayFilterFactory(router, "http", 1024).filter();
    for (GatewayFilter f : new GatewayFilter[] {epp4j, new OrderedGatewayFilter(epp4j, 5)}) {
      RoutingDecision d = router.route("/v1/completions", Map.of(),
          "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8));
      assertThat(inFlight()).isEqualTo(1);
      serve(f, d);
      assertThat(inFlight()).as("%s", f).isZero();
    }
  }

  @Test
  void aRouteWhoseEpp4jFilterIsInsideTheApplicationsOwnFilterIsStillWatched() {
    // a filter of the application's own that delegates to the Epp4j filter hides it from any
    // look at the route's filters: such routes' decisions stayed in flight until
    // in-flight-max-age
    GatewayFilter epp4j = new Epp4jGatewayFilterFactory(router, "http", 1024).filter();
    RoutingDecision d = router.route("/v1/completions", Map.of(),
        "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8));
    assertThat(inFlight()).isEqualTo(1);
    serve(new Delegating(epp4j), d);
    assertThat(inFlight()).isZero();
  }

  @Test
  void aReplicas5xxThatACircuitBreakerFallbackReplacesFailsTheDecision() {
    // SCG's CircuitBreaker filter with statusCodes and a fallbackUri: once the chain behind it
    // ends with such a status, it clears the status and forwards the request to its fallback,
    // which writes an answer of its own to the same response; that 200 completed the decision
    // of the replica that had answered 503
    java.util.List<Throwable> failures = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.List<io.epp4j.api.Usage> completions =
        new java.util.concurrent.CopyOnWriteArrayList<>();
    try (Router r = Router.builder().endpoint(Endpoint.of("10.0.0.1", 8000))
        .listener(new io.epp4j.api.RequestListener() {
          @Override
          public void onComplete(io.epp4j.api.InferenceRequest request, Endpoint endpoint,
              io.epp4j.api.Usage usage) {
            completions.add(usage);
          }

          @Override
          public void onFailure(io.epp4j.api.InferenceRequest request, Endpoint endpoint,
              Throwable cause) {
            failures.add(cause);
          }
        }).build()) {
      GatewayFilter epp4j = new Epp4jGatewayFilterFactory(r, "http", 1024).filter();
      GatewayFilter breaker = (exchange, chain) -> chain.filter(exchange).then(Mono.defer(() -> {
        if (!HttpStatus.SERVICE_UNAVAILABLE.equals(exchange.getResponse().getStatusCode())) {
          return Mono.empty();
        }
        exchange.getResponse().setStatusCode(null);
        // the fallback's own answer
        exchange.getResponse().setStatusCode(HttpStatus.OK);
        exchange.getResponse().getHeaders().setContentType(MediaType.APPLICATION_JSON);
        return exchange.getResponse().writeWith(Mono.just(exchange.getResponse().bufferFactory()
            .wrap("{\"fallback\":true}".getBytes(StandardCharsets.UTF_8))));
      }));
      Route route = Route.async().id("llm").uri(URI.create("http://replica.invalid"))
          .predicate(e -> true).filter(breaker).filter(epp4j).build();
      MockServerWebExchange exchange = MockServerWebExchange.from(
          MockServerHttpRequest.post("http://gateway/v1/completions")
              .body("{\"model\":\"m\",\"prompt\":\"hi\"}"));
      exchange.getAttributes().put(GATEWAY_ROUTE_ATTR, route);
      // the replica answers 503; the gateway's writer would write its body after the chain. The
      // routing filter that sent the request marks the exchange routed, as SCG's do
      GatewayFilterChain replica = e -> {
        org.springframework.cloud.gateway.support.ServerWebExchangeUtils.setAlreadyRouted(e);
        e.getResponse().setStatusCode(HttpStatus.SERVICE_UNAVAILABLE);
        return Mono.empty();
      };
      new Epp4jResponseTapFilter().filter(exchange,
          e -> breaker.filter(e, e2 -> epp4j.filter(e2, replica))).block(Duration.ofSeconds(10));
      assertThat(exchange.getResponse().getStatusCode()).isEqualTo(HttpStatus.OK);
      assertThat(completions).isEmpty();
      assertThat(failures).singleElement().asString().contains("503");
      assertThat(r.endpoints().stream().mapToInt(Candidate::inFlightRequests).sum()).isZero();
    }
  }

  /** An application's filter around another one (timing, logging, ...). */
  record Delegating(GatewayFilter delegate) implements GatewayFilter {
    @Override
    public Mono<Void> filter(ServerWebExchange exchange, GatewayFilterChain chain) {
      return delegate.filter(exchange, chain);
    }
  }
}
