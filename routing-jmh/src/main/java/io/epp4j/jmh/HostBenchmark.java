package io.epp4j.jmh;

import com.dynatrace.hash4j.hashing.Hasher64;
import com.dynatrace.hash4j.hashing.Hashing;
import java.nio.charset.StandardCharsets;
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
import org.openjdk.jmh.annotations.Threads;
import org.openjdk.jmh.annotations.Warmup;

/**
 * What the machine itself gives an operation as long as a route: {@code passes} XXH3 passes over
 * one of the benchmark's 100 KB prompts, which takes no lock, allocates nothing, shares nothing
 * between threads and follows no pointers. Measured as {@link RouteLatencyBenchmark} measures the
 * route: a latency distribution, and the throughput of one thread against two. Run both in one
 * session and compare at equal medians: what an operation of that length loses to the machine
 * (timer interrupts, the hypervisor, a sibling thread on the same core) shows here too, and only
 * what the route adds beyond it is the route's.
 */
@State(Scope.Benchmark)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class HostBenchmark {
  private static final int PROMPTS = 64;
  private static final Hasher64 XXH3 = Hashing.xxh3_64();

  @Param({"102400"})
  public int promptBytes;

  /**
   * XXH3 passes per operation: 1 is a 100 KB route's floor; 3 and 6 last about as long as a
   * 100 KB route in the steady state and under churn.
   */
  @Param({"1", "3", "6"})
  public int passes;

  private byte[][] bytes;

  @State(Scope.Thread)
  public static class Cursor {
    int next;
  }

  @Setup(Level.Trial)
  public void setUp() {
    String[] prompts = BenchmarkPrompts.prompts(new SplittableRandom(7), PROMPTS, 16, promptBytes);
    bytes = new byte[PROMPTS][];
    for (int i = 0; i < PROMPTS; i++) {
      bytes[i] = prompts[i].getBytes(StandardCharsets.UTF_8);
    }
  }

  private long hash(Cursor c) {
    byte[] b = bytes[c.next++ & (PROMPTS - 1)];
    long h = 0;
    for (int p = 0; p < passes; p++) {
      h += XXH3.hashBytesToLong(b, 0, b.length) ^ p;
    }
    return h;
  }

  @Benchmark
  @BenchmarkMode(Mode.SampleTime)
  @OutputTimeUnit(TimeUnit.MICROSECONDS)
  public long xxh3Sampled(Cursor c) {
    return hash(c);
  }

  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @Threads(1)
  public long xxh3OneThread(Cursor c) {
    return hash(c);
  }

  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @Threads(2)
  public long xxh3TwoThreads(Cursor c) {
    return hash(c);
  }
}
