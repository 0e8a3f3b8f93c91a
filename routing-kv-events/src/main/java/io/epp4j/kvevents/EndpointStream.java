package io.epp4j.kvevents;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.function.BooleanSupplier;
import org.jspecify.annotations.Nullable;
import org.zeromq.ZMQ;

/**
 * The event stream of one endpoint membership and what keeps it in order: the sequence number
 * expected next, the last live message (to tell a message delivered twice from a publisher
 * restart), and the replay socket that fills gaps.
 *
 * <p>For each live message: the same message again is ignored; a sequence going back means the
 * engine restarted with an empty cache, so the endpoint is resynced, and the new process's
 * batches before the first one seen (it numbers from 0) are a gap; a gap is filled from the
 * engine's replay socket (DEALER request {@code [, start seq]}, replies {@code [, seq, payload]}
 * ending with seq −1) when one is configured, and otherwise, or when the replay cannot fill it,
 * the endpoint is resynced. A replay starts at the last batch applied and compares it: another
 * batch under that seq means a restarted engine whose numbering passed the old one's, handled
 * as a restart. A buffer that no longer holds that batch, or the first ones missed, resyncs
 * the endpoint and then applies what it does hold. Every batch goes through
 * {@link Membership#applyIfCurrent}, so a stream whose endpoint has left writes nothing, and a
 * replay it waits for is given up. A batch that fails to decode or to apply costs only that
 * batch (a failed apply also resyncs, since the index's state for the endpoint is no longer
 * known).
 *
 * <p>Threading: owned by the subscriber thread, like its sockets.
 */
final class EndpointStream {
  /** What every stream of one subscriber shares. */
  record Shared(Membership membership, KvEventMetrics metrics, DropReports reports,
      SubscriberSockets sockets, long replayTimeoutMillis, long readAheadBytes,
      BooleanSupplier closing, HostLookups lookups) {}

  /**
   * Longest a replay waits for a reply before looking whether the subscriber is closing: the
   * replay timeout may be minutes, and close() must not leave the thread, its sockets and a
   * bound central address behind for that long.
   */
  private static final int CLOSE_CHECK_MILLIS = 50;
  /** How often a gap waiting for its replay host's lookup looks for the answer. */
  private static final int LOOKUP_CHECK_MILLIS = 5;
  /** The seq of a replay answer's end marker, −1. */
  private static final byte[] END_SEQ = ByteBuffer.allocate(8).putLong(-1).array();

  final String endpointId;
  /** The membership this stream belongs to; its batches apply only while it is current. */
  final Object member;
  /** The SUB socket of a per-endpoint stream; null in central mode, where one socket serves all. */
  final ZMQ.@Nullable Socket sub;
  /**
   * The data-parallel rank whose batches this stream may apply, or -1 when any rank goes: a
   * batch that names another rank comes from another rank's engine core (ports that do not
   * match the ranks), and indexing it here would credit this endpoint with blocks it lacks.
   */
  private final int dataParallelRank;
  /** The engine's replay socket as the endpoint names it ({@code tcp://<host>:<port>}), for logs. */
  private @Nullable String replayAddress;
  /**
   * Where the replay socket connects when that is known already (per-endpoint mode: the address
   * the endpoint's host name resolved to when its SUB socket connected); null to take it from
   * {@link #replayAddress}, looking a host name up on the {@link HostLookups} threads.
   */
  private @Nullable String replayTarget;
  /** Whether the replay socket waits for its host name's lookup, which is under way. */
  private boolean replayLookupPending;
  private final Shared shared;
  private final KvEventMetrics metrics;
  private ZMQ.@Nullable Socket replay;
  private long expected = -1;
  private long lastLiveSeq = -1;
  /** The payload of {@link #lastLiveSeq}: tells a message delivered twice from a restart. */
  private byte @Nullable [] lastLivePayload;
  /**
   * The payload of the batch applied as seq {@code expected - 1} (live or replayed), null after
   * a resync. A replay asks for it again: a restarted engine that has passed the old engine's
   * seq has another batch under that number, which is how its restart shows.
   */
  private byte @Nullable [] lastAppliedPayload;
  /** Whether a live message came since the stream opened or its publisher last disconnected. */
  private boolean heardSinceDisconnect;
  /**
   * Per-endpoint mode: the connection to the publisher whose message was handled last (JeroMQ
   * gives the messages of one connection one metadata object, and a new connection another), or
   * null before the first message or where messages carry none.
   */
  private @Nullable Object connection;
  /** How many times a message came over a newer connection than the one before it. */
  private long connectionsReplaced;
  /** Whether a message came whose connection is not known (no metadata). */
  private boolean heardWithoutConnection;

