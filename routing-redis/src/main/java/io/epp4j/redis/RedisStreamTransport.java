package io.epp4j.redis;

import io.lettuce.core.ClientOptions;
import io.lettuce.core.Limit;
import io.lettuce.core.Range;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SocketOptions;
import io.lettuce.core.SslOptions;
import io.lettuce.core.StreamMessage;
import io.lettuce.core.XAddArgs;
import io.lettuce.core.XReadArgs;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.DefaultClientResources;
import io.netty.util.concurrent.DefaultThreadFactory;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * Hint batches in one Redis (or Valkey) stream: {@code XADD key MAXLEN ~ maxLen * b <batch>} to
 * publish, {@code XREAD COUNT n BLOCK ms STREAMS key <last id>} to read, on one connection per
 * thread (a blocking read would hold up publishing on a shared connection).
 *
 * <p>Lettuce's own reconnection is off and commands are rejected while disconnected: Lettuce
 * would otherwise buffer commands in memory for as long as Redis is away. The replication loop
 * reconnects with backoff instead, so nothing queues without bound.
 */
final class RedisStreamTransport implements HintTransport {
  private static final Logger LOG = Logger.getLogger(RedisReplication.class.getName());
  private static final byte[] FIELD = "b".getBytes(StandardCharsets.US_ASCII);
  /**
   * Longest value (or field name) a connection may receive and go on: past it the connection is
   * closed after the command and opened again for the next one. Lettuce gathers each value whole
   * in its connection's read buffer, which grows to the value's size and is released only when
   * the connection closes: its {@code decodeBufferPolicy} only moves unread bytes to the front
   * ({@code discardReadBytes}), and a smaller capacity set on the buffer keeps the memory with
   * Netty 4.2's default (adaptive) allocator. So one entry as long as Redis takes (another
   * writer's, up to its {@code proto-max-bulk-len}) pinned that much memory per router for as
   * long as the connection lasted. Routers write entries of 1 MiB and the one hint that crossed
   * it (64 KiB at the default 8,192 blocks), so their reads stay under this and keep their
   * connection.
   */
  static final int RECYCLE_ABOVE_BYTES = 4 << 20;

  /**
   * One client for the two connections of one plugin, with Netty threads of its own or those of
   * {@link ClientResources} the application shares between its routers. {@link #close} returns
   * once the client's own threads have ended (or after {@link #CLOSE_TIMEOUT_NANOS}, with a
   * warning): a router closed in a JVM that goes on must not leave them running. Shared
   * resources are the application's: close releases this client's connections and leaves them
   * running for the other routers.
   */
  static final class Factory implements HintTransport.Factory {
    /** How long close waits for the client's threads after the client itself shut down. */
    static final long CLOSE_TIMEOUT_NANOS = 2_000_000_000L;

    private final ClientResources resources;
    /** Whether {@link #resources} were made here, and so are shut down with the client. */
    private final boolean ownsResources;
    /** Every thread the resources started: the shutdown's future completes before they end. */
    private final Set<Thread> threads = ConcurrentHashMap.newKeySet();
    private final RedisClient client;
    private final byte[] key;
    private final String streamKey;
    private final long maxLen;
    private final Duration commandTimeout;
    /** The stream key's time to live after the last batch written, in ms; 0: none. */
    private final long ttlMillis;
    /** How often a publishing connection sets the TTL again: a tenth of it, at most a minute. */
    private final long ttlRefreshNanos;
    private final RateLimitedLog log;
    /**
     * Set when {@link #close} begins: a connection attempt on a client shut down never completes
     * (Lettuce's connection future waits for event loops that are gone), so a transport refuses
     * to connect from then on.
     */
    private volatile boolean closed;

    Factory(RedisURI uri, String streamKey, long maxLen, Duration connectTimeout,
        @Nullable SslOptions ssl) {
      this(uri, streamKey, maxLen, connectTimeout, ssl, null, Duration.ZERO);
    }

