package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

/**
 * The built-in plugins take hints another router of the pool delivered through
 * {@code Router.hints()}, as {@code redis-replication} or the simulator's hint bus deliver them.
 */
class RemoteHintsTest {
  static final String HEAD = """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      """;

  static List<Endpoint> endpoints() {
    List<Endpoint> eps = new ArrayList<>();
    for (int i = 0; i < 8; i++) {
      eps.add(Endpoint.parse("10.3.0." + (i + 1) + ":8000"));
    }
    return eps;
  }

  static Router router(String yaml, Object... listeners) {
    Router.Builder b = Router.builder().endpoints(endpoints()).configYaml(HEAD + yaml, "test")
        .randomSeed(7);
    for (Object l : listeners) {
      b.listener(l);
    }
    return b.build();
  }

  static InferenceRequest prompt(long seed, @Nullable String session) {
    Random rnd = new Random(seed);
    int[] ids = new int[512];
    for (int i = 0; i < ids.length; i++) {
      ids[i] = rnd.nextInt(50_000);
    }
    return InferenceRequest.builder().model("m").tokenIds(ids).maxTokens(8).sessionKey(session)
        .build();
  }

  /** Keeps the block hashes the prefix scorer published for the last routed request. */
  static final class BlocksTap implements RequestListener {
    @Nullable PrefixBlocks last;

    @Override
    public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision d) {
      PrefixBlocks b = state.get(PrefixBlocks.KEY);
      last = b == null ? null : PrefixBlocks.of(b.blockSizeTokens(), b.toArray());
    }
  }

  static final String PREFIX = """
      plugins:
      - type: prefix-cache-scorer
        parameters: {blockSizeTokens: %d}
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: prefix-cache-scorer
        - pluginRef: max-score-picker
      """;

  @Test
  void aRemotePrefixIsScoredAsIfThisRouterHadSentIt() {
    BlocksTap tap = new BlocksTap();
    Router a = router(PREFIX.formatted(16), tap);
    Router b = router(PREFIX.formatted(16));
    Router otherBlockSize = router(PREFIX.formatted(32));
    for (int i = 0; i < 10; i++) {
      RoutingDecision d = a.route(prompt(i, null));
      PrefixBlocks blocks = tap.last;
      assertThat(blocks).isNotNull();
      assertThat(blocks.size()).isEqualTo(512 / 16);
      // a different endpoint than a chose, so only the hint can lead b there
      String target = endpoints().get((endpoints().indexOf(d.primary()) + 1) % 8).id();
      b.hints().prefixSent(target, blocks);
      otherBlockSize.hints().prefixSent(target, blocks);
      assertThat(b.route(prompt(i, null)).primary().id()).isEqualTo(target);
    }
    // hashes of another block size mean nothing there: not recorded at all
    PrefixCacheScorer wrongSize = (PrefixCacheScorer) otherBlockSize.config().plugins()
        .get("prefix-cache-scorer");
    for (Endpoint e : endpoints()) {
      assertThat(wrongSize.blocks(e.id()).size()).as(e.id()).isZero();
    }
    for (Router r : List.of(a, b, otherBlockSize)) {
      r.close();
    }
  }

  @Test
  void aRemoteSessionBindingLeadsTheSessionToItsEndpoint() {
    String yaml = """
        plugins:
        - type: session-affinity-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: session-affinity-scorer
          - pluginRef: max-score-picker
        """;
    Router b = router(yaml);
    Router byHeader = router(yaml.replace("- type: session-affinity-scorer\n",
        "- type: session-affinity-scorer\n  parameters: {sessionKeyFrom: 'header:x-user'}\n"));
    String target = endpoints().get(5).id();
    b.hints().sessionBound("s-1", target);
    byHeader.hints().sessionBound("s-1", target);
    b.hints().sessionBound("s-2", "10.9.9.9:8000"); // not in the pool: not bound
    for (int i = 0; i < 10; i++) {
      RoutingDecision d = b.route(prompt(i, "s-1"));
      assertThat(d.primary().id()).isEqualTo(target);
      d.onComplete(new Usage(1, 0, 1));
    }
    // keyed by a header, the scorer has no use for a session key
    SessionAffinityScorer headerScorer = (SessionAffinityScorer) byHeader.config().plugins()
        .get("session-affinity-scorer");
    assertThat(headerScorer.binding("s-1")).isNull();
    SessionAffinityScorer scorer = (SessionAffinityScorer) b.config().plugins()
        .get("session-affinity-scorer");
    assertThat(scorer.binding("s-2")).isNull();
    b.close();
    byHeader.close();
  }

  @Test
  void tokenCostPickerCountsRemoteSessionsAgainstItsBound() {
    Router b = router("""
        plugins:
        - type: prefix-cache-scorer
        - type: token-cost-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: prefix-cache-scorer
          - pluginRef: token-cost-picker
        """);
    TokenCostPicker picker = (TokenCostPicker) b.config().plugins().get("token-cost-picker");
    String target = endpoints().get(2).id();
    String other = endpoints().get(3).id();
    b.hints().sessionBound("s-1", target);
    b.hints().sessionBound("s-2", target);
    assertThat(picker.sessions(target)).isEqualTo(2);
    b.hints().sessionBound("s-2", other); // the session moved on the other router
    assertThat(picker.sessions(target)).isEqualTo(1);
    assertThat(picker.sessions(other)).isEqualTo(1);
    // its home now: a request of s-1 with nothing cached anywhere returns there
    RoutingDecision d = b.route(prompt(1, "s-1"));
    assertThat(d.primary().id()).isEqualTo(target);
    b.close();
  }
}
