package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.Router;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/** The subscriber against real ZeroMQ sockets on loopback. */
@Timeout(60)
class KvEventSubscriberIntegrationTest {
  static final byte[] END = ByteBuffer.allocate(8).putLong(-1).array();

  static byte[] seqBytes(long seq) {
    return ByteBuffer.allocate(8).putLong(seq).array();
  }

  static void await(BooleanSupplier condition, java.util.function.Supplier<String> what) {
    long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out waiting for " + what.get());
      }
      try {
        Thread.sleep(5);
      } catch (InterruptedException e) {
        throw new AssertionError(e);
      }
    }
  }

  static void await(BooleanSupplier condition, String what) {
    await(condition, () -> what);
  }

  /** Answers replay requests from a buffer of published batches, like vLLM's ROUTER socket. */
  static final class ReplayServer implements AutoCloseable {
    final Map<Long, byte[]> buffer = new ConcurrentSkipListMap<>();
    final AtomicBoolean stop = new AtomicBoolean();
    final Thread thread;
    volatile int port;

    /**
     * The topic frame vLLM puts before the seq of each reply (and, empty, before the end
     * marker's) since vllm-project/vllm#45177; null answers as older vLLM and SGLang do, without
     * it.
     */
    volatile byte @org.jspecify.annotations.Nullable [] topic;

    /** Set when binding failed (an address given by the test and already in use). */
    volatile @org.jspecify.annotations.Nullable RuntimeException bindFailure;

    ReplayServer(ZContext ctx) {
      this(ctx, "tcp://127.0.0.1:*");
    }

    /** A replay server bound at {@code address}; check {@link #bindFailure} after. */
    ReplayServer(ZContext ctx, String address) {
      thread = new Thread(() -> {
        ZMQ.Socket router = ctx.createSocket(SocketType.ROUTER);
        router.setLinger(0);
        router.setHandshakeIvl(1_000);
        router.setIPv6(address.contains("://["));
        try {
          router.bind(address);
        } catch (RuntimeException e) {
          router.close();
          bindFailure = e;
          return;
        }
        port = Integer.parseInt(router.getLastEndpoint().replaceAll(".*:", ""));
        router.setReceiveTimeOut(20);
        while (!stop.get()) {
          byte[] id = router.recv();
          if (id == null) {
            continue;
          }
          List<byte[]> frames = new ArrayList<>();
          while (router.hasReceiveMore()) {
            frames.add(router.recv());
          }
          long start = ByteBuffer.wrap(frames.get(frames.size() - 1)).getLong();
          byte[] t = topic;
          for (Map.Entry<Long, byte[]> e : buffer.entrySet()) {
            if (e.getKey() >= start) {
              router.sendMore(id);
              router.sendMore(new byte[0]);
              if (t != null) {
                router.sendMore(t);
              }
              router.sendMore(seqBytes(e.getKey()));
              router.send(e.getValue());
            }
          }
          router.sendMore(id);
          router.sendMore(new byte[0]);
          if (t != null) {
            router.sendMore(new byte[0]);
          }
          router.sendMore(END);
          router.send(new byte[0]);
        }
        router.close();
      }, "test-replay");
      thread.start();
      await(() -> port != 0 || bindFailure != null, "replay socket bound");
    }

    @Override
    public void close() throws InterruptedException {
      stop.set(true);
      thread.join(5_000);
    }
  }

  static void publish(ZMQ.Socket pub, String topic, long seq, byte[] payload) {
    pub.sendMore(topic.getBytes(StandardCharsets.UTF_8));
    pub.sendMore(seqBytes(seq));
    pub.send(payload);
  }

  static int port(ZMQ.Socket s) {
    return Integer.parseInt(s.getLastEndpoint().replaceAll(".*:", ""));
  }

  static void assertSameContents(KvBlockIndex actual, KvBlockIndex expected, String id,
      FakeEngine engine) {
    assertThat(actual.blockCount(id)).isEqualTo(expected.blockCount(id));
    for (int[] p : engine.prompts) {
      long[] keys = BlockKeys.chain(BlockKeys.seed("", null, null), p, engine.blockSize, 1 << 20);
      assertThat(actual.prefixWeight(id, keys, 0)).isEqualTo(expected.prefixWeight(id, keys, 0));
    }
  }

  @Test
  void perEndpointSubscriptionRecoversAGapThroughReplayAndEndsExactlyRight() throws Exception {
    try (ZContext ctx = new ZContext(1); ReplayServer replay = new ReplayServer(ctx)) {
      ZMQ.Socket pub = ctx.createSocket(SocketType.XPUB);
      pub.setLinger(0);
      pub.setHandshakeIvl(1_000);
      pub.bind("tcp://127.0.0.1:*");
      Endpoint ep = Endpoint.of("127.0.0.1", 8000, Map.of(
          KvEventSubscriber.PORT_LABEL, String.valueOf(port(pub)),
          KvEventSubscriber.REPLAY_PORT_LABEL, String.valueOf(replay.port)));
      KvBlockIndex index = KvBlockIndex.create();
      String yaml = """
          plugins:
          - type: precise-prefix-cache-scorer
            parameters:
              kvEvents: {mode: per-endpoint, replayTimeoutMs: 10000}
          schedulingProfiles:
          - name: default
            plugins:
            - pluginRef: precise-prefix-cache-scorer
          """;
      try (Router router = Router.builder().endpoint(ep).service(KvBlockIndex.class, index)
          .configYaml(yaml, "it").build()) {
        pub.setReceiveTimeOut(20_000);
        byte[] subscription = pub.recv(); // the subscriber is connected and subscribed
        assertThat(subscription).isNotNull();
        // every topic: the subscriber applies the topic filter itself, to report what it turns away
        assertThat(subscription).containsExactly(1);

        FakeEngine engine = new FakeEngine(1, 16);
        KvBlockIndex expected = KvBlockIndex.create();
        String topic = "kv@127.0.0.1:8000@qwen3-1.7b";
        int total = 60;
        long gapAt = 23;
        long malformedAt = 40;
        for (long seq = 0; seq < total; seq++) {
          byte[] payload;
          if (seq == malformedAt) {
            payload = new byte[] {(byte) 0x92, (byte) 0xcb, 1, 2}; // truncated batch
          } else {
            KvEventBatch batch = engine.nextBatch(System.currentTimeMillis() / 1000.0);
            expected.apply(ep.id(), batch);
            VllmEventEncoder enc = new VllmEventEncoder(
                VllmEventEncoder.Shape.values()[(int) (seq % 2)], seq % 4 >= 2, seq, seq % 3 == 0);
            payload = enc.encode(batch);
          }
          replay.buffer.put(seq, payload);
          if (seq != gapAt) {
            publish(pub, topic, seq, payload);
          }
        }
        KvEventMetrics m = index.metrics();
        await(() -> m.batches() == total - 1, () -> "all batches applied: " + m);
        assertThat(m.gaps()).isEqualTo(1);
        assertThat(m.replays()).isEqualTo(1);
        assertThat(m.replayedBatches()).isGreaterThanOrEqualTo(1);
        assertThat(m.replayFailures()).isZero();
        assertThat(m.resyncs()).isZero();
        assertThat(m.decodeErrors()).isEqualTo(1);
        assertThat(m.orphanBlocks()).isEqualTo(expected.metrics().orphanBlocks());
        assertSameContents(index, expected, ep.id(), engine);
        assertThat(index.blockCount(ep.id())).isGreaterThan(50);

        // the engine restarts: sequence back to 0, empty cache
        FakeEngine restarted = new FakeEngine(2, 16);
        KvBlockIndex expected2 = KvBlockIndex.create();
        replay.buffer.clear();
        for (long seq = 0; seq < 5; seq++) {
          KvEventBatch batch = restarted.nextBatch(0);
          expected2.apply(ep.id(), batch);
          publish(pub, topic, seq, new VllmEventEncoder(VllmEventEncoder.Shape.MAP, false)
              .encode(batch));
        }
        await(() -> m.batches() == total - 1 + 5, "restarted stream applied");
        assertThat(m.restarts()).isEqualTo(1);
        assertSameContents(index, expected2, ep.id(), restarted);

        // the endpoint leaves the pool: its socket closes and its blocks are forgotten
        router.removeEndpoint(ep.id());
        assertThat(index.blockCount(ep.id())).isZero();
      }
      pub.close();
    }
  }

  /**
   * vLLM's replay ROUTER answers {@code [topic, seq, payload]} after the envelope delimiter and
   * ends with {@code ["", -1, ""]} (vllm/distributed/kv_events.py, {@code _service_replay}),
   * as its live messages carry the topic; a gap is filled from such an answer.
   */
  @Test
  void aGapIsFilledFromAReplayWhoseRepliesCarryTheTopic() throws Exception {
    String topic = "kv@127.0.0.1:8000@qwen3-1.7b";
    try (ZContext ctx = new ZContext(1); ReplayServer replay = new ReplayServer(ctx)) {
      replay.topic = topic.getBytes(StandardCharsets.UTF_8);
      ZMQ.Socket pub = ctx.createSocket(SocketType.XPUB);
      pub.setLinger(0);
      pub.setHandshakeIvl(1_000);
      pub.bind("tcp://127.0.0.1:*");
      Endpoint ep = Endpoint.of("127.0.0.1", 8000, Map.of(
          KvEventSubscriber.PORT_LABEL, String.valueOf(port(pub)),
          KvEventSubscriber.REPLAY_PORT_LABEL, String.valueOf(replay.port)));
      KvBlockIndex index = KvBlockIndex.create();
      String yaml = """
          plugins:
          - type: precise-prefix-cache-scorer
            parameters:
              kvEvents: {mode: per-endpoint, replayTimeoutMs: 10000}
          schedulingProfiles:
          - name: default
            plugins:
            - pluginRef: precise-prefix-cache-scorer
          """;
      try (Router router = Router.builder().endpoint(ep).service(KvBlockIndex.class, index)
          .configYaml(yaml, "it").build()) {
        pub.setReceiveTimeOut(20_000);
        assertThat(pub.recv()).isNotNull(); // the subscriber is connected and subscribed

        FakeEngine engine = new FakeEngine(3, 16);
        KvBlockIndex expected = KvBlockIndex.create();
        int total = 12;
        for (long seq = 0; seq < total; seq++) {
          KvEventBatch batch = engine.nextBatch(System.currentTimeMillis() / 1000.0);
          expected.apply(ep.id(), batch);
          byte[] payload = new VllmEventEncoder(VllmEventEncoder.Shape.MAP, false).encode(batch);
          replay.buffer.put(seq, payload);
          if (seq != 5 && seq != 6) {
            publish(pub, topic, seq, payload);
          }
        }
        KvEventMetrics m = index.metrics();
        await(() -> m.batches() == total, () -> "all batches applied: " + m);
        assertThat(m.gaps()).isEqualTo(1);
        assertThat(m.replays()).isEqualTo(1);
        assertThat(m.replayedBatches()).isGreaterThanOrEqualTo(2);
        assertThat(m.replayFailures()).isZero();
        assertThat(m.resyncs()).isZero();
        assertThat(m.decodeErrors()).isZero();
        assertSameContents(index, expected, ep.id(), engine);
      }
      pub.close();
    }
  }

  @Test
  void centralModeResyncsOnAGapWithoutReplayAndSeparatesEndpointsByTopic() throws Exception {
    KvBlockIndex index = KvBlockIndex.create();
    try (KvEventSubscriber sub = KvEventSubscriber.central(index, "tcp://127.0.0.1:*").build();
        ZContext ctx = new ZContext(1)) {
      String bound = sub.boundEndpoint();
      assertThat(bound).isNotNull();
      // central mode applies the topics of pool members only
      sub.addEndpoint(Endpoint.of("10.0.0.1", 8000));
      sub.addEndpoint(Endpoint.of("10.0.0.2", 8000));
      ZMQ.Socket pubA = connectedPublisher(ctx, bound);
      ZMQ.Socket pubB = connectedPublisher(ctx, bound);
      FakeEngine a = new FakeEngine(3, 16);
      FakeEngine b = new FakeEngine(4, 16);
      VllmEventEncoder enc = new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);
      KvBlockIndex expectedA = KvBlockIndex.create();
      for (long seq = 0; seq < 10; seq++) {
        KvEventBatch batch = a.nextBatch(0);
        if (seq == 5) {
          continue; // lost, and there is no replay socket in central mode
        }
        if (seq == 6) {
          expectedA = KvBlockIndex.create(); // resync: only what follows the gap is known
        }
        expectedA.apply("10.0.0.1:8000", batch);
        publish(pubA, "kv@10.0.0.1:8000@m", seq, enc.encode(batch));
      }
      KvBlockIndex expectedB = KvBlockIndex.create();
      for (long seq = 0; seq < 3; seq++) {
        KvEventBatch batch = b.nextBatch(0);
        expectedB.apply("10.0.0.2:8000", batch);
        publish(pubB, "kv@10.0.0.2:8000@m", seq, enc.encode(batch));
      }
      await(() -> index.metrics().batches() == 12, () -> "batches of both engines " + index.metrics());
      assertThat(index.metrics().gaps()).isEqualTo(1);
      assertThat(index.metrics().missedBatches()).isEqualTo(1);
      assertThat(index.metrics().resyncs()).isEqualTo(1);
      assertThat(index.metrics().replays()).isZero();
      assertSameContents(index, expectedA, "10.0.0.1:8000", a);
      assertSameContents(index, expectedB, "10.0.0.2:8000", b);
      pubA.close();
      pubB.close();
    }
  }

  @Test
  void centralModeRecoversAGapThroughTheEndpointsReplaySocket() throws Exception {
    KvBlockIndex index = KvBlockIndex.create();
    try (ZContext ctx = new ZContext(1); ReplayServer replayA = new ReplayServer(ctx);
        KvEventSubscriber sub = KvEventSubscriber.central(index, "tcp://127.0.0.1:*")
            .replayPort(replayA.port).replayTimeout(Duration.ofSeconds(10)).build();
        ReplayServer replayB = new ReplayServer(ctx)) {
      String bound = sub.boundEndpoint();
      assertThat(bound).isNotNull();
      // A replays on the subscriber's default port, B names its own with the label, C has none
      Endpoint a = Endpoint.of("127.0.0.1", 8000);
      Endpoint b = Endpoint.of("127.0.0.1", 8001,
          Map.of(KvEventSubscriber.REPLAY_PORT_LABEL, String.valueOf(replayB.port)));
      sub.addEndpoint(a);
      sub.addEndpoint(b);
      ZMQ.Socket pubA = connectedPublisher(ctx, bound);
      ZMQ.Socket pubB = connectedPublisher(ctx, bound);
      VllmEventEncoder enc = new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);
      FakeEngine engineA = new FakeEngine(5, 16);
      FakeEngine engineB = new FakeEngine(6, 16);
      KvBlockIndex expected = KvBlockIndex.create();
      int total = 30;
      for (long seq = 0; seq < total; seq++) {
        for (int e = 0; e < 2; e++) {
          Endpoint ep = e == 0 ? a : b;
          KvEventBatch batch = (e == 0 ? engineA : engineB).nextBatch(0);
          expected.apply(ep.id(), batch);
          byte[] payload = enc.encode(batch);
          (e == 0 ? replayA : replayB).buffer.put(seq, payload);
          boolean lost = e == 0 ? seq == 7 || seq == 8 : seq == 20;
          if (!lost) {
            publish(e == 0 ? pubA : pubB, "kv@" + ep.id() + "@m", seq, payload);
          }
        }
      }
      KvEventMetrics m = index.metrics();
      await(() -> m.batches() == 2L * total, () -> "every batch applied, lost ones replayed: " + m);
      assertThat(m.gaps()).isEqualTo(2);
      assertThat(m.replays()).isEqualTo(2);
      assertThat(m.replayedBatches()).isGreaterThanOrEqualTo(3);
      assertThat(m.replayFailures()).isZero();
      assertThat(m.resyncs()).isZero();
      assertSameContents(index, expected, a.id(), engineA);
      assertSameContents(index, expected, b.id(), engineB);

      // leaving the pool closes the endpoint's replay socket with its stream
      sub.removeEndpoint(a);
      assertThat(index.blockCount(a.id())).isZero();
      pubA.close();
      pubB.close();
    }
  }

  @Test
  void loraAdaptersAndCacheSaltsKeepIdenticalPromptsApartFromEventsToRouting() throws Exception {
    // three engines hold the same 64 tokens: under adapter "sql", under salt "tenant-7", and
    // plain; the events cross real sockets in vLLM's shape (lora_name, extra_keys), and each
    // request must be routed to the engine holding its own (adapter, salt) variant
    KvBlockIndex index = KvBlockIndex.create();
    List<Endpoint> eps = List.of(Endpoint.of("127.0.0.1", 8100), Endpoint.of("127.0.0.1", 8101),
        Endpoint.of("127.0.0.1", 8102));
    int[] prompt = new int[64];
    for (int i = 0; i < prompt.length; i++) {
      prompt[i] = 500 + i;
    }
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            speculative: false
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """;
    try (KvEventSubscriber sub = KvEventSubscriber.central(index, "tcp://127.0.0.1:*").build();
        ZContext ctx = new ZContext(1);
        Router router = Router.builder().endpoints(eps).service(KvBlockIndex.class, index)
            .configYaml(yaml, "lora-salt").build()) {
      eps.forEach(sub::addEndpoint);
      String[][] variants = {{"sql", null}, {null, "tenant-7"}, {null, null}};
      for (int e = 0; e < 3; e++) {
        ZMQ.Socket pub = connectedPublisher(ctx, sub.boundEndpoint());
        long[] hashes = {1000L * (e + 1), 1000L * (e + 1) + 1, 1000L * (e + 1) + 2,
            1000L * (e + 1) + 3};
        KvEvent.BlockStored stored = new KvEvent.BlockStored(hashes, false, 0, prompt, 16,
            variants[e][0] == null ? -1 : 3, Medium.GPU, variants[e][0], variants[e][1]);
        byte[] payload = new VllmEventEncoder(e == 1 ? VllmEventEncoder.Shape.MAP
            : VllmEventEncoder.Shape.TAGGED_ARRAY, false).encode(KvEventBatch.of(0,
            List.of(stored)));
        publish(pub, "kv@" + eps.get(e).id() + "@m", 0, payload);
        int engine = e;
        await(() -> index.blockCount(eps.get(engine).id()) == 4, "events of engine " + e);
        pub.close();
      }
      for (int e = 0; e < 3; e++) {
        InferenceRequest req = InferenceRequest.builder().model("m").tokenIds(prompt)
            .loraAdapter(variants[e][0]).cacheSalt(variants[e][1]).build();
        assertThat(router.route(req).primary().id()).as("variant " + e)
            .isEqualTo(eps.get(e).id());
      }
      // another adapter, or the adapter with a salt, matches none of them
      for (String[] other : new String[][] {{"chat", null}, {"sql", "tenant-7"}}) {
        long[] keys = BlockKeys.chain(BlockKeys.seed("", other[0], other[1]), prompt, 16, 64);
        for (Endpoint ep : eps) {
          assertThat(index.prefixWeight(ep.id(), keys, 0)).isZero();
        }
      }
      assertThat(index.metrics().decodeErrors()).isZero();
    }
  }

  /**
   * vLLM publishes with an empty topic unless {@code --kv-events-config} sets one. Such messages
   * do not pass the default topic filter {@code kv@}; they used to be discarded inside ZeroMQ
   * (the subscription named the filter), so precise mode saw nothing and said nothing. Now they
   * are counted and reported, naming the topic and the setting to change.
   */
  @Test
  void messagesOnATopicTheFilterTurnsAwayAreCountedAndReported() throws Exception {
    java.util.logging.Logger log =
        java.util.logging.Logger.getLogger(KvEventSubscriber.class.getName());
    List<String> warnings = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.logging.Handler h = new java.util.logging.Handler() {
      @Override
      public void publish(java.util.logging.LogRecord r) {
        if (r.getLevel() == java.util.logging.Level.WARNING) {
          warnings.add(r.getMessage());
        }
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    log.addHandler(h);
    try (ZContext ctx = new ZContext(1)) {
      ZMQ.Socket pub = ctx.createSocket(SocketType.XPUB);
      pub.setLinger(0);
      pub.setHandshakeIvl(1_000);
      pub.bind("tcp://127.0.0.1:*");
      Endpoint ep = Endpoint.of("127.0.0.1", 8000,
          Map.of(KvEventSubscriber.PORT_LABEL, String.valueOf(port(pub))));
      KvBlockIndex index = KvBlockIndex.create();
      try (KvEventSubscriber sub = KvEventSubscriber.perEndpoint(index).build()) {
        sub.addEndpoint(ep);
        pub.setReceiveTimeOut(20_000);
        assertThat(pub.recv()).as("subscription").isNotNull();
        VllmEventEncoder enc = new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);
        FakeEngine engine = new FakeEngine(5, 16);
        for (long seq = 0; seq < 3; seq++) {
          publish(pub, "", seq, enc.encode(engine.nextBatch(0))); // vLLM's default topic
        }
        KvEventMetrics m = index.metrics();
        await(() -> m.foreignTopicMessages() == 3, () -> "foreign-topic messages counted: " + m);
        assertThat(m.batches()).isZero();
        assertThat(index.blockCount(ep.id())).isZero();
        assertThat(warnings).anySatisfy(w -> assertThat(w)
            .contains("topic filter 'kv@'").contains("from 127.0.0.1:8000")
            .contains("topic ''").contains("--kv-events-config"));

        // the same engine, once its topic is set, is applied as before
        FakeEngine fixed = new FakeEngine(6, 16);
        KvBlockIndex expected = KvBlockIndex.create();
        for (long seq = 0; seq < 2; seq++) {
          KvEventBatch batch = fixed.nextBatch(0);
          expected.apply(ep.id(), batch);
          publish(pub, "kv@127.0.0.1:8000@m", seq, enc.encode(batch));
        }
        await(() -> m.batches() == 2, () -> "batches on the kv@ topic applied: " + m);
        assertThat(m.foreignTopicMessages()).isEqualTo(3);
        assertSameContents(index, expected, ep.id(), fixed);
      }
      pub.close();
    } finally {
      log.removeHandler(h);
    }
  }

  /**
   * Central mode binds one address and connects to no publisher, so an endpoint's
   * {@code epp4j.io/kv-events-port} label cannot apply there: instead of being accepted unnoticed
   * it is logged, once per endpoint, as a warning naming the endpoint and the label. The replay
   * label, which central mode does use, is not.
   */
  @Test
  void centralModeWarnsOncePerEndpointThatItsPortLabelHasNoEffect() throws Exception {
    java.util.logging.Logger log =
        java.util.logging.Logger.getLogger(KvEventSubscriber.class.getName());
    List<String> warnings = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.logging.Handler h = new java.util.logging.Handler() {
      @Override
      public void publish(java.util.logging.LogRecord r) {
        if (r.getLevel() == java.util.logging.Level.WARNING) {
          warnings.add(r.getMessage());
        }
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    log.addHandler(h);
    KvBlockIndex index = KvBlockIndex.create();
    try (KvEventSubscriber sub = KvEventSubscriber.central(index, "tcp://127.0.0.1:*").build()) {
      Endpoint replayOnly = Endpoint.of("127.0.0.1", 8001,
          Map.of(KvEventSubscriber.REPLAY_PORT_LABEL, "6001"));
      Endpoint labelled = Endpoint.of("127.0.0.1", 8002,
          Map.of(KvEventSubscriber.PORT_LABEL, "6000"));
      Endpoint another = Endpoint.of("127.0.0.1", 8003,
          Map.of(KvEventSubscriber.PORT_LABEL, "6003"));
      sub.addEndpoint(replayOnly);
      sub.addEndpoint(labelled);
      await(() -> warnings.stream().anyMatch(w -> w.contains("127.0.0.1:8002")),
          () -> "a warning naming 127.0.0.1:8002, got " + warnings);
      // rejoining does not repeat it; the pool changes are handled in order, so once the next
      // endpoint's warning is there the rejoin has been handled
      sub.removeEndpoint(labelled);
      sub.addEndpoint(labelled);
      sub.addEndpoint(another);
      await(() -> warnings.stream().anyMatch(w -> w.contains("127.0.0.1:8003")),
          () -> "a warning naming 127.0.0.1:8003, got " + warnings);
      assertThat(warnings.stream().filter(w -> w.contains("127.0.0.1:8002")))
          .singleElement().asString().contains(KvEventSubscriber.PORT_LABEL)
          .contains("no effect in central mode");
      assertThat(warnings).noneMatch(w -> w.contains("127.0.0.1:8001"));
    } finally {
      log.removeHandler(h);
    }
  }

  /**
   * The endpoints warned about are remembered so that one rejoining is not warned about again;
   * with pods that come and go (new addresses at every rollout) that memory must not grow with
   * every endpoint ever seen.
   */
  @Test
  void centralModeRemembersABoundedNumberOfWarnedEndpoints() throws Exception {
    java.util.logging.Logger log =
        java.util.logging.Logger.getLogger(KvEventSubscriber.class.getName());
    List<String> warnings = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.logging.Handler h = new java.util.logging.Handler() {
      @Override
      public void publish(java.util.logging.LogRecord r) {
        warnings.add(r.getMessage());
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    boolean parents = log.getUseParentHandlers();
    log.setUseParentHandlers(false); // thousands of warnings: kept here, not printed
    log.addHandler(h);
    KvBlockIndex index = KvBlockIndex.create();
    try (KvEventSubscriber sub = KvEventSubscriber.central(index, "tcp://127.0.0.1:*").build()) {
      int churned = StreamTable.MAX_PORT_LABEL_WARNINGS_KEPT + 1000;
      List<Endpoint> gone = new java.util.ArrayList<>();
      for (int i = 0; i < churned; i++) {
        gone.add(Endpoint.of("10.7." + (i >> 8) + "." + (i & 255), 8000,
            Map.of(KvEventSubscriber.PORT_LABEL, "6000")));
      }
      gone.forEach(sub::addEndpoint);
      String last = gone.get(churned - 1).id();
      await(() -> warnings.stream().anyMatch(w -> w.contains(last)),
          () -> "the warning about the last endpoint");
      assertThat(warnings).filteredOn(w -> w.contains("no effect in central mode"))
          .hasSize(churned);
      // all of them leave (a rollout); the pool changes are handled in order, so once a newcomer's
      // warning is there the removals have been handled
      gone.forEach(sub::removeEndpoint);
      Endpoint next = Endpoint.of("10.8.0.1", 8000, Map.of(KvEventSubscriber.PORT_LABEL, "6000"));
      sub.addEndpoint(next);
      await(() -> warnings.stream().anyMatch(w -> w.contains(next.id())),
          () -> "the warning about the newcomer");
      assertThat(sub.portLabelWarningsKept())
          .isLessThanOrEqualTo(StreamTable.MAX_PORT_LABEL_WARNINGS_KEPT);
    } finally {
      log.removeHandler(h);
      log.setUseParentHandlers(parents);
    }
  }

  /** An XPUB connected to {@code address}, returned once the subscription has arrived. */
  static ZMQ.Socket connectedPublisher(ZContext ctx, String address) {
    ZMQ.Socket pub = ctx.createSocket(SocketType.XPUB);
    pub.setLinger(0);
    pub.setHandshakeIvl(1_000);
    pub.setReconnectIVL(100);
    pub.connect(address);
    pub.setReceiveTimeOut(20_000);
    assertThat(pub.recv()).as("subscription").isNotNull();
    return pub;
  }
}
