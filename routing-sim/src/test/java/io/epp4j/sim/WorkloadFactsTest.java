package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Load levels, hit-rate ceilings and capacity crossovers, each against its definition. */
class WorkloadFactsTest {
  private static final int BLOCK = 16;

  @Test
  void multiTurnCeilingIsTheHistoryEveryTurnCarriesPlusTheSharedSystemPrompt() {
    // lengths in whole blocks, so nothing is lost to rounding: every turn after the first finds
    // its history (system prompt, earlier messages, replies); a first turn finds the system
    // prompt when another dialog came before it
    int dialogs = 3;
    int turns = 4;
    int system = 160;
    int user = 32;
    int reply = 48;
    MultiTurnWorkload w = new MultiTurnWorkload(dialogs, turns, system, LengthDist.fixed(user),
        LengthDist.fixed(reply), 0.5, 1.0);
    long hits = (dialogs - 1L) * system;
    long prompts = 0;
    for (int t = 0; t < turns; t++) {
      long history = system + (long) t * (user + reply);
      prompts += dialogs * (history + user);
      if (t > 0) {
        hits += dialogs * history;
      }
    }
    assertThat(w.hitRateCeiling(1, BLOCK)).isCloseTo(hits / (double) prompts, within(1e-12));
  }

  @Test
  void aDialogThatOutgrowsTheContextEndsInTheCeilingAsItDoesInTheSimulation() {
    // turn t is 240 + 80 t tokens (prompt and reply): with a context of 500 turns 0-3 fit and
    // turn 4 is rejected, which ends its dialog; the ceiling is that of the same dialogs with
    // 4 turns, not one that also looks up the prompts of the rejected turns 4-9
    MultiTurnWorkload outgrowing = new MultiTurnWorkload(3, 10, 160, LengthDist.fixed(32),
        LengthDist.fixed(48), 0.5, 1.0);
    MultiTurnWorkload fitting = new MultiTurnWorkload(3, 4, 160, LengthDist.fixed(32),
        LengthDist.fixed(48), 0.5, 1.0);
    assertThat(outgrowing.hitRateCeiling(1, BLOCK, 500))
        .isCloseTo(fitting.hitRateCeiling(1, BLOCK), within(1e-12));
    // a context that holds every turn changes nothing
    assertThat(outgrowing.hitRateCeiling(1, BLOCK, 1040))
        .isEqualTo(outgrowing.hitRateCeiling(1, BLOCK));
  }

  @Test
  void sharedPrefixCeilingIsBoundedByTheSystemPromptsShare() {
    // a request can hit at most its group's system prompt, and only after the group's first one
    int groups = 4;
    int requests = 200;
    SharedPrefixWorkload w = new SharedPrefixWorkload(groups, 5, LengthDist.fixed(160),
        LengthDist.fixed(32), LengthDist.fixed(16), requests, 8, 0);
    double c = w.hitRateCeiling(1, BLOCK);
    assertThat(c).isLessThanOrEqualTo(160.0 / 192)
        .isGreaterThanOrEqualTo((requests - groups) * 160.0 / (requests * 192.0));
  }

  @Test
  void traceCeilingCountsHashIdsSeenBeforeWithVllmsRulesAndTheContextClip(@TempDir Path dir)
      throws Exception {
    Path trace = dir.resolve("t.jsonl");
    Files.writeString(trace, """
        {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}
        {"timestamp": 5, "input_length": 1400, "output_length": 10, "hash_ids": [1, 2, 3]}
        {"timestamp": 9, "input_length": 100, "output_length": 10, "hash_ids": [4]}
        """);
    // context 131,072: the second request finds ids 1 and 2 (512 tokens each)
    MooncakeTraceWorkload wide = MooncakeTraceWorkload.load(trace, 0, 1.0, 131_072);
    assertThat(wide.hitRateCeiling(1, BLOCK)).isCloseTo(1024.0 / 2500, within(1e-12));
    // context 1,000: prompts clipped to 990; the second finds 990 tokens, at most 989 may hit,
    // rounded down to whole blocks: 976
    MooncakeTraceWorkload narrow = MooncakeTraceWorkload.load(trace, 0, 1.0, 1000);
    assertThat(narrow.hitRateCeiling(1, BLOCK)).isCloseTo(976.0 / 2080, within(1e-12));
    // the arrival rate does not change which blocks repeat
    assertThat(wide.atLoad(2).hitRateCeiling(1, BLOCK))
        .isEqualTo(wide.hitRateCeiling(1, BLOCK));
    assertThat(wide.capacityCrossover(HardwareProfile.llama31H100(), 8)).isNaN();
  }