  /** How a replay ended. */
  private enum ReplayOutcome {
    /** The batches up to the live message were applied. */
    CLOSED,
    /**
     * The batches up to the live message were applied, but from the first one the engine still
     * buffers, after a resync: the batch before the gap, or the first ones missed, were no
     * longer buffered.
     */
    RESYNCED,
    /** The gap could not be filled (timed out, nothing buffered, no socket, or closing). */
    FAILED,
    /** The engine's batch at {@code expected - 1} is not the one applied: a new process. */
    RESTARTED
  }

  EndpointStream(String endpointId, Object member, ZMQ.@Nullable Socket sub,
      @Nullable String replayAddress, Shared shared) {
    this(endpointId, member, sub, replayAddress, null, -1, shared);
  }

  /**
   * @param replayTarget where the replay socket connects, when {@code replayAddress}'s host name
   *     was looked up already; null to look it up when the socket is opened
   * @param dataParallelRank the rank the endpoint serves, whose batches alone are applied (a
   *     batch without a rank is applied too); -1 applies every rank's
   */
  EndpointStream(String endpointId, Object member, ZMQ.@Nullable Socket sub,
      @Nullable String replayAddress, @Nullable String replayTarget, int dataParallelRank,
      Shared shared) {
    this.endpointId = endpointId;
    this.member = member;
    this.sub = sub;
    this.dataParallelRank = dataParallelRank;
    this.replayAddress = replayAddress;
    this.replayTarget = replayTarget;
    this.shared = shared;
    this.metrics = shared.metrics();
  }

  /**
   * Connects the replay socket ahead of the first gap, when the stream has a replay address.
   * An address ZeroMQ refuses is reported and costs only the replays: the stream's live
   * messages do not need it, and each gap tries again (a name may resolve later). A host name
   * is looked up on the {@link HostLookups} threads, never on the subscriber's: until the
   * answer has come the socket stays closed, and a gap meanwhile waits for the answer as it
   * waits for the replay, within {@code replayTimeout}.
   */
  void openReplay() {
    if (replayAddress != null && replay == null) {
      replay = tryOpenReplay();
    }
  }

  /**
   * The replay socket, or null when ZeroMQ refuses its address or its host name did not resolve
   * (both reported), or the name's lookup is under way ({@link #replayLookupPending}).
   */
  private ZMQ.@Nullable Socket tryOpenReplay() {
    String address = Objects.requireNonNull(replayAddress);
    replayLookupPending = false;
    String target = replayTarget != null ? replayTarget : resolvedTarget(address);
    if (target == null) {
      return null;
    }
    try {
      return shared.sockets().newReplaySocket(target);
    } catch (RuntimeException e) {
      shared.reports().replayUnavailable(endpointId, address, e);
      return null;
    }
  }

  /**
   * Where to connect for {@code address} ({@code tcp://host:port}): itself when its host is an
   * address, else the address its host name resolved to, so that ZeroMQ looks nothing up (on
   * this thread, or on its I/O thread at a reconnect). Null while the lookup is under way, or
   * when the name did not resolve (reported).
   */
  private @Nullable String resolvedTarget(String address) {
    int start = address.indexOf("://");
    int colon = address.lastIndexOf(':');
    if (start < 0 || colon <= start + 3) {
      return address; // not host:port; ZeroMQ says what it makes of it
    }
    String host = address.substring(start + 3, colon);
    if (!HostLookups.isName(host)) {
      return address;
    }
    HostLookups.Answer answer = shared.lookups().take(host);
    if (answer == null) {
      replayLookupPending = true;
      return null;
    }
    if (answer.failure() != null) {
      shared.reports().replayUnavailable(endpointId, address, answer.failure());
      return null;
    }
    return answer.connectAddress(Integer.parseInt(address.substring(colon + 1)));
  }

  /**
   * Central mode: the endpoint's replay address became known after its first message opened
   * the stream. Changes nothing when the stream already has one.
   */
  void useReplay(String address) {
    if (replayAddress == null) {
      replayAddress = address;
      replayTarget = null;
      openReplay();
    }
  }

