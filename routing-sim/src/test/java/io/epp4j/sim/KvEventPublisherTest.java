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

  @Test
  void theReplayBufferKeepsAtMostItsBytesDroppingTheOldestFirst() throws Exception {
    int[] tokens = new int[2_000];
    for (int i = 0; i < tokens.length; i++) {
      tokens[i] = 100_000 + i; // three bytes each in msgpack: a long prompt's block, in little
    }
    long[] hashes = new long[tokens.length / 16];
    for (int i = 0; i < hashes.length; i++) {
      hashes[i] = 7L + i;
    }
    List<KvEvent> step = List.of(KvEvent.BlockStored.of(hashes, null, tokens, 16));
    long batch = 8 + KvEventPublisher.encode(1.5, step, false).length;
    long bound = 3 * batch + batch / 2; // three batches fit, a fourth does not
    int port = freePair();
    try (ZContext ctx = new ZContext(1);
        KvEventPublisher pub = new KvEventPublisher(ctx, "kv@test", port, port + 1, false,
            bound)) {
      for (int i = 0; i < 10; i++) {
        pub.publish(step);
      }
      long deadline = System.nanoTime() + 20_000_000_000L;
      List<Long> seqs = List.of();
      while (!seqs.contains(9L)) {
        assertThat(System.nanoTime()).as("batch 9 replayed in time").isLessThan(deadline);
        seqs = replayFrom(ctx, port + 1, 0);
      }
      assertThat(seqs).containsExactly(7L, 8L, 9L);
      assertThat(pub.bufferedBatches()).isEqualTo(3);
      assertThat(pub.bufferedBytes()).isEqualTo(3 * batch).isLessThanOrEqualTo(bound);
      // as vLLM: a sequence no longer kept gets what is kept from it on, then the end marker,
      // so the subscriber sees that 2..6 are gone
      assertThat(replayFrom(ctx, port + 1, 2)).containsExactly(7L, 8L, 9L);
      assertThat(replayFrom(ctx, port + 1, 8)).containsExactly(8L, 9L);
      assertThat(replayFrom(ctx, port + 1, 10)).isEmpty();
    }
  }

  @Test
  void aBatchLargerThanTheWholeByteBoundIsPublishedButNotKept() throws Exception {
    List<KvEvent> step = List.of(KvEvent.BlockRemoved.of(1L));
    int port = freePair();
    try (ZContext ctx = new ZContext(1);
        KvEventPublisher pub = new KvEventPublisher(ctx, "kv@test", port, port + 1, false, 8);
        ZMQ.Socket sub = ctx.createSocket(SocketType.SUB)) {
      sub.setReceiveTimeOut(200);
      sub.subscribe(new byte[0]);
      sub.connect("tcp://127.0.0.1:" + port);
      long deadline = System.nanoTime() + 20_000_000_000L;
      long seq = -1;
      while (seq < 0) {
        assertThat(System.nanoTime()).as("a batch published in time").isLessThan(deadline);
        pub.publish(step); // the subscription takes a moment to reach the socket
        byte[] topic = sub.recv();
        if (topic != null) {
          seq = ByteBuffer.wrap(sub.recv()).getLong();
          assertThat(KvEventDecoder.decode(sub.recv()).events()).isEqualTo(step);
        }
      }
      assertThat(replayFrom(ctx, port + 1, 0)).isEmpty();
      assertThat(pub.bufferedBytes()).isZero();
    }
  }

  @Test
  void theQueueToTheSocketThreadIsBoundedInBytesToo() throws Exception {
    // one step storing a 16M-token prompt (the same arrays each time: the test holds them once)
    int[] tokens = new int[1 << 24];
    long[] hashes = new long[tokens.length / 16];
    List<KvEvent> step = List.of(KvEvent.BlockStored.of(hashes, null, tokens, 16));
    long size = KvEventPublisher.heapBytes(step);
    assertThat(size).isGreaterThan(72L << 20);
    int fit = (int) (KvEventPublisher.QUEUE_BYTES / size);
    CountDownLatch gate = new CountDownLatch(1);
    int port = freePair();
    try (ZContext ctx = new ZContext(1)) {
      try (KvEventPublisher pub = new KvEventPublisher(ctx, "kv@test", port, port + 1, false,
          10_000, gate)) {
        for (int i = 0; i < fit + 5; i++) {
          pub.publish(step);
        }
        // far below the 10,000 batches the queue could take
        assertThat(pub.dropped()).isEqualTo(5);
      } finally {
        // the socket thread, held so far, sees the publisher closed and ends without sending
        gate.countDown();
      }
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
    return replayFrom(ctx, replayPort, 0);
  }

  /**
   * The sequence numbers the replay answers a request from {@code start} with, or none when the
   * answer did not come in time.
   */
  private static List<Long> replayFrom(ZContext ctx, int replayPort, long start)
      throws Exception {
    List<Long> seqs = new ArrayList<>();
    ZMQ.Socket dealer = ctx.createSocket(SocketType.DEALER);
    try {
      dealer.setLinger(0);
      dealer.setReceiveTimeOut(2_000);
      dealer.connect("tcp://127.0.0.1:" + replayPort);
      dealer.sendMore(new byte[0]);
      dealer.send(ByteBuffer.allocate(8).putLong(start).array());
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
