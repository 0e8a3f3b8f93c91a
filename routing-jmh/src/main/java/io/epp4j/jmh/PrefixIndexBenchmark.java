package io.epp4j.jmh;

import io.epp4j.api.Candidate;
import io.epp4j.api.ChatMessage;
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
 * {@code hashOnly} isolates the block hashing that both share: the same prompts scored by a
 * scorer whose index is empty, against one endpoint; {@code hashOnlyChat} the same text sent as
 * a chat (a system message of a quarter of it, then user and assistant turns of 800 characters),
 * which is hashed in its canonical form piece by piece; {@code xxh3Floor} one XXH3 pass over the
 * prompt's bytes, the floor both are measured against.
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
  private static final com.dynatrace.hash4j.hashing.Hasher64 XXH3 =
      com.dynatrace.hash4j.hashing.Hashing.xxh3_64();

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
  private PrefixCacheScorer emptyScorer;
  private List<Candidate> oneCandidate;
  private InferenceRequest[] chats;
  private byte[][] promptBytesUtf8;
  private double[] oneScore;
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
    emptyScorer = PrefixCacheScorer.create();
    oneCandidate = candidates.subList(0, 1);
    oneScore = new double[1];
    chats = new InferenceRequest[PROMPTS];
    promptBytesUtf8 = new byte[PROMPTS][];
    for (int i = 0; i < PROMPTS; i++) {
      String p = prompts[i];
      promptBytesUtf8[i] = p.getBytes(java.nio.charset.StandardCharsets.UTF_8);
      List<ChatMessage> messages = new java.util.ArrayList<>();
      int system = p.length() / 4;
      messages.add(ChatMessage.system(p.substring(0, system)));
      for (int at = system, turn = 0; at < p.length(); at += 800, turn++) {
        String part = p.substring(at, Math.min(p.length(), at + 800));
        messages.add(turn % 2 == 0 ? ChatMessage.user(part) : ChatMessage.assistant(part));
      }
      chats[i] = InferenceRequest.builder().model(requests[i].targetModel()).messages(messages).build();
    }
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
    state.end(); // as the router does: the hash array goes back for the next cycle
    return scores;
  }

  @Benchmark
  public double[] hashOnly() {
    CycleState state = new CycleState(0, new SplittableRandom(1));
    emptyScorer.score(requests[next++ & (PROMPTS - 1)], state, oneCandidate, oneScore);
    state.end();
    return oneScore;
  }

  @Benchmark
  public double[] hashOnlyChat() {
    CycleState state = new CycleState(0, new SplittableRandom(1));
    emptyScorer.score(chats[next++ & (PROMPTS - 1)], state, oneCandidate, oneScore);
    state.end();
    return oneScore;
  }

  @Benchmark
  public long xxh3Floor() {
    return XXH3.hashBytesToLong(promptBytesUtf8[next++ & (PROMPTS - 1)]);
  }

  @Benchmark
  public CycleState record() {
    int i = next++ & (PROMPTS - 1);
    CycleState state = new CycleState(0, new SplittableRandom(1));
    scorer.afterRouting(requests[i], state, decisions[i]);
    state.end();
    return state;
  }
}
