package io.epp4j.kvevents;

import io.epp4j.api.Endpoint;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.jspecify.annotations.Nullable;
import org.zeromq.ZMQ;

/**
 * The {@link EndpointStream}s of one subscriber and the SUB sockets they arrive on, and which
 * stream a message belongs to. Per-endpoint mode has one SUB socket per endpoint, opened by
 * {@link #connect} and closed by {@link #disconnect} as the pool changes, and a message belongs
 * to its socket's stream. Central mode has one bound socket ({@link #addBound}), and a message
 * belongs to the endpoint its topic {@code kv@<host:port>@<model>} names, if that endpoint is in
 * the pool: a topic alone creates no stream and no index state. In both modes a stream replays
 * its gaps from the engine's replay socket: per-endpoint mode learns its address when
 * connecting, central mode when the endpoint joins the pool ({@link #register}).
 *
 * <p>Threading: owned by the subscriber thread; only {@link #connectedEndpoints} is read from
 * other threads.
 */
final class StreamTable {
  private static final java.util.logging.Logger LOG =
      java.util.logging.Logger.getLogger(KvEventSubscriber.class.getName());

  private final boolean central;
  private final int port;
  private final int replayPort;
  /** Ranks per data-parallel engine; 1 without data parallelism. */
  private final int dataParallelSize;
  /** The serving port of rank 0 of a data-parallel engine; unused when the size is 1. */
  private final int dataParallelFirstPort;
  private final SubscriberSockets sockets;
  private final EndpointStream.Shared shared;
  private final Map<String, EndpointStream> byId = new HashMap<>();
  /** Central mode: replay address of each pool member that has one. */
  private final Map<String, ReplayAddress> replayAddresses = new HashMap<>();
  private final Map<ZMQ.Socket, EndpointStream> bySocket = new IdentityHashMap<>();
  private final List<ZMQ.Socket> subSockets = new ArrayList<>();
  /** Per-endpoint mode: the disconnect monitor of each SUB socket that has one. */
  private final Map<ZMQ.Socket, ZMQ.Socket> monitors = new IdentityHashMap<>();
  private final AtomicInteger connected = new AtomicInteger();
  /** SUB sockets connected to an endpoint's publisher since the start; read by tests. */
  private final java.util.concurrent.atomic.AtomicLong subscriptionsOpened =
      new java.util.concurrent.atomic.AtomicLong();
  /** First wait before connecting again to a publisher whose address ZeroMQ refused. */
  static final long RETRY_FIRST_NANOS = 100_000_000L;
  /** Longest wait between such attempts, as the SUB socket's own reconnection backs off. */
  static final long RETRY_MAX_NANOS = 5_000_000_000L;
  /**
   * Per-endpoint mode: pool members whose SUB socket ZeroMQ refused to connect (JeroMQ resolves
   * a host name when asked to connect, so a name that does not resolve yet, a pod or container
   * whose DNS entry comes after it joined the pool, fails there, where libzmq would go on
   * trying), or whose host name's lookup ({@link HostLookups}) has not answered yet. Each is
   * tried again, with backoff after a failure, until it connects or leaves the pool; one entry
   * per member at most. Subscriber thread only.
   */
  private final Map<String, PendingConnect> pending = new HashMap<>();
  /** Central mode: whether a port label is warned about (no per-endpoint subscriber reads it). */
  private final boolean warnPortLabel;
  /**
   * Most endpoints whose port-label warning is remembered, so that one that rejoins is not warned
   * about again.
   */
  static final int MAX_PORT_LABEL_WARNINGS_KEPT = 4096;
  /**
   * Central mode: endpoints whose port label was warned about, the most recently warned or
   * rejoined {@value #MAX_PORT_LABEL_WARNINGS_KEPT} of them (pods that come and go at every rollout
   * must not grow it for ever; one forgotten is warned about again should it rejoin); subscriber
   * thread only.
   */
  private final java.util.Set<String> portLabelWarned = java.util.Collections.newSetFromMap(
      new java.util.LinkedHashMap<String, Boolean>(16, 0.75f, true) {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
          return size() > MAX_PORT_LABEL_WARNINGS_KEPT;
        }
      });

  /**
   * @param central whether messages are routed by topic (one bound socket) rather than by socket
   * @param port the KV-events port of an endpoint without {@link KvEventSubscriber#PORT_LABEL}
   * @param replayPort the replay port of an endpoint without
   *     {@link KvEventSubscriber#REPLAY_PORT_LABEL}; 0 for none
   * @param dataParallelSize ranks per data-parallel engine (1: none); rank r publishes on
   *     {@code port + r} and replays on {@code replayPort + r}, as vLLM offsets them
   * @param dataParallelFirstPort the serving port of rank 0: the endpoint on
   *     {@code dataParallelFirstPort + r} is rank r
   */
  StreamTable(boolean central, int port, int replayPort, int dataParallelSize,
      int dataParallelFirstPort, EndpointStream.Shared shared) {
    this(central, port, replayPort, dataParallelSize, dataParallelFirstPort, shared, true);
  }

  /**
   * @param warnPortLabel central mode: whether an endpoint's {@link KvEventSubscriber#PORT_LABEL}
   *     is logged as having no effect (false when a per-endpoint subscriber beside this one
   *     reads it)
   */
  StreamTable(boolean central, int port, int replayPort, int dataParallelSize,
      int dataParallelFirstPort, EndpointStream.Shared shared, boolean warnPortLabel) {
    this.warnPortLabel = warnPortLabel;
    this.central = central;
    this.port = port;
    this.replayPort = replayPort;
    this.dataParallelSize = dataParallelSize;
    this.dataParallelFirstPort = dataParallelFirstPort;
    this.sockets = shared.sockets();
    this.shared = shared;
  }

  /** Endpoints whose port-label warning is remembered; read after the warnings, for tests. */
  int portLabelWarningsKept() {
    return portLabelWarned.size();
  }

  /** Every SUB socket to poll, in the order they were opened. */
  List<ZMQ.Socket> subSockets() {
    return subSockets;
  }

  /** SUB sockets connected to an endpoint's publisher since the start; any thread. */
  long subscriptionsOpened() {
    return subscriptionsOpened.get();
  }

  /** Endpoints with a live SUB socket (per-endpoint mode); any thread. */
  int connectedEndpoints() {
    return connected.get();
  }

  /** Closes every replay socket; the SUB sockets close with the context. */
  void closeReplays() {
    for (EndpointStream st : byId.values()) {
      st.closeReplay();
    }
  }

  // ------------------------------------------------------------------ per-endpoint mode

  /** Opens the SUB (and replay) socket of an endpoint, unless {@code member} has left already. */
  void connect(Endpoint e, Object member) {
    if (!shared.membership().isCurrent(e.id(), member)) {
      return; // removed again before the subscriber got to it
    }
    EndpointStream earlier = byId.get(e.id());
    if (earlier != null) {
      disconnect(e.id(), earlier.member); // an earlier membership's, not yet closed
    }
    PendingConnect retrying = pending.remove(e.id());
    if (retrying != null && retrying.member() != member) {
      retrying = null; // an earlier membership's
    }
    int checked = checkedRank(e);
    int rank = Math.max(0, checked);
    int p = labelPort(e, KvEventSubscriber.PORT_LABEL, port + rank);
    int rp = labelPort(e, KvEventSubscriber.REPLAY_PORT_LABEL,
        replayPort > 0 ? replayPort + rank : 0);
    String address = SubscriberSockets.address(e.host(), p);
    // where the sockets connect: the address a name resolved to (ZeroMQ would otherwise look the
    // name up again, here and at every reconnect on its I/O thread, which every socket shares);
    // the name stays in the logs
    String target = address;
    String replayTarget = rp > 0 ? SubscriberSockets.address(e.host(), rp) : null;
    if (HostLookups.isName(e.host())) {
      // looked up on the lookup thread: a slow DNS holds up this endpoint, not every other
      HostLookups.Answer answer = shared.lookups().take(e.host());
      if (answer == null) {
        // asked; looked at again at every turn until the answer comes
        pending.put(e.id(), new PendingConnect(e, member, System.nanoTime(),
            retrying == null ? 0 : retrying.waitNanos(), retrying != null && retrying.failed()));
        return;
      }
      if (answer.failure() != null) {
        refused(e, member, retrying, address, answer.failure());
        return;
      }
      target = answer.connectAddress(p);
      replayTarget = rp > 0 ? answer.connectAddress(rp) : null;
    }
    ZMQ.Socket s = sockets.newSub();
    try {
      if (SubscriberSockets.ipv6Literal(target)) {
        // an IPv6 address, or a name with IPv6 addresses only (an IPv6-only cluster's DNS):
        // without the option ZeroMQ considers IPv4 addresses only and refuses it
        s.setIPv6(true);
      }
      s.connect(target);
      subscriptionsOpened.incrementAndGet();
    } catch (RuntimeException ex) {
      s.close();
      refused(e, member, retrying, address, ex);
      return;
    }
    if (retrying != null && retrying.failed()) {
      LOG.info("endpoint " + e.id() + ": connected to its KV-event publisher at " + address);
    }
    EndpointStream st = new EndpointStream(e.id(), member, s,
        rp > 0 ? SubscriberSockets.address(e.host(), rp) : null, replayTarget, checked, shared);
    st.openReplay(); // never throws: a refused replay address costs only the replays
    ZMQ.Socket monitor = null;
    try {
      monitor = sockets.newDisconnectMonitor(s);
    } catch (RuntimeException ex) {
      LOG.log(java.util.logging.Level.WARNING, "endpoint " + e.id() + ": cannot watch the"
          + " connection to its KV-event publisher; an engine restart that numbers its batches"
          + " on from the old engine's last one is not noticed", ex);
    }
    if (monitor != null) {
      monitors.put(s, monitor);
    }
    subSockets.add(s);
    byId.put(e.id(), st);
    bySocket.put(s, st);
    connected.incrementAndGet();
  }

  /**
   * Schedules the next attempt to connect an endpoint whose host name did not resolve or whose
   * address ZeroMQ refused: backing off from {@link #RETRY_FIRST_NANOS} to
   * {@link #RETRY_MAX_NANOS}, logged once per membership.
   */
  private void refused(Endpoint e, Object member, @Nullable PendingConnect retrying,
      String address, Exception ex) {
    boolean again = retrying != null && retrying.failed();
    long wait = retrying != null && again ? Math.min(RETRY_MAX_NANOS,
        Math.max(RETRY_FIRST_NANOS, retrying.waitNanos() * 2)) : RETRY_FIRST_NANOS;
    pending.put(e.id(), new PendingConnect(e, member, System.nanoTime() + wait, wait, true));
    if (!again) {
      // once per membership: the attempts after it are quiet, the one that succeeds is logged
      LOG.log(java.util.logging.Level.WARNING, "endpoint " + e.id() + ": cannot connect to its"
          + " KV-event publisher at " + address + "; trying again, backing off up to "
          + TimeUnit.NANOSECONDS.toSeconds(RETRY_MAX_NANOS) + " s", ex);
    }
  }

  /**
   * Connects again, on the subscriber thread, each endpoint whose publisher address ZeroMQ
   * refused and whose wait is over; forgets those that left the pool meanwhile.
   */
  void retryPending() {
    shared.lookups().prune();
    if (pending.isEmpty()) {
      return;
    }
    long now = System.nanoTime();
    for (PendingConnect pc : new ArrayList<>(pending.values())) {
      if (!shared.membership().isCurrent(pc.endpoint().id(), pc.member())) {
        pending.remove(pc.endpoint().id(), pc);
      } else if (now - pc.dueNanos() >= 0) {
        connect(pc.endpoint(), pc.member());
      }
    }
  }

  /** Endpoints waiting to connect again to their publisher; subscriber thread, for tests. */
  int pendingConnects() {
    return pending.size();
  }

  /**
   * An endpoint to connect again at {@code dueNanos}, after waiting {@code waitNanos}; whether
   * an attempt of this membership {@code failed} already (then logged), or it only waits for
   * its host name's lookup.
   */
  private record PendingConnect(Endpoint endpoint, Object member, long dueNanos,
      long waitNanos, boolean failed) {}

  /** Closes the stream of {@code id} if it still belongs to {@code member}. */
  void disconnect(String id, Object member) {
    PendingConnect pc = pending.get(id);
    if (pc != null && pc.member() == member) {
      pending.remove(id);
    }
    ReplayAddress ra = replayAddresses.get(id);
    if (ra != null && ra.member() == member) {
      replayAddresses.remove(id);
    }
    EndpointStream st = byId.get(id);
    if (st == null || st.member != member) {
      return;
    }
    byId.remove(id);
    if (st.sub != null) {
      bySocket.remove(st.sub);
      subSockets.remove(st.sub);
      st.sub.close();
      ZMQ.Socket monitor = monitors.remove(st.sub);
      if (monitor != null) {
        monitor.close();
      }
      connected.decrementAndGet();
    }
    st.closeReplay();
  }

  /**
   * Per-endpoint mode: the streams whose publisher connection dropped since the last call, read
   * from their SUB sockets' monitors. Central mode has none: engines connect to the bound socket,
   * and a dropped connection does not say which engine's it was.
   */
  List<EndpointStream> publishersDisconnected() {
    if (monitors.isEmpty()) {
      return List.of();
    }
    List<EndpointStream> out = new ArrayList<>(1);
    for (Map.Entry<ZMQ.Socket, ZMQ.Socket> m : monitors.entrySet()) {
      boolean disconnected = false;
      ZMQ.Event ev;
      while ((ev = ZMQ.Event.recv(m.getValue(), ZMQ.DONTWAIT)) != null) {
        disconnected |= ev.getEvent() == ZMQ.EVENT_DISCONNECTED;
      }
      EndpointStream st = disconnected ? bySocket.get(m.getKey()) : null;
      if (st != null) {
        out.add(st);
      }
    }
    return out;
  }

  /** Whether {@code st} is still the stream of an open SUB socket (not closed by a pool change). */
  boolean isOpen(EndpointStream st) {
    return st.sub != null && bySocket.get(st.sub) == st;
  }

  /**
   * Per-endpoint mode: discards the events {@code sub}'s monitor holds. Called when a message
   * came over a new connection: the disconnects reported by then are of the connections before
   * it (ZeroMQ reports a disconnect before it connects again), and their drop is done. Also
   * called at a stream's first message: the disconnects reported by then are of connections that
   * delivered nothing the stream handled, and there is nothing of theirs to drop.
   */
  void forgetDisconnects(ZMQ.Socket sub) {
    ZMQ.Socket monitor = monitors.get(sub);
    if (monitor != null) {
      while (ZMQ.Event.recv(monitor, ZMQ.DONTWAIT) != null) {
        // reported before the connection the message came over was made
      }
    }
  }

  /**
   * The data-parallel rank an endpoint serves: its {@link KvEventSubscriber#RANK_LABEL} when it
   * has one; else its port's distance from the first rank's, when that lies within the engine's
   * ranks; 0 otherwise (an endpoint outside the engine's ports is followed as without data
   * parallelism).
   */
  int dataParallelRank(Endpoint e) {
    return Math.max(0, checkedRank(e));
  }

  /**
   * The rank whose batches an endpoint's stream applies: the rank its
   * {@link KvEventSubscriber#RANK_LABEL} names, or its rank when it is one of a data-parallel
   * engine's ranks by its serving port, whatever its port labels say (vLLM stamps each batch with
   * the rank of the engine core that made it); -1 (any rank) otherwise.
   */
  int checkedRank(Endpoint e) {
    int labelled = labelRank(e);
    if (labelled >= 0) {
      return labelled;
    }
    int r = e.port() - dataParallelFirstPort;
    return dataParallelSize > 1 && r >= 0 && r < dataParallelSize ? r : -1;
  }

  /**
   * The rank an endpoint's {@link KvEventSubscriber#RANK_LABEL} names, or -1 when it has none. A
   * value that is not a rank (not an integer, negative, not below
   * {@link KvEventSubscriber#MAX_DATA_PARALLEL_SIZE}, or one that would put the publisher or
   * replay port past 65535) is logged as a warning naming the endpoint, the label and the value,
   * and -1 returned: the rank then comes from the serving port, as without the label.
   */
  private int labelRank(Endpoint e) {
    String v = e.label(KvEventSubscriber.RANK_LABEL);
    if (v == null) {
      return -1;
    }
    int r;
    try {
      r = Integer.parseInt(v.trim());
    } catch (NumberFormatException ex) {
      r = -1;
    }
    if (r < 0 || r >= KvEventSubscriber.MAX_DATA_PARALLEL_SIZE || port + r > 65_535
        || (replayPort > 0 && replayPort + r > 65_535)) {
      LOG.warning("endpoint " + e.id() + ": label " + KvEventSubscriber.RANK_LABEL + " = '" + v
          + "' is not a data-parallel rank (0-" + (KvEventSubscriber.MAX_DATA_PARALLEL_SIZE - 1)
          + ", with port + rank at most 65535); taking the rank from the serving port");
      return -1;
    }
    return r;
  }

  /**
   * The port an endpoint's label names, or {@code def} when the label is absent or 0. A value
   * that is not a port number (not an integer, or outside 0–65535) is logged as a warning naming
   * the endpoint, the label and the value, and {@code def} is used: one mislabelled pod must not
   * stop the subscriber following the rest of the pool.
   */
  static int labelPort(Endpoint e, String label, int def) {
    String v = e.label(label);
    if (v == null) {
      return def;
    }
    int p;
    try {
      p = Integer.parseInt(v.trim());
    } catch (NumberFormatException ex) {
      p = -1;
    }
    if (p < 0 || p > 65_535) {
      LOG.warning("endpoint " + e.id() + ": label " + label + " = '" + v
          + "' is not a port number (0-65535); using " + (def > 0 ? "port " + def : "none"));
      return def;
    }
    return p == 0 ? def : p;
  }

  // ----------------------------------------------------------------------- central mode

  /** Adds the bound socket every engine connects to. */
  void addBound(ZMQ.Socket s) {
    subSockets.add(s);
  }

  /** Forgets the bound socket, which its caller closes (handed over to a newer subscriber). */
  void removeBound(ZMQ.Socket s) {
    subSockets.remove(s);
  }

  /**
   * Central mode: remembers where the engine of a new pool member answers replay requests (its
   * host and {@link KvEventSubscriber#REPLAY_PORT_LABEL} or the configured replay port), so
   * that a gap in its topic's stream is replayed as in per-endpoint mode. A stream opened by a
   * message that came before this command gets the replay socket now.
   */
  void register(Endpoint e, Object member) {
    if (!shared.membership().isCurrent(e.id(), member)) {
      return;
    }
    String portLabel = e.label(KvEventSubscriber.PORT_LABEL);
    if (warnPortLabel && portLabel != null && !portLabel.trim().equals("0")
        && portLabelWarned.add(e.id())) {
      // labels come with the endpoints at run time, so this cannot be a configuration error;
      // said once per endpoint (also when the label changes later), not at every change
      LOG.warning("endpoint " + e.id() + ": label " + KvEventSubscriber.PORT_LABEL + " = '"
          + portLabel + "' has no effect in central mode: the router binds one address, which"
          + " the engines publish to, and connects to no publisher port (the label applies in"
          + " per-endpoint mode; " + KvEventSubscriber.REPLAY_PORT_LABEL + " applies in both)");
    }
    int rp = labelPort(e, KvEventSubscriber.REPLAY_PORT_LABEL, replayPort);
    if (rp <= 0) {
      replayAddresses.remove(e.id());
      return;
    }
    String address = SubscriberSockets.address(e.host(), rp);
    replayAddresses.put(e.id(), new ReplayAddress(member, address));
    EndpointStream st = byId.get(e.id());
    if (st != null && st.member == member) {
      st.useReplay(address);
    }
  }

  /**
   * An endpoint's port labels changed while it stays in the pool ({@code member} its current
   * membership). Per-endpoint mode opens its SUB (and replay) socket again at the ports the
   * labels now give, closing the old ones; central mode takes its replay address again. Its
   * blocks in the index are kept.
   */
  void relabel(Endpoint e, Object member) {
    if (!central) {
      connect(e, member); // closes this membership's stream first
      return;
    }
    register(e, member);
    EndpointStream st = byId.get(e.id());
    if (st != null && st.member == member) {
      ReplayAddress ra = replayAddresses.get(e.id());
      st.replaceReplay(ra != null && ra.member() == member ? ra.address() : null);
    }
  }

  /**
   * Follows endpoint {@code e} of membership {@code member} at the ports its labels give:
   * per-endpoint mode opens its SUB (and replay) socket, closing one open before; central mode
   * takes its replay address. The same whether the membership is new or its labels changed.
   */
  void follow(Endpoint e, Object member) {
    relabel(e, member);
  }

  /**
   * Closes what memberships of {@code id} other than {@code member} (null: none is current) left:
   * a stream and its sockets, a connection waiting to be tried again, a replay address.
   */
  void closeOtherMemberships(String id, @Nullable Object member) {
    EndpointStream st = byId.get(id);
    if (st != null && st.member != member) {
      disconnect(id, st.member);
    }
    PendingConnect pc = pending.get(id);
    if (pc != null && pc.member() != member) {
      disconnect(id, pc.member());
    }
    ReplayAddress ra = replayAddresses.get(id);
    if (ra != null && ra.member() != member) {
      disconnect(id, ra.member());
    }
  }

  /** Where the engine of one central-mode membership takes replay requests. */
  private record ReplayAddress(Object member, String address) {}

  // ------------------------------------------------------------------- routing a message

  /**
   * The stream a message on {@code s} with {@code topic} belongs to; null when it belongs to
   * none (a socket no longer followed, or in central mode a topic naming no pool member, which
   * is counted and reported).
   */
  @Nullable EndpointStream route(ZMQ.Socket s, byte[] topic) {
    if (!central) {
      return bySocket.get(s);
    }
    String id = endpointFromTopic(new String(topic, StandardCharsets.UTF_8));
    Object member = shared.membership().current(id);
    if (member == null) {
      // no stream, no index state: the topic alone creates nothing
      shared.reports().unknownTopic(id);
      return null;
    }
    EndpointStream st = byId.get(id);
    if (st == null || st.member != member) {
      // new, or re-added since its last stream: the sequence starts over
      if (st != null) {
        st.closeReplay();
      }
      ReplayAddress ra = replayAddresses.get(id);
      st = new EndpointStream(id, member, null,
          ra != null && ra.member() == member ? ra.address() : null, shared);
      st.openReplay();
      byId.put(id, st);
    }
    return st;
  }

  /** Who sent a message, for reports: the endpoint or, in central mode, the topic's. */
  String source(ZMQ.Socket s, byte[] topic) {
    if (!central) {
      EndpointStream st = bySocket.get(s);
      return st == null ? "an endpoint no longer followed" : st.endpointId;
    }
    return endpointFromTopic(new String(topic, StandardCharsets.UTF_8));
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
}
