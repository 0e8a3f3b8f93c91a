package io.epp4j.testkit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;

import io.epp4j.api.Candidate;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Plugin;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * What every plugin owes the router, whatever its role: {@link Plugin#close()} may be called
 * more than once (a router that fails to start and a shutdown hook may both close it). Extend
 * {@link ScorerContract}, {@link FilterContract} or {@link PickerContract} rather than this.
 *
 * @param <P> the plugin type under test
 */
public abstract class PluginContract<P extends Plugin> {
  private final List<P> created = new ArrayList<>();

  /** A new, ready plugin instance; called once per test (and more for some tests). */
  protected abstract P createPlugin();

  /**
   * Whether two calls with equal inputs (same candidates, request and seeded cycle state) give
   * equal results. True for most plugins; false for one that is meant to vary, e.g. round robin.
   * When false, concurrent calls are checked for valid results rather than equal ones.
   */
  protected boolean deterministic() {
    return true;
  }

  /** A plugin closed after the test. */
  protected final P plugin() {
    P p = createPlugin();
    created.add(p);
    return p;
  }

  @AfterEach
  void closeCreatedPlugins() {
    for (P p : created) {
      p.close();
    }
    created.clear();
  }

  @Test
  void closeIsIdempotent() {
    P p = createPlugin();
    assertThatCode(() -> {
      p.close();
      p.close();
    }).as("closing %s twice", p).doesNotThrowAnyException();
  }

  /** Every (pool, request) pair of {@link ContractFixtures}, named for messages. */
  static List<Case> cases() {
    List<Case> out = new ArrayList<>();
    List<InferenceRequest> requests = ContractFixtures.requests();
    for (Map.Entry<String, List<Candidate>> pool : ContractFixtures.pools().entrySet()) {
      for (int r = 0; r < requests.size(); r++) {
        out.add(new Case(pool.getKey() + " / request " + r, pool.getValue(), requests.get(r)));
      }
    }
    return out;
  }

  record Case(String name, List<Candidate> pool, InferenceRequest request) {}

  /** A copy of what a call may not change: the token ids (the only mutable part of a request). */
  static int[] tokens(InferenceRequest r) {
    int[] t = r.tokenIds();
    return t == null ? new int[0] : t.clone();
  }

  static void assertUnchanged(Case c, List<Candidate> passed, int[] tokensBefore) {
    assertThat(passed).as("%s: candidate list after the call", c.name())
        .containsExactlyElementsOf(c.pool());
    assertThat(tokens(c.request())).as("%s: request token ids after the call", c.name())
        .isEqualTo(tokensBefore);
  }

  /** Per-thread work: iteration {@code i} of thread {@code t}. */
  interface Work {
    void run(int thread, int iteration) throws Exception;
  }

  /**
   * Runs {@code work} on 4 threads released together and fails with the first error. Each thread
   * runs at least 2,000 iterations and keeps going until 250 ms have passed (at most 200,000):
   * a race shows only when threads really overlap, which on a busy machine a fixed small count
   * may never achieve. Bounded by a 60 s deadline.
   */
  static void concurrently(Work work) throws Exception {
    int threads = 4;
    int minIterations = 2_000;
    int maxIterations = 200_000;
    long minNanos = TimeUnit.MILLISECONDS.toNanos(250);
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try {
      CountDownLatch start = new CountDownLatch(1);
      List<Future<?>> futures = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        int thread = t;
        futures.add(pool.submit(() -> {
          assertThat(start.await(30, TimeUnit.SECONDS)).isTrue();
          long t0 = System.nanoTime();
          for (int i = 0; i < maxIterations
              && (i < minIterations || System.nanoTime() - t0 < minNanos); i++) {
            work.run(thread, i);
          }
          return null;
        }));
      }
      start.countDown();
      for (Future<?> f : futures) {
        try {
          f.get(60, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
          if (e.getCause() instanceof Error err) {
            throw err;
          }
          throw e;
        }
      }
    } finally {
      pool.shutdownNow();
      assertThat(pool.awaitTermination(30, TimeUnit.SECONDS)).as("threads stopped").isTrue();
    }
  }

  static String describe(double[] a) {
    return Arrays.toString(a);
  }
}
