package io.epp4j.sim;

import static io.epp4j.sim.TestRequests.concat;
import static io.epp4j.sim.TestRequests.request;
import static io.epp4j.sim.TestRequests.tokens;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class ReplicaTest {
  private final List<String> tokensOut = new ArrayList<>();
  private final List<String> finished = new ArrayList<>();
  private final Replica.StepSink sink = new Replica.StepSink() {
    @Override
    public void onToken(Replica replica, SimRequest r, long now, boolean first) {
      tokensOut.add(r.spec.id() + (first ? "*" : ""));
    }

    @Override
    public void onFinished(Replica replica, SimRequest r, long now) {
      finished.add(r.spec.id());
    }
  };

  private static Replica replica(int blocks, int maxBatched, int maxSeqs) {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6().withEngineLimits(maxBatched, maxSeqs);
    return new Replica(0, Endpoint.parse("10.0.0.1:8000"), hw, blocks);
  }

  private void step(Replica r) {
    assertThat(r.scheduleStep()).isPositive();
    r.completeStep(0, sink);
  }

  @Test
  void longPromptsArePrefilledInChunksWithinTheTokenBudget() {
    Replica r = replica(2000, 8192, 1024);
    SimRequest a = request("a", tokens(1, 20_000), 2);
    r.enqueue(a);
    step(r);
    assertThat(a.numComputed).isEqualTo(8192);
    assertThat(tokensOut).isEmpty();
    step(r);
    assertThat(a.numComputed).isEqualTo(16_384);
    step(r);
    assertThat(a.numComputed).isEqualTo(20_000);
    assertThat(tokensOut).containsExactly("a*");
    step(r);
    assertThat(finished).containsExactly("a");
    assertThat(r.hasWork()).isFalse();
    assertThat(r.kv.freeBlocks()).isEqualTo(2000);
  }

  @Test
  void runningRequestsGoFirstAndWaitingOnesAreAdmittedInArrivalOrderWithTheRest() {
    Replica r = replica(1000, 8192, 1024);
    SimRequest a = request("a", tokens(1, 100), 5);
    r.enqueue(a);
    step(r); // a prefilled, first token
    SimRequest b = request("b", tokens(10_000, 8000), 5);
    SimRequest c = request("c", tokens(20_000, 500), 5);
    r.enqueue(b);
    r.enqueue(c);
    step(r);
    // a decodes 1 token, b gets its 8000-token prompt, c only the 191 tokens left of the budget
    assertThat(a.numComputed).isEqualTo(101);
    assertThat(b.numComputed).isEqualTo(8000);
    assertThat(c.numComputed).isEqualTo(191);
    assertThat(tokensOut).containsExactly("a*", "a", "b*");
  }

  @Test
  void aRequestIsAdmittedOnlyWhenItsWholePromptFitsNotJustItsFirstChunk() {
    Replica r = replica(20, 64, 64);
    SimRequest a = request("a", tokens(1, 160), 20); // 10 blocks, 12 once it is done
    r.enqueue(a);
    while (tokensOut.isEmpty()) {
      step(r); // a's prompt in chunks of 64 tokens, then its first token
    }
    // b's first chunk (63 tokens, 4 blocks) would fit in the 9 free blocks; its 300-token
    // prompt (19 blocks) does not, so it waits for a instead of being preempted half-way
    SimRequest b = request("b", tokens(5_000, 300), 5);
    r.enqueue(b);
    step(r);
    assertThat(b.numBlocks).isZero();
    assertThat(r.waitingCount()).isEqualTo(1);
    while (r.hasWork()) {
      step(r);
    }
    assertThat(finished).containsExactly("a", "b");
    assertThat(r.preemptions).isZero();
  }

  @Test
  void maxNumSeqsLimitsTheRunningBatch() {
    Replica r = replica(1000, 8192, 2);
    for (String id : List.of("a", "b", "c")) {
      r.enqueue(request(id, tokens(id.charAt(0) * 1000, 50), 3));
    }
    step(r);
    assertThat(r.runningCount()).isEqualTo(2);
    assertThat(r.waitingCount()).isEqualTo(1);
  }

  @Test
  void whenBlocksRunOutTheNewestRunningRequestIsPreemptedAndRecomputedLater() {
    Replica r = replica(10, 8192, 1024);
    SimRequest a = request("a", tokens(1, 64), 40); // 4 blocks, grows by one block per 16 tokens
    SimRequest b = request("b", tokens(5_000, 80), 40); // 5 blocks
    r.enqueue(a);
    r.enqueue(b);
    step(r);
    assertThat(r.runningCount()).isEqualTo(2);
    assertThat(r.kv.freeBlocks()).isEqualTo(1);
    // decode until a needs its 6th block while the pool is exhausted
    for (int i = 0; i < 20 && r.preemptions == 0; i++) {
      step(r);
    }
    assertThat(r.preemptions).isEqualTo(1);
    assertThat(b.numComputed).as("the newest request lost its KV").isZero();
    assertThat(b.numBlocks).isZero();
    assertThat(r.waitingCount()).isEqualTo(1);
    assertThat(a.preemptions).isZero();
    // once a finishes, b comes back and hits its own earlier blocks in the prefix cache
    while (r.hasWork()) {
      step(r);
    }
    assertThat(finished).containsExactly("a", "b");
    assertThat(r.preemptedTokensHit).isPositive();
  }

  @Test
  void aRecomputationAfterPreemptionIsLeftOutOfThePrefixCacheCountersAsVllmDoes() {
    Replica r = replica(10, 8192, 1024);
    SimRequest a = request("a", tokens(1, 64), 40);
    SimRequest b = request("b", tokens(5_000, 80), 40);
    r.enqueue(a);
    r.enqueue(b);
    while (r.hasWork()) {
      step(r);
    }
    assertThat(b.preemptions).isEqualTo(1);
    // the first admissions only: 64 + 80 prompt tokens, none of them cached
    assertThat(r.promptTokensQueried).isEqualTo(144);
    assertThat(r.promptTokensHit).isZero();
    // b came back with its prompt and the tokens it had generated, and found its own blocks
    assertThat(r.preemptedTokensQueried).isGreaterThan(80);
    assertThat(r.preemptedTokensHit).isPositive();
  }

  @Test
  void promptTokensAreCountedAsQueriedAndHitLikeVllmsCounters() {
    Replica r = replica(1000, 8192, 1024);
    int[] system = tokens(1, 320);
    r.enqueue(request("a", concat(system, tokens(1_000, 30)), 1));
    step(r);
    r.enqueue(request("b", concat(system, tokens(2_000, 30)), 1));
    step(r);
    assertThat(r.promptTokensQueried).isEqualTo(700);
    assertThat(r.promptTokensHit).isEqualTo(320);
  }

  @Test
  void aRequestAdmittedInTheSameStepHitsThePrefixAnEarlierOneIsComputing() {
    Replica r = replica(1000, 8192, 1024);
    int[] system = tokens(1, 320); // 20 blocks
    SimRequest a = request("a", concat(system, tokens(1_000, 30)), 1);
    SimRequest b = request("b", concat(system, tokens(2_000, 30)), 1);
    r.enqueue(a);
    r.enqueue(b);
    assertThat(r.scheduleStep()).isPositive();
    // a's blocks entered the prefix cache when a was scheduled, so b, scheduled right after it,
    // computes only its own 30 tokens
    assertThat(b.numComputed).isEqualTo(320);
    assertThat(b.blocks[0]).isEqualTo(a.blocks[0]);
    r.completeStep(0, sink);
    assertThat(r.promptTokensQueried).isEqualTo(700);
    assertThat(r.promptTokensHit).isEqualTo(320);
    assertThat(b.cachedAtFirstAdmission).isEqualTo(320);
  }

  @Test
  void aPromptChunkIsHitBeforeItsStepEnds() {
    Replica r = replica(1000, 256, 64);
    int[] system = tokens(1, 320);
    SimRequest a = request("a", concat(system, tokens(1_000, 30)), 1);
    r.enqueue(a);
    assertThat(r.scheduleStep()).isPositive(); // a's first 256 tokens: 16 blocks
    // a request arriving while that step runs finds those 16 blocks when the next step is
    // planned, though the step that computes them has not ended yet
    SimRequest b = request("b", concat(system, tokens(2_000, 30)), 1);
    r.enqueue(b);
    assertThat(r.kv.cachedPrefixBlocks(b)).isEqualTo(16);
  }

  @Test
  void publishedMetricsLookLikeAScrape() {
    Replica r = replica(1000, 8192, 1);
    r.enqueue(request("a", tokens(1, 160), 5));
    r.enqueue(request("b", tokens(9_000, 160), 5));
    step(r);
    var m = r.metrics(123);
    assertThat(m.runningRequests()).isEqualTo(1);
    assertThat(m.waitingRequests()).isEqualTo(1);
    assertThat(m.kvCacheUsage()).isEqualTo(10 / 1000.0);
    assertThat(m.kvCapacityBlocks()).isEqualTo(1000);
    assertThat(m.blockSizeTokens()).isEqualTo(16);
    assertThat(m.scrapedAtNanos()).isEqualTo(123);
  }

  @Test
  void theGaugesChangeOnlyWhenAStepEndsAsVllmComputesThemOncePerStep() {
    Replica r = replica(1000, 8192, 1);
    SimRequest a = request("a", tokens(1, 160), 2);
    r.enqueue(a);
    // arrived, not yet stepped: the last step's figures (none yet)
    assertThat(r.metrics(1).waitingRequests()).isZero();
    assertThat(r.metrics(1).runningRequests()).isZero();
    assertThat(r.metrics(1).kvCacheUsage()).isZero();
    assertThat(r.scheduleStep()).isPositive();
    // planned (a admitted, its blocks allocated) but the step has not ended
    assertThat(r.metrics(2).runningRequests()).isZero();
    assertThat(r.metrics(2).kvCacheUsage()).isZero();
    r.completeStep(3, sink);
    assertThat(r.metrics(3).runningRequests()).isEqualTo(1);
    assertThat(r.metrics(3).kvCacheUsage()).isEqualTo(10 / 1000.0); // the 160-token prompt
    SimRequest b = request("b", tokens(9_000, 160), 2);
    r.enqueue(b);
    assertThat(r.metrics(4).waitingRequests()).isZero(); // b arrived after the step ended
    step(r); // a's last token: a leaves, b is admitted in the next step
    var m = r.metrics(5);
    assertThat(m.runningRequests()).isZero();
    assertThat(m.waitingRequests()).isEqualTo(1);
    assertThat(m.kvCacheUsage()).isZero();
  }
}
