package io.epp4j.kvevents;

import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * The ZeroMQ context of one {@link KvEventSubscriber} and the options every socket it makes
 * needs: a frame larger than {@link KvEventDecoder#MAX_PAYLOAD_BYTES} is refused by ZeroMQ
 * before it is assembled, stalled handshakes are retried quickly, and reconnects back off.
 *
 * <p>Threading: ZeroMQ sockets are not thread-safe; every socket made here is made, used and
 * closed on the subscriber thread, which also closes the context when it ends.
 */
final class SubscriberSockets implements AutoCloseable {
  /**
   * A connection whose ZMTP handshake has not finished by then is dropped and retried; JeroMQ
   * connections occasionally stall in the handshake, and the default (30 s) would leave an
   * endpoint without events for that long.
   */
  private static final int HANDSHAKE_MILLIS = 2_000;

  private final ZContext context = new ZContext(1);
  private final byte[] topicFilter;
  private final int receiveHighWaterMark;

  SubscriberSockets(byte[] topicFilter, int receiveHighWaterMark) {
    this.topicFilter = topicFilter;
    this.receiveHighWaterMark = receiveHighWaterMark;
  }

  /** A SUB socket subscribed to the topic filter, neither bound nor connected. */
  ZMQ.Socket newSub() {
    ZMQ.Socket s = context.createSocket(SocketType.SUB);
    s.setLinger(0);
    // a larger frame could not be decoded anyway; refusing it in ZeroMQ means it is never
    // assembled in memory (the connection is dropped and the loss shows up as a gap)
    s.setMaxMsgSize(KvEventDecoder.MAX_PAYLOAD_BYTES);
    s.setRcvHWM(receiveHighWaterMark);
    s.setReconnectIVL(100);
    s.setReconnectIVLMax(5_000);
    s.setHandshakeIvl(HANDSHAKE_MILLIS);
    s.subscribe(topicFilter);
    return s;
  }

  /**
   * A DEALER socket connected to an engine's replay socket at {@code address}. Throws what
   * ZeroMQ throws when it refuses the address (a host it cannot resolve, a port out of range),
   * having closed the socket: the context would otherwise keep it, and its file descriptors,
   * until the subscriber closes.
   */
  ZMQ.Socket newReplaySocket(String address) {
    ZMQ.Socket d = context.createSocket(SocketType.DEALER);
    try {
      d.setLinger(0);
      d.setMaxMsgSize(KvEventDecoder.MAX_PAYLOAD_BYTES);
      // a replay's answer comes as fast as the engine sends it: room for as many as the SUB has
      d.setRcvHWM(receiveHighWaterMark);
      d.setHandshakeIvl(HANDSHAKE_MILLIS);
      d.setReconnectIVL(100);
      d.connect(address);
    } catch (RuntimeException e) {
      d.close();
      throw e;
    }
    return d;
  }

  /** Sockets made here and not closed yet; for tests. */
  int openSockets() {
    return context.getSockets().size();
  }

  ZMQ.Poller newPoller() {
    return context.createPoller(1);
  }

  /** {@code tcp://host:port}, with an IPv6 host in brackets. */
  static String address(String host, int port) {
    return host.indexOf(':') >= 0 ? "tcp://[" + host + "]:" + port : "tcp://" + host + ":" + port;
  }

  /** Closes the context and every socket still open in it. */
  @Override
  public void close() {
    context.close();
  }
}
