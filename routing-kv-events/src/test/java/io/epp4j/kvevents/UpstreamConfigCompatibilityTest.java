package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Rejection;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import io.epp4j.scorers.PdProfileHandler;
import java.net.URISyntaxException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * Configuration files in the shapes the upstream families publish (written for this test, under
 * {@code src/test/resources/compat}), each loaded unchanged, run through the router against a
 * small pool, and checked against what upstream's semantics say should win and why.
 */
class UpstreamConfigCompatibilityTest {
  static final String MODEL = "m";
  final AtomicLong now = new AtomicLong(1_000_000_000L);
  final List<Router> routers = new ArrayList<>();

  @AfterEach
  void close() {
    routers.forEach(Router::close);
  }

  static Path compat(String name) {
    try {
      return Path.of(Objects.requireNonNull(UpstreamConfigCompatibilityTest.class
          .getResource("/compat/" + name), name).toURI());
    } catch (URISyntaxException e) {
      throw new AssertionError(e);
    }
  }

  Router router(String file, List<Endpoint> pool) {
    Router r = Router.builder().endpoints(pool).configFile(compat(file)).ticker(now::get)
        .randomSeed(7).build();
    routers.add(r);
    return r;
  }

  static List<Endpoint> pool(int n) {
    List<Endpoint> eps = new ArrayList<>();
    for (int i = 1; i <= n; i++) {
      eps.add(Endpoint.of("10.0.0." + i, 8000));
    }
    return eps;
  }

  static String id(int i) {
    return "10.0.0." + i + ":8000";
  }

  void metrics(Router r, String id, int waiting, double kv) {
    metrics(r, id, EndpointMetrics.builder().waitingRequests(waiting).kvCacheUsage(kv));
  }

  void metrics(Router r, String id, EndpointMetrics.Builder b) {
    assertThat(r.updateMetrics(id, b.scrapedAtNanos(now.get()).build())).as(id).isTrue();
  }

  static InferenceRequest completion(String prompt) {
    return InferenceRequest.completion(MODEL, prompt);
  }

  /** A prompt of {@code chars} characters that shares nothing with another seed's. */
  static String text(int seed, int chars) {
    StringBuilder sb = new StringBuilder();
    while (sb.length() < chars) {
      sb.append("s").append(seed).append(" word").append(sb.length()).append(' ');
    }
    return sb.substring(0, chars);
  }

  static Map<String, Integer> counts(Router r, InferenceRequest req, int n) {
    Map<String, Integer> m = new HashMap<>();
    for (int i = 0; i < n; i++) {
      RoutingDecision d = r.route(req);
      assertThat(d.isRouted()).as("routed: %s", d.rejection()).isTrue();
      m.merge(d.primary().id(), 1, Integer::sum);
      d.onComplete(io.epp4j.api.Usage.NONE);
    }
    return m;
  }

  // ------------------------------------------------------------ GIE 0.5: decision tree

  @Test
  void gie05DecisionTreeSendsToTheLeastQueueBandThenTheLeastKvUsage() {
    Router r = router("gie-0.5-decision-tree.yaml", pool(3));
    // 1 is over the low-queue threshold (128); of 2 and 3 the least-queue band
    // [10, 10 + (50 - 10) / 2] keeps only 2; no endpoint has adapter slots, so the LoRA filter
    // fails and the tree goes on with the least-queue filter
    metrics(r, id(1), 200, 0.1);
    metrics(r, id(2), 10, 0.5);
    metrics(r, id(3), 50, 0.1);
    assertThat(counts(r, completion("hello"), 30)).containsOnlyKeys(id(2));
  }

  /**
   * Upstream orders plugins by their references before creating them, so a file may list a
   * plugin before the ones it names; its own P/D sample lists the handler before its decider.
   */
  @Test
  void aTreeListedBeforeTheFiltersItNamesLoadsAndRoutesAsWhenListedAfter() throws Exception {
    String yaml = java.nio.file.Files.readString(compat("gie-0.5-decision-tree.yaml"));
    int tree = yaml.indexOf("- type: decision-tree-filter");
    int picker = yaml.indexOf("- type: random-picker");
    int plugins = yaml.indexOf("plugins:\n") + "plugins:\n".length();
    String reordered = yaml.substring(0, plugins) + yaml.substring(tree, picker)
        + yaml.substring(plugins, tree) + yaml.substring(picker);
    assertThat(reordered.indexOf("decision-tree-filter"))
        .isLessThan(reordered.indexOf("- type: low-queue-filter"));
    Router r = Router.builder().endpoints(pool(3)).configYaml(reordered, "tree-first.yaml")
        .ticker(now::get).randomSeed(7).build();
    routers.add(r);
    metrics(r, id(1), 200, 0.1);
    metrics(r, id(2), 10, 0.5);
    metrics(r, id(3), 50, 0.1);
    assertThat(counts(r, completion("hello"), 30)).containsOnlyKeys(id(2));
  }

