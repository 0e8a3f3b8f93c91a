package io.epp4j.jmh;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.epp4j.core.SchedulingProfile;
import io.epp4j.scorers.PrefixCacheScorer;
import java.util.List;
import java.util.Map;
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
import org.openjdk.jmh.annotations.Warmup;

/**
 * The prefix-cache scorer's two halves on their own: {@code lookup} (hash the prompt, match it
 * against every endpoint, touch recency) and {@code record} (insert the chain for the picked
 * endpoint), over an index warmed with the same traffic shape as {@link RouteBenchmark}.
 * {@code hashOnly} isolates the block hashing that both share.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class PrefixIndexBenchmark {
  private static final int PROMPTS = 64;

  @Param({"1024", "10240", "102400"})
  public int promptBytes;

  @Param({"16", "64"})
  public int endpoints;

  private PrefixCacheScorer scorer;
  private Router router;
  private List<Candidate> candidates;
  private InferenceRequest[] requests;
  private RoutingDecision[] decisions;
  private double[] scores;
  private int next;

  @Setup(Level.Trial)
  public void setUp() {
    SplittableRandom rnd = new SplittableRandom(11);
    scorer = PrefixCacheScorer.create();
    router = Router.builder().endpoints(BenchmarkPrompts.endpoints(endpoints))
        .profile(SchedulingProfile.builder("default").scorer("prefix-cache-scorer", scorer, 1).build())
        .randomSeed(5).build();
    BenchmarkPrompts.publishMetrics(router, rnd);
    candidates = router.endpoints();
    String[] prompts = BenchmarkPrompts.prompts(rnd, PROMPTS, 16, promptBytes);
    requests = new InferenceRequest[PROMPTS];
    decisions = new RoutingDecision[PROMPTS];
    for (int i = 0; i < PROMPTS; i++) {
      requests[i] = BenchmarkPrompts.request(prompts[i], false, i);
    }
    String[] background = BenchmarkPrompts.prompts(rnd, 512, 128, promptBytes);
    for (int i = 0; i < background.length; i++) {
      router.route(BenchmarkPrompts.request(background[i], false, 1000 + i)).onComplete(Usage.NONE);
    }
    for (int i = 0; i < PROMPTS; i++) {
      RoutingDecision d = router.route(requests[i]);
      d.onComplete(Usage.NONE);
      // a decision to replay into record(): same primary each time
      decisions[i] = RoutingDecision.routed("default",
          Map.of("default", new ProfileResult("default", List.of(d.primary()))), NO_CALLBACKS);
    }
    scores = new double[endpoints];
  }

  private static final RoutingDecision.Callbacks NO_CALLBACKS = new RoutingDecision.Callbacks() {
    @Override public void firstToken(RoutingDecision d) {}
    @Override public void complete(RoutingDecision d, Usage u) {}
    @Override public void failure(RoutingDecision d, Throwable t) {}
  };

  @Benchmark
  public double[] lookup() {
    CycleState state = new CycleState(0, new SplittableRandom(1));
    java.util.Arrays.fill(scores, 0);
    scorer.score(requests[next++ & (PROMPTS - 1)], state, candidates, scores);
    return scores;
  }

  @Benchmark
  public CycleState record() {
    int i = next++ & (PROMPTS - 1);
    CycleState state = new CycleState(0, new SplittableRandom(1));
    scorer.afterRouting(requests[i], state, decisions[i]);
    return state;
  }
}
