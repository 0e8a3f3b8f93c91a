package io.epp4j.jmh;

import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.epp4j.kvevents.BlockKeys;
import io.epp4j.kvevents.KvBlockIndex;
import io.epp4j.kvevents.KvEvent;
import io.epp4j.kvevents.KvEventBatch;
import io.epp4j.kvevents.KvEventsPresets;
import io.epp4j.scorers.Epp4jPreset;
import java.util.List;
import java.util.Objects;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * {@code Router.route} + {@code onComplete} for each preset policy on the same token prompts over
 * the same history, so that precise, hybrid and {@code epp4j} routing can be read as ratios of the
 * approximate one. The history: enough unique background prompts to put about 20,000 blocks on
 * every endpoint (each sent to the endpoint that is idle at that moment, as a load balancer
 * spreads cold traffic), then the 64 measured prompts (16 families sharing 75 % of their tokens)
 * twice. Every routed request is also reported to the KV block index as the engine would report
 * it ({@code BlockStored} of its blocks on the endpoint that served it), so precise mode sees what
 * approximate mode remembers. Endpoints hold 40,000 blocks.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {BenchmarkJvm.LARGE_HEAP_MIN, BenchmarkJvm.LARGE_HEAP_MAX,
    BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class PolicyRouteBenchmark {
  private static final int PROMPTS = 64;
  private static final int BLOCK_SIZE = 16;
  private static final int BLOCKS_PER_ENDPOINT = 20_000;
  private static final long ENGINE_SEED = 0x5eed;

  /**
   * The presets, and {@code llmd-affinity}: llm-d's current shape ({@link #LLMD_AFFINITY}), whose
   * prefix index is a producer that the affinity filter asks before the prefix scorer does.
   */
  @Param({"epp-approximate", "epp-precise", "epp-precise-hybrid", "epp4j", "llmd-affinity",
      "llmd-request-control"})
  public String policy;

  /**
   * llm-d's current aggregated shape: the approximate producer (its block size raised to 64, as
   * upstream's), the in-flight producer, the affinity filter over both, then the prefix scorer
   * reading the producer, the queue and KV-usage scorers.
   */
  static final String LLMD_AFFINITY = """
      plugins:
      - type: approx-prefix-cache-producer
        parameters: {lruCapacityPerServer: 40000}
      - type: inflight-load-producer
      - type: prefix-cache-affinity-filter
      - type: prefix-cache-scorer
      - type: queue-scorer
      - type: kv-cache-utilization-scorer
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: prefix-cache-affinity-filter
        - pluginRef: prefix-cache-scorer
          weight: 3
        - pluginRef: queue-scorer
          weight: 2
        - pluginRef: kv-cache-utilization-scorer
          weight: 2
        - pluginRef: max-score-picker
      """;

  /**
   * llm-d's request-control and attribute plugins on one route: the session identifier from a
   * header or a coding agent's session header ({@code session-id-producer}, {@code agent-identity})
   * pinning sessions by llm-d's {@code session_id} strategy, the peer-to-peer KV source
   * ({@code p2p-source-producer}, which asks the producer about every endpoint before the
   * profile runs), a threshold on a scraped figure published as an attribute
   * ({@code endpoint-attribute-filter}) and a header-to-label preference
   * ({@code header-label-affinity-scorer}), beside the prefix, queue and KV-usage scorers.
   */
  static final String LLMD_REQUEST_CONTROL = """
      plugins:
      - type: agent-identity
      - type: session-id-producer
        parameters: {headerName: x-session-id}
      - type: approx-prefix-cache-producer
        parameters: {lruCapacityPerServer: 40000}
      - type: p2p-source-producer
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
            - {attributeKey: waiting, metricSpec: vllm:num_requests_waiting}
      - type: endpoint-attribute-filter
        parameters:
          attribute: waiting
          fallbackOnEmpty: true
          algorithm: {type: threshold, threshold: {operator: LessThan, value: 1000}}
      - type: session-affinity-scorer
        parameters:
          strategy: session_id
          sessionIdConfig:
            sources:
            - {attribute: SessionIDDataKey, producer: session-id-producer}
            - {attribute: agent-identity}
      - type: header-label-affinity-scorer
        parameters: {headerName: x-zone, labelKey: topology.kubernetes.io/zone}
      - type: prefix-cache-scorer
      - type: queue-scorer
      - type: kv-cache-utilization-scorer
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: endpoint-attribute-filter
        - pluginRef: session-affinity-scorer
          weight: 1
        - pluginRef: header-label-affinity-scorer
          weight: 1
        - pluginRef: prefix-cache-scorer
          weight: 3
        - pluginRef: queue-scorer
          weight: 2
        - pluginRef: kv-cache-utilization-scorer
          weight: 2
        - pluginRef: max-score-picker
      """;

  @Param({"8", "64"})
  public int endpoints;

  @Param({"1024", "32768"})
  public int promptTokens;

  /**
   * {@code repeated}: the measured prompts are routed as they are, so every block they have was
   * routed before (and the precise scorers, which skip what the engine holds for real, record
   * nothing). {@code newTail}: the last eighth of each prompt is new tokens at every route, as a
   * conversation's next message is, so every route also records that many new blocks (the
   * approximate index's inserts and evictions, the precise scorers' speculative entries, the
   * hybrid's memory). The engines' events for them never come during the measurement, so
   * speculative entries leave by the index's cap, not by confirmation.
   */
  @Param({"repeated", "newTail"})
  public String prompts;

  private Router router;
  private KvBlockIndex index;
  private InferenceRequest[] requests;
  private int next;
  private int tailFrom;
  private long routes;

  @Setup(Level.Trial)
  public void setUp() {
    BenchmarkPrompts.likeAnApplicationJvm();
    SplittableRandom rnd = new SplittableRandom(11);
    index = KvBlockIndex.builder().build();
    Router.Builder b = Router.builder().endpoints(BenchmarkPrompts.endpoints(endpoints))
        .service(KvBlockIndex.class, index).randomSeed(1);
    switch (policy) {
      case "epp-approximate" -> { } // the router's default profile
      case "epp4j" -> b.configYaml(Epp4jPreset.yaml(), Epp4jPreset.NAME);
      case "llmd-affinity" -> b.configYaml(LLMD_AFFINITY, policy);
      case "llmd-request-control" -> b.configYaml(LLMD_REQUEST_CONTROL, policy);
      default -> b.configYaml(KvEventsPresets.yaml(policy), policy);
    }
    router = b.build();
    List<String> ids = router.endpoints().stream().map(c -> c.id()).toList();

    int blocksPerPrompt = promptTokens / BLOCK_SIZE;
    int background = endpoints * BLOCKS_PER_ENDPOINT / blocksPerPrompt;
    for (int i = 0; i < background; i++) {
      // one idle endpoint at a time: cold prompts go where the load is lowest
      String idle = ids.get(i % ids.size());
      for (String id : ids) {
        router.updateMetrics(id, metrics(id.equals(idle) ? 0 : 8, 0.5));
      }
      int[] tokens = KvEventsBenchmark.tokens(rnd, promptTokens);
      routeAndReport(InferenceRequest.builder().model(BenchmarkPrompts.MODEL).tokenIds(tokens)
          .requestId("bg" + i).maxTokens(128).build());
    }
    BenchmarkPrompts.publishMetrics(router, rnd);
    requests = new InferenceRequest[PROMPTS];
    int families = 16;
    int shared = promptTokens * 3 / 4;
    int[][] prefixes = new int[families][];
    for (int f = 0; f < families; f++) {
      prefixes[f] = KvEventsBenchmark.tokens(rnd, shared);
    }
    for (int i = 0; i < PROMPTS; i++) {
      int[] t = new int[promptTokens];
      System.arraycopy(prefixes[i % families], 0, t, 0, shared);
      System.arraycopy(KvEventsBenchmark.tokens(rnd, promptTokens - shared), 0, t, shared,
          promptTokens - shared);
      requests[i] = InferenceRequest.builder().model(BenchmarkPrompts.MODEL).tokenIds(t)
          .requestId("r" + i).sessionKey("session-" + (i % 97)).maxTokens(128)
          // what llm-d's session plugins read (the other policies key sessions as before)
          .headers(java.util.Map.of("x-session-id", "session-" + (i % 97), "x-zone", "a"))
          .build();
    }
    for (int round = 0; round < 2; round++) {
      for (InferenceRequest r : requests) {
        routeAndReport(r);
      }
    }
    tailFrom = "newTail".equals(prompts) ? promptTokens - promptTokens / 8 : promptTokens;
    // The history's speculative entries (one per block routed before its event came) would
    // otherwise expire during the first measured seconds; every measured block is held for real.
    index.purgeSpeculative(Long.MAX_VALUE);
  }

  private static EndpointMetrics metrics(int waiting, double kvUsage) {
    return EndpointMetrics.builder().waitingRequests(waiting).runningRequests(16)
        .kvCacheUsage(kvUsage).kvCapacityBlocks(40_000).blockSizeTokens(BLOCK_SIZE).build();
  }

  /** Routes, completes, and reports the request's blocks as stored on the endpoint it went to. */
  private void routeAndReport(InferenceRequest r) {
    RoutingDecision d = router.route(r);
    d.onComplete(Usage.NONE);
    int[] tokens = Objects.requireNonNull(r.tokenIds());
    int blocks = tokens.length / BLOCK_SIZE;
    // vLLM's block hashes are content hashes: the same block stored again has the same hash
    long[] hashes = BlockKeys.chain(ENGINE_SEED, tokens, BLOCK_SIZE, blocks);
    index.apply(d.primary().id(), KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(hashes, null,
        java.util.Arrays.copyOf(tokens, blocks * BLOCK_SIZE), BLOCK_SIZE))));
  }

  @TearDown(Level.Trial)
  public void tearDown() {
    router.close();
  }

  @Benchmark
  public RoutingDecision route() {
    InferenceRequest r = requests[next++ & (PROMPTS - 1)];
    int[] t = Objects.requireNonNull(r.tokenIds());
    if (tailFrom < t.length) {
      // new tokens for the tail (SplitMix64 of a route counter): a few ns per token
      long x = ++routes * 0x9E3779B97F4A7C15L;
      for (int i = tailFrom; i < t.length; i++) {
        x += 0x9E3779B97F4A7C15L;
        long z = (x ^ (x >>> 30)) * 0xBF58476D1CE4E5B9L;
        t[i] = (int) ((z ^ (z >>> 27)) >>> 46); // within a 262,144-token vocabulary
      }
    }
    RoutingDecision d = router.route(r);
    d.onComplete(Usage.NONE);
    return d;
  }
}