  /**
   * Central mode: the endpoint's replay port label changed. The replay socket, if open, is
   * closed and the new address (null: none) used from the next gap on.
   */
  void replaceReplay(@Nullable String address) {
    if (Objects.equals(address, replayAddress)) {
      return;
    }
    closeReplay();
    replayAddress = address;
    replayTarget = null;
    openReplay();
  }

  /** Closes the replay socket, if open; the SUB socket is its owner's to close. */
  void closeReplay() {
    if (replay != null) {
      replay.close();
      replay = null;
    }
  }

  /** Handles one live message with sequence number {@code seq}. */
  void onLive(long seq, byte[] payload) {
    heardSinceDisconnect = true;
    if (seq == lastLiveSeq && Arrays.equals(payload, lastLivePayload)) {
      // delivered twice; a restarted engine reaching the same seq would say something else
      metrics.duplicates.increment();
      return;
    }
    boolean restart = lastLiveSeq >= 0 && seq <= lastLiveSeq;
    lastLiveSeq = seq;
    lastLivePayload = payload;
    if (restart) {
      metrics.restarts.increment();
      // the new process numbers its batches from 0: those before seq were published before
      // the connection came back (reconnects back off up to 5 s), and are a gap like any other
      startOverAfterRestart();
      if (seq > 0) {
        fillGapBefore(seq, true);
        if (seq < expected || shared.closing().getAsBoolean()) {
          return;
        }
      }
    } else if (expected >= 0 && seq < expected) {
      metrics.duplicates.increment(); // already applied through a replay
      return;
    } else if (expected >= 0 && seq > expected) {
      fillGapBefore(seq, false);
      if (seq < expected || shared.closing().getAsBoolean()) {
        return; // the replay delivered this batch too, or close() cut it short
      }
    }
    applyPayload(payload);
    expected = seq + 1;
    lastAppliedPayload = payload;
  }

  /**
   * Per-endpoint mode: notes that the next live message came over {@code via} (a token of its
   * connection, or null when unknown); true when that is a newer connection than the last
   * message's. The SUB socket delivers one connection's messages before the next one's, so the
   * old connection's messages are all handled by then, and its drop
   * ({@link #publisherDisconnected}) must come before this message is applied.
   */
  boolean connectionReplaced(@Nullable Object via) {
    if (via == null) {
      heardWithoutConnection = true;
      return false;
    }
    if (via == connection) {
      return false;
    }
    Object previous = connection;
    connection = via;
    if (previous == null) {
      return false;
    }
    connectionsReplaced++;
    return true;
  }

  /**
   * Per-endpoint mode: whether a message of this stream was handled yet ({@link
   * #connectionReplaced} was told of one). Before the first, a disconnect reported is of a
   * connection none of whose messages the stream has handled (a handshake cut short, a connection
   * that dropped before anything was read from it): the next connection's messages are not its.
   */
  boolean heardAnyConnection() {
    return connection != null || heardWithoutConnection;
  }

  /** How many times a message came over a newer connection ({@link #connectionReplaced}). */
  long connectionsReplaced() {
    return connectionsReplaced;
  }

  /**
   * Per-endpoint mode: the connection to the endpoint's publisher dropped, and the messages it
   * had delivered are handled. The engine may be restarting with an empty cache, and a new
   * process whose first message to arrive carries exactly the seq expected next cannot be told
   * from the old one going on (nothing in a batch names its process), so the endpoint's blocks
   * are dropped now, counted as a resync. The seq expected and the last batch applied are kept:
   * a gap after the reconnect is still replayed from that batch, which tells a restarted engine
   * that passed the old numbering from the same one. A connection that drops before any message
   * came (a stalled handshake retried) changes nothing.
   */
  void publisherDisconnected() {
    if (!heardSinceDisconnect) {
      return;
    }
    heardSinceDisconnect = false;
    java.util.logging.Logger.getLogger(KvEventSubscriber.class.getName()).info("endpoint "
        + endpointId + ": the connection to its KV-event publisher dropped; its blocks are"
        + " dropped from the index (a restarted engine starts with an empty cache) and learned"
        + " again from its next events");
    resync();
  }

