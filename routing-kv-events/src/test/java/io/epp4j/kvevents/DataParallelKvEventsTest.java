package io.epp4j.kvevents;

import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.assertSameContents;
import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.await;
import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.port;
import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.publish;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * vLLM with data parallelism: rank r of an engine publishes its KV events on the configured port
 * + r and answers replays on the replay port + r (vLLM's {@code offset_endpoint_port}); each rank
 * is its own endpoint ({@code host:(first port + r)}), as {@code data-parallel-profile-handler}
 * treats it. Real ZeroMQ sockets on loopback.
 */
@Timeout(90)
class DataParallelKvEventsTest {
  private static final VllmEventEncoder ENCODER =
      new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);

  /** {@code n} XPUB sockets bound on consecutive loopback ports, as vLLM's ranks bind them. */
  private static List<ZMQ.Socket> consecutivePublishers(ZContext ctx, int n) {
    for (int attempt = 0; attempt < 50; attempt++) {
      List<ZMQ.Socket> socks = new ArrayList<>();
      ZMQ.Socket first = xpub(ctx);
      first.bind("tcp://127.0.0.1:*");
      socks.add(first);
      int base = port(first);
      for (int r = 1; r < n && base + r <= 65535; r++) {
        ZMQ.Socket s = xpub(ctx);
        try {
          s.bind("tcp://127.0.0.1:" + (base + r));
          socks.add(s);
        } catch (RuntimeException inUse) {
          s.close();
          break;
        }
      }
      if (socks.size() == n) {
        return socks;
      }
      socks.forEach(ZMQ.Socket::close);
    }
    throw new AssertionError("no " + n + " consecutive free ports on loopback");
  }

  private static ZMQ.Socket xpub(ZContext ctx) {
    ZMQ.Socket pub = ctx.createSocket(SocketType.XPUB);
    pub.setLinger(0);
    pub.setHandshakeIvl(1_000);
    return pub;
  }

  /** {@code n} replay servers on consecutive loopback ports. */
  private static List<KvEventSubscriberIntegrationTest.ReplayServer> consecutiveReplayServers(
      ZContext ctx, int n) throws InterruptedException {
    for (int attempt = 0; attempt < 50; attempt++) {
      List<KvEventSubscriberIntegrationTest.ReplayServer> servers = new ArrayList<>();
      servers.add(new KvEventSubscriberIntegrationTest.ReplayServer(ctx));
      int base = servers.get(0).port;
      for (int r = 1; r < n && base + r <= 65535; r++) {
        var s = new KvEventSubscriberIntegrationTest.ReplayServer(ctx,
            "tcp://127.0.0.1:" + (base + r));
        if (s.bindFailure != null) {
          s.close();
          break;
        }
        servers.add(s);
      }
      if (servers.size() == n) {
        return servers;
      }
      for (var s : servers) {
        s.close();
      }
    }
    throw new AssertionError("no " + n + " consecutive free ports on loopback");
  }

  private static String yaml(int port, int replayPort, String extra) {
    return """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            speculative: false
            kvEvents: {mode: per-endpoint, port: %d, replayPort: %d%s}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """.formatted(port, replayPort, extra);
  }

  @Test
  void eachRankIsFollowedOnItsOwnPortsAndIndexedUnderItsOwnEndpoint() throws Exception {
    // two ranks of one engine: rank r serves on 8000 + r, publishes on K + r and replays on
    // R + r. Before, both endpoints subscribed to K (rank 0's publisher): rank 0's blocks were
    // indexed under rank 1 as well, and rank 1's were heard by nobody
    KvBlockIndex index = KvBlockIndex.create();
    List<Endpoint> ranks = List.of(Endpoint.of("127.0.0.1", 8000), Endpoint.of("127.0.0.1", 8001));
    try (ZContext ctx = new ZContext(1)) {
      List<ZMQ.Socket> pubs = consecutivePublishers(ctx, 2);
      List<KvEventSubscriberIntegrationTest.ReplayServer> replays =
          consecutiveReplayServers(ctx, 2);
      try (Router router = Router.builder().endpoints(ranks).service(KvBlockIndex.class, index)
          .configYaml(yaml(port(pubs.get(0)), replays.get(0).port,
              ", dataParallelSize: 2, dataParallelFirstPort: 8000"), "dp").build()) {
        for (ZMQ.Socket pub : pubs) {
          pub.setReceiveTimeOut(20_000);
          assertThat(pub.recv()).as("subscription of each rank's publisher").isNotNull();
        }
        FakeEngine[] engines = {new FakeEngine(31, 16), new FakeEngine(32, 16)};
        KvBlockIndex[] expected = {KvBlockIndex.create(), KvBlockIndex.create()};
        for (int r = 0; r < 2; r++) {
          for (long seq = 0; seq < 6; seq++) {
            KvEventBatch b = engines[r].nextBatch(1.0);
            expected[r].apply(ranks.get(r).id(), b);
            byte[] payload = ENCODER.encode(b);
            replays.get(r).buffer.put(seq, payload);
            if (!(r == 1 && seq == 3)) { // rank 1's seq 3 is lost: its own replay socket has it
              publish(pubs.get(r), "kv@" + ranks.get(r).id() + "@m", seq, payload);
            }
          }
        }
        KvEventMetrics m = index.metrics();
        await(() -> m.batches() == 12, () -> "both ranks' batches: " + m);
        assertThat(m.gaps()).isEqualTo(1);
        assertThat(m.replayFailures()).isZero();
        assertThat(m.resyncs()).isZero();
        for (int r = 0; r < 2; r++) {
          assertSameContents(index, expected[r], ranks.get(r).id(), engines[r]);
        }
        // rank 0 holds none of rank 1's prompts, and a prompt of rank 1 is routed there
        int[] prompt = engines[1].prompts.get(engines[1].prompts.size() - 1);
        long[] keys = BlockKeys.chain(BlockKeys.seed("", null, null), prompt, 16, 1 << 20);
        assertThat(index.prefixWeight(ranks.get(0).id(), keys, 0)).isZero();
        assertThat(router.route(InferenceRequest.builder().model("m").tokenIds(prompt).build())
            .primary().id()).isEqualTo(ranks.get(1).id());
      } finally {
        for (var s : replays) {
          s.close();
        }
        pubs.forEach(ZMQ.Socket::close);
      }
    }
  }

  @Test
  void aRankOnAnotherNodeIsFollowedAtTheRankItsLabelNames() throws Exception {
    // vLLM's multi-node external load balancing: every node serves its ranks on the same ports,
    // while rank r publishes on K + r and replays on R + r. Node A (127.0.0.1) holds ranks 0
    // and 1 on 8000 and 8001; node B ("localhost", the same loopback under another name) holds
    // rank 2 on 8000. Before, node B's endpoint was taken for rank 0 by its port: it followed
    // K on node B, where no rank publishes, and rank 2's blocks were heard by nobody
    KvBlockIndex index = KvBlockIndex.create();
    Endpoint nodeBRank2 = Endpoint.of("localhost", 8000,
        java.util.Map.of(KvEventSubscriber.RANK_LABEL, "2"));
    List<Endpoint> ranks = List.of(Endpoint.of("127.0.0.1", 8000), Endpoint.of("127.0.0.1", 8001),
        nodeBRank2);
    try (KvEventSubscriberReliabilityTest.LogCapture log =
            new KvEventSubscriberReliabilityTest.LogCapture();
        ZContext ctx = new ZContext(1)) {
      List<ZMQ.Socket> pubs = consecutivePublishers(ctx, 3);
      List<KvEventSubscriberIntegrationTest.ReplayServer> replays =
          consecutiveReplayServers(ctx, 3);
      try (KvEventSubscriber sub = KvEventSubscriber.perEndpoint(index).port(port(pubs.get(0)))
          .replayPort(replays.get(0).port).dataParallel(4, 8000).build()) {
        ranks.forEach(sub::addEndpoint);
        for (ZMQ.Socket pub : pubs) {
          pub.setReceiveTimeOut(20_000);
          assertThat(pub.recv()).as("subscription of each rank's publisher").isNotNull();
        }
        for (int r = 0; r < 3; r++) {
          for (long seq = 0; seq < 3; seq++) {
            byte[] payload = ENCODER.encode(rootBlock(100L * r + seq, 1000 * r + 20 * (int) seq,
                r));
            replays.get(r).buffer.put(seq, payload);
            if (!(r == 2 && seq == 1)) { // lost: rank 2's own replay socket has it
              publish(pubs.get(r), "kv@x@m", seq, payload);
            }
          }
        }
        KvEventMetrics m = index.metrics();
        await(() -> m.batches() == 9, () -> "every rank's batches: " + m);
        assertThat(m.wrongRankBatches()).isZero();
        assertThat(m.replayFailures()).isZero();
        for (int seq = 0; seq < 3; seq++) {
          assertThat(holds(index, nodeBRank2.id(), 2000 + 20 * seq)).as("rank 2's " + seq)
              .isTrue();
          assertThat(holds(index, ranks.get(0).id(), 2000 + 20 * seq)).isFalse();
        }
        assertThat(index.blockCount(nodeBRank2.id())).isEqualTo(3);

        // the label changes to rank 1: the endpoint follows rank 1's publisher from then on
        // (sent until it arrives: the new connection may not be up yet)
        sub.changeEndpoint(nodeBRank2, Endpoint.of("localhost", 8000,
            java.util.Map.of(KvEventSubscriber.RANK_LABEL, "1")));
        byte[] later = ENCODER.encode(rootBlock(999, 5000, 1));
        await(() -> {
          if (!holds(index, nodeBRank2.id(), 5000)) {
            publish(pubs.get(1), "kv@x@m", 3, later);
            return false;
          }
          return true;
        }, () -> "rank 1's batch on the relabelled endpoint: " + m);

        // a label that is not a rank is reported, naming the endpoint, and the port decides
        Endpoint bad = Endpoint.of("localhost", 8001,
            java.util.Map.of(KvEventSubscriber.RANK_LABEL, "two"));
        sub.addEndpoint(bad);
        await(() -> log.records.stream().anyMatch(r -> r.getMessage().contains(bad.id())
            && r.getMessage().contains(KvEventSubscriber.RANK_LABEL)
            && r.getMessage().contains("'two'")), "the bad label reported");
      } finally {
        for (var s : replays) {
          s.close();
        }
        pubs.forEach(ZMQ.Socket::close);
      }
    }
  }

  /** A batch storing one root block of 16 tokens starting at {@code first}, from {@code rank}. */
  private static KvEventBatch rootBlock(long hash, int first, int rank) {
    int[] tokens = new int[16];
    for (int i = 0; i < 16; i++) {
      tokens[i] = first + i;
    }
    return new KvEventBatch(1.0, List.of(KvEvent.BlockStored.of(new long[] {hash}, null, tokens,
        16)), rank);
  }

  /** Whether {@code id}'s index entries hold the block {@link #rootBlock} made from {@code first}. */
  private static boolean holds(KvBlockIndex index, String id, int first) {
    int[] tokens = new int[16];
    for (int i = 0; i < 16; i++) {
      tokens[i] = first + i;
    }
    return index.prefixWeight(id, BlockKeys.chain(BlockKeys.seed("", null, null), tokens, 16, 1),
        0) > 0;
  }

  @Test
  void aBatchOfAnotherRankThanTheEndpointsIsDroppedCountedAndReportedOnce() throws Exception {
    // misconfigured ports: the endpoint of rank 1 follows a publisher whose batches say rank 0.
    // Before, they were indexed under rank 1's endpoint, and the router sent rank 0's prompts
    // to rank 1, which does not hold them. A batch without a rank (older vLLM) is applied, and
    // an endpoint outside the ranks' ports is not checked (it is followed as without data
    // parallelism)
    KvBlockIndex index = KvBlockIndex.create();
    try (KvEventSubscriberReliabilityTest.LogCapture log =
            new KvEventSubscriberReliabilityTest.LogCapture();
        ZContext ctx = new ZContext(1)) {
      ZMQ.Socket pub = xpub(ctx);
      pub.setXpubVerbose(true); // one subscription message per subscriber
      pub.bind("tcp://127.0.0.1:*");
      int q = port(pub);
      Endpoint rank1 = Endpoint.of("127.0.0.1", 8001); // follows port (q - 1) + 1 = q
      Endpoint outside = Endpoint.of("127.0.0.1", 9000,
          java.util.Map.of(KvEventSubscriber.PORT_LABEL, String.valueOf(q)));
      try (KvEventSubscriber sub = KvEventSubscriber.perEndpoint(index).port(q - 1)
          .dataParallel(2, 8000).build()) {
        sub.addEndpoint(rank1);
        sub.addEndpoint(outside);
        pub.setReceiveTimeOut(20_000);
        for (int i = 0; i < 2; i++) {
          assertThat(pub.recv()).as("subscription " + i).isNotNull();
        }
        publish(pub, "kv@x@m", 0, ENCODER.encode(rootBlock(1, 100, 0))); // wrong rank
        publish(pub, "kv@x@m", 1, ENCODER.encode(rootBlock(2, 200, 1))); // its own rank
        publish(pub, "kv@x@m", 2, ENCODER.encode(rootBlock(3, 300, -1))); // no rank
        publish(pub, "kv@x@m", 3, ENCODER.encode(rootBlock(4, 400, 0))); // wrong rank
        publish(pub, "kv@x@m", 4, ENCODER.encode(rootBlock(5, 500, 5))); // wrong rank
        KvEventMetrics m = index.metrics();
        await(() -> m.batches() == 2 + 5 && m.wrongRankBatches() == 3,
            () -> "rank 1's two batches and all five of the unchecked endpoint: " + m);
        String id = rank1.id();
        assertThat(holds(index, id, 200)).isTrue();
        assertThat(holds(index, id, 300)).isTrue();
        assertThat(holds(index, id, 100)).isFalse();
        assertThat(holds(index, id, 400)).isFalse();
        assertThat(holds(index, id, 500)).isFalse();
        assertThat(index.blockCount(id)).isEqualTo(2);
        assertThat(index.blockCount(outside.id())).isEqualTo(5);
        assertThat(m.decodeErrors()).isZero();
        assertThat(m.gaps()).isZero();
        assertThat(m.resyncs()).isZero();
        List<String> reports = log.records.stream().map(r -> r.getMessage())
            .filter(s -> s.contains("data_parallel_rank")).toList();
        assertThat(reports).as("reported once per interval").hasSize(1);
        assertThat(reports.get(0)).contains(id).contains("rank 0").contains("rank 1");
      } finally {
        pub.close();
      }
    }
  }

  /**
   * {@link #rootBlock}'s batch from rank 1, its rank then overwritten with {@code rank}, a
   * negative fixint (-32 to -1): the encoder, like vLLM, writes no negative rank.
   */
  private static byte[] withNegativeRank(long hash, int first, int rank) {
    byte[] payload = ENCODER.encode(rootBlock(hash, first, 1));
    assertThat(payload[payload.length - 1]).as("rank 1 is the last byte").isEqualTo((byte) 1);
    assertThat(rank).isBetween(-32, -1);
    payload[payload.length - 1] = (byte) rank;
    return payload;
  }

  @Test
  void aBatchWithANegativeRankIsDroppedAsMalformedNotAppliedAsOneWithoutARank()
      throws Exception {
    // vLLM sends a rank (0 or more) or nil. Before, a negative rank was read as no rank and the
    // batch was applied to the endpoint of rank 1 as if it were its own
    KvBlockIndex index = KvBlockIndex.create();
    try (KvEventSubscriberReliabilityTest.LogCapture log =
            new KvEventSubscriberReliabilityTest.LogCapture();
        ZContext ctx = new ZContext(1)) {
      ZMQ.Socket pub = xpub(ctx);
      pub.bind("tcp://127.0.0.1:*");
      int q = port(pub);
      Endpoint rank1 = Endpoint.of("127.0.0.1", 8001); // follows port (q - 1) + 1 = q
      try (KvEventSubscriber sub = KvEventSubscriber.perEndpoint(index).port(q - 1)
          .dataParallel(2, 8000).build()) {
        sub.addEndpoint(rank1);
        pub.setReceiveTimeOut(20_000);
        assertThat(pub.recv()).as("subscription").isNotNull();
        publish(pub, "kv@x@m", 0, withNegativeRank(1, 100, -2));
        publish(pub, "kv@x@m", 1, withNegativeRank(2, 200, -1));
        publish(pub, "kv@x@m", 2, ENCODER.encode(rootBlock(3, 300, 1))); // its own rank
        KvEventMetrics m = index.metrics();
        await(() -> m.batches() == 1 && m.decodeErrors() == 2,
            () -> "one batch applied and two dropped as malformed: " + m);
        String id = rank1.id();
        assertThat(holds(index, id, 100)).isFalse();
        assertThat(holds(index, id, 200)).isFalse();
        assertThat(holds(index, id, 300)).isTrue();
        assertThat(index.blockCount(id)).isEqualTo(1);
        assertThat(m.wrongRankBatches()).isZero();
        assertThat(m.gaps()).isZero();
        List<String> reports = log.records.stream().map(r -> r.getMessage())
            .filter(s -> s.contains("data_parallel_rank must be 0 or more")).toList();
        assertThat(reports).as("reported once per interval").hasSize(1);
        assertThat(reports.get(0)).contains(id).contains("got -2");
      } finally {
        pub.close();
      }
    }
  }

  @Test
  void dataParallelParametersAreValidatedNamingTheField() {
    List<Endpoint> pool = List.of(Endpoint.of("127.0.0.1", 8000));
    assertThatThrownBy(() -> Router.builder().endpoints(pool)
        .configYaml(yaml(5557, 0, ", dataParallelSize: 2"), "dp").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("'dataParallelFirstPort' is required when dataParallelSize");
    assertThatThrownBy(() -> Router.builder().endpoints(pool)
        .configYaml(yaml(5557, 0, ", dataParallelSize: 0, dataParallelFirstPort: 8000"), "dp")
        .build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("'dataParallelSize' must be in [1, 1024], got 0");
    assertThatThrownBy(() -> Router.builder().endpoints(pool)
        .configYaml(yaml(65535, 0, ", dataParallelSize: 2, dataParallelFirstPort: 8000"), "dp")
        .build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("'dataParallelSize' puts rank 1's port (port 65535 + rank) past");
    assertThatThrownBy(() -> Router.builder().endpoints(pool)
        .configYaml(yaml(5557, 0, ", dataParallelFirstPort: 8000"), "dp").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("'dataParallelFirstPort' has no effect without a dataParallelSize");
    String central = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            kvEvents: {mode: central, bindAddress: "tcp://127.0.0.1:*", dataParallelSize: 2,
                       dataParallelFirstPort: 8000}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """;
    assertThatThrownBy(() -> Router.builder().endpoints(pool).configYaml(central, "dp").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("'dataParallelSize' needs mode per-endpoint");
  }

  @Test
  void theBuilderRefusesRanksPastTheLastPortAndCentralMode() {
    KvBlockIndex index = KvBlockIndex.create();
    assertThatThrownBy(() -> KvEventSubscriber.perEndpoint(index).dataParallel(2, 65535))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("dataParallelFirstPort");
    assertThatThrownBy(() -> KvEventSubscriber.perEndpoint(index).dataParallel(0, 8000))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("dataParallelSize");
    assertThatThrownBy(() -> KvEventSubscriber.perEndpoint(index).replayPort(65535)
        .dataParallel(2, 8000).build())
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("replayPort");
    assertThatThrownBy(() -> KvEventSubscriber.central(index, "tcp://127.0.0.1:*")
        .dataParallel(2, 8000).build())
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("per-endpoint");
  }
}
