package io.epp4j.sim;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.jspecify.annotations.Nullable;

/**
 * The dominance experiment ({@code --dominance}): one policy, {@code epp4j}, against the best of
 * the others at every point (scenario × load level × seed). The target at a point: its hit rate
 * at least the best other's less {@link #HIT_TOLERANCE}, and its TTFT p95 at most
 * {@link #P95_FACTOR} × the best other's + {@link #P95_SLACK_MS}. The best hit rate and the best
 * p95 may come from different policies: a point is only won when no single rival is better on
 * either measure.
 *
 * <p>A measure a policy has no figure for at a point (NaN: no hit rate when it looked up no prompt,
 * no TTFT p95 when it served no request) is judged so that it never wins: the policy under test
 * without a figure misses the target on that measure and loses the point; another policy without
 * one is no rival on that measure (it beats nothing), and when no other policy has a figure the
 * policy under test's figure meets the target on that measure.
 */
final class Dominance {
  private Dominance() {}

  /** The policy under test. */
  static final String SUBJECT = Policy.EPP4J.name();
  /** Hit-rate tolerance, as a fraction (one percentage point). */
  static final double HIT_TOLERANCE = 0.01;
  static final double P95_FACTOR = 1.10;
  static final double P95_SLACK_MS = 10;
  static final List<Double> LEVELS = List.of(1.0, 1.5, 2.0, 2.5);
  static final List<Long> SEEDS = List.of(1L, 2L, 3L);
  /** At most two simulations at once: the machine it has to finish on has two cores. */
  static final int THREADS = 2;

  static List<Policy> policies() {
    return List.of(Policy.ROUND_ROBIN, Policy.STICKY, Policy.EPP_APPROXIMATE, Policy.EPP_PRECISE,
        Policy.EPP4J);
  }

  /** Outcome of one point. */
  enum Outcome {
    /** Meets the target and is at least as good as the best other on both measures. */
    WON,
    /** Meets the target, within its tolerance on at least one measure. */
    TIED,
    /** Misses the target. */
    LOST
  }

  /** A scenario of the experiment: its workload at level 1 and the cluster it runs on. */
  record Scenario(Workload workload, HardwareProfile profile, int replicas) {}

  /**
   * The verdict at one point.
   *
   * @param point   the results of every policy at that point
   * @param subject the policy under test's result
   * @param bestHit the other policy with the highest hit rate (when none has one, an other
   *     policy without one)
   * @param bestP95 the other policy with the lowest TTFT p95 (when none has one, an other policy
   *     without one)
   */
  record Verdict(ScenarioResult point, PolicyResult subject, PolicyResult bestHit,
      PolicyResult bestP95, Outcome outcome) {

    boolean hitOk() {
      return meets(subject.prefixCacheHitRate(), bestHit.prefixCacheHitRate() - HIT_TOLERANCE,
          true);
    }

    boolean p95Ok() {
      return meets(subject.ttftP95Ms(), P95_FACTOR * bestP95.ttftP95Ms() + P95_SLACK_MS, false);
    }

    /** At least as good as the best other on both measures. */
    boolean atLeastAsGood() {
      return meets(subject.prefixCacheHitRate(), bestHit.prefixCacheHitRate(), true)
          && meets(subject.ttftP95Ms(), bestP95.ttftP95Ms(), false);
    }

    /**
     * Whether {@code value} reaches {@code bound} (at least it when {@code higherIsBetter}, at
     * most it otherwise): never without a figure, always against a bound no rival has a figure
     * for.
     */
    private static boolean meets(double value, double bound, boolean higherIsBetter) {
      if (Double.isNaN(value)) {
        return false;
      }
      if (Double.isNaN(bound)) {
        return true;
      }
      return higherIsBetter ? value >= bound : value <= bound;
    }
  }

  /**
   * Judges {@code subject} on one point against the best other policy.
   *
   * @throws IllegalArgumentException when the point has no result for {@code subject} or no
   *     other policy
   */
  static Verdict judge(ScenarioResult point, String subject) {
    PolicyResult self = null;
    PolicyResult bestHit = null;
    PolicyResult bestP95 = null;
    for (PolicyResult r : point.results()) {
      if (r.policy().equals(subject)) {
        self = r;
        continue;
      }
      // a policy without a figure is no rival: any one with a figure takes its place
      if (bestHit == null
          || better(r.prefixCacheHitRate(), bestHit.prefixCacheHitRate(), true)) {
        bestHit = r;
      }
      if (bestP95 == null || better(r.ttftP95Ms(), bestP95.ttftP95Ms(), false)) {
        bestP95 = r;
      }
    }
    if (self == null || bestHit == null || bestP95 == null) {
      throw new IllegalArgumentException("point " + point.scenario() + " needs a result for "
          + subject + " and for at least one other policy");
    }
    Verdict v = new Verdict(point, self, bestHit, bestP95, Outcome.LOST);
    Outcome o = !(v.hitOk() && v.p95Ok()) ? Outcome.LOST
        : v.atLeastAsGood() ? Outcome.WON : Outcome.TIED;
    return new Verdict(point, self, bestHit, bestP95, o);
  }