  /**
   * Batches from {@link #expected} up to {@code seq} were missed: replay them or start over.
   * {@code resynced}: the endpoint's entries were just dropped (a restart), so a stream without
   * replay only moves on to {@code seq}.
   */
  private void fillGapBefore(long seq, boolean resynced) {
    metrics.gaps.increment();
    metrics.missedBatches.add(seq - expected);
    if (replayAddress == null) {
      if (resynced) {
        expected = seq;
      } else {
        startOverAt(seq);
      }
    } else {
      ReplayOutcome outcome = replay(seq, resynced);
      if (outcome == ReplayOutcome.RESTARTED) {
        // the engine restarted and its numbering passed the old one's before we heard from it:
        // what looked like a gap of the old engine is the new one's batches; the old engine's
        // blocks are gone, and the new one's batches from 0 on were missed, not those from
        // expected on
        metrics.restarts.increment();
        metrics.missedBatches.add(expected);
        startOverAfterRestart();
        outcome = replay(seq, true);
      }
      if (outcome == ReplayOutcome.RESYNCED) {
        metrics.replayFailures.increment(); // the gap was not filled from its start
        return;
      }
      if (outcome != ReplayOutcome.CLOSED) {
        if (abandoned()) {
          // cut short by close() or by the endpoint leaving the pool: not the engine's failure,
          // and nothing left to resync (the batch in hand, if not closing, is then counted as
          // one of an endpoint that left)
          return;
        }
        metrics.replayFailures.increment();
        startOverAt(seq);
      }
    }
  }

  /** Forgets what the index holds for the endpoint and expects {@code seq} next. */
  private void startOverAt(long seq) {
    resync();
    expected = seq;
    lastAppliedPayload = null;
  }

  /**
   * The engine restarted: its cache is empty, so the endpoint's entries are dropped as a cleared
   * cache (not as entries the index lost track of), and its batches are expected from 0.
   */
  private void startOverAfterRestart() {
    shared.membership().restartedIfCurrent(endpointId, member);
    expected = 0;
    lastAppliedPayload = null;
  }

  private void applyPayload(byte[] payload) {
    KvEventBatch batch;
    try {
      batch = KvEventDecoder.decode(payload);
    } catch (MalformedKvEventException e) {
      // the message names the field, never token IDs
      shared.reports().dropped(endpointId, e.getMessage(), null);
      return;
    }
    if (dataParallelRank >= 0 && batch.dataParallelRank() >= 0
        && batch.dataParallelRank() != dataParallelRank) {
      // the sequence moves on (this is the stream's batch), its content is another endpoint's
      shared.reports().wrongRank(endpointId, dataParallelRank, batch.dataParallelRank());
      return;
    }
    try {
      shared.membership().applyIfCurrent(endpointId, member, batch);
    } catch (RuntimeException | Error e) {
      DropReports.rethrowIfFatal(e);
      shared.reports().dropped(endpointId, "applying a batch failed", e);
      // the batch stopped part-way: what the index holds for the endpoint is no longer known
      resync();
    }
  }

  /**
   * Whether a replay is to be given up whatever the engine answers: the subscriber is closing,
   * or the endpoint left the pool (its batches would not be applied, and the wait, up to the
   * replay timeout, holds up every other endpoint's stream and the pool change itself).
   */
  private boolean abandoned() {
    return shared.closing().getAsBoolean() || !shared.membership().isCurrent(endpointId, member);
  }

  /** Drops the endpoint's entries to start over, unless it has left the pool. */
  private void resync() {
    shared.membership().resyncIfCurrent(endpointId, member);
  }

  // ------------------------------------------------------------------------------- replay

