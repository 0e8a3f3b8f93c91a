package io.epp4j.jmh;

import io.epp4j.api.RoutingDecision;
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
 * {@link RouteBenchmark}'s route at the simulator's default shape (6 endpoints, prompts of
 * 6,500 tokens given as token IDs), once as {@code RouteBenchmark} measures it, back to back on
 * hot caches ({@code routeHot}), and once after sweeping {@code sweepBytes} through the caches
 * ({@code routeAfterSweep}), as the simulator's event loop or a gateway's own work does between
 * two decisions. {@code sweep} measures the sweep alone: {@code routeAfterSweep - sweep} is the
 * route on cold caches, the figure to set beside the simulator's route time after warm-up.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class ColdCacheRouteBenchmark {
  @Param({"6"})
  public int endpoints;

  @Param({"26000"})
  public int promptBytes;

  @Param({"1048576"})
  public int sweepBytes;

  private final RouteBenchmark route = new RouteBenchmark();
  private long[] buffer = new long[0];
  private long counter;

  @Setup(Level.Trial)
  public void setUp() {
    route.endpoints = endpoints;
    route.promptBytes = promptBytes;
    route.form = "tokens";
    route.metrics = BenchmarkPrompts.SKEWED; // as the earlier rounds measured it
    route.setUp();
    buffer = new long[sweepBytes / 8];
  }

  @TearDown(Level.Trial)
  public void tearDown() {
    route.tearDown();
  }

  @Benchmark
  public RoutingDecision routeHot() {
    return route.route();
  }

  @Benchmark
  public RoutingDecision routeAfterSweep() {
    sweep();
    return route.route();
  }

  /** Writes one word per 64-byte line of the buffer, evicting what the last route left. */
  @Benchmark
  public long sweep() {
    long[] b = buffer;
    long c = counter;
    for (int i = 0; i < b.length; i += 8) {
      b[i] = c++;
    }
    counter = c;
    return c;
  }
}
