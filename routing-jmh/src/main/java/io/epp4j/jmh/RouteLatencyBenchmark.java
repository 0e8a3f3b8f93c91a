package io.epp4j.jmh;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
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
import org.openjdk.jmh.annotations.Threads;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.ThreadParams;

/**
 * Route latency distribution (p50/p99 from {@link Mode#SampleTime}) and the throughput of one
 * versus two routing threads sharing one router. {@link #routeTwoThreads} starts both threads
 * at the first prompt, so they route the same prompts at about the same time (one family, one
 * endpoint's index, from two cores; a thread that gets ahead is held back at the next shared
 * index, so they stay together); in {@link #routeTwoThreadsApart} each thread routes the
 * prompts of its own half of the families (even and odd), as two streams of unrelated requests
 * would: the threads never route the same family.
 */
@State(Scope.Benchmark)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class RouteLatencyBenchmark {
  private static final int PROMPTS = 64;
  private static final int FAMILIES = 16;

  @Param({"102400"})
  public int promptBytes;

  @Param({"64"})
  public int endpoints;

  /**
   * The endpoints' scraped metrics ({@link BenchmarkPrompts#publishMetrics(Router,
   * SplittableRandom, String)}): {@code skewed} sends every prompt without a hit to one endpoint,
   * which at 100 KB churns its prefix index on every route; {@code balanced} is the steady state
   * where routes hit.
   */
  @Param({"skewed", "balanced"})
  public String metrics;

  private Router router;
  private InferenceRequest[] requests;

  @State(Scope.Thread)
  public static class Cursor {
    int next;
  }

  /** A cursor over the prompts {@code i} with {@code i % threads == thread index} only. */
  @State(Scope.Thread)
  public static class ApartCursor {
    int next;
    int step;

    @Setup(Level.Trial)
    public void start(ThreadParams thread) {
      next = thread.getThreadIndex();
      step = thread.getThreadCount();
    }
  }

  @Setup(Level.Trial)
  public void setUp() {
    SplittableRandom rnd = new SplittableRandom(7);
    router = Router.builder().endpoints(BenchmarkPrompts.endpoints(endpoints)).build();
    BenchmarkPrompts.publishMetrics(router, rnd, metrics);
    String[] prompts = BenchmarkPrompts.prompts(rnd, PROMPTS, FAMILIES, promptBytes);
    requests = new InferenceRequest[PROMPTS];
    for (int i = 0; i < PROMPTS; i++) {
      requests[i] = BenchmarkPrompts.request(prompts[i], false, i);
    }
    BenchmarkPrompts.warm(router, requests, 2);
  }

  @TearDown(Level.Trial)
  public void tearDown() {
    router.close();
  }

  private RoutingDecision routeOne(Cursor c) {
    RoutingDecision d = router.route(requests[c.next++ & (PROMPTS - 1)]);
    d.onComplete(Usage.NONE);
    return d;
  }

  @Benchmark
  @BenchmarkMode(Mode.SampleTime)
  @OutputTimeUnit(TimeUnit.MICROSECONDS)
  public RoutingDecision routeSampled(Cursor c) {
    return routeOne(c);
  }

  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @Threads(1)
  public RoutingDecision routeOneThread(Cursor c) {
    return routeOne(c);
  }

  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @Threads(2)
  public RoutingDecision routeTwoThreads(Cursor c) {
    return routeOne(c);
  }

  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @Threads(2)
  public RoutingDecision routeTwoThreadsApart(ApartCursor c) {
    // prompt i belongs to family i % FAMILIES, so a stride of 2 keeps a thread in its families
    RoutingDecision d = router.route(requests[c.next & (PROMPTS - 1)]);
    c.next += c.step;
    d.onComplete(Usage.NONE);
    return d;
  }
}