    /**
     * @param shared resources (event loops, computation threads, timer) the application shares
     *     between its routers, or null for resources of this client's own
     * @param streamTtl how long the stream key lives after the last batch written to it (at
     *     least nine tenths of it), so that the stream of a pool no router writes to any more
     *     leaves Redis; zero for no TTL
     */
    Factory(RedisURI uri, String streamKey, long maxLen, Duration connectTimeout,
        @Nullable SslOptions ssl, @Nullable ClientResources shared, Duration streamTtl) {
      this.streamKey = streamKey;
      this.ttlMillis = streamTtl.toMillis();
      this.ttlRefreshNanos = Math.min(TimeUnit.MILLISECONDS.toNanos(ttlMillis) / 10,
          TimeUnit.MINUTES.toNanos(1));
      this.log = new RateLimitedLog(LOG, "redis-replication: ");
      this.ownsResources = shared == null;
      this.resources = shared != null ? shared : DefaultClientResources.builder()
          .ioThreadPoolSize(2)
          .computationThreadPoolSize(2)
          .threadFactoryProvider(pool -> {
            // Lettuce's own naming and daemon threads, remembered
            ThreadFactory netty = new DefaultThreadFactory(pool, true);
            return r -> {
              Thread t = netty.newThread(r);
              threads.add(t);
              return t;
            };
          })
          .build();
      // the URI's timeout bounds the connection's handshake (HELLO, AUTH, SELECT): Lettuce's
      // default of 60 s would hold a thread that connects to a server that accepts connections
      // and answers nothing (a hung process, a stopped VM) for a minute per attempt
      uri.setTimeout(connectTimeout);
      this.client = RedisClient.create(resources, uri);
      ClientOptions.Builder options = ClientOptions.builder();
      if (ssl != null) {
        options.sslOptions(ssl);
      }
      client.setOptions(options
          .autoReconnect(false)
          .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
          .socketOptions(SocketOptions.builder().connectTimeout(connectTimeout).build())
          .build());
      this.key = streamKey.getBytes(StandardCharsets.UTF_8);
      this.maxLen = maxLen;
      this.commandTimeout = connectTimeout;
    }

    /** The client's resources (its threads); for tests. */
    ClientResources resources() {
      return resources;
    }

    @Override
    public HintTransport create() {
      return new RedisStreamTransport(this);
    }

    @Override
    public void close() {
      closed = true;
      // waits for the client's connections and its I/O threads. With shared resources the I/O
      // threads stay while another client still uses them (Lettuce counts the users of its
      // event loops), and the resources are not shut down: a client made on given resources
      // leaves them to their owner
      client.shutdown(0, 2, TimeUnit.SECONDS);
      if (!ownsResources) {
        return;
      }
      long deadline = System.nanoTime() + CLOSE_TIMEOUT_NANOS;
      // the computation threads and the timer; a thread still ends after completing the future
      Future<Boolean> done = resources.shutdown(0, 2, TimeUnit.SECONDS);
      try {
        done.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        for (Thread t : threads) {
          long left = deadline - System.nanoTime();
          if (left <= 0) {
            break;
          }
          TimeUnit.NANOSECONDS.timedJoin(t, left);
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } catch (ExecutionException | TimeoutException e) {
        // reported below with the threads left
      }
      long alive = threads.stream().filter(Thread::isAlive).count();
      if (alive > 0) {
        LOG.warning("redis-replication: " + alive + " thread(s) of the Redis client still"
            + " running " + TimeUnit.NANOSECONDS.toMillis(CLOSE_TIMEOUT_NANOS)
            + " ms after it was shut down");
      }
    }
  }

  private final Factory f;
  private final TrimmingCodec codec = new TrimmingCodec();
  private @Nullable StatefulRedisConnection<byte[], byte[]> connection;
  /**
   * Whether {@link #connection} was closed for the read buffer a long value grew (see
   * {@link #RECYCLE_ABOVE_BYTES}): the next command opens a new one.
   */
  private boolean reopen;
  /**
   * Whether a command was given {@link #connection}: one found closed before its first command
   * is replaced (see {@link #connection()}), one that served commands is not.
   */
  private boolean used;
  /** When this transport next sets the stream's TTL after an append; every connection at once. */
  private long ttlDueNanos;

