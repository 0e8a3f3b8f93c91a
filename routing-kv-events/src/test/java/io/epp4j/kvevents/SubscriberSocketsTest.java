package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

class SubscriberSocketsTest {
  private static final byte[] FILTER = "kv@".getBytes(StandardCharsets.UTF_8);

  /**
   * kvEvents.receiveHighWaterMark is "messages ZeroMQ queues per socket": the replay socket, which
   * takes a whole replay's answer (up to the engine's buffer, thousands of batches) as fast as the
   * engine sends it, kept ZeroMQ's default of 1000 whatever was configured, so a long answer
   * backed up into the engine's ROUTER socket, which drops what does not fit.
   */
  @Test
  void theReplaySocketQueuesAsManyMessagesAsTheSubSocket() {
    int hwm = 25_000;
    long room = (long) hwm * KvEventDecoder.MAX_PAYLOAD_BYTES;
    try (SubscriberSockets sockets = new SubscriberSockets(FILTER, hwm, room)) {
      ZMQ.Socket sub = sockets.newSub();
      ZMQ.Socket replay = sockets.newReplaySocket("tcp://127.0.0.1:1");
      assertThat(sub.getRcvHWM()).isEqualTo(hwm);
      assertThat(replay.getRcvHWM()).isEqualTo(hwm);
    }
  }

  /**
   * ZeroMQ bounds its queue in messages only, and a message may be as large as the frame cap:
   * with the defaults (10,000 messages) one socket could hold 10,000 × 16 MiB. The queue is now
   * cut to what the byte bound holds at the largest size, on the SUB and the replay socket.
   */
  @Test
  void theDefaultsBoundEachSocketsQueueInBytesNotJustInMessages() {
    long bytes = KvEventSubscriber.DEFAULT_RECEIVE_BUFFER_BYTES;
    try (SubscriberSockets sockets = new SubscriberSockets(FILTER, 10_000, bytes)) {
      ZMQ.Socket sub = sockets.newSub();
      ZMQ.Socket replay = sockets.newReplaySocket("tcp://127.0.0.1:1");
      for (ZMQ.Socket s : new ZMQ.Socket[] {sub, replay}) {
        assertThat((long) s.getRcvHWM() * s.getMaxMsgSize()).isLessThanOrEqualTo(bytes);
        assertThat(s.getRcvHWM()).isEqualTo(16);
      }
    }
  }

  /**
   * An endpoint whose host is an IPv6 address: its SUB socket was opened with IPv6 on, its
   * replay socket without, which ZeroMQ then cannot connect to the address, so in an IPv6 pool
   * no gap was ever replayed (each resynchronised the endpoint instead).
   */
  @Test
  void theReplaySocketReachesAnIpv6Engine() {
    try (SubscriberSockets sockets = new SubscriberSockets(FILTER, 10, 256L << 20);
        ZContext engine = new ZContext(1)) {
      ZMQ.Socket router = engine.createSocket(SocketType.ROUTER);
      router.setIPv6(true);
      router.setLinger(0);
      int port = router.bindToRandomPort("tcp://[::1]");
      ZMQ.Socket dealer = sockets.newReplaySocket(SubscriberSockets.address("::1", port));
      dealer.sendMore(new byte[0]);
      dealer.send(new byte[] {0, 0, 0, 0, 0, 0, 0, 7});
      router.setReceiveTimeOut(5_000);
      byte[] identity = router.recv();
      assertThat(identity).as("the replay request reached the engine").isNotNull();
      assertThat(router.recv()).isEmpty();
      assertThat(router.recv()).containsExactly(0, 0, 0, 0, 0, 0, 0, 7);
    }
  }

  /**
   * Central mode bound at an IPv6 address (an IPv6-only cluster): ZeroMQ refused the address
   * ("::1 not found matching IPv4/IPv6 settings"), so the scorer could not be configured.
   */
  @Test
  void centralModeBindsAnIpv6Address() {
    try (KvEventSubscriber sub =
        KvEventSubscriber.central(KvBlockIndex.create(), "tcp://[::1]:*").build()) {
      assertThat(sub.boundEndpoint()).startsWith("tcp://[");
    }
  }

  @Test
  void theSmallerOfTheTwoBoundsWins() {
    int max = KvEventDecoder.MAX_PAYLOAD_BYTES;
    assertThat(SubscriberSockets.queuedMessages(5, 256L << 20)).isEqualTo(5);
    assertThat(SubscriberSockets.queuedMessages(10_000, max)).isEqualTo(1);
    assertThat(SubscriberSockets.queuedMessages(10_000, 2L * max - 1)).isEqualTo(1);
    assertThat(SubscriberSockets.queuedMessages(10_000, 3L * max)).isEqualTo(3);
    assertThat(SubscriberSockets.queuedMessages(Integer.MAX_VALUE, Long.MAX_VALUE))
        .isEqualTo(Integer.MAX_VALUE);
  }

  @Test
  void aReplayTimeoutTooLongToBeTimedIsRefusedNamingIt() {
    // ChronoUnit.FOREVER's duration, a natural "no timeout", failed in build() with a bare
    // "long overflow"; a thousand years was taken, and its deadline overflowed into the past,
    // so every replay timed out at once and every gap resynchronised
    for (java.time.Duration d : new java.time.Duration[] {
        java.time.temporal.ChronoUnit.FOREVER.getDuration(),
        java.time.Duration.ofDays(365L * 1000)}) {
      KvEventSubscriber.Builder b = KvEventSubscriber.perEndpoint(KvBlockIndex.create());
      assertThatThrownBy(() -> b.replayTimeout(d).build())
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("replayTimeout must be at most 365 days");
    }
    KvEventSubscriber.Builder b = KvEventSubscriber.perEndpoint(KvBlockIndex.create());
    assertThat(b.replayTimeout(KvEventSubscriber.MAX_REPLAY_TIMEOUT)).isSameAs(b);
  }

  /**
   * A replay waits whole milliseconds; a timeout between two is rounded up. Before, it was
   * rounded down, so a positive timeout under a millisecond (accepted as positive) became 0 and
   * every replay ended before it had waited for an answer.
   */
  @Test
  void aReplayTimeoutUnderAMillisecondIsRoundedUpNotDown() {
    long[][] cases = {{1, 1}, {500_000, 1}, {1_000_000, 1}, {1_500_000, 2}, {2_000_000, 2}};
    for (long[] c : cases) {
      try (KvEventSubscriber sub = KvEventSubscriber.perEndpoint(KvBlockIndex.create())
          .replayTimeout(java.time.Duration.ofNanos(c[0])).build()) {
        assertThat(sub.replayTimeoutMillis()).as("%d ns", c[0]).isEqualTo(c[1]);
      }
    }
  }

  @Test
  void aMissingReplayTimeoutIsRefusedNamingIt() {
    KvEventSubscriber.Builder b = KvEventSubscriber.perEndpoint(KvBlockIndex.create());
    assertThatThrownBy(() -> b.replayTimeout(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("replayTimeout");
  }

  @Test
  void aBufferThatCannotHoldOneMessageOfTheLargestSizeIsRefused() {
    KvEventSubscriber.Builder b = KvEventSubscriber.perEndpoint(KvBlockIndex.create());
    assertThatThrownBy(() -> b.receiveBufferBytes(KvEventDecoder.MAX_PAYLOAD_BYTES - 1))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("receiveBufferBytes must be >= "
            + KvEventDecoder.MAX_PAYLOAD_BYTES);
    assertThat(b.receiveBufferBytes(KvEventDecoder.MAX_PAYLOAD_BYTES)).isSameAs(b);
  }
}