  /**
   * Asks the engine's replay socket for batches from {@link #expected} and applies them.
   * {@link ReplayOutcome#CLOSED} when the stream reached {@code upTo} without holes: at the end
   * marker, or when the wait ends (timeout or close) with the batches up to {@code upTo}
   * applied. The engine sends every batch it buffers from the start on, so its answer may still
   * be flowing, past {@code upTo}, when the timeout comes; what it has delivered by then closed
   * the gap.
   *
   * <p>When the batch before the gap is known, the request starts one batch earlier, at that
   * batch: the same process sends it again byte for byte, while a restarted one that has passed
   * the old one's numbering has another batch under that seq ({@link ReplayOutcome#RESTARTED}).
   *
   * <p>A buffer that no longer holds that batch cannot tell the two apart, and one that no
   * longer holds the first batches missed cannot fill the gap. Either way what the index holds
   * for the endpoint can no longer be vouched for and is dropped (a resync), but the batches
   * the buffer does hold are the word of the process that now runs there, whichever it is, and
   * are applied from the first one on ({@link ReplayOutcome#RESYNCED}).
   *
   * @param clean the endpoint was just resynced and nothing applied since: a hole needs no
   *     second resync
   */
  private ReplayOutcome replay(long upTo, boolean clean) {
    metrics.replays.increment();
    byte @Nullable [] anchor = lastAppliedPayload;
    long anchorSeq = expected - 1;
    boolean resynced = false;
    long deadline = System.nanoTime() + shared.replayTimeoutMillis() * 1_000_000L;
    ZMQ.Socket d = requestReplayFrom(anchor != null ? anchorSeq : expected, deadline);
    if (d == null) {
      return ReplayOutcome.FAILED; // the replay socket could not be opened
    }
    ReadAhead readAhead = new ReadAhead(shared.readAheadBytes());
    for (;;) {
      long left = (deadline - System.nanoTime()) / 1_000_000L;
      if (left <= 0 || abandoned()) {
        // late replies would confuse the next replay: start over with a fresh socket
        dropReplaySocket(d);
        return ended(anchor, resynced, upTo);
      }
      // while the answer flows it is read before anything is applied: ZeroMQ's queue here is
      // small, and the engine's ROUTER drops what does not fit rather than wait for the applying
      readAhead.fill(d);
      List<byte[]> frames = readAhead.poll();
      if (frames == null) {
        d.setReceiveTimeOut((int) Math.min(CLOSE_CHECK_MILLIS, left));
        frames = receiveReply(d, 0);
        if (frames == null) {
          continue;
        }
      }
      if (frames.isEmpty() || frames.get(0).length != 8) {
        shared.reports().dropped(endpointId, "replay reply without an 8-byte seq", null);
        continue;
      }
      long seq = ByteBuffer.wrap(frames.get(0)).getLong();
      if (seq == -1) {
        return ended(anchor, resynced, upTo);
      }
      if (frames.size() < 2) {
        continue;
      }
      boolean startOver = false;
      if (anchor != null) {
        if (seq < anchorSeq) {
          continue;
        }
        if (seq == anchorSeq) {
          if (!Arrays.equals(frames.get(1), anchor)) {
            // the rest of this answer is the new process's and is asked for again from 0
            dropReplaySocket(d);
            return ReplayOutcome.RESTARTED;
          }
          anchor = null; // the same engine: what follows fills the gap
          continue;
        }
        // the batch before the gap is no longer buffered: nothing to compare it with
        anchor = null;
        startOver = true;
      }
      if (seq < expected) {
        continue;
      }
      if (seq > expected) {
        startOver = true; // the engine no longer buffers the first batches we missed
      }
      if (startOver) {
        if (!clean) {
          resync();
        }
        resynced = true;
        expected = seq;
        lastAppliedPayload = null;
      }
      applyPayload(frames.get(1));
      clean = false;
      expected = seq + 1;
      lastAppliedPayload = frames.get(1);
      metrics.replayedBatches.increment();
    }
  }

  /** How a replay that got no further answer ends, by what it had applied. */
  private ReplayOutcome ended(byte @Nullable [] anchorNotSeen, boolean resynced, long upTo) {
    if (anchorNotSeen != null || expected < upTo) {
      return ReplayOutcome.FAILED;
    }
    return resynced ? ReplayOutcome.RESYNCED : ReplayOutcome.CLOSED;
  }

  /** Closes a replay socket whose answer is abandoned, so the next replay starts afresh. */
  private void dropReplaySocket(ZMQ.Socket d) {
    d.close();
    replay = null;
  }