  private RedisStreamTransport(Factory f) {
    this.f = f;
  }

  @Override
  public void connect() {
    close();
    if (f.closed) {
      // a thread that outlived close (see RedisReplication#close) would wait here for good
      throw new IllegalStateException("the Redis client is closed");
    }
    StatefulRedisConnection<byte[], byte[]> c = f.client.connect(codec);
    c.setTimeout(f.commandTimeout);
    connection = c;
    // a stream that expired, or was written without a TTL, gets one with the first batch
    ttlDueNanos = System.nanoTime();
  }

  private StatefulRedisConnection<byte[], byte[]> connection() {
    if (connection == null && reopen) {
      connect(); // a failure is the command's, as a connection lost would be
    }
    StatefulRedisConnection<byte[], byte[]> c = connection;
    if (c != null && !c.isOpen() && !used) {
      // closed after connect() returned it and before its first command: Lettuce's handshake
      // timeout runs on another thread, and when the handshake succeeds just as it fires, the
      // connection is handed over and its channel closed right after. Nothing was sent on it, so
      // one new connection takes its place, as if connect() had returned that one; a failure to
      // connect is the command's. A connection that served commands and then closed is left to
      // the caller, whose reconnection checks what it missed
      connect();
      c = connection;
    }
    if (c == null || !c.isOpen()) {
      throw new IllegalStateException("not connected");
    }
    used = true;
    return c;
  }

  /** Whether the connection is open, as the next command would find it; for tests. */
  boolean connectionOpen() {
    StatefulRedisConnection<byte[], byte[]> c = connection;
    return c != null && c.isOpen();
  }

  @Override
  public String append(byte[] batch) {
    var sync = connection().sync();
    try {
      String id = sync.xadd(f.key,
          XAddArgs.Builder.maxlen(f.maxLen).approximateTrimming(), Map.of(FIELD, batch));
      refreshTtl(sync);
      return id == null ? "" : id;
    } finally {
      releaseGrownBuffer();
    }
  }

  /**
   * {@code XADD key NOMKSTREAM 0-0 b ""}: Redis checks a write command against the user's ACL,
   * {@code maxmemory} and a replica's read-only state before it runs it, and then refuses the id
   * 0-0 before it looks at the key, so this appends nothing, creates no key and answers that
   * error when (and only when) a batch would have passed those checks; {@code NOPERM},
   * {@code OOM} or {@code READONLY} are thrown as {@link #append} would throw them. Any other
   * write command that changes nothing is either not refused when out of memory
   * ({@code PEXPIRE}, {@code XTRIM}) or needs a permission the routers do not have.
   */
  @Override
  public void checkAppend() {
    var sync = connection().sync();
    try {
      sync.xadd(f.key, XAddArgs.Builder.nomkstream().id(HintTransport.OLDEST),
          Map.of(FIELD, new byte[0]));
    } catch (RedisCommandExecutionException e) {
      if (!"ERR".equals(RedisReplication.refusalCode(e))) {
        throw e;
      }
      // the id refused: the server would have taken a batch
    } finally {
      releaseGrownBuffer();
    }
  }

  /**
   * Closes the connection when a command's answer held a value longer than
   * {@link #RECYCLE_ABOVE_BYTES}, so that its read buffer, which grew to that value and never
   * shrinks, is released now rather than when the connection happens to close; the next command
   * opens a new connection. Called after every command, once its answer is decoded (the values
   * it returns are copies, not views of the buffer).
   */
  private void releaseGrownBuffer() {
    if (codec.longest <= RECYCLE_ABOVE_BYTES) {
      return;
    }
    close();
    reopen = true;
  }