  /** Whether figure {@code a} beats {@code b}; no figure beats nothing, any figure beats none. */
  private static boolean better(double a, double b, boolean higherIsBetter) {
    return !Double.isNaN(a)
        && (Double.isNaN(b) || (higherIsBetter ? a > b : a < b));
  }

  /**
   * Runs every scenario × level × seed × policy, {@code threads} simulations at a time (each has
   * its own router and replicas, so runs share nothing but the log handler), and returns one
   * result per point in the order scenario, level, seed.
   */
  static List<ScenarioResult> run(List<Scenario> scenarios, List<Double> levels, List<Long> seeds,
      List<Policy> policies, long scrapeIntervalNanos, int threads,
      @Nullable PrintStream progress) {
    record Task(Scenario scenario, double level, long seed, Policy policy) {}
    List<Task> tasks = new ArrayList<>();
    for (Scenario s : scenarios) {
      for (double level : levels) {
        for (long seed : seeds) {
          for (Policy p : policies) {
            tasks.add(new Task(s, level, seed, p));
          }
        }
      }
    }
    AtomicInteger done = new AtomicInteger();
    long start = System.nanoTime();
    ExecutorService pool = Executors.newFixedThreadPool(threads, r -> {
      Thread t = new Thread(r, "dominance");
      t.setDaemon(true);
      return t;
    });
    try {
      List<Future<PolicyResult>> futures = new ArrayList<>();
      for (Task t : tasks) {
        futures.add(pool.submit(() -> {
          Simulation.Settings settings = new Simulation.Settings(t.scenario().profile(),
              t.scenario().replicas(), t.seed(), scrapeIntervalNanos, null);
          PolicyResult r = new Simulation(settings, t.scenario().workload().atLoad(t.level()),
              t.policy(), null).run();
          int n = done.incrementAndGet();
          if (progress != null) {
            progress.printf(Locale.ROOT, "[%d/%d %.0f s] %s ×%s seed %d / %s: %.2f s%n", n,
                tasks.size(), (System.nanoTime() - start) / 1e9,
                t.scenario().workload().name(), Main.levelText(t.level()), t.seed(),
                t.policy().name(), r.wallSeconds());
          }
          return r;
        }));
      }
      List<ScenarioResult> out = new ArrayList<>();
      int i = 0;
      for (Scenario s : scenarios) {
        for (double level : levels) {
          for (long seed : seeds) {
            List<PolicyResult> rs = new ArrayList<>();
            for (int p = 0; p < policies.size(); p++) {
              rs.add(get(futures.get(i++)));
            }
            java.util.Map<String, Object> load = new java.util.LinkedHashMap<>(
                s.workload().atLoad(level).parameters());
            load.put("profile", s.profile().name());
            load.put("replicas", s.replicas());
            out.add(Main.scenarioResult(s.workload(), level, s.profile(), s.replicas(), seed, rs,
                load));
          }
        }
      }
      return out;
    } finally {
      pool.shutdownNow();
    }
  }

  private static PolicyResult get(Future<PolicyResult> f) {
    try {
      return f.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted", e);
    } catch (ExecutionException e) {
      Throwable c = e.getCause();
      if (c instanceof RuntimeException re) {
        throw re;
      }
      throw new IllegalStateException(c);
    }
  }

