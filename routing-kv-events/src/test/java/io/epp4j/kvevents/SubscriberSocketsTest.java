package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.zeromq.ZMQ;

class SubscriberSocketsTest {

  /**
   * kvEvents.receiveHighWaterMark is "messages ZeroMQ queues per socket": the replay socket, which
   * takes a whole replay's answer (up to the engine's buffer, thousands of batches) as fast as the
   * engine sends it, kept ZeroMQ's default of 1000 whatever was configured, so a long answer
   * backed up into the engine's ROUTER socket, which drops what does not fit.
   */
  @Test
  void theReplaySocketQueuesAsManyMessagesAsTheSubSocket() {
    int hwm = 25_000;
    try (SubscriberSockets sockets =
        new SubscriberSockets("kv@".getBytes(StandardCharsets.UTF_8), hwm)) {
      ZMQ.Socket sub = sockets.newSub();
      ZMQ.Socket replay = sockets.newReplaySocket("tcp://127.0.0.1:1");
      assertThat(sub.getRcvHWM()).isEqualTo(hwm);
      assertThat(replay.getRcvHWM()).isEqualTo(hwm);
    }
  }
}
