package io.epp4j.testkit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;

import io.epp4j.api.Candidate;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Plugin;
import java.util.AbstractList;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.RandomAccess;
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

  /**
   * Closes every plugin the test made with {@link #plugin()}, also when one of them throws: the
   * first failure is rethrown once all are closed, the others suppressed in it.
   */
  @AfterEach
  void closeCreatedPlugins() {
    Throwable failure = null;
    for (P p : created) {
      try {
        p.close();
      } catch (RuntimeException | Error e) {
        if (failure == null) {
          failure = e;
        } else if (failure != e) {
          failure.addSuppressed(e);
        }
      }
    }
    created.clear();
    if (failure instanceof RuntimeException e) {
      throw e;
    }
    if (failure != null) {
      throw (Error) failure;
    }
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
   * already been called on one thread (a race between calls in the steady state; a shared
   * scratch buffer is caught for certain by {@link #interleaved}); odd rounds call a new plugin
   * from {@link #createPlugin()}, closed after the round, whose very first calls are concurrent
   * (a race in lazy initialisation, which a warmed-up plugin has left behind). In each round the threads spin until all have started and are then
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

  /**
   * The calls a contract makes in {@link #interleaved}: input {@code k} (of {@link #size()}) is a
   * case, perhaps with scores, whose result {@link #check} compares with the single-thread one.
   */
  interface Calls<P, R> {
    int size();

    String name(int k);

    List<Candidate> pool(int k);

    /** Calls {@code plugin} on input {@code k}, passing {@code candidates} (its pool). */
    R call(P plugin, int k, List<Candidate> candidates);

    /**
     * Fails unless {@code result} is valid for input {@code k} (and, if deterministic, the
     * single-thread one); {@code when} says how the call was made.
     */
    void check(int k, R result, String when);
  }

  /** {@link Calls} over a contract's cases: input {@code k} is case {@code k} on its pool. */
  abstract static class CaseCalls<P, R> implements Calls<P, R> {
    private final List<Case> cases;

    CaseCalls(List<Case> cases) {
      this.cases = cases;
    }

    @Override
    public int size() {
      return cases.size();
    }

    @Override
    public String name(int k) {
      return cases.get(k).name();
    }

    @Override
    public List<Candidate> pool(int k) {
      return cases.get(k).pool();
    }
  }

  /** How a failure seen in a forced interleaving of {@link #interleaved} starts to say when. */
  static final String FORCED = "while another thread made a whole call";

  /** Pause points tried per input in {@link #interleaved}, at most. */
  static final int MAX_PAUSES = 48;

  /**
   * The deterministic part of the concurrency check: for each input {@code a}, at each of its
   * call's reads of the candidate list ({@code size()}, {@code get(i)}, iteration) in turn and
   * once after it returned, the call on this thread is held while a helper thread makes a whole
   * call on every other input {@code b}; then both results are checked. A scratch buffer or
   * result list that calls share is overwritten by {@code b}'s call under {@code a}'s, which is
   * what a lucky overlap of free-running threads shows only some of the time. Calls on {@code
   * plugin} (warmed up) and, for each pause point, on a new plugin whose first call is {@code a}.
   *
   * <p>A plugin that serialises its calls with a lock makes the helper wait for this thread; when
   * the helper is seen blocked or waiting (or after {@link #MAX_HOLD_NANOS}), this thread goes
   * on, and the helper's call completes after it (no interleaving to see, and no deadlock).
   */
  final <R> void interleaved(P plugin, Calls<P, R> calls) throws Exception {
    ExecutorService helper = Executors.newSingleThreadExecutor(r -> {
      Thread t = new Thread(r, "contract-interleaving");
      t.setDaemon(true);
      return t;
    });
    long deadline = System.nanoTime() + DEADLINE_NANOS;
    try {
      int n = calls.size();
      for (int a = 0; a < n; a++) {
        WatchedList counted = new WatchedList(calls.pool(a), Integer.MAX_VALUE, () -> {});
        calls.call(plugin, a, counted);
        int reads = counted.reads();
        for (int j : pausePoints(reads)) {
          for (int b = 0; b < n; b++) {
            if (b != a) {
              interleave(helper, plugin, calls, a, j, b, reads, deadline);
            }
          }
          P fresh = createPlugin();
          try {
            interleave(helper, fresh, calls, a, j, (a + n / 2) % n, reads, deadline);
          } finally {
            fresh.close();
          }
        }
      }
    } finally {
      helper.shutdownNow();
    }
  }

  /** Every read index when there are few, else {@value #MAX_PAUSES} spread evenly, and "after". */
  private static int[] pausePoints(int reads) {
    int count = Math.min(reads, MAX_PAUSES - 1) + 1;
    int[] points = new int[count];
    for (int i = 0; i < count; i++) {
      points[i] = count == 1 ? reads : (int) ((long) i * reads / (count - 1));
    }
    return points;
  }

  private <R> void interleave(ExecutorService helper, P plugin, Calls<P, R> calls, int a, int j,
      int b, int reads, long deadline) throws Exception {
    Thread[] helperThread = new Thread[1];
    AtomicBoolean started = new AtomicBoolean();
    List<Future<R>> other = new ArrayList<>(1);
    Runnable startOther = () -> other.add(helper.submit(() -> {
      helperThread[0] = Thread.currentThread();
      started.set(true);
      return calls.call(plugin, b, calls.pool(b));
    }));
    Runnable pause = () -> {
      startOther.run();
      awaitUnlessBlocked(other.get(0), started, helperThread, deadline);
    };
    WatchedList watched = new WatchedList(calls.pool(a), j, pause);
    R ra;
    try {
      ra = calls.call(plugin, a, watched);
    } catch (RuntimeException e) {
      throw new AssertionError(calls.name(a) + ": a call threw " + e + " "
          + (j < reads ? FORCED + " on " + calls.name(b) + " at its read " + j
              + " of the candidate list" : ""), e);
    } finally {
      watched.disarm();
    }
    if (other.isEmpty()) {
      startOther.run();
    }
    R rb;
    try {
      // past the check's deadline a helper's call still gets its own time to end: a slow
      // machine is not a deadlock
      rb = other.get(0).get(Math.max(MAX_HOLD_NANOS, deadline - System.nanoTime()),
          TimeUnit.NANOSECONDS);
    } catch (ExecutionException e) {
      throw new AssertionError(calls.name(b) + ": a call " + whenPaused(calls, a, j, reads)
          + " threw " + e.getCause(), e.getCause());
    } catch (TimeoutException e) {
      throw new AssertionError(calls.name(b) + ": a call made " + whenPaused(calls, a, j, reads)
          + " was still running when the check's time was up: a deadlock or endless loop?");
    }
    String when = FORCED + " on " + calls.name(b) + " "
        + (j < reads ? "at its read " + j + " of the candidate list (of " + reads + ")"
            : "after it returned");
    calls.check(a, ra, when);
    calls.check(b, rb, "made " + whenPaused(calls, a, j, reads));
  }

  private static String whenPaused(Calls<?, ?> calls, int a, int j, int reads) {
    return "on another thread while a call on " + calls.name(a) + " was held "
        + (j < reads ? "at its read " + j + " of the candidate list" : "after it returned");
  }

  /**
   * How long a call is held at most: a whole call of a plugin takes far less; one that spins on a
   * lock held by the held call never ends, and then the held call goes on after this.
   */
  static final long MAX_HOLD_NANOS = TimeUnit.SECONDS.toNanos(5);

  /**
   * Waits for the helper's call to finish, unless the helper is seen blocked or waiting (on a
   * lock this thread holds, most likely) or {@link #MAX_HOLD_NANOS} have passed: then this
   * thread's call goes on.
   */
  private static void awaitUnlessBlocked(Future<?> f, AtomicBoolean started, Thread[] helperThread,
      long deadline) {
    long until = Math.min(deadline, System.nanoTime() + MAX_HOLD_NANOS);
    while (!f.isDone() && System.nanoTime() - until < 0) {
      if (started.get()) {
        Thread h = helperThread[0];
        Thread.State s = h == null ? Thread.State.RUNNABLE : h.getState();
        if (s == Thread.State.BLOCKED || s == Thread.State.WAITING
            || s == Thread.State.TIMED_WAITING) {
          if (!f.isDone()) {
            return;
          }
        }
      }
      Thread.onSpinWait();
    }
  }

  /**
   * A candidate pool as an immutable list that runs {@code pause} on the {@code pauseAt}-th read
   * ({@code size()} or {@code get(i)}, which iteration and streams go through) by the thread that
   * made it, once.
   */
  static final class WatchedList extends AbstractList<Candidate> implements RandomAccess {
    private final List<Candidate> pool;
    private final int pauseAt;
    private final Runnable pause;
    private volatile @org.jspecify.annotations.Nullable Thread owner;
    private int reads;

    WatchedList(List<Candidate> pool, int pauseAt, Runnable pause) {
      this.pool = pool;
      this.pauseAt = pauseAt;
      this.pause = pause;
      this.owner = Thread.currentThread();
    }

    private void read() {
      if (Thread.currentThread() == owner && reads++ == pauseAt) {
        pause.run();
      }
    }

    int reads() {
      return reads;
    }

    void disarm() {
      owner = null;
    }

    @Override
    public Candidate get(int index) {
      read();
      return pool.get(index);
    }

    @Override
    public int size() {
      read();
      return pool.size();
    }
  }

  static String describe(double[] a) {
    return Arrays.toString(a);
  }
}
