package io.epp4j.jmh;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Picker;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Ticker;
import io.epp4j.core.PluginRegistry;
import io.epp4j.core.Router;
import io.epp4j.core.SchedulingProfile;
import java.util.List;
import java.util.Optional;
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

/** One sticky pick (hash the session key, look it up) with Envoy's ring hash and Maglev. */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class StickyPickerBenchmark {
  private static final int KEYS = 1024;

  @Param({"ring-hash-picker", "maglev-picker"})
  public String picker;

  @Param({"8", "64", "256"})
  public int endpoints;

  private Picker instance;
  private List<Candidate> candidates;
  private InferenceRequest[] requests;
  private double[] scores;
  private int next;

  @Setup(Level.Trial)
  public void setUp() {
    PluginRegistry registry = PluginRegistry.fromServiceLoader();
    PluginContext ctx = new PluginContext() {
      @Override public String pluginName() { return picker; }
      @Override public Ticker ticker() { return Ticker.system(); }
      @Override public <T> Optional<T> service(Class<T> type) { return Optional.empty(); }
    };
    instance = (Picker) registry.create(picker, ctx, Parameters.empty()).value();
    Router router = Router.builder().endpoints(BenchmarkPrompts.endpoints(endpoints))
        .profile(SchedulingProfile.builder("default").build()).build();
    candidates = router.endpoints();
    requests = new InferenceRequest[KEYS];
    for (int i = 0; i < KEYS; i++) {
      requests[i] = InferenceRequest.builder().model(BenchmarkPrompts.MODEL).prompt("x")
          .sessionKey("user-" + i).build();
    }
    scores = new double[endpoints];
    // build the table once outside the measurement
    instance.pick(requests[0], new CycleState(0, new SplittableRandom(1)), candidates, scores);
  }

  @Benchmark
  public List<Candidate> pick() {
    return instance.pick(requests[next++ & (KEYS - 1)], new CycleState(0, new SplittableRandom(1)),
        candidates, scores);
  }
}