  /**
   * Sends {@code [, start]} on the replay socket, opening it first if needed; null when it
   * cannot be opened. A host name whose lookup is under way is waited for until
   * {@code deadline} (the replay's), as the replay's answer would be.
   */
  private ZMQ.@Nullable Socket requestReplayFrom(long start, long deadline) {
    if (replay == null) {
      replay = tryOpenReplay();
      while (replay == null && replayLookupPending && deadline - System.nanoTime() > 0
          && !abandoned()) {
        try {
          Thread.sleep(LOOKUP_CHECK_MILLIS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return null;
        }
        replay = tryOpenReplay();
      }
    }
    ZMQ.Socket d = replay;
    if (d == null) {
      return null;
    }
    d.sendMore(new byte[0]);
    d.send(ByteBuffer.allocate(8).putLong(start).array());
    return d;
  }

  /**
   * The frames of one reply as {@code [seq, payload]}, without the envelope delimiter and the
   * topic; null when none came in time, or none was waiting with {@link ZMQ#DONTWAIT}.
   *
   * <p>vLLM answers {@code [topic, seq, payload]} and ends with {@code ["", -1, ""]} since
   * vllm-project/vllm#45177 (the live stream's layout); older vLLM and SGLang answer
   * {@code [seq, payload]} and end with {@code [-1, ""]}. The frame count tells them apart. The
   * topic is not needed: the replay socket is the endpoint's own.
   */
  private static @Nullable List<byte[]> receiveReply(ZMQ.Socket d, int flags) {
    byte[] first = d.recv(flags);
    if (first == null) {
      return null;
    }
    List<byte[]> frames = new ArrayList<>(4);
    frames.add(first);
    while (d.hasReceiveMore()) {
      frames.add(d.recv());
    }
    if (frames.get(0).length == 0) {
      frames.remove(0); // envelope delimiter
    }
    if (frames.size() == 3) {
      frames.remove(0); // the topic
    }
    return frames;
  }

  /**
   * The replies of one replay taken off its socket ahead of applying them, bounded in bytes. The
   * engine sends its whole answer (up to its buffer, thousands of batches) as fast as it can, and
   * its ROUTER drops what its own queue cannot take; ZeroMQ's queue here holds only as many
   * messages as the byte bound allows at the largest size ({@link SubscriberSockets}). So while
   * the answer flows it is read rather than applied, up to the bytes allowed, and applied when
   * it pauses, ends or fills them. Past that the rest waits in ZeroMQ, the kernel and the engine
   * while the batches here are applied; what the engine drops meanwhile shows as a hole in the
   * answer, which resyncs the endpoint as any hole does.
   *
   * <p>A reply is weighed as the heap it takes: its frames' bytes and the objects holding them
   * ({@link #REPLY_OVERHEAD_BYTES}, {@link #FRAME_OVERHEAD_BYTES}). Counted by its frames' bytes
   * alone, a reply with an empty payload weighed its 8-byte seq and one that was only an
   * envelope delimiter nothing, while each took about 100 bytes: a peer answering with a stream
   * of them filled the heap some twelve times past the bound, or without limit.
   */
  static final class ReadAhead {
    /** How long a flowing answer may pause before the replies read so far are applied. */
    private static final int PAUSE_MILLIS = 1;
    /**
     * Heap of a reply besides its frames: its list and the list's array (56 bytes on a 64-bit
     * JVM with compressed pointers) and its slot in the queue, rounded up.
     */
    static final long REPLY_OVERHEAD_BYTES = 64;
    /** Heap of a frame besides its bytes: its array's header and padding, rounded up. */
    static final long FRAME_OVERHEAD_BYTES = 24;
    /** The weight of the largest reply a well-formed answer holds: a seq and a whole payload. */
    private static final long LARGEST_REPLY_BYTES = REPLY_OVERHEAD_BYTES
        + 2 * FRAME_OVERHEAD_BYTES + 8 + KvEventDecoder.MAX_PAYLOAD_BYTES;

    private final ArrayDeque<List<byte[]>> replies = new ArrayDeque<>();
    private final long maxBytes;
    private long bytes;
    private boolean endRead;

    ReadAhead(long maxBytes) {
      this.maxBytes = maxBytes;
    }

    /**
     * Reads the replies waiting on {@code d} and, once one came, those that follow, until the
     * answer's end marker, a pause, or until one of the largest size would no longer fit: what
     * is held never weighs more than {@code maxBytes} while the replies are well formed
     * ({@code [seq, payload]}, after the envelope and the topic).
     */
    void fill(ZMQ.Socket d) {
      boolean flowing = false;
      while (!endRead && bytes <= maxBytes - LARGEST_REPLY_BYTES) {
        List<byte[]> reply = receiveReply(d, ZMQ.DONTWAIT);
        if (reply == null && flowing) {
          d.setReceiveTimeOut(PAUSE_MILLIS); // the next one is probably on its way
          reply = receiveReply(d, 0);
        }
        if (reply == null) {
          return;
        }
        flowing = true;
        replies.add(reply);
        bytes += size(reply);
        endRead = !reply.isEmpty() && Arrays.equals(reply.get(0), END_SEQ);
      }
    }

    /** The oldest reply read ahead, or null when none is. */
    @Nullable List<byte[]> poll() {
      List<byte[]> reply = replies.poll();
      if (reply != null) {
        bytes -= size(reply);
      }
      return reply;
    }

    private static long size(List<byte[]> reply) {
      long n = REPLY_OVERHEAD_BYTES;
      for (byte[] f : reply) {
        n += FRAME_OVERHEAD_BYTES + f.length;
      }
      return n;
    }
  }
}