  @Test
  void aPromptSeenWholeStillComputesItsLastTokenSoItsLastBlockMisses(@TempDir Path dir)
      throws Exception {
    // vLLM hits at most prompt - 1 tokens: a repeated 1,024-token prompt hits 1,008
    Path trace = dir.resolve("t.jsonl");
    Files.writeString(trace, """
        {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}
        {"timestamp": 5, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}
        """);
    assertThat(MooncakeTraceWorkload.load(trace, 0, 1.0, 131_072).hitRateCeiling(1, BLOCK))
        .isCloseTo(1008.0 / 2048, within(1e-12));
    // the same rule in the replay of the other workloads: two identical 32-token prompts
    assertThat(InfiniteCache.hitRate(new RepeatedPrompt(), 1, BLOCK))
        .isCloseTo(16.0 / 64, within(1e-12));
  }

  /** Two requests with the same 32-token prompt, the second after the first. */
  private static final class RepeatedPrompt implements Workload {
    @Override
    public String name() {
      return "repeat";
    }

    @Override
    public String describe(HardwareProfile profile, int replicas) {
      return "";
    }

    @Override
    public Workload atLoad(double level) {
      return this;
    }

    @Override
    public double capacityCrossover(HardwareProfile profile, int replicas) {
      return Double.NaN;
    }

    @Override
    public String crossoverNote(HardwareProfile profile, int replicas) {
      return "";
    }

    @Override
    public Run start(long seed) {
      int[] tokens = TestRequests.tokens(1, 40);
      return new Run() {
        @Override
        public int totalRequests() {
          return 2;
        }

        @Override
        public void begin(Submitter submitter) {
          for (int i = 0; i < 2; i++) {
            submitter.submit(i, new RequestSpec("r" + i, "s" + i, 32, 8, () -> tokens, false, i));
          }
        }

        @Override
        public void onFinished(RequestSpec spec, long nowNanos, Submitter submitter) {}
      };
    }
  }

  @Test
  void loadLevelsMultiplyDialogsClientsRateAndArrivalsRoundingHalvesUp(@TempDir Path dir)
      throws Exception {
    MultiTurnWorkload m = MultiTurnWorkload.defaults();
    assertThat(m.atLoad(1.5).dialogs()).isEqualTo(54);
    assertThat(m.atLoad(2.5).dialogs()).isEqualTo(90);
    assertThat(m.atLoad(1).dialogs()).isEqualTo(36);
    assertThat(new MultiTurnWorkload(5, 2, 10, LengthDist.fixed(5), LengthDist.fixed(5), 1, 1)
        .atLoad(1.5).dialogs()).isEqualTo(8);
    assertThat(m.atLoad(0.001).dialogs()).isEqualTo(1);
    SharedPrefixWorkload s = SharedPrefixWorkload.defaults();
    assertThat(s.atLoad(2.5).concurrency()).isEqualTo(120);
    assertThat(s.atLoad(2.5).requests()).isEqualTo(s.requests());
    SharedPrefixWorkload poisson = new SharedPrefixWorkload(2, 2, LengthDist.fixed(10),
        LengthDist.fixed(10), LengthDist.fixed(10), 10, 4, 3.0);
    assertThat(poisson.atLoad(2).rate()).isEqualTo(6.0);
    Path trace = dir.resolve("t.jsonl");
    Files.writeString(trace, """
        {"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]}
        {"timestamp": 1000, "input_length": 100, "output_length": 10, "hash_ids": [1]}
        """);
    MooncakeTraceWorkload t = MooncakeTraceWorkload.load(trace, 0, 1.0, 1000);
    assertThat(t.atLoad(2).parameters().get("timeScale")).isEqualTo(0.5);
  }

  @Test
  void pastTheMultiTurnCrossoverTheDialogsNoLongerFitInTheCluster() {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    int replicas = 6;
    MultiTurnWorkload m = MultiTurnWorkload.defaults();
    double x = m.capacityCrossover(hw, replicas);
    long own = m.turns() * (long) (m.userLength().mean() + m.replyLength().mean());
    java.util.function.DoubleUnaryOperator kvAt = level -> m.dialogs() * level * own
        + replicas * (double) m.systemPromptLength();
    double cluster = hw.kvTokensPerReplica() * (double) replicas;
    assertThat(kvAt.applyAsDouble(x * 0.99)).isLessThan(cluster);
    assertThat(kvAt.applyAsDouble(x * 1.01)).isGreaterThan(cluster);
    // the default dialogs sit below it, twice as many above it (the regimes the sweep covers)
    assertThat(x).isGreaterThan(1).isLessThan(2);
  }

  @Test
  void theSharedPrefixCrossoverIsWherePromptsAndRequestsInFlightFillTheCluster() {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    SharedPrefixWorkload s = SharedPrefixWorkload.defaults();
    double x = s.capacityCrossover(hw, 6);
    double prompts = s.groups() * s.systemPromptLength().mean();
    double perClient = s.questionLength().mean() + s.outputLength().mean();
    assertThat(prompts + x * s.concurrency() * perClient)
        .isCloseTo(hw.kvTokensPerReplica() * 6.0, within(1.0));
    assertThat(new SharedPrefixWorkload(2, 2, LengthDist.fixed(10), LengthDist.fixed(10),
        LengthDist.fixed(10), 10, 4, 3.0).capacityCrossover(hw, 6)).isNaN();
  }
}
