package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Parameters;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** llm-d's precise-scorer parameters read into epp4j's: honoured, refused or noticed. */
class UpstreamPreciseParametersTest {

  @Test
  void aZmqEndpointIsTheCentralSocketAndDiscoverPodsSubscribesPerEndpoint() {
    Parameters central = Parameters.of(Map.of("kvEventsConfig", Map.of("discoverPods", false,
        "zmqEndpoint", "tcp://*:5557", "topicFilter", "kv@", "concurrency", 4)));
    UpstreamPreciseParameters c = UpstreamPreciseParameters.read(central, false);
    assertThat(c.kvEvents()).containsEntry("mode", "central")
        .containsEntry("bindAddress", "tcp://*:5557").containsEntry("topicFilter", "kv@");
    assertThat(central.errors()).isEmpty();
    assertThat(central.notices()).singleElement().satisfies(n -> assertThat(n)
        .contains("concurrency"));

    Parameters pods = Parameters.of(Map.of("kvEventsConfig",
        Map.of("discoverPods", true, "podDiscoveryConfig", Map.of("socketPort", 5600))));
    assertThat(UpstreamPreciseParameters.read(pods, false).kvEvents())
        .containsEntry("mode", "per-endpoint").containsEntry("port", 5600);
    assertThat(pods.errors()).isEmpty();

    // both: llm-d subscribes to each pod and binds zmqEndpoint too, and so does epp4j
    Parameters both = Parameters.of(Map.of("kvEventsConfig", Map.of("discoverPods", true,
        "podDiscoveryConfig", Map.of("socketPort", 5600), "zmqEndpoint", "tcp://*:5557")));
    UpstreamPreciseParameters b = UpstreamPreciseParameters.read(both, false);
    assertThat(b.kvEvents()).containsEntry("mode", "per-endpoint").containsEntry("port", 5600);
    assertThat(b.alsoBind()).isEqualTo("tcp://*:5557");
    assertThat(both.errors()).isEmpty();
    assertThat(UpstreamPreciseParameters.read(pods, false).alsoBind()).isNull();
  }

  /**
   * llm-d's precise scorer decodes its parameters over llm-d-kv-cache's
   * {@code kvevents.DefaultConfig()}, whose {@code discoverPods} is true (llm-d-kv-cache v0.5.0
   * on, llm-d-inference-scheduler v0.5.0 on): a {@code kvEventsConfig} that leaves it out
   * follows each pod on {@code podDiscoveryConfig.socketPort} (5557 unless given) and binds its
   * {@code zmqEndpoint}, if any, as well.
   */
  @Test
  void aMissingDiscoverPodsIsTrueAsInLlmd() {
    Parameters endpointOnly = Parameters.of(Map.of("kvEventsConfig",
        Map.of("zmqEndpoint", "tcp://*:5557")));
    UpstreamPreciseParameters e = UpstreamPreciseParameters.read(endpointOnly, false);
    assertThat(e.kvEvents()).containsEntry("mode", "per-endpoint")
        .containsEntry("port", KvEventSubscriber.DEFAULT_PORT);
    assertThat(e.alsoBind()).isEqualTo("tcp://*:5557");
    assertThat(endpointOnly.errors()).isEmpty();

    Parameters portOnly = Parameters.of(Map.of("kvEventsConfig",
        Map.of("topicFilter", "kv@", "podDiscoveryConfig", Map.of("socketPort", 5600))));
    UpstreamPreciseParameters p = UpstreamPreciseParameters.read(portOnly, false);
    assertThat(p.kvEvents()).containsEntry("mode", "per-endpoint").containsEntry("port", 5600)
        .containsEntry("topicFilter", "kv@");
    assertThat(p.alsoBind()).isNull();
    assertThat(portOnly.errors()).isEmpty();

    Parameters empty = Parameters.of(Map.of("kvEventsConfig", Map.of()));
    assertThat(UpstreamPreciseParameters.read(empty, false).kvEvents())
        .containsEntry("mode", "per-endpoint")
        .containsEntry("port", KvEventSubscriber.DEFAULT_PORT);
    assertThat(empty.errors()).isEmpty();
  }

