package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;

import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulRedisConnection;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The test server itself: the tests that kill Redis and start it again must get it back on the
 * same port, which their routers are configured with, even when the port is held for a moment
 * by another socket (another process's connection or server on a busy CI machine).
 */
class RedisServerTest {
  @RegisterExtension
  static final RedisServer REDIS = new RedisServer();

  @Test
  void aRestartWaitsForItsPortWhileAnotherSocketHoldsIt() throws Exception {
    REDIS.stop();
    ServerSocket holder = new ServerSocket();
    holder.setReuseAddress(true);
    holder.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), REDIS.port()), 50);
    // let go of the port a while after the restart began: its first attempts find it taken
    CompletableFuture<Void> released = CompletableFuture.runAsync(() -> {
      try {
        Thread.sleep(1_000);
        holder.close();
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    });
    try {
      REDIS.start();
    } finally {
      released.get(30, TimeUnit.SECONDS);
      holder.close();
    }
    // the server answers on its port, not the socket that held it (which answered nothing)
    io.lettuce.core.RedisURI uri = io.lettuce.core.RedisURI.create(REDIS.uri());
    uri.setTimeout(java.time.Duration.ofSeconds(30));
    RedisClient client = RedisClient.create(uri);
    try (StatefulRedisConnection<String, String> c = client.connect()) {
      assertThat(c.sync().ping()).isEqualTo("PONG");
    } finally {
      client.shutdown();
    }
  }

  @Test
  void theServerIsOnAPortBelowTheEphemeralRange() throws Exception {
    String range = "/proc/sys/net/ipv4/ip_local_port_range";
    org.junit.jupiter.api.Assumptions.assumeTrue(
        java.nio.file.Files.isReadable(java.nio.file.Path.of(range)),
        "no Linux ephemeral port range to compare with");
    int low = Integer.parseInt(RedisServer.procFile(range).split("\\s+")[0]);
    org.junit.jupiter.api.Assumptions.assumeTrue(low > 11_000, "ephemeral range starts at " + low);
    // outgoing connections take their local ports from that range: one could hold this port
    // when a test restarts the server
    assertThat(REDIS.port()).isBetween(10_000, low - 1);
  }
}