  @Test
  void twoPluginsThatNameEachOtherAreRefusedNamingTheReference() {
    String yaml = """
        plugins:
        - name: a
          type: decision-tree-filter
          parameters: {current: {pluginRef: b}}
        - name: b
          type: decision-tree-filter
          parameters: {current: {pluginRef: a}}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: a
          - pluginRef: max-score-picker
        """;
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Router.builder()
            .endpoints(pool(1)).configYaml(yaml, "cycle.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("(name 'a', type 'decision-tree-filter')")
        .hasMessageContaining("(or one that refers back to this one): 'b'");
  }

  @Test
  void gie05DecisionTreeOnASaturatedPoolTakesTheFailureBranch() {
    Router r = router("gie-0.5-decision-tree.yaml", pool(3));
    // every queue is over 128: least queue keeps [150, 150 + 150 / 3 = 200] = {2, 3}; least
    // KV of those keeps [0.2, 0.2 + 0.4 / 2] = {2}, although 3 has the shortest queue
    metrics(r, id(1), 300, 0.5);
    metrics(r, id(2), 200, 0.2);
    metrics(r, id(3), 150, 0.6);
    assertThat(counts(r, completion("hello"), 30)).containsOnlyKeys(id(2));
  }

  @Test
  void gie05DecisionTreeKeepsALoraRequestWhereItsAdapterRuns() {
    Router r = router("gie-0.5-decision-tree.yaml", pool(3));
    metrics(r, id(1), EndpointMetrics.builder().maxLoras(4));
    metrics(r, id(2), EndpointMetrics.builder().maxLoras(4));
    metrics(r, id(3), EndpointMetrics.builder().maxLoras(4).runningLoraAdapters(Set.of("sql")));
    InferenceRequest req = InferenceRequest.builder().model(MODEL).prompt("select")
        .loraAdapter("sql").build();
    // affinity with probability 0.999: of 200 draws, 6 or more misses has probability < 1e-9
    Map<String, Integer> c = counts(r, req, 200);
    assertThat(c.getOrDefault(id(3), 0)).isGreaterThanOrEqualTo(195);
  }

  @Test
  void gie05ScorersLoadUnderTheirFormerNamesAndLowerKvUsageWins() {
    Router r = router("gie-0.5-scorers.yaml", pool(2));
    assertThat(r.config().warnings()).filteredOn(w -> w.contains("former name"))
        .singleElement().satisfies(w -> assertThat(w).contains("'kv-cache-scorer'")
            .contains("kv-cache-utilization-scorer"));
    metrics(r, id(1), 0, 0.9);
    metrics(r, id(2), 0, 0.1);
    // queues tie, no prefix is known: 1 - KV usage decides
    assertThat(r.route(completion(text(1, 100))).primary().id()).isEqualTo(id(2));
  }

  // ------------------------------------------------------ GIE 1.x: defaults and sections

  @Test
  void gie1xDefaultsFollowThePrefixAndShedByTheFilesDetector() {
    Router r = router("gie-1.x-defaults.yaml", pool(3));
    assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
        .contains("field 'featureGates': 'dataLayer' has no effect"));
    assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
        .contains("engineLabelKey").contains("has no effect"));
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), 0, 0.1);
    }
    String prompt = text(1, 640);
    String first = r.route(completion(prompt)).primary().id();
    // the first endpoint now has the longest queue: prefix 3 x 1 beats queue 2 x 1 elsewhere
    metrics(r, first, 3, 0.1);
    for (int i = 0; i < 5; i++) {
      assertThat(r.route(completion(prompt)).primary().id()).isEqualTo(first);
    }
    assertThat(r.route(completion(text(2, 640))).primary().id()).isNotEqualTo(first);

    // the detector's queue threshold is 10, not the router's default 5: six waiting requests
    // everywhere is a saturation of 0.6 and sheddable requests still pass
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), 6, 0.1);
    }
    assertThat(r.poolSaturation()).isCloseTo(0.6, org.assertj.core.data.Offset.offset(1e-9));
    InferenceRequest sheddable = InferenceRequest.builder().model(MODEL).prompt("x")
        .priority(-1).build();
    assertThat(r.route(sheddable).isRouted()).isTrue();
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), 12, 0.1);
    }
    assertThat(r.route(sheddable).rejection()).extracting(Rejection::reason)
        .isEqualTo(Rejection.Reason.SHED);
  }

  @Test
  void theInlineSaturationSectionOfEarlier1xVersionsIsHonouredToo() {
    Router r = router("gie-1.1-inline-saturation.yaml", pool(2));
    metrics(r, id(1), 8, 0.1);
    metrics(r, id(2), 8, 0.1);
    assertThat(r.poolSaturation()).isCloseTo(0.8, org.assertj.core.data.Offset.offset(1e-9));
  }

  // ------------------------------------------------------------------ llm-d P/D generations

  static List<Endpoint> pdPool() {
    return List.of(
        Endpoint.of("10.0.1.1", 8000, Map.of(Endpoint.ROLE_LABEL, "prefill")),
        Endpoint.of("10.0.2.1", 8000, Map.of(Endpoint.ROLE_LABEL, "decode")),
        Endpoint.of("10.0.2.2", 8000, Map.of(Endpoint.ROLE_LABEL, "decode")));
  }

  @Test
  void earlyPdFilesDisaggregateLongPromptsByTheHandlersThreshold() {
    Router r = router("llmd-pd-threshold.yaml", pdPool());
    assertThat(r.config().warnings()).filteredOn(w -> w.contains("former name")).hasSize(3);
    // the threshold counts uncached characters: 120 of them, none cached, are over 100
    RoutingDecision longOne = r.route(completion(text(1, 120)));
    assertThat(longOne.primary().label(Endpoint.ROLE_LABEL)).isEqualTo("decode");
    assertThat(PdProfileHandler.prefillEndpoint(longOne)).extracting(Endpoint::id)
        .isEqualTo("10.0.1.1:8000");
    // 80 characters are under it: the decode endpoint prefills itself
    RoutingDecision shortOne = r.route(completion(text(2, 80)));
    assertThat(PdProfileHandler.prefillEndpoint(shortOne)).isNull();
  }

  @ParameterizedTest
  @ValueSource(strings = {"llmd-pd-decider.yaml", "llmd-pd-disagg.yaml"})
  void deciderFilesDisaggregateUntilTheDecodeEndpointHoldsThePrompt(String file) {
    Router r = router(file, pdPool());
    String prompt = text(3, 800);
    RoutingDecision first = r.route(completion(prompt));
    assertThat(PdProfileHandler.prefillEndpoint(first)).as("200 uncached tokens >= 16")
        .isNotNull();
    first.onComplete(io.epp4j.api.Usage.NONE);
    // the decode endpoint now holds 12 blocks of 16 tokens: 200 - 192 = 8 uncached < 16
    RoutingDecision second = r.route(completion(prompt));
    assertThat(second.primary()).isEqualTo(first.primary());
    assertThat(PdProfileHandler.prefillEndpoint(second)).isNull();
  }

  @ParameterizedTest
  @ValueSource(strings = {"kserve-generated-pd.yaml", "kserve-generated-disagg.yaml"})
  void kserveGeneratedPdRunsPrefillForEveryRequest(String file) {
    Router r = router(file, pdPool());
    for (int i = 0; i < 10; i++) {
      RoutingDecision d = r.route(completion(text(i, 40)));
      assertThat(d.primary().label(Endpoint.ROLE_LABEL)).isEqualTo("decode");
      assertThat(PdProfileHandler.prefillEndpoint(d)).extracting(Endpoint::id)
          .isEqualTo("10.0.1.1:8000");
    }
  }

  // ----------------------------------------------------------------- precise (KV events)

  static int[] tokens(int seed, int n) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = seed * 100_000 + i;
    }
    return t;
  }

  static InferenceRequest tokenRequest(int[] tokens) {
    return InferenceRequest.builder().model(MODEL).tokenIds(tokens).build();
  }

  @Test
  void preciseWithDataLayerBindsTheNamedSocketAndReadsEventsAtItsBlockSize() throws Exception {
    Router r = router("llmd-precise-datalayer.yaml", pool(3));
    PrecisePrefixCacheScorer scorer =
        (PrecisePrefixCacheScorer) r.config().plugins().get("precise-prefix-cache-scorer");
    assertThat(scorer.index().defaultBlockSize()).isEqualTo(64);
    assertThat(scorer.tokenizer()).as("lent by token-producer")
        .isSameAs(((TokenProducer) r.config().plugins().get("token-producer")).tokenizer());
    assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w).contains("hashSeed"));
    String bound = scorer.boundEventsEndpoint();
    assertThat(bound).as("central socket from kvEventsConfig.zmqEndpoint").startsWith("tcp://");
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), 0, 0.1);
    }
    int[] prompt = tokens(1, 64 * 3 + 10);
    try (ZContext ctx = new ZContext(1)) {
      ZMQ.Socket pub = KvEventSubscriberIntegrationTest.connectedPublisher(ctx, bound);
      VllmEventEncoder enc = new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);
      KvEventBatch batch = KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(
          new long[] {11, 12, 13}, null, Arrays.copyOf(prompt, 64 * 3), 64)));
      KvEventSubscriberIntegrationTest.publish(pub, "kv@" + id(2) + "@" + MODEL, 0,
          enc.encode(batch));
      KvEventSubscriberIntegrationTest.await(() -> scorer.index().blockCount(id(2)) == 3,
          "three 64-token blocks indexed for " + id(2));
      pub.close();
    }
    for (int i = 0; i < 5; i++) {
      assertThat(r.route(tokenRequest(prompt)).primary().id()).isEqualTo(id(2));
    }
  }

  /**
   * llm-d runs both sources when a kvEventsConfig has both: a subscriber per discovered pod on
   * {@code podDiscoveryConfig.socketPort}, and the global socket bound at {@code zmqEndpoint}
   * (llm-d-inference-scheduler's precise scorer starts its "local-subscriber" whenever
   * zmqEndpoint is set, independently of discoverPods). Events from an engine that publishes on
   * its own port and from one that connects to the bound socket both reach the index. A file
   * that leaves discoverPods out gets the same: llm-d reads it over a default of true.
   */
  @ParameterizedTest
  @ValueSource(strings = {"discoverPods: true", "# discoverPods left out: true in llm-d"})
  void discoverPodsWithAZmqEndpointFollowsEachPodAndBindsTheSocketToo(String discover)
      throws Exception {
    try (ZContext ctx = new ZContext(1)) {
      ZMQ.Socket podPub = ctx.createSocket(org.zeromq.SocketType.XPUB);
      podPub.setLinger(0);
      podPub.bind("tcp://127.0.0.1:*");
      int podPort = KvEventSubscriberIntegrationTest.port(podPub);
      String yaml = """
          plugins:
          - type: precise-prefix-cache-scorer
            parameters:
              tokenProcessorConfig: {blockSize: 16}
              kvEventsConfig:
                %s
                podDiscoveryConfig: {socketPort: %d}
                zmqEndpoint: "tcp://127.0.0.1:*"
          schedulingProfiles:
          - name: default
            plugins:
            - pluginRef: precise-prefix-cache-scorer
          """.formatted(discover, podPort);
      List<Endpoint> eps = List.of(Endpoint.of("127.0.0.1", 8000), Endpoint.of("127.0.0.2", 8000));
      Router r = Router.builder().endpoints(eps).configYaml(yaml, "both.yaml").ticker(now::get)
          .build();
      routers.add(r);
      PrecisePrefixCacheScorer scorer =
          (PrecisePrefixCacheScorer) r.config().plugins().get("precise-prefix-cache-scorer");
      String bound = scorer.boundEventsEndpoint();
      assertThat(bound).as("the socket zmqEndpoint names is bound").isNotNull();
      VllmEventEncoder enc = new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);
      // the pod's publisher: the per-endpoint subscriber connected to 127.0.0.1:<socketPort>
      podPub.setReceiveTimeOut(20_000);
      assertThat(podPub.recv()).as("subscription of the per-pod subscriber").isNotNull();
      KvEventSubscriberIntegrationTest.publish(podPub, "kv@127.0.0.1:8000@" + MODEL, 0,
          enc.encode(KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(new long[] {1, 2}, null,
              tokens(3, 32), 16)))));
      KvEventSubscriberIntegrationTest.await(
          () -> scorer.index().blockCount("127.0.0.1:8000") == 2, "the pod's blocks indexed");
      // an engine that connects to the bound socket instead
      ZMQ.Socket central = KvEventSubscriberIntegrationTest.connectedPublisher(ctx, bound);
      KvEventSubscriberIntegrationTest.publish(central, "kv@127.0.0.2:8000@" + MODEL, 0,
          enc.encode(KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(new long[] {7, 8, 9},
              null, tokens(4, 48), 16)))));
      KvEventSubscriberIntegrationTest.await(
          () -> scorer.index().blockCount("127.0.0.2:8000") == 3,
          "the blocks published to the bound socket indexed");
      central.close();
      podPub.close();
    }
  }

  /**
   * llm-d-kv-cache's documented auto-discovery example names
   * {@code podDiscoveryConfig.podLabelSelector} and {@code podNamespace}. llm-d's precise scorer
   * decodes both and reads neither (only llm-d-kv-cache's own pod reconciler watches Kubernetes
   * with them): it follows every endpoint of its pool on {@code socketPort}. The file loads, an
   * endpoint without the selector's label is followed all the same, and each field gets a
   * notice saying it has no effect.
   */
  @Test
  void podLabelSelectorAndPodNamespaceLoadAndEveryEndpointIsFollowedAsInLlmd() throws Exception {
    try (ZContext ctx = new ZContext(1)) {
      ZMQ.Socket podPub = ctx.createSocket(org.zeromq.SocketType.XPUB);
      podPub.setLinger(0);
      podPub.bind("tcp://127.0.0.1:*");
      String yaml = """
          plugins:
          - type: precise-prefix-cache-scorer
            parameters:
              tokenProcessorConfig: {blockSize: 16}
              kvEventsConfig:
                topicFilter: "kv@"
                concurrency: 8
                discoverPods: true
                podDiscoveryConfig:
                  podLabelSelector: "llm-d.ai/inference-serving=true"
                  podNamespace: "inference"
                  socketPort: %d
          schedulingProfiles:
          - name: default
            plugins:
            - pluginRef: precise-prefix-cache-scorer
          """.formatted(KvEventSubscriberIntegrationTest.port(podPub));
      Router r = Router.builder().endpoints(List.of(Endpoint.of("127.0.0.1", 8000)))
          .configYaml(yaml, "pod-discovery.yaml").ticker(now::get).build();
      routers.add(r);
      assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
          .contains("podDiscoveryConfig.podLabelSelector").contains("no effect"));
      assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
          .contains("podDiscoveryConfig.podNamespace").contains("no effect"));
      PrecisePrefixCacheScorer scorer =
          (PrecisePrefixCacheScorer) r.config().plugins().get("precise-prefix-cache-scorer");
      podPub.setReceiveTimeOut(20_000);
      assertThat(podPub.recv()).as("subscription of the endpoint's subscriber, though the"
          + " endpoint has no llm-d.ai/inference-serving label").isNotNull();
      KvEventSubscriberIntegrationTest.publish(podPub, "kv@127.0.0.1:8000@" + MODEL, 0,
          new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false).encode(
              KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(new long[] {1, 2}, null,
                  tokens(5, 32), 16)))));
      KvEventSubscriberIntegrationTest.await(
          () -> scorer.index().blockCount("127.0.0.1:8000") == 2, "the endpoint's blocks indexed");
      podPub.close();
    }
  }

  /**
   * {@code kvEventsConfig.engineType: sglang} (llm-d-kv-cache's SGLang adapter) loads, and
   * events in SGLang's shape reach the index: SGLang publishes vLLM's positional msgpack arrays
   * with its trailing optional fields left out (BlockStored of five elements, BlockRemoved of
   * two, a batch without a data-parallel rank), as llm-d-kv-cache's SGLang adapter reads them.
   */
  @Test
  void engineTypeSglangLoadsAndItsShorterEventsReachTheIndex() throws Exception {
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            tokenProcessorConfig: {blockSize: 16}
            kvEventsConfig:
              engineType: sglang
              discoverPods: false
              zmqEndpoint: "tcp://127.0.0.1:*"
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """;
    Router r = Router.builder().endpoints(List.of(Endpoint.of("127.0.0.1", 8000)))
        .configYaml(yaml, "sglang.yaml").ticker(now::get).build();
    routers.add(r);
    PrecisePrefixCacheScorer scorer =
        (PrecisePrefixCacheScorer) r.config().plugins().get("precise-prefix-cache-scorer");
    String topic = "kv@127.0.0.1:8000@" + MODEL;
    try (ZContext ctx = new ZContext(1);
        org.msgpack.core.MessageBufferPacker stored =
            org.msgpack.core.MessagePack.newDefaultBufferPacker();
        org.msgpack.core.MessageBufferPacker removed =
            org.msgpack.core.MessagePack.newDefaultBufferPacker()) {
      ZMQ.Socket pub = KvEventSubscriberIntegrationTest.connectedPublisher(ctx,
          scorer.boundEventsEndpoint());
      int[] tokens = tokens(6, 32);
      // [ts, [["BlockStored", [1, 2], nil, token_ids, 16]]]
      stored.packArrayHeader(2).packDouble(1.0).packArrayHeader(1).packArrayHeader(5)
          .packString("BlockStored").packArrayHeader(2).packLong(1).packLong(2).packNil()
          .packArrayHeader(tokens.length);
      for (int t : tokens) {
        stored.packInt(t);
      }
      stored.packInt(16);
      KvEventSubscriberIntegrationTest.publish(pub, topic, 0, stored.toByteArray());
      KvEventSubscriberIntegrationTest.await(
          () -> scorer.index().blockCount("127.0.0.1:8000") == 2, "SGLang's two blocks indexed");
      // [ts, [["BlockRemoved", [2]]]]
      removed.packArrayHeader(2).packDouble(2.0).packArrayHeader(1).packArrayHeader(2)
          .packString("BlockRemoved").packArrayHeader(1).packLong(2);
      KvEventSubscriberIntegrationTest.publish(pub, topic, 1, removed.toByteArray());
      KvEventSubscriberIntegrationTest.await(
          () -> scorer.index().blockCount("127.0.0.1:8000") == 1, "SGLang's removal applied");
      pub.close();
    }
  }

  /**
   * An {@code engineType} llm-d-kv-cache has no adapter for is refused naming the field and the
   * value, as llm-d-kv-cache's {@code engineadapter.NewAdapter} refuses it.
   */
  @ParameterizedTest
  @ValueSource(strings = {"trtllm", "SGLang"})
  void anEngineTypeWithoutAnAdapterIsRefusedByName(String engine) {
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            kvEventsConfig: {engineType: %s}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """.formatted(engine);
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Router.builder()
            .endpoints(pool(1)).configYaml(yaml, "engine.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("'kvEventsConfig'").hasMessageContaining("engineType")
        .hasMessageContaining("'" + engine + "'").hasMessageContaining("vllm")
        .hasMessageContaining("sglang").hasMessageNotContaining("unknown field");
  }

  /**
   * An explicit {@code podDiscoveryConfig: null} (or {@code ~}, or no value) follows no endpoint
   * in llm-d, whatever {@code discoverPods} says: Go's JSON decoder sets the pointer to nil, and
   * the precise scorer subscribes to pods only when it is not nil. With a {@code zmqEndpoint}
   * only that socket is bound, and the engines that connect to it are heard; the file gets a
   * notice saying no endpoint is followed.
   */
  @ParameterizedTest
  @ValueSource(strings = {"null", "~", "", "null\n      discoverPods: true"})
  void anExplicitlyNullPodDiscoveryConfigFollowsNoEndpointAsInLlmd(String value) throws Exception {
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            tokenProcessorConfig: {blockSize: 16}
            kvEventsConfig:
              zmqEndpoint: "tcp://127.0.0.1:*"
              podDiscoveryConfig: %s
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """.formatted(value);
    Router r = Router.builder().endpoints(List.of(Endpoint.of("127.0.0.1", 8000)))
        .configYaml(yaml, "no-discovery.yaml").ticker(now::get).build();
    routers.add(r);
    assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w).contains("'kvEventsConfig'")
        .contains("podDiscoveryConfig is null").contains("follows no endpoint"));
    PrecisePrefixCacheScorer scorer =
        (PrecisePrefixCacheScorer) r.config().plugins().get("precise-prefix-cache-scorer");
    assertThat(scorer.followsEachEndpoint()).as("a subscription to each endpoint").isFalse();
    try (ZContext ctx = new ZContext(1)) {
      ZMQ.Socket pub = KvEventSubscriberIntegrationTest.connectedPublisher(ctx,
          scorer.boundEventsEndpoint());
      KvEventSubscriberIntegrationTest.publish(pub, "kv@127.0.0.1:8000@" + MODEL, 0,
          new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false).encode(
              KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(new long[] {1, 2}, null,
                  tokens(7, 32), 16)))));
      KvEventSubscriberIntegrationTest.await(
          () -> scorer.index().blockCount("127.0.0.1:8000") == 2,
          "the blocks published to the bound socket indexed");
      pub.close();
    }
  }

  /**
   * {@code podDiscoveryConfig: null} without a {@code zmqEndpoint} hears nothing in llm-d (no pod
   * is followed and no socket is bound); epp4j refuses it, naming both fields, as it refuses
   * {@code discoverPods: false} without a {@code zmqEndpoint}.
   */
  @Test
  void anExplicitlyNullPodDiscoveryConfigWithoutAZmqEndpointIsRefused() {
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            kvEventsConfig:
              topicFilter: "kv@"
              podDiscoveryConfig: null
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """;
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Router.builder()
            .endpoints(pool(1)).configYaml(yaml, "deaf.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("'kvEventsConfig'").hasMessageContaining("podDiscoveryConfig")
        .hasMessageContaining("zmqEndpoint").hasMessageContaining("no events would be heard");
  }

  /**
   * A {@code zmqEndpoint} that cannot be bound is refused naming the field the file wrote,
   * {@code kvEventsConfig}'s {@code zmqEndpoint}, not epp4j's own {@code kvEvents.bindAddress},
   * whichever way {@code discoverPods} is set.
   */
  @ParameterizedTest
  @ValueSource(strings = {"", "discoverPods: false", "discoverPods: true"})
  void aZmqEndpointThatCannotBeBoundIsRefusedNamingZmqEndpoint(String discover) {
    try (ZContext ctx = new ZContext(1)) {
      ZMQ.Socket taken = ctx.createSocket(org.zeromq.SocketType.PULL);
      taken.setLinger(0);
      taken.bind("tcp://127.0.0.1:*");
      String address = taken.getLastEndpoint();
      String yaml = """
          plugins:
          - type: precise-prefix-cache-scorer
            parameters:
              kvEventsConfig:
                zmqEndpoint: "%s"
                %s
          schedulingProfiles:
          - name: default
            plugins:
            - pluginRef: precise-prefix-cache-scorer
          """.formatted(address, discover);
      Throwable t = org.assertj.core.api.Assertions.catchThrowable(() -> Router.builder()
          .endpoints(pool(1)).configYaml(yaml, "taken.yaml").build());
      assertThat(t).as("building a router whose zmqEndpoint is taken")
          .isInstanceOf(ConfigException.class);
      assertThat(t.getMessage()).contains("'kvEventsConfig'").contains("'zmqEndpoint'")
          .contains(address).doesNotContain("bindAddress").doesNotContain("'kvEvents'");
      taken.close();
    }
  }

  @Test
  void cacheTrackingModeIsPreciseScoringFromTheSameParameters() {
    AtomicLong t = now;
    KvBlockIndex index = KvBlockIndex.builder().ticker(t::get).defaultBlockSize(64).build();
    Router r = Router.builder().endpoints(pool(3)).service(KvBlockIndex.class, index)
        .configFile(compat("llmd-precise-cache-tracking.yaml")).ticker(t::get).randomSeed(3)
        .build();
    routers.add(r);
    assertThat(r.config().plugins().get("prefix-cache-scorer"))
        .isInstanceOf(PrecisePrefixCacheScorer.class);
    assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w).contains("enableMetrics"));
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), 0, 0.1);
    }
    int[] prompt = tokens(2, 64 * 4);
    index.apply(id(3), KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(
        new long[] {21, 22, 23}, null, Arrays.copyOf(prompt, 64 * 3), 64))));
    assertThat(r.route(tokenRequest(prompt)).primary().id()).isEqualTo(id(3));
  }

  @Test
  void preciseParametersThatCannotBeHonouredAreRefusedByName() {
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            blockSizeTokens: 16
            tokenProcessorConfig: {blockSize: 64}
            indexerConfig:
              kvBlockIndexConfig:
                redisConfig: {address: "redis://127.0.0.1:6379"}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """;
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Router.builder()
            .endpoints(pool(1)).configYaml(yaml, "refused.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("blockSizeTokens")
        .hasMessageContaining("redisConfig");
  }

  @Test
  void tokenProducerSettingsThatCannotApplyAreRefusedByName() {
    String yaml = """
        plugins:
        - type: tokenizer
          parameters:
            udsTokenizerConfig: {socketFile: /tmp/tokenizer/tokenizer-uds.socket}
            vllm: {http: "http://127.0.0.1:1", retries: 3}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: max-score-picker
        """;
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Router.builder()
            .endpoints(pool(1)).configYaml(yaml, "tok.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("'modelName' is required")
        .hasMessageContaining("'udsTokenizerConfig' is not supported")
        .hasMessageContaining("unknown field 'retries'");
  }

  // ------------------------------------------------------------------- session affinity

  @Test
  void sessionAffinityHoldsASessionUntilItsCookieMaxAgeThenRebalances() {
    Router r = router("llmd-session-affinity.yaml", pool(3));
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), 0, 0.1);
    }
    InferenceRequest turn = InferenceRequest.builder().model(MODEL).prompt(text(4, 64))
        .sessionKey("dialog-1").build();
    String home = r.route(turn).primary().id();
    // the home gets the longest queue; weight 100 on the binding keeps the session there
    metrics(r, home, 100, 0.1);
    for (int s = 0; s < 50; s += 10) {
      now.addAndGet(10_000_000_000L);
      for (int i = 1; i <= 3; i++) {
        metrics(r, id(i), id(i).equals(home) ? 100 : 0, 0.1);
      }
      assertThat(r.route(turn).primary().id()).as("at %d s", s + 10).isEqualTo(home);
    }
    // 61 s after the binding was made it has expired although the session stayed busy (the
    // idle TTL of 300 s never ran out): load decides again
    now.addAndGet(11_000_000_000L);
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), id(i).equals(home) ? 100 : 0, 0.1);
    }
    InferenceRequest fresh = InferenceRequest.builder().model(MODEL).prompt(text(5, 64))
        .sessionKey("dialog-1").build();
    assertThat(r.route(fresh).primary().id()).isNotEqualTo(home);
  }

  // -------------------------------------------------------------------- data parallel

  @Test
  void dataParallelRanksAreEndpointsAndAPromptReturnsToItsRank() {
    List<Endpoint> ranks = List.of(Endpoint.of("10.0.3.1", 8000), Endpoint.of("10.0.3.1", 8001),
        Endpoint.of("10.0.3.1", 8002), Endpoint.of("10.0.3.1", 8003));
    Router r = router("llmd-data-parallel.yaml", ranks);
    assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w).contains("primaryPort")
        .contains("has no effect"));
    String prompt = text(6, 400);
    String rank = r.route(completion(prompt)).primary().id();
    for (int i = 0; i < 5; i++) {
      // the rank's own port, not the primary port: the gateway forwards there directly
      assertThat(r.route(completion(prompt)).primary().id()).isEqualTo(rank);
    }
  }

  @Test
  void handlersRefuseProfilesTheyCannotRunWhenTheFileLoads() {
    String twoProfiles = """
        plugins:
        - type: data-parallel-profile-handler
        - type: max-score-picker
        schedulingProfiles:
        - {name: a, plugins: [{pluginRef: max-score-picker}]}
        - {name: b, plugins: [{pluginRef: max-score-picker}]}
        """;
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Router.builder()
            .endpoints(pool(1)).configYaml(twoProfiles, "dp.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("needs exactly one scheduling profile, got 2");
    String noDecode = """
        plugins:
        - type: disagg-profile-handler
        - type: max-score-picker
        schedulingProfiles:
        - {name: prefill, plugins: [{pluginRef: max-score-picker}]}
        - {name: main, plugins: [{pluginRef: max-score-picker}]}
        """;
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Router.builder()
            .endpoints(pool(1)).configYaml(noDecode, "pd.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("needs a profile named 'decode'");
  }

  // ------------------------------------- header affinity, header profiles, endpoint attributes

  Router routerYaml(String yaml, List<Endpoint> pool) {
    Router r = Router.builder().endpoints(pool).configYaml(yaml, "upstream.yaml").ticker(now::get)
        .randomSeed(7).build();
    routers.add(r);
    return r;
  }

  static InferenceRequest withHeaders(Map<String, String> headers) {
    return InferenceRequest.builder().model(MODEL).prompt("p").headers(headers).build();
  }

  /** llm-d's README example: two header-to-label preferences, weighted 3 and 1. */
  @Test
  void headerLabelAffinityWeighsTheSliceAboveTheZoneAsTheReadmeExample() {
    Router r = routerYaml("""
        plugins:
        - type: header-label-affinity-scorer
          name: slice-affinity
          parameters:
            headerName: x-disagg-slice
            labelKey: disaggregatedset.x-k8s.io/slice
        - type: header-label-affinity-scorer
          name: zone-affinity
          parameters:
            headerName: x-preferred-zone
            labelKey: topology.kubernetes.io/zone
        - type: weighted-random-picker
          name: picker

        schedulingProfiles:
        - name: decode
          plugins:
          - pluginRef: slice-affinity
            weight: 3
          - pluginRef: zone-affinity
            weight: 1
          - pluginRef: picker
        """, List.of(
            Endpoint.of("10.0.0.1", 8000, Map.of("disaggregatedset.x-k8s.io/slice", "0",
                "topology.kubernetes.io/zone", "a")),
            Endpoint.of("10.0.0.2", 8000, Map.of("disaggregatedset.x-k8s.io/slice", "1",
                "topology.kubernetes.io/zone", "a")),
            Endpoint.of("10.0.0.3", 8000, Map.of("disaggregatedset.x-k8s.io/slice", "1",
                "topology.kubernetes.io/zone", "b"))));
    Map<String, Integer> seen = new HashMap<>();
    for (int i = 0; i < 400; i++) {
      RoutingDecision d = r.route(withHeaders(Map.of("x-disagg-slice", "1",
          "x-preferred-zone", "b")));
      seen.merge(d.primary().id(), 1, Integer::sum);
      d.onComplete(io.epp4j.api.Usage.NONE);
    }
    // scores 0, 3 and 4: the endpoint of the other slice and zone is never picked, and the one
    // matching both is picked more often than the one matching the slice alone
    assertThat(seen).doesNotContainKey(id(1));
    assertThat(seen.get(id(3))).isGreaterThan(seen.get(id(2)));
    // without the headers every score is 0 and the picker chooses among all three
    Set<String> any = new java.util.HashSet<>();
    for (int i = 0; i < 60; i++) {
      RoutingDecision d = r.route(withHeaders(Map.of()));
      any.add(d.primary().id());
      d.onComplete(io.epp4j.api.Usage.NONE);
    }
    assertThat(any).containsExactlyInAnyOrder(id(1), id(2), id(3));
  }

  /**
   * llm-d's README example, with its encode stage left out (epp4j refuses the multimodal
   * encode-filter): the EPP-Profile header picks the one profile that runs.
   */
  @Test
  void headerProfileHandlerRunsTheProfileTheHeaderNamesAsTheReadmeExample() {
    Router r = routerYaml("""
        plugins:
        - type: prefill-filter
        - type: decode-filter
        - type: header-profile-handler
        schedulingProfiles:
        - name: prefill
          plugins:
          - pluginRef: prefill-filter
        - name: decode
          plugins:
          - pluginRef: decode-filter
        """, List.of(Endpoint.parseWithRole("10.0.0.1:8000=prefill"),
            Endpoint.parseWithRole("10.0.0.2:8000=decode")));
    RoutingDecision prefill = r.route(withHeaders(Map.of("EPP-Profile", "prefill")));
    assertThat(prefill.primaryProfile()).isEqualTo("prefill");
    assertThat(prefill.profileResults()).containsOnlyKeys("prefill");
    assertThat(prefill.primary().id()).isEqualTo(id(1));
    // no header, e.g. GET /models: the default profile, decode
    RoutingDecision models = r.routeHeaders(Map.of());
    assertThat(models.primaryProfile()).isEqualTo("decode");
    assertThat(models.primary().id()).isEqualTo(id(2));
    // a stage the file does not configure: nothing runs, and the rejection says why
    RoutingDecision encode = r.route(withHeaders(Map.of("epp-profile", "encode")));
    assertThat(encode.isRouted()).isFalse();
    assertThat(encode.rejection().reason()).isEqualTo(Rejection.Reason.INVALID_REQUEST);
    assertThat(encode.rejection().message()).contains("'encode'").contains("[prefill, decode]");
  }

  static final String VLLM_RUNNING_AND_KV = """
      - type: core-metrics-extractor
        parameters:
          engineConfigs:
          - name: vllm
            queuedRequestsSpec: vllm:num_requests_waiting
            runningRequestsSpec: vllm:num_requests_running
            kvUsageSpec: vllm:kv_cache_usage_perc
            loraSpec: vllm:lora_requests_info
            cacheInfoSpec: vllm:cache_config_info
            customMetrics:
            - attributeKey: num_requests_running
              metricSpec: vllm:num_requests_running
            - attributeKey: custom.queue_depth
              metricSpec: vllm:num_requests_waiting
            - attributeKey: custom.kv_cache_utilization
              metricSpec: vllm:kv_cache_usage_perc
      """;

  static final String ATTRIBUTE_FILTER = """
      plugins:
        - type: endpoint-attribute-filter
          name: drop-loaded-endpoints
          parameters:
            attribute: "num_requests_running"
            onMissing: "Pass"
            fallbackOnEmpty: true
            algorithm:
              type: "threshold"
              threshold:
                operator: "LessThan"
                value: 10
      schedulingProfiles:
        - name: default
          plugins:
            - pluginRef: drop-loaded-endpoints
      """;

  /**
   * llm-d's README example of the filter, with the core-metrics-extractor customMetrics entry
   * that publishes its attribute (without one, upstream reads the attribute on no endpoint).
   */
  @Test
  void endpointAttributeFilterDropsLoadedEndpointsAsTheReadmeExample() {
    String yaml = ATTRIBUTE_FILTER.replace("schedulingProfiles:",
        VLLM_RUNNING_AND_KV.indent(2) + "schedulingProfiles:");
    Router r = routerYaml(yaml, pool(3));
    metrics(r, id(1), EndpointMetrics.builder().runningRequests(12));
    metrics(r, id(2), EndpointMetrics.builder().runningRequests(3));
    // 10.0.0.3 is never scraped: it lacks the attribute and onMissing: Pass keeps it
    Map<String, Integer> seen = new HashMap<>();
    for (int i = 0; i < 60; i++) {
      RoutingDecision d = r.route(completion("p" + i));
      seen.merge(d.primary().id(), 1, Integer::sum);
      d.onComplete(io.epp4j.api.Usage.NONE);
    }
    assertThat(seen).containsOnlyKeys(id(2), id(3));
    // every endpoint loaded: fallbackOnEmpty gives all of them back instead of a 503
    metrics(r, id(2), EndpointMetrics.builder().runningRequests(30));
    metrics(r, id(3), EndpointMetrics.builder().runningRequests(10));
    RoutingDecision loaded = r.route(completion("loaded"));
    assertThat(loaded.isRouted()).isTrue();
    // the README's file alone publishes no attribute: refused, naming it
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> routerYaml(ATTRIBUTE_FILTER,
            pool(1)))
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("parameter 'attribute' 'num_requests_running' is published by no"
            + " customMetrics entry");
  }

  /** llm-d's README examples of the scorer: queue depth adaptively, KV usage in [0, 1]. */
  @Test
  void endpointAttributeScorerPrefersTheShortQueueAndTheEmptierCacheAsTheReadmeExamples() {
    Router r = routerYaml("""
        plugins:
          - type: endpoint-attribute-scorer
            name: queue-depth-attribute
            parameters:
              attributeKey: "custom.queue_depth"
              algorithm:
                type: "linear_lower_is_better"
          - type: endpoint-attribute-scorer
            name: kv-cache-attribute
            parameters:
              attributeKey: "custom.kv_cache_utilization"
              algorithm:
                type: "linear_lower_is_better"
                normalization:
                  fixedRange:
                    min: 0.0
                    max: 1.0
        %s
        schedulingProfiles:
          - name: default
            plugins:
              - pluginRef: queue-depth-attribute
                weight: 1
              - pluginRef: kv-cache-attribute
                weight: 1
        """.formatted(VLLM_RUNNING_AND_KV.indent(2).stripTrailing()), pool(3));
    // queue scores 1, 0.5, 0; KV scores 0.1, 0.9, 0.5: totals 1.1, 1.4, 0.5
    metrics(r, id(1), 0, 0.9);
    metrics(r, id(2), 5, 0.1);
    metrics(r, id(3), 10, 0.5);
    for (int i = 0; i < 5; i++) {
      RoutingDecision d = r.route(completion("q" + i));
      assertThat(d.primary().id()).isEqualTo(id(2));
      d.onComplete(io.epp4j.api.Usage.NONE);
    }
    // an endpoint never scraped scores 0 on both and does not widen the queue range
    Router fresh = routerYaml("""
        plugins:
        - type: endpoint-attribute-scorer
          parameters:
            attributeKey: custom.queue_depth
            algorithm: {type: linear_lower_is_better}
        %s
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: endpoint-attribute-scorer
        """.formatted(VLLM_RUNNING_AND_KV.stripTrailing()), pool(2));
    metrics(fresh, id(1), 7, 0.0);
    for (int i = 0; i < 5; i++) {
      RoutingDecision d = fresh.route(completion("f" + i));
      assertThat(d.primary().id()).isEqualTo(id(1));
      d.onComplete(io.epp4j.api.Usage.NONE);
    }
  }

  // ------------------------------------------------------------------ admission control

  @Test
  void probabilisticAdmissionShedsOnlySheddableRequestsAndOnlyUnderLoad() {
    Router r = router("llmd-admission.yaml", pool(3));
    InferenceRequest sheddable = InferenceRequest.builder().model(MODEL).prompt("x")
        .priority(-1).build();
    InferenceRequest normal = InferenceRequest.builder().model(MODEL).prompt("x").build();
    // queue 4 of 5 on every endpoint: saturation 0.8, refusal probability min(0.8^5 x 300, 1)
    // = 1; the detector's thresholds keep the router's own rule out of it (0.8 < 1 anyway)
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), 4, 0.1);
    }
    for (int i = 0; i < 20; i++) {
      assertThat(r.route(sheddable).rejection()).extracting(Rejection::reason)
          .isEqualTo(Rejection.Reason.SHED);
      assertThat(r.route(normal).isRouted()).isTrue();
    }
    // queue 0, KV 0.1: saturation 0.125, probability 0.125^5 x 300 = 0.0092; 200 draws refuse
    // 1.8 on average, 15 or more has probability < 1e-9
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), 0, 0.1);
    }
    int refused = 0;
    for (int i = 0; i < 200; i++) {
      RoutingDecision d = r.route(sheddable);
      if (!d.isRouted()) {
        refused++;
      } else {
        d.onComplete(io.epp4j.api.Usage.NONE);
      }
    }
    assertThat(refused).isLessThan(15);
  }

  // ------------------------------------------------------------------ KServe, generated

  @Test
  void kserveGeneratedConfigRunsTheEppDefaultWithAnImpliedPicker() {
    Router r = router("kserve-generated.yaml", pool(3));
    metrics(r, id(1), 5, 0.9);
    metrics(r, id(2), 0, 0.2);
    metrics(r, id(3), 5, 0.2);
    // nothing cached yet: queue and KV both favour 2
    String prompt = text(7, 640);
    assertThat(r.route(completion(prompt)).primary().id()).isEqualTo(id(2));
    // now 2 has the prompt and a queue: prefix 3 outweighs queue 2 at equal KV
    metrics(r, id(2), 5, 0.2);
    assertThat(r.route(completion(prompt)).primary().id()).isEqualTo(id(2));
  }

  // ------------------------------------------------------------------------------ reloads

  @Test
  void reloadingTheSameFilesKeepsTheirPluginsWorking() throws Exception {
    Router pd = router("llmd-pd-disagg.yaml", pdPool());
    assertThat(pd.reconfigure(compat("llmd-pd-disagg.yaml")).errors()).isEmpty();
    assertThat(PdProfileHandler.prefillEndpoint(pd.route(completion(text(8, 800)))))
        .as("the reloaded handler still finds its decider").isNotNull();

    Router gie = router("gie-1.x-defaults.yaml", pool(2));
    assertThat(gie.reconfigure(compat("gie-1.x-defaults.yaml")).errors()).isEmpty();
    metrics(gie, id(1), 8, 0.1);
    metrics(gie, id(2), 8, 0.1);
    assertThat(gie.poolSaturation()).as("the detector's threshold of 10 after the reload")
        .isCloseTo(0.8, org.assertj.core.data.Offset.offset(1e-9));

    Router tree = router("gie-0.5-decision-tree.yaml", pool(3));
    assertThat(tree.reconfigure(compat("gie-0.5-decision-tree.yaml")).errors()).isEmpty();
  }

  @Test
  void aDeciderChangedByAReloadIsTheOneTheKeptHandlerUses() throws Exception {
    Router r = router("llmd-pd-disagg.yaml", pdPool());
    String changed = java.nio.file.Files.readString(compat("llmd-pd-disagg.yaml"))
        .replace("nonCachedTokens: 16", "nonCachedTokens: 100000");
    assertThat(r.reconfigure(changed, "changed.yaml").errors()).isEmpty();
    // 200 uncached tokens are now far below the threshold: no prefill
    assertThat(PdProfileHandler.prefillEndpoint(r.route(completion(text(9, 800))))).isNull();
  }

  // -------------------------------------------- llm-d's producers: the index split off the scorer

  @Test
  void anApproxProducerListedLastIsTheIndexThePdScorersAndDeciderRead() {
    Router r = router("llmd-router-approx-producer-pd.yaml", pdPool());
    assertThat(r.config().plugins().get("approx-prefix-cache-producer")).hasToString(
        "approx-prefix-cache-producer(blockSizeTokens=64)");
    assertThat(r.config().plugins().get("prefix-cache-scorer")).hasToString(
        "prefix-cache-scorer(reads approx-prefix-cache-producer(blockSizeTokens=64))");
    assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
        .contains("prefixMatchInfoProducerName").contains("has no effect"));
    // 200 tokens, none cached: at least the decider's 64 uncached, so prefill runs elsewhere
    String prompt = text(3, 800);
    RoutingDecision first = r.route(completion(prompt));
    assertThat(PdProfileHandler.prefillEndpoint(first)).isNotNull();
    first.onComplete(io.epp4j.api.Usage.NONE);
    // the producer recorded the decode endpoint: three 64-token blocks there, 8 tokens uncached
    RoutingDecision second = r.route(completion(prompt));
    assertThat(second.primary()).isEqualTo(first.primary());
    assertThat(PdProfileHandler.prefillEndpoint(second)).isNull();
  }

  @Test
  void aNamedApproxProducerIsReadByTheScorerAndItsSmallBlockSizeIsRaisedTo64() {
    Router r = router("llmd-router-approx-producer.yaml", pool(3));
    assertThat(r.config().plugins().get("approx")).hasToString(
        "approx-prefix-cache-producer(blockSizeTokens=64)");
    assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
        .contains("blockSizeTokens").contains("raised to 64"));
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), 0, 0.1);
    }
    String prompt = text(4, 1024);
    String first = r.route(completion(prompt)).primary().id();
    // two waiting requests there: the prefix (3 x 1) still outweighs the queue (1 x 1)
    metrics(r, first, 2, 0.1);
    for (int i = 0; i < 5; i++) {
      assertThat(r.route(completion(prompt)).primary().id()).isEqualTo(first);
    }
    assertThat(r.route(completion(text(5, 1024))).primary().id()).isNotEqualTo(first);
  }

  @Test
  void aPreciseProducerIsReadByThePrefixScorerThatNamesIt() {
    KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).defaultBlockSize(64).build();
    Router r = Router.builder().endpoints(pool(3)).service(KvBlockIndex.class, index)
        .configFile(compat("llmd-router-precise-producer.yaml")).ticker(now::get).randomSeed(3)
        .build();
    routers.add(r);
    PrecisePrefixCacheScorer producer =
        (PrecisePrefixCacheScorer) r.config().plugins().get("precise-prefix-cache-producer");
    assertThat(producer.tokenizer()).as("lent by token-producer, listed before it")
        .isSameAs(((TokenProducer) r.config().plugins().get("token-producer")).tokenizer());
    for (int i = 1; i <= 3; i++) {
      metrics(r, id(i), 0, 0.1);
    }
    int[] prompt = tokens(6, 64 * 4);
    index.apply(id(2), KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(
        new long[] {61, 62, 63}, null, Arrays.copyOf(prompt, 64 * 3), 64))));
    for (int i = 0; i < 3; i++) {
      assertThat(r.route(tokenRequest(prompt)).primary().id()).isEqualTo(id(2));
    }
  }

  @Test
  void aScorerReadingAProducerRefusesIndexParametersAndANameThatIsNoProducer() {
    String yaml = """
        plugins:
        - type: approx-prefix-cache-producer
        - type: queue-scorer
        - type: prefix-cache-scorer
          parameters: {blockSizeTokens: 32}
        - name: other
          type: prefix-cache-scorer
          parameters: {prefixMatchInfoProducerName: nowhere}
        - name: third
          type: prefix-cache-scorer
          parameters: {prefixMatchInfoProducerName: max-score-picker}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: prefix-cache-scorer
          - pluginRef: other
          - pluginRef: third
          - pluginRef: max-score-picker
        """;
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Router.builder()
            .endpoints(pool(1)).configYaml(yaml, "producers.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("parameter 'blockSizeTokens' cannot be set here")
        .hasMessageContaining("names no plugin of the file (or one that refers back to this one): 'nowhere'")
        .hasMessageContaining("which produces no prefix matches");
  }

  @Test
  void aScorerThatPublishesNoPrefixHitsIsRefusedAsTheProducerOfEveryReader() {
    // a queue scorer is a scorer, but it publishes no prefix matches: the readers would route
    // without any (the P2P source never set, the affinity filter never sticky)
    String yaml = """
        plugins:
        - type: queue-scorer
        - type: prefix-cache-scorer
          parameters: {prefixMatchInfoProducerName: queue-scorer}
        - type: prefix-cache-affinity-filter
          parameters: {prefixMatchInfoProducerName: queue-scorer}
        - type: p2p-source-producer
          parameters: {prefixMatchInfoProducerName: queue-scorer}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: prefix-cache-affinity-filter
          - pluginRef: prefix-cache-scorer
          - pluginRef: max-score-picker
        """;
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Router.builder()
            .endpoints(pool(2)).configYaml(yaml, "producers.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("plugins[1]")
        .hasMessageContaining("plugins[2]")
        .hasMessageContaining("plugins[3]")
        .hasMessageContaining("names 'queue-scorer'");
    // the same readers over a real producer load
    Router r = Router.builder().endpoints(pool(2)).configYaml(yaml.replace(
        "- type: queue-scorer\n", "- type: queue-scorer\n- type: approx-prefix-cache-producer\n")
        .replace("prefixMatchInfoProducerName: queue-scorer",
            "prefixMatchInfoProducerName: approx-prefix-cache-producer"), "producers.yaml").build();
    r.close();
  }

  @Test
  void theTokenProducerTakesTheServersAddressAsVllmUrlOrVllmHttpButNotTwoDifferentOnes() {
    String yaml = """
        plugins:
        - type: token-producer
          parameters:
            modelName: m
            vllm: {url: "http://127.0.0.1:1", http: "http://127.0.0.1:2"}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: max-score-picker
        """;
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Router.builder()
            .endpoints(pool(1)).configYaml(yaml, "tok.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("name different servers");
    Router same = Router.builder().endpoints(pool(1))
        .configYaml(yaml.replace("127.0.0.1:2", "127.0.0.1:1"), "tok.yaml").build();
    routers.add(same);
    assertThat(same.config().plugins().get("token-producer")).isInstanceOf(TokenProducer.class);
  }

  @Test
  void thePdGuidesAffinityFilterKeepsAPromptOnThePrefillEndpointThatHoldsIt() {
    List<Endpoint> pool = List.of(
        Endpoint.of("10.0.1.1", 8000, Map.of(Endpoint.ROLE_LABEL, "prefill")),
        Endpoint.of("10.0.1.2", 8000, Map.of(Endpoint.ROLE_LABEL, "prefill")),
        Endpoint.of("10.0.1.3", 8000, Map.of(Endpoint.ROLE_LABEL, "prefill")),
        Endpoint.of("10.0.2.1", 8000, Map.of(Endpoint.ROLE_LABEL, "decode")));
    Router r = router("llmd-router-pd-affinity.yaml", pool);
    assertThat(r.config().warnings()).noneSatisfy(w -> assertThat(w).contains("not used"));
    Set<String> firstPrefills = new java.util.HashSet<>();
    for (int p = 0; p < 6; p++) {
      String prompt = text(20 + p, 2000);
      RoutingDecision first = r.route(completion(prompt));
      Endpoint prefill = PdProfileHandler.prefillEndpoint(first);
      assertThat(prefill).isNotNull();
      firstPrefills.add(prefill.id());
      first.onComplete(io.epp4j.api.Usage.NONE);
      // nothing in flight anywhere: without the filter the three prefill endpoints tie
      for (int i = 0; i < 4; i++) {
        RoutingDecision again = r.route(completion(prompt));
        assertThat(PdProfileHandler.prefillEndpoint(again)).isEqualTo(prefill);
        again.onComplete(io.epp4j.api.Usage.NONE);
      }
    }
    assertThat(firstPrefills).as("new prompts are not held anywhere: they spread")
        .hasSizeGreaterThan(1);
  }

  static final String PLAIN_PREFIX = """
      plugins:
      - type: queue-scorer
        parameters: {metricsStalenessMillis: %d}
      - type: prefix-cache-scorer
      - type: max-score-picker
      %s
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: queue-scorer
        - pluginRef: prefix-cache-scorer
        - pluginRef: max-score-picker
      """;

  /**
   * A prefix scorer asks for a producer by name; one that found none keeps its index through a
   * reload that changes another plugin, and is built anew to read a producer the reload adds.
   */
  @Test
  void aReloadKeepsAPrefixScorersIndexUnlessItBringsAProducerForIt() {
    Router r = Router.builder().endpoints(pool(2))
        .configYaml(PLAIN_PREFIX.formatted(2000, ""), "a.yaml").ticker(now::get).build();
    routers.add(r);
    Object index = r.config().plugins().get("prefix-cache-scorer");
    Object queue = r.config().plugins().get("queue-scorer");
    assertThat(r.reconfigure(PLAIN_PREFIX.formatted(3000, ""), "b.yaml").errors()).isEmpty();
    assertThat(r.config().plugins().get("queue-scorer")).as("changed: built anew")
        .isNotSameAs(queue);
    assertThat(r.config().plugins().get("prefix-cache-scorer")).as("kept").isSameAs(index);

    assertThat(r.reconfigure(PLAIN_PREFIX.formatted(3000,
        "- type: approx-prefix-cache-producer"), "c.yaml").errors()).isEmpty();
    assertThat(r.config().plugins().get("prefix-cache-scorer")).isNotSameAs(index)
        .hasToString("prefix-cache-scorer(reads approx-prefix-cache-producer(blockSizeTokens=64))");
  }

  /**
   * Upstream's producers are no scorers: a default profile leaves them out, and a profile that
   * names one passes over it.
   */
  @Test
  void aProducerIsNeverAScorerOfAProfile() {
    Router implied = Router.builder().endpoints(pool(2)).configYaml("""
        plugins:
        - type: prefix-cache-scorer
        - type: approx-prefix-cache-producer
        - type: max-score-picker
        """, "implied.yaml").build();
    routers.add(implied);
    assertThat(implied.config().profiles().get("default").scorers())
        .extracting(io.epp4j.core.SchedulingProfile.WeightedScorer::name)
        .containsExactly("prefix-cache-scorer");

    Router named = Router.builder().endpoints(pool(2)).configYaml("""
        plugins:
        - type: approx-prefix-cache-producer
        - type: prefix-cache-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: approx-prefix-cache-producer
          - pluginRef: prefix-cache-scorer
          - pluginRef: max-score-picker
        """, "named.yaml").build();
    routers.add(named);
    assertThat(named.config().profiles().get("default").scorers())
        .extracting(io.epp4j.core.SchedulingProfile.WeightedScorer::name)
        .containsExactly("prefix-cache-scorer");
    assertThat(named.config().warnings()).anySatisfy(w -> assertThat(w)
        .contains("pluginRef 'approx-prefix-cache-producer'").contains("data producer"));
  }

  /** llm-d's default token producer, the estimate backend, lends no tokenizer and says so. */
  @Test
  void theEstimateTokenProducerLoadsAndLendsNoTokenizer() {
    Router r = Router.builder().endpoints(pool(2)).configYaml("""
        plugins:
        - type: token-producer
          parameters:
            estimate: {image: {mode: static, static: {staticToken: 256}}}
        - type: approx-prefix-cache-producer
        - type: prefix-cache-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: prefix-cache-scorer
          - pluginRef: max-score-picker
        """, "estimate.yaml").build();
    routers.add(r);
    assertThat(((TokenProducer) r.config().plugins().get("token-producer")).tokenizer()).isNull();
    assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
        .contains("lends no tokenizer").contains("vllm.url"));
    assertThat(r.route(completion(text(1, 400))).isRouted()).isTrue();
  }
}