  /**
   * {@code podLabelSelector} and {@code podNamespace} are llm-d-kv-cache's pod-reconciler
   * settings, which llm-d's precise scorer decodes and does not read: each gets a notice, the
   * mapping is unchanged, and a value that is no string is refused naming the field.
   */
  @Test
  void podLabelSelectorAndPodNamespaceAreNoticedAndMustBeStrings() {
    Parameters p = Parameters.of(Map.of("kvEventsConfig", Map.of("podDiscoveryConfig",
        Map.of("podLabelSelector", "app=vllm,tier=gpu", "podNamespace", "", "socketPort", 5600))));
    UpstreamPreciseParameters u = UpstreamPreciseParameters.read(p, false);
    assertThat(u.kvEvents()).containsEntry("mode", "per-endpoint").containsEntry("port", 5600);
    assertThat(p.errors()).isEmpty();
    assertThat(p.notices()).anySatisfy(n -> assertThat(n).contains("'kvEventsConfig'")
        .contains("podDiscoveryConfig.podLabelSelector has no effect"));
    assertThat(p.notices()).anySatisfy(n -> assertThat(n).contains("'kvEventsConfig'")
        .contains("podDiscoveryConfig.podNamespace has no effect"));

    Parameters bad = Parameters.of(Map.of("kvEventsConfig", Map.of("podDiscoveryConfig",
        Map.of("podLabelSelector", Map.of("app", "vllm")))));
    UpstreamPreciseParameters.read(bad, false);
    assertThat(bad.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("'kvEventsConfig'").contains("podLabelSelector").contains("must be a string"));
  }

  /**
   * {@code engineType} picks llm-d-kv-cache's event adapter: {@code vllm} (also the empty
   * string) or {@code sglang}. Both are read by epp4j's one decoder, so both load without a
   * notice and map to the same {@code kvEvents}.
   */
  @ParameterizedTest
  @ValueSource(strings = {"vllm", "sglang", ""})
  void engineTypesWithAnAdapterLoad(String engine) {
    Parameters p = Parameters.of(Map.of("kvEventsConfig", Map.of("engineType", engine,
        "discoverPods", false, "zmqEndpoint", "tcp://*:5557")));
    UpstreamPreciseParameters u = UpstreamPreciseParameters.read(p, false);
    assertThat(u.kvEvents()).containsEntry("mode", "central")
        .containsEntry("bindAddress", "tcp://*:5557");
    assertThat(p.errors()).isEmpty();
    assertThat(p.notices()).isEmpty();
  }

  /**
   * An explicit {@code podDiscoveryConfig: null} is a nil pointer in llm-d, which then follows no
   * pod whatever {@code discoverPods} says: a {@code zmqEndpoint} is the one source (with a
   * notice), and without one nothing would be heard, which is refused naming both fields.
   */
  @Test
  void anExplicitlyNullPodDiscoveryConfigFollowsNoEndpoint() {
    Map<String, Object> bound = new java.util.HashMap<>();
    bound.put("zmqEndpoint", "tcp://*:5557");
    bound.put("podDiscoveryConfig", null);
    Parameters p = Parameters.of(Map.of("kvEventsConfig", bound));
    UpstreamPreciseParameters u = UpstreamPreciseParameters.read(p, false);
    assertThat(u.kvEvents()).containsEntry("mode", "central")
        .containsEntry("bindAddress", "tcp://*:5557").doesNotContainKey("port");
    assertThat(u.alsoBind()).isNull();
    assertThat(p.errors()).isEmpty();
    assertThat(p.notices()).singleElement().satisfies(n -> assertThat(n)
        .contains("podDiscoveryConfig is null").contains("follows no endpoint"));

    Map<String, Object> deaf = new java.util.HashMap<>();
    deaf.put("discoverPods", true);
    deaf.put("podDiscoveryConfig", null);
    Parameters q = Parameters.of(Map.of("kvEventsConfig", deaf));
    UpstreamPreciseParameters.read(q, false);
    assertThat(q.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("'kvEventsConfig'").contains("podDiscoveryConfig").contains("zmqEndpoint"));
  }

