package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import java.io.File;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * An endpoint named by a host name that resolves to IPv6 addresses only, as in an IPv6-only
 * cluster. The name is made up and resolved through a hosts file of the test's own
 * ({@code jdk.net.hosts.file}, read once per JVM), so the scenario runs in a JVM of its own.
 */
@Timeout(90)
class Ipv6OnlyHostTest {
  private static final String V6_ONLY = "engine-v6.epp4j.test";
  private static final String V4_ONLY = "engine-v4.epp4j.test";
  private static final String DUAL = "engine-dual.epp4j.test";

  @Test
  void anEndpointWhoseNameHasOnlyIpv6AddressesIsFollowedAndItsReplaysReachTheEngine(
      @TempDir Path dir) throws Exception {
    Path hosts = dir.resolve("hosts");
    Files.writeString(hosts, "127.0.0.1 localhost\n::1 " + V6_ONLY + "\n127.0.0.1 " + V4_ONLY
        + "\n127.0.0.1 " + DUAL + "\n::1 " + DUAL + "\n");
    String cp = System.getProperty("surefire.test.class.path",
        System.getProperty("java.class.path"));
    Process p = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java")
        .toString(), "-cp", cp, "-Djdk.net.hosts.file=" + hosts, Scenario.class.getName())
        .redirectErrorStream(true).start();
    byte[] out = p.getInputStream().readAllBytes();
    assertThat(p.waitFor(60, TimeUnit.SECONDS)).as("finished").isTrue();
    String text = new String(out, StandardCharsets.UTF_8);
    assertThat(text).as(text).contains("ipv6 only: needs IPv6 true");
    assertThat(text).as(text).contains("ipv4 only: needs IPv6 false");
    assertThat(text).as(text).contains("both: needs IPv6 false");
    assertThat(text).as(text).contains("blocks indexed: true");
    assertThat(text).as(text).contains("replay answered: true");
    assertThat(p.exitValue()).as(text).isZero();
  }

  /**
   * Publishes on {@code [::1]} and follows the endpoint {@code engine-v6.epp4j.test:8000}: its
   * blocks must reach the index, and a gap must be filled by the replay socket at the same name.
   */
  public static final class Scenario {
    private Scenario() {}

    /** Whether the sockets following {@code host} get ZeroMQ's IPv6 option. */
    private static boolean needsIpv6(HostLookups lookups, String host) throws Exception {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
      HostLookups.Answer a;
      while ((a = lookups.take(host)) == null && System.nanoTime() < deadline) {
        Thread.sleep(5);
      }
      if (a == null || a.failure() != null) {
        throw new AssertionError(host + " did not resolve", a == null ? null : a.failure());
      }
      return SubscriberSockets.ipv6Literal(a.connectAddress(5557));
    }

    public static void main(String[] args) throws Exception {
      for (InetAddress a : InetAddress.getAllByName(V6_ONLY)) {
        if (!(a instanceof Inet6Address)) {
          throw new AssertionError("the hosts file was not read: " + a);
        }
      }
      try (HostLookups lookups = new HostLookups(InetAddress::getAllByName)) {
        System.out.println("ipv6 only: needs IPv6 " + needsIpv6(lookups, V6_ONLY));
        System.out.println("ipv4 only: needs IPv6 " + needsIpv6(lookups, V4_ONLY));
        System.out.println("both: needs IPv6 " + needsIpv6(lookups, DUAL));
      }
      try (ZContext ctx = new ZContext(1);
          KvEventSubscriberIntegrationTest.ReplayServer replay =
              new KvEventSubscriberIntegrationTest.ReplayServer(ctx, "tcp://[::1]:*")) {
        ZMQ.Socket pub = ctx.createSocket(SocketType.XPUB);
        pub.setLinger(0);
        pub.setIPv6(true);
        pub.bind("tcp://[::1]:*");
        Endpoint ep = Endpoint.of(V6_ONLY, 8000, java.util.Map.of(
            KvEventSubscriber.REPLAY_PORT_LABEL, String.valueOf(replay.port)));
        KvBlockIndex index = KvBlockIndex.create();
        try (KvEventSubscriber sub = KvEventSubscriber.perEndpoint(index)
            .port(KvEventSubscriberIntegrationTest.port(pub)).replayTimeout(java.time.Duration.ofSeconds(10)).build()) {
          sub.addEndpoint(ep);
          pub.setReceiveTimeOut(20_000);
          boolean subscribed = pub.recv() != null;
          FakeEngine engine = new FakeEngine(1, 16);
          VllmEventEncoder enc = new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);
          int total = 8;
          for (long seq = 0; seq < total && subscribed; seq++) {
            byte[] payload = enc.encode(engine.nextBatch(seq));
            replay.buffer.put(seq, payload);
            if (seq != 3) { // lost on the way: only a replay brings it
              KvEventSubscriberIntegrationTest.publish(pub, "kv@" + ep.id() + "@m", seq, payload);
            }
          }
          long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
          while (subscribed && index.metrics().batches() < total
              && System.nanoTime() < deadline) {
            Thread.sleep(20);
          }
          System.out.println("blocks indexed: " + (index.blockCount(ep.id()) > 0));
          System.out.println("replay answered: " + (index.metrics().batches() == total
              && index.metrics().replayFailures() == 0));
          System.out.println(index.metrics());
        }
      }
    }
  }
}
