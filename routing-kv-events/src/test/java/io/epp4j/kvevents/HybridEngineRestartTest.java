package io.epp4j.kvevents;

import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.await;
import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.connectedPublisher;
import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.publish;
import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.EPS;
import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.candidates;
import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.prompt;
import static io.epp4j.kvevents.PrecisePrefixCacheScorerTest.request;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * A replica whose engine restarts (the subscriber sees its seq go back: README "If seq goes back
 * at or below the last live seq, the publisher has restarted with an empty cache") holds none of
 * the old engine's blocks. The hybrid must not keep crediting them: that is the engine's word
 * (an empty cache), not the index losing track on its own.
 */
@Timeout(60)
class HybridEngineRestartTest {
  private static final VllmEventEncoder ENCODER =
      new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);

  @Test
  void aRestartedReplicaIsNotCreditedWithTheOldEnginesBlocks() {
    AtomicLong now = new AtomicLong(1_000_000_000L);
    KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();
    Endpoint home = EPS.get(2);
    String topic = "kv@" + home.id() + "@m";
    List<Candidate> pool = candidates(EPS);
    int[] p = prompt(31, 161); // 10 blocks of 16 and a token: all 10 may be served
    try (KvEventSubscriber sub = KvEventSubscriber.central(index, "tcp://127.0.0.1:*").build();
        ZContext ctx = new ZContext(1)) {
      PrecisePrefixCacheScorer precise =
          new PrecisePrefixCacheScorer(index, null, sub, 1024, false, true, false);
      HybridPrefixCacheScorer hybrid =
          new HybridPrefixCacheScorer(precise, 0.8, 600_000_000_000L, 1000, false);
      EPS.forEach(hybrid::onEndpointAdded);
      ZMQ.Socket pub = connectedPublisher(ctx, sub.boundEndpoint());
      long[] hashes = new long[10];
      for (int i = 0; i < 10; i++) {
        hashes[i] = 700 + i;
      }
      // the old engine stores the prompt (seq 0..4, the prompt at seq 4)
      for (long seq = 0; seq < 4; seq++) {
        publish(pub, topic, seq, ENCODER.encode(KvEventBatch.of(1, List.of(
            KvEvent.BlockStored.of(new long[] {9000 + seq}, null, prompt(90 + (int) seq, 16),
                16)))));
      }
      publish(pub, topic, 4, ENCODER.encode(KvEventBatch.of(1, List.of(
          KvEvent.BlockStored.of(hashes, null, Arrays.copyOf(p, 160), 16)))));
      KvEventMetrics m = index.metrics();
      await(() -> m.batches() == 5, () -> "applied: " + m);
      assertThat(scores(hybrid, pool, p, now.get())).containsExactly(0.0, 0.0, 1.0);

      // the engine restarts: a new process numbers from 0 again, its cache empty
      publish(pub, topic, 0, ENCODER.encode(KvEventBatch.of(2, List.of(
          KvEvent.BlockStored.of(new long[] {5}, null, prompt(77, 16), 16)))));
      await(() -> m.restarts() == 1 && m.batches() == 6, () -> "restart handled: " + m);
      now.addAndGet(5_000_000_000L);
      assertThat(index.blockCount(home.id())).isEqualTo(1);
      assertThat(scores(hybrid, pool, p, now.get()))
          .as("the restarted engine holds nothing of the prompt")
          .containsExactly(0.0, 0.0, 0.0);
      hybrid.close();
      pub.close();
    }
  }

  private static double[] scores(HybridPrefixCacheScorer hybrid, List<Candidate> pool, int[] p,
      long nowNanos) {
    double[] out = new double[pool.size()];
    hybrid.score(request(p), new CycleState(nowNanos, new Random(1)), pool, out);
    return out;
  }
}
