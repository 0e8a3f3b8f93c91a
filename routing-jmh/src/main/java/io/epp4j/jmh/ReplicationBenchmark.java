package io.epp4j.jmh;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import io.epp4j.redis.HintTransport;
import io.epp4j.redis.RedisReplication;
import java.time.Duration;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Group;
import org.openjdk.jmh.annotations.GroupThreads;
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
 * {@code Router.route} with the EPP default profile, without and with {@code redis-replication}
 * (same run, same prompts, same endpoint load figures, same warm-up). The replication publishes
 * into a log that keeps nothing, so what is measured is what sharing costs: queueing each
 * route's hint (the block hashes by reference) on the routing thread, plus the publisher
 * thread's encoding competing for the CPU. The two run at the same time in one group, one thread
 * each, so that both see the same machine: on a shared machine, load that comes and goes between
 * two benchmarks run one after the other is larger than the difference measured. Report
 * {@code route:replicated / route:plain}.
 *
 * <p>Both routers get their load figures from one fixed seed. They used to be drawn one after
 * the other from one generator, so the two routers saw different queues and KV usage, picked
 * differently, and built different indexes: part of the difference measured was that, not the
 * plugin. {@link ReplicationCpu} splits the remaining cost into routing-thread and publisher
 * CPU time, which the scheduler's placement of the threads does not move.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class ReplicationBenchmark {
  static final int PROMPTS = 64;
  private static final long METRICS_SEED = 7;

  @Param({"1024", "10240"})
  public int promptBytes;

  @Param({"8", "64"})
  public int endpoints;

  private Router plain;
  private Router replicated;
  private InferenceRequest[] requests;

  /** Each thread's position in the prompts. */
  @State(Scope.Thread)
  public static class Cursor {
    int next;
  }

  static String config(boolean replication) {
    return """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: prefix-cache-scorer
        - type: queue-scorer
        - type: kv-cache-utilization-scorer
        - type: max-score-picker
        """ + (replication ? """
        - type: redis-replication
          parameters: {pool: bench}
        """ : "") + """
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: prefix-cache-scorer
            weight: 3
          - pluginRef: queue-scorer
            weight: 2
          - pluginRef: kv-cache-utilization-scorer
            weight: 2
          - pluginRef: max-score-picker
        """;
  }

  /** A log that takes every batch and keeps none: the publisher's work without Redis. */
  static HintTransport.Factory discard() {
    return () -> new HintTransport() {
      @Override
      public void connect() {}

      @Override
      public String append(byte[] batch) {
        return "0-0";
      }

      @Override
      public List<Entry> read(String afterId, int max, Duration maxWait) {
        LockSupport.parkNanos(maxWait.toNanos());
        return List.of();
      }

      @Override
      public boolean holdsAfter(String afterId) {
        return true;
      }

      @Override
      public void close() {}
    };
  }

  /**
   * A router with the pool's load figures drawn from one fixed seed: every router of a
   * comparison gets the same figures, so that the plugin is the only difference between them
   * (figures drawn one after the other from one generator made the routers pick differently,
   * and a router that picks differently builds another index and routes at another cost).
   */
  static Router router(int endpoints, boolean replication) {
    PluginRegistry registry = PluginRegistry.fromServiceLoader()
        .with(new RedisReplication.Provider(ReplicationBenchmark::discard));
    Router r = Router.builder().registry(registry)
        .endpoints(BenchmarkPrompts.endpoints(endpoints)).randomSeed(1)
        .configYaml(config(replication), replication ? "replicated" : "plain").build();
    BenchmarkPrompts.publishMetrics(r, new SplittableRandom(METRICS_SEED));
    return r;
  }

  /** The measured prompts; the routers are then warmed with {@link #warm}. */
  static InferenceRequest[] requests(SplittableRandom rnd, int promptBytes) {
    String[] prompts = BenchmarkPrompts.prompts(rnd, PROMPTS, 16, promptBytes);
    InferenceRequest[] requests = new InferenceRequest[PROMPTS];
    for (int i = 0; i < PROMPTS; i++) {
      requests[i] = BenchmarkPrompts.request(prompts[i], false, i);
    }
    return requests;
  }

  /** Fills each router's index with background prompts and the measured ones. */
  static void warm(SplittableRandom rnd, int promptBytes, InferenceRequest[] requests,
      List<Router> routers) {
    String[] background = BenchmarkPrompts.prompts(rnd, 512, 128, promptBytes);
    InferenceRequest[] bg = new InferenceRequest[background.length];
    for (int i = 0; i < bg.length; i++) {
      bg[i] = BenchmarkPrompts.request(background[i], false, 1000 + i);
    }
    for (Router r : routers) {
      BenchmarkPrompts.warm(r, bg, 1);
      BenchmarkPrompts.warm(r, requests, 2);
    }
  }

  @Setup(Level.Trial)
  public void setUp() {
    SplittableRandom rnd = new SplittableRandom(42);
    plain = router(endpoints, false);
    replicated = router(endpoints, true);
    requests = requests(rnd, promptBytes);
    warm(rnd, promptBytes, requests, List.of(plain, replicated));
  }

  @TearDown(Level.Trial)
  public void tearDown() {
    plain.close();
    replicated.close();
  }

  @Benchmark
  @Group("route")
  @GroupThreads(1)
  public RoutingDecision plain(Cursor c) {
    RoutingDecision d = plain.route(requests[c.next++ & (PROMPTS - 1)]);
    d.onComplete(Usage.NONE);
    return d;
  }

  @Benchmark
  @Group("route")
  @GroupThreads(1)
  public RoutingDecision replicated(Cursor c) {
    RoutingDecision d = replicated.route(requests[c.next++ & (PROMPTS - 1)]);
    d.onComplete(Usage.NONE);
    return d;
  }
}
