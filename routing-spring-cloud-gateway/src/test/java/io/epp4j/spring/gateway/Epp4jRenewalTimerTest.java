package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.lang.ref.WeakReference;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.gateway.support.ServerWebExchangeUtils;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.mock.http.server.reactive.MockServerHttpRequest;
import org.springframework.mock.web.server.MockServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * The timer that renews a decision while its request is served (every quarter of the router's
 * {@code inFlightMaxAge}) ends with the exchange: it held the decision, and through it the
 * request with its whole prompt, until its next tick, minutes after the answer was written, so
 * a busy gateway kept minutes' worth of prompts on its heap.
 */
class Epp4jRenewalTimerTest {
  static final String CONFIG = """
      plugins:
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: max-score-picker
      """;

  /** What the router heard of the request, without holding it. */
  static final class Watch implements RequestListener {
    final AtomicReference<WeakReference<InferenceRequest>> request = new AtomicReference<>();
    final AtomicInteger completed = new AtomicInteger();

    @Override
    public void afterRouting(InferenceRequest r, CycleState state, RoutingDecision decision) {
      request.set(new WeakReference<>(r));
    }

    @Override
    public void onComplete(InferenceRequest r, Endpoint endpoint, Usage usage) {
      completed.incrementAndGet();
    }
  }

  /** One request through the tap filter and the Epp4j filter to a replica that answers at once. */
  static void serve(Router router) {
    MockServerWebExchange exchange = MockServerWebExchange.from(MockServerHttpRequest
        .post("/v1/completions").contentType(MediaType.APPLICATION_JSON)
        .body("{\"model\":\"m\",\"prompt\":\"" + "a long prompt ".repeat(1000) + "\"}"));
    Epp4jGatewayFilter epp4j = new Epp4jGatewayFilter(router, "http", 1 << 20);
    new Epp4jResponseTapFilter().filter(exchange, tapped -> epp4j.filter(tapped, e -> {
      ServerWebExchangeUtils.setAlreadyRouted(e);
      e.getResponse().setStatusCode(HttpStatus.OK);
      e.getResponse().getHeaders().setContentType(MediaType.APPLICATION_JSON);
      return e.getResponse().writeWith(Mono.just(e.getResponse().bufferFactory()
          .wrap("{\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1}}"
              .getBytes(StandardCharsets.UTF_8))));
    })).block(Duration.ofSeconds(10));
  }

  @Test
  void aServedRequestIsNotHeldByItsRenewalTimer() throws Exception {
    Watch watch = new Watch();
    try (Router router = Router.builder().endpoints(List.of(Endpoint.parse("10.0.0.1:8000")))
        .configYaml(CONFIG, "test.yaml").listener(watch).build()) {
      serve(router);
      assertThat(watch.completed.get()).isEqualTo(1);
      assertThat(router.endpoints().get(0).inFlightRequests()).isZero();

      WeakReference<InferenceRequest> request = watch.request.get();
      assertThat(request).isNotNull();
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (request.get() != null && System.nanoTime() < deadline) {
        System.gc();
        Thread.sleep(20);
      }
      assertThat(request.get()).as("the request, a quarter of inFlightMaxAge (2.5 min) from"
          + " the renewal timer's next tick").isNull();
    }
  }

  /**
   * An {@code inFlightMaxAge} too long to count in nanoseconds turns the router's safety net off
   * (see {@code Router.Builder.inFlightMaxAge}); the renewal timer took a quarter of it, which
   * Reactor's interval could not count either: every routed request failed with an
   * ArithmeticException, its decision left in flight for good.
   */
  @Test
  void aRouterWhoseInFlightMaxAgeIsForeverServesItsRequests() {
    Watch watch = new Watch();
    try (Router router = Router.builder().endpoints(List.of(Endpoint.parse("10.0.0.1:8000")))
        .configYaml(CONFIG, "test.yaml").listener(watch)
        .inFlightMaxAge(java.time.temporal.ChronoUnit.FOREVER.getDuration()).build()) {
      serve(router);

      assertThat(watch.completed.get()).isEqualTo(1);
      assertThat(router.endpoints().get(0).inFlightRequests()).isZero();
    }
  }
}
