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
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
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
   * equal results, also on two plugins from {@link #createPlugin()}. True for most plugins; false
   * for one that is meant to vary, e.g. round robin. When false, concurrent calls are checked for
   * valid results rather than equal ones.
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

  /** Per-call work: call {@code iteration} of thread {@code thread}, on {@code plugin}. */
  interface Work<P> {
    void run(P plugin, int thread, int iteration) throws Exception;
  }

  static final int THREADS = 4;
  static final int CALLS_PER_ROUND = 128;
  static final int CALLS_PER_COLD_ROUND = 16;
  static final int MIN_ROUNDS = 128;
  static final int MAX_ROUNDS = 4_000;
  static final long MIN_NANOS = TimeUnit.MILLISECONDS.toNanos(250);
  static final long DEADLINE_NANOS = TimeUnit.SECONDS.toNanos(60);
  /** Delays between the threads' first calls in the rounds on new plugins, in turn. */
  static final long[] STAGGER_NANOS = {0, 2_000, 20_000, 200_000};

  /**
   * Runs {@code work} on {@value #THREADS} threads in rounds of {@value #CALLS_PER_ROUND} calls
   * per thread, at least {@value #MIN_ROUNDS} rounds and until 250 ms have passed, and fails with
   * the first error or exception of any thread. Even rounds call {@code warm}, a plugin that has
   * already been called on one thread (a race between calls in the steady state, such as a shared
   * scratch buffer); odd rounds call a new plugin from {@link #createPlugin()}, closed after the
   * round, whose very first calls are concurrent (a race in lazy initialisation, which a warmed-up
   * plugin has left behind). In each round the threads spin until all have started and are then
   * released at once, so that on a machine with few cores the first calls still overlap; in the
   * rounds on new plugins thread {@code t} then waits {@code t} times 0, 2, 20 or 200 µs (in
   * turn), so that some thread makes its first call while another is still in the middle of its
   * own, whatever that takes.
   *
   * <p>A race shows only when calls overlap, so a pass is evidence, not proof; the contract's own
   * tests measure it against plugins with such races. A thread that is still running after 60 s
   * (a deadlock or endless loop) fails the test; the threads are daemons, so one that never
   * returns does not keep the test JVM alive.
   */
  final void concurrently(P warm, Work<P> work) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(THREADS, r -> {
      Thread t = new Thread(r, "contract-concurrency");
      t.setDaemon(true);
      return t;
    });
    AtomicReference<Throwable> failure = new AtomicReference<>();
    long t0 = System.nanoTime();
    long deadline = t0 + DEADLINE_NANOS;
    try {
      for (int round = 0; failure.get() == null && round < MAX_ROUNDS
          && (round < MIN_ROUNDS || System.nanoTime() - t0 < MIN_NANOS); round++) {
        boolean cold = round % 2 == 1;
        P p = cold ? createPlugin() : warm;
        try {
          long stagger = cold ? STAGGER_NANOS[(round / 2) % STAGGER_NANOS.length] : 0;
          runRound(pool, p, round, cold ? CALLS_PER_COLD_ROUND : CALLS_PER_ROUND, stagger, work,
              failure, deadline);
        } finally {
          if (cold) {
            p.close();
          }
        }
      }
    } finally {
      pool.shutdownNow();
    }
    Throwable f = failure.get();
    if (f instanceof Error e) {
      throw e;
    }
    if (f != null) {
      throw new AssertionError("a concurrent call threw " + f, f);
    }
  }

  private static <P> void runRound(ExecutorService pool, P p, int round, int calls, long stagger,
      Work<P> work, AtomicReference<Throwable> failure, long deadline)
      throws InterruptedException {
    AtomicInteger ready = new AtomicInteger();
    AtomicBoolean go = new AtomicBoolean();
    List<Future<?>> futures = new ArrayList<>();
    for (int t = 0; t < THREADS; t++) {
      int thread = t;
      futures.add(pool.submit(() -> {
        ready.incrementAndGet();
        while (!go.get()) {
          if (System.nanoTime() - deadline > 0) {
            return;
          }
          Thread.onSpinWait();
          Thread.yield();
        }
        long released = System.nanoTime();
        while (System.nanoTime() - released < thread * stagger) {
          Thread.onSpinWait();
        }
        for (int i = 0; i < calls && failure.get() == null; i++) {
          try {
            work.run(p, thread, round * CALLS_PER_ROUND + i);
          } catch (Throwable e) {
            failure.compareAndSet(null, e);
            return;
          }
        }
      }));
    }
    while (ready.get() < THREADS && System.nanoTime() - deadline < 0) {
      Thread.onSpinWait();
      Thread.yield();
    }
    go.set(true);
    for (Future<?> f : futures) {
      try {
        f.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
      } catch (TimeoutException e) {
        failure.compareAndSet(null, new AssertionError("concurrent calls still running after "
            + TimeUnit.NANOSECONDS.toSeconds(DEADLINE_NANOS) + " s: a deadlock or endless loop?"));
        return;
      } catch (ExecutionException e) {
        failure.compareAndSet(null, e.getCause());
      }
    }
  }

  static String describe(double[] a) {
    return Arrays.toString(a);
  }
}
