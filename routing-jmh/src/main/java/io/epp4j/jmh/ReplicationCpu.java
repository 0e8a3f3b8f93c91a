package io.epp4j.jmh;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;

/**
 * Where the CPU of {@code redis-replication} goes, in thread CPU time rather than wall time: the
 * routing thread's time per route and the publisher thread's time per route, with the routers
 * and prompts of {@link ReplicationBenchmark}. Wall-time ratios on a small shared machine depend
 * on which thread the scheduler puts beside which (the same build gave medians from 0.83 to 1.23
 * in back-to-back runs); CPU time does not, so this tells the two costs apart: what the plugin
 * adds to {@code route}, and what its publisher takes from the other cores.
 *
 * <p>One thread routes through three routers in turn, 200 ms each, the order rotating from round
 * to round: without the plugin, without it but sharing state ({@code RouterHints.shareState},
 * which changes how ties are broken), and with it. The second separates the cost of queueing
 * hints from the cost of routing differently; on these fixtures it picks as the plain router
 * does, so what it differs from the plain one by is the resolution of the measurement.
 *
 * <pre>
 * java -cp routing-jmh/target/benchmarks.jar io.epp4j.jmh.ReplicationCpu [rounds]
 * </pre>
 */
public final class ReplicationCpu {
  private static final long PHASE_NANOS = 200_000_000L;
  private static final int WARM_ROUNDS = 5;

  private ReplicationCpu() {}

  public static void main(String[] args) {
    int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 20;
    System.out.println("endpoints prompt  plain-ns shared-ns repl-ns  repl/plain"
        + "  publisher-ns/route  (repl+publisher)/plain");
    for (int endpoints : new int[] {8, 64}) {
      for (int bytes : new int[] {1024, 10240}) {
        measure(endpoints, bytes, rounds);
      }
    }
  }

  private static void measure(int endpoints, int promptBytes, int rounds) {
    SplittableRandom rnd = new SplittableRandom(42);
    // the same fixtures as ReplicationBenchmark
    Router plain = ReplicationBenchmark.router(endpoints, false);
    Router replicated = ReplicationBenchmark.router(endpoints, true);
    Router shared = ReplicationBenchmark.router(endpoints, false);
    shared.hints().shareState();
    InferenceRequest[] requests = ReplicationBenchmark.requests(rnd, promptBytes);
    List<Router> routers = List.of(plain, shared, replicated);
    ReplicationBenchmark.warm(rnd, promptBytes, requests, routers);

    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    long publisher = publisherThreadId();
    long[] cpu = new long[3];
    long[] ops = new long[3];
    long publisherCpu = 0;
    int next = 0;
    for (int r = 0; r < WARM_ROUNDS + rounds; r++) {
      for (int j = 0; j < 3; j++) {
        // each round starts with another router: no router always follows the same one
        int k = (j + r) % 3;
        Router router = routers.get(k);
        long p0 = mx.getThreadCpuTime(publisher);
        long c0 = mx.getCurrentThreadCpuTime();
        long end = System.nanoTime() + PHASE_NANOS;
        long n = 0;
        do {
          for (int i = 0; i < ReplicationBenchmark.PROMPTS; i++) {
            RoutingDecision d = router.route(requests[next++ & (ReplicationBenchmark.PROMPTS - 1)]);
            d.onComplete(Usage.NONE);
          }
          n += ReplicationBenchmark.PROMPTS;
        } while (System.nanoTime() - end < 0);
        long c1 = mx.getCurrentThreadCpuTime();
        long p1 = mx.getThreadCpuTime(publisher);
        if (r >= WARM_ROUNDS) {
          cpu[k] += c1 - c0;
          ops[k] += n;
          if (k == 2) {
            publisherCpu += p1 - p0;
          }
        }
      }
    }
    double p = (double) cpu[0] / ops[0];
    double s = (double) cpu[1] / ops[1];
    double q = (double) cpu[2] / ops[2];
    double pub = (double) publisherCpu / ops[2];
    System.out.printf(Locale.ROOT, "%9d %6d %9.0f %9.0f %7.0f %10.3f %19.0f %24.3f%n",
        endpoints, promptBytes, p, s, q, q / p, pub, (q + pub) / p);
    for (Router r : routers) {
      r.close();
    }
  }

  /** The replicated router's publisher; the others of earlier cases are closed by then. */
  private static long publisherThreadId() {
    for (Thread t : Thread.getAllStackTraces().keySet()) {
      if (t.getName().equals("epp4j-redis-replication-publish") && t.isAlive()) {
        return t.getId();
      }
    }
    throw new IllegalStateException("no publisher thread: redis-replication did not start");
  }
}
