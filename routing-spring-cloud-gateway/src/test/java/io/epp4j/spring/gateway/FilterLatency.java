package io.epp4j.spring.gateway;

import java.lang.management.ManagementFactory;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Arrays;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * Latency the {@code Epp4j} filter adds: one gateway, one stand-in replica, two routes to it that
 * differ only by the filter (a plain route selected by a header, and the {@code Epp4j} route),
 * requests alternating between them one at a time so both see the same machine state. Prints
 * p50/p99 of each and the difference, then the bytes allocated per request on each route. Not a
 * test; the command is in the module README.
 */
public final class FilterLatency {
  private FilterLatency() {}

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {}

  public static void main(String[] args) throws Exception {
    // the JDK server sends headers and body in two writes: without this, Nagle and delayed ACKs
    // put ~40 ms into every answer and hide what is measured
    System.setProperty("sun.net.httpserver.nodelay", "true");
    int warmup = args.length > 0 ? Integer.parseInt(args[0]) : 2000;
    int measured = args.length > 1 ? Integer.parseInt(args[1]) : 5000;
    try (StandInReplica replica = StandInReplica.start("r");
        ConfigurableApplicationContext ctx = new SpringApplicationBuilder(App.class)
            .properties(
                "server.port=0",
                "logging.level.root=WARN",
                "epp4j.metrics.enabled=false",
                "epp4j.endpoints=" + replica.id(),
                "spring.cloud.gateway.server.webflux.routes[0].id=plain",
                "spring.cloud.gateway.server.webflux.routes[0].uri=http://" + replica.id(),
                "spring.cloud.gateway.server.webflux.routes[0].predicates[0]=Header=x-plain, 1",
                "spring.cloud.gateway.server.webflux.routes[1].id=llm",
                "spring.cloud.gateway.server.webflux.routes[1].uri=http://replicas.invalid",
                "spring.cloud.gateway.server.webflux.routes[1].predicates[0]=Path=/v1/**",
                "spring.cloud.gateway.server.webflux.routes[1].filters[0]=Epp4j")
            .run()) {
      int port = Integer.parseInt(ctx.getEnvironment().getProperty("local.server.port", "0"));
      HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
      URI uri = URI.create("http://127.0.0.1:" + port + "/v1/completions");
      String prefix = "You are a helpful assistant. ".repeat(70); // ~2 kB
      long[] plain = new long[measured];
      long[] epp4j = new long[measured];
      for (int i = 0; i < warmup + measured; i++) {
        String body = "{\"model\":\"m\",\"prompt\":\"" + prefix + "q" + i + "\"}";
        long p = time(client, uri, body, true);
        long e = time(client, uri, body, false);
        if (i >= warmup) {
          plain[i - warmup] = p;
          epp4j[i - warmup] = e;
        }
      }
      Arrays.sort(plain);
      Arrays.sort(epp4j);
      System.out.printf("requests: %d per route after %d warm-up, one at a time, ~2 kB bodies%n",
          measured, warmup);
      System.out.printf("plain route : p50 %.3f ms  p99 %.3f ms%n", ms(plain, 0.50), ms(plain, 0.99));
      System.out.printf("Epp4j route : p50 %.3f ms  p99 %.3f ms%n", ms(epp4j, 0.50), ms(epp4j, 0.99));
      System.out.printf("added       : p50 %.3f ms  p99 %.3f ms%n",
          ms(epp4j, 0.50) - ms(plain, 0.50), ms(epp4j, 0.99) - ms(plain, 0.99));

      // allocation: blocks of one route at a time, alternating, so each block's sum over the
      // JVM's threads holds that route's gateway work plus the same client and replica work
      int blocks = 6;
      int perBlock = Math.max(100, measured / blocks);
      long plainBytes = 0;
      long epp4jBytes = 0;
      for (int b = 0; b < blocks * 2; b++) {
        boolean isPlain = b % 2 == 0;
        long before = allocatedBytes();
        for (int i = 0; i < perBlock; i++) {
          String body = "{\"model\":\"m\",\"prompt\":\"" + prefix + "a" + b + "-" + i + "\"}";
          time(client, uri, body, isPlain);
        }
        long took = allocatedBytes() - before;
        if (isPlain) {
          plainBytes += took;
        } else {
          epp4jBytes += took;
        }
      }
      long n = (long) blocks * perBlock;
      System.out.printf("allocated per request (whole JVM: gateway, client, stand-in replica),"
          + " %d per route:%n", n);
      System.out.printf("plain route : %,d B%n", plainBytes / n);
      System.out.printf("Epp4j route : %,d B%n", epp4jBytes / n);
      System.out.printf("added       : %,d B%n", (epp4jBytes - plainBytes) / n);
    }
  }

  private static long time(HttpClient client, URI uri, String body, boolean plain)
      throws Exception {
    HttpRequest.Builder b = HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(10))
        .header("content-type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body));
    if (plain) {
      b.header("x-plain", "1");
    }
    long start = System.nanoTime();
    HttpResponse<byte[]> r = client.send(b.build(), HttpResponse.BodyHandlers.ofByteArray());
    long took = System.nanoTime() - start;
    if (r.statusCode() != 200) {
      throw new IllegalStateException("status " + r.statusCode() + (plain ? " (plain)" : ""));
    }
    return took;
  }

  /**
   * Bytes allocated so far by the JVM's live threads. Threads that ended between two calls drop
   * out of the sum; the gateway's event loops, the client's and the replica's pools live
   * throughout, so that loss is small and the same on both routes.
   */
  private static long allocatedBytes() {
    com.sun.management.ThreadMXBean threads =
        (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    long sum = 0;
    for (long b : threads.getThreadAllocatedBytes(threads.getAllThreadIds())) {
      if (b > 0) {
        sum += b;
      }
    }
    return sum;
  }

  private static double ms(long[] sorted, double q) {
    return sorted[(int) Math.min(sorted.length - 1, Math.floor(q * sorted.length))] / 1e6;
  }
}
