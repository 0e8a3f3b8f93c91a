package io.epp4j.sim;

import io.epp4j.kvevents.KvEvent;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.jspecify.annotations.Nullable;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;
import org.zeromq.ZMQException;
import zmq.ZError;

/**
 * One replica's KV events as vLLM's {@code ZmqEventPublisher} sends them: a PUB socket carrying
 * {@code [topic, 8-byte big-endian sequence, msgpack KVEventBatch]}, one message per engine step,
 * and a ROUTER socket that answers {@code [.., start sequence]} with every buffered message from
 * that sequence on ({@code [id, "", seq, payload]}) and then {@code [id, "", -1, ""]}.
 *
 * <p>The batch is msgspec's {@code array_like} encoding, {@code [ts, [event, ...]]} with each
 * event a tagged array such as
 * {@code ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium, lora_name]}
 * ({@code lora_id}, {@code medium} and {@code lora_name} have no default in vLLM, so they are
 * always there; a request on a LoRA adapter or with a {@code cache_salt} adds
 * {@code extra_keys}), or, with {@code mapEncoding}, each event a map with a
 * {@code type} key. Block hashes go out as 64-bit unsigned integers, as vLLM's built-in hash
 * produces them.
 *
 * <p>The sockets belong to one thread of their own; the engine hands batches over through a
 * queue bounded in batches and in bytes ({@link #QUEUE_BYTES}) and never blocks. A batch is numbered when the engine hands it over, so one
 * that a full queue drops (the socket thread stalled or gone) leaves a gap in the sequence: a
 * subscriber sees it, finds it missing from the replay too, and resyncs the replica. Drops are
 * counted ({@link #dropped()}) and reported on standard error, the first and then every
 * 1,000th.
 *
 * <p>The replay buffer keeps at most {@link #REPLAY_BUFFER} batches, as vLLM's
 * {@code buffer_steps}, and at most {@code replayBufferBytes} bytes of them (sequence numbers
 * and encoded payloads), which vLLM does not bound: a long prompt's step carries every token of
 * it, so ten thousand of them could hold gigabytes. Whichever bound is reached first, the oldest
 * batches go first; a batch larger than the whole byte bound is published but not kept. A replay
 * request for a sequence that is no longer buffered is answered as vLLM answers it: with every
 * batch still buffered from that sequence on (starting later than asked, or none) and then the
 * end marker, so the subscriber sees the gap and resyncs.
 */
final class KvEventPublisher implements AutoCloseable {
  /** vLLM keeps this many batches for replay by default. */
  static final int REPLAY_BUFFER = 10_000;
  /**
   * Bytes of batches the replay buffer keeps by default (per replica): 64 MiB, ten thousand
   * steps of about 6.7 KB each, or a hundred or so steps that each store a 100,000-token prompt.
   */
  static final long DEFAULT_REPLAY_BUFFER_BYTES = 64L << 20;
  /**
   * Bytes of events the queue to the socket thread holds at most (besides its 4,096 batches):
   * while the thread is stalled, a replica storing long prompts would otherwise queue gigabytes.
   */
  static final long QUEUE_BYTES = 256L << 20;
  private static final byte[] END_SEQ = ByteBuffer.allocate(8).putLong(-1).array();

  private final byte[] topic;
  private final boolean mapEncoding;
  private final BlockingQueue<Numbered> queue;
  private final Thread thread;
  private final CountDownLatch bound = new CountDownLatch(1);
  private final AtomicLong nextSeq = new AtomicLong();
  private final AtomicLong dropped = new AtomicLong();
  // what the batches waiting in the queue hold, by heapBytes
  private final AtomicLong queuedBytes = new AtomicLong();
  private final long replayBufferBytes;
  // the replay buffer's size in bytes; written by the socket thread, read by tests
  private volatile long bufferedBytes;
  private volatile int bufferedBatches;
  private volatile @Nullable String bindError;
  private volatile boolean stop;

  /**
   * Binds {@code 127.0.0.1:pubPort} and {@code 127.0.0.1:replayPort}.
   *
   * @throws IllegalStateException naming the port when a socket cannot be bound
   */
  KvEventPublisher(ZContext ctx, String topic, int pubPort, int replayPort, boolean mapEncoding) {
    this(ctx, topic, pubPort, replayPort, mapEncoding, DEFAULT_REPLAY_BUFFER_BYTES);
  }