  @Test
  void withAnIndexTheApplicationFeedsNoSocketIsOpened() {
    Parameters p = Parameters.of(Map.of("kvEventsConfig", Map.of("zmqEndpoint", "tcp://*:5557")));
    assertThat(UpstreamPreciseParameters.read(p, true).kvEvents()).containsExactly(
        Map.entry("mode", "none"));
    assertThat(p.notices()).anySatisfy(n -> assertThat(n).contains("opens no socket"));
  }

  @Test
  void blockSizesFromBothPlacesMustAgree() {
    Parameters same = Parameters.of(Map.of(
        "tokenProcessorConfig", Map.of("blockSize", 64),
        "indexerConfig", Map.of("tokenProcessorConfig", Map.of("blockSize", 64),
            "kvBlockIndexConfig", Map.of("maxPrefixBlocksToMatch", 256),
            "prefixStoreConfig", Map.of("cacheSize", 500000, "blockSize", 256))));
    UpstreamPreciseParameters r = UpstreamPreciseParameters.read(same, false);
    assertThat(r.blockSize()).isEqualTo(64);
    assertThat(r.maxPromptBlocks()).isEqualTo(256);
    assertThat(same.errors()).isEmpty();
    assertThat(same.notices()).anySatisfy(n -> assertThat(n).contains("prefixStoreConfig"));

    Parameters differ = Parameters.of(Map.of(
        "tokenProcessorConfig", Map.of("blockSize", 64),
        "indexerConfig", Map.of("tokenProcessorConfig", Map.of("blockSize", 16))));
    UpstreamPreciseParameters.read(differ, false);
    assertThat(differ.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("'indexerConfig'").contains("16").contains("64"));
  }

  @Test
  void anEndpointlessEventsConfigAndUnknownFieldsAreRefusedByName() {
    Parameters p = Parameters.of(Map.of(
        "kvEventsConfig", Map.of("topicFilter", "kv@", "discoverPods", false),
        "tokenProcessorConfig", Map.of("blockSize", 64, "chunking", "x"),
        "indexerConfig", Map.of("tokenizersPoolConfig", Map.of("modelName", "m"))));
    UpstreamPreciseParameters.read(p, false);
    assertThat(p.errors()).anySatisfy(e -> assertThat(e).contains("'kvEventsConfig'")
        .contains("zmqEndpoint").contains("discoverPods"));
    assertThat(p.errors()).anySatisfy(e -> assertThat(e).contains("'tokenProcessorConfig'")
        .contains("unknown field 'chunking'"));
    assertThat(p.errors()).anySatisfy(e -> assertThat(e).contains("tokenizersPoolConfig"));
  }