  /**
   * Sets the stream key's TTL again when a tenth of it (a minute at most) has passed since this
   * transport last did: the key then outlives the last batch any router writes by nine tenths of
   * the TTL at least, and the stream of a pool whose routers are all gone (renamed, retired)
   * leaves Redis instead of holding up to {@code maxLen} batches for good. A refusal (an ACL
   * without {@code PEXPIRE}) is logged, naming the key, and leaves the stream without a TTL; it
   * fails neither the batch, which Redis took, nor the connection. A timeout here is left to the
   * next command to find.
   */
  private void refreshTtl(io.lettuce.core.api.sync.RedisCommands<byte[], byte[]> sync) {
    if (f.ttlMillis <= 0) {
      return;
    }
    long now = System.nanoTime();
    if (now - ttlDueNanos < 0) {
      return;
    }
    ttlDueNanos = now + f.ttlRefreshNanos;
    try {
      sync.pexpire(f.key, f.ttlMillis);
    } catch (RedisCommandExecutionException e) {
      String code = RedisReplication.refusalCode(e);
      f.log.report(java.util.logging.Level.WARNING, "ttl", "Redis refused PEXPIRE (" + code
          + ") on stream '" + f.streamKey + "': it keeps no TTL and outlives the routers of its"
          + " pool (allow +pexpire on the key, or set streamTtlSeconds: 0)");
    } catch (RuntimeException e) {
      // the connection's trouble, if any, shows on the next command
    }
  }

  @Override
  public List<Entry> read(String afterId, int max, Duration maxWait) {
    return read(afterId, max, maxWait, stored -> stored.remaining());
  }

  /**
   * Reads with {@code XREAD}, which returns entries whole: what {@code wanted} leaves out of an
   * entry is dropped as the answer is decoded, one entry at a time, so that a read holds at most
   * what its reader keeps (and the one entry being decoded), however large the entries it skips.
   */
  @Override
  public List<Entry> read(String afterId, int max, Duration maxWait, Wanted wanted) {
    StatefulRedisConnection<byte[], byte[]> c = connection();
    // the blocking read must not trip the command timeout; the commands after it (the gap
    // check, TIME) keep the configured one, so a server that stops answering is noticed as soon
    List<StreamMessage<byte[], byte[]>> got;
    c.setTimeout(f.commandTimeout.plus(maxWait));
    codec.trim(wanted);
    try {
      got = c.sync().xread(XReadArgs.Builder.count(max).block(maxWait),
          XReadArgs.StreamOffset.from(f.key, afterId));
    } finally {
      codec.trim(null);
      c.setTimeout(f.commandTimeout);
      releaseGrownBuffer();
    }
    if (got == null || got.isEmpty()) {
      codec.cut.clear();
      return List.of();
    }
    List<Entry> out = new ArrayList<>(got.size());
    for (StreamMessage<byte[], byte[]> m : got) {
      byte[] body = null;
      for (Map.Entry<byte[], byte[]> e : m.getBody().entrySet()) {
        if (java.util.Arrays.equals(e.getKey(), FIELD)) {
          body = e.getValue();
        }
      }
      if (body == null) {
        out.add(new Entry(m.getId(), new byte[0]));
      } else {
        Integer stored = codec.cut.get(body);
        out.add(new Entry(m.getId(), body, stored == null ? body.length : stored));
      }
    }
    codec.cut.clear();
    return out;
  }

  /**
   * Byte arrays as they are, except while a read is cutting entries short: then a value of the
   * batch field keeps the bytes the reader wants (the stored length of a value cut short is
   * remembered) and every other field's value none, since the reader reads no other field.
   * Lettuce decodes an answer on one thread, each field's name just before its value.
   */
  private static final class TrimmingCodec implements io.lettuce.core.codec.RedisCodec<byte[], byte[]> {
    private static final byte[] NONE = new byte[0];
    private volatile @Nullable Wanted wanted;
    /** Values cut short by the read in progress, by identity, with their stored length. */
    final Map<byte[], Integer> cut =
        java.util.Collections.synchronizedMap(new java.util.IdentityHashMap<>());
    /** Whether the field name decoded last is the batch field. */
    private boolean batchField;
    /** Length of the longest key or value decoded since the connection opened. */
    volatile int longest;

    private void measure(java.nio.ByteBuffer bytes) {
      if (bytes != null && bytes.remaining() > longest) {
        longest = bytes.remaining();
      }
    }