  /**
   * As the one above, keeping at most {@code replayBufferBytes} bytes of batches for replay.
   *
   * @throws IllegalArgumentException when {@code replayBufferBytes} is negative
   */
  KvEventPublisher(ZContext ctx, String topic, int pubPort, int replayPort, boolean mapEncoding,
      long replayBufferBytes) {
    this(ctx, topic, pubPort, replayPort, mapEncoding, 4_096, null, replayBufferBytes);
  }

  /**
   * As the public one, with a queue of {@code queueCapacity} batches; {@code sendGate}, when not
   * null, holds the socket thread after binding until it opens (tests fill the queue with it).
   */
  KvEventPublisher(ZContext ctx, String topic, int pubPort, int replayPort, boolean mapEncoding,
      int queueCapacity, @Nullable CountDownLatch sendGate) {
    this(ctx, topic, pubPort, replayPort, mapEncoding, queueCapacity, sendGate,
        DEFAULT_REPLAY_BUFFER_BYTES);
  }

  private KvEventPublisher(ZContext ctx, String topic, int pubPort, int replayPort,
      boolean mapEncoding, int queueCapacity, @Nullable CountDownLatch sendGate,
      long replayBufferBytes) {
    if (replayBufferBytes < 0) {
      throw new IllegalArgumentException("replay buffer bytes must be >= 0, got "
          + replayBufferBytes);
    }
    this.replayBufferBytes = replayBufferBytes;
    this.topic = topic.getBytes(StandardCharsets.UTF_8);
    this.mapEncoding = mapEncoding;
    this.queue = new ArrayBlockingQueue<>(queueCapacity);
    this.thread = new Thread(() -> run(ctx, pubPort, replayPort, sendGate),
        "epp4j-emulator-kv-" + pubPort);
    thread.setDaemon(true);
    thread.start();
    try {
      if (!bound.await(10, TimeUnit.SECONDS)) {
        throw new IllegalStateException("KV event sockets on port " + pubPort + " not bound in 10 s");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while binding KV event sockets", e);
    }
    if (bindError != null) {
      throw new IllegalStateException(bindError);
    }
  }

  /**
   * Numbers one engine step's events and queues them; never blocks. When the queue is full (in
   * batches, or in the bytes its events hold: {@link #QUEUE_BYTES}) the batch is dropped, its
   * number skipped.
   */
  void publish(List<KvEvent> events) {
    long seq = nextSeq.getAndIncrement();
    long size = heapBytes(events);
    boolean queued = false;
    if (queuedBytes.addAndGet(size) <= QUEUE_BYTES || queue.isEmpty()) {
      // a batch alone larger than the bound still goes when nothing else waits
      queued = queue.offer(new Numbered(seq, events, size));
    }
    if (!queued) {
      queuedBytes.addAndGet(-size);
      long n = dropped.incrementAndGet();
      if (n == 1 || n % 1_000 == 0) {
        System.err.println("warning: KV event publisher " + new String(topic, StandardCharsets.UTF_8)
            + ": queue full, batch " + seq + " dropped (" + n + " so far); subscribers will"
            + " see a gap and resync");
      }
    }
  }

  /** Batches dropped because the queue to the socket thread was full. */
  long dropped() {
    return dropped.get();
  }

  /** Bytes the replay buffer holds now (sequence numbers and payloads). */
  long bufferedBytes() {
    return bufferedBytes;
  }

  /** Batches the replay buffer holds now. */
  int bufferedBatches() {
    return bufferedBatches;
  }

  private record Numbered(long seq, List<KvEvent> events, long heapBytes) {}

  /** About what a batch's events hold on the heap: their token IDs and hashes. */
  static long heapBytes(List<KvEvent> events) {
    long n = 16L * events.size();
    for (KvEvent e : events) {
      if (e instanceof KvEvent.BlockStored s) {
        n += 4L * s.tokenIds().length + 8L * s.blockHashes().length + 64;
      } else if (e instanceof KvEvent.BlockRemoved r) {
        n += 8L * r.blockHashes().length + 32;
      }
    }
    return n;
  }

  private static long size(byte[][] m) {
    return (long) m[0].length + m[1].length;
  }

  private void run(ZContext ctx, int pubPort, int replayPort, @Nullable CountDownLatch sendGate) {
    ZMQ.Socket pub;
    ZMQ.Socket router;
    try {
      pub = bind(ctx, SocketType.PUB, pubPort, "KV events");
    } catch (IllegalStateException e) {
      bindError = e.getMessage();
      bound.countDown();
      return;
    }
    try {
      router = bind(ctx, SocketType.ROUTER, replayPort, "KV event replay");
    } catch (IllegalStateException e) {
      pub.close();
      bindError = e.getMessage();
      bound.countDown();
      return;
    }
    bound.countDown();
    ArrayDeque<byte[][]> buffer = new ArrayDeque<>();
    long bytes = 0;
    try {
      if (sendGate != null) {
        sendGate.await();
      }
      while (!stop) {
        Numbered batch = queue.poll(5, TimeUnit.MILLISECONDS);
        while (batch != null) {
          queuedBytes.addAndGet(-batch.heapBytes());
          byte[] seqBytes = ByteBuffer.allocate(8).putLong(batch.seq()).array();
          byte[] payload = encode(System.currentTimeMillis() / 1000.0, batch.events(),
              mapEncoding);
          pub.sendMore(topic);
          pub.sendMore(seqBytes);
          pub.send(payload);
          byte[][] kept = {seqBytes, payload};
          buffer.addLast(kept);
          bytes += size(kept);
          while (!buffer.isEmpty()
              && (buffer.size() > REPLAY_BUFFER || bytes > replayBufferBytes)) {
            bytes -= size(buffer.removeFirst());
          }
          bufferedBytes = bytes;
          bufferedBatches = buffer.size();
          batch = queue.poll();
        }
        answerReplays(router, buffer);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (ZMQException e) {
      if (!stop) {
        throw e;
      }
    } finally {
      pub.close();
      router.close();
    }
  }

  private static void answerReplays(ZMQ.Socket router, ArrayDeque<byte[][]> buffer) {
    byte[] id;
    while ((id = router.recv(ZMQ.DONTWAIT)) != null) {
      byte[] last = null;
      while (router.hasReceiveMore()) {
        last = router.recv();
      }
      if (last != null && last.length == 8) {
        long start = ByteBuffer.wrap(last).getLong();
        for (byte[][] m : buffer) {
          if (ByteBuffer.wrap(m[0]).getLong() >= start) {
            router.sendMore(id);
            router.sendMore(new byte[0]);
            router.sendMore(m[0]);
            router.send(m[1]);
          }
        }
      }
      router.sendMore(id);
      router.sendMore(new byte[0]);
      router.sendMore(END_SEQ);
      router.send(new byte[0]);
    }
  }

  private static ZMQ.Socket bind(ZContext ctx, SocketType type, int port, String what) {
    ZMQ.Socket s = ctx.createSocket(type);
    s.setLinger(0);
    try {
      if (s.bind("tcp://127.0.0.1:" + port)) {
        return s;
      }
      s.close();
      throw new IllegalStateException(what + " port " + port + " on 127.0.0.1 cannot be bound;"
          + " is another server using it?");
    } catch (ZMQException e) {
      s.close();
      // JeroMQ's message is its errno ("Errno 48"), which says nothing to a reader
      String why = e.getErrorCode() == ZError.EADDRINUSE ? "already in use" : e.getMessage();
      throw new IllegalStateException(what + " port " + port + " on 127.0.0.1 cannot be bound ("
          + why + "); is another server using it?", e);
    }
  }

  @Override
  public void close() {
    stop = true;
    try {
      thread.join(5_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** Encodes one {@code KVEventBatch} as vLLM's msgspec publisher does. */
  static byte[] encode(double timestampSeconds, List<KvEvent> events, boolean mapEncoding) {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2);
      p.packDouble(timestampSeconds);
      p.packArrayHeader(events.size());
      for (KvEvent e : events) {
        if (mapEncoding) {
          packMap(p, e);
        } else {
          packArray(p, e);
        }
      }
      return p.toByteArray();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static void packArray(MessageBufferPacker p, KvEvent e) throws IOException {
    if (e instanceof KvEvent.BlockStored s) {
      // lora_id, medium and lora_name have no default in vLLM's BlockStored, so msgspec writes
      // them always; extra_keys (default None) only when a block has any
      boolean extra = s.loraName() != null || s.cacheSalt() != null;
      p.packArrayHeader(extra ? 9 : 8);
      p.packString("BlockStored");
      packHashes(p, s.blockHashes());
      packParent(p, s);
      packTokens(p, s.tokenIds());
      p.packInt(s.blockSize());
      packLoraId(p, s);
      p.packString("GPU");
      packLoraName(p, s);
      if (extra) {
        packExtraKeys(p, s);
      }
    } else if (e instanceof KvEvent.BlockRemoved r) {
      // medium has no default in vLLM's BlockRemoved either
      p.packArrayHeader(3);
      p.packString("BlockRemoved");
      packHashes(p, r.blockHashes());
      p.packString("GPU");
    } else {
      p.packArrayHeader(1);
      p.packString("AllBlocksCleared");
    }
  }

  private static void packLoraId(MessageBufferPacker p, KvEvent.BlockStored s)
      throws IOException {
    if (s.loraId() >= 0) {
      p.packInt(s.loraId());
    } else {
      p.packNil();
    }
  }

  private static void packLoraName(MessageBufferPacker p, KvEvent.BlockStored s)
      throws IOException {
    String name = s.loraName();
    if (name != null) {
      p.packString(name);
    } else {
      p.packNil();
    }
  }

  private static void packMap(MessageBufferPacker p, KvEvent e) throws IOException {
    if (e instanceof KvEvent.BlockStored s) {
      // in vLLM's field order; lora_id, medium and lora_name always, as in the array encoding
      boolean extra = s.loraName() != null || s.cacheSalt() != null;
      p.packMapHeader(extra ? 9 : 8);
      p.packString("type");
      p.packString("BlockStored");
      p.packString("block_hashes");
      packHashes(p, s.blockHashes());
      p.packString("parent_block_hash");
      packParent(p, s);
      p.packString("token_ids");
      packTokens(p, s.tokenIds());
      p.packString("block_size");
      p.packInt(s.blockSize());
      p.packString("lora_id");
      packLoraId(p, s);
      p.packString("medium");
      p.packString("GPU");
      p.packString("lora_name");
      packLoraName(p, s);
      if (extra) {
        p.packString("extra_keys");
        packExtraKeys(p, s);
      }
    } else if (e instanceof KvEvent.BlockRemoved r) {
      p.packMapHeader(3);
      p.packString("type");
      p.packString("BlockRemoved");
      p.packString("block_hashes");
      packHashes(p, r.blockHashes());
      p.packString("medium");
      p.packString("GPU");
    } else {
      p.packMapHeader(1);
      p.packString("type");
      p.packString("AllBlocksCleared");
    }
  }

  /**
   * vLLM's {@code extra_keys}: per block, the keys that went into its hash besides the tokens,
   * or nil. The adapter's name on every block, the cache salt on the first block of a chain.
   */
  private static void packExtraKeys(MessageBufferPacker p, KvEvent.BlockStored s)
      throws IOException {
    int blocks = s.blockHashes().length;
    p.packArrayHeader(blocks);
    for (int i = 0; i < blocks; i++) {
      String salt = i == 0 ? s.cacheSalt() : null;
      int n = (s.loraName() != null ? 1 : 0) + (salt != null ? 1 : 0);
      if (n == 0) {
        p.packNil();
        continue;
      }
      p.packArrayHeader(n);
      if (s.loraName() != null) {
        p.packString(s.loraName());
      }
      if (salt != null) {
        p.packString(salt);
      }
    }
  }

  private static void packParent(MessageBufferPacker p, KvEvent.BlockStored s) throws IOException {
    if (s.hasParent()) {
      packHash(p, s.parentHash());
    } else {
      p.packNil();
    }
  }

  private static void packHashes(MessageBufferPacker p, long[] hashes) throws IOException {
    p.packArrayHeader(hashes.length);
    for (long h : hashes) {
      packHash(p, h);
    }
  }

  private static void packHash(MessageBufferPacker p, long h) throws IOException {
    if (h < 0) {
      p.packBigInteger(new BigInteger(Long.toUnsignedString(h)));
    } else {
      p.packLong(h);
    }
  }

  private static void packTokens(MessageBufferPacker p, int[] tokens) throws IOException {
    p.packArrayHeader(tokens.length);
    for (int t : tokens) {
      p.packInt(t);
    }
  }
}