  /** llm-d-kv-cache renamed blockSize to blockSizeTokens and added the hash algorithm. */
  @Test
  void blockSizeTokensIsTheBlockSizeAndTheHashAlgorithmIsNoticed() {
    Parameters p = Parameters.of(Map.of("tokenProcessorConfig",
        Map.of("blockSizeTokens", 5, "hashAlgorithm", "xxh64")));
    assertThat(UpstreamPreciseParameters.read(p, false).blockSize()).isEqualTo(5);
    assertThat(p.errors()).isEmpty();
    assertThat(p.notices()).anySatisfy(n -> assertThat(n).contains("hashAlgorithm"));

    Parameters zero = Parameters.of(Map.of("tokenProcessorConfig",
        Map.of("blockSizeTokens", 0, "blockSize", 32)));
    assertThat(UpstreamPreciseParameters.read(zero, false).blockSize()).as("0 is not set")
        .isEqualTo(32);
    assertThat(zero.errors()).isEmpty();

    Parameters both = Parameters.of(Map.of("tokenProcessorConfig",
        Map.of("blockSizeTokens", 64, "blockSize", 16)));
    UpstreamPreciseParameters.read(both, false);
    assertThat(both.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("blockSizeTokens 64").contains("blockSize 16"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"tokenProcessorConfig", "kvBlockIndexConfig"})
  void aNestedIndexerConfigSectionThatIsNotAnObjectIsRefusedByName(String section) {
    // indexerConfig's reader kept the error of its sections to itself: a section given as a
    // number or a string was dropped, its block size or prompt length not applied, unnoticed
    Parameters p = Parameters.of(Map.of("indexerConfig", Map.of(section, 64)));
    UpstreamPreciseParameters.read(p, false);
    assertThat(p.errors()).singleElement().satisfies(e -> assertThat(e)
        .startsWith("parameter 'indexerConfig'").contains("'" + section + "'")
        .contains("must be an object"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"many", "1.5", "10000000000"})
  void aMaxPrefixBlocksToMatchThatIsNotAnIntegerIsRefusedAsGiven(String value) {
    // its reader's error was dropped and the range check quoted the default in its place:
    // "must be in [1, 4194304], got 0" for a value that was not 0
    Parameters p = Parameters.of(Map.of("indexerConfig",
        Map.of("kvBlockIndexConfig", Map.of("maxPrefixBlocksToMatch", value))));
    UpstreamPreciseParameters.read(p, false);
    assertThat(p.errors()).singleElement().satisfies(e -> assertThat(e)
        .startsWith("parameter 'indexerConfig'").contains("maxPrefixBlocksToMatch")
        .contains(value).doesNotContain("got 0"));
  }

  /**
   * llm-d's {@code podDiscoveryConfig.replaySocketPort} (llm-d-router, since its replay consumer)
   * is the port of each engine's replay socket, epp4j's {@code kvEvents.replayPort}; it was
   * refused as an unknown field.
   */
  @Test
  void replaySocketPortIsEachEndpointsReplayPort() {
    Parameters p = Parameters.of(Map.of("kvEventsConfig", Map.of("podDiscoveryConfig",
        Map.of("socketPort", 5600, "replaySocketPort", 5601))));
    UpstreamPreciseParameters u = UpstreamPreciseParameters.read(p, false);
    assertThat(p.errors()).isEmpty();
    assertThat(u.kvEvents()).containsEntry("mode", "per-endpoint").containsEntry("port", 5600)
        .containsEntry("replayPort", 5601);

    // 0 or a negative port is no replay, as in llm-d
    for (int off : new int[] {0, -1}) {
      Parameters none = Parameters.of(Map.of("kvEventsConfig", Map.of("podDiscoveryConfig",
          Map.of("replaySocketPort", off))));
      assertThat(UpstreamPreciseParameters.read(none, false).kvEvents()).as("%s", off)
          .doesNotContainKey("replayPort");
      assertThat(none.errors()).as("%s", off).isEmpty();
    }

    Parameters high = Parameters.of(Map.of("kvEventsConfig", Map.of("podDiscoveryConfig",
        Map.of("replaySocketPort", 70000))));
    UpstreamPreciseParameters.read(high, false);
    assertThat(high.errors()).singleElement().satisfies(e -> assertThat(e)
        .startsWith("parameter 'kvEventsConfig'").contains("'replaySocketPort'")
        .contains("70000"));

    // only a followed endpoint is asked for a replay, in llm-d as here
    Parameters central = Parameters.of(Map.of("kvEventsConfig", Map.of("discoverPods", false,
        "zmqEndpoint", "tcp://*:5557", "podDiscoveryConfig", Map.of("replaySocketPort", 5601))));
    assertThat(UpstreamPreciseParameters.read(central, false).kvEvents())
        .containsEntry("mode", "central").doesNotContainKey("replayPort");
    assertThat(central.errors()).isEmpty();
    assertThat(central.notices()).singleElement().satisfies(n -> assertThat(n)
        .contains("replaySocketPort").contains("no effect"));
  }
}
