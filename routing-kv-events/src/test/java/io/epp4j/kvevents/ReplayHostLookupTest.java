package io.epp4j.kvevents;

import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.await;
import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.connectedPublisher;
import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.port;
import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.publish;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.kvevents.KvEventSubscriberIntegrationTest.ReplayServer;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * Host names of endpoints are looked up beside the subscriber's thread, for replay sockets too,
 * and the sockets connect to the address the lookup gave, so that ZeroMQ looks nothing up itself
 * (on the subscriber's thread, or at a reconnect on the I/O thread every socket shares). The
 * names here ({@code .test}) are known to the test's resolver only: a socket that connected to
 * the name would be refused by ZeroMQ's own lookup.
 */
@Timeout(120)
class ReplayHostLookupTest {
  private static final VllmEventEncoder ENCODER =
      new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);

  private static InetAddress[] loopback(String host) throws UnknownHostException {
    return new InetAddress[] {InetAddress.getByAddress(host, new byte[] {127, 0, 0, 1})};
  }

  /**
   * Central mode: the replay socket of an endpoint named by a host name whose lookup hangs holds
   * up no other endpoint's events (before, it was opened, and its name looked up, on the
   * subscriber's thread when the endpoint's first message came), and the endpoint's gap is
   * replayed once the answer has come.
   */
  @Test
  void centralModeLooksAReplayHostUpBesideTheSubscribersThread() throws Exception {
    HeldLookup held = new HeldLookup();
    HostLookups.Resolver dns = host -> {
      if (host.equals("engine-a.test")) {
        held.hold(host);
        return loopback(host);
      }
      return InetAddress.getAllByName(host);
    };
    KvBlockIndex index = KvBlockIndex.create();
    KvEventMetrics m = index.metrics();
    try (ZContext ctx = new ZContext(1); ReplayServer replay = new ReplayServer(ctx);
        KvEventSubscriber sub = KvEventSubscriber.central(index, "tcp://127.0.0.1:*")
            .replayPort(replay.port).replayTimeout(Duration.ofSeconds(20)).resolver(dns)
            .build()) {
      Endpoint a = Endpoint.of("engine-a.test", 8000);
      Endpoint b = Endpoint.of("127.0.0.1", 8001);
      sub.addEndpoint(a);
      sub.addEndpoint(b);
      ZMQ.Socket pubA = connectedPublisher(ctx, sub.boundEndpoint());
      ZMQ.Socket pubB = connectedPublisher(ctx, sub.boundEndpoint());
      FakeEngine engineA = new FakeEngine(1, 16);
      FakeEngine engineB = new FakeEngine(2, 16);
      KvBlockIndex expected = KvBlockIndex.create();
      byte[][] batchesA = new byte[4][];
      for (int seq = 0; seq < batchesA.length; seq++) {
        KvEventBatch batch = engineA.nextBatch(0);
        expected.apply(a.id(), batch);
        batchesA[seq] = ENCODER.encode(batch);
        replay.buffer.put((long) seq, batchesA[seq]);
      }
      // A's first message opens its stream, and with it the replay socket's lookup
      publish(pubA, "kv@" + a.id() + "@m", 0, batchesA[0]);
      assertThat(held.started.await(20, TimeUnit.SECONDS)).as("the replay host looked up").isTrue();
      for (long seq = 0; seq < 3; seq++) {
        publish(pubB, "kv@" + b.id() + "@m", seq, ENCODER.encode(engineB.nextBatch(0)));
      }
      await(() -> m.batches() == 4 && index.blockCount(b.id()) > 0,
          () -> "A's first batch and B's three while A's replay host's lookup hangs: " + m);
      assertThat(held.waiting()).as("the lookup still hangs").isTrue();
      held.answer();
      // A's batches 1 and 2 are lost: replayed over the address the lookup gave
      publish(pubA, "kv@" + a.id() + "@m", 3, batchesA[3]);
      await(() -> m.batches() == 7, () -> "A's gap replayed: " + m);
      assertThat(m.gaps()).isEqualTo(1);
      assertThat(m.replayedBatches()).isGreaterThanOrEqualTo(2);
      assertThat(m.replayFailures()).isZero();
      assertThat(m.resyncs()).isZero();
      KvEventSubscriberIntegrationTest.assertSameContents(index, expected, a.id(), engineA);
      pubA.close();
      pubB.close();
    }
  }

  /**
   * Per-endpoint mode: the SUB and replay sockets of an endpoint named by a host name connect to
   * the address its lookup gave, not to the name, which ZeroMQ would look up again on its own
   * (here it could not: the JVM does not know the name, and the endpoint was never followed).
   */
  @Test
  void perEndpointSocketsConnectToTheAddressTheLookupGave() throws Exception {
    HostLookups.Resolver dns = host -> host.equals("engine-b.test")
        ? loopback(host) : InetAddress.getAllByName(host);
    KvBlockIndex index = KvBlockIndex.create();
    KvEventMetrics m = index.metrics();
    try (ZContext ctx = new ZContext(1); ReplayServer replay = new ReplayServer(ctx);
        KvEventSubscriber sub = KvEventSubscriber.perEndpoint(index).resolver(dns)
            .replayTimeout(Duration.ofSeconds(20)).build()) {
      ZMQ.Socket pub = ctx.createSocket(SocketType.XPUB);
      pub.setLinger(0);
      pub.bind("tcp://127.0.0.1:*");
      pub.setReceiveTimeOut(20_000);
      Endpoint e = Endpoint.of("engine-b.test", 8000, Map.of(
          KvEventSubscriber.PORT_LABEL, String.valueOf(port(pub)),
          KvEventSubscriber.REPLAY_PORT_LABEL, String.valueOf(replay.port)));
      sub.addEndpoint(e);
      assertThat(pub.recv()).as("the subscription, over the looked-up address").isNotNull();
      FakeEngine engine = new FakeEngine(3, 16);
      KvBlockIndex expected = KvBlockIndex.create();
      byte[][] batches = new byte[4][];
      for (int seq = 0; seq < batches.length; seq++) {
        KvEventBatch batch = engine.nextBatch(0);
        expected.apply(e.id(), batch);
        batches[seq] = ENCODER.encode(batch);
        replay.buffer.put((long) seq, batches[seq]);
      }
      publish(pub, "kv@" + e.id() + "@m", 0, batches[0]);
      publish(pub, "kv@" + e.id() + "@m", 3, batches[3]);
      await(() -> m.batches() == 4, () -> "the gap replayed over the looked-up address: " + m);
      assertThat(m.replayFailures()).isZero();
      assertThat(m.resyncs()).isZero();
      assertThat(sub.connectedEndpoints()).isEqualTo(1);
      KvEventSubscriberIntegrationTest.assertSameContents(index, expected, e.id(), engine);
      pub.close();
    }
  }
}
