package io.epp4j.jmh;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.kvevents.BlockKeys;
import io.epp4j.kvevents.KvBlockIndex;
import io.epp4j.kvevents.KvEvent;
import io.epp4j.kvevents.KvEventBatch;
import io.epp4j.kvevents.KvEventDecoder;
import io.epp4j.kvevents.KvEventsPresets;
import io.epp4j.kvevents.MalformedKvEventException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.Blackhole;

/**
 * Precise mode's two hot spots.
 *
 * <p>Event side, in blocks per second on one thread: {@code decodeAndApply} decodes a vLLM
 * msgpack batch (tagged-array events as vLLM's msgspec publisher writes them: uint64 hashes,
 * token IDs, block size 16, {@code lora_id} nil, medium {@code "GPU"}) of 8 {@code BlockStored}
 * events × 32 blocks chained to each other, applies it to an index that already holds
 * {@code indexedBlocks} blocks over 8 endpoints (0: the index fits in the CPU caches; 240,000:
 * eight replicas' worth, where every map access misses them), then decodes and applies the
 * {@code BlockRemoved} of the same 256 blocks, so the index stays at its size. One operation is one stored block (and its removal). {@code decodeOnly} and
 * {@code applyOnly} split the two costs.
 *
 * <p>Lookup side, time per request: a 2,048-block prompt (32,768 tokens) over 8 endpoints that
 * hold its first 256, 512, …, 2,048 blocks. {@code prefixWeight8Endpoints} is the index walk on
 * precomputed keys; {@code routePrecise} is a whole {@code Router.route} with the
 * {@code epp-precise} preset (block keys from the token IDs, the walk, queue and utilisation
 * scorers, the pick, and the speculative entries recorded for the pick).
 */
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class KvEventsBenchmark {
  static final int BLOCK_SIZE = 16;
  static final int EVENTS_PER_BATCH = 8;
  static final int BLOCKS_PER_EVENT = 32;
  static final int BLOCKS_PER_BATCH = EVENTS_PER_BATCH * BLOCKS_PER_EVENT;
  static final int VOCAB = 151_936;

  /** Pre-encoded batches and a populated index. */
  @State(Scope.Thread)
  public static class Events {
    static final int BATCHES = 64;
    static final String ENDPOINT = "10.0.0.1:8000";

    /** Blocks already indexed over 8 endpoints before the churn starts. */
    @Param({"0", "240000"})
    public int indexedBlocks;

    KvBlockIndex index;
    byte[][] stored = new byte[BATCHES][];
    byte[][] removed = new byte[BATCHES][];
    KvEventBatch[] storedDecoded = new KvEventBatch[BATCHES];
    KvEventBatch[] removedDecoded = new KvEventBatch[BATCHES];
    int next;

    @Setup(Level.Trial)
    public void setUp() throws MalformedKvEventException {
      SplittableRandom rnd = new SplittableRandom(7);
      index = KvBlockIndex.builder().build();
      for (int e = 0; e < 8; e++) {
        populate(index, "10.0.0." + (e + 1) + ":8000", indexedBlocks / 8, rnd);
      }
      for (int b = 0; b < BATCHES; b++) {
        List<KvEvent> events = new ArrayList<>();
        long[] all = new long[BLOCKS_PER_BATCH];
        Long parent = null;
        for (int ev = 0; ev < EVENTS_PER_BATCH; ev++) {
          long[] hashes = new long[BLOCKS_PER_EVENT];
          for (int i = 0; i < hashes.length; i++) {
            hashes[i] = rnd.nextLong(); // half of them above Long.MAX_VALUE as uint64
            all[ev * BLOCKS_PER_EVENT + i] = hashes[i];
          }
          events.add(KvEvent.BlockStored.of(hashes, parent, tokens(rnd, hashes.length
              * BLOCK_SIZE), BLOCK_SIZE));
          parent = hashes[hashes.length - 1];
        }
        stored[b] = encode(1.7e9 + b, events);
        removed[b] = encode(1.7e9 + b, List.of(KvEvent.BlockRemoved.of(all)));
        storedDecoded[b] = KvEventDecoder.decode(stored[b]);
        removedDecoded[b] = KvEventDecoder.decode(removed[b]);
      }
    }
  }

  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @OperationsPerInvocation(BLOCKS_PER_BATCH)
  public void decodeAndApply(Events s) throws MalformedKvEventException {
    int i = s.next++ & (Events.BATCHES - 1);
    s.index.apply(Events.ENDPOINT, KvEventDecoder.decode(s.stored[i]));
    s.index.apply(Events.ENDPOINT, KvEventDecoder.decode(s.removed[i]));
  }

  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @OperationsPerInvocation(BLOCKS_PER_BATCH)
  public void decodeOnly(Events s, Blackhole bh) throws MalformedKvEventException {
    int i = s.next++ & (Events.BATCHES - 1);
    bh.consume(KvEventDecoder.decode(s.stored[i]));
    bh.consume(KvEventDecoder.decode(s.removed[i]));
  }

  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @OperationsPerInvocation(BLOCKS_PER_BATCH)
  public void applyOnly(Events s) {
    int i = s.next++ & (Events.BATCHES - 1);
    s.index.apply(Events.ENDPOINT, s.storedDecoded[i]);
    s.index.apply(Events.ENDPOINT, s.removedDecoded[i]);
  }

  /** An index where endpoint k holds the prompt's first (k + 1) × 256 blocks, and a router. */
  @State(Scope.Benchmark)
  public static class Lookup {
    static final int PROMPT_BLOCKS = 2048;
    static final int ENDPOINTS = 8;

    KvBlockIndex index;
    String[] ids = new String[ENDPOINTS];
    long[] keys;
    Router router;
    InferenceRequest request;
    int promptTokens;

    @Setup(Level.Trial)
    public void setUp() {
      SplittableRandom rnd = new SplittableRandom(3);
      index = KvBlockIndex.builder().build();
      int[] prompt = tokens(rnd, PROMPT_BLOCKS * BLOCK_SIZE);
      keys = BlockKeys.chain(BlockKeys.seed("", null, null), prompt, BLOCK_SIZE, 16_384);
      List<Endpoint> endpoints = new ArrayList<>();
      long hash = 1;
      for (int e = 0; e < ENDPOINTS; e++) {
        ids[e] = "10.0.0." + (e + 1) + ":8000";
        endpoints.add(Endpoint.parse(ids[e]));
        populate(index, ids[e], 20_000, rnd);
        int held = (e + 1) * PROMPT_BLOCKS / ENDPOINTS;
        Long parent = null;
        for (int from = 0; from < held; from += 128) {
          long[] hashes = new long[128];
          for (int i = 0; i < hashes.length; i++) {
            hashes[i] = hash++;
          }
          index.apply(ids[e], KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(hashes, parent,
              Arrays.copyOfRange(prompt, from * BLOCK_SIZE, (from + 128) * BLOCK_SIZE),
              BLOCK_SIZE))));
          parent = hashes[127];
        }
      }
      router = Router.builder().endpoints(endpoints).service(KvBlockIndex.class, index)
          .configYaml(KvEventsPresets.yaml(KvEventsPresets.EPP_PRECISE), "epp-precise")
          .randomSeed(1).build();
      promptTokens = prompt.length;
      request = InferenceRequest.builder().model("qwen3-1.7b").tokenIds(prompt)
          .sessionKey("s").maxTokens(100).build();
      if (router.route(request).primary() == null) {
        throw new IllegalStateException("not routed");
      }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
      router.close();
    }
  }

  @Benchmark
  @BenchmarkMode(Mode.AverageTime)
  @OutputTimeUnit(TimeUnit.MICROSECONDS)
  public double prefixWeight8Endpoints(Lookup s) {
    long now = System.nanoTime();
    double sum = 0;
    for (String id : s.ids) {
      sum += s.index.prefixWeight(id, s.keys, now);
    }
    return sum;
  }

  @Benchmark
  @BenchmarkMode(Mode.AverageTime)
  @OutputTimeUnit(TimeUnit.MICROSECONDS)
  public RoutingDecision routePrecise(Lookup s) {
    RoutingDecision d = s.router.route(s.request);
    d.onComplete(new io.epp4j.api.Usage(s.promptTokens, 0, 1));
    return d;
  }

  static int[] tokens(SplittableRandom rnd, int n) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = rnd.nextInt(VOCAB);
    }
    return t;
  }

  /** Fills an endpoint with unrelated chains of 128 blocks. */
  static void populate(KvBlockIndex index, String endpoint, int blocks, SplittableRandom rnd) {
    for (int done = 0; done < blocks; done += 128) {
      long[] hashes = new long[128];
      for (int i = 0; i < hashes.length; i++) {
        hashes[i] = rnd.nextLong();
      }
      index.apply(endpoint, KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(hashes, null,
          tokens(rnd, 128 * BLOCK_SIZE), BLOCK_SIZE))));
    }
  }

  /** Writes a batch as vLLM's msgspec publisher does (tagged arrays, trailing defaults absent). */
  static byte[] encode(double ts, List<KvEvent> events) {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2);
      p.packDouble(ts);
      p.packArrayHeader(events.size());
      for (KvEvent e : events) {
        if (e instanceof KvEvent.BlockStored s) {
          p.packArrayHeader(7);
          p.packString("BlockStored");
          packHashes(p, s.blockHashes());
          if (s.hasParent()) {
            packHash(p, s.parentHash());
          } else {
            p.packNil();
          }
          p.packArrayHeader(s.tokenIds().length);
          for (int t : s.tokenIds()) {
            p.packInt(t);
          }
          p.packInt(s.blockSize());
          p.packNil(); // lora_id
          p.packString("GPU");
        } else if (e instanceof KvEvent.BlockRemoved r) {
          p.packArrayHeader(3);
          p.packString("BlockRemoved");
          packHashes(p, r.blockHashes());
          p.packString("GPU");
        } else {
          p.packArrayHeader(1);
          p.packString("AllBlocksCleared");
        }
      }
      return p.toByteArray();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static void packHashes(MessageBufferPacker p, long[] hashes) throws IOException {
    p.packArrayHeader(hashes.length);
    for (long h : hashes) {
      packHash(p, h);
    }
  }

  private static void packHash(MessageBufferPacker p, long h) throws IOException {
    if (h >= 0) {
      p.packLong(h);
    } else {
      p.packBigInteger(new BigInteger(Long.toUnsignedString(h))); // uint64, as Python writes it
    }
  }
}
