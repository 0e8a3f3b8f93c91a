package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;

/** What one gateway's router learns reaches the others through the bus, after its delay. */
class HintBusTest {
  private static final List<Endpoint> ENDPOINTS = IntStream.rangeClosed(1, 8)
      .mapToObj(i -> Endpoint.parse("10.0.0." + i + ":8000")).toList();

  private static InferenceRequest request(String prompt) {
    return InferenceRequest.builder().model("m").prompt(prompt).maxTokens(10).build();
  }

  @Test
  void aDelayedPrefixHintIsStillReadableWhenItIsDeliveredAfterTheCycleEnded() {
    List<Runnable> due = new ArrayList<>();
    HintBus bus = new HintBus(2_000_000L, (at, delivery) -> due.add(delivery));
    Router[] routers = new Router[2];
    // the tokens the second router believes each request's endpoint holds
    List<Long> cachedThere = new ArrayList<>();
    RequestListener hits = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, CycleState state,
          RoutingDecision decision) {
        PrefixHits h = state.get(PrefixHits.KEY);
        cachedThere.add(h == null ? -1 : h.cachedTokens(decision.primary().id()));
      }
    };
    for (int g = 0; g < 2; g++) {
      // no config: the EPP default profile, approximate prefix scoring
      Router.Builder rb = Router.builder().randomSeed(g).endpoints(ENDPOINTS);
      rb.listener(bus.capture(g));
      if (g == 1) {
        rb.listener(hits);
      }
      routers[g] = rb.build();
      bus.register(routers[g].hints());
    }
    // four prefixes, each sent once through the first router, whose cycles end before the
    // hints are delivered (as they are after the bus's delay)
    List<String> prefixes = new ArrayList<>();
    List<String> homes = new ArrayList<>();
    for (int p = 0; p < 4; p++) {
      String prefix = ("system prompt " + p + " shared by many requests ").repeat(100);
      RoutingDecision d = routers[0].route(request(prefix + "first question"));
      prefixes.add(prefix);
      homes.add(d.primary().id());
      d.onComplete(Usage.NONE);
    }
    assertThat(due).hasSize(4);
    due.forEach(Runnable::run);
    // the second router has routed nothing, yet it sends each prefix where it went, knowing
    // that endpoint holds it (its 100 repeats of 40 characters: about 1,000 tokens)
    for (int p = 0; p < 4; p++) {
      RoutingDecision d = routers[1].route(request(prefixes.get(p) + "another question"));
      assertThat(d.primary().id()).as("prefix %d", p).isEqualTo(homes.get(p));
      assertThat(cachedThere.get(p)).as("prefix %d", p).isGreaterThanOrEqualTo(900);
      d.onComplete(Usage.NONE);
    }
  }
}
