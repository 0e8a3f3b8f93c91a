package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.gateway.support.ServerWebExchangeUtils;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.mock.http.server.reactive.MockServerHttpRequest;
import org.springframework.mock.web.server.MockServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * A request whose replica takes longer than the router's {@code inFlightMaxAge} to answer (a
 * completion with {@code stream: false} arrives whole at its end) keeps counting on its replica:
 * the filter renews the decision until it is finished.
 */
class Epp4jRenewalTest {

  @Test
  void aDecisionWaitingForItsAnswerPastInFlightMaxAgeKeepsCounting() throws Exception {
    AtomicReference<RoutingDecision> routed = new AtomicReference<>();
    RequestListener keep = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, CycleState state,
          RoutingDecision decision) {
        routed.compareAndSet(null, decision);
      }
    };
    try (Router r = Router.builder().endpoints(List.of(Endpoint.parse("10.0.0.1:8000")))
        .inFlightMaxAge(Duration.ofSeconds(1)).listener(keep).build()) {
      MockServerWebExchange exchange = MockServerWebExchange.from(MockServerHttpRequest
          .post("/v1/completions").contentType(MediaType.APPLICATION_JSON)
          .body("{\"model\":\"m\",\"prompt\":\"think hard\",\"stream\":false}"));
      CompletableFuture<Void> done = new CompletableFuture<>();
      // the replica answers after 3 s, three times the router's inFlightMaxAge
      new Epp4jGatewayFilter(r, "http", 1 << 20).filter(exchange, e -> Mono
          .delay(Duration.ofSeconds(3)).then(Mono.defer(() -> {
            ServerWebExchangeUtils.setAlreadyRouted(e);
            e.getResponse().setStatusCode(HttpStatus.OK);
            return e.getResponse().setComplete();
          }))).subscribe(v -> { }, done::completeExceptionally, () -> done.complete(null));
      Thread.sleep(2_500);
      // another request's route sweeps the decisions older than inFlightMaxAge
      RoutingDecision other = r.route(InferenceRequest.builder().model("m").prompt("x").build());
      assertThat(r.endpoints().get(0).inFlightRequests()).isEqualTo(2);
      other.onComplete(Usage.NONE);
      done.get(10, TimeUnit.SECONDS);
      RoutingDecision d = routed.get();
      assertThat(d).isNotNull();
      d.onComplete(Usage.NONE); // what the answer's tap does once it is written
      assertThat(d.isFinished()).isTrue();
      assertThat(r.endpoints().get(0).inFlightRequests()).isZero();
    }
  }
}
