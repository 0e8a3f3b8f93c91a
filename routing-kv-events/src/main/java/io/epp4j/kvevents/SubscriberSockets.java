package io.epp4j.kvevents;

import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * The ZeroMQ context of one {@link KvEventSubscriber} and the options every socket it makes
 * needs: a frame larger than {@link KvEventDecoder#MAX_PAYLOAD_BYTES} is refused by ZeroMQ
 * before it is assembled, stalled handshakes are retried quickly, and reconnects back off.
 *
 * <p>Memory: ZeroMQ bounds a socket's receive queue in messages only (there is no byte
 * high-water mark), and one message may be as large as that frame cap. Each socket therefore
 * queues at most {@link #queuedMessages} = min(receive high-water mark, receive buffer bytes /
 * {@link KvEventDecoder#MAX_PAYLOAD_BYTES}) messages per connection, so the payloads of the
 * messages it holds never add up to more than the receive buffer bytes, whatever their size. A small
 * queue loses nothing on a SUB socket: over TCP a full queue makes ZeroMQ stop reading the
 * connection, and the backlog waits in the kernel's buffers and the engine's PUB queue (vLLM:
 * 100,000 messages), which drops beyond that, and the drop shows up as a sequence gap. A replay's
 * answer, which the engine's ROUTER drops rather than holds, is read ahead of applying it into a
 * buffer bounded in bytes too (see {@link EndpointStream}).
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
  private final int queuedMessages;

  /**
   * @param receiveHighWaterMark the most messages a socket queues per connection
   * @param receiveBufferBytes the most payload bytes a socket queues per connection; at least
   *     {@link KvEventDecoder#MAX_PAYLOAD_BYTES}
   */
  SubscriberSockets(byte[] topicFilter, int receiveHighWaterMark, long receiveBufferBytes) {
    this.topicFilter = topicFilter;
    this.queuedMessages = queuedMessages(receiveHighWaterMark, receiveBufferBytes);
  }

  /**
   * The ZeroMQ receive high-water mark that keeps a socket's queue within both bounds: at most
   * {@code receiveHighWaterMark} messages, and no more messages than {@code receiveBufferBytes}
   * holds at the largest size ZeroMQ lets through. At least 1.
   */
  static int queuedMessages(int receiveHighWaterMark, long receiveBufferBytes) {
    long fit = receiveBufferBytes / KvEventDecoder.MAX_PAYLOAD_BYTES;
    return (int) Math.max(1, Math.min(receiveHighWaterMark, fit));
  }


  /**
   * Whether a message with {@code topic} passes the topic filter. The sockets subscribe to every
   * topic and the filter is applied here, so that a message the filter turns away is counted and
   * reported rather than discarded by ZeroMQ unseen: an engine on vLLM's default empty topic
   * would otherwise leave the index empty without a word.
   */
  boolean passesFilter(byte[] topic) {
    return topic.length >= topicFilter.length
        && java.util.Arrays.equals(topic, 0, topicFilter.length, topicFilter, 0, topicFilter.length);
  }

  /** The topic filter, for reports. */
  String topicFilter() {
    return new String(topicFilter, java.nio.charset.StandardCharsets.UTF_8);
  }

  /** A SUB socket subscribed to every topic ({@link #passesFilter}), neither bound nor connected. */
  ZMQ.Socket newSub() {
    ZMQ.Socket s = context.createSocket(SocketType.SUB);
    s.setLinger(0);
    // a larger frame could not be decoded anyway; refusing it in ZeroMQ means it is never
    // assembled in memory (the connection is dropped and the loss shows up as a gap)
    s.setMaxMsgSize(KvEventDecoder.MAX_PAYLOAD_BYTES);
    s.setRcvHWM(queuedMessages);
    s.setReconnectIVL(100);
    s.setReconnectIVLMax(5_000);
    s.setHandshakeIvl(HANDSHAKE_MILLIS);
    s.subscribe(new byte[0]);
    return s;
  }

  /**
   * A DEALER socket connected to an engine's replay socket at {@code address}, which names an
   * IP address: a host name is looked up before ({@link HostLookups}), and the address it
   * resolved to is given here. Throws what ZeroMQ throws when it refuses the address (a port
   * out of range), having closed the socket: the context would otherwise keep it, and its file
   * descriptors, until the subscriber closes.
   */
  ZMQ.Socket newReplaySocket(String address) {
    ZMQ.Socket d = context.createSocket(SocketType.DEALER);
    try {
      d.setLinger(0);
      if (ipv6Literal(address)) {
        d.setIPv6(true); // as the SUB socket of the same host: without it ZeroMQ refuses [::1]
      }
      d.setMaxMsgSize(KvEventDecoder.MAX_PAYLOAD_BYTES);
      // the same bound as the SUB's: a replay's answer, which comes as fast as the engine sends
      // it, is read ahead into a buffer bounded in bytes rather than left queued here
      d.setRcvHWM(queuedMessages);
      d.setHandshakeIvl(HANDSHAKE_MILLIS);
      d.setReconnectIVL(100);
      d.connect(address);
    } catch (RuntimeException e) {
      d.close();
      throw e;
    }
    return d;
  }

  /**
   * A PAIR socket reading the disconnect events of {@code sub}'s connections, or null when ZeroMQ
   * does not start the monitor. Each SUB socket connects to one publisher, so a disconnect is
   * that endpoint's engine going away (a restart, a crash, the connection cut).
   */
  ZMQ.@org.jspecify.annotations.Nullable Socket newDisconnectMonitor(ZMQ.Socket sub) {
    String address = "inproc://epp4j-kv-events-monitor-" + MONITORS.incrementAndGet();
    if (!sub.monitor(address, ZMQ.EVENT_DISCONNECTED)) {
      return null;
    }
    ZMQ.Socket m = context.createSocket(SocketType.PAIR);
    m.setLinger(0);
    m.connect(address);
    return m;
  }

  /** Names the monitor addresses, which are process-wide. */
  private static final java.util.concurrent.atomic.AtomicLong MONITORS =
      new java.util.concurrent.atomic.AtomicLong();

  /** Sockets made here and not closed yet; for tests. */
  int openSockets() {
    return context.getSockets().size();
  }

  ZMQ.Poller newPoller() {
    return context.createPoller(1);
  }

  /** Whether a ZeroMQ address names an IPv6 host literally ({@code tcp://[::1]:5557}). */
  static boolean ipv6Literal(String address) {
    return address.contains("://[");
  }

  /** Four dot-separated decimal numbers: resolving one needs no lookup and yields IPv4. */
  static boolean isIpv4Literal(String host) {
    int dots = 0;
    for (int i = 0; i < host.length(); i++) {
      char c = host.charAt(i);
      if (c == '.') {
        dots++;
      } else if (c < '0' || c > '9') {
        return false;
      }
    }
    return dots == 3;
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
