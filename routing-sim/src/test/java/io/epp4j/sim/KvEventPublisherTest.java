package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.kvevents.KvEvent;
import io.epp4j.kvevents.KvEventBatch;
import io.epp4j.kvevents.KvEventDecoder;
import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;
import org.junit.jupiter.params.provider.ValueSource;

class KvEventPublisherTest {

  @ParameterizedTest
  @ValueSource(booleans = {false, true})
  void bothEncodingsDecodeToTheSameEvents(boolean mapEncoding) throws Exception {
    int[] tokens = new int[32];
    for (int i = 0; i < tokens.length; i++) {
      tokens[i] = 1_000 + i;
    }
    // one hash above Long.MAX_VALUE as an unsigned 64-bit value, as vLLM sends it
    List<KvEvent> events = List.of(
        KvEvent.BlockStored.of(new long[] {-7L, 42L}, null, tokens, 16),
        KvEvent.BlockStored.of(new long[] {43L}, 42L, java.util.Arrays.copyOf(tokens, 16), 16),
        KvEvent.BlockRemoved.of(-7L, 43L),
        KvEvent.AllBlocksCleared.INSTANCE);
    byte[] payload = KvEventPublisher.encode(12.5, events, mapEncoding);
    KvEventBatch batch = KvEventDecoder.decode(payload);
    assertThat(batch.timestampSeconds()).isEqualTo(12.5);
    assertThat(batch.events()).isEqualTo(events);
    assertThat(batch.dataParallelRank()).isNegative();
  }

  @Test
  void aBatchTheFullQueueDropsLeavesAGapInTheSequence() throws Exception {
    List<KvEvent> step = List.of(KvEvent.BlockRemoved.of(1L));
    CountDownLatch gate = new CountDownLatch(1);
    int port = freePair();
    try (ZContext ctx = new ZContext(1);
        KvEventPublisher pub = new KvEventPublisher(ctx, "kv@test", port, port + 1, false, 2,
            gate)) {
      pub.publish(step); // 0
      pub.publish(step); // 1
      pub.publish(step); // 2: the queue holds two, the socket thread is held
      assertThat(pub.dropped()).isEqualTo(1);
      gate.countDown();
      List<Long> seqs = replayed(ctx, port + 1, 2);
      assertThat(seqs).containsExactly(0L, 1L);
      pub.publish(step); // 3: the thread has taken the first two
      seqs = replayed(ctx, port + 1, 3);
      // a subscriber sees 2 missing, asks the replay for it, and resyncs when it is not there
      assertThat(seqs).containsExactly(0L, 1L, 3L);
      assertThat(pub.dropped()).isEqualTo(1);
    }
  }

  /** The replay's sequence numbers once it holds at least {@code n} batches. */
  private static List<Long> replayed(ZContext ctx, int replayPort, int n) throws Exception {
    long deadline = System.nanoTime() + 20_000_000_000L;
    List<Long> seqs = List.of();
    while (seqs.size() < n) {
      assertThat(System.nanoTime()).as(n + " batches replayed in time").isLessThan(deadline);
      seqs = replayFromZero(ctx, replayPort);
    }
    return seqs;
  }

  /** Every buffered batch's sequence number, or none when the answer did not come in time. */
  private static List<Long> replayFromZero(ZContext ctx, int replayPort) throws Exception {
    List<Long> seqs = new ArrayList<>();
    ZMQ.Socket dealer = ctx.createSocket(SocketType.DEALER);
    try {
      dealer.setLinger(0);
      dealer.setReceiveTimeOut(2_000);
      dealer.connect("tcp://127.0.0.1:" + replayPort);
      dealer.sendMore(new byte[0]);
      dealer.send(ByteBuffer.allocate(8).putLong(0).array());
      while (true) {
        byte[] empty = dealer.recv();
        if (empty == null) {
          return List.of();
        }
        long seq = ByteBuffer.wrap(dealer.recv()).getLong();
        byte[] payload = dealer.recv();
        if (seq == -1) {
          return seqs;
        }
        assertThat(KvEventDecoder.decode(payload).events()).hasSize(1);
        seqs.add(seq);
      }
    } finally {
      dealer.close();
    }
  }

  private static int freePair() {
    for (int attempt = 0; attempt < 50; attempt++) {
      int base = ThreadLocalRandom.current().nextInt(30_000, 40_000);
      try (ServerSocket a = new ServerSocket(base, 1, InetAddress.getLoopbackAddress());
          ServerSocket b = new ServerSocket(base + 1, 1, InetAddress.getLoopbackAddress())) {
        return base;
      } catch (IOException taken) {
        // try another pair
      }
    }
    throw new AssertionError("no free pair of ports found");
  }
}
