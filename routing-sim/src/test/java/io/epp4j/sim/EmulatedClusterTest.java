package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.kvevents.KvEvent;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The wall-clock driver runs the simulator's step model and takes the time it prices. */
@Timeout(30)
class EmulatedClusterTest {

  /** Per-step emulated durations of one request alone on a replica, by the simulator's rules. */
  private static List<Long> stepNanos(HardwareProfile hw, int promptLength, int output) {
    Replica r = new Replica(0, Endpoint.of("127.0.0.1", 1), hw, hw.kvBlocksPerReplica());
    r.enqueue(TestRequests.request("x", TestRequests.tokens(1, promptLength), output));
    List<Long> steps = new ArrayList<>();
    Replica.StepSink none = new Replica.StepSink() {
      @Override
      public void onToken(Replica replica, SimRequest q, long nowNanos, boolean first) {}

      @Override
      public void onFinished(Replica replica, SimRequest q, long nowNanos) {}
    };
    while (r.hasWork()) {
      double work = r.scheduleStep();
      // one replica alone on its GPU: GpuShare's completion, then the step's CPU overhead
      steps.add((long) Math.ceil(work * 1e9) + Math.round(r.stepOverheadSeconds() * 1e9));
      r.completeStep(0, none);
    }
    return steps;
  }

  @Test
  void stepsTakeTheProfilesTimesOnTheWallClock() throws Exception {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    int prompt = 1_500;
    int output = 4;
    List<Long> steps = stepNanos(hw, prompt, output);
    assertThat(steps).hasSize(output); // one prefill step (within the token budget), 3 decodes
    long total = steps.stream().mapToLong(Long::longValue).sum();

    double speed = 2;
    List<List<KvEvent>> batches = Collections.synchronizedList(new ArrayList<>());
    try (EmulatedCluster c = new EmulatedCluster(hw, 1, speed, 1, (i, e) -> batches.add(e))) {
      CountDownLatch done = new CountDownLatch(1);
      int[] usage = new int[3];
      List<Integer> tokens = Collections.synchronizedList(new ArrayList<>());
      long t0 = System.nanoTime();
      c.submit(0, TestRequests.tokens(1, prompt), output, new EmulatedCluster.Listener() {
        @Override
        public void onToken(int tokenId, boolean first) {
          tokens.add(tokenId);
        }

        @Override
        public void onFinished(int promptTokens, int cachedTokens, int completionTokens) {
          usage[0] = promptTokens;
          usage[1] = cachedTokens;
          usage[2] = completionTokens;
          done.countDown();
        }

        @Override
        public void onAborted() {}
      });
      assertThat(done.await(10, TimeUnit.SECONDS)).isTrue();
      long wall = System.nanoTime() - t0;

      assertThat(tokens).hasSize(output);
      assertThat(usage).containsExactly(prompt, 0, output);
      // emulated time is exact: the TTFT is the first step's price to the nanosecond
      EmulatedCluster.Stats s = c.stats(0);
      assertThat(s.ttftCount()).isEqualTo(1);
      assertThat(s.ttftSumSeconds()).isCloseTo(steps.get(0) / 1e9,
          org.assertj.core.data.Offset.offset(1e-9));
      // and it is not run faster than the speed factor allows
      assertThat(wall).isGreaterThanOrEqualTo((long) (total / speed));
      assertThat(s.prefixQueries()).isEqualTo(prompt);
      assertThat(s.running() + s.waiting()).isZero();
      // the prompt's full blocks were stored in the prefix cache and announced
      assertThat(batches).isNotEmpty();
      assertThat(c.cachedBlocks(0)).isGreaterThanOrEqualTo(prompt / hw.blockSize());
    }
  }

  @Test
  void closingAbortsRequestsInFlight() throws Exception {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    // at speed 0.001 a step lasts seconds: the request is certainly in flight when closed
    EmulatedCluster c = new EmulatedCluster(hw, 1, 0.001, 1, (i, e) -> { });
    CountDownLatch aborted = new CountDownLatch(1);
    c.submit(0, TestRequests.tokens(1, 100), 5, new EmulatedCluster.Listener() {
      @Override
      public void onToken(int tokenId, boolean first) {}

      @Override
      public void onFinished(int promptTokens, int cachedTokens, int completionTokens) {}

      @Override
      public void onAborted() {
        aborted.countDown();
      }
    });
    c.close();
    assertThat(aborted.await(5, TimeUnit.SECONDS)).isTrue();
  }
}
