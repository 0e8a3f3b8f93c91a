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
 * (same run, same prompts, same warm index). The replication publishes into a log that keeps
 * nothing, so what is measured is what sharing costs the routing thread: copying the block hashes
 * and the session key into the queue, plus the publisher thread's encoding competing for the
 * CPU. The two run at the same time in one group, one thread each, so that both see the same
 * machine: on a shared machine, load that comes and goes between two benchmarks run one after
 * the other is larger than the difference measured. Report {@code route:replicated /
 * route:plain}.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class ReplicationBenchmark {
  private static final int PROMPTS = 64;

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

  private Router router(boolean replication, SplittableRandom rnd) {
    PluginRegistry registry = PluginRegistry.fromServiceLoader()
        .with(new RedisReplication.Provider(ReplicationBenchmark::discard));
    Router r = Router.builder().registry(registry)
        .endpoints(BenchmarkPrompts.endpoints(endpoints)).randomSeed(1)
        .configYaml(config(replication), replication ? "replicated" : "plain").build();
    BenchmarkPrompts.publishMetrics(r, rnd);
    return r;
  }

  @Setup(Level.Trial)
  public void setUp() {
    SplittableRandom rnd = new SplittableRandom(42);
    plain = router(false, rnd);
    replicated = router(true, rnd);
    String[] prompts = BenchmarkPrompts.prompts(rnd, PROMPTS, 16, promptBytes);
    requests = new InferenceRequest[PROMPTS];
    for (int i = 0; i < PROMPTS; i++) {
      requests[i] = BenchmarkPrompts.request(prompts[i], false, i);
    }
    String[] background = BenchmarkPrompts.prompts(rnd, 512, 128, promptBytes);
    InferenceRequest[] bg = new InferenceRequest[background.length];
    for (int i = 0; i < bg.length; i++) {
      bg[i] = BenchmarkPrompts.request(background[i], false, 1000 + i);
    }
    for (Router r : List.of(plain, replicated)) {
      BenchmarkPrompts.warm(r, bg, 1);
      BenchmarkPrompts.warm(r, requests, 2);
    }
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
