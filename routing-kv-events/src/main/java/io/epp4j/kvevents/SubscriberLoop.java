package io.epp4j.kvevents;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;
import org.zeromq.ZMQ;
import org.zeromq.ZMQException;
import zmq.ZError;

/**
 * The thread of a {@link KvEventSubscriber}: it binds the central socket (if any), then until
 * closed runs the pool changes queued for it, polls every SUB socket and handles the waiting
 * messages one at a time. Each message is handled in its own failure scope: a malformed frame
 * set or a failure while handling it is counted and reported through {@link DropReports} and
 * costs that message only, so nothing a socket delivers ends the thread. Only ZeroMQ itself
 * failing, or an error after which nothing can be trusted, does.
 *
 * <p>Threading: {@link #start}, {@link #submit} and {@link #close} are called from other
 * threads; the queued commands run on the loop's thread, which alone touches the sockets and
 * the {@link StreamTable}. {@link #start} waits until the thread has bound (or failed to).
 */
final class SubscriberLoop {
  private static final Logger LOG = Logger.getLogger(KvEventSubscriber.class.getName());
  /** Messages read from one socket per turn, so commands and other sockets get a turn too. */
  private static final int MESSAGES_PER_TURN = 256;
  /**
   * How long a subscriber waits for an older one of this JVM to give up a central address: it
   * hands it over at its next turn, unless it waits out a replay (up to its replay timeout).
   */
  private static final long HANDOVER_MILLIS = 5_000;

  private final @Nullable String bindAddress;
  private final SubscriberSockets sockets;
  private final StreamTable streams;
  private final DropReports reports;
  private final ConcurrentLinkedQueue<Runnable> commands = new ConcurrentLinkedQueue<>();
  private final Thread thread;
  private final CountDownLatch started = new CountDownLatch(1);
  private volatile boolean closed;
  private volatile @Nullable String boundEndpoint;
  private volatile @Nullable RuntimeException startFailure;
  // central mode: the bound socket (loop thread only), and whether a newer subscriber of this
  // JVM took the address over (see BoundAddresses)
  private ZMQ.@Nullable Socket bound;
  private volatile boolean handedOver;
  /**
   * Per-endpoint mode: streams whose publisher disconnected and whose queue is still being read
   * ({@link #followDisconnects}), one entry per stream at most; loop thread only.
   */
  private final Map<EndpointStream, FollowedDisconnect> disconnectsFollowed =
      new LinkedHashMap<>();

  SubscriberLoop(@Nullable String bindAddress, SubscriberSockets sockets, StreamTable streams,
      DropReports reports) {
    this.bindAddress = bindAddress;
    this.sockets = sockets;
    this.streams = streams;
    this.reports = reports;
    this.thread = new Thread(this::run, "epp4j-kv-events");
    this.thread.setDaemon(true);
  }

  /**
   * Starts the thread and waits until it has bound; throws what binding threw. A caller that
   * stops waiting (interrupted, or the thread took too long) gets no subscriber to close, so the
   * thread is told to end: it closes its sockets and gives up the address as soon as it can.
   */
  void start() {
    thread.start();
    // sockets belong to the subscriber thread: it binds, the caller waits for the outcome
    try {
      if (!started.await(10, TimeUnit.SECONDS)) {
        closed = true;
        throw new IllegalStateException("KV-event subscriber did not start in time");
      }
    } catch (InterruptedException e) {
      closed = true;
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while starting the KV-event subscriber", e);
    }
    RuntimeException failure = startFailure;
    if (failure != null) {
      throw failure;
    }
  }

  /** Queues {@code command} to run on the loop's thread, unless the loop is closed. */
  void submit(Runnable command) {
    if (!closed) {
      commands.add(command);
    }
  }

  /** Commands queued and not yet taken by the loop's thread; any thread, for tests. */
  int queuedCommands() {
    return commands.size();
  }

  /** In central mode, the address actually bound. */
  @Nullable String boundEndpoint() {
    return boundEndpoint;
  }

