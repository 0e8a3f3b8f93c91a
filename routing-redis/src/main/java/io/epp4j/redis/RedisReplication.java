package io.epp4j.redis;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.RedactedException;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RouterHints;
import io.epp4j.api.RoutingDecision;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SslOptions;
import io.lettuce.core.resource.ClientResources;
import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.DoubleHistogram;
import io.opentelemetry.api.metrics.Meter;
import java.io.File;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Supplier;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * {@code redis-replication}: shares what each router of a pool learns with the other routers of
 * that pool through a Redis (or Valkey) stream, so that gateway replicas behind one load balancer
 * route as one: the prompts each sent where ({@code prefix-cache-scorer}), the endpoint each
 * session went to ({@code session-affinity-scorer}, {@code token-cost-picker}) and the requests
 * each has in flight per endpoint.
 *
 * <p>Routing never waits for Redis. {@link #afterRouting} copies the request's block hashes and
 * session key into a bounded queue (lock-free; when it is full the hint is dropped and counted);
 * a publisher thread sends the queue every {@code flushIntervalMillis} in batches of at most
 * {@code batchSize} hints with {@code XADD ... MAXLEN ~ maxLen}, together with this router's
 * in-flight figures when they changed (and all of them every {@code heartbeatMillis}); a reader
 * thread follows the stream with blocking {@code XREAD} and applies the other routers' batches
 * through the router's {@link RouterHints}. Batches of this router ({@code routerId}) and of
 * another pool are skipped.
 *
 * <p>When Redis is unreachable, at start or later, routing goes on with what the router knows;
 * the connection gauge drops to 0, a warning is logged at most once a minute, and both threads
 * reconnect with exponential backoff (100 ms to 5 s). The reader then continues after the last
 * batch it applied when the stream still holds everything since, else it counts a resync, drops
 * the other routers' in-flight figures (the lost batches may have lowered them) and applies all
 * the stream holds. In-flight figures of a router not heard from for five heartbeats
 * are forgotten, so a dead router, or a Redis outage, leaves no phantom load.
 */
public final class RedisReplication implements Plugin, RequestListener {
  public static final String TYPE = "redis-replication";

  static final int DEFAULT_BATCH_SIZE = 256;
  static final int DEFAULT_FLUSH_INTERVAL_MILLIS = 2;
  static final long DEFAULT_MAX_LEN = 100_000;
  static final int DEFAULT_QUEUE_CAPACITY = 65_536;
  /** Block hashes the queued hints may hold in all: 32 MiB of hashes. */
  static final long DEFAULT_QUEUE_MAX_BLOCKS = 4L << 20;
  static final int DEFAULT_HEARTBEAT_MILLIS = 1_000;
  /**
   * The stream key lives this long after the last batch written to it: a day. A pool whose
   * routers are all gone (renamed, retired) no longer leaves its stream in Redis for good.
   */
  static final long DEFAULT_STREAM_TTL_SECONDS = 86_400;
  /** Ten years: any longer is no TTL, which 0 says. */
  static final long MAX_STREAM_TTL_SECONDS = 10L * 365 * 86_400;
  static final int DEFAULT_CONNECT_TIMEOUT_MILLIS = 2_000;
  /** Silence after which an origin's in-flight figures are dropped, in heartbeats. */
  static final int SILENT_HEARTBEATS = 5;
  static final int MAX_ORIGINS = 1024;
  /**
   * Bytes after which a batch takes no further hint (1 MiB), whatever {@code batchSize} says:
   * a backlog of long prompts must not become one entry as large as itself, which Redis refuses
   * past its {@code proto-max-bulk-len} (512 MiB by default) and which past 2 GiB cannot even
   * be built; and every reader holds a whole read, {@link #READ_BATCHES} entries, at once. A
   * batch may pass it by the one hint that crossed it (a prompt's hashes, 64 KiB at the default
   * 8,192 blocks).
   */
  static final int MAX_BATCH_BYTES = 1 << 20;
  /**
   * Largest entry decoded: no router writes a longer one (a batch under {@link #MAX_BATCH_BYTES},
   * the one hint that crossed it, a prefix of at most {@link HintCodec#MAX_BLOCKS} hashes, and
   * strings of at most 64 KiB each). Decoding turns an entry's records into objects several times
   * its size; a longer entry, which only a foreign writer makes (Redis takes entries up to 512 MiB
   * by default), is skipped unread instead, so it costs its bytes and no more.
   */
  static final int MAX_ENTRY_BYTES = MAX_BATCH_BYTES + 8 * HintCodec.MAX_BLOCKS
      + 4 * (HintCodec.MAX_STRING_BYTES + 2) + 64;
  static final Duration READ_WAIT = Duration.ofMillis(200);
  /**
   * Entries one read asks for: with {@link #MAX_BATCH_BYTES}, a reader catching up on a backlog
   * of long prompts holds about 64 MiB at most (at 16 MiB entries and 256 a read it was 4 GiB).
   */
  static final int READ_BATCHES = 64;
  /**
   * Bytes of entries one read keeps at most, past its first entry: {@link #READ_BATCHES} entries
   * of {@link #MAX_BATCH_BYTES}. An entry may be up to {@link #MAX_ENTRY_BYTES} (a batch that a
   * hint of {@link HintCodec#MAX_BLOCKS} hashes crossed, about 33 MiB), and 64 of those would be
   * 2 GiB; the entries past the limit are read by the next read instead.
   */
  static final long READ_BYTES = (long) READ_BATCHES * MAX_BATCH_BYTES;
  static final long INITIAL_BACKOFF_NANOS = 100_000_000L;
  static final long MAX_BACKOFF_NANOS = 5_000_000_000L;
  /**
   * How long the last instance of a router spends on close sending the hints still queued: well
   * within the {@code close()} wait for the publisher thread ({@link #CLOSE_WAIT_MILLIS}).
   */
  static final long CLOSE_FLUSH_NANOS = 1_000_000_000L;
  /**
   * How long {@code close()} waits for each thread before it closes the connections under it,
   * and again after that.
   */
  static final long CLOSE_WAIT_MILLIS = 3_000;

  private static final Logger LOG = Logger.getLogger(RedisReplication.class.getName());
  private static final AttributeKey<String> POOL = AttributeKey.stringKey("pool");
  private static final AttributeKey<String> REASON = AttributeKey.stringKey("reason");
  private static final AttributeKey<String> THREAD = AttributeKey.stringKey("thread");

  /** What a configuration sets. */
  record Settings(String pool, String streamKey, String routerId, int batchSize,
      long flushIntervalNanos, int queueCapacity, long queueMaxBlocks, long heartbeatNanos,
      long maxLen) {
    /** With the default {@code maxLen}. */
    Settings(String pool, String streamKey, String routerId, int batchSize,
        long flushIntervalNanos, int queueCapacity, long queueMaxBlocks, long heartbeatNanos) {
      this(pool, streamKey, routerId, batchSize, flushIntervalNanos, queueCapacity,
          queueMaxBlocks, heartbeatNanos, DEFAULT_MAX_LEN);
    }
  }

  private final Settings s;
  private final @Nullable RouterHints hints;
  private final HintTransport.Factory transports;
  private final HintQueue queue;
  private final LongAdder droppedQueueFull = new LongAdder();
  private final AtomicLong droppedUnpublished = new AtomicLong();
  /** Records of hints the publisher failed on unexpectedly (a faulty plugin's blocks, a bug). */
  private final AtomicLong droppedFailed = new AtomicLong();
  /**
   * Records not sent because their endpoint's id is longer than a batch holds (65,535 bytes in
   * modified UTF-8): the endpoint's prefixes, sessions and in-flight figures. The others go out.
   */
  private final AtomicLong droppedIdTooLong = new AtomicLong();
  private final AtomicLong publisherErrors = new AtomicLong();
  private final AtomicLong readerErrors = new AtomicLong();
  private final AtomicLong malformed = new AtomicLong();
  private final AtomicLong entriesRead = new AtomicLong();
  private final AtomicLong published = new AtomicLong();
  private final AtomicLong applied = new AtomicLong();
  private final AtomicLong appliedPrefixes = new AtomicLong();
  private final AtomicLong appliedSessions = new AtomicLong();
  private final AtomicLong staleSessions = new AtomicLong();
  private final AtomicLong resyncs = new AtomicLong();
  /**
   * This router's place in the pool, shared with the instances a reload creates: only the newest
   * one publishes and reads. It keeps the batches this router tried to append (counted before
   * each attempt: one the server took counts even if its answer was lost), against which the
   * reader checks the batches it finds under its own id; the reader's clock when it first
   * connected (-1: no clock) and the batches under this router's id since then; the newest id
   * counted, so that a batch read again after the reader started over (a failover to a replica
   * that still holds it) is not counted twice; the sessions' binding times.
   */
  private final RouterSeat seat;
  /** Where this instance publishes and reads (the URI, never logged, and the stream key). */
  private final String target;
  /** Under which id and where this instance publishes. */
  private final String publishIdentity;
  private final SessionTimes sessionTimes;
  private volatile boolean sharedRouterId;
  private volatile boolean publisherUp;
  private volatile boolean readerUp;
  /** Set by the reader when the server became a replica: the publisher checks its writes. */
  private volatile boolean recheckWrites;
  private volatile boolean running = true;
  private final java.util.concurrent.atomic.AtomicBoolean closeCalled =
      new java.util.concurrent.atomic.AtomicBoolean();
  private final LagSamples lag = new LagSamples(4096);
  private final RateLimitedLog log;
  private final Telemetry telemetry;
  private final Thread publisher;
  private final Thread reader;
  /**
   * Forgets the in-flight figures of routers gone silent. Not the reader's job: a reader stuck in
   * a command (a server that stopped answering, up to {@code connectTimeoutMillis}, ten minutes
   * at most) would keep their load counted for that long.
   */
  private final Thread expirer;

  /**
   * @param settings the settings; an empty {@code routerId} takes the seat's, which a reload keeps
   * @param target where the transports publish and read: a reload that keeps it (and the
   *     routerId) continues the old instance's figures and place in the stream
   */
  RedisReplication(Settings settings, String target, @Nullable RouterHints hints,
      HintTransport.Factory transports, OpenTelemetry otel, io.epp4j.api.Ticker ticker) {
    this.seat = RouterSeat.of(hints, settings.pool());
    // what a failure below must undo: a constructor that throws leaves nothing behind
    boolean shared = false;
    @Nullable Telemetry instruments = null;
    @Nullable Thread publishing = null;
    @Nullable Thread reading = null;
    @Nullable Thread expiring = null;
    boolean joined = false;
    try {
      this.s = !settings.routerId().isEmpty() ? settings : new Settings(settings.pool(),
          settings.streamKey(), seat.defaultRouterId, settings.batchSize(),
          settings.flushIntervalNanos(), settings.queueCapacity(), settings.queueMaxBlocks(),
          settings.heartbeatNanos(), settings.maxLen());
      this.target = target;
      this.publishIdentity = s.routerId() + "\n" + target;
      this.sessionTimes = seat.sessionTimes;
      this.ticker = ticker;
      this.queue = new HintQueue(settings.queueCapacity(), settings.queueMaxBlocks());
      this.hints = hints;
      if (hints != null) {
        // from the first route on, even before any hint arrives: a burst at start is when the
        // routers most need to agree without having heard of each other
        hints.shareState();
        shared = true;
      }
      this.transports = transports;
      this.log = new RateLimitedLog(LOG, "redis-replication (pool " + settings.pool() + "): ");
      instruments = new Telemetry(otel);
      this.telemetry = instruments;
      publishing = new Thread(this::publishLoop, "epp4j-redis-replication-publish");
      reading = new Thread(this::readLoop, "epp4j-redis-replication-read");
      expiring = new Thread(this::expireLoop, "epp4j-redis-replication-expire");
      this.publisher = publishing;
      this.reader = reading;
      this.expirer = expiring;
      publishing.setDaemon(true);
      reading.setDaemon(true);
      expiring.setDaemon(true);
      // last: from here on the previous instance of this router (a reload) hands over to this one
      seat.join(this);
      joined = true;
      publishing.start();
      reading.start();
      expiring.start();
    } catch (RuntimeException | Error e) {
      abandon(e, hints, shared, instruments, joined, publishing, reading, expiring);
      throw e;
    }
  }

  /**
   * Undoes what a constructor that failed had done: the seat (given up when no other instance
   * holds it, else handed back to the instance that owned it), the shared-state tie-break, the
   * instruments and the threads. The transports are the caller's to close.
   */
  private void abandon(Throwable failure, @Nullable RouterHints hints, boolean shared,
      @Nullable Telemetry instruments, boolean joined, @Nullable Thread publishing,
      @Nullable Thread reading, @Nullable Thread expiring) {
    running = false;
    try {
      if (joined) {
        seat.leave(this);
      } else {
        seat.abandon();
      }
      for (Thread t : new @Nullable Thread[] {publishing, reading, expiring}) {
        if (t != null && t.getState() != Thread.State.NEW) {
          LockSupport.unpark(t);
          t.interrupt();
          t.join(3_000);
        }
      }
      if (instruments != null) {
        instruments.close();
      }
      if (shared && hints != null) {
        hints.stopSharingState();
      }
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
      failure.addSuppressed(ie);
    } catch (RuntimeException | Error cleanup) {
      failure.addSuppressed(cleanup);
    }
  }

  // ------------------------------------------------------------------------- routing thread

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    PrefixBlocks found = state.get(PrefixBlocks.KEY);
    // the cycle's hashes may be readable only until the cycle ends: the publisher gets a value
    // that stays readable (the prefix scorer's hashes copied)
    PrefixBlocks blocks = found != null && found.size() > 0 ? found.retained() : null;
    String key = request.sessionKey();
    // a longer session key is not shared: a route with nothing else to share queues nothing (it
    // used to queue a hint of no record, which took a place in the queue and, turned away by a
    // full one, was counted as no record dropped)
    String session = key != null && key.length() <= HintCodec.MAX_SESSION_KEY_CHARS ? key : null;
    if (blocks == null && session == null) {
      return;
    }
    // a prefill pick exists only when a second profile ran: skip the lookup otherwise
    Endpoint prefill = decision.profileResults().size() > 1
        ? decision.secondaryEndpoint("prefill") : null;
    // the cycle's clock reading: no second clock read on the routing thread
    Hint h = new Hint(state.nowNanos(), decision.primary().id(),
        prefill == null ? null : prefill.id(), blocks, session);
    if (!queue.offer(h)) {
      droppedQueueFull.add(records(h));
    }
  }

  /**
   * The records a hint becomes in a batch: a prefix for its endpoint, another for its prefill
   * endpoint when that is another one, and a session move. Dropped hints are counted in these,
   * the unit published and applied count in.
   */
  static int records(Hint h) {
    int n = h.sessionKey != null ? 1 : 0;
    if (h.blocks != null) {
      n += h.prefillEndpointId != null && !h.prefillEndpointId.equals(h.endpointId) ? 2 : 1;
    }
    return n;
  }

  /**
   * The gateway forwarded the request to a fallback: the other routers hear that its session
   * lives there now. The prompt's blocks are not sent again (the cycle that hashed them is over);
   * the other routers learn the fallback's load from its in-flight figures.
   */
  @Override
  public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
    String session = request.sessionKey();
    if (session == null || session.length() > HintCodec.MAX_SESSION_KEY_CHARS) {
      return;
    }
    if (!queue.offer(new Hint(ticker.nanos(), to.id(), null, null, session))) {
      droppedQueueFull.increment(); // one session record
    }
  }

  // ------------------------------------------------------------------------------ publishing

  // publisher thread only: one buffer for every batch
  private final HintCodec.Writer writer = new HintCodec.Writer();
  /**
   * Publisher thread only: the attempt to send the queue on close found Redis away, so the
   * farewell makes no second attempt (close waits a few seconds for the thread, not two
   * connection timeouts).
   */
  private boolean closingConnectFailed;

  private final io.epp4j.api.Ticker ticker;

  private void publishLoop() {
    HintTransport t = transports.create();
    Backoff backoff = new Backoff();
    long nextHeartbeat = System.nanoTime();
    // the batches this router had tried to append at the last heartbeat: a heartbeat that finds
    // none since checks that the server still takes writes
    long appendedAtHeartbeat = -1;
    // whether this thread holds the seat's publishing role (and may use seat.sent)
    boolean holding = false;
    try {
      while (running) {
        try {
          if (!holding) {
            if (seat.owner() != this || !seat.takePublishing(this)) {
              // a reload replaced this instance (or it waits for the one it replaced to let go)
              RouterSeat.idle(s.heartbeatNanos());
              continue;
            }
            holding = true;
            if (!publishIdentity.equals(seat.sentAs)) {
              // the figures were sent under another routerId or to another stream
              seat.sent.clear();
              seat.sentAs = publishIdentity;
            }
            // every figure at once: the same as the previous holder's under the same id
            nextHeartbeat = System.nanoTime();
          } else if (seat.owner() != this) {
            handOverPublishing(t);
            holding = false;
            continue;
          }
          takeLeftovers();
          if (!publisherUp) {
            if (!connect(t, backoff, "publisher")) {
              continue;
            }
            // connected is not yet publishing: a server that refuses writes (a read-only
            // replica, out of memory, an ACL without XADD) takes connections all the same, and
            // the gauge read 1 until the next batch was refused, for good when there was none
            recheckWrites = false;
            if (!takesWrites(t, backoff)) {
              continue;
            }
            // the others may have forgotten this router, or kept a figure that has changed
            // since: the next flush sends every figure, zeros of those that ended included
            nextHeartbeat = System.nanoTime();
            appendedAtHeartbeat = -1; // just checked
            publisherUp = true;
          }
          if (recheckWrites) {
            // the reader saw the server become a replica: say so now, not at the next batch
            recheckWrites = false;
            if (!takesWrites(t, backoff)) {
              continue;
            }
          }
          if (queuedForPublishing() < s.batchSize()) {
            // never past the next heartbeat: with a flush interval longer than the heartbeat, the
            // others (which drop a router silent for five of their heartbeats) would forget this
            // router's figures between two flushes
            LockSupport.parkNanos(Math.min(s.flushIntervalNanos(),
                Math.max(0, nextHeartbeat - System.nanoTime())));
          }
          if (seat.owner() != this) {
            continue; // woken to hand over
          }
          long now = System.nanoTime();
          boolean heartbeat = now - nextHeartbeat >= 0;
          if (heartbeat) {
            nextHeartbeat = now + s.heartbeatNanos();
          }
          if (!flush(t, seat.sent, heartbeat, backoff)) {
            publisherUp = false;
            t.close();
            pause(backoff, true);
            continue;
          }
          if (heartbeat) {
            long appended = seat.appendsAttempted.get();
            if (appended == appendedAtHeartbeat) {
              // nothing went out since the last heartbeat (no route, nothing in flight): a
              // server that began refusing writes since (out of memory, an ACL changed, a
              // demotion the reader's read did not see) would be found by no batch, and the
              // gauge would read 1 for as long as the router stays idle
              if (!takesWrites(t, backoff)) {
                continue;
              }
              // a command that succeeded, a heartbeat into the connection: the backoff starts
              // again from its first step, as a batch taken resets it. A router that sends
              // nothing makes no other command, and its next outage used to begin with the step
              // an earlier one had reached (up to 5 s). Not the check made on connecting: a
              // server that takes the check and refuses every batch must still be backed off from
              backoff.reset();
            }
            appendedAtHeartbeat = appended;
          }
        } catch (RuntimeException | Error e) {
          // not the transport's (its failures are handled where it is called): a bug, a
          // plugin's blocks that throw, or an Error such as OutOfMemoryError
          unexpected("publisher", e, backoff);
        }
      }
    } finally {
      if (!holding && seat.owner() == null && publishIdentity.equals(seat.sentAs)
          && seat.takePublishing(this)) {
        // the last instance of this router closes after a reload replaced it: its successor
        // closed first, and what the others hold is this one's to clear. The router closes
        // retired instances before the running one, so this is for plugins closed by hand in
        // another order: one connection attempt for the farewell
        holding = true;
      }
      if (holding && seat.owner() == null) {
        // no instance of this router goes on to send what this one queued
        flushOnClose(t);
      }
      if (holding) {
        handOverPublishing(t);
      }
      t.close();
    }
  }

  /**
   * Whether the server takes this connection's batches ({@link HintTransport#checkAppend});
   * when it does not, the refusal is reported as a refused batch would be, the connection
   * closed and a backoff step waited out.
   */
  private boolean takesWrites(HintTransport t, Backoff backoff) {
    try {
      t.checkAppend();
      return true;
    } catch (Exception e) {
      connectionLost("publisher", e);
      t.close();
      pause(backoff, true);
      return false;
    }
  }

  /**
   * The last instance of this router closes: the hints its routes queued since the last flush
   * (those of the last {@code flushIntervalMillis}, or of an outage) go out now, within
   * {@link #CLOSE_FLUSH_NANOS} and with one connection attempt when the publisher is down; those
   * that cannot are counted dropped (unpublished). Before this, they were lost without a count.
   */
  private void flushOnClose(HintTransport t) {
    takeLeftovers(); // those of instances a reload replaced, which no one else will send now
    if (queue.size() == 0) {
      return;
    }
    long deadline = System.nanoTime() + CLOSE_FLUSH_NANOS;
    try {
      if (!publisherUp) {
        try {
          t.connect();
          publisherUp = true;
        } catch (Exception e) {
          closingConnectFailed = true; // the farewell does not try again
          t.close();
          return;
        }
      }
      HintCodec.Writer w = writer;
      while (queue.size() > 0 && System.nanoTime() - deadline < 0) {
        w.reset();
        drain(queue, w, s.batchSize(), ticker.nanos(), epochMicros());
        if (w.records() == 0) {
          continue; // hints that failed to encode, counted
        }
        try {
          seat.appendsAttempted.incrementAndGet();
          t.append(w.finish(s.pool(), s.routerId(), epochMicros()));
        } catch (Exception e) {
          droppedUnpublished.addAndGet(w.records());
          publisherUp = false;
          closingConnectFailed = true;
          t.close();
          return;
        }
        published.addAndGet(w.records());
      }
    } catch (RuntimeException | Error e) {
      // closing must go on: what is left is counted below
    } finally {
      dropQueued();
    }
  }

  /** Counts what is still queued on this instance as dropped (unpublished) and frees it. */
  private void dropQueued() {
    int n = 0;
    long blocks = 0;
    long lost = 0;
    for (Hint h = queue.poll(); h != null; h = queue.poll()) {
      n++;
      blocks += HintQueue.blocksOf(h);
      lost += records(h);
    }
    queue.taken(n, blocks);
    droppedUnpublished.addAndGet(lost);
  }

  /**
   * Lets the publishing role go to the seat's owner, once this instance is replaced or closed.
   * When the owner publishes under the same routerId to the same stream, the figures the others
   * hold are its own: they stay (a farewell of zeros would erase them until its next change or
   * heartbeat). Otherwise (another routerId, another stream, or no owner: the router closes or
   * no longer replicates) this router's figures leave now, rather than after five heartbeats of
   * silence during which the others would count its requests under both ids. An owner under
   * another routerId on the same stream has its figures sent first, under its id: sent after the
   * zeros, by the owner once connected, they left the others counting none of this router's
   * requests for that long.
   */
  private void handOverPublishing(HintTransport t) {
    try {
      RedisReplication next = seat.owner();
      boolean continued = next != null && next.publishIdentity.equals(publishIdentity);
      if (!continued && !seat.sent.isEmpty()) {
        if (!publisherUp && !running && !closingConnectFailed) {
          t.connect(); // one attempt, for the farewell of a closing router
          publisherUp = true;
        }
        if (publisherUp) {
          Map<String, long[]> zeros = new HashMap<>();
          seat.sent.keySet().forEach(ep -> zeros.put(ep, new long[] {0, 0}));
          RedisReplication renamed = next != null && next.target.equals(target) ? next : null;
          Map<String, long[]> figures = renamed == null
              ? Map.of() : renamed.inFlightChanges(new HashMap<>(), true);
          if (renamed != null) {
            appendFigures(t, renamed.s.routerId(), figures);
          }
          appendFigures(t, s.routerId(), zeros);
          seat.sent.clear();
          if (renamed != null) {
            // what the others hold under the owner's id (its non-zero figures): it goes on from
            // there
            seat.sent.putAll(figures);
            seat.sentAs = renamed.publishIdentity;
          }
        }
      }
    } catch (Exception e) {
      // the others forget this router's figures after five heartbeats of silence instead
    } finally {
      publisherUp = false;
      t.close();
      seat.releasePublishing(this);
    }
  }

  /**
   * Appends {@code figures} under {@code origin}, in batches of {@link #MAX_BATCH_BYTES} as every
   * flush: a pool of many endpoints must not make one entry longer than the readers accept.
   */
  private void appendFigures(HintTransport t, String origin, Map<String, long[]> figures)
      throws Exception {
    HintCodec.Writer w = new HintCodec.Writer();
    Iterator<Map.Entry<String, long[]>> it = figures.entrySet().iterator();
    while (it.hasNext()) {
      w.reset();
      while (it.hasNext() && w.bytes() < MAX_BATCH_BYTES) {
        Map.Entry<String, long[]> f = it.next();
        w.inFlight(f.getKey(), (int) f.getValue()[0], f.getValue()[1]);
      }
      seat.appendsAttempted.incrementAndGet();
      t.append(w.finish(s.pool(), origin, epochMicros()));
    }
  }

  /**
   * Moves the hints that closed instances of this seat left queued into this instance's queue,
   * whose bounds they then count against (those that do not fit are dropped and counted, as a
   * route's hint is): a reload during an outage closes the replaced instance before they could
   * go out. Copies, since a hint is its own queue node. Publishing holder only: it is the one
   * consumer of every queue of the seat.
   */
  private void takeLeftovers() {
    for (HintQueue left : seat.leftovers()) {
      if (left == queue) {
        continue; // this instance closed while it held the role: the next holder takes them
      }
      int n = 0;
      long blocks = 0;
      try {
        for (Hint h = left.poll(); h != null; h = left.poll()) {
          n++;
          blocks += HintQueue.blocksOf(h);
          Hint copy = new Hint(h.capturedNanos, h.endpointId, h.prefillEndpointId, h.blocks,
              h.sessionKey);
          if (!queue.offer(copy)) {
            droppedQueueFull.add(records(copy));
          }
        }
      } finally {
        left.taken(n, blocks);
      }
      seat.leftoverEmptied(left);
    }
  }

  /** The queue of hints this instance's routes captured; for its seat. */
  HintQueue hintQueue() {
    return queue;
  }

  /** Hints waiting on every instance of this router's seat; the publishing holder sends them. */
  private int queuedForPublishing() {
    int n = 0;
    for (RedisReplication m : seat.members()) {
      n += m.queue.size();
    }
    return n;
  }

  /**
   * Sends every queued hint, with the in-flight changes in the first batches; false on failure.
   * The figures take as many batches as their bytes need (a batch takes no further figure once it
   * holds {@link #MAX_BATCH_BYTES}), all of them sent whatever the time: there is one per endpoint
   * of the pool, and a pool of thousands of endpoints, or long endpoint ids, in one entry would
   * make it longer than the readers accept ({@link #MAX_ENTRY_BYTES}), and every router would skip
   * this one's load. A batch Redis took resets the backoff.
   */
  private boolean flush(HintTransport t, Map<String, long[]> sent, boolean heartbeat,
      Backoff backoff) {
    for (Iterator<String> it = seat.earlierRunFigures.iterator(); it.hasNext(); ) {
      // a figure no one was told of by this run: whatever this run has there differs from it
      sent.putIfAbsent(it.next(), new long[] {-1, -1});
      it.remove();
    }
    // the newest hint of each queue, before the figures are read: a route counts its request
    // before it queues its hint, so the figures read next count every request whose hint this
    // flush sends. A hint queued after the figures were read waits for the next flush: sent now,
    // it put the prefix in the other routers' hands before the load it brings to its endpoint
    Map<HintQueue, Hint> upTo = new IdentityHashMap<>();
    for (RedisReplication m : seat.members()) {
      upTo.put(m.queue, m.queue.newest());
    }
    Iterator<Map.Entry<String, long[]>> figures =
        inFlightChanges(sent, heartbeat).entrySet().iterator();
    List<Map.Entry<String, long[]>> inBatch = new ArrayList<>();
    long started = System.nanoTime();
    boolean first = true;
    HintCodec.Writer w = writer;
    while (first || figures.hasNext() || queuedForPublishing() > 0) {
      w.reset();
      inBatch.clear();
      while (figures.hasNext() && w.bytes() < MAX_BATCH_BYTES) {
        Map.Entry<String, long[]> f = figures.next();
        w.inFlight(f.getKey(), (int) f.getValue()[0], f.getValue()[1]);
        inBatch.add(f);
      }
      int figureRecords = w.records();
      int hintsTaken;
      try {
        hintsTaken = drain(w, s.batchSize(), upTo);
      } catch (Error e) {
        // the batch is given up: the hints already in it are lost (its in-flight figures are
        // not: sent stays as it was, so the next batch carries them again)
        droppedFailed.addAndGet(w.records() - figureRecords);
        throw e;
      }
      boolean full = hintsTaken >= s.batchSize() || w.bytes() >= MAX_BATCH_BYTES;
      first = false;
      if (w.records() == 0) {
        return true;
      }
      try {
        seat.appendsAttempted.incrementAndGet();
        t.append(w.finish(s.pool(), s.routerId(), epochMicros()));
      } catch (Exception e) {
        // the hints taken from the queue are lost, counted in records; the in-flight figures
        // are not: sent stays as it was for those not sent yet, so the next batch carries them
        droppedUnpublished.addAndGet(w.records() - figureRecords);
        connectionLost("publisher", e);
        return false;
      }
      backoff.reset();
      published.addAndGet(w.records());
      for (Map.Entry<String, long[]> f : inBatch) {
        long[] v = f.getValue();
        if (v[0] == 0 && v[1] == 0) {
          sent.remove(f.getKey());
        } else {
          sent.put(f.getKey(), v);
        }
      }
      if (figures.hasNext()) {
        continue;
      }
      if (!full || System.nanoTime() - started >= s.flushIntervalNanos()) {
        // a backlog that never empties (hints come faster than batches go) must not keep the
        // in-flight figures from going out: the caller sends their changes with the next batch
        return true;
      }
    }
    return true;
  }

  /**
   * Publisher thread only: the last figure of each endpoint whose id is longer than a batch holds,
   * none of which is sent; each is counted dropped when it would have gone out (a change, a
   * heartbeat), as a sendable one is counted published. It used to make the whole flush fail,
   * every time: none of this router's figures, nor the hints after them, went out.
   */
  private final Map<String, long[]> figuresTooLong = new HashMap<>();

  /** This router's in-flight figures that differ from what was sent, or all when due. */
  private Map<String, long[]> inFlightChanges(Map<String, long[]> sent, boolean all) {
    RouterHints h = hints;
    if (h == null) {
      return Map.of();
    }
    Map<String, long[]> changes = new HashMap<>();
    Map<String, long[]> seen = new HashMap<>();
    h.forEachLocalInFlight((ep, r, tok) -> {
      long[] v = {r, tok};
      seen.put(ep, v);
      boolean fits = HintCodec.fits(ep);
      long[] before = fits ? sent.get(ep) : figuresTooLong.get(ep);
      boolean zero = r == 0 && tok == 0;
      if (before == null ? !zero : (before[0] != r || before[1] != tok || all)) {
        if (fits) {
          changes.put(ep, v);
        } else {
          idTooLong(ep);
          if (zero) {
            figuresTooLong.remove(ep);
          } else {
            figuresTooLong.put(ep, v);
          }
        }
      }
    });
    for (String ep : sent.keySet()) {
      if (!seen.containsKey(ep)) {
        changes.put(ep, new long[] {0, 0}); // the endpoint left the pool
      }
    }
    for (Iterator<String> it = figuresTooLong.keySet().iterator(); it.hasNext(); ) {
      String ep = it.next();
      if (!seen.containsKey(ep)) {
        idTooLong(ep); // its zero, had it fitted
        it.remove();
      }
    }
    return changes;
  }

  /** Publisher thread only: whether an endpoint id too long to send was said. */
  private boolean idTooLongSaid;

  /**
   * One record not sent because its endpoint's id is longer than a batch holds: counted, and the
   * first of them said, once for this instance (the count goes on in the metric).
   */
  private void idTooLong(String endpointId) {
    droppedIdTooLong.incrementAndGet();
    if (idTooLongSaid) {
      return;
    }
    idTooLongSaid = true;
    log.report(Level.WARNING, "endpoint-id-too-long", "an endpoint's id ('"
        + endpointId.substring(0, Math.min(64, endpointId.length())) + "...') is "
        + HintCodec.encodedLength(endpointId) + " bytes in modified UTF-8, more than the "
        + HintCodec.MAX_STRING_BYTES + " a batch holds: the prefixes, sessions and in-flight"
        + " figures of such an endpoint are not shared with the other routers, and are counted in"
        + " epp4j.replication.hints_dropped{reason=endpoint_id_too_long}; every other endpoint's"
        + " still are. Said once");
  }

  /**
   * Moves up to {@code max} queued hints into the batch, those of the instances this one replaced
   * first (routes that read the configuration before a reload queue on the instance they found),
   * each queue's up to its mark in {@code upTo} (none from a queue without one); returns how
   * many. Publishing holder only: it is the one consumer of every member's queue.
   */
  private int drain(HintCodec.Writer w, int max, Map<HintQueue, Hint> upTo) {
    // the router's clock, which stamped the hints
    long nowNanos = ticker.nanos();
    long nowMicros = epochMicros();
    int n = 0;
    for (RedisReplication m : seat.members()) {
      if (n >= max || w.bytes() >= MAX_BATCH_BYTES) {
        break;
      }
      Hint mark = upTo.get(m.queue);
      if (mark != null) {
        n += drain(m.queue, mark, w, max - n, nowNanos, nowMicros);
      }
    }
    return n;
  }

  private int drain(HintQueue queue, HintCodec.Writer w, int max, long nowNanos, long nowMicros) {
    return drain(queue, null, w, max, nowNanos, nowMicros);
  }

  /** Moves up to {@code max} hints of {@code queue} into the batch, up to {@code upTo} if set. */
  private int drain(HintQueue queue, @Nullable Hint upTo, HintCodec.Writer w, int max,
      long nowNanos, long nowMicros) {
    int n = 0;
    long taken = 0;
    try {
      // a batch full by its bytes takes no more: the first hint always fits, so the queue moves
      while (n < max && w.bytes() < MAX_BATCH_BYTES) {
        Hint h = upTo == null ? queue.poll() : queue.poll(upTo);
        if (h == null) {
          break;
        }
        n++;
        taken += HintQueue.blocksOf(h);
        int bytesBefore = w.bytes();
        int recordsBefore = w.records();
        try {
          encode(h, w, nowNanos, nowMicros);
        } catch (RuntimeException | Error e) {
          // this hint only (a plugin's blocks that throw, a bug): its half-written records
          // leave the batch, the others go out
          w.rewind(bytesBefore, recordsBefore);
          droppedFailed.addAndGet(records(h));
          if (e instanceof Error) {
            throw e; // the publisher pauses: see unexpected
          }
          unexpected("publisher", e, null);
        }
      }
    } finally {
      // once per batch: the routing threads increment the same counter. Also after a failure,
      // or the hints taken would hold their room in the queue for good
      queue.taken(n, taken);
    }
    return n;
  }

  /** Writes one hint's records into the batch. */
  private void encode(Hint h, HintCodec.Writer w, long nowNanos, long nowMicros) {
    long at = nowMicros - (nowNanos - h.capturedNanos) / 1000;
    // an endpoint id longer than a batch holds: its records are left out, the hint's others go
    boolean fits = HintCodec.fits(h.endpointId);
    PrefixBlocks blocks = h.blocks;
    if (blocks != null) {
      if (fits) {
        w.prefix(at, h.endpointId, blocks);
      } else {
        idTooLong(h.endpointId);
      }
      String prefill = h.prefillEndpointId;
      if (prefill != null && !prefill.equals(h.endpointId)) {
        if (HintCodec.fits(prefill)) {
          w.prefix(at, prefill, blocks);
        } else {
          idTooLong(prefill);
        }
      }
    }
    if (h.sessionKey != null && !fits) {
      idTooLong(h.endpointId);
    } else if (h.sessionKey != null) {
      w.session(at, h.sessionKey, h.endpointId);
      int seen = sessionTimes.local(h.sessionKey, sessionTimes.toLogClock(at),
          sessionTimes.toLogClock(nowMicros));
      RouterHints target = hints;
      if (seen == SessionTimes.OVERRIDDEN && target != null) {
        // an older move of another router, read while this hint waited (an outage), replaced
        // this router's newer binding here: put it back
        target.sessionBound(h.sessionKey, h.endpointId);
      }
    }
  }

  // --------------------------------------------------------------------------------- reading

  private void readLoop() {
    HintTransport t = transports.create();
    Wanted wanted = new Wanted(s.pool(), s.routerId(), seat.startedMicros);
    Backoff backoff = new Backoff();
    // entries the next read asks for: fewer after a read that ran out of time (see readTimedOut)
    int readCount = READ_BATCHES;
    @Nullable String lastId = null;
    // ids older than this (the log's clock when the reader started over from the oldest batch,
    // less the silence limit) are history: -1 when the log has no clock
    long staleBeforeMillis = -1;
    long nextGapCheck = 0;
    // whether the last read ended in UNBLOCKED: a second one in a row waits out a backoff step
    boolean unblockedLast = false;
    // whether this thread holds the seat's reading role (and may use its reader fields)
    boolean holding = false;
    try {
      while (running) {
        try {
          if (!holding) {
            if (seat.owner() != this || !seat.takeReading(this)) {
              // a reload replaced this instance (or it waits for the one it replaced to let go)
              RouterSeat.idle(s.heartbeatNanos());
              continue;
            }
            holding = true;
            if (target.equals(seat.readFrom)) {
              // the instance a reload replaced read this stream: on from where it stopped, with
              // the origins it heard from (a reconnection, as far as the stream is concerned)
              lastId = seat.lastId;
              staleBeforeMillis = seat.staleBeforeMillis;
            } else {
              seat.readFrom = target;
              seat.ownCountedTo = null;
              // another stream, perhaps on another server: its ids are another clock's
              seat.originOffsets.clear();
            }
            if (!s.routerId().equals(seat.ownId)) {
              seat.ownId = s.routerId();
              seat.ownSinceMillis = -1;
              seat.ownSeen = 0;
            }
          } else if (seat.owner() != this) {
            seat.lastId = lastId;
            seat.staleBeforeMillis = staleBeforeMillis;
            handOverReading(t);
            holding = false;
            continue;
          }
          if (!readerUp) {
            if (!connect(t, backoff, "reader")) {
              continue;
            }
            try {
              long now = logNow(t);
              if (seat.ownSinceMillis < 0) {
                seat.ownSinceMillis = now;
              }
              if (lastId == null) {
                staleBeforeMillis = staleBefore(now);
                lastId = HintTransport.OLDEST; // a new router learns what the stream holds
              } else if (!lastId.equals(HintTransport.OLDEST) && !t.holdsAfter(lastId)) {
                // a reader that has applied nothing since it started from the oldest batch loses
                // nothing reading from it again, and holdsAfter takes an id read from the log
                staleBeforeMillis = startOver(t);
                lastId = HintTransport.OLDEST;
              } else {
                // catching up on what was written while this reader was away: batches older than
                // the silence limit are history as at start, whatever the limit was before
                staleBeforeMillis = staleBefore(now);
              }
            } catch (Exception e) {
              readerLost(t, e, backoff);
              continue;
            }
            readerUp = true;
            nextGapCheck = System.nanoTime() + s.heartbeatNanos();
          } else if (lastId != null && !lastId.equals(HintTransport.OLDEST)
              && System.nanoTime() - nextGapCheck >= 0) {
            // a reader that stays connected can fall behind the trim too (maxLen batches written
            // faster than it reads): a read after a trimmed id returns what follows it without
            // saying what was lost, so the stream's oldest batch is checked once a heartbeat
            nextGapCheck = System.nanoTime() + s.heartbeatNanos();
            try {
              if (!t.holdsAfter(lastId)) {
                staleBeforeMillis = startOver(t);
                lastId = HintTransport.OLDEST;
              } else {
                // a connected reader can fall behind too: what it reads late is history alike
                staleBeforeMillis = staleBefore(logNow(t));
              }
            } catch (Exception e) {
              if (!running) {
                break;
              }
              readerLost(t, e, backoff);
              continue;
            }
          }
          String after = lastId == null ? HintTransport.OLDEST : lastId;
          @Nullable List<HintTransport.Entry> got = null;
          try {
            got = t.read(after, readCount, READ_WAIT, wanted.reset(ownWholeUpTo(after)));
            // a read that may have followed a trim: the reader may be behind by more than the
            // stream keeps. A read after a trimmed id returns what follows without saying what
            // was lost, and a reader catching up is back inside the stream by the next
            // heartbeat's check, so the stream is asked now whether it still holds everything
            // after the id this read started from. The trim (MAXLEN ~ maxLen) leaves at least
            // maxLen batches, all after the cursor of a reader it passed, so such a read returns
            // as many as it asked for or maxLen, whichever is fewer: only a read that returns
            // fewer cannot have followed a trim. (It used to be checked only at READ_BATCHES,
            // which a maxLen below it never reaches: a reader that fell behind lost batches
            // without a resync, when it caught up between two heartbeats' checks)
            if (got.size() >= Math.min(readCount, s.maxLen())
                && !after.equals(HintTransport.OLDEST) && !t.holdsAfter(after)) {
              staleBeforeMillis = startOver(t);
              lastId = HintTransport.OLDEST;
              continue;
            }
          } catch (Exception e) {
            if (!running) {
              break;
            }
            if (got == null && timedOut(e)) {
              readTimedOut(t, after, readCount, backoff);
              readCount = Math.max(1, readCount / 2);
              continue;
            }
            if ("UNBLOCKED".equals(refusalCode(e))) {
              readUnblocked(t, e, unblockedLast ? backoff : null);
              unblockedLast = true;
              continue;
            }
            readerLost(t, e, backoff);
            continue;
          }
          backoff.reset();
          unblockedLast = false;
          // back towards the full count: at once when caught up (what comes now is what routers
          // write live), else doubling, so that a reader that a server's stall brought down to
          // small reads does not stay behind a stream that grows faster than it reads
          readCount = got.size() < readCount ? READ_BATCHES : Math.min(READ_BATCHES, readCount * 2);
          long newest = got.isEmpty() ? -1 : StreamIds.millis(got.get(got.size() - 1).id());
          for (HintTransport.Entry e : got) {
            if (Wanted.leftForNextRead(e)) {
              break; // the read held all it may: this one and those after it come next time
            }
            // first: a batch that fails is not read again (after an Error, the next ones are)
            lastId = e.id();
            try {
              apply(e, newest, staleBeforeMillis);
            } catch (RuntimeException ex) {
              // this batch only (a bug, or the router threw while a hint was applied)
              unexpected("reader", ex, null);
            }
          }
        } catch (RuntimeException | Error e) {
          // not the transport's (its failures are handled where it is called): a bug, or an
          // Error such as OutOfMemoryError
          unexpected("reader", e, backoff);
        }
      }
    } finally {
      if (holding) {
        seat.lastId = lastId;
        seat.staleBeforeMillis = staleBeforeMillis;
        handOverReading(t);
      }
      t.close();
    }
  }

  /**
   * Lets the reading role go to the seat's owner, once this instance is replaced or closed. An
   * owner that reads another stream (or none: the router closes or no longer replicates) will
   * not hear from the other routers of this one, so their in-flight figures leave now.
   */
  private void handOverReading(HintTransport t) {
    try {
      RedisReplication next = seat.owner();
      if (next == null || !next.target.equals(target)) {
        forgetAllOrigins();
      }
    } finally {
      readerUp = false;
      t.close();
      seat.releaseReading(this);
    }
  }

  /**
   * The server ended the reader's blocked read with {@code UNBLOCKED}: it became a replica
   * ({@code REPLICAOF}, a failover that demoted it), which ends every blocked command and then
   * closes the connection, or someone ran {@code CLIENT UNBLOCK ... ERROR}. Nothing failed: a
   * replica serves reads, so the reader reconnects at once, without a backoff step (unless the
   * read before ended so too: a server that unblocks every read is not reconnected to in a
   * loop), and reads on from where it was (the reconnection's gap check still applies, for a replica that resynced
   * from another primary). It used to be logged as a refusal ({@code Redis refused a command
   * (reader: UNBLOCKED ...)}), which suggested that reading had failed and took the reader's
   * minute of refusal warnings from a real one. A demotion is said once, at INFO, and the
   * publisher is asked to check at once that the server still takes writes: a replica refuses
   * them, and that warning ({@code READONLY}) is the one that says what to fix, even on a router
   * with nothing to send.
   */
  private void readUnblocked(HintTransport t, Exception e, @Nullable Backoff backoff) {
    readerUp = false;
    t.close();
    if (backoff != null) {
      pause(backoff);
    }
    String m = e.getMessage();
    if (m != null && m.contains("instance state changed")) {
      recheckWrites = true;
      LockSupport.unpark(publisher);
      log.report(Level.INFO, "demoted", "Redis became a replica (REPLICAOF, or a failover"
          + " demoted it), which ended the reader's blocked read on stream '" + s.streamKey()
          + "'; the reader goes on reading from it, and writes go out once it takes them again");
    } else {
      log.report(Level.INFO, "unblocked", "Redis ended the reader's blocked read on stream '"
          + s.streamKey() + "' (CLIENT UNBLOCK); the reader goes on reading");
    }
  }

  /**
   * A read's answer did not arrive within its timeout ({@code connectTimeoutMillis} past the
   * read's wait). {@code XREAD} sends entries whole, so a read of many large entries (a backlog
   * of long prompts, up to {@link #MAX_ENTRY_BYTES} each, or a foreign writer's larger ones) can
   * take longer on a slow link than the timeout allows, and reading the same entries again would
   * run out of time again, for good. The connection is dropped (its answer is still arriving)
   * and the caller asks for half as many entries next time, without waiting, down to one (and
   * back up as reads succeed); a read of one entry that runs out of time names the entry it is
   * stuck behind and the setting to raise, and waits out the backoff, as does any other failure
   * of the reader.
   */
  private void readTimedOut(HintTransport t, String after, int count, Backoff backoff) {
    readerUp = false;
    t.close();
    if (count > 1) {
      return;
    }
    log.report(Level.WARNING, "read-timeout", "the entry after id " + after + " of stream '"
        + s.streamKey() + "' did not arrive within connectTimeoutMillis past the read's wait of "
        + READ_WAIT.toMillis() + " ms: Redis is not answering, or the entry is larger than the"
        + " connection carries in that time (a router writes entries of at most "
        + MAX_ENTRY_BYTES + " bytes; a larger one is another writer's). Raise"
        + " connectTimeoutMillis, or delete the entry; retrying with backoff");
    pause(backoff);
  }

  /** Whether {@code e} says that a command's answer did not come in time. */
  static boolean timedOut(Throwable e) {
    return e instanceof io.lettuce.core.RedisCommandTimeoutException
        || e instanceof java.util.concurrent.TimeoutException;
  }

  /** The reader's connection failed: closed, and the next attempt waits out the backoff. */
  private void readerLost(HintTransport t, Exception e, Backoff backoff) {
    readerUp = false;
    connectionLost("reader", e);
    t.close();
    pause(backoff);
  }

  /**
   * The stream no longer holds every batch since the last one applied: counts a resync and
   * forgets every other router's in-flight figures (a batch that lowered one may be among the
   * lost ones, and its sender does not send that figure again; they are learnt anew from what
   * the stream holds and the next heartbeats, which carry every non-zero figure). The reader then
   * applies the stream from its oldest batch; returns the id time before which those are history.
   */
  private long startOver(HintTransport t) throws Exception {
    long stale = staleBefore(logNow(t));
    resyncs.incrementAndGet();
    log.report(Level.INFO, "resync", "the stream no longer holds every batch since"
        + " the last one applied; applying everything it holds");
    forgetAllOrigins();
    return stale;
  }

  /**
   * The log's clock now ({@link HintTransport#nowMillis}), also taken as the offset of this
   * router's clock from it, in which the sessions' binding times are compared.
   */
  private long logNow(HintTransport t) throws Exception {
    long beforeNanos = System.nanoTime();
    long before = epochMicros();
    long now = t.nowMillis();
    long after = epochMicros();
    sessionTimes.logClockRead(now, before, after, beforeNanos, System.nanoTime());
    return now;
  }

  /**
   * The id time before which a batch is too old for its in-flight figures and send time to
   * mean anything: the log's clock less the silence limit, or -1 when the log has no clock. Read
   * when the reader starts over from the oldest batch, on every reconnection and once a
   * heartbeat: the stream's history, and what a reader that was away or fell behind reads late,
   * may hold figures of routers long gone, and batches read {@link #READ_BATCHES} at a time
   * cannot be told old by comparing them with each other.
   */
  private long staleBefore(long now) {
    return now < 0 ? -1 : now - s.heartbeatNanos() * SILENT_HEARTBEATS / 1_000_000;
  }

  /**
   * Connects, or waits out the backoff after a failure; true when connected. A connection alone
   * does not reset the backoff: a server can accept connections and refuse every command (out of
   * memory, a read-only replica, an ACL without the stream commands), and reconnecting at once
   * after each refusal would loop without pause. Only a command that succeeds resets it.
   */
  private boolean connect(HintTransport t, Backoff backoff, String who) {
    try {
      t.connect();
      return true;
    } catch (Exception e) {
      t.close();
      connectionLost(who, e);
      // the publisher calls this holding the publishing role: it may take from the queues
      pause(backoff, who.equals("publisher"));
      return false;
    }
  }

  private void pause(Backoff backoff) {
    pause(backoff, false);
  }

  /**
   * Waits out the next backoff step before the next connection attempt, the whole step: a wait
   * capped at a heartbeat would make a short {@code heartbeatMillis} a reconnection loop. Both
   * threads stop waiting when closed or replaced. The publisher, when it holds the publishing
   * role ({@code makeRoom}), wakes once a heartbeat meanwhile and makes room in a queue that
   * turned hints away for the newer ones. (Silent origins are forgotten by {@link #expireLoop},
   * whatever the reader waits for.)
   */
  private void pause(Backoff backoff, boolean makeRoom) {
    long until = System.nanoTime() + backoff.next();
    if (makeRoom) {
      makeRoomForNewest();
    }
    while (running && seat.owner() == this) {
      long left = until - System.nanoTime();
      if (left <= 0) {
        return;
      }
      LockSupport.parkNanos(Math.min(left, s.heartbeatNanos()));
      if (makeRoom) {
        makeRoomForNewest();
      }
    }
  }

  /** Publisher thread only: hints turned away by a full queue when it last made room. */
  private long turnedAwaySeen;

  /**
   * While Redis is away the queue fills and, full, turns away every newer hint: what went out
   * once Redis came back were the hints of the outage's first seconds, the ones least likely to
   * still be in the engines' caches, and none of the last ones. So once a queue has turned a hint
   * away, the publisher drops its oldest hints until a quarter of its room (hints and block
   * hashes) is free for the newest, counting them as {@code queue_full} as the hints turned away
   * are. Publishing holder only: it is the one consumer of every member's queue.
   */
  private void makeRoomForNewest() {
    long turnedAway = 0;
    for (RedisReplication m : seat.members()) {
      turnedAway += m.droppedQueueFull.sum();
    }
    if (turnedAway == turnedAwaySeen) {
      return;
    }
    long lost = 0;
    for (RedisReplication m : seat.members()) {
      HintQueue q = m.queue;
      int keepHints = q.capacity() - Math.max(1, q.capacity() / 4);
      long keepBlocks = q.maxBlocks() - Math.max(1, q.maxBlocks() / 4);
      int n = 0;
      long blocks = 0;
      try {
        while (q.size() - n > keepHints || q.blocks() - blocks > keepBlocks) {
          Hint h = q.poll();
          if (h == null) {
            break;
          }
          n++;
          blocks += HintQueue.blocksOf(h);
          lost += records(h);
        }
      } finally {
        q.taken(n, blocks);
      }
    }
    droppedQueueFull.add(lost);
    turnedAwaySeen = turnedAway + lost;
  }

  /**
   * A failure of the publisher or the reader that no transport call threw: logged (at most once a
   * minute, with its stack trace) and counted, and the thread goes on with the next hint or
   * batch, the one it failed on being lost. A failure of the loop itself, and every
   * {@link Error}, also makes the thread wait out a {@code backoff} step (100 ms, doubling to 5 s
   * while they repeat; reset by the next command that succeeds): an {@link OutOfMemoryError}
   * is not driven into a loop of failures, and replication resumes once memory is back instead
   * of stopping for the rest of the JVM's life.
   */
  private void unexpected(String who, Throwable e, @Nullable Backoff backoff) {
    (who.equals("publisher") ? publisherErrors : readerErrors).incrementAndGet();
    if (running) {
      log.report(e instanceof Error ? Level.SEVERE : Level.WARNING, "unexpected-" + who,
          "the " + who + " failed unexpectedly (" + e.getClass().getName() + "); it goes on"
              + " with the next " + (who.equals("publisher") ? "hint" : "batch"),
          // a plugin's exception (its PrefixBlocks) may quote the prompt: class and frames only
          RedactedException.of(e));
    }
    if (backoff != null) {
      pause(backoff);
    }
  }

  private void connectionLost(String who, Exception e) {
    if (who.equals("publisher")) {
      publisherUp = false;
    } else {
      readerUp = false;
    }
    if (!running) {
      return;
    }
    if (refusedCredentials(e)) {
      // retrying does not fix a wrong password, but a rotated secret may come back: keep trying
      log.report(Level.WARNING, "auth", "Redis refused this router's credentials (" + who
          + "): check the user and password of parameter 'uri'; routing continues on this"
          + " router's own state, retrying with backoff");
    } else if (refusalCode(e) != null) {
      // connected, and the server answered with an error (WRONGTYPE on the key, OOM, READONLY,
      // NOPERM...): its code says what to fix; the rest of the reply is not logged. Each thread
      // has its own minute, so that one thread's refusal does not leave the other's unsaid
      String code = refusalCode(e);
      log.report(Level.WARNING, "refused-" + who, "Redis refused a command (" + who + ": "
          + code + " on stream '" + s.streamKey() + "'" + ("READONLY".equals(code)
              ? ": the server is a read-only replica, made one by a failover or REPLICAOF, or"
                  + " named by uri; nothing is published until it takes writes again"
              : "") + "); routing continues on this router's own state, retrying with backoff");
    } else {
      log.report(Level.WARNING, "down", "Redis unreachable (" + who + ": "
          + e.getClass().getSimpleName() + "); routing continues on this router's own state,"
          + " reconnecting with backoff");
    }
  }

  /**
   * The error code (the first word, e.g. {@code WRONGTYPE}, {@code OOM}, {@code NOPERM}) of a
   * command Redis answered with an error, or null when the failure was not such an answer.
   */
  static @Nullable String refusalCode(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
      if (t instanceof io.lettuce.core.RedisCommandExecutionException) {
        String m = t.getMessage();
        String code = m == null ? "" : m.split(" ", 2)[0];
        return code.matches("[A-Z]{2,32}") ? code : "an error reply";
      }
    }
    return null;
  }

  /**
   * Whether Redis answered the handshake with an authentication error ({@code WRONGPASS},
   * {@code NOAUTH}, or the older "invalid password"). Only the reply's first word is looked at:
   * the server's messages never carry the password, but nothing of them is logged either.
   */
  static boolean refusedCredentials(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
      String m = t.getMessage();
      if (m != null && (m.startsWith("WRONGPASS") || m.startsWith("NOAUTH")
          || m.startsWith("ERR invalid password") || m.startsWith("ERR AUTH"))) {
        return true;
      }
    }
    return false;
  }

  /**
   * What the reader keeps of an entry as it is read: nothing of one longer than any router
   * writes, the header only of another pool's or this router's own (all it looks at), the whole
   * of the others, up to {@link #READ_BYTES} in all: an entry past them (after the first one
   * kept) comes back empty and is read again, first, by the next read. A read then holds at most
   * {@link #READ_BYTES} and one entry of {@link #MAX_ENTRY_BYTES}, whatever the stream holds.
   * Used on the thread that decodes the read's answer, one read at a time.
   */
  static final class Wanted implements HintTransport.Wanted {
    private final byte[] pool;
    private final byte[] own;
    /** Own batches sent before this (an earlier run's) are read whole; set by each read. */
    private long ownSentFrom;
    /** Bytes kept whole by the read in progress. */
    private long kept;

    /** Every own batch skipped but for its header. */
    Wanted(String pool, String routerId) {
      this(pool, routerId, Long.MIN_VALUE);
    }

    Wanted(String pool, String routerId, long ownSentFrom) {
      this.pool = HintCodec.utf(pool);
      this.own = HintCodec.utf(routerId);
      this.ownSentFrom = ownSentFrom;
    }

    /** A new read begins. */
    Wanted reset() {
      kept = 0;
      return this;
    }

    /** A new read begins, which reads whole the own entries sent before {@code ownSentFrom}. */
    Wanted reset(long ownSentFrom) {
      this.ownSentFrom = ownSentFrom;
      return reset();
    }

    @Override
    public int bytes(java.nio.ByteBuffer stored) {
      int n = stored.remaining();
      if (n > MAX_ENTRY_BYTES) {
        return 0;
      }
      int header = HintCodec.headerLengthIfSkipped(stored, pool, own, ownSentFrom);
      if (header >= 0) {
        return header;
      }
      if (kept > 0 && kept + n > READ_BYTES) {
        return 0; // left for the next read, which starts with it
      }
      kept += n;
      return n;
    }

    /**
     * Whether {@code e} came back without its bytes to be read again by the next read: only
     * such an entry is empty although shorter than an oversized one.
     */
    static boolean leftForNextRead(HintTransport.Entry e) {
      return e.batch().length == 0 && e.size() > 0 && e.size() <= MAX_ENTRY_BYTES;
    }
  }

  private void apply(HintTransport.Entry entry, long newestMillis, long staleBeforeMillis) {
    try {
      applyEntry(entry, newestMillis, staleBeforeMillis);
    } finally {
      // counted once handled: a test that waits for every entry to be read then sees all it did
      entriesRead.incrementAndGet();
    }
  }

  private void applyEntry(HintTransport.Entry entry, long newestMillis, long staleBeforeMillis) {
    if (entry.size() > MAX_ENTRY_BYTES) {
      rejectMalformed(entry.id(), new HintCodec.MalformedBatchException(entry.size()
          + " bytes, above the " + MAX_ENTRY_BYTES + " bytes of the longest entry a router writes"));
      return;
    }
    HintCodec.Input in = HintCodec.input(entry.batch());
    HintCodec.Header h;
    try {
      h = HintCodec.header(in);
    } catch (HintCodec.MalformedBatchException e) {
      rejectMalformed(entry.id(), e);
      return;
    }
    if (!h.pool().equals(s.pool())) {
      return; // another pool's hints never reach this router
    }
    long entryMillis = StreamIds.millis(entry.id());
    if (entryMillis < 0 && StreamIds.pastAnyClock(entry.id())) {
      // read as a log without a clock would be: its times in µs overflowed the origins' offsets,
      // so that every later move looked older than any this router knew
      log.report(Level.WARNING, "id-past-clocks", "entry " + entry.id() + " of stream '"
          + s.streamKey() + "' has an id after the year 9999 (written with an id of its"
          + " writer's choosing), and Redis gives every later entry one of the same time: session"
          + " moves are ordered on the routers' own clocks until the stream's key is deleted");
    }
    // batches from before a catch-up window (a new router reading the stream's history) teach
    // prefixes and sessions; their in-flight figures and send times are long out of date
    boolean fresh = newestMillis < 0 || entryMillis < 0
        || (newestMillis - entryMillis <= s.heartbeatNanos() * SILENT_HEARTBEATS / 1_000_000
            && entryMillis >= staleBeforeMillis);
    if (h.origin().equals(s.routerId())) {
      noteOwn(entry.id(), entryMillis, h.sentEpochMicros());
      if (fresh && earlierRun(entryMillis, h.sentEpochMicros())) {
        earlierRunFigures(entry.id(), in, h);
      }
      return; // its own it knows already
    }
    // under the origins' lock, which the expiry thread takes to forget a silent origin: it must
    // not forget one between the reader's deciding that its figures count here and their
    // application, which would then be counted until inFlightMaxAge
    synchronized (seat.originsSeen) {
      applyRecords(entry, in, h, entryMillis, fresh);
    }
  }

  private void applyRecords(HintTransport.Entry entry, HintCodec.Input in, HintCodec.Header h,
      long entryMillis, boolean fresh) {
    // the bound on origins bounds the in-flight figures kept per origin; prefixes and sessions
    // keep no state per origin, so a router past it still teaches this one those
    Map<String, Long> origins = seat.originsSeen;
    boolean figures = fresh
        && (origins.containsKey(h.origin()) || origins.size() < MAX_ORIGINS);
    // a batch read as history (the reader fell behind, or was away, by more than the silence
    // limit) of a router whose figures are counted here: its figures are newer than those held,
    // so they replace them. Skipped, the one that lowered a figure left the older figure in place
    // for good (its router sends a change once), until the age limit. The router's silence is
    // still timed from its last fresh batch
    boolean lateFigures = !fresh && origins.containsKey(h.origin());
    if (figures) {
      origins.put(h.origin(), System.nanoTime());
    } else if (fresh) {
      log.report(Level.WARNING, "origins", "more than " + MAX_ORIGINS + " routers write to pool '"
          + s.pool() + "': the in-flight figures of the others are not counted");
    }
    RouterHints target = hints;
    if (target == null) {
      return;
    }
    long nowMicros = epochMicros();
    // the sessions' capture times, on the origin's clock, are compared on the log's: the entry's
    // id is the log's time when the origin appended it, just after stamping its send time, so
    // their difference is how far the origin's clock is behind the log's, plus the append's
    // latency. A router whose clock is minutes behind then no longer sees its moves of a session
    // ignored by every other router as older than one made before them. The smallest difference
    // of the origin's recent batches is taken, not this batch's: an append held up after its
    // stamp (a pause of the origin's JVM, its CPU throttled) would make its moves look that much
    // later, newer than moves made after them
    boolean onLog = sessionTimes.knowsLogClock() && entryMillis >= 0;
    long originToLog = onLog
        ? seat.originOffsets.offset(h.origin(), entryMillis, h.sentEpochMicros(),
            s.heartbeatNanos() * OriginOffsets.WINDOW_HEARTBEATS / 1_000_000)
        : 0;
    long nowOnLog = sessionTimes.toLogClock(nowMicros);
    // the lag on the log's clock too: on the routers' own, a router whose clock is behind
    // reported minutes of lag, one ahead none at all
    long lagFrom = onLog ? nowOnLog - originToLog : nowMicros;
    try {
      HintCodec.records(in, h, new HintCodec.Visitor() {
        @Override
        public void prefix(long at, String endpointId, int blockSize, long[] hashes) {
          target.prefixSent(endpointId, PrefixBlocks.of(blockSize, hashes));
          appliedPrefixes.incrementAndGet();
          applied(fresh, lagFrom - at);
        }

        @Override
        public void session(long at, String sessionKey, String endpointId) {
          // a capture time ahead of the log's clock now (an entry written by hand or in another
          // unit) counts as now: kept as it is, it would outrank every later move of the session
          // for as long as the session stays in use
          long atOnLog = Math.min(at + originToLog, nowOnLog);
          if (!sessionTimes.remote(sessionKey, atOnLog, nowOnLog)) {
            // captured before a move of the session already known here (a router that kept
            // it through an outage publishes it late): applying it would undo the newer one
            staleSessions.incrementAndGet();
            return;
          }
          target.sessionBound(sessionKey, endpointId);
          appliedSessions.incrementAndGet();
          applied(fresh, lagFrom - at);
        }

        @Override
        public void inFlight(String endpointId, int requests, long tokens) {
          if (figures || lateFigures) {
            target.inFlight(h.origin(), endpointId, requests, tokens);
            applied.incrementAndGet();
          }
        }
      });
    } catch (HintCodec.MalformedBatchException e) {
      rejectMalformed(entry.id(), e);
    }
  }

  /**
   * Whether a batch under this router's id, appended at {@code entryMillis} (its id's time) and
   * stamped {@code sentMicros} by its router, is an earlier run's. On the log's clock when it has
   * one: appended no later than the log's time when this run's reader first connected. The send
   * time is the earlier run's clock, which may be ahead of this run's (a pod restarted on another
   * node): compared with this run's start, a crashed run's last figures looked like this run's and
   * were skipped, and the others kept its load. A batch sent before this run started, by this
   * run's clock, is an earlier run's too: the ids of a stream may be ahead of its server's clock
   * (a failover to a server whose clock is behind the old one's: Redis then gives every new entry
   * the time of the stream's last id until its clock gets there), and then the earlier run's
   * batches were taken for this run's, so that its figures were never cleared and its batches
   * made this run warn that another router writes under its routerId. The send time alone
   * decides when the log has no clock. A batch of this run appended before its reader's first
   * connection counts as an earlier run's: that costs no more than sending this run's figures for
   * its endpoints again.
   */
  private boolean earlierRun(long entryMillis, long sentMicros) {
    long since = seat.ownSinceMillis;
    return since >= 0 && entryMillis >= 0 && entryMillis <= since
        || sentMicros < seat.startedMicros;
  }

  /**
   * For {@link Wanted}: the send times of the own entries a read after {@code after} reads whole.
   * On the log's clock, the whole of each until the reader is past the time this run's reader
   * first connected; after it (and without it) those sent before this run started. See
   * {@link #earlierRun}.
   */
  private long ownWholeUpTo(String after) {
    long since = seat.ownSinceMillis;
    if (since < 0) {
      return seat.startedMicros;
    }
    long afterMillis = StreamIds.millis(after);
    return afterMillis >= 0 && afterMillis > since ? seat.startedMicros : Long.MAX_VALUE;
  }

  /**
   * A recent batch of an earlier run of this router under the same routerId (a router restarted
   * under a fixed id). The others still count the figures it sent, under this router's id, when
   * it crashed without a farewell and this run began within their silence limit: this run's
   * heartbeats keep the id alive, and it sends no figure for an endpoint it has nothing on, so
   * they kept that load (until the router's {@code inFlightMaxAge}, 10 minutes by default). The
   * endpoints it last had figures on are noted for the publisher, which sends this run's figure
   * for each, zeros included.
   */
  private void earlierRunFigures(String entryId, HintCodec.Input in, HintCodec.Header h) {
    Map<String, Boolean> figures = new HashMap<>();
    try {
      HintCodec.records(in, h, new HintCodec.Visitor() {
        @Override
        public void prefix(long at, String endpointId, int blockSize, long[] hashes) {}

        @Override
        public void session(long at, String sessionKey, String endpointId) {}

        @Override
        public void inFlight(String endpointId, int requests, long tokens) {
          figures.put(endpointId, requests != 0 || tokens != 0);
        }
      });
    } catch (HintCodec.MalformedBatchException e) {
      rejectMalformed(entryId, e);
      return;
    }
    figures.forEach((ep, held) -> {
      if (held) {
        seat.earlierRunFigures.add(ep);
      } else {
        seat.earlierRunFigures.remove(ep);
      }
    });
    if (!figures.isEmpty()) {
      LockSupport.unpark(publisher);
    }
  }

  /**
   * A batch under this router's id. More of them since the reader started than this router has
   * tried to append means another router writes under the same id (one configuration file with
   * a fixed {@code routerId} for every replica, say): each then skips the other's hints as its
   * own, and replication silently does nothing between them. Said in a warning, at most once a
   * minute. Needs the log's clock; a log without one is not checked. A batch is counted once:
   * after a failover to a replica that still holds batches the reader had read, it starts over
   * and reads them again, and only those after the newest one counted are new.
   */
  private void noteOwn(String id, long entryMillis, long sentMicros) {
    if (seat.ownSinceMillis < 0 || entryMillis <= seat.ownSinceMillis
        || sentMicros < seat.startedMicros) {
      return; // history: the batches of an earlier run of this router (see earlierRun)
    }
    String counted = seat.ownCountedTo;
    if (counted != null && StreamIds.compare(id, counted) <= 0) {
      return; // read again after starting over
    }
    seat.ownCountedTo = id;
    if (++seat.ownSeen > seat.appendsAttempted.get()) {
      sharedRouterId = true;
      log.report(Level.WARNING, "shared-router-id", "the stream holds more batches under routerId '"
          + s.routerId() + "' than this router has written since it started: another router of"
          + " pool '" + s.pool() + "' uses the same routerId, and each skips the other's hints as"
          + " its own; give every router its own routerId, or leave it unset");
    }
  }

  /** Whether another router was seen writing under this router's id; for tests. */
  boolean sharedRouterIdSeen() {
    return sharedRouterId;
  }

  private void applied(boolean fresh, long lagMicros) {
    applied.incrementAndGet();
    if (fresh) {
      lag.add(lagMicros);
      telemetry.lag.record(Math.max(0, lagMicros) / 1e6, telemetry.attrs);
    }
  }

  /**
   * Counts and logs an entry skipped whole as malformed (corrupt, foreign, of another version),
   * naming the stream key and the entry's id, so that an operator can find it ({@code XRANGE key
   * id id}) and whoever wrote it. What it holds is never quoted: another router's entry carries
   * session keys, and a foreign one anything.
   */
  private void rejectMalformed(String entryId, HintCodec.MalformedBatchException e) {
    malformed.incrementAndGet();
    log.report(Level.WARNING, "malformed", "skipped malformed entry " + entryId + " of stream '"
        + s.streamKey() + "' (" + e.getMessage() + "): none of it applied");
  }

  private void forgetAllOrigins() {
    RouterHints target = hints;
    synchronized (seat.originsSeen) {
      for (String origin : seat.originsSeen.keySet()) {
        if (target != null) {
          target.forget(origin);
        }
      }
      seat.originsSeen.clear();
    }
  }

  /**
   * Forgets the in-flight figures of the origins not heard from for {@link #SILENT_HEARTBEATS}
   * heartbeats; returns how long until the next one of those left goes silent, at most a
   * heartbeat.
   */
  private long forgetSilentOrigins(long now) {
    long limit = s.heartbeatNanos() * SILENT_HEARTBEATS;
    long next = s.heartbeatNanos();
    RouterHints target = hints;
    synchronized (seat.originsSeen) {
      for (Iterator<Map.Entry<String, Long>> it = seat.originsSeen.entrySet().iterator();
          it.hasNext(); ) {
        Map.Entry<String, Long> e = it.next();
        long silent = now - e.getValue();
        if (silent > limit) {
          it.remove();
          if (target != null) {
            target.forget(e.getKey());
          }
        } else {
          next = Math.min(next, limit - silent + 1);
        }
      }
    }
    return next;
  }

  /**
   * The expiry thread: forgets the figures of origins gone silent, on time whatever the reader
   * is doing. It used to be the reader's job, between its commands, so that a reader waiting on
   * a server that stopped answering (a stopped process, a paused VM, a connection stuck behind
   * a stalled one) kept counting routers that had gone silent meanwhile, for as long as its
   * command waited: up to {@code connectTimeoutMillis} (ten minutes at most), then the
   * connection attempt, as long again. This thread does no I/O; it wakes when the next origin
   * it knows goes silent, and at least once a heartbeat. Only the seat's owner forgets: the
   * origins are the seat's, so an instance a reload replaced leaves them to the new one.
   */
  private void expireLoop() {
    while (running) {
      long wait = s.heartbeatNanos();
      try {
        if (seat.owner() == this) {
          wait = forgetSilentOrigins(System.nanoTime());
        }
      } catch (RuntimeException | Error e) {
        // the router threw while it dropped an origin's figures (a bug): that origin is gone
        // from the ones seen, the others are looked at on the next round
        readerErrors.incrementAndGet();
        if (running) {
          log.report(e instanceof Error ? Level.SEVERE : Level.WARNING, "unexpected-expiry",
              "forgetting a silent router's in-flight figures failed unexpectedly ("
                  + e.getClass().getName() + "); the others are forgotten on time",
              RedactedException.of(e));
        }
      }
      LockSupport.parkNanos(Math.max(wait, 1_000_000L));
    }
  }

  // ------------------------------------------------------------------------------- lifecycle

  /**
   * Stops both threads. When an instance of the same router and pool that a reload created
   * earlier is still open (a reload that failed), it takes over; otherwise the publisher first
   * tells the others this router's load is gone, unless the instance that replaced this one goes
   * on under the same routerId. Undoes this instance's {@link RouterHints#shareState}: the router
   * keeps the shared-state tie-break only while an instance is open.
   */
  @Override
  public void close() {
    if (!closeCalled.compareAndSet(false, true)) {
      // a second close, perhaps on another thread while the first runs: undoing twice would
      // undo the shareState of the instance that replaced this one
      return;
    }
    seat.leave(this);
    if (hints != null) {
      // this instance's share: a reload that drops the plugin gives the router its random
      // tie-break back, one that replaces it keeps the new instance's. Before running turns
      // false, so that whoever sees the instance closed also sees its share undone
      hints.stopSharingState();
    }
    running = false;
    LockSupport.unpark(publisher);
    reader.interrupt();
    LockSupport.unpark(expirer);
    boolean transportsClosed = false;
    try {
      expirer.join(CLOSE_WAIT_MILLIS);
      publisher.join(CLOSE_WAIT_MILLIS);
      reader.join(CLOSE_WAIT_MILLIS);
      if (publisher.isAlive()) {
        cutOffPublisher();
        transportsClosed = true;
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    telemetry.close();
    if (!transportsClosed) {
      transports.close();
    }
  }

  /**
   * The publisher is still at work {@link #CLOSE_WAIT_MILLIS} after close began: a command of its
   * closing flush or farewell waits on a slow or hung Redis (each may wait
   * {@code connectTimeoutMillis}, up to ten minutes). Closing the transports fails that command at
   * once; the thread then counts the hints it could not send and ends. This waits for that before
   * the instruments close, and says what was lost. It used to return with the publisher still
   * running: the hints it then failed to send were counted after the metrics had stopped
   * reporting, and nothing was logged.
   */
  private void cutOffPublisher() throws InterruptedException {
    long before = droppedUnpublished.get();
    transports.close();
    publisher.join(CLOSE_WAIT_MILLIS);
    reader.join(CLOSE_WAIT_MILLIS);
    long lost = droppedUnpublished.get() - before;
    log.report(Level.WARNING, "close", "the publisher was still sending to Redis "
        + CLOSE_WAIT_MILLIS + " ms after close began (a command waits up to connectTimeoutMillis)"
        + ": its connection was closed, and " + lost + " records of hints it had not sent are"
        + " counted in hints_dropped{reason=publish_failed} (those of a batch cut off in flight"
        + " may have reached Redis)"
        + (publisher.isAlive() ? "; it is still running" : "")
        + "; if its farewell did not go out, the other routers drop this router's in-flight"
        + " figures after five heartbeats");
  }

  // ---------------------------------------------------------------------------- observation

  /** Wakes the threads to look at who owns the seat. */
  void wake() {
    LockSupport.unpark(publisher);
    LockSupport.unpark(reader);
    LockSupport.unpark(expirer);
  }

  /** The state of the publisher thread; for tests. */
  Thread.State publisherState() {
    return publisher.getState();
  }

  /** Whether {@link #close} was called; for tests. */
  boolean closed() {
    return !running;
  }

  /**
   * Whether this router both publishes to and reads from the stream: the publisher and the reader
   * are connected, the server took the publisher's last batch or its last check that the server
   * takes batches ({@code XADD} refused for its id alone: not a read-only replica, not out of
   * memory, allowed by the ACL), made on connecting and on every heartbeat that finds nothing
   * appended since the previous one, and the reader's last command was answered. A refusal of
   * writes that begins while the publisher is connected shows with its next batch or check:
   * within two heartbeats.
   */
  public boolean connected() {
    return publisherUp && readerUp;
  }

  /**
   * Records sent to the stream: one per prefix per endpoint, session move and in-flight figure
   * (a route with a prefix and a session is two records). The unit of {@link #applied()} and
   * {@link #dropped()} as well.
   */
  public long published() {
    return published.get();
  }

  /** Records of other routers applied to this router (the unit of {@link #published()}). */
  public long applied() {
    return applied.get();
  }

  /**
   * Records dropped (the unit of {@link #published()}): those of hints that found the queue full,
   * those lost with a batch that could not be sent (not its in-flight figures, which go out
   * again), those of hints the publisher failed on unexpectedly, and the prefixes, sessions and
   * in-flight figures of an endpoint whose id is longer than a batch holds (65,535 bytes in
   * modified UTF-8). Malformed batches of other routers are counted apart, in batches.
   */
  public long dropped() {
    return droppedQueueFull.sum() + droppedUnpublished.get() + droppedFailed.get()
        + droppedIdTooLong.get();
  }

  /** Records dropped because the queue was full (or made room while Redis was away); for tests. */
  long droppedQueueFull() {
    return droppedQueueFull.sum();
  }

  /** Times the reader found the stream trimmed past where it had read and started over. */
  public long resyncs() {
    return resyncs.get();
  }

  /** Prefix hints of other routers applied; for tests. */
  long appliedPrefixes() {
    return appliedPrefixes.get();
  }

  /** Session hints of other routers applied; for tests. */
  long appliedSessions() {
    return appliedSessions.get();
  }

  /**
   * Session hints of other routers not applied because a later move of the same session was
   * known (captured later, by this router or another one).
   */
  public long staleSessions() {
    return staleSessions.get();
  }

  /**
   * Stream entries the reader has handled, applied or not (another pool's, its own, malformed),
   * each counted once its handling is over; for tests.
   */
  long entriesRead() {
    return entriesRead.get();
  }

  /**
   * Unexpected failures (not of a transport call) of the {@code "publisher"} or {@code "reader"}
   * thread, each logged and survived; for tests.
   */
  long errors(String who) {
    return (who.equals("publisher") ? publisherErrors : readerErrors).get();
  }

  /** Batches skipped as malformed. */
  long malformed() {
    return malformed.get();
  }

  /** Hints waiting to be published. */
  int queued() {
    return queue.size();
  }

  /** The most recent replication lags (capture on the origin to application here), in µs. */
  long[] lagMicros() {
    return lag.snapshot();
  }

  Settings settings() {
    return s;
  }

  @Override
  public String toString() {
    return TYPE + "(pool=" + s.pool() + ", stream=" + s.streamKey() + ")";
  }

  /**
   * For each of the last {@value #MAX_SESSION_TIMES} sessions bound here or heard of: the capture
   * time of its newest known binding (epoch µs, each router's clock) and when that binding took
   * effect on this router. A session hint captured before the known binding is a move that
   * reached the stream late (its router kept it through an outage) and is not applied. A session
   * forgotten here, or never seen, takes any hint, as before. Only the publisher and the reader
   * thread use it; routing threads never do.
   */
  static final class SessionTimes {
    /** {@link #local}: a binding of another router, older, took effect after this one. */
    static final int OVERRIDDEN = 1;
    /** {@link #local}: recorded, nothing to do. */
    static final int RECORDED = 0;
    /** {@link #local}: a later binding is known. */
    static final int STALE = -1;

    /** {@link #shiftMicros} before the log's clock was read, and when the log has none. */
    private static final long UNKNOWN = Long.MIN_VALUE;

    private final int max;
    // {capture µs, effective µs}, on the log's clock when it has one
    private final Map<String, long[]> newest;
    /**
     * What to add to this router's clock to get the log's (the Redis server's, which stream ids
     * are made of): the times of every router's bindings are compared on that one clock, not on
     * each router's own, so that routers whose clocks disagree still order them as they happened.
     */
    private volatile long shiftMicros = UNKNOWN;

    SessionTimes(int max) {
      this.max = max;
      this.newest = new java.util.LinkedHashMap<>(64, 0.75f, true) {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, long[]> eldest) {
          return size() > SessionTimes.this.max;
        }
      };
    }

    /**
     * Another router's binding of {@code key}, captured at {@code atMicros}, read at
     * {@code nowMicros}: true (recorded) when no later binding is known, so it is to be applied;
     * false when one is (equal times count as not earlier).
     */
    synchronized boolean remote(String key, long atMicros, long nowMicros) {
      long[] known = newest.get(key);
      if (known != null && known[0] > atMicros) {
        return false;
      }
      newest.put(key, new long[] {atMicros, nowMicros});
      return true;
    }

    /**
     * This router's binding of {@code key}, made at {@code atMicros} (when the request was routed,
     * which bound it at once), being sent at {@code nowMicros}. {@link #OVERRIDDEN} when the
     * known binding is older but took effect after it: the binding must be made again.
     */
    synchronized int local(String key, long atMicros, long nowMicros) {
      long[] known = newest.get(key);
      if (known != null && known[0] > atMicros) {
        return STALE;
      }
      boolean overridden = known != null && known[1] > atMicros;
      newest.put(key, new long[] {atMicros, overridden ? nowMicros : atMicros});
      return overridden ? OVERRIDDEN : RECORDED;
    }

    synchronized int size() {
      return newest.size();
    }

    /**
     * How far the log's clock may fall behind this router's monotonic clock between two
     * readings, past the readings' round trips and a drift of 1 ms a second, before the known
     * times move back with it (see {@link #logClockRead}).
     */
    static final long CLOCK_STEP_MICROS = 500_000;

    /** The log's clock at the last reading (-1: none yet), and the monotonic time then (ns). */
    private long lastLogMillis = -1;
    private long lastReadNanos;
    private long lastRoundTripNanos;

    /**
     * The log's clock read {@code logMillis} (-1: it has none) between {@code beforeMicros} and
     * {@code afterMicros} on this router's clock, {@code beforeNanos} and {@code afterNanos} on
     * its monotonic clock. When the log's clock moved less than that clock since the previous
     * reading, by more than {@link #CLOCK_STEP_MICROS} and what the two round trips and a drift of
     * 1 ms a second account for, the log is another clock, behind the old one (a failover to a
     * server whose clock is behind, another stream on another server), or its clock stepped back:
     * the known times, on the old one, move back by the step onto the new one. Left as they were,
     * after a failover to a server whose clock is behind by a minute, every session bound in the
     * minute before it kept a time ahead of any move made in the minute after it, which every
     * router then ignored as stale but the one that made it: the routers disagreed about where
     * those sessions live. The router's own wall clock stepping leaves the known times as they
     * are: the log's clock did not move. A log clock that moved ahead leaves them too: they only
     * look older than the moves made after it, as they are; and a monotonic clock that stood still
     * while the log's went on (a host suspended) must not make the moves of that time look stale.
     */
    synchronized void logClockRead(long logMillis, long beforeMicros, long afterMicros,
        long beforeNanos, long afterNanos) {
      if (logMillis < 0) {
        return;
      }
      long readNanos = beforeNanos + (afterNanos - beforeNanos) / 2;
      long roundTrip = Math.max(0, afterNanos - beforeNanos);
      if (lastLogMillis >= 0) {
        long elapsedNanos = readNanos - lastReadNanos;
        long step = (logMillis - lastLogMillis) * 1000 - elapsedNanos / 1000;
        // each reading is the server's time at some point of its round trip, to the millisecond
        long slack = CLOCK_STEP_MICROS + (roundTrip + lastRoundTripNanos) / 2000 + 2000
            + Math.max(0, elapsedNanos) / 1_000_000;
        if (step < -slack) {
          for (long[] times : newest.values()) {
            times[0] += step;
            times[1] += step;
          }
        }
      }
      lastLogMillis = logMillis;
      lastReadNanos = readNanos;
      lastRoundTripNanos = roundTrip;
      shiftMicros = logMillis * 1000 + 500 - (beforeMicros + afterMicros) / 2;
    }

    /** Whether the log's clock is known, so that times are compared on it. */
    boolean knowsLogClock() {
      return shiftMicros != UNKNOWN;
    }

    /** A time of this router's clock on the log's, when it is known; else as it is. */
    long toLogClock(long localMicros) {
      long shift = shiftMicros;
      return shift == UNKNOWN ? localMicros : localMicros + shift;
    }
  }

  /**
   * For each other router (the last {@link #MAX_ORIGINS} heard from): how far its clock is behind
   * the log's, in µs, from its batches: the log's time in a batch's id (when the batch was
   * appended; the middle of its millisecond) less the send time its router stamped just before
   * the append. Each such difference also holds the append's latency, which is small for most
   * batches and large for one held up between its stamp and the server (a pause of the origin's
   * JVM, its CPU throttled, a slow link): taken as it is, a held-up batch's moves look that much
   * later, and may outrank moves made after them on every router but their own, which records its
   * moves with the offset it reads with {@code TIME}. So the smallest difference of the origin's
   * batches in the current and the previous window of {@link #WINDOW_HEARTBEATS} heartbeats (log
   * time) is taken: an origin whose clock steps forward (the difference shrinks) is followed at
   * once. One whose clock steps back (the difference grows) was followed only within two windows,
   * 20 s at the default heartbeat, and meanwhile its moves looked older by the step, so that a
   * move it made within the step after another router's move of the same session lost to it on
   * every router but its own. A difference that stays more than {@link #STEP_MICROS} above the
   * offset for every batch of half a heartbeat (an origin sends one a heartbeat at least) is now
   * taken as such a step and becomes the offset: a held-up append holds up that batch alone, and
   * the next one, appended as soon as stamped, is back at the offset. Reader thread only.
   */
  static final class OriginOffsets {
    /** Length of a window, in heartbeats. */
    static final long WINDOW_HEARTBEATS = 10;
    /**
     * How far above the offset (µs) every batch of half a heartbeat must be for the origin's clock
     * to count as stepped back: more than an append's latency on a loaded but working server. A
     * smaller step is followed within two windows, as any step was before.
     */
    static final long STEP_MICROS = 500_000;
    private static final long NONE = Long.MIN_VALUE;

    // {window start (log ms), smallest of this window, smallest of the previous one, log ms of
    // the first of the batches in a row above the offset by more than STEP_MICROS (NONE: the
    // last one was not), smallest of those batches}
    private final Map<String, long[]> byOrigin =
        new java.util.LinkedHashMap<>(16, 0.75f, true) {
          private static final long serialVersionUID = 1L;

          @Override
          protected boolean removeEldestEntry(Map.Entry<String, long[]> eldest) {
            return size() > MAX_ORIGINS;
          }
        };

    /**
     * The offset of {@code origin}'s clock from the log's, with a batch appended at
     * {@code entryMillis} (log time) and stamped {@code sentMicros} (the origin's clock).
     */
    long offset(String origin, long entryMillis, long sentMicros, long windowMillis) {
      long sample = entryMillis * 1000 + 500 - sentMicros;
      long[] o = byOrigin.get(origin);
      if (o == null) {
        byOrigin.put(origin, new long[] {entryMillis, sample, sample, NONE, 0});
        return sample;
      }
      if (entryMillis >= o[0] && sample - Math.min(o[1], o[2]) > STEP_MICROS) {
        if (o[3] == NONE) {
          o[3] = entryMillis;
          o[4] = sample;
        } else {
          o[4] = Math.min(o[4], sample);
          if (entryMillis - o[3] >= windowMillis / WINDOW_HEARTBEATS / 2) {
            // every batch for half a heartbeat, not one held-up append: the clock stepped back
            o[0] = entryMillis;
            o[1] = o[4];
            o[2] = o[4];
            o[3] = NONE;
            return o[1];
          }
        }
      } else {
        o[3] = NONE;
      }
      if (entryMillis - o[0] >= windowMillis || entryMillis < o[0]) {
        // a new window; ids going back (another stream in this one's place) start one too
        o[2] = entryMillis < o[0] ? sample : o[1];
        o[1] = sample;
        o[0] = entryMillis;
      } else {
        o[1] = Math.min(o[1], sample);
      }
      return Math.min(o[1], o[2]);
    }

    /** Forgets every origin's offset: the log's clock may be another one now. */
    void clear() {
      byOrigin.clear();
    }
  }

  /** Sessions whose newest binding times are kept (about 150 bytes each with 32-character keys). */
  static final int MAX_SESSION_TIMES = 65_536;

  static long epochMicros() {
    Instant now = Instant.now();
    return now.getEpochSecond() * 1_000_000L + now.getNano() / 1000;
  }

  /** Exponential backoff from 100 ms to 5 s with jitter, so routers do not reconnect in step. */
  private static final class Backoff {
    private long next = INITIAL_BACKOFF_NANOS;

    long next() {
      long n = next;
      next = Math.min(MAX_BACKOFF_NANOS, next * 2);
      return n / 2 + ThreadLocalRandom.current().nextLong(n / 2 + 1);
    }

    void reset() {
      next = INITIAL_BACKOFF_NANOS;
    }
  }

  /** A ring of the latest lags, for tests and the README's figures. */
  static final class LagSamples {
    private final long[] ring;
    private long count;

    LagSamples(int size) {
      ring = new long[size];
    }

    synchronized void add(long v) {
      ring[(int) (count++ % ring.length)] = v;
    }

    synchronized long[] snapshot() {
      int n = (int) Math.min(count, ring.length);
      return java.util.Arrays.copyOf(ring, n);
    }

    synchronized void clear() {
      count = 0;
    }
  }

  /** Forgets the lag samples so far; for tests that measure one phase. */
  void clearLagSamples() {
    lag.clear();
  }

  /**
   * Whether this instance is the one of its router and pool that publishes and reads: only it
   * reports, so that during a reload's handover one series per pool is recorded, not two.
   */
  private boolean owns() {
    return seat.owner() == this;
  }

  /** The plugin's instruments, read from its counters when the exporter asks. */
  private final class Telemetry {
    final Attributes attrs;
    final DoubleHistogram lag;
    private final List<AutoCloseable> callbacks = new ArrayList<>();

    Telemetry(OpenTelemetry otel) {
      Meter m = otel.getMeter("io.epp4j.replication");
      attrs = Attributes.of(POOL, s.pool());
      Attributes full = Attributes.of(POOL, s.pool(), REASON, "queue_full");
      Attributes unpublished = Attributes.of(POOL, s.pool(), REASON, "publish_failed");
      Attributes failed = Attributes.of(POOL, s.pool(), REASON, "error");
      Attributes idTooLong = Attributes.of(POOL, s.pool(), REASON, "endpoint_id_too_long");
      Attributes publisherThread = Attributes.of(POOL, s.pool(), THREAD, "publisher");
      Attributes readerThread = Attributes.of(POOL, s.pool(), THREAD, "reader");
      lag = m.histogramBuilder("epp4j.replication.lag")
          .setDescription("Time from a hint's capture on another router to its application here")
          .setUnit("s")
          .build();
      callbacks.add(m.counterBuilder("epp4j.replication.hints_published")
          .setDescription("Records this router sent to the stream: one per prefix per endpoint,"
              + " session move and in-flight figure")
          .setUnit("{record}")
          .buildWithCallback(r -> {
            if (owns()) {
              r.record(published.get(), attrs);
            }
          }));
      callbacks.add(m.counterBuilder("epp4j.replication.hints_applied")
          .setDescription("Records of other routers applied to this router")
          .setUnit("{record}")
          .buildWithCallback(r -> {
            if (owns()) {
              r.record(applied.get(), attrs);
            }
          }));
      callbacks.add(m.counterBuilder("epp4j.replication.hints_dropped")
          .setDescription("Records this router did not send: its hints found the queue full,"
              + " were lost with a batch Redis did not take, or failed unexpectedly, or their"
              + " endpoint's id was longer than a batch holds")
          .setUnit("{record}")
          .buildWithCallback(r -> {
            if (!owns()) {
              return;
            }
            r.record(droppedQueueFull.sum(), full);
            r.record(droppedUnpublished.get(), unpublished);
            r.record(droppedFailed.get(), failed);
            r.record(droppedIdTooLong.get(), idTooLong);
          }));
      callbacks.add(m.counterBuilder("epp4j.replication.errors")
          .setDescription("Unexpected failures of the publisher or the reader (not Redis'),"
              + " each logged and survived")
          .setUnit("{error}")
          .buildWithCallback(r -> {
            if (owns()) {
              r.record(publisherErrors.get(), publisherThread);
              r.record(readerErrors.get(), readerThread);
            }
          }));
      callbacks.add(m.counterBuilder("epp4j.replication.batches_malformed")
          .setDescription("Batches of other routers skipped whole as malformed")
          .setUnit("{batch}")
          .buildWithCallback(r -> {
            if (owns()) {
              r.record(malformed.get(), attrs);
            }
          }));
      callbacks.add(m.counterBuilder("epp4j.replication.hints_stale")
          .setDescription("Session records of other routers not applied: captured before a move"
              + " of the same session already known here")
          .setUnit("{record}")
          .buildWithCallback(r -> {
            if (owns()) {
              r.record(staleSessions.get(), attrs);
            }
          }));
      callbacks.add(m.counterBuilder("epp4j.replication.resyncs")
          .setDescription("Reconnections after which the stream no longer held every batch since"
              + " the last one applied")
          .setUnit("{resync}")
          .buildWithCallback(r -> {
            if (owns()) {
              r.record(resyncs.get(), attrs);
            }
          }));
      callbacks.add(m.gaugeBuilder("epp4j.replication.connected")
          .setDescription("1 while this router both publishes to and reads from the Redis"
              + " stream: both connected, and the server takes the publisher's batches")
          .setUnit("1")
          .ofLongs()
          .buildWithCallback(r -> {
            if (owns()) {
              r.record(connected() ? 1 : 0, attrs);
            }
          }));
      callbacks.add(m.gaugeBuilder("epp4j.replication.queued")
          .setDescription("Hints waiting to be published: one per route or fallback, each one to"
              + " three records once sent")
          .setUnit("{hint}")
          .ofLongs()
          .buildWithCallback(r -> {
            if (owns()) {
              r.record(queue.size(), attrs);
            }
          }));
    }

    void close() {
      for (AutoCloseable c : callbacks) {
        try {
          c.close();
        } catch (Exception ignored) {
          // closing a callback cannot meaningfully fail
        }
      }
    }
  }

  // -------------------------------------------------------------------------------- provider

  /**
   * Provides {@code redis-replication}; public for {@link java.util.ServiceLoader}. The no-argument
   * form talks to Redis at the configured {@code uri}; {@link #Provider(Supplier)} puts another
   * {@link HintTransport} in its place (an in-memory log for tests and benchmarks).
   *
   * <p>Each plugin's Redis client starts its own Lettuce threads (event loops, computation
   * threads, a timer) unless the router offers a Lettuce {@link ClientResources} as a service
   * ({@code Router.builder().service(ClientResources.class, resources)}): then the client runs on
   * those, so the routers (and reloads) of an application that share one add no such threads,
   * and closing a plugin leaves them to the application, which shuts them down after its routers.
   */
  public static final class Provider extends AbstractPluginProvider {
    private final @Nullable Supplier<HintTransport.Factory> custom;

    public Provider() {
      super(TYPE);
      this.custom = null;
    }

    /** A provider whose plugins use {@code transports.get()} instead of Redis. */
    public Provider(Supplier<HintTransport.Factory> transports) {
      super(TYPE);
      this.custom = Objects.requireNonNull(transports, "transports");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      String uri = p.getString("uri", null);
      // names are used as written: whitespace at an end (a trailing line break from a file or a
      // secret, a quoted " p ") would make another pool, stream or router than the one meant,
      // whose routers never see each other, so it is refused rather than kept or trimmed
      String pool = p.getString("pool", "default");
      if (refuseNoValue(p, "pool", "the pool 'default', shared with every router given none")) {
        pool = "default";
      } else if (pool == null || pool.isBlank()) {
        p.error("pool", "must not be empty or only whitespace");
        pool = "default";
      } else {
        refuseInvisible(p, "pool", pool, "a router given the name without it is in another pool"
            + " and neither sees the other's hints");
      }
      String prefix = p.getString("keyPrefix", "epp4j:");
      if (refuseNoValue(p, "keyPrefix", "the prefix 'epp4j:' (write \"\" for no prefix)")
          || prefix == null) {
        prefix = "epp4j:";
      } else if (!prefix.isEmpty() && prefix.isBlank()) {
        // empty is no prefix; only whitespace is a value lost on its way (an unset variable
        // with a space around it)
        p.error("keyPrefix", "must not be only whitespace, got " + shown(prefix)
            + " (an empty keyPrefix is no prefix)");
      } else {
        refuseInvisible(p, "keyPrefix", prefix, "a router given the prefix without it uses another"
            + " stream and neither sees the other's hints");
      }
      String stream = p.getString("stream", prefix + pool + ":hints");
      boolean streamless = refuseNoValue(p, "stream", "the key <keyPrefix><pool>:hints");
      if (!streamless && p.has("stream") && p.raw("keyPrefix") != null) {
        // the stream key is then the stream parameter as written: the prefix would be ignored
        p.error("keyPrefix", "has no effect beside 'stream', which is the whole stream key;"
            + " keep one (the key is <keyPrefix><pool>:hints without 'stream')");
      }
      if (streamless) {
        stream = prefix + pool + ":hints";
      } else if (stream == null || stream.isBlank()) {
        p.error("stream", "must not be empty or only whitespace");
        stream = prefix + pool + ":hints";
      } else if (p.has("stream")) {
        // the default is made of keyPrefix and pool, each checked above
        refuseInvisible(p, "stream", stream, "a router given the key without it uses another"
            + " stream and neither sees the other's hints");
      }
      String routerId = p.getString("routerId", null);
      if (routerId == null || routerId.isBlank()) {
        routerId = ""; // the router's own, which a reload keeps
      } else {
        refuseInvisible(p, "routerId", routerId, "it is another router's id than the one without"
            + " it");
      }
      // every batch carries both in its header: one too long would fail every publish
      for (String[] named : new String[][] {{"pool", pool}, {"routerId", routerId}}) {
        long bytes = HintCodec.encodedLength(named[1]);
        if (bytes > HintCodec.MAX_STRING_BYTES) {
          // counted as the batch encodes it: modified UTF-8, where a character outside the BMP
          // takes 6 bytes (4 in UTF-8) and NUL 2, so a UTF-8 count would mislead
          p.error(named[0], "must be at most " + HintCodec.MAX_STRING_BYTES
              + " bytes in modified UTF-8 (Java's DataOutput.writeUTF: 6 bytes for a character"
              + " outside the BMP such as an emoji, 2 for NUL), got " + bytes);
        }
      }
      // a number or verifyPeer given without a value (a template's unset variable) is refused as
      // the names are: read as left out, it would be the default in place of the value meant
      Map<String, Object> defaults = new java.util.LinkedHashMap<>();
      defaults.put("batchSize", DEFAULT_BATCH_SIZE);
      defaults.put("flushIntervalMillis", DEFAULT_FLUSH_INTERVAL_MILLIS);
      defaults.put("maxLen", DEFAULT_MAX_LEN);
      defaults.put("queueCapacity", DEFAULT_QUEUE_CAPACITY);
      defaults.put("queueMaxBlocks", DEFAULT_QUEUE_MAX_BLOCKS);
      defaults.put("streamTtlSeconds", DEFAULT_STREAM_TTL_SECONDS);
      defaults.put("heartbeatMillis", DEFAULT_HEARTBEAT_MILLIS);
      defaults.put("connectTimeoutMillis", DEFAULT_CONNECT_TIMEOUT_MILLIS);
      defaults.put("verifyPeer", true);
      defaults.forEach((name, value) -> refuseNoValue(p, name, "its default, " + value));
      int batch = p.getInt("batchSize", DEFAULT_BATCH_SIZE, 1, 100_000);
      int flush = p.getInt("flushIntervalMillis", DEFAULT_FLUSH_INTERVAL_MILLIS, 1, 60_000);
      long maxLen = p.getLong("maxLen", DEFAULT_MAX_LEN);
      if (maxLen < 1) {
        p.error("maxLen", "must be >= 1, got " + maxLen);
        maxLen = DEFAULT_MAX_LEN;
      }
      int capacity = p.getInt("queueCapacity", DEFAULT_QUEUE_CAPACITY, 1, 1 << 24);
      long queueBlocks = p.getLong("queueMaxBlocks", DEFAULT_QUEUE_MAX_BLOCKS);
      if (queueBlocks < 1 || queueBlocks > HintQueue.MAX_BLOCKS) {
        p.error("queueMaxBlocks", "must be between 1 and " + HintQueue.MAX_BLOCKS + ", got "
            + queueBlocks);
        queueBlocks = DEFAULT_QUEUE_MAX_BLOCKS;
      }
      long ttl = p.getLong("streamTtlSeconds", DEFAULT_STREAM_TTL_SECONDS);
      if (ttl != 0 && (ttl < 60 || ttl > MAX_STREAM_TTL_SECONDS)) {
        p.error("streamTtlSeconds", "must be 0 (no TTL) or between 60 and "
            + MAX_STREAM_TTL_SECONDS + ", got " + ttl);
        ttl = DEFAULT_STREAM_TTL_SECONDS;
      }
      int heartbeat = p.getInt("heartbeatMillis", DEFAULT_HEARTBEAT_MILLIS, 10, 600_000);
      int connectTimeout = p.getInt("connectTimeoutMillis", DEFAULT_CONNECT_TIMEOUT_MILLIS, 10,
          600_000);
      boolean verifyPeer = p.getBoolean("verifyPeer", true);
      String trustCertFile = p.getString("trustCertFile", null);
      if (refuseNoValue(p, "trustCertFile", "the JVM's trust store in place of the CA meant")) {
        trustCertFile = null;
      } else if (trustCertFile != null && trustCertFile.isBlank()) {
        // an unset variable behind it: the JVM's trust store in place of the CA meant, unsaid
        p.error("trustCertFile", "must not be empty or only whitespace, got "
            + shown(trustCertFile) + "; give the path of a PEM file, or leave the parameter out"
            + " for the JVM's trust store");
      } else if (trustCertFile != null) {
        refuseEdgeSpace(p, "trustCertFile", trustCertFile, "it names another file than the one"
            + " without it");
      }
      Settings settings = new Settings(pool, stream, routerId, batch, flush * 1_000_000L,
          capacity, queueBlocks, heartbeat * 1_000_000L, maxLen);
      HintTransport.Factory transports;
      if (custom != null) {
        transports = custom.get();
      } else {
        RedisURI redis = redisUri(p, uri);
        if (redis != null && redis.isSsl() && p.has("verifyPeer")) {
          if (setsQueryOption(uri, "verifyPeer")) {
            // one of the two would be silently ignored
            p.error("verifyPeer", "is also set by the query of parameter 'uri' (verifyPeer=...);"
                + " keep one");
          } else {
            redis.setVerifyPeer(verifyPeer);
          }
        }
        if (redis != null && redis.isSsl() && trustCertFile != null
            && redis.getVerifyMode() == io.lettuce.core.SslVerifyMode.NONE) {
          // Lettuce then trusts any certificate: the file would be read and ignored, and a
          // configuration that looks pinned to a CA would accept any server
          p.error("trustCertFile", "has no effect when nothing is verified (verifyPeer false, or"
              + " verifyPeer=NONE in the query of parameter 'uri'): any certificate is trusted;"
              + " remove one of the two");
        }
        if (redis != null && setsQueryOption(uri, "timeout")) {
          // the Factory sets the connection's timeout from connectTimeoutMillis: the URI's would
          // be replaced without a word
          p.error("uri", "sets 'timeout' in its query; give it as 'connectTimeoutMillis'"
              + " instead");
        }
        if (redis != null && !redis.isSsl()) {
          // without TLS both would be ignored: a file meant to make the connection TLS would
          // leave it, and the password in the URI, in plaintext
          for (String tlsOnly : List.of("trustCertFile", "verifyPeer")) {
            if (p.has(tlsOnly)) {
              p.error(tlsOnly, "has no effect without TLS: the uri is not rediss://"
                  + " (use rediss://host:port to connect over TLS)");
            }
          }
        }
        if (redis == null || !p.errors().isEmpty()) {
          // nothing to connect to: the errors become the result before any thread starts
          throw new IllegalArgumentException("parameter 'uri' is invalid");
        }
        // the application's Lettuce resources when it shares them between its routers
        // (Router.Builder.service(ClientResources.class, ...)): no threads of this plugin's own
        transports = new RedisStreamTransport.Factory(redis, stream, maxLen,
            Duration.ofMillis(connectTimeout), sslOptions(p, trustCertFile),
            c.service(ClientResources.class).orElse(null), Duration.ofSeconds(ttl));
      }
      if (!p.errors().isEmpty()) {
        // no instance for a configuration that is refused: it would take over from the running
        // instance of this router (a reload) until closed again
        transports.close();
        throw new IllegalArgumentException("invalid parameters");
      }
      // a reload that keeps the URI and the stream continues the old instance's figures and
      // place in the stream; the URI is compared, never logged
      String target = (custom != null ? "" : String.valueOf(uri).trim()) + "\n" + stream;
      try {
        return new RedisReplication(settings, target, c.service(RouterHints.class).orElse(null),
            transports, c.service(OpenTelemetry.class).orElse(OpenTelemetry.noop()), c.ticker());
      } catch (RuntimeException | Error e) {
        // no plugin to close them with: the client's event loops and threads go now
        transports.close();
        throw e;
      }
    }

    /**
     * Records an error naming {@code name}, and says so, when it is given without a value
     * ({@code pool:} with nothing after it, which YAML reads as null): a template's unset
     * variable, refused as an empty value is, rather than read as the parameter left out, which
     * would mean {@code instead}.
     */
    private static boolean refuseNoValue(Parameters p, String name, String instead) {
      if (!p.has(name) || p.raw(name) != null) {
        return false;
      }
      p.error(name, "has no value (a variable left unset where the file is made?); give one, or"
          + " leave the parameter out, which means " + instead);
      return true;
    }

    /**
     * Records an error naming {@code name} when {@code value} starts or ends with whitespace or
     * a control character: a name compared as written (a pool, a stream key, a router's id) that
     * differs from the others' by it is another name, without a word.
     */
    private static boolean refuseEdgeSpace(Parameters p, String name, String value,
        String consequence) {
      if (!value.isEmpty() && (invisible(value.codePointAt(0))
          || invisible(value.codePointBefore(value.length())))) {
        p.error(name, "must not start or end with whitespace or a control character, got "
            + shown(value) + ": it is used as written, so " + consequence + "; remove it where"
            + " the value is set (the variable, file or secret behind it)");
        return true;
      }
      return false;
    }

    /**
     * {@link #refuseEdgeSpace} for a name, which must also hold no control character or line
     * break anywhere: the pool, the key prefix, the stream key and the router's id are written as
     * they are into log lines (where a line break starts a line of the name's making, and an
     * escape drives the terminal), the stream key, the batches and, for the pool, the metrics'
     * {@code pool} attribute, where a NUL or a DEL shows as nothing, so that a name holding one
     * looks like another one it is not.
     */
    private static void refuseInvisible(Parameters p, String name, String value,
        String consequence) {
      if (refuseEdgeSpace(p, name, value, consequence)) {
        return;
      }
      for (int i = 0, at = 1; i < value.length(); i += Character.charCount(value.codePointAt(i)),
          at++) {
        int c = value.codePointAt(i);
        if (lineOrControl(c)) {
          // a long name is shown by its ends: the position says where the character is
          p.error(name, "must not contain a control character or a line break, got "
              + shown(value) + " (" + quoted(new String(Character.toChars(c))) + " at character "
              + at + "): names are written as they are into log lines, metrics and the stream,"
              + " where it would break a line or make the name look like another one; remove it"
              + " where the value is set (the variable, file or secret behind it)");
          return;
        }
      }
    }

    /** A control character (a tab, a line break, a NUL, a DEL, an escape) or a line break. */
    static boolean lineOrControl(int c) {
      return Character.isISOControl(c) || c == 0x2028 || c == 0x2029;
    }

    /** Whitespace (a no-break space included) or a control character (a NUL, an escape). */
    static boolean invisible(int c) {
      return Character.isWhitespace(c) || Character.isSpaceChar(c) || Character.isISOControl(c);
    }

    /**
     * {@code value} in quotes for an error: whitespace other than the space and control
     * characters escaped as in Java (a line break as backslash-n, a no-break space as
     * backslash-u00a0), so that they show and cannot break the line; past 80 characters, its
     * first and last 40 around "...".
     */
    static String shown(String value) {
      int count = value.codePointCount(0, value.length());
      return quoted(count <= 80 ? value
          : value.substring(0, value.offsetByCodePoints(0, 40)) + "..."
              + value.substring(value.offsetByCodePoints(value.length(), -40)));
    }

    /** {@code text} whole in quotes, escaped as {@link #shown} escapes it (a path, say). */
    static String quoted(String text) {
      StringBuilder out = new StringBuilder(text.length() + 2).append('\'');
      text.codePoints().forEach(c -> {
        if (c == ' ' || !invisible(c)) {
          out.appendCodePoint(c);
        } else if (c == '\n') {
          out.append("\\n");
        } else if (c == '\r') {
          out.append("\\r");
        } else if (c == '\t') {
          out.append("\\t");
        } else {
          out.append(String.format(java.util.Locale.ROOT, "\\u%04x", c));
        }
      });
      return out.append('\'').toString();
    }

    /**
     * The URI, with what its query sets (Lettuce reads {@code verifyPeer=NONE|CA|FULL} there);
     * {@code verifyPeer}, when given, is applied by the caller.
     */
    private static @Nullable RedisURI redisUri(Parameters p, @Nullable String uri) {
      if (uri == null || uri.isBlank()) {
        p.error("uri", "is required, e.g. redis://host:6379 or rediss://user:password@host:6380");
        return null;
      }
      RedisURI redis;
      try {
        redis = RedisURI.create(uri.trim());
      } catch (RuntimeException e) {
        // the URI may carry a password: the message names the parameter, not its value
        p.error("uri", "is not a valid redis:// or rediss:// URI (check its scheme, host, port,"
            + " database and query options, e.g. verifyPeer=NONE|CA|FULL)");
        return null;
      }
      // java.net.URI refuses a space as written, but Lettuce decodes a host it cannot read as a
      // host name (%20, %0A, '_' with a port) and takes the whole "host:port" as the host, with
      // port 6379: a host no lookup finds, or another port, and nothing said until a connection
      // fails. The user and password are not looked at: spaces in them are theirs to have.
      List<String> hosts = new ArrayList<>();
      if (redis.getHost() != null) {
        hosts.add(redis.getHost());
      }
      for (RedisURI sentinel : redis.getSentinels()) {
        if (sentinel.getHost() != null) {
          hosts.add(sentinel.getHost());
        }
      }
      for (String host : hosts) {
        if (host.codePoints().anyMatch(Provider::invisible)) {
          p.error("uri", "has whitespace or a control character in a host (written"
              + " percent-encoded, such as %20 or %0A); a host name has none");
          return null;
        }
        if (!host.startsWith("[") && host.contains(":")) {
          p.error("uri", "has a host whose port could not be read: Lettuce takes 'host:port' for"
              + " the host, with port 6379, when the host is not a valid host name (only letters,"
              + " digits, '-' and '.'; no '_' or percent-encoded character); give the server's"
              + " IP address or a name without them");
          return null;
        }
      }
      // what Lettuce reads as not written: a port of 0 (it connects to 6379) and a database it
      // cannot read as a number (it connects to database 0)
      java.net.URI written = null;
      try {
        written = java.net.URI.create(uri.trim());
      } catch (RuntimeException e) {
        // a form java.net.URI does not take (several sentinels): nothing more to compare
      }
      if (redis.getSocket() != null
          && !io.lettuce.core.resource.Transports.NativeTransports.isDomainSocketSupported()) {
        // Lettuce refuses every connection then (IllegalStateException), and says no more
        p.error("uri", "is a Unix domain socket (redis-socket://), which Lettuce connects to only"
            + " with a Netty native transport, and none is on the class path: add"
            + " netty-transport-native-epoll (Linux, with its classifier such as linux-x86_64)"
            + " or netty-transport-native-kqueue (macOS), or connect over TCP");
        return null;
      }
      if (redis.isStartTls()) {
        // the handshake's first command would go in plaintext to a TLS port, which closes the
        // connection: Redis and Valkey do not speak STARTTLS
        p.error("uri", "asks for STARTTLS (redis+tls://), which Redis and Valkey do not speak:"
            + " every connection would be closed in its handshake; write rediss://host:port for"
            + " TLS");
        return null;
      }
      String userInfo = written == null ? null : written.getRawUserInfo();
      if (userInfo != null && userInfo.indexOf(':') > 0 && userInfo.endsWith(":")) {
        // Lettuce drops the user then, and connects as the default user: another identity
        p.error("uri", "names a user with an empty password: Lettuce would drop the user and"
            + " connect as the default user; give the user's password (redis://user:password@...)"
            + " or, for the default user, the password alone (redis://:password@...)");
        return null;
      }
      String ignored = written == null ? null : unreadQueryOption(written);
      if (ignored != null) {
        p.error("uri", "sets " + ignored + " in its query, which Lettuce does not read: it would"
            + " be ignored without a word (TLS is rediss://, not ssl=true); the query takes"
            + " database, clientName, libraryName, libraryVersion, verifyPeer and sentinelMasterId"
            + " (any case), and db (lower case)");
        return null;
      }
      if (written != null && written.getPort() == 0) {
        p.error("uri", "has port 0, which Lettuce reads as no port (it would connect to 6379);"
            + " give the server's port");
        return null;
      }
      String database = written == null ? null : queryValue(written, "database", "db");
      if (database != null && !(database.matches("[0-9]{1,9}")
          && Integer.parseInt(database) == redis.getDatabase())) {
        p.error("uri", "sets a database in its query that is not a whole number of at most 9"
            + " digits (Lettuce would connect to database " + redis.getDatabase() + ")");
        return null;
      }
      String path = written == null || written.getPath() == null ? ""
          : written.getPath().replaceFirst("^/", "");
      if (database != null && path.matches("[0-9]{1,9}")
          && Integer.parseInt(path) != redis.getDatabase()) {
        // Lettuce takes the query's and ignores the path's without a word
        p.error("uri", "sets one database in its path and another in its query (Lettuce would"
            + " connect to database " + redis.getDatabase() + ", the query's); keep one");
        return null;
      }
      // Lettuce sends it in every connection's handshake; Redis and Valkey take '!' to '~' only
      String clientName = redis.getClientName();
      if (clientName != null && clientName.chars().anyMatch(c -> c < '!' || c > '~')) {
        p.error("uri", "sets a clientName that Redis refuses: a space, a control character or a"
            + " character outside ASCII; Redis would refuse every connection's handshake (only"
            + " '!' to '~' are taken)");
        return null;
      }
      String master = redis.getSentinelMasterId();
      if (redis.getSentinels().isEmpty() && ((master != null && !master.isEmpty())
          || (written != null && written.getRawFragment() != null))) {
        // Lettuce connects to the host as to a Redis server and ignores the name
        p.error("uri", "names a Sentinel master (after '#' or as sentinelMasterId) but is no"
            + " Sentinel URI: Lettuce would connect to its host as to a Redis server and ignore"
            + " the name; write redis-sentinel://host:26379#master (rediss-sentinel:// with TLS)"
            + " or leave the name out");
        return null;
      }
      if (master != null && !master.isEmpty() && (invisible(master.codePointAt(0))
          || invisible(master.codePointBefore(master.length())))) {
        p.error("uri", "has a sentinel master name with whitespace or a control character at its"
            + " start or end; Sentinel would know no such master");
        return null;
      }
      if (master != null && master.codePoints().anyMatch(Provider::lineOrControl)) {
        p.error("uri", "has a sentinel master name with a control character or a line break in"
            + " it; Sentinel, configured by lines of text, would know no such master");
        return null;
      }
      return redis;
    }

    /**
     * The query options Lettuce reads, as it reads them: the name in any case, followed by
     * {@code =} ({@code timeout} is refused on its own: {@code connectTimeoutMillis} sets it).
     */
    private static final List<String> READ_QUERY_OPTIONS = List.of("database", "clientName",
        "libraryName", "libraryVersion", "verifyPeer", "sentinelMasterId", "timeout");

    /**
     * The first option of the query of {@code uri} that Lettuce does not read, shown by its name
     * in quotes ("an option" when it is no plain name, which may then be a secret), or null when
     * it reads them all. Lettuce splits the decoded query at {@code &} and {@code ;} and reads a
     * part that starts, in lower case, with one of {@link #READ_QUERY_OPTIONS} and {@code =}, or
     * as written with {@code db=}; it skips any other without a word.
     */
    private static @Nullable String unreadQueryOption(java.net.URI uri) {
      String query = uri.getQuery();
      if (query == null) {
        return null;
      }
      java.util.StringTokenizer parts = new java.util.StringTokenizer(query, "&;");
      next:
      while (parts.hasMoreTokens()) {
        String part = parts.nextToken();
        String lower = part.toLowerCase(java.util.Locale.ROOT);
        if (part.startsWith("db=")) {
          continue;
        }
        for (String option : READ_QUERY_OPTIONS) {
          if (lower.startsWith(option.toLowerCase(java.util.Locale.ROOT) + "=")) {
            continue next;
          }
        }
        int eq = part.indexOf('=');
        String name = eq < 0 ? "" : part.substring(0, eq);
        return name.matches("[A-Za-z][A-Za-z0-9_.-]{0,31}") ? "'" + name + "'" : "an option";
      }
      return null;
    }

    /**
     * The value of the last of {@code names} the query of {@code uri} sets (any case), or null
     * when it sets none. The query is split as Lettuce splits it: decoded, then at {@code &} and
     * {@code ;} (splitting at {@code &} alone, an option after a {@code ;} went unread and the
     * one before it took the rest of the query for its value).
     */
    private static @Nullable String queryValue(java.net.URI uri, String... names) {
      String query = uri.getQuery();
      if (query == null) {
        return null;
      }
      String value = null;
      java.util.StringTokenizer parts = new java.util.StringTokenizer(query, "&;");
      while (parts.hasMoreTokens()) {
        String given = parts.nextToken();
        int eq = given.indexOf('=');
        String name = eq < 0 ? given : given.substring(0, eq);
        for (String n : names) {
          if (name.equalsIgnoreCase(n)) {
            value = eq < 0 ? "" : given.substring(eq + 1);
          }
        }
      }
      return value;
    }

    /**
     * Whether the query of {@code uri}, a URI Lettuce accepted, sets {@code option}, split and
     * matched as Lettuce does (see {@link #queryValue}).
     */
    private static boolean setsQueryOption(@Nullable String uri, String option) {
      String query;
      try {
        query = java.net.URI.create(String.valueOf(uri).trim()).getQuery();
      } catch (RuntimeException e) {
        return false;
      }
      if (query == null) {
        return false;
      }
      String name = option.toLowerCase(java.util.Locale.ROOT) + "=";
      java.util.StringTokenizer parts = new java.util.StringTokenizer(query, "&;");
      while (parts.hasMoreTokens()) {
        if (parts.nextToken().toLowerCase(java.util.Locale.ROOT).startsWith(name)) {
          return true;
        }
      }
      return false;
    }

    /**
     * The trust anchors for {@code rediss://}: the PEM file of {@code trustCertFile} when given,
     * else the JVM's trust store ({@code javax.net.ssl.trustStore}, by default the JDK's
     * {@code cacerts}).
     */
    private static @Nullable SslOptions sslOptions(Parameters p, @Nullable String trustCertFile) {
      if (trustCertFile == null) {
        return null;
      }
      File f = new File(trustCertFile);
      if (!f.isFile() || !f.canRead()) {
        p.error("trustCertFile", "is not a readable file: " + quoted(trustCertFile));
        throw new IllegalArgumentException("parameter 'trustCertFile' is invalid");
      }
      // Lettuce reads the file only at connect time: a wrong file is a configuration error now
      try (java.io.InputStream in = java.nio.file.Files.newInputStream(f.toPath())) {
        if (java.security.cert.CertificateFactory.getInstance("X.509")
            .generateCertificates(in).isEmpty()) {
          throw new java.security.cert.CertificateException("no certificate");
        }
      } catch (java.io.IOException | java.security.cert.CertificateException e) {
        p.error("trustCertFile", "is not a PEM file of X.509 certificates: "
            + quoted(trustCertFile));
        throw new IllegalArgumentException("parameter 'trustCertFile' is invalid", e);
      }
      return SslOptions.builder().jdkSslProvider().trustManager(f).build();
    }
  }
}