    void trim(@Nullable Wanted w) {
      wanted = w;
    }

    @Override
    public byte[] decodeKey(java.nio.ByteBuffer bytes) {
      measure(bytes);
      byte[] key = ByteArrayCodec.INSTANCE.decodeKey(bytes);
      batchField = java.util.Arrays.equals(key, FIELD);
      return key;
    }

    @Override
    public byte[] decodeValue(java.nio.ByteBuffer bytes) {
      measure(bytes);
      Wanted w = wanted;
      if (w == null || bytes == null) {
        return ByteArrayCodec.INSTANCE.decodeValue(bytes);
      }
      if (!batchField) {
        return NONE;
      }
      batchField = false;
      int stored = bytes.remaining();
      int keep = Math.max(0, Math.min(stored, w.bytes(bytes.duplicate())));
      if (keep == stored) {
        return ByteArrayCodec.INSTANCE.decodeValue(bytes);
      }
      byte[] kept = new byte[keep]; // a new array even when empty: the map tells them apart
      bytes.duplicate().get(kept);
      cut.put(kept, stored);
      return kept;
    }

    @Override
    public java.nio.ByteBuffer encodeKey(byte[] key) {
      return ByteArrayCodec.INSTANCE.encodeKey(key);
    }

    @Override
    public java.nio.ByteBuffer encodeValue(byte[] value) {
      return ByteArrayCodec.INSTANCE.encodeValue(value);
    }
  }

  @Override
  public boolean holdsAfter(String afterId) {
    if (OLDEST.equals(afterId)) {
      return true;
    }
    var sync = connection().sync();
    // only the entries' ids are needed: their bytes (of any size) are dropped as they arrive
    codec.trim(stored -> 0);
    try {
      return holdsAfter(sync, afterId);
    } finally {
      codec.trim(null);
      codec.cut.clear();
      releaseGrownBuffer();
    }
  }

  /**
   * Whether the entry {@code afterId} is still in the stream. Trimming ({@code MAXLEN}) removes
   * entries oldest first, so while it is there every entry after it is too; gone, either the
   * trim passed it (the entries after it may be gone as well) or another stream took this one's
   * place (a failover to a replica that lacks the newest entries, a stream deleted and written
   * again), whose ids after {@code afterId} a read would wait for. Asked for that one entry, not
   * the stream's oldest: {@code XRANGE} sends entries whole, and the oldest may be one far longer
   * than any router writes (another writer's, up to Redis' {@code proto-max-bulk-len}), which the
   * client would receive and buffer at every check, once a heartbeat, for as long as the stream
   * keeps it. The entry asked for is the last one the reader read, sent once more per check.
   */
  private boolean holdsAfter(io.lettuce.core.api.sync.RedisCommands<byte[], byte[]> sync,
      String afterId) {
    List<StreamMessage<byte[], byte[]>> last = sync.xrange(f.key,
        Range.create(afterId, afterId), Limit.from(1));
    return last != null && !last.isEmpty();
  }

  /**
   * The server's {@code TIME}, the clock its stream ids come from; -1 when the server refuses
   * the command (an ACL that allows only the stream commands).
   */
  @Override
  public long nowMillis() {
    List<byte[]> time;
    try {
      time = connection().sync().time();
    } catch (RedisCommandExecutionException e) {
      return -1;
    } finally {
      releaseGrownBuffer();
    }
    if (time == null || time.size() < 2) {
      return -1;
    }
    long seconds = Long.parseLong(new String(time.get(0), StandardCharsets.US_ASCII));
    long micros = Long.parseLong(new String(time.get(1), StandardCharsets.US_ASCII));
    return seconds * 1000 + micros / 1000;
  }

  @Override
  public void close() {
    StatefulRedisConnection<byte[], byte[]> c = connection;
    connection = null;
    reopen = false;
    used = false;
    codec.longest = 0;
    if (c != null) {
      try {
        c.close();
      } catch (RuntimeException ignored) {
        // closing a broken connection: nothing left to release
      }
    }
  }
}
