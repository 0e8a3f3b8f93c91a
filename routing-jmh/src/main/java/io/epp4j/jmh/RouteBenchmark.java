package io.epp4j.jmh;

import com.dynatrace.hash4j.hashing.Hasher64;
import com.dynatrace.hash4j.hashing.Hashing;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
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
 * {@code Router.route} with the EPP default profile (prefix-cache 3, queue 2, KV utilisation 2,
 * max-score picker) over a warm prefix index, against the floor: one XXH3 pass over the same
 * prompt bytes. Report {@code route / xxh3Floor} for each parameter set.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class RouteBenchmark {
  private static final int PROMPTS = 64;
  private static final Hasher64 XXH3 = Hashing.xxh3_64();

  @Param({"1024", "10240", "102400"})
  public int promptBytes;

  @Param({"8", "16", "64", "256"})
  public int endpoints;

  @Param({"text", "tokens"})
  public String form;

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
  private byte[][] floorBytes;
  private int next;

  @Setup(Level.Trial)
  public void setUp() {
    SplittableRandom rnd = new SplittableRandom(42);
    router = Router.builder().endpoints(BenchmarkPrompts.endpoints(endpoints)).randomSeed(1)
        .build();
    BenchmarkPrompts.publishMetrics(router, rnd, metrics);
    String[] prompts = BenchmarkPrompts.prompts(rnd, PROMPTS, 16, promptBytes);
    boolean tokens = form.equals("tokens");
    requests = new InferenceRequest[PROMPTS];
    floorBytes = new byte[PROMPTS][];
    for (int i = 0; i < PROMPTS; i++) {
      requests[i] = BenchmarkPrompts.request(prompts[i], tokens, i);
      floorBytes[i] = tokens ? BenchmarkPrompts.tokenBytes(Objects.requireNonNull(requests[i].tokenIds()))
          : prompts[i].getBytes(StandardCharsets.UTF_8);
    }
    // fill the index beyond the benchmark prompts: other families occupy the endpoints too
    String[] background = BenchmarkPrompts.prompts(rnd, 512, 128, promptBytes);
    InferenceRequest[] bg = new InferenceRequest[background.length];
    for (int i = 0; i < bg.length; i++) {
      bg[i] = BenchmarkPrompts.request(background[i], tokens, 1000 + i);
    }
    BenchmarkPrompts.warm(router, bg, 1);
    BenchmarkPrompts.warm(router, requests, 2);
  }

  @TearDown(Level.Trial)
  public void tearDown() {
    router.close();
  }

  @Benchmark
  public RoutingDecision route() {
    RoutingDecision d = router.route(requests[next++ & (PROMPTS - 1)]);
    d.onComplete(Usage.NONE);
    return d;
  }

  @Benchmark
  public long xxh3Floor() {
    return XXH3.hashBytesToLong(floorBytes[next++ & (PROMPTS - 1)]);
  }
}
