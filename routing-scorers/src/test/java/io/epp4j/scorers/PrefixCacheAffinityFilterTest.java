package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * {@code prefix-cache-affinity-filter} and {@code inflight-load-producer} as llm-d's: which
 * candidates the filter keeps, when its TTFT gate breaks stickiness, and what the producer counts.
 */
class PrefixCacheAffinityFilterTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"), Endpoint.parse("10.0.0.3:8000"));
  final AtomicLong now = new AtomicLong(1_000_000_000L);
  final List<Router> routers = new ArrayList<>();

  @AfterEach
  void close() {
    routers.forEach(Router::close);
  }

  Router router(String plugins, String profile) {
    String yaml = """
        plugins:
        %s
        - type: queue-scorer
        - type: max-score-picker
          parameters: {maxNumOfEndpoints: 3}
        schedulingProfiles:
        - name: default
          plugins:
          %s
          - pluginRef: queue-scorer
          - pluginRef: max-score-picker
        """.formatted(plugins.strip(), profile.strip().replace("\n", "\n  "));
    Router r = Router.builder().endpoints(POOL).configYaml(yaml, "affinity.yaml")
        .ticker(now::get).randomSeed(11).build();
    routers.add(r);
    for (Endpoint e : POOL) {
      queue(r, e.id(), 0);
    }
    return r;
  }

  void queue(Router r, String id, int waiting) {
    assertThat(r.updateMetrics(id, EndpointMetrics.builder().waitingRequests(waiting)
        .scrapedAtNanos(now.get()).build())).isTrue();
  }

  /** 4,000 characters: 1,000 estimated tokens, fifteen whole blocks of 64 tokens and a tail. */
  static InferenceRequest prompt(int seed) {
    StringBuilder sb = new StringBuilder();
    while (sb.length() < 4000) {
      sb.append("p").append(seed).append(" w").append(sb.length()).append(' ');
    }
    return InferenceRequest.completion("m", sb.substring(0, 4000));
  }

  @Test
  void aCachedPromptStaysWhereItsPrefixIsAgainstTheQueueAndANewOneFollowsTheQueue() {
    Router r = router("""
        - type: approx-prefix-cache-producer
        - type: prefix-cache-affinity-filter
          parameters: {maxTTFTPenaltyMs: 0}
        """, "- pluginRef: prefix-cache-affinity-filter");
    RoutingDecision first = r.route(prompt(1));
    String home = first.primary().id();
    first.onComplete(Usage.NONE);
    queue(r, home, 20); // without the filter the queue would send the prompt elsewhere
    for (int i = 0; i < 5; i++) {
      RoutingDecision d = r.route(prompt(1));
      assertThat(d.primary().id()).isEqualTo(home);
      d.onComplete(Usage.NONE);
    }
    assertThat(r.route(prompt(2)).primary().id()).as("nothing cached: every candidate kept")
        .isNotEqualTo(home);
  }

  @Test
  void withoutAProducerInTheFileTheFilterKeepsAnIndexOfItsOwn() {
    Router r = router("- type: prefix-cache-affinity-filter",
        "- pluginRef: prefix-cache-affinity-filter");
    RoutingDecision first = r.route(prompt(3));
    String home = first.primary().id();
    first.onComplete(Usage.NONE);
    queue(r, home, 20);
    assertThat(r.route(prompt(3)).primary().id()).isEqualTo(home);
  }

  /**
   * An engine put to sleep discards its cache, so once it wakes up the prompt it held is cached
   * nowhere and follows the queue: through the file's producer and through the filter's own index.
   */
  @Test
  void aPromptWhoseEngineSleptSinceFollowsTheQueueAgain() {
    String[][] files = {
        {"- type: approx-prefix-cache-producer\n- type: prefix-cache-affinity-filter\n"
            + "  parameters: {maxTTFTPenaltyMs: 0}", "- pluginRef: prefix-cache-affinity-filter"},
        {"- type: prefix-cache-affinity-filter", "- pluginRef: prefix-cache-affinity-filter"}};
    for (String[] f : files) {
      Router r = router(f[0], f[1]);
      RoutingDecision first = r.route(prompt(4));
      String home = first.primary().id();
      first.onComplete(Usage.NONE);
      assertThat(r.updateMetrics(home, EndpointMetrics.builder().asleep(true)
          .scrapedAtNanos(now.get()).build())).isTrue();
      queue(r, home, 20); // awake again, with a queue
      RoutingDecision d = r.route(prompt(4));
      assertThat(d.primary().id()).as("%s: the cache it held is gone", f[0]).isNotEqualTo(home);
      d.onComplete(Usage.NONE);
    }
  }

  /**
   * 40 uncached tokens in flight at 100 tokens a second are an estimated 400 ms on the cached
   * endpoint against 0 elsewhere, past a 100 ms penalty: stickiness breaks until the first token.
   */
  @Test
  void theTtftGateBreaksStickinessWhileTheCachedEndpointHasPrefillInFlight() {
    Router r = router("""
        - type: approx-prefix-cache-producer
        - type: inflight-load-producer
        - type: prefix-cache-affinity-filter
          parameters: {maxTTFTPenaltyMs: 100, peakPrefillThroughput: 100}
        """, "- pluginRef: prefix-cache-affinity-filter");
    InFlightLoadProducer load = (InFlightLoadProducer) r.config().plugins()
        .get("inflight-load-producer");
    RoutingDecision first = r.route(prompt(4));
    String home = first.primary().id();
    assertThat(load.tokens(home)).as("cold: the whole prompt").isEqualTo(1000);
    first.onComplete(Usage.NONE);
    assertThat(load.tokens(home)).isZero();
    queue(r, home, 20);

    RoutingDecision second = r.route(prompt(4));
    assertThat(second.primary().id()).isEqualTo(home);
    assertThat(load.tokens(home)).as("fifteen blocks of 64 cached: 40 tokens to prefill")
        .isEqualTo(40);
    RoutingDecision third = r.route(prompt(4));
    String away = third.primary().id();
    assertThat(away).as("400 ms behind: every candidate kept").isNotEqualTo(home);
    third.onComplete(Usage.NONE);

    // the prompt is cached at home and where the third request went; the third endpoint, as
    // idle as that one, is filtered out once home's prefill is done
    second.onFirstToken();
    assertThat(load.tokens(home)).isZero();
    assertThat(load.requests(home)).isEqualTo(1);
    for (int i = 0; i < 5; i++) {
      RoutingDecision d = r.route(prompt(4));
      assertThat(d.primary().id()).isEqualTo(away);
      d.onComplete(Usage.NONE);
    }
    second.onComplete(Usage.NONE);
    assertThat(load.requests(home)).isZero();
  }

  @Test
  void theProducersOutputEstimateIsCappedAndStaysUntilTheEndAndMovesOnFallback() {
    Router r = router("""
        - type: inflight-load-producer
          parameters: {addEstimatedOutputTokens: true, maxEstimatedOutputTokens: 10}
        """, "");
    InFlightLoadProducer load = (InFlightLoadProducer) r.config().plugins()
        .get("inflight-load-producer");
    InferenceRequest req = InferenceRequest.builder().model("m").prompt("x".repeat(400))
        .maxTokens(50).build();
    RoutingDecision d = r.route(req);
    String at = d.primary().id();
    // 100 prompt tokens, none cached; output min(round(100 x 1.5), 50, 10) = 10
    assertThat(load.tokens(at)).isEqualTo(110);
    Endpoint other = POOL.stream().filter(e -> !e.id().equals(at)).findFirst().orElseThrow();
    d.onFallback(other);
    assertThat(load.tokens(at)).isZero();
    assertThat(load.tokens(other.id())).isEqualTo(110);
    d.onFirstToken();
    assertThat(load.tokens(other.id())).isEqualTo(10);
    d.onFailure(new java.io.IOException("cut"));
    assertThat(load.tokens(other.id())).isZero();
    assertThat(load.requests(other.id())).isZero();
  }

  @Test
  void aRequestTheGatewayNeverFinishesIsForgottenAfterTheInFlightMaxAge() {
    Router r = router("- type: inflight-load-producer", "");
    InFlightLoadProducer load = (InFlightLoadProducer) r.config().plugins()
        .get("inflight-load-producer");
    String at = r.route(prompt(5)).primary().id();
    assertThat(load.requests(at)).isEqualTo(1);
    now.addAndGet(java.time.Duration.ofMinutes(11).toNanos()); // the default age is 10 minutes
    for (Endpoint e : POOL) {
      queue(r, e.id(), 0);
    }
    RoutingDecision next = r.route(prompt(6)); // a route sweeps
    assertThat(load.requests(at)).isEqualTo(at.equals(next.primary().id()) ? 1 : 0);
  }
}
