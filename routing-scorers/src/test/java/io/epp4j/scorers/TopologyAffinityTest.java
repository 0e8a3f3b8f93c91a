package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * llm-d's topology plugins: the prefill pick of a disaggregated request is kept (filter) or
 * favoured (scorer) near the decode pick, by the host, rack, zone and region labels.
 */
class TopologyAffinityTest {
  static Endpoint ep(String ip, String role, String host, String rack, String zone) {
    return Endpoint.of(ip, 8000, Map.of(Endpoint.ROLE_LABEL, role, "node", host,
        "topology.kubernetes.io/rack", rack, "topology.kubernetes.io/zone", zone));
  }

  // one decoder; prefill endpoints on its host, in its rack, in its zone, elsewhere
  static final List<Endpoint> POOL = List.of(
      ep("10.0.2.1", "decode", "h1", "r1", "z1"),
      ep("10.0.1.1", "prefill", "h1", "r1", "z1"),
      ep("10.0.1.2", "prefill", "h2", "r1", "z1"),
      ep("10.0.1.3", "prefill", "h3", "r2", "z1"),
      ep("10.0.1.4", "prefill", "h4", "r3", "z2"));

  static String yaml(String prefillPlugins) {
    return """
        plugins:
        - type: prefill-filter
        - type: decode-filter
        - type: max-score-picker
        - type: disagg-profile-handler
          parameters: {deciders: {prefill: always-disagg-pd-decider}}
        - type: always-disagg-pd-decider
        - type: topology-affinity-filter
          parameters: {minAffinity: rack}
        - type: topology-affinity-scorer
        - type: topology-extractor
          parameters: {hostname: node}
        schedulingProfiles:
        - name: decode
          plugins:
          - pluginRef: decode-filter
          - pluginRef: max-score-picker
        - name: prefill
          plugins:
          - pluginRef: prefill-filter
          %s
          - pluginRef: max-score-picker
        """.formatted(prefillPlugins);
  }

  Set<String> prefills(String yaml, List<Endpoint> pool) {
    Set<String> seen = new HashSet<>();
    try (Router r = Router.builder().endpoints(pool).configYaml(yaml, "t.yaml").randomSeed(3)
        .build()) {
      for (int i = 0; i < 40; i++) {
        RoutingDecision d = r.route(InferenceRequest.completion("m", "prompt " + i));
        Endpoint prefill = PdProfileHandler.prefillEndpoint(d);
        assertThat(prefill).isNotNull();
        seen.add(prefill.id());
        d.onComplete(io.epp4j.api.Usage.NONE);
      }
    }
    return seen;
  }

  @Test
  void theFilterKeepsThePrefillCandidatesInTheDecodersRack() {
    // the extractor is listed after the filter that reads it, and names the host label
    assertThat(prefills(yaml("- pluginRef: topology-affinity-filter"), POOL))
        .containsExactlyInAnyOrder("10.0.1.1:8000", "10.0.1.2:8000");
  }

  @Test
  void theScorerPrefersTheDecodersHost() {
    assertThat(prefills(yaml("- pluginRef: topology-affinity-scorer"), POOL))
        .containsExactly("10.0.1.1:8000");
  }

  @Test
  void withoutAnyCandidateNearEnoughTheFilterKeepsThemAll() {
    List<Endpoint> far = List.of(POOL.get(0), POOL.get(3), POOL.get(4));
    assertThat(prefills(yaml("- pluginRef: topology-affinity-filter"), far))
        .containsExactlyInAnyOrder("10.0.1.3:8000", "10.0.1.4:8000");
  }

  @Test
  void theLevelsAreTheTightestSharedAndAMissingValueNeverMatches() {
    Topology.Extractor t = Topology.Extractor.DEFAULT;
    Endpoint bare = Endpoint.of("10.0.0.9", 8000);
    assertThat(t.level(bare, bare)).as("no labels: nothing shared").isEqualTo(Topology.NONE);
    Endpoint a = Endpoint.of("10.0.0.1", 8000, Map.of("topology.kubernetes.io/zone", "z",
        "topology.kubernetes.io/region", "e"));
    Endpoint b = Endpoint.of("10.0.0.2", 8000, Map.of("topology.kubernetes.io/zone", "z",
        "topology.kubernetes.io/region", "e", "kubernetes.io/hostname", ""));
    assertThat(t.level(a, b)).isEqualTo(Topology.ZONE);
    assertThat(t.located(bare)).isFalse();
    assertThat(t.located(a)).isTrue();
  }
}
