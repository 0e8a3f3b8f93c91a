package io.epp4j.kvevents;

import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.EPS;
import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.prompt;
import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.request;
import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import io.epp4j.api.Endpoint;
import io.epp4j.core.Router;
import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * The {@value KvEventsPresets#EPP4J_PRECISE} preset: the epp4j policy whose hits come from the
 * engines' KV events, so a prompt goes where an engine reports holding it even when this router
 * never sent it there (another router or client placed it there).
 */
class Epp4jPresetPreciseTest {
  final AtomicLong now = new AtomicLong(1_000_000_000L);

  static void store(KvBlockIndex index, String ep, int[] tokens, int blocks, long firstHash) {
    long[] hashes = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      hashes[i] = firstHash + i;
    }
    index.apply(ep, KvEventBatch.of(0, List.of(
        KvEvent.BlockStored.of(hashes, null, Arrays.copyOf(tokens, blocks * 16), 16))));
  }

  @Test
  void isAPresetByName() {
    assertThat(KvEventsPresets.names()).contains(KvEventsPresets.EPP4J_PRECISE);
    assertThat(KvEventsPresets.yaml("epp4j-precise"))
        .contains("precise-prefix-cache-scorer", "token-cost-picker");
  }

  @Test
  void aPromptGoesToTheEndpointWhoseEventsHoldItThoughTheRouterNeverSentItThere() {
    // each endpoint in turn is the holder, with the same prompt and session: a policy that
    // ignored the events would send all three to the same (hash-tied) endpoint
    for (Endpoint holder : EPS) {
      KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();
      try (Router r = Router.builder().endpoints(EPS).service(KvBlockIndex.class, index)
          .configYaml(KvEventsPresets.yaml(KvEventsPresets.EPP4J_PRECISE),
              KvEventsPresets.EPP4J_PRECISE)
          .ticker(now::get).randomSeed(3).build()) {
        int[] p = prompt(11, 16 * 20);
        store(index, holder.id(), p, 16, 9_000);
        assertThat(r.route(request(p)).primary().id()).as("holder %s", holder.id())
            .isEqualTo(holder.id());
      }
    }
  }

  @Test
  void theEventsOutweighWhereTheRouterSentThePrefixBefore() {
    KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();
    try (Router r = Router.builder().endpoints(EPS).service(KvBlockIndex.class, index)
        .configYaml(KvEventsPresets.yaml(KvEventsPresets.EPP4J_PRECISE),
            KvEventsPresets.EPP4J_PRECISE)
        .ticker(now::get).randomSeed(3).build()) {
      int[] p = prompt(12, 16 * 20);
      String first = r.route(request(p)).primary().id();
      // the speculative entries of that route expire (2 s) and the engine never reported the
      // blocks (evicted, or the request failed); another engine reports holding the prompt
      now.addAndGet(10_000_000_000L);
      String holder = EPS.stream().map(Endpoint::id).filter(id -> !id.equals(first))
          .findFirst().orElseThrow();
      store(index, holder, p, 16, 5_000);
      assertThat(r.route(request(p)).primary().id()).isEqualTo(holder);
    }
  }

  @Test
  void itsPickerIsConfiguredExactlyAsEpp4jsAndItsScorerHasEpp4jsWeight() throws IOException {
    // the preset differs from epp4j only in where the hits come from; routing-scorers (which
    // ships epp4j) is on this module's run-time path, so its resource is read by name
    Map<?, ?> precise = yaml(KvEventsPresets.yaml(KvEventsPresets.EPP4J_PRECISE));
    Map<?, ?> epp4j;
    try (InputStream in = getClass().getClassLoader()
        .getResourceAsStream("io/epp4j/scorers/presets/epp4j.yaml")) {
      assertThat(in).as("routing-scorers' epp4j preset").isNotNull();
      epp4j = yaml(new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8));
    }
    assertThat(plugin(precise, "token-cost-picker")).isEqualTo(plugin(epp4j, "token-cost-picker"));
    assertThat(profileEntry(precise, "precise-prefix-cache-scorer").get("weight"))
        .isEqualTo(profileEntry(epp4j, "prefix-cache-scorer").get("weight"));
    assertThat(profileEntry(precise, "token-cost-picker"))
        .isEqualTo(profileEntry(epp4j, "token-cost-picker"));
  }

  private static Map<?, ?> yaml(String text) throws IOException {
    return new ObjectMapper(new YAMLFactory()).readValue(text, Map.class);
  }

  private static Map<?, ?> plugin(Map<?, ?> config, String type) {
    return ((List<?>) config.get("plugins")).stream().map(o -> (Map<?, ?>) o)
        .filter(m -> type.equals(m.get("type"))).findFirst().orElseThrow();
  }

  private static Map<?, ?> profileEntry(Map<?, ?> config, String ref) {
    Map<?, ?> profile = (Map<?, ?>) ((List<?>) config.get("schedulingProfiles")).get(0);
    return ((List<?>) profile.get("plugins")).stream().map(o -> (Map<?, ?>) o)
        .filter(m -> ref.equals(m.get("pluginRef"))).findFirst().orElseThrow();
  }
}
