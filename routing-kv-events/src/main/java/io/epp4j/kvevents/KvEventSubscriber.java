package io.epp4j.kvevents;

import io.epp4j.api.Endpoint;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * Consumes vLLM KV events over ZeroMQ and applies them to a {@link KvBlockIndex}. Either one SUB
 * socket per endpoint ({@code tcp://<host>:<port>}, following the router's pool through
 * {@link #addEndpoint}/{@link #removeEndpoint}) or one bound SUB socket that every engine
 * connects to (central mode; the endpoint is read from the topic {@code kv@<host:port>@<model>}).
 *
 * <p>Messages are {@code [topic, seq (8 bytes big-endian), payload]}. Per endpoint the
 * subscriber checks the sequence: a gap is filled from the engine's replay socket when one is
 * configured (DEALER request {@code [, start seq]}, replies {@code [, seq, payload]} ending with
 * seq −1), otherwise the endpoint's entries are dropped and rebuilt from new events (a resync);
 * a publisher restart (sequence going back) also resyncs, because a new engine process starts
 * with an empty cache; the same message delivered twice is ignored. Malformed messages, and
 * messages whose handling fails, are counted in {@link KvEventMetrics#decodeErrors()}, reported
 * in the log at most once per {@link #REPORT_INTERVAL} and dropped: nothing a socket delivers
 * ends the subscriber. One background thread owns every socket.
 *
 * <p>Only endpoints in the pool ({@link #addEndpoint} and not {@link #removeEndpoint} since) get
 * state in the index. Once {@code removeEndpoint} has returned, no batch of that endpoint is
 * applied any more, even one already queued, and its blocks are forgotten. In central mode a
 * message whose topic names no pool member is dropped and counted in
 * {@link KvEventMetrics#unknownEndpointMessages()}, so that a publisher inventing endpoint names
 * cannot make the index grow.
 */
public final class KvEventSubscriber implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(KvEventSubscriber.class.getName());

  /** Endpoint label overriding the KV-events port of one endpoint. */
  public static final String PORT_LABEL = "epp4j.io/kv-events-port";
  /** Endpoint label giving the replay port of one endpoint (0 or absent: the configured one). */
  public static final String REPLAY_PORT_LABEL = "epp4j.io/kv-events-replay-port";
  /**
   * A connection whose ZMTP handshake has not finished by then is dropped and retried; JeroMQ
   * connections occasionally stall in the handshake, and the default (30 s) would leave an
   * endpoint without events for that long.
   */
  private static final int HANDSHAKE_MILLIS = 2_000;

  /** vLLM's default KV-events port. */
  public static final int DEFAULT_PORT = 5557;

  /**
   * Least time between two log reports of dropped messages. A publisher that sends garbage sends
   * it with every step; one line with a count says as much as thousands.
   */
  public static final Duration REPORT_INTERVAL = Duration.ofSeconds(30);

  private final KvBlockIndex index;
  private final KvEventMetrics metrics;
  private final @Nullable String bindAddress;
  private final int port;
  private final int replayPort;
  private final byte[] topicFilter;
  private final long replayTimeoutMillis;
  private final int receiveHighWaterMark;
  private final ConcurrentLinkedQueue<Runnable> commands = new ConcurrentLinkedQueue<>();
  private final Map<String, Stream> streams = new HashMap<>(); // owned by the thread
  private final Map<ZMQ.Socket, Stream> bySocket = new java.util.IdentityHashMap<>(); // ditto
  private final List<ZMQ.Socket> subSockets = new ArrayList<>(); // owned by the thread
  /**
   * The pool: endpoint id → the membership it was added with (a new object for every add, so a
   * stream of an earlier membership of the same id is told apart). Changed only under
   * {@link #membershipLock}; read without it only to find or open a stream, never to decide
   * whether a batch is applied.
   */
  private final Map<String, Object> members = new java.util.concurrent.ConcurrentHashMap<>();
  /**
   * Held by the subscriber thread from the membership check to the end of each index write, and
   * by {@link #removeEndpoint} while it takes an endpoint out of the pool and forgets it. A
   * removal therefore waits for at most one batch, and every write after it sees the endpoint
   * gone; holding it only per batch (not through a replay's wait) keeps that wait short.
   */
  private final Object membershipLock = new Object();
  private final AtomicInteger connected = new AtomicInteger();
  private final Thread thread;
  private final ZContext context = new ZContext(1);
  private volatile boolean closed;
  private volatile @Nullable String boundEndpoint;
  private final java.util.concurrent.CountDownLatch started = new java.util.concurrent.CountDownLatch(1);
  private volatile @Nullable RuntimeException startFailure;
  // drop reports; owned by the thread
  private final Report malformed = new Report();
  private final Report unknownTopics = new Report();

  /** Rate limit of one kind of log report; owned by the subscriber thread. */
  private static final class Report {
    long sinceReport;
    long lastNanos;
    boolean reported;

    /** Counts one occurrence; true when it is time to log (then the count starts over). */
    boolean due() {
      sinceReport++;
      long now = System.nanoTime();
      if (reported && now - lastNanos < REPORT_INTERVAL.toNanos()) {
        return false;
      }
      reported = true;
      lastNanos = now;
      return true;
    }
  }

  /** Per-endpoint stream state. */
  private final class Stream {
    final String endpointId;
    /** The membership this stream belongs to; its batches apply only while it is current. */
    final Object member;
    final ZMQ.@Nullable Socket sub;
    final @Nullable String replayAddress;
    ZMQ.@Nullable Socket replay;
    long expected = -1;
    long lastLiveSeq = -1;
    /** The payload of {@link #lastLiveSeq}: tells a message delivered twice from a restart. */
    byte @Nullable [] lastLivePayload;

    Stream(String endpointId, Object member, ZMQ.@Nullable Socket sub,
        @Nullable String replayAddress) {
      this.endpointId = endpointId;
      this.member = member;
      this.sub = sub;
      this.replayAddress = replayAddress;
    }
  }

  private KvEventSubscriber(Builder b) {
    this.index = b.index;
    this.metrics = b.index.metrics();
    this.bindAddress = b.bindAddress;
    this.port = b.port;
    this.replayPort = b.replayPort;
    this.topicFilter = b.topicFilter.getBytes(StandardCharsets.UTF_8);
    this.replayTimeoutMillis = b.replayTimeout.toMillis();
    this.receiveHighWaterMark = b.receiveHighWaterMark;
    this.thread = new Thread(this::run, "epp4j-kv-events");
    this.thread.setDaemon(true);
    this.thread.start();
    // sockets belong to the subscriber thread: it binds, the caller waits for the outcome
    try {
      if (!started.await(10, java.util.concurrent.TimeUnit.SECONDS)) {
        throw new IllegalStateException("KV-event subscriber did not start in time");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while starting the KV-event subscriber", e);
    }
    RuntimeException failure = startFailure;
    if (failure != null) {
      throw failure;
    }
  }

  /** A subscriber that connects to each endpoint added to it. */
  public static Builder perEndpoint(KvBlockIndex index) {
    return new Builder(index, null);
  }

  /** A subscriber bound at {@code address} (e.g. {@code tcp://*:5557}) that engines connect to. */
  public static Builder central(KvBlockIndex index, String address) {
    return new Builder(index, Objects.requireNonNull(address, "address"));
  }

  /** In central mode, the address actually bound (useful with port 0 / wildcard). */
  public @Nullable String boundEndpoint() {
    return boundEndpoint;
  }

  /**
   * Adds an endpoint to the pool this subscriber applies events for. Per-endpoint mode also
   * connects to its publisher (asynchronously); in central mode its topic is accepted from now
   * on. Adding an endpoint already in the pool does nothing.
   */
  public void addEndpoint(Endpoint endpoint) {
    String id = endpoint.id();
    Object member = new Object();
    synchronized (membershipLock) {
      if (members.putIfAbsent(id, member) != null) {
        return;
      }
    }
    if (bindAddress == null && !closed) {
      commands.add(() -> connect(endpoint, member));
    }
  }

  /**
   * Takes an endpoint out of the pool and forgets its blocks in the index. When this returns no
   * batch of the endpoint is applied any more, including batches already received and queued;
   * they are counted in {@link KvEventMetrics#unknownEndpointMessages()}. Its socket is closed
   * asynchronously. Waits for at most the one batch the subscriber may be applying.
   */
  public void removeEndpoint(Endpoint endpoint) {
    String id = endpoint.id();
    Object member;
    synchronized (membershipLock) {
      member = members.remove(id);
      if (member == null) {
        return;
      }
      // under the lock: no write of this endpoint can come between the two
      index.removeEndpoint(id);
    }
    if (!closed) {
      commands.add(() -> disconnect(id, member));
    }
  }

  /** Endpoints with a live SUB socket (per-endpoint mode). */
  public int connectedEndpoints() {
    return connected.get();
  }

  /** The counters this subscriber updates (shared with its index). */
  public KvEventMetrics metrics() {
    return metrics;
  }

  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    try {
      thread.join(5_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  // ----------------------------------------------------------------------- subscriber thread

  private ZMQ.Socket newSub() {
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

  private ZMQ.Socket newReplaySocket(String address) {
    ZMQ.Socket d = context.createSocket(SocketType.DEALER);
    d.setLinger(0);
    d.setMaxMsgSize(KvEventDecoder.MAX_PAYLOAD_BYTES);
    d.setHandshakeIvl(HANDSHAKE_MILLIS);
    d.setReconnectIVL(100);
    d.connect(address);
    return d;
  }

  private static String address(String host, int port) {
    return host.indexOf(':') >= 0 ? "tcp://[" + host + "]:" + port : "tcp://" + host + ":" + port;
  }

  private static int labelInt(Endpoint e, String label, int def) {
    String v = e.label(label);
    if (v == null) {
      return def;
    }
    try {
      return Integer.parseInt(v.trim());
    } catch (NumberFormatException ex) {
      return def;
    }
  }

  private void connect(Endpoint e, Object member) {
    if (members.get(e.id()) != member) {
      return; // removed again before the subscriber got to it
    }
    if (streams.containsKey(e.id())) {
      disconnect(e.id(), streams.get(e.id()).member); // an earlier membership's, not yet closed
    }
    int p = labelInt(e, PORT_LABEL, port);
    int rp = labelInt(e, REPLAY_PORT_LABEL, replayPort);
    ZMQ.Socket s = newSub();
    try {
      if (e.host().indexOf(':') >= 0) {
        s.setIPv6(true);
      }
      s.connect(address(e.host(), p));
    } catch (RuntimeException ex) {
      s.close();
      throw ex;
    }
    subSockets.add(s);
    Stream st = new Stream(e.id(), member, s, rp > 0 ? address(e.host(), rp) : null);
    if (st.replayAddress != null) {
      st.replay = newReplaySocket(st.replayAddress); // connected ahead of the first gap
    }
    streams.put(e.id(), st);
    bySocket.put(s, st);
    connected.incrementAndGet();
  }

  /** Closes the stream of {@code id} if it still belongs to {@code member}. */
  private void disconnect(String id, Object member) {
    Stream st = streams.get(id);
    if (st == null || st.member != member) {
      return;
    }
    streams.remove(id);
    if (st.sub != null) {
      bySocket.remove(st.sub);
      subSockets.remove(st.sub);
      st.sub.close();
      connected.decrementAndGet();
    }
    if (st.replay != null) {
      st.replay.close();
    }
  }

  private void run() {
    try {
      if (bindAddress != null) {
        ZMQ.Socket s = newSub();
        s.bind(bindAddress);
        boundEndpoint = s.getLastEndpoint();
        subSockets.add(s);
      }
    } catch (RuntimeException e) {
      startFailure = e;
      closed = true;
      context.close();
      return;
    } finally {
      started.countDown();
    }
    try (ZMQ.Poller poller = context.createPoller(1)) {
      List<ZMQ.Socket> registered = new ArrayList<>();
      while (!closed) {
        Runnable c;
        while ((c = commands.poll()) != null) {
          try {
            c.run();
          } catch (RuntimeException | Error e) {
            rethrowIfFatal(e);
            LOG.log(Level.WARNING, "KV-event subscriber could not follow a pool change", e);
          }
        }
        if (!registered.equals(subSockets)) {
          for (ZMQ.Socket s : registered) {
            poller.unregister(s);
          }
          registered = new ArrayList<>(subSockets);
          for (ZMQ.Socket s : registered) {
            poller.register(s, ZMQ.Poller.POLLIN);
          }
        }
        if (registered.isEmpty()) {
          sleepQuietly(20);
          continue;
        }
        poller.poll(50);
        for (ZMQ.Socket s : registered) {
          for (int i = 0; i < 256; i++) { // bounded so commands and other sockets get a turn
            if (!receiveOne(s)) {
              break;
            }
          }
        }
      }
    } catch (RuntimeException | Error e) {
      // only ZeroMQ itself failing gets here: messages are guarded one by one
      if (!closed) {
        LOG.log(Level.SEVERE, "KV-event subscriber stopped unexpectedly", e);
      }
      rethrowIfFatal(e);
    } finally {
      for (Stream st : streams.values()) {
        if (st.replay != null) {
          st.replay.close();
        }
      }
      context.close();
    }
  }

  private static void sleepQuietly(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * Errors after which nothing can be trusted any more end the thread; everything else a message
   * causes (a stack overflow, a failed allocation, a bug in a listener) costs only that message.
   */
  private static void rethrowIfFatal(Throwable t) {
    if (t instanceof VirtualMachineError && !(t instanceof StackOverflowError)
        && !(t instanceof OutOfMemoryError)) {
      throw (VirtualMachineError) t;
    }
  }

  /**
   * Counts a dropped message and reports it in the log, at most once per
   * {@link #REPORT_INTERVAL}; the report says how many were dropped since the previous one.
   */
  private void dropped(String source, String reason, @Nullable Throwable failure) {
    metrics.decodeErrors.increment();
    if (!malformed.due()) {
      return;
    }
    String msg = "dropped " + malformed.sinceReport + " KV-event message(s) since the last report"
        + " (the total is the decodeErrors metric); the latest, from " + printable(source)
        + ": " + reason;
    malformed.sinceReport = 0;
    LOG.log(failure == null ? Level.WARNING : Level.SEVERE, msg, failure);
  }

  /**
   * Counts a central-mode message whose topic names no pool member; reported like
   * {@link #dropped}. Publishers that reach the bound port and are not in the pool (a
   * misconfigured engine, an engine whose endpoint already left, or a hostile sender) show here.
   */
  private void unknownTopic(String endpointId) {
    metrics.unknownEndpointMessages.increment();
    if (!unknownTopics.due()) {
      return;
    }
    String msg = "dropped " + unknownTopics.sinceReport + " KV-event message(s) since the last"
        + " report whose topic names an endpoint not in the pool (the total is the"
        + " unknownEndpointMessages metric); the latest for " + printable(endpointId);
    unknownTopics.sinceReport = 0;
    LOG.warning(msg);
  }

  /** A publisher-chosen name, safe to put on one log line. */
  private static String printable(String s) {
    StringBuilder b = new StringBuilder(Math.min(s.length(), 100));
    for (int i = 0; i < s.length() && i < 100; i++) {
      char c = s.charAt(i);
      b.append(Character.isISOControl(c) ? '?' : c);
    }
    return s.length() > 100 ? b.append("...").toString() : b.toString();
  }

  /** Reads and handles one message; false when none was waiting. */
  private boolean receiveOne(ZMQ.Socket s) {
    byte[] topic = s.recv(ZMQ.DONTWAIT);
    if (topic == null) {
      return false;
    }
    int frames = 1;
    byte[] seqFrame = null;
    byte[] payload = null;
    while (s.hasReceiveMore()) {
      byte[] f = s.recv();
      frames++;
      if (frames == 2) {
        seqFrame = f;
      } else if (frames == 3) {
        payload = f;
      }
    }
    Stream st = null;
    try {
      if (frames != 3 || seqFrame == null || payload == null || seqFrame.length != 8) {
        dropped(source(s, topic), "expected [topic, 8-byte seq, payload], got " + frames
            + " frame(s)" + (seqFrame == null ? "" : " with a " + seqFrame.length
            + "-byte seq"), null);
        return true;
      }
      long seq = ByteBuffer.wrap(seqFrame).getLong();
      st = streamFor(s, topic);
      if (st != null) {
        onLive(st, seq, payload);
      }
    } catch (RuntimeException | Error e) {
      rethrowIfFatal(e);
      dropped(st != null ? st.endpointId : source(s, topic), "handling failed", e);
    }
    return true;
  }

  /** Who sent a message, for reports: the endpoint or, in central mode, the topic's. */
  private String source(ZMQ.Socket s, byte[] topic) {
    if (bindAddress == null) {
      Stream st = bySocket.get(s);
      return st == null ? "an endpoint no longer followed" : st.endpointId;
    }
    return endpointFromTopic(new String(topic, StandardCharsets.UTF_8));
  }

  private @Nullable Stream streamFor(ZMQ.Socket s, byte[] topic) {
    if (bindAddress == null) {
      return bySocket.get(s);
    }
    String id = endpointFromTopic(new String(topic, StandardCharsets.UTF_8));
    Object member = members.get(id);
    if (member == null) {
      unknownTopic(id); // no stream, no index state: the topic alone creates nothing
      return null;
    }
    Stream st = streams.get(id);
    if (st == null || st.member != member) {
      // new, or re-added since its last stream: the sequence starts over
      st = new Stream(id, member, null, null);
      streams.put(id, st);
    }
    return st;
  }

  /** {@code kv@<host:port>@<model>} → {@code host:port}; other topics are used whole. */
  static String endpointFromTopic(String topic) {
    int a = topic.indexOf('@');
    if (a < 0) {
      return topic;
    }
    int b = topic.indexOf('@', a + 1);
    return b < 0 ? topic.substring(a + 1) : topic.substring(a + 1, b);
  }

  private void onLive(Stream st, long seq, byte[] payload) {
    if (seq == st.lastLiveSeq && Arrays.equals(payload, st.lastLivePayload)) {
      // delivered twice; a restarted engine reaching the same seq would say something else
      metrics.duplicates.increment();
      return;
    }
    boolean restart = st.lastLiveSeq >= 0 && seq <= st.lastLiveSeq;
    st.lastLiveSeq = seq;
    st.lastLivePayload = payload;
    if (restart) {
      metrics.restarts.increment();
      resync(st);
      st.expected = seq;
    } else if (st.expected >= 0 && seq < st.expected) {
      metrics.duplicates.increment(); // already applied through a replay
      return;
    } else if (st.expected >= 0 && seq > st.expected) {
      metrics.gaps.increment();
      metrics.missedBatches.add(seq - st.expected);
      if (st.replayAddress == null || !replay(st, seq)) {
        if (st.replayAddress != null) {
          metrics.replayFailures.increment();
        }
        resync(st);
        st.expected = seq;
      }
      if (seq < st.expected) {
        return; // the replay delivered this batch too
      }
    }
    applyPayload(st, payload);
    st.expected = seq + 1;
  }

  private void applyPayload(Stream st, byte[] payload) {
    KvEventBatch batch;
    try {
      batch = KvEventDecoder.decode(payload);
    } catch (MalformedKvEventException e) {
      dropped(st.endpointId, e.getMessage(), null); // names the field, never token IDs
      return;
    }
    try {
      synchronized (membershipLock) {
        if (members.get(st.endpointId) != st.member) {
          // the endpoint left (perhaps while this batch waited in a queue): applying it would
          // recreate the state its removal freed, and an id that never returns is never freed
          metrics.unknownEndpointMessages.increment();
          return;
        }
        index.apply(st.endpointId, batch);
      }
    } catch (RuntimeException | Error e) {
      rethrowIfFatal(e);
      dropped(st.endpointId, "applying a batch failed", e);
      // the batch stopped part-way: what the index holds for the endpoint is no longer known
      resync(st);
    }
  }

  /** Drops the endpoint's entries to start over, unless it has left the pool. */
  private void resync(Stream st) {
    synchronized (membershipLock) {
      if (members.get(st.endpointId) == st.member) {
        index.resync(st.endpointId);
      }
    }
  }

  /**
   * Asks the engine's replay socket for batches from {@code st.expected} and applies them.
   * Returns true when the stream reached {@code upTo} without holes.
   */
  private boolean replay(Stream st, long upTo) {
    metrics.replays.increment();
    if (st.replay == null) {
      st.replay = newReplaySocket(Objects.requireNonNull(st.replayAddress));
    }
    ZMQ.Socket d = st.replay;
    d.sendMore(new byte[0]);
    d.send(ByteBuffer.allocate(8).putLong(st.expected).array());
    long deadline = System.nanoTime() + replayTimeoutMillis * 1_000_000L;
    boolean holes = false;
    for (;;) {
      long left = (deadline - System.nanoTime()) / 1_000_000L;
      if (left <= 0) {
        // late replies would confuse the next replay: start over with a fresh socket
        d.close();
        st.replay = null;
        return false;
      }
      d.setReceiveTimeOut((int) Math.min(Integer.MAX_VALUE, left));
      byte[] first = d.recv();
      if (first == null) {
        continue;
      }
      List<byte[]> frames = new ArrayList<>(3);
      frames.add(first);
      while (d.hasReceiveMore()) {
        frames.add(d.recv());
      }
      if (!frames.isEmpty() && frames.get(0).length == 0) {
        frames.remove(0); // envelope delimiter
      }
      if (frames.isEmpty() || frames.get(0).length != 8) {
        dropped(st.endpointId, "replay reply without an 8-byte seq", null);
        continue;
      }
      long seq = ByteBuffer.wrap(frames.get(0)).getLong();
      if (seq == -1) {
        return !holes && st.expected >= upTo;
      }
      if (seq < st.expected || frames.size() < 2) {
        continue;
      }
      if (seq > st.expected) {
        holes = true; // the engine no longer buffers what we missed
        continue;
      }
      if (holes) {
        continue;
      }
      applyPayload(st, frames.get(1));
      st.expected = seq + 1;
      metrics.replayedBatches.increment();
    }
  }

  /** Builds and starts a {@link KvEventSubscriber}. */
  public static final class Builder {
    private final KvBlockIndex index;
    private final @Nullable String bindAddress;
    private int port = DEFAULT_PORT;
    private int replayPort;
    private String topicFilter = "kv@";
    private Duration replayTimeout = Duration.ofSeconds(1);
    private int receiveHighWaterMark = 10_000;

    private Builder(KvBlockIndex index, @Nullable String bindAddress) {
      this.index = Objects.requireNonNull(index, "index");
      this.bindAddress = bindAddress;
    }

    /** Port of each engine's KV-event publisher (default 5557). */
    public Builder port(int v) {
      if (v < 1 || v > 65535) {
        throw new IllegalArgumentException("port must be in 1..65535, got " + v);
      }
      port = v;
      return this;
    }

    /** Port of each engine's replay socket; 0 (default) means no replay, resync on gaps. */
    public Builder replayPort(int v) {
      if (v < 0 || v > 65535) {
        throw new IllegalArgumentException("replayPort must be in 0..65535, got " + v);
      }
      replayPort = v;
      return this;
    }

    /** Topic prefix to subscribe to (default {@code kv@}; empty for every topic). */
    public Builder topicFilter(String v) {
      topicFilter = Objects.requireNonNull(v, "topicFilter");
      return this;
    }

    /** How long to wait for a replay to finish (default 1 s). */
    public Builder replayTimeout(Duration v) {
      if (v.isNegative() || v.isZero()) {
        throw new IllegalArgumentException("replayTimeout must be > 0, got " + v);
      }
      replayTimeout = v;
      return this;
    }

    /** Messages queued per socket before ZeroMQ drops new ones (default 10,000). */
    public Builder receiveHighWaterMark(int v) {
      if (v < 1) {
        throw new IllegalArgumentException("receiveHighWaterMark must be >= 1, got " + v);
      }
      receiveHighWaterMark = v;
      return this;
    }

    /** Creates the sockets and starts the subscriber thread. */
    public KvEventSubscriber build() {
      return new KvEventSubscriber(this);
    }
  }
}
