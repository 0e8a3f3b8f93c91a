package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * An endpoint whose host name resolves only after it joined the pool (a container or pod whose
 * DNS entry comes after the router learned of it). The name is resolved through a hosts file of
 * the test's own ({@code jdk.net.hosts.file}, set when a JVM starts), so the scenario runs in a
 * JVM of its own, where failed lookups are not cached.
 */
@Timeout(90)
class LateHostNameTest {
  private static final String LATE = "engine-late.epp4j.test";

  @Test
  void anEndpointWhoseNameResolvesLaterIsFollowedOnceItDoes(@TempDir Path dir) throws Exception {
    Path hosts = dir.resolve("hosts");
    Files.writeString(hosts, "127.0.0.1 localhost\n");
    String cp = System.getProperty("surefire.test.class.path",
        System.getProperty("java.class.path"));
    Process p = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java")
        .toString(), "-cp", cp, "-Djdk.net.hosts.file=" + hosts, Scenario.class.getName(),
        hosts.toString())
        .redirectErrorStream(true).start();
    byte[] out = p.getInputStream().readAllBytes();
    assertThat(p.waitFor(60, TimeUnit.SECONDS)).as("finished").isTrue();
    String text = new String(out, StandardCharsets.UTF_8);
    assertThat(text).as(text).contains("unresolved at first: true");
    assertThat(text).as(text).contains("blocks indexed: true");
    assertThat(text).as(text).containsOnlyOnce("cannot connect to its KV-event publisher at tcp://"
        + LATE);
    assertThat(text).as(text).contains("connected to its KV-event publisher at tcp://" + LATE);
    assertThat(p.exitValue()).as(text).isZero();
  }

  /**
   * Follows {@code engine-late.epp4j.test:8000} before the hosts file names it, then names it
   * and publishes: the blocks must reach the index.
   */
  public static final class Scenario {
    private Scenario() {}

    public static void main(String[] args) throws Exception {
      // before the first lookup: a failed one would otherwise be remembered for 10 s
      java.security.Security.setProperty("networkaddress.cache.negative.ttl", "0");
      Path hosts = Path.of(args[0]);
      try (ZContext ctx = new ZContext(1)) {
        ZMQ.Socket pub = ctx.createSocket(SocketType.XPUB);
        pub.setLinger(0);
        pub.bind("tcp://127.0.0.1:*");
        Endpoint ep = Endpoint.of(LATE, 8000);
        KvBlockIndex index = KvBlockIndex.create();
        try (KvEventSubscriber sub = KvEventSubscriber.perEndpoint(index)
            .port(KvEventSubscriberIntegrationTest.port(pub)).build()) {
          sub.addEndpoint(ep);
          pub.setReceiveTimeOut(700);
          System.out.println("unresolved at first: " + (pub.recv() == null));
          Files.writeString(hosts, "127.0.0.1 " + LATE + "\n", StandardOpenOption.APPEND);
          pub.setReceiveTimeOut(20_000);
          boolean subscribed = pub.recv() != null;
          VllmEventEncoder enc = new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false);
          FakeEngine engine = new FakeEngine(1, 16);
          for (long seq = 0; seq < 3 && subscribed; seq++) {
            KvEventSubscriberIntegrationTest.publish(pub, "kv@" + ep.id() + "@m", seq,
                enc.encode(engine.nextBatch(seq)));
          }
          long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
          while (subscribed && index.metrics().batches() < 3 && System.nanoTime() < deadline) {
            Thread.sleep(20);
          }
          System.out.println("blocks indexed: " + (index.blockCount(ep.id()) > 0));
        }
      }
    }
  }
}
