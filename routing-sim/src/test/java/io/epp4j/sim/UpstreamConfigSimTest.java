package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.kvevents.KvEvent;
import io.epp4j.kvevents.KvEventBatch;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiConsumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The simulator runs upstream-shaped configurations, precise ones at the block size they name. */
class UpstreamConfigSimTest {
  /** llm-d's precise guide in shape: block size 64 and a central event socket. */
  static final String PRECISE_64 = """
      apiVersion: llm-d.ai/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: decode-filter
      - type: precise-prefix-cache-scorer
        parameters:
          tokenProcessorConfig:
            blockSize: 64
            hashSeed: "42"
          kvEventsConfig:
            zmqEndpoint: tcp://*:5557
      - type: kv-cache-utilization-scorer
      - type: queue-scorer
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: decode-filter
        - pluginRef: precise-prefix-cache-scorer
          weight: 2.0
        - pluginRef: kv-cache-utilization-scorer
          weight: 1.0
        - pluginRef: queue-scorer
          weight: 1.0
        - pluginRef: max-score-picker
      """;

  /** The GIE 0.5 default profile in shape (decision tree of filters, random picker). */
  static final String GIE_05 = """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - {type: low-queue-filter, parameters: {threshold: 128}}
      - {type: lora-affinity-filter, parameters: {threshold: 0.999}}
      - type: least-queue-filter
      - type: least-kv-cache-filter
      - type: decision-tree-filter
        name: low-latency-filter
        parameters:
          current: {pluginRef: low-queue-filter}
          nextOnSuccess:
            decisionTree:
              current: {pluginRef: lora-affinity-filter}
              nextOnSuccessOrFailure:
                decisionTree:
                  current: {pluginRef: least-queue-filter}
                  nextOnSuccessOrFailure:
                    decisionTree:
                      current: {pluginRef: least-kv-cache-filter}
          nextOnFailure:
            decisionTree:
              current: {pluginRef: least-queue-filter}
              nextOnSuccessOrFailure:
                decisionTree:
                  current: {pluginRef: least-kv-cache-filter}
      - type: random-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: low-latency-filter
        - pluginRef: random-picker
      """;

  /** llm-d's current precise shape: the index is a producer the prefix scorer reads by name. */
  static final String PRECISE_PRODUCER_64 = """
      apiVersion: llm-d.ai/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: decode-filter
      - type: precise-prefix-cache-producer
        parameters:
          tokenProcessorConfig:
            blockSize: 64
          kvEventsConfig:
            zmqEndpoint: tcp://*:5557
      - type: prefix-cache-scorer
        parameters:
          prefixMatchInfoProducerName: precise-prefix-cache-producer
      - type: queue-scorer
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: decode-filter
        - pluginRef: prefix-cache-scorer
          weight: 2.0
        - pluginRef: queue-scorer
          weight: 1.0
        - pluginRef: max-score-picker
      """;

  @org.junit.jupiter.params.ParameterizedTest
  @org.junit.jupiter.params.provider.ValueSource(strings = {"scorer", "producer"})
  void aPreciseConfigNamesTheBlockSizeTheSimulatedEnginesPublish(String shape, @TempDir Path dir)
      throws Exception {
    Path cfg = dir.resolve("precise-64.yaml");
    Files.writeString(cfg, shape.equals("scorer") ? PRECISE_64 : PRECISE_PRODUCER_64);
    Policy p = Policy.fromFile(cfg);
    assertThat(p.kvEvents()).isTrue();
    assertThat(p.blockSize()).isEqualTo(64);

    Set<Integer> blockSizes = new TreeSet<>();
    AtomicLong stored = new AtomicLong();
    BiConsumer<String, KvEventBatch> events = (endpoint, batch) -> {
      for (KvEvent e : batch.events()) {
        if (e instanceof KvEvent.BlockStored s) {
          blockSizes.add(s.blockSize());
          stored.addAndGet(s.blockHashes().length);
        }
      }
    };
    Simulation.Settings settings =
        new Simulation.Settings(HardwareProfile.qwen3H100Mps6(), 6, 3, 50_000_000L, null);
    MultiTurnWorkload w = new MultiTurnWorkload(12, 4, 500, LengthDist.parse("100-200"),
        LengthDist.fixed(100), 0.5, 1.0);
    PolicyResult r = new Simulation(settings, w, p, events).run();
    assertThat(r.requests()).isEqualTo(48);
    assertThat(r.routerRejectedRequests()).isZero();
    assertThat(stored.get()).isPositive();
    assertThat(blockSizes).as("the engines cache and publish 64-token blocks").containsExactly(64);
    // every turn after a dialog's first shares its history (at least 500 tokens, 7 blocks of
    // 64) with the endpoint the previous turn went to, which precise routing can see
    assertThat(r.prefixCacheHitRate()).isNotNaN().isPositive();
  }

  @Test
  void theCommandLineRunsUpstreamShapedConfigs(@TempDir Path dir) throws Exception {
    Path precise = dir.resolve("llmd-precise.yaml");
    Files.writeString(precise, PRECISE_64);
    Path tree = dir.resolve("gie-05.yaml");
    Files.writeString(tree, GIE_05);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    int code = Main.run(new String[] {"--quiet", "--scenario", "multi-turn", "--dialogs", "6",
        "--turns", "3", "--reply-len", "50", "--config", precise.toString(), "--config",
        tree.toString()}, new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
    assertThat(code).as(err.toString(StandardCharsets.UTF_8)).isZero();
    assertThat(out.toString(StandardCharsets.UTF_8)).contains("llmd-precise", "gie-05");
  }
}
