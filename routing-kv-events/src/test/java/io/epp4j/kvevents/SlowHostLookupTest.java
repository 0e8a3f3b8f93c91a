package io.epp4j.kvevents;

import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.await;
import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.port;
import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.publish;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * An endpoint whose host name takes long to resolve (a slow DNS, or one that never answers for
 * it) holds up its own events only: the lookup runs beside the subscriber's thread, which goes
 * on reading the other endpoints' events.
 */
@Timeout(120)
class SlowHostLookupTest {
  private static final VllmEventEncoder ENCODER =
      new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);

  private static ZMQ.Socket publisher(ZContext ctx) {
    ZMQ.Socket pub = ctx.createSocket(SocketType.XPUB);
    pub.setLinger(0);
    pub.bind("tcp://127.0.0.1:*");
    pub.setReceiveTimeOut(20_000);
    return pub;
  }

  private static byte[] batch(FakeEngine engine, long seq) {
    return ENCODER.encode(engine.nextBatch(seq));
  }

  @Test
  void aNameWhoseLookupHangsHoldsUpNoOtherEndpointsEvents() throws Exception {
    HeldLookup held = new HeldLookup();
    AtomicInteger unresolvableLookups = new AtomicInteger();
    // "localhost" stands for a name a slow DNS answers only when the test says so; a name
    // that never resolves fails at once, again and again
    HostLookups.Resolver dns = host -> {
      if (host.equals("localhost")) {
        held.hold(host);
      } else if (host.equals("nonexistent.invalid")) {
        unresolvableLookups.incrementAndGet();
        throw new UnknownHostException(host);
      }
      return InetAddress.getAllByName(host);
    };
    KvBlockIndex index = KvBlockIndex.create();
    KvEventMetrics m = index.metrics();
    try (ZContext ctx = new ZContext(1);
        KvEventSubscriber sub = KvEventSubscriber.perEndpoint(index).resolver(dns).build()) {
      ZMQ.Socket slowPub = publisher(ctx);
      ZMQ.Socket pub = publisher(ctx);
      Endpoint slow = Endpoint.of("localhost", 8001,
          Map.of(KvEventSubscriber.PORT_LABEL, String.valueOf(port(slowPub))));
      Endpoint unresolvable = Endpoint.of("nonexistent.invalid", 8002, Map.of());
      Endpoint other = Endpoint.of("127.0.0.1", 8003,
          Map.of(KvEventSubscriber.PORT_LABEL, String.valueOf(port(pub))));
      sub.addEndpoint(slow);
      assertThat(held.started.await(20, TimeUnit.SECONDS)).as("slow lookup started").isTrue();
      sub.addEndpoint(unresolvable);
      sub.addEndpoint(other);
      // followed and applied while the slow name's lookup still hangs
      assertThat(pub.recv()).as("the other endpoint's subscription").isNotNull();
      FakeEngine engine = new FakeEngine(1, 16);
      for (long seq = 0; seq < 3; seq++) {
        publish(pub, "kv@" + other.id() + "@m", seq, batch(engine, seq));
      }
      await(() -> index.blockCount(other.id()) > 0 && m.batches() == 3,
          () -> "the other endpoint's batches: " + m);
      await(() -> unresolvableLookups.get() >= 2, "the unresolvable name looked up again");
      assertThat(held.waiting()).as("the slow lookup still hangs").isTrue();
      assertThat(sub.connectedEndpoints()).isEqualTo(1);
      held.answer();
      assertThat(slowPub.recv()).as("the slow name's subscription once it resolved").isNotNull();
      FakeEngine slowEngine = new FakeEngine(2, 16);
      publish(slowPub, "kv@" + slow.id() + "@m", 0, batch(slowEngine, 0));
      await(() -> index.blockCount(slow.id()) > 0, () -> "the slow name's batch: " + m);
      assertThat(sub.connectedEndpoints()).isEqualTo(2);
      slowPub.close();
      pub.close();
    }
  }
}
