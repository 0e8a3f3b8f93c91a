package io.epp4j.kvevents;

import io.epp4j.api.Endpoint;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * Consumes vLLM KV events over ZeroMQ and applies them to a {@link KvBlockIndex}. Either one SUB
 * socket per endpoint ({@code tcp://<host>:<port>}, following the router's pool through
 * {@link #addEndpoint}/{@link #removeEndpoint}) or one bound SUB socket that every engine
 * connects to (central mode; the endpoint is read from the topic {@code kv@<host:port>@<model>}).
 *
 * <p>Messages are {@code [topic, seq (8 bytes big-endian), payload]}. Per endpoint the
 * subscriber checks the sequence: a gap is filled from the engine's replay socket when one is
 * configured (in either mode: its host is the endpoint's, its port the configured replay port or
 * the endpoint's {@link #REPLAY_PORT_LABEL}) (DEALER request {@code [, start seq]}, replies {@code [, seq, payload]} ending with
 * seq −1), otherwise the endpoint's entries are dropped and rebuilt from new events (a resync);
 * a publisher restart (sequence going back) also resyncs, because a new engine process starts
 * with an empty cache, and its batches before the first one seen (it numbers from 0) are
 * treated as a gap; a replay asks for the last batch applied too, so a restarted engine whose
 * numbering had passed the old one's shows by sending another batch under that seq, and is
 * handled as a restart; the same message delivered twice is ignored. Malformed messages, and
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
 *
 * <p>The work is done in package-private rooms: {@link Membership} (the pool, and the only door
 * to the index), {@link SubscriberLoop} (the thread and its socket poll), {@link StreamTable}
 * (which stream a message belongs to, by socket or by central-mode topic),
 * {@link EndpointStream} (sequence, gap, replay and resync of one endpoint) and
 * {@link DropReports}. This class is the facade: its methods are safe to call from any thread.
 */
public final class KvEventSubscriber implements AutoCloseable {
  /**
   * Endpoint label overriding the KV-events port of one endpoint (0 or absent: the configured
   * one). A value that is not a port number is logged as a warning and the configured port used.
   * Central mode connects to no publisher: there a label other than 0 is logged, once per
   * endpoint, as a warning that it has no effect.
   */
  public static final String PORT_LABEL = "epp4j.io/kv-events-port";
  /**
   * Endpoint label giving the replay port of one endpoint (0 or absent: the configured one). A
   * value that is not a port number is logged as a warning and the configured port used.
   */
  public static final String REPLAY_PORT_LABEL = "epp4j.io/kv-events-replay-port";
  /**
   * Endpoint label naming the data-parallel rank one endpoint serves (per-endpoint mode), for
   * ranks whose serving ports do not follow {@link Builder#dataParallel}'s first port + rank:
   * vLLM run with {@code --data-parallel-rank} on several nodes, each node's ranks serving on
   * the same ports while rank r publishes on the configured port + r. The endpoint is followed on
   * the configured port + rank and replay port + rank, and applies only batches of that rank
   * (with or without {@link Builder#dataParallel}). The port labels still override both ports.
   * A value that is not a rank is logged as a warning naming the endpoint and ignored.
   */
  public static final String RANK_LABEL = "epp4j.io/data-parallel-rank";

  /** The most data-parallel ranks per engine {@link Builder#dataParallel} accepts. */
  public static final int MAX_DATA_PARALLEL_SIZE = 1024;

  /**
   * Default of {@link Builder#receiveBufferBytes} (256 MiB): room for 16 messages of the largest
   * size accepted per connection, and for thousands of the few-kilobyte batches an engine step
   * usually publishes in a replay's read-ahead.
   */
  public static final long DEFAULT_RECEIVE_BUFFER_BYTES = 256L << 20;

  /**
   * The longest {@link Builder#replayTimeout} accepted (365 days). A close() abandons a replay
   * whatever its timeout, so a longer one would gain nothing.
   */
  public static final Duration MAX_REPLAY_TIMEOUT = Duration.ofDays(365);

  /** vLLM's default KV-events port. */
  public static final int DEFAULT_PORT = 5557;

  /**
   * Least time between two log reports of dropped messages. A publisher that sends garbage sends
   * it with every step; one line with a count says as much as thousands.
   */
  public static final Duration REPORT_INTERVAL = Duration.ofSeconds(30);

  private final KvEventMetrics metrics;
  private final boolean central;
  private final Membership membership;
  private final StreamTable streams;
  private final SubscriberLoop loop;
  private final SubscriberSockets sockets;
  private final HostLookups lookups;
  /** How long a replay waits, in whole milliseconds (the builder's timeout rounded up). */
  private final long replayTimeoutMillis;
  /**
   * Per endpoint id, the pool change the subscriber's thread has not taken yet: the latest state
   * wanted (followed with these labels under this membership, or not followed). An entry means
   * one command is queued for the id; changes that come meanwhile replace the entry and queue
   * nothing, so adds, removals and label changes piling up while the thread is busy cost one
   * entry and one command per endpoint, not one per change.
   */
  private final java.util.concurrent.ConcurrentHashMap<String, PoolChange> poolChanges =
      new java.util.concurrent.ConcurrentHashMap<>();
  /** Set by {@link #close}; read by the subscriber thread while it waits for a replay. */
  private volatile boolean closing;

  private KvEventSubscriber(Builder b) {
    this.metrics = b.index.metrics();
    this.central = b.bindAddress != null;
    this.membership = new Membership(b.index);
    this.sockets = new SubscriberSockets(
        b.topicFilter.getBytes(StandardCharsets.UTF_8), b.receiveHighWaterMark,
        b.receiveBufferBytes);
    DropReports reports = new DropReports(metrics);
    this.lookups = new HostLookups(b.resolver);
    // rounded up: a timeout under a millisecond rounded down would be 0, and no replay waited
    this.replayTimeoutMillis = KvEventsPluginProviders.ceilMillis(b.replayTimeout);
    EndpointStream.Shared shared = new EndpointStream.Shared(membership, metrics, reports, sockets,
        replayTimeoutMillis, b.receiveBufferBytes, this::isClosing, lookups);
    this.streams = new StreamTable(central, b.port, b.replayPort, b.dataParallelSize,
        b.dataParallelFirstPort, shared, !b.portLabelFollowedElsewhere);
    this.loop = new SubscriberLoop(b.bindAddress, sockets, streams, reports);
    loop.start();
  }

  /** A subscriber that connects to each endpoint added to it. */
  public static Builder perEndpoint(KvBlockIndex index) {
    return new Builder(index, null);
  }

  /** A subscriber bound at {@code address} (e.g. {@code tcp://*:5557}) that engines connect to. */
  public static Builder central(KvBlockIndex index, String address) {
    return new Builder(index, Objects.requireNonNull(address, "address"));
  }

  /** Whether this subscriber binds an address engines connect to, rather than following each. */
  boolean isCentral() {
    return central;
  }

  /** In central mode, the address actually bound (useful with port 0 / wildcard). */
  public @Nullable String boundEndpoint() {
    return loop.boundEndpoint();
  }

  /**
   * Adds an endpoint to the pool this subscriber applies events for. Per-endpoint mode also
   * connects to its publisher (asynchronously); in central mode its topic is accepted from now
   * on, and its replay socket (host, {@link #REPLAY_PORT_LABEL} or the configured replay port)
   * fills gaps as in per-endpoint mode. Adding an endpoint already in the pool does nothing.
   * Adds and removals of one endpoint that come while the subscriber's thread is busy are taken
   * together, as label changes are ({@link #changeEndpoint}). A host name is looked up on a
   * lookup thread of its own, and the sockets (per-endpoint mode's SUB, either mode's replay
   * socket) connect to the address the answer gives once it has come, so a slow DNS holds up
   * this endpoint's events only; per-endpoint mode looks a name that does not resolve up again,
   * backing off from 100 ms to 5 s, while the endpoint stays in the pool.
   */
  public void addEndpoint(Endpoint endpoint) {
    Object member = membership.add(endpoint.id());
    if (member != null) {
      want(endpoint.id(), new PoolChange(endpoint, member));
    }
  }

  /**
   * Takes an endpoint out of the pool and forgets its blocks in the index. When this returns no
   * batch of the endpoint is applied any more, including batches already received and queued;
   * they are counted in {@link KvEventMetrics#unknownEndpointMessages()}. Its socket is closed
   * asynchronously. Waits for at most the one batch the subscriber may be applying, of any
   * endpoint, and that includes the index's drop listeners it calls (in this module the
   * {@code hybrid-prefix-cache-scorer}'s routing memory, whose update of one endpoint takes at
   * most its {@code memoryBlocksPerEndpoint} blocks); never for a replay, a connection or a host
   * name's lookup.
   */
  public void removeEndpoint(Endpoint endpoint) {
    String id = endpoint.id();
    Object member = membership.remove(id);
    if (member != null) {
      want(id, new PoolChange(null, member));
    }
  }

  /**
   * An endpoint of the pool whose labels changed (see
   * {@link io.epp4j.api.PoolListener#onEndpointChanged}). When its {@link #PORT_LABEL},
   * {@link #REPLAY_PORT_LABEL} or {@link #RANK_LABEL} changed, per-endpoint mode closes its SUB
   * socket and connects to the publisher at the new port (asynchronously, as {@link #addEndpoint}); both modes take the
   * replay address again. The endpoint's blocks in the index are kept: the address, and so the
   * engine, is the same. Does nothing when neither label changed or the endpoint is not in the
   * pool.
   *
   * <p>Changes that come while the subscriber's thread is busy (a replay it waits for, a slow
   * batch) are taken together with the endpoint's adds and removals meanwhile: at most one
   * command per endpoint waits for the thread, and it brings the endpoint to its latest state
   * (followed at the latest labels, or not followed), not once for every change in turn.
   */
  public void changeEndpoint(Endpoint previous, Endpoint current) {
    if (Objects.equals(previous.label(PORT_LABEL), current.label(PORT_LABEL))
        && Objects.equals(previous.label(REPLAY_PORT_LABEL), current.label(REPLAY_PORT_LABEL))
        && Objects.equals(previous.label(RANK_LABEL), current.label(RANK_LABEL))) {
      return;
    }
    Object member = membership.current(current.id());
    if (member != null) {
      want(current.id(), new PoolChange(current, member));
    }
  }

  /**
   * Records {@code change} as the state wanted for endpoint {@code id}, replacing one the
   * subscriber's thread has not taken yet; queues the command that takes it only when there was
   * none, so at most one waits per endpoint.
   */
  private void want(String id, PoolChange change) {
    if (poolChanges.put(id, change) == null) {
      loop.submit(() -> takePoolChange(id));
    }
  }

  /**
   * On the subscriber's thread: brings endpoint {@code id}'s sockets to the latest state wanted.
   * What earlier memberships of the id left open is closed; the endpoint is then followed at its
   * latest labels if the membership wanted is still the current one. Should the pool have moved
   * on since (removed, or added again), the change recording that is taken by its own command.
   */
  private void takePoolChange(String id) {
    PoolChange change = poolChanges.remove(id);
    if (change == null) {
      return;
    }
    Object current = membership.current(id);
    streams.closeOtherMemberships(id, current);
    if (change.endpoint() != null && change.member() == current) {
      streams.follow(change.endpoint(), current);
    }
  }

  /**
   * The state wanted for an endpoint: followed at {@code endpoint}'s labels under
   * {@code member}, or (endpoint null) {@code member} left the pool.
   */
  private record PoolChange(@Nullable Endpoint endpoint, Object member) {}

  /** Commands queued for the subscriber's thread; for tests. */
  int queuedCommands() {
    return loop.queuedCommands();
  }

  /** Endpoints with a live SUB socket (per-endpoint mode). */
  public int connectedEndpoints() {
    return streams.connectedEndpoints();
  }

  /** Endpoints whose central-mode port-label warning is remembered; for tests. */
  int portLabelWarningsKept() {
    return streams.portLabelWarningsKept();
  }

  /** How long a replay waits, in milliseconds; for tests. */
  long replayTimeoutMillis() {
    return replayTimeoutMillis;
  }

  /** SUB sockets opened for endpoints since the start (per-endpoint mode); for tests. */
  long subscriptionsOpened() {
    return streams.subscriptionsOpened();
  }

  /** Sockets open in this subscriber's ZeroMQ context; for tests. */
  int openSockets() {
    return sockets.openSockets();
  }

  /** The counters this subscriber updates (shared with its index). */
  public KvEventMetrics metrics() {
    return metrics;
  }

  /**
   * Stops the subscriber: its thread ends, every socket it opened is closed and a central-mode
   * address is free to bind again once this returns. A replay it is waiting for is abandoned
   * (the wait is cut short, however long {@code replayTimeout} is). Waits at most 5 s.
   */
  @Override
  public void close() {
    closing = true; // before the loop's flag: a replay in progress sees it and stops waiting
    loop.close();
    lookups.close();
  }

  private boolean isClosing() {
    return closing;
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
    private long receiveBufferBytes = DEFAULT_RECEIVE_BUFFER_BYTES;
    private int dataParallelSize = 1;
    private int dataParallelFirstPort;
    private boolean portLabelFollowedElsewhere;
    private HostLookups.Resolver resolver = java.net.InetAddress::getAllByName;

    private Builder(KvBlockIndex index, @Nullable String bindAddress) {
      this.index = Objects.requireNonNull(index, "index");
      this.bindAddress = bindAddress;
    }

    /**
     * Central mode: a per-endpoint subscriber beside this one follows the endpoints'
     * {@link #PORT_LABEL}, so this one does not warn that the label has no effect here.
     */
    Builder portLabelFollowedElsewhere() {
      portLabelFollowedElsewhere = true;
      return this;
    }

    /** How endpoints' host names are looked up (the JVM's resolver but in tests). */
    Builder resolver(HostLookups.Resolver v) {
      resolver = Objects.requireNonNull(v, "resolver");
      return this;
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

    /**
     * How long to wait for a replay to finish (default 1 s; at most
     * {@link #MAX_REPLAY_TIMEOUT}, 365 days: the wait is timed in nanoseconds, and a longer one
     * could not be). The wait is whole milliseconds: a timeout between them is rounded up, so one
     * under a millisecond waits 1 ms rather than not at all.
     */
    public Builder replayTimeout(Duration v) {
      Objects.requireNonNull(v, "replayTimeout");
      if (v.isNegative() || v.isZero()) {
        throw new IllegalArgumentException("replayTimeout must be > 0, got " + v);
      }
      if (v.compareTo(MAX_REPLAY_TIMEOUT) > 0) {
        throw new IllegalArgumentException("replayTimeout must be at most "
            + MAX_REPLAY_TIMEOUT.toDays() + " days, got " + v);
      }
      replayTimeout = v;
      return this;
    }

    /**
     * Messages queued per connection before ZeroMQ stops taking new ones (default 10,000); the
     * {@link #receiveBufferBytes} bound may allow fewer.
     */
    public Builder receiveHighWaterMark(int v) {
      if (v < 1) {
        throw new IllegalArgumentException("receiveHighWaterMark must be >= 1, got " + v);
      }
      receiveHighWaterMark = v;
      return this;
    }

    /**
     * The most bytes of received but not yet applied messages held for one connection (default
     * {@link #DEFAULT_RECEIVE_BUFFER_BYTES}, 256 MiB). ZeroMQ counts its queue in messages only,
     * so each socket queues at most this divided by {@link KvEventDecoder#MAX_PAYLOAD_BYTES}
     * messages (16 by default), fewer when {@link #receiveHighWaterMark} says so; a replay in
     * progress reads its answer ahead of applying it up to this many bytes more. Must be at
     * least {@link KvEventDecoder#MAX_PAYLOAD_BYTES} (one message of the largest size).
     */
    public Builder receiveBufferBytes(long v) {
      if (v < KvEventDecoder.MAX_PAYLOAD_BYTES) {
        throw new IllegalArgumentException("receiveBufferBytes must be >= "
            + KvEventDecoder.MAX_PAYLOAD_BYTES + " (one message of the largest size accepted),"
            + " got " + v);
      }
      receiveBufferBytes = v;
      return this;
    }

    /**
     * Per-endpoint mode: the pool's endpoints include the ranks of vLLM engines run with
     * {@code data_parallel_size = size}, rank r serving on {@code firstPort + r}. vLLM publishes
     * rank r's KV events on the configured port + r and answers its replays on the replay
     * port + r, so the endpoint {@code host:(firstPort + r)} is followed there; an endpoint on
     * another port is followed as without data parallelism, and the port labels still override
     * both ports of one endpoint. Each rank is its own endpoint in the index, as it is for the
     * router, so a batch whose {@code data_parallel_rank} names another rank than the
     * endpoint's is dropped and counted in {@link KvEventMetrics#wrongRankBatches()} (the ports
     * do not match the ranks). Default: size 1 (no data parallelism, any rank applied).
     */
    public Builder dataParallel(int size, int firstPort) {
      if (size < 1 || size > MAX_DATA_PARALLEL_SIZE) {
        throw new IllegalArgumentException("dataParallelSize must be in 1.."
            + MAX_DATA_PARALLEL_SIZE + ", got " + size);
      }
      if (firstPort < 1 || firstPort > 65535) {
        throw new IllegalArgumentException("dataParallelFirstPort must be in 1..65535, got "
            + firstPort);
      }
      if (firstPort + size - 1 > 65535) {
        throw new IllegalArgumentException("dataParallelFirstPort " + firstPort + " + "
            + "dataParallelSize " + size + " - 1 is past port 65535");
      }
      dataParallelSize = size;
      dataParallelFirstPort = firstPort;
      return this;
    }

    /** Creates the sockets and starts the subscriber thread. */
    public KvEventSubscriber build() {
      if (dataParallelSize > 1) {
        if (bindAddress != null) {
          throw new IllegalArgumentException("dataParallelSize " + dataParallelSize
              + " needs per-endpoint mode: vLLM's rank r connects to the central address's port"
              + " + r, and central mode binds one address");
        }
        if (port + dataParallelSize - 1 > 65535) {
          throw new IllegalArgumentException("port " + port + " + dataParallelSize "
              + dataParallelSize + " - 1 is past port 65535");
        }
        if (replayPort > 0 && replayPort + dataParallelSize - 1 > 65535) {
          throw new IllegalArgumentException("replayPort " + replayPort + " + dataParallelSize "
              + dataParallelSize + " - 1 is past port 65535");
        }
      }
      return new KvEventSubscriber(this);
    }
  }
}
