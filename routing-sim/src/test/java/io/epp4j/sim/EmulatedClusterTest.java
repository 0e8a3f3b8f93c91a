package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.kvevents.KvEvent;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
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
  void theGaugesShowARequestOnlyOnceAStepWithItHasEnded() throws Exception {
    // at a thousandth of real speed the first step (a 1,500-token prefill) lasts seconds
    try (EmulatedCluster c = new EmulatedCluster(HardwareProfile.qwen3H100Mps6(), 1, 0.001, 1,
        (i, e) -> {})) {
      c.submit(0, TestRequests.tokens(1, 1_500), 4, new EmulatedCluster.Listener() {
        @Override
        public void onToken(int tokenId, boolean first) {}

        @Override
        public void onFinished(int promptTokens, int cachedTokens, int completionTokens) {}

        @Override
        public void onAborted() {}
      });
      Thread.sleep(100); // the engine has taken the request and planned its step
      // as vLLM's /metrics: the figures of the last step that ended (none yet)
      EmulatedCluster.Stats s = c.stats(0);
      assertThat(s.waiting()).isZero();
      assertThat(s.running()).isZero();
      assertThat(s.kvUsage()).isZero();
    }
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
    c.submit(0, TestRequests.tokens(1, 100), 5, abortCounter(aborted));
    c.close();
    assertThat(aborted.await(5, TimeUnit.SECONDS)).isTrue();
  }

  @Test
  void aDefectThatStopsTheEngineEndsEveryRequestInsteadOfLeavingItWaiting() throws Exception {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    IllegalStateException defect = new IllegalStateException("a defect of the model");
    // the first step's KV events stand in for any defect the driver could meet
    try (EmulatedCluster c = new EmulatedCluster(hw, 1, 1, 1, (i, e) -> {
      throw defect;
    })) {
      CountDownLatch inFlight = new CountDownLatch(1);
      CountDownLatch later = new CountDownLatch(1);
      // the request in flight when the driver met the defect hears that it ended
      c.submit(0, TestRequests.tokens(1, 64), 50, abortCounter(inFlight));
      assertThat(inFlight.await(10, TimeUnit.SECONDS)).as("in-flight request ended").isTrue();
      assertThat(c.failure()).isSameAs(defect);
      // and one submitted after the stop is ended at once
      assertThat(c.submit(0, TestRequests.tokens(1, 64), 50, -1, null, null,
          abortCounter(later))).isNull();
      assertThat(later.getCount()).isZero();
    }
  }

  @Test
  void overHttpTheStoppedEngineAnswers503AndItsHealthCheckFails() throws Exception {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    HttpClient http = HttpClient.newHttpClient();
    try (EmulatedCluster c = new EmulatedCluster(hw, 1, 1, 1, (i, e) -> {
      throw new IllegalStateException("a defect of the model");
    }); EmulatedServer server = new EmulatedServer(c, 0, 0)) {
      URI base = URI.create("http://127.0.0.1:" + server.port());
      assertThat(http.send(HttpRequest.newBuilder(base.resolve("/health")).build(),
          HttpResponse.BodyHandlers.ofString()).statusCode()).isEqualTo(200);
      HttpResponse<String> completion = http.send(HttpRequest.newBuilder(
          base.resolve("/v1/completions")).timeout(Duration.ofSeconds(10))
          .header("Content-Type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString(
              "{\"prompt\":[1,2,3,4,5,6,7,8],\"max_tokens\":20}")).build(),
          HttpResponse.BodyHandlers.ofString());
      assertThat(completion.statusCode()).isEqualTo(503);
      assertThat(http.send(HttpRequest.newBuilder(base.resolve("/health")).build(),
          HttpResponse.BodyHandlers.ofString()).statusCode()).isEqualTo(503);
      // a new request asking for a stream gets the 503 too, not a 200 and an error event
      HttpResponse<String> stream = http.send(HttpRequest.newBuilder(
          base.resolve("/v1/chat/completions")).timeout(Duration.ofSeconds(10))
          .header("Content-Type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString("{\"messages\":[{\"role\":\"user\","
              + "\"content\":\"a b\"}],\"max_tokens\":2,\"stream\":true}")).build(),
          HttpResponse.BodyHandlers.ofString());
      assertThat(stream.statusCode()).as(stream.body()).isEqualTo(503);
      assertThat(stream.body()).contains("\"code\":503").doesNotContain("data:");
    }
  }

  private static EmulatedCluster.Listener abortCounter(CountDownLatch aborted) {
    return new EmulatedCluster.Listener() {
      @Override
      public void onToken(int tokenId, boolean first) {}

      @Override
      public void onFinished(int promptTokens, int cachedTokens, int completionTokens) {}

      @Override
      public void onAborted() {
        aborted.countDown();
      }
    };
  }
}