  /** Stops the loop and waits (up to 5 s) for its thread to close every socket. */
  void close() {
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

  private void run() {
    if (!bind()) {
      return;
    }
    try (ZMQ.Poller poller = sockets.newPoller()) {
      List<ZMQ.Socket> registered = new ArrayList<>();
      while (!closed) {
        runCommands();
        registered = reregister(poller, registered);
        if (registered.isEmpty()) {
          sleepQuietly(20);
          continue;
        }
        poller.poll(50);
        // commands submitted while the poll waited (an endpoint joining the pool, with its
        // replay address) come before the messages that woke it: its first messages may be
        // among them, and a gap in them must find the replay socket. A command may also have
        // closed a socket (an endpoint leaving), so the set is taken again
        runCommands();
        registered = reregister(poller, registered);
        followDisconnects();
        receiveFrom(registered);
      }
    } catch (RuntimeException | Error e) {
      // only ZeroMQ itself failing gets here: messages are guarded one by one
      if (!closed) {
        LOG.log(Level.SEVERE, "KV-event subscriber stopped unexpectedly", e);
      }
      DropReports.rethrowIfFatal(e);
    } finally {
      streams.closeReplays();
      sockets.close();
      if (bindAddress != null) {
        SubscriberLoop previous = BoundAddresses.closed(bindAddress, this);
        if (previous != null) {
          previous.submit(previous::takeBack);
        }
      }
    }
  }

  /** Binds the central socket, if any; false (the failure kept for {@link #start}) if it fails. */
  private boolean bind() {
    try {
      if (bindAddress != null) {
        try {
          bindOnce(bindAddress);
        } catch (ZMQException e) {
          SubscriberLoop holder = e.getErrorCode() == ZError.EADDRINUSE
              ? BoundAddresses.holder(bindAddress) : null;
          if (holder == null || holder == this) {
            throw e;
          }
          // the running configuration's subscriber holds it while this one is built for a
          // reconfiguration: it hands the address over, and takes it back should this one close
          // while it is still open
          holder.submit(holder::handOver);
          try {
            bindRetrying(bindAddress, HANDOVER_MILLIS);
          } catch (RuntimeException again) {
            holder.submit(holder::takeBack); // runs after the hand-over, should that come late
            throw again;
          }
        }
        BoundAddresses.bound(bindAddress, this);
      }
      return true;
    } catch (RuntimeException e) {
      // ZeroMQ says "Errno 48": the caller is told which address and why, in words
      startFailure = new IllegalStateException("cannot bind " + bindAddress + ": " + reason(e), e);
      closed = true;
      sockets.close();
      return false;
    } finally {
      started.countDown();
    }
  }

  private void bindOnce(String address) {
    ZMQ.Socket s = sockets.newSub();
    try {
      if (SubscriberSockets.ipv6Literal(address)) {
        s.setIPv6(true); // ZeroMQ refuses tcp://[::]:5557 otherwise
      }
      s.bind(address);
    } catch (RuntimeException e) {
      s.close();
      throw e;
    }
    boundEndpoint = s.getLastEndpoint();
    bound = s;
    streams.addBound(s);
  }

  /** Binds, trying again every 20 ms while the address is in use, for up to {@code millis}. */
  private void bindRetrying(String address, long millis) {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
    for (;;) {
      try {
        bindOnce(address);
        return;
      } catch (ZMQException e) {
        if (e.getErrorCode() != ZError.EADDRINUSE || System.nanoTime() - deadline > 0) {
          throw e;
        }
      }
      sleepQuietly(20);
    }
  }

  /** Whether a newer subscriber took this one's address over; any thread. */
  boolean handedOver() {
    return handedOver && !closed;
  }

  /** On the loop's thread: gives up the bound address to a newer subscriber. */
  private void handOver() {
    ZMQ.Socket s = bound;
    if (s == null) {
      return;
    }
    streams.removeBound(s);
    s.close();
    bound = null;
    handedOver = true;
    LOG.info("KV-event subscriber handed " + bindAddress + " over to a newer one (a"
        + " reconfiguration); it takes the address back if that one closes first");
  }

  /** On the loop's thread: binds the address again after the subscriber that took it closed. */
  private void takeBack() {
    String address = bindAddress;
    if (address == null || !handedOver || closed) {
      return;
    }
    try {
      bindRetrying(address, HANDOVER_MILLIS);
      handedOver = false;
      LOG.info("KV-event subscriber bound " + address + " again: the newer one that had taken"
          + " it over closed");
    } catch (RuntimeException e) {
      LOG.warning("KV-event subscriber could not bind " + address + " again after the newer one"
          + " that had taken it over closed (" + (e instanceof ZMQException z ? reason(z) : e)
          + "); it receives no KV events");
    }
  }

  /** What went wrong, in words: ZeroMQ's own message is only its error number. */
  private static @Nullable String reason(RuntimeException e) {
    if (e instanceof ZMQException z) {
      try {
        return ZError.toString(z.getErrorCode());
      } catch (IllegalArgumentException unknownCode) {
        return e.getMessage();
      }
    }
    return e.getMessage();
  }

  /** Runs the pool changes queued since the last turn; one failing costs only itself. */
  private void runCommands() {
    Runnable c;
    while ((c = commands.poll()) != null) {
      try {
        c.run();
      } catch (RuntimeException | Error e) {
        DropReports.rethrowIfFatal(e);
        LOG.log(Level.WARNING, "KV-event subscriber could not follow a pool change", e);
      }
    }
    try {
      streams.retryPending();
    } catch (RuntimeException | Error e) {
      DropReports.rethrowIfFatal(e);
      LOG.log(Level.WARNING, "KV-event subscriber could not follow a pool change", e);
    }
  }

  /** Registers the SUB sockets with the poller again when the set has changed. */
  private List<ZMQ.Socket> reregister(ZMQ.Poller poller, List<ZMQ.Socket> registered) {
    List<ZMQ.Socket> current = streams.subSockets();
    if (registered.equals(current)) {
      return registered;
    }
    for (ZMQ.Socket s : registered) {
      poller.unregister(s);
    }
    List<ZMQ.Socket> now = new ArrayList<>(current);
    for (ZMQ.Socket s : now) {
      poller.register(s, ZMQ.Poller.POLLIN);
    }
    return now;
  }

  /**
   * Per-endpoint mode: an endpoint whose publisher connection dropped has its messages still
   * queued from that connection handled, and then its blocks dropped
   * ({@link EndpointStream#publisherDisconnected}). A loop that was busy may see the monitor's
   * event only once the new connection's first messages are queued behind the old one's: the
   * first message of the new connection is then where the blocks are dropped, before it is
   * applied ({@link #receiveOne}), and the new connection's blocks stay.
   *
   * <p>A stream that had handled no message when the event was seen drops nothing: the
   * connection that dropped delivered nothing it handled (a handshake cut short, which a loaded
   * publisher's handshake timer does), and the messages queued may be the next connection's,
   * whose blocks must stay. Should they be the dropped connection's after all, the next
   * connection's first message drops them ({@link #receiveOne}).
   *
   * <p>Each stream's queue is read {@link #MESSAGES_PER_TURN} messages per turn at most, as
   * {@link #receiveFrom} reads it: a publisher that sends as fast as the loop applies (a
   * restarted engine warming its cache) never leaves its queue empty, and reading it to the end
   * here kept the loop on that one endpoint for as long as it sent, while the other endpoints'
   * queues overflowed and pool changes waited. A stream whose queue holds more is followed on
   * at the next turn, and its blocks are dropped once the queue has been empty.
   */
  private void followDisconnects() {
    for (EndpointStream st : streams.publishersDisconnected()) {
      // a newer disconnect of a stream still followed decides: its snapshot is the later one
      disconnectsFollowed.put(st, new FollowedDisconnect(st.connectionsReplaced(),
          st.heardAnyConnection()));
    }
    for (Iterator<Map.Entry<EndpointStream, FollowedDisconnect>> it =
        disconnectsFollowed.entrySet().iterator(); it.hasNext() && !closed;) {
      Map.Entry<EndpointStream, FollowedDisconnect> f = it.next();
      EndpointStream st = f.getKey();
      ZMQ.Socket s = st.sub;
      if (s == null || !streams.isOpen(st)) {
        it.remove(); // the endpoint left the pool, or follows other ports: its socket is closed
        continue;
      }
      try {
        int read = 0;
        while (read < MESSAGES_PER_TURN && !closed && receiveOne(s)) {
          read++; // the old connection's messages, in order, up to the new connection's if any
        }
        if (read == MESSAGES_PER_TURN || closed) {
          continue; // more may be queued: followed on at the next turn
        }
        it.remove();
        if (f.getValue().heardBefore() && st.connectionsReplaced() == f.getValue().replaced()) {
          st.publisherDisconnected();
        }
      } catch (RuntimeException | Error e) {
        it.remove();
        DropReports.rethrowIfFatal(e);
        LOG.log(Level.WARNING, "KV-event subscriber could not follow endpoint " + st.endpointId
            + "'s publisher disconnecting", e);
      }
    }
  }

  /**
   * What a stream had heard when its publisher's disconnect was seen: how many times a message
   * had come over a newer connection, and whether any message had come.
   */
  private record FollowedDisconnect(long replaced, boolean heardBefore) {}

  private void receiveFrom(List<ZMQ.Socket> registered) {
    for (ZMQ.Socket s : registered) {
      for (int i = 0; i < MESSAGES_PER_TURN; i++) {
        if (closed || !receiveOne(s)) { // closing: what is still queued is not handled
          break;
        }
      }
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
   * Reads and handles one message {@code [topic, seq, payload]}; false when none was waiting. In
   * per-endpoint mode, a message that came over a newer connection than the endpoint's last one
   * has the endpoint's blocks dropped first: the old connection is gone, and with it, perhaps,
   * the engine's cache ({@link EndpointStream#publisherDisconnected}).
   */
  private boolean receiveOne(ZMQ.Socket s) {
    // read as a message, not as bytes, for its metadata, which is one object per connection
    zmq.Msg first = s.base().recv(ZMQ.DONTWAIT);
    if (first == null) {
      int errno = s.base().errno();
      if (errno != 0 && errno != ZError.EAGAIN) {
        throw new ZMQException(errno);
      }
      return false;
    }
    byte[] topic = first.data();
    Object connection = first.getMetadata();
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
    EndpointStream st = null;
    try {
      if (!sockets.passesFilter(topic)) {
        // central mode: the topic names the engine, and this one's names none we can trust
        reports.foreignTopic(bindAddress != null ? "an engine publishing to " + bindAddress
            : streams.source(s, topic),
            new String(topic, java.nio.charset.StandardCharsets.UTF_8), sockets.topicFilter());
        return true;
      }
      if (frames != 3 || seqFrame == null || payload == null || seqFrame.length != 8) {
        reports.dropped(streams.source(s, topic), "expected [topic, 8-byte seq, payload], got "
            + frames + " frame(s)" + (seqFrame == null ? "" : " with a " + seqFrame.length
            + "-byte seq"), null);
        return true;
      }
      long seq = ByteBuffer.wrap(seqFrame).getLong();
      if (seq < 0) {
        // engines number their batches from 0 as unsigned 8-byte integers: taken as a signed
        // seq it would look like a seq going back, a restart, and wipe the endpoint's blocks
        reports.dropped(streams.source(s, topic), "seq " + Long.toUnsignedString(seq)
            + " is beyond the signed 64-bit range", null);
        return true;
      }
      st = streams.route(s, topic);
      if (st != null) {
        if (st.sub == s) {
          boolean firstHeard = !st.heardAnyConnection();
          if (st.connectionReplaced(connection)) {
            streams.forgetDisconnects(s);
            st.publisherDisconnected();
          } else if (firstHeard) {
            // disconnects reported before the stream's first message are of connections that
            // delivered none of what it handled: seen later, they would drop this one's blocks
            streams.forgetDisconnects(s);
          }
        }
        st.onLive(seq, payload);
      }
    } catch (RuntimeException | Error e) {
      DropReports.rethrowIfFatal(e);
      reports.dropped(st != null ? st.endpointId : streams.source(s, topic), "handling failed", e);
    }
    return true;
  }
}