  /** Prints one line per point and the summary. */
  static void print(List<Verdict> verdicts, PrintStream out) {
    out.println("== dominance: " + SUBJECT + " against the best other policy at every point");
    out.printf(Locale.ROOT, "   target: hit >= best other hit - %.1f point and TTFT p95 <= %.2f ×"
        + " best other p95 + %.0f ms%n", HIT_TOLERANCE * 100, P95_FACTOR, P95_SLACK_MS);
    List<String[]> rows = new ArrayList<>();
    rows.add(new String[] {"scenario", "load", "seed", SUBJECT + " hit", "best other hit",
        SUBJECT + " p95", "best other p95", "ceiling", "outcome"});
    for (Verdict v : verdicts) {
      rows.add(new String[] {v.point().scenario(), "×" + Main.levelText(v.point().loadLevel()),
          Long.toString(v.point().seed()), pct(v.subject().prefixCacheHitRate()),
          pct(v.bestHit().prefixCacheHitRate()) + " " + v.bestHit().policy(),
          Report.ms(v.subject().ttftP95Ms()),
          Report.ms(v.bestP95().ttftP95Ms()) + " " + v.bestP95().policy(),
          pct(v.point().hitRateCeiling()),
          v.outcome().name().toLowerCase(Locale.ROOT) + why(v)});
    }
    int[] width = new int[rows.get(0).length];
    for (String[] r : rows) {
      for (int c = 0; c < r.length; c++) {
        width[c] = Math.max(width[c], r[c].length());
      }
    }
    for (String[] r : rows) {
      StringBuilder line = new StringBuilder();
      for (int c = 0; c < r.length; c++) {
        line.append(c == 0 ? "" : "  ").append(r[c])
            .append(" ".repeat(c == r.length - 1 ? 0 : width[c] - r[c].length()));
      }
      out.println(line);
    }
    out.println(summary(verdicts));
    out.print(everyPolicy(verdicts));
  }

  /**
   * The same target applied to every policy of the points in turn, each against the best of
   * the others ({@link #SUBJECT} among them): how hard the target is on these points, which one
   * configuration has to meet everywhere.
   */
  static String everyPolicy(List<Verdict> verdicts) {
    if (verdicts.isEmpty()) {
      return "";
    }
    StringBuilder sb = new StringBuilder(
        "every policy against the best of the others (same target, same points):\n");
    countsByPolicy(verdicts).forEach((policy, n) -> sb.append(String.format(Locale.ROOT,
        "  %-20s won %d, tied %d, lost %d%n", policy, n[0], n[1], n[2])));
    return sb.toString();
  }

  /**
   * For each policy of the points, in their order, its outcomes (indexed by
   * {@link Outcome#ordinal()}) when it is judged against the best of the others.
   */
  static java.util.LinkedHashMap<String, int[]> countsByPolicy(List<Verdict> verdicts) {
    java.util.LinkedHashMap<String, int[]> counts = new java.util.LinkedHashMap<>();
    if (verdicts.isEmpty()) {
      return counts;
    }
    for (PolicyResult r : verdicts.get(0).point().results()) {
      int[] n = new int[Outcome.values().length];
      for (Verdict v : verdicts) {
        n[judge(v.point(), r.policy()).outcome().ordinal()]++;
      }
      counts.put(r.policy(), n);
    }
    return counts;
  }

  static String summary(List<Verdict> verdicts) {
    int[] n = new int[Outcome.values().length];
    for (Verdict v : verdicts) {
      n[v.outcome().ordinal()]++;
    }
    StringBuilder sb = new StringBuilder(String.format(Locale.ROOT,
        "summary: %d points: won %d, tied %d, lost %d", verdicts.size(), n[0], n[1], n[2]));
    for (Verdict v : verdicts) {
      if (v.outcome() == Outcome.LOST) {
        sb.append(String.format(Locale.ROOT, "%n  lost: %s ×%s seed %d%s", v.point().scenario(),
            Main.levelText(v.point().loadLevel()), v.point().seed(), why(v)));
      }
    }
    return sb.toString();
  }

  private static String why(Verdict v) {
    if (v.outcome() != Outcome.LOST) {
      return "";
    }
    List<String> w = new ArrayList<>();
    if (!v.hitOk()) {
      w.add(Double.isNaN(v.subject().prefixCacheHitRate()) ? "no hit rate: no prompt looked up"
          : String.format(Locale.ROOT, "hit %.1f points below %s",
              (v.bestHit().prefixCacheHitRate() - v.subject().prefixCacheHitRate()) * 100,
              v.bestHit().policy()));
    }
    if (!v.p95Ok()) {
      w.add(Double.isNaN(v.subject().ttftP95Ms()) ? "no TTFT p95: no request served"
          : String.format(Locale.ROOT, "p95 %.2f × %s's", v.subject().ttftP95Ms()
              / v.bestP95().ttftP95Ms(), v.bestP95().policy()));
    }
    return " (" + String.join("; ", w) + ")";
  }

  private static String pct(double v) {
    return Double.isNaN(v) ? Report.NO_FIGURE : String.format(Locale.ROOT, "%.1f%%", v * 100);
  }
}
