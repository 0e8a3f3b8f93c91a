package io.epp4j.sim;

import io.epp4j.core.ConfigException;
import java.io.IOException;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.stream.Collectors;
import org.jspecify.annotations.Nullable;

/**
 * Command line of the simulator. With no arguments it compares every preset policy on the
 * seed experiment's two scenarios ({@code shared-prefix} and {@code multi-turn}) and prints the
 * table. Exit codes: 0 done, 1 a run failed (a configuration or trace that cannot be used, a
 * policy that served no request, a report that could not be written), 2 bad usage (including an
 * output path that cannot be written or that two reports share, and a {@code --trace} or
 * {@code --config} file that does not exist, checked before anything runs).
 */
public final class Main {
  /**
   * The trace {@code --scenario trace} replays by default, relative to the folder that holds the
   * repository: {@code shared/} beside the clone holds the seed experiment's inputs and is not
   * part of the repository.
   */
  static final String SHARED_TRACE = "shared/traces/mooncake_synthetic_trace.jsonl";

  static final String SHORT_USAGE = """
      Usage: java -jar routing-sim.jar [options]   (--help lists every option)
      """;

  private static String usage() {
    return """
      Usage: java -jar routing-sim.jar [options]
      Compares routing policies on simulated vLLM replicas driven by the real epp4j router.
      (java -jar routing-sim.jar serve --help: emulated vLLM replicas on loopback ports;
       java -jar routing-sim.jar load --help: these workloads over HTTP against a server)
      Without options: both seed scenarios (shared-prefix, multi-turn), all preset policies.

      General
        --scenario LIST        %s (comma-separated)
                               default: shared-prefix,multi-turn
        --policies LIST        presets (comma-separated; default: all):
                               %s
        --config FILE.yaml     also run an EndpointPickerConfig file (repeatable); with
                               --config and no --policies only the files run
        --replicas N           replicas (default 6)
        --pd P:D               P prefill and D decode replicas (P+D in all) for a policy
                               with a prefill profile (P/D presets, named in --policies:
                               %s); other policies see all as role both
        --kv-link NAME         the link a P/D request's KV crosses (default %s; known:
                               %s)
        --gateways N           gateways in front, each with its own router; requests go
                               round-robin (default 1)
        --shared-state MODE    none (each gateway knows its own traffic) or replicated (the
                               routers share hints as redis-replication does; default none)
        --replication-delay-ms MS  delay of a shared hint (default %s, measured with Redis)
        --profile NAME         hardware profile (default qwen3-1.7b-h100-mps6)
                               known: %s
        --seed N               random seed (default 1)
        --requests N           requests (shared-prefix total, trace: first N; a shorter
                               trace is replayed whole, with a warning)
        --scrape-interval MS   metrics publication interval in ms (default 50)
        --max-num-seqs N       override the profile's max_num_seqs
        --max-num-batched-tokens N  override the profile's max_num_batched_tokens (at
                               least max_num_seqs, as vLLM requires)
        --json PATH --csv PATH --chart PATH.png   write the report (checked before the run)
        --requests-csv PATH    also write every completed request: scenario, load, policy,
                               replica, arrival, TTFT, E2E, prompt, cached, preemptions and
                               what its replica held when it arrived; with --pd, where it
                               was prefilled and its KV transfer (not with --dominance)
        --load-levels LIST     multipliers of every scenario's offered load, e.g. 1,1.5,2
                               (shared-prefix: concurrency or --rate × level; multi-turn:
                               dialogs × level; trace: timestamps ÷ level; counts rounded to
                               the nearest, halves up); one table per level (default 1)
        --dominance            epp4j against the best other policy at every point of a fixed
                               sweep (shared-prefix, multi-turn, trace × load 1-2.5 × seeds
                               1-3); takes only --json --csv --chart --trace
                               --scrape-interval --quiet
        --quiet                no progress and no router warnings on stderr (errors still)
        --help                 this text

      shared-prefix
        --groups N (28)  --users-per-group N (8)  --system-prompt-len L (6000)
        --question-len L (300-700)  --output-len L (100-300)
        --concurrency N (48, closed loop)  --rate R (Poisson req/s; overrides concurrency)
      multi-turn
        --dialogs N (36)  --turns N (8)  --mt-system-len N (1000)  --user-len L (450)
        --reply-len L (400)  --think-time S (1.0, mean seconds)
        --start-spread S (2.0: the dialogs start at uniform times within the first S seconds)
      trace
        --trace mooncake:PATH  default: %s in the folder that
                               holds this jar's repository (beside it, not part of it)
        --time-scale X         multiply trace timestamps by X (default 1.0)

      Lengths L: N, A-B (uniform) or exp:MEAN, at most 10000000 tokens.
      Columns: hit%% prefix-cache hits / prompt tokens looked up (– when no prompt was looked up);
      req/rep and sess/rep max/mean per replica; route µs mean/p99 wall time per decision; clipped:
      trace requests longer than the model's context, replayed with the prompt cut to fit.
      Options take one value each (give an option twice and it is an error), as --name VALUE
      or --name=VALUE (a value that begins with a dash and is not a number only so); lists
      take no empty entry and no entry twice.
      Exit codes: 0 done; 1 a run failed (bad config or trace, a policy that served no request:
      every request rejected); 2 bad usage, an output path that cannot be written (or that two
      reports share, or that is the --trace or a --config file), or a --trace or --config
      file that does not exist.
      """.formatted(String.join(", ", SCENARIOS), String.join(", ", Policy.presets().keySet()),
        String.join(", ", Policy.pdPresets().keySet()), KvLink.RDMA_400G,
        String.join(", ", KvLink.builtIns().keySet()), Options.DEFAULT_REPLICATION_DELAY_MS, String.join(", ", HardwareProfile.builtIns().keySet()),
        SHARED_TRACE);
  }

  static final List<String> SCENARIOS = List.of(SharedPrefixWorkload.NAME, MultiTurnWorkload.NAME,
      MooncakeTraceWorkload.NAME);

  /** Thrown for bad command lines; the message goes to stderr with the short usage. */
  static final class UsageException extends Exception {
    private static final long serialVersionUID = 1L;

    UsageException(String message) {
      super(message);
    }
  }

  /** A run that cannot go on; the message goes to stderr and the exit code is 1. */
  static final class RunFailure extends Exception {
    private static final long serialVersionUID = 1L;

    RunFailure(String message) {
      super(message);
    }
  }

  private Main() {}

  public static void main(String[] args) {
    System.exit(run(args, System.out, System.err));
  }

  /** Runs the command line; returns the exit code. */
  static int run(String[] args, PrintStream out, PrintStream err) {
    if (args.length > 0 && args[0].equals("serve")) {
      return Serve.run(Arrays.copyOfRange(args, 1, args.length), out, err);
    }
    if (args.length > 0 && args[0].equals("load")) {
      return LoadCommand.run(Arrays.copyOfRange(args, 1, args.length), out, err);
    }
    Options o;
    try {
      o = Options.parse(args);
      if (o.help) {
        out.print(usage());
        return 0;
      }
      // printed even with --quiet: an option that silently did nothing is a wrong experiment
      for (String w : o.warnings) {
        err.println("warning: " + w);
      }
      // a bad output path found after minutes of simulation loses the whole run
      checkOutput("--json", o.json);
      checkOutput("--csv", o.csv);
      checkOutput("--chart", o.chart);
      checkOutput("--requests-csv", o.requestsCsv);
      checkDistinctOutputs(o);
    } catch (UsageException e) {
      err.println("error: " + e.getMessage());
      err.print(SHORT_USAGE);
      return 2;
    }
    try {
      List<ScenarioResult> results;
      List<Dominance.Verdict> verdicts = null;
      if (o.dominance) {
        long start = System.nanoTime();
        results = dominance(o, o.quiet ? null : err);
        verdicts = new ArrayList<>();
        for (ScenarioResult s : results) {
          verdicts.add(Dominance.judge(s, Dominance.SUBJECT));
        }
        Dominance.print(verdicts, out);
        out.printf(Locale.ROOT, "%d simulations in %.0f wall s (%d threads)%n",
            results.size() * Dominance.policies().size(), (System.nanoTime() - start) / 1e9,
            Dominance.THREADS);
      } else {
        results = compare(o, o.quiet ? null : err, err);
        for (ScenarioResult s : results) {
          Report.printTable(s, out);
          out.println();
        }
      }
      // the dominance points differ in seed, profile and replicas: each scenario entry says
      // which, and the run's own fields say there is no single value rather than a wrong one
      Report.RunInfo info = o.dominance
          ? new Report.RunInfo(version(), 0, 0, "per-scenario", 0, 0, o.scrapeIntervalMs,
              List.of(args))
          : new Report.RunInfo(version(), o.seed, o.replicas, o.profile.name(),
              o.profile.maxNumSeqs(), o.profile.maxNumBatchedTokens(), o.scrapeIntervalMs,
              List.of(args));
      List<Dominance.Verdict> dominance = verdicts;
      write("--json", o.json, p -> Report.writeJson(info, results, dominance, p));
      write("--csv", o.csv, p -> Report.writeCsv(info, results, p));
      write("--chart", o.chart, p -> Report.writeChart(results, p));
      List<String> failures = failures(results);
      for (String f : failures) {
        err.println("error: " + f);
      }
      return failures.isEmpty() ? 0 : 1;
    } catch (ConfigException e) {
      err.println("error: a policy configuration cannot be used:");
      for (String m : e.errors()) {
        err.println("  - " + m);
      }
      return 1;
    } catch (RunFailure | Workload.ArrivalTooLate e) {
      err.println("error: " + e.getMessage());
      return 1;
    }
  }

  /**
   * A policy that served no request measured nothing: its row of zeros must not pass for a
   * result (a plugin that throws on every call once produced exactly that, with exit code 0).
   */
  static List<String> failures(List<ScenarioResult> results) {
    List<String> out = new ArrayList<>();
    for (ScenarioResult s : results) {
      for (PolicyResult r : s.results()) {
        if (r.requests() > 0 || r.rejectedRequests() == 0) {
          continue;
        }
        String why = r.routerRejectedRequests() > 0
            ? "the router rejected " + r.routerRejectedRequests() + " (first: "
                + r.firstRouterRejection() + ")"
                + (r.routerRejectedRequests() < r.rejectedRequests()
                    ? ", the rest were longer than the model's context" : "")
            : "every one was longer than the model's context";
        out.add("policy '" + r.policy() + "' served no request on scenario '" + s.scenario()
            + "': all " + r.rejectedRequests() + " were rejected; " + why);
      }
    }
    return out;
  }

  private interface Writer {
    void write(Path p) throws IOException;
  }

  private static void write(String option, @Nullable Path p, Writer w) throws RunFailure {
    if (p == null) {
      return;
    }
    try {
      w.write(p);
    } catch (IOException | RuntimeException e) {
      throw new RunFailure(option + " " + p + ": cannot write (" + reason(e) + ")");
    }
  }

  /** Two reports given the same file would leave only the one written last. */
  static void checkDistinctOutputs(Options o) throws UsageException {
    Map<Path, String> seen = new LinkedHashMap<>();
    String[] names = {"--json", "--csv", "--chart", "--requests-csv"};
    @Nullable Path[] paths = {o.json, o.csv, o.chart, o.requestsCsv};
    for (int i = 0; i < names.length; i++) {
      Path p = paths[i];
      if (p == null) {
        continue;
      }
      String other = seen.putIfAbsent(p.toAbsolutePath().normalize(), names[i]);
      if (other != null) {
        throw new UsageException(other + " and " + names[i] + " name the same file " + p
            + "; each report needs a file of its own");
      }
      // a report written over an input would destroy it (the trace is read before the
      // requests CSV is opened, and every report is written after the run)
      String trace = o.trace;
      if (trace != null && sameFile(p, Path.of(trace.substring("mooncake:".length())))) {
        throw new UsageException(names[i] + " " + p + " is the file of --trace " + trace
            + "; the report would overwrite its input");
      }
      for (Policy policy : o.policies) {
        Path config = policy.file();
        if (config != null && sameFile(p, config)) {
          throw new UsageException(names[i] + " " + p + " is the file of --config " + config
              + "; the report would overwrite its input");
        }
      }
    }
  }

  /** Whether two paths name one file: the same path, or (both existing) links to one file. */
  private static boolean sameFile(Path a, Path b) {
    if (a.toAbsolutePath().normalize().equals(b.toAbsolutePath().normalize())) {
      return true;
    }
    try {
      return Files.exists(a) && Files.exists(b) && Files.isSameFile(a, b);
    } catch (IOException e) {
      return false;
    }
  }

  /** Rejects an output path that cannot be written, without leaving a file behind. */
  static void checkOutput(String option, @Nullable Path p) throws UsageException {
    if (p == null) {
      return;
    }
    Path abs = p.toAbsolutePath().normalize();
    if (Files.isDirectory(abs)) {
      throw new UsageException(option + " " + p + ": is a directory; give a file name");
    }
    Path parent = abs.getParent();
    if (parent != null && Files.exists(parent) && !Files.isDirectory(parent)) {
      throw new UsageException(option + " " + p + ": " + parent + " is a file, not a directory");
    }
    if (parent == null || !Files.isDirectory(parent)) {
      throw new UsageException(option + " " + p + ": directory " + parent + " does not exist");
    }
    if (Files.exists(abs)) {
      if (!Files.isRegularFile(abs) || !Files.isWritable(abs)) {
        throw new UsageException(option + " " + p + ": exists and cannot be overwritten");
      }
      return;
    }
    // only creating a file tells for sure: permissions, read-only and virtual file systems
    try {
      Files.createFile(abs);
      Files.delete(abs);
    } catch (IOException e) {
      throw new UsageException(option + " " + p + ": cannot create a file in " + parent + " ("
          + reason(e) + ")");
    }
  }

  private static String reason(Exception e) {
    if (e instanceof java.nio.file.NoSuchFileException) {
      return "no such file or directory";
    }
    if (e instanceof java.nio.file.AccessDeniedException) {
      return "permission denied";
    }
    if (e instanceof java.nio.file.FileSystemException f && f.getReason() != null) {
      return f.getReason();
    }
    return e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
  }

  /** The simulator's version, from the build; "unknown" when run from unfiltered classes. */
  static String version() {
    try (var in = Main.class.getResourceAsStream("version.properties")) {
      if (in != null) {
        java.util.Properties p = new java.util.Properties();
        p.load(in);
        String v = p.getProperty("version", "");
        if (!v.isBlank() && !v.contains("${")) {
          return v;
        }
      }
    } catch (IOException e) {
      // fall through: the version is metadata, not worth failing a run for
    }
    return "unknown";
  }

  /**
   * Where the default trace may be, in order: beside the repository whose build holds this
   * code (found from the jar's or classes' location, {@code <repo>/<module>/target/...}), then
   * one level further up (a worktree in a subfolder), then beside the working directory, as
   * a relative {@code ../shared/...} would be resolved.
   */
  static List<Path> traceCandidates(@Nullable Path codeLocation, Path workingDirectory) {
    List<Path> out = new ArrayList<>();
    Path repo = repositoryOf(codeLocation);
    if (repo != null) {
      Path a = repo.getParent();
      for (int i = 0; i < 2 && a != null; i++, a = a.getParent()) {
        out.add(a.resolve(SHARED_TRACE));
      }
    }
    Path cwdParent = workingDirectory.toAbsolutePath().normalize().getParent();
    if (cwdParent != null && !out.contains(cwdParent.resolve(SHARED_TRACE))) {
      out.add(cwdParent.resolve(SHARED_TRACE));
    }
    return out;
  }

  static List<Path> defaultTraceCandidates() {
    return traceCandidates(codeLocation(), Path.of(""));
  }

  private static @Nullable Path repositoryOf(@Nullable Path codeLocation) {
    for (Path p = codeLocation; p != null; p = p.getParent()) {
      Path name = p.getFileName();
      if (name != null && name.toString().equals("target")) {
        Path module = p.getParent();
        return module == null ? null : module.getParent();
      }
    }
    return null;
  }

  private static @Nullable Path codeLocation() {
    try {
      var src = Main.class.getProtectionDomain().getCodeSource();
      return src == null ? null : Path.of(src.getLocation().toURI()).toAbsolutePath().normalize();
    } catch (URISyntaxException | RuntimeException e) {
      return null;
    }
  }

  /** Runs every scenario × load level × policy of the options. */
  static List<ScenarioResult> compare(Options o, @Nullable PrintStream progress,
      PrintStream err) throws RunFailure {
    HardwareProfile hw = o.profile;
    Simulation.Settings settings = new Simulation.Settings(hw, o.replicas, o.seed,
        Math.round(o.scrapeIntervalMs * 1e6), progress);
    // every workload first: a missing trace must not wait for the other scenarios to run
    List<Workload> workloads = new ArrayList<>();
    for (String scenario : o.scenarios) {
      Workload w = o.workload(scenario, hw);
      String shortfall = o.requestsShortfall(w);
      if (shortfall != null) {
        // even with --quiet, as the options that have no effect
        err.println("warning: " + shortfall);
      }
      noteBlankLines(w, progress);
      workloads.add(w);
    }
    List<ScenarioResult> out = new ArrayList<>();
    try (RouterWarnings warnings = new RouterWarnings(progress);
        RequestsCsv requests = RequestsCsv.open(o.requestsCsv)) {
      for (Workload base : workloads) {
        for (double level : o.loadLevels) {
          Workload w = base.atLoad(level);
          String label = o.loadLevels.size() > 1 || level != 1.0
              ? w.name() + " ×" + levelText(level) : w.name();
          List<PolicyResult> rs = new ArrayList<>();
          for (Policy p : o.policies) {
            if (progress != null) {
              progress.printf("running %s / %s ...%n", label, p.name());
            }
            Simulation sim = new Simulation(settings, w, p, null).gateways(o.gateways,
                o.replicated, Math.round(o.replicationDelayMs * 1e6)).kvLink(o.kvLink);
            if (o.pdPrefill > 0) {
              sim.pd(o.pdPrefill, o.pdDecode);
            }
            if (requests != null) {
              sim.requestLog(requests.rowsOf(w.name(), level, o.seed, p.name()));
            }
            PolicyResult r = sim.run();
            if (progress != null) {
              progress.printf("  %s / %s: %d requests in %.2f s (%.0f simulated requests/s)%n",
                  label, p.name(), r.requests(), r.wallSeconds(),
                  r.simulatedRequestsPerWallSecond());
              if (r.routerRejectedRequests() > 0) {
                progress.printf("  %s / %s: %d requests rejected by the router (first: %s)%n",
                    label, p.name(), r.routerRejectedRequests(), r.firstRouterRejection());
              }
              warnings.summarize(label + " / " + p.name());
            }
            rs.add(r);
          }
          out.add(scenarioResult(base, level, hw, o.replicas, o.seed, rs, w.parameters()));
        }
      }
    } catch (IOException e) {
      throw new RunFailure("--requests-csv " + o.requestsCsv + ": cannot write (" + reason(e)
          + ")");
    } catch (UncheckedIOException e) {
      // a row that could not be written, from inside a run
      IOException cause = e.getCause();
      throw new RunFailure("--requests-csv " + o.requestsCsv + ": cannot write ("
          + reason(cause == null ? e : cause) + ")");
    }
    return out;
  }

  /** A trace's blank lines are skipped, and said so (not with --quiet). */
  private static void noteBlankLines(Workload w, @Nullable PrintStream progress) {
    if (progress != null && w instanceof MooncakeTraceWorkload t && t.blankLines() > 0) {
      progress.printf("trace: %d blank line%s skipped%n", t.blankLines(),
          t.blankLines() == 1 ? "" : "s");
    }
  }

  /**
   * The dominance experiment: shared-prefix and multi-turn on the default profile and 6 replicas,
   * the Mooncake trace on {@code llama3.1-8b-h100} and 8 replicas.
   */
  static List<ScenarioResult> dominance(Options o, @Nullable PrintStream progress)
      throws RunFailure {
    HardwareProfile small = HardwareProfile.qwen3H100Mps6();
    HardwareProfile full = HardwareProfile.llama31H100();
    Workload trace = o.workload(MooncakeTraceWorkload.NAME, full);
    noteBlankLines(trace, progress);
    List<Dominance.Scenario> scenarios = List.of(
        new Dominance.Scenario(SharedPrefixWorkload.defaults(), small, 6),
        new Dominance.Scenario(MultiTurnWorkload.defaults(), small, 6),
        new Dominance.Scenario(trace, full, 8));
    try (RouterWarnings warnings = new RouterWarnings(progress)) {
      List<ScenarioResult> out = Dominance.run(scenarios, Dominance.LEVELS, Dominance.SEEDS,
          Dominance.policies(), Math.round(o.scrapeIntervalMs * 1e6), Dominance.THREADS,
          progress);
      if (progress != null) {
        warnings.summarize("dominance");
      }
      return out;
    }
  }

  /**
   * One scenario at one load level: the results with the workload's facts (hit-rate ceiling,
   * capacity crossover) computed from {@code base} and added to the header.
   */
  static ScenarioResult scenarioResult(Workload base, double level, HardwareProfile hw,
      int replicas, long seed, List<PolicyResult> rs, Map<String, Object> load) {
    Workload w = base.atLoad(level);
    double ceiling = w.hitRateCeiling(seed, hw.blockSize(), hw.maxModelLen());
    double crossover = base.capacityCrossover(hw, replicas);
    String description = w.describe(hw, replicas) + String.format(Locale.ROOT,
        "%nLoad level %s; hit-rate ceiling %.1f%% (an infinite cache, every request on one"
            + " replica); %s.", levelText(level), ceiling * 100, base.crossoverNote(hw, replicas));
    return new ScenarioResult(base.name(), description, rs, load, level, seed, ceiling, crossover);
  }

  static String levelText(double level) {
    return level == Math.rint(level) ? String.format(Locale.ROOT, "%.0f", level)
        : String.format(Locale.ROOT, "%s", level);
  }

  /** Parsed command line. */
  static final class Options {
    boolean help;
    boolean quiet;
    List<String> scenarios = List.of(SharedPrefixWorkload.NAME, MultiTurnWorkload.NAME);
    List<Policy> policies = new ArrayList<>(Policy.presets().values());
    int replicas = 6;
    private boolean replicasGiven;
    /** {@code --pd P:D}: prefill and decode replicas; 0 and 0 without roles. */
    int pdPrefill;
    int pdDecode;
    KvLink kvLink = KvLink.rdma400g();
    private boolean kvLinkGiven;
    /**
     * Median delay from a route on one router to its hint applied on another through a local
     * redis-server (routing-redis RedisReplicationTest#replicationDelay, see its README).
     */
    static final double DEFAULT_REPLICATION_DELAY_MS = 2.0;
    int gateways = 1;
    boolean replicated;
    double replicationDelayMs = DEFAULT_REPLICATION_DELAY_MS;
    private boolean replicationDelayGiven;
    long seed = 1;
    int requests = -1;
    double scrapeIntervalMs = 50;
    HardwareProfile profile = HardwareProfile.qwen3H100Mps6();
    @Nullable Path json;
    @Nullable Path csv;
    @Nullable Path chart;
    /** {@code --requests-csv}: one row per completed request of every run. */
    @Nullable Path requestsCsv;
    SharedPrefixWorkload shared = SharedPrefixWorkload.defaults();
    MultiTurnWorkload multi = MultiTurnWorkload.defaults();
    /** {@code mooncake:PATH}, or null for the shared trace beside the repository. */
    @Nullable String trace;
    double timeScale = 1.0;
    /** Multipliers of every scenario's offered load ({@code --load-levels}). */
    List<Double> loadLevels = List.of(1.0);
    /** {@code --dominance}: the fixed epp4j-against-the-rest experiment. */
    boolean dominance;
    /** Options given that shape a scenario this run does not include, one line each. */
    final List<String> warnings = new ArrayList<>();
    /** Engine limits given on the command line, -1 when not. */
    private int maxSeqs = -1;
    private int maxBatched = -1;
    private boolean policiesGiven;

    /** Options whose value is a comma-separated list. */
    static final java.util.Set<String> LISTS = java.util.Set.of("--scenario", "--policies",
        "--load-levels");

    /** Options that are flags: {@code --quiet=yes} is an error naming the flag. */
    static final java.util.Set<String> FLAGS = java.util.Set.of("--quiet", "--dominance",
        "--help");

    /**
     * The error for an argument that is no option's value and does not begin with {@code --}:
     * one that begins with a single dash ({@code -x}) is an unknown option, as {@code --x}
     * would be; a word, a lone {@code -} or a negative number ({@code -3}, which an option takes
     * as its value) is unexpected there.
     */
    static UsageException notAnOption(String a) {
      return new UsageException(isSingleDashOption(a) ? "unknown option '" + a + "'"
          : "unexpected argument '" + a + "'");
    }

    /**
     * The end of the message for {@code option} given no value but followed by {@code next}, an
     * option ({@code --x}, {@code -x}), which is not taken as its value.
     */
    static String followedByOption(String option, String next) {
      return ", but is followed by the option " + next + " (a value that begins with "
          + (next.startsWith("--") ? "--" : "a dash and is not a number") + " is given as "
          + option + "=VALUE)";
    }

    /** Whether {@code a} begins with one dash and is neither a lone dash nor a negative number. */
    static boolean isSingleDashOption(String a) {
      return a.length() > 1 && a.charAt(0) == '-' && !a.matches("-\\.?[0-9].*");
    }

    static Options parse(String[] args) throws UsageException {
      Options o = new Options();
      Map<String, String> kv = new LinkedHashMap<>();
      List<Path> configs = new ArrayList<>();
      @Nullable String missingValue = null;
      @Nullable String followedBy = null;
      for (int i = 0; i < args.length; i++) {
        String a = args[i];
        if (a.equals("--help") || a.equals("-h")) {
          o.help = true;
          continue;
        }
        if (a.equals("--quiet")) {
          o.quiet = true;
          continue;
        }
        if (a.equals("--dominance")) {
          o.dominance = true;
          continue;
        }
        if (!a.startsWith("--")) {
          throw notAnOption(a);
        }
        String name = a;
        String value;
        int eq = a.indexOf('=');
        if (eq > 0) {
          name = a.substring(0, eq);
          value = a.substring(eq + 1);
          if (FLAGS.contains(name)) {
            throw new UsageException(name + " takes no value");
          }
        } else {
          if (i + 1 >= args.length) {
            // the last argument: an option that needs a value, or a misspelt one (--quite)
            missingValue = a;
            break;
          }
          String next = args[i + 1];
          if (next.startsWith("--") || next.equals("-h") || isSingleDashOption(next)) {
            // an option whose value was left out would take the next option as its value:
            // "--json --quiet" wrote the report to a file named --quiet and ran without --quiet,
            // "--json -q" to a file named -q (a negative number, "--seed -3", is a value)
            missingValue = a;
            followedBy = next;
            break;
          }
          value = args[++i];
        }
        if (name.equals("--config")) {
          configs.add(Path.of(value));
        } else {
          String before = kv.put(name, value);
          if (before != null) {
            // the last one would win silently, and the run would not be the one intended
            throw new UsageException(name + " is given twice ('" + before + "' and '" + value
                + "'); give it once" + (name.startsWith("--") && LISTS.contains(name)
                    ? " with a comma-separated list" : ""));
          }
        }
      }
      o.apply(kv, configs, missingValue, followedBy);
      return o;
    }

    /**
     * Applies the options in command-line order. {@code missingValue} is an option given no
     * value: the last argument, or one followed by {@code followedBy}, another option (a value
     * that begins with {@code --} is given as {@code --name=value}).
     */
    private void apply(Map<String, String> kv, List<Path> configs, @Nullable String missingValue,
        @Nullable String followedBy) throws UsageException {
      WorkloadOptions w = new WorkloadOptions(shared, multi);
      // options apply in command-line order, so the first bad one is the one reported
      for (Map.Entry<String, String> e : kv.entrySet()) {
        if (!applyRunOption(e.getKey(), e.getValue()) && !w.apply(e.getKey(), e.getValue())) {
          throw new UsageException("unknown option '" + e.getKey() + "'");
        }
      }
      if (missingValue != null) {
        if (!isOption(missingValue, w)) {
          throw new UsageException("unknown option '" + missingValue + "'");
        }
        throw new UsageException(missingValue + " needs a value" + (followedBy == null ? ""
            : followedByOption(missingValue, followedBy)));
      }
      if (pdPrefill > 0) {
        int n = pdPrefill + pdDecode;
        if (replicasGiven && replicas != n) {
          throw new UsageException("--pd " + pdPrefill + ":" + pdDecode + " makes " + n
              + " replicas, but --replicas gives " + replicas + "; give --pd alone");
        }
        replicas = n;
      } else if (kvLinkGiven) {
        warnings.add("--kv-link has no effect: only a --pd cluster moves KV between replicas");
      }
      // hints are shared only between the routers of several gateways
      if (replicated && gateways == 1) {
        warnings.add("--shared-state replicated has no effect: one gateway has no other router"
            + " to share hints with (add --gateways N, N at least 2)");
      } else if (replicationDelayGiven && !(replicated && gateways > 1)) {
        warnings.add("--replication-delay-ms has no effect: only the routers of --gateways N"
            + " with --shared-state replicated share hints");
      }
      if (maxSeqs > 0 || maxBatched > 0) {
        int batched = maxBatched > 0 ? maxBatched : profile.maxNumBatchedTokens();
        int seqs = maxSeqs > 0 ? maxSeqs : profile.maxNumSeqs();
        if (batched < seqs) {
          // vLLM refuses to start so (SchedulerConfig): every sequence of a step needs a token
          // of the step's budget, so the run would model an engine that cannot exist
          String option = maxBatched > 0 ? "--max-num-batched-tokens" : "--max-num-seqs";
          throw new UsageException(option + ": max_num_batched_tokens (" + batched
              + (maxBatched > 0 ? "" : ", the profile's") + ") must be greater than or equal to"
              + " max_num_seqs (" + seqs + (maxSeqs > 0 ? "" : ", the profile's")
              + "), as vLLM requires; raise --max-num-batched-tokens or lower --max-num-seqs");
        }
        profile = profile.withEngineLimits(batched, seqs);
      }
      shared = new SharedPrefixWorkload(w.groups, w.users, w.system, w.question, w.output,
          requests > 0 ? requests : shared.requests(), w.concurrency, w.rate);
      multi = new MultiTurnWorkload(w.dialogs, w.turns, w.mtSystem, w.user, w.reply,
          w.think, w.startSpread);
      addConfigPolicies(configs);
      String t = trace;
      if (t != null && (dominance || scenarios.contains(MooncakeTraceWorkload.NAME))) {
        // checked before anything runs (a trace given to a run that leaves it out is only
        // named in a warning, below)
        Path file = Path.of(t.substring("mooncake:".length()));
        if (!Files.exists(file)) {
          throw new UsageException("--trace " + t + ": file not found");
        }
        if (Files.isDirectory(file)) {
          throw new UsageException("--trace " + t + ": is a directory; give a JSONL file");
        }
        if (!Files.isReadable(file)) {
          throw new UsageException("--trace " + t + ": cannot be read (permission denied)");
        }
      }
      if (dominance) {
        for (String k : kv.keySet()) {
          if (!DOMINANCE_OPTIONS.contains(k)) {
            throw new UsageException("--dominance runs a fixed experiment; " + k
                + " does not apply to it (it takes " + String.join(", ", DOMINANCE_OPTIONS)
                + ", --quiet)");
          }
        }
        if (!configs.isEmpty()) {
          throw new UsageException("--dominance runs a fixed experiment; --config does not"
              + " apply to it");
        }
      }
      if (policies.isEmpty()) {
        throw new UsageException("no policy to run");
      }
      if (kv.containsKey("--rate") && kv.containsKey("--concurrency")) {
        // Poisson arrivals are an open loop: no client waits for an answer
        warnings.add("--concurrency has no effect: --rate sends Poisson arrivals, which wait"
            + " for no client (give one of them)");
      }
      if (!dominance) {
        for (String k : kv.keySet()) {
          List<String> owners = scenariosOf(k);
          if (!owners.isEmpty() && owners.stream().noneMatch(scenarios::contains)) {
            warnings.add(k + " has no effect: it sets the " + String.join(" and ", owners)
                + (owners.size() == 1 ? " scenario" : " scenarios") + ", which this run"
                + " does not include (scenarios: " + String.join(", ", scenarios)
                + "; add " + (owners.size() == 1 ? "it" : "one") + " with --scenario)");
          }
        }
      }
    }

    /**
     * The scenarios an option shapes (it has an effect when any of them runs), or an empty list
     * for options of the run itself.
     */
    static List<String> scenariosOf(String option) {
      return switch (option) {
        case "--groups", "--users-per-group", "--system-prompt-len", "--question-len",
            "--output-len", "--concurrency", "--rate" -> List.of(SharedPrefixWorkload.NAME);
        case "--dialogs", "--turns", "--mt-system-len", "--user-len", "--reply-len",
            "--think-time", "--start-spread" -> List.of(MultiTurnWorkload.NAME);
        case "--trace", "--time-scale" -> List.of(MooncakeTraceWorkload.NAME);
        // shared-prefix's request count, and the trace's first N lines
        case "--requests" -> List.of(SharedPrefixWorkload.NAME, MooncakeTraceWorkload.NAME);
        default -> List.of();
      };
    }

    /**
     * Whether {@code name} is an option that takes a value: it is tried with an empty value,
     * which such an option takes or refuses; neither part knows an unknown one. Only called when
     * the command line is about to be refused anyway, so what the try sets does not matter.
     */
    private boolean isOption(String name, WorkloadOptions w) {
      if (name.equals("--config")) {
        return true;
      }
      try {
        return applyRunOption(name, "") || w.apply(name, "");
      } catch (UsageException | RuntimeException e) {
        return true;
      }
    }

    /**
     * Applies an option about the run itself (scenarios, policies, cluster, outputs, trace);
     * false when {@code name} is not one.
     */
    private boolean applyRunOption(String name, String v) throws UsageException {
      switch (name) {
        case "--scenario" -> scenarios = scenarioList(v);
        case "--policies" -> {
          policiesGiven = true;
          policies = policyList(v);
        }
        case "--replicas" -> {
          replicas = intArg(name, v, 1, 4096);
          replicasGiven = true;
        }
        case "--pd" -> {
          int[] pd = pdArg(v);
          pdPrefill = pd[0];
          pdDecode = pd[1];
        }
        case "--kv-link" -> {
          KvLink l = KvLink.named(v.trim());
          if (l == null) {
            throw new UsageException("--kv-link: unknown link '" + v + "' (known: "
                + String.join(", ", KvLink.builtIns().keySet()) + ")");
          }
          kvLink = l;
          kvLinkGiven = true;
        }
        case "--gateways" -> gateways = intArg(name, v, 1, 1024);
        case "--shared-state" -> {
          if (!v.equals("none") && !v.equals("replicated")) {
            throw new UsageException("--shared-state must be none or replicated, got '" + v + "'");
          }
          replicated = v.equals("replicated");
        }
        case "--replication-delay-ms" -> {
          replicationDelayMs = doubleArg(name, v, 0, 3_600_000);
          replicationDelayGiven = true;
        }
        case "--seed" -> seed = longArg(name, v);
        case "--requests" -> requests = intArg(name, v, 1, 10_000_000);
        case "--scrape-interval" -> scrapeIntervalMs = doubleArg(name, v, 0.001, 3_600_000);
        case "--profile" -> {
          HardwareProfile p = HardwareProfile.named(v);
          if (p == null) {
            throw new UsageException("--profile: unknown profile '" + v + "' (known: "
                + String.join(", ", HardwareProfile.builtIns().keySet()) + ")");
          }
          profile = p;
        }
        case "--max-num-seqs" -> maxSeqs = intArg(name, v, 1, 1_000_000);
        case "--max-num-batched-tokens" -> maxBatched = intArg(name, v, 1, 10_000_000);
        case "--json" -> json = Path.of(v);
        case "--csv" -> csv = Path.of(v);
        case "--chart" -> chart = Path.of(v);
        case "--requests-csv" -> requestsCsv = Path.of(v);
        case "--trace" -> {
          if (!v.startsWith("mooncake:") || v.length() == "mooncake:".length()) {
            throw new UsageException("--trace must be mooncake:PATH, got '" + v + "'");
          }
          trace = v;
        }
        case "--time-scale" -> timeScale = doubleArg(name, v, 1e-6, 1e6);
        case "--load-levels" -> loadLevels = levelList(v);
        default -> {
          return false;
        }
      }
      return true;
    }

    /** Options {@code --dominance} accepts next to {@code --quiet}. */
    static final List<String> DOMINANCE_OPTIONS = List.of("--json", "--csv", "--chart",
        "--trace", "--scrape-interval");

    /**
     * The entries of a comma-separated list, trimmed; an empty list or entry is an error naming
     * the option (a stray comma is more often a missing value than a style).
     */
    static List<String> listArg(String name, String v) throws UsageException {
      if (v.isBlank()) {
        throw new UsageException(name + " needs a comma-separated list, got '" + v + "'");
      }
      List<String> out = new ArrayList<>();
      for (String s : v.split(",", -1)) {
        if (s.isBlank()) {
          throw new UsageException(name + ": empty entry in '" + v + "'");
        }
        out.add(s.trim());
      }
      return out;
    }

    /** {@code P:D}, each at least 1, together at most 4096 replicas as {@code --replicas}. */
    static int[] pdArg(String v) throws UsageException {
      String form = "--pd must be P:D, the prefill and decode replicas (each at least 1),";
      String[] parts = v.split(":", -1);
      if (parts.length != 2) {
        throw new UsageException(form + " got '" + v + "'");
      }
      int[] out = new int[2];
      for (int i = 0; i < 2; i++) {
        try {
          out[i] = Integer.parseInt(asciiInteger(parts[i].trim()));
        } catch (NumberFormatException e) {
          throw new UsageException(form + " got '" + v + "'");
        }
        if (out[i] < 1) {
          throw new UsageException(form + " got '" + v + "'");
        }
      }
      if ((long) out[0] + out[1] > 4096) {
        throw new UsageException("--pd " + v + " makes more than 4096 replicas");
      }
      return out;
    }

    private static List<Double> levelList(String v) throws UsageException {
      List<Double> list = new ArrayList<>();
      for (String s : listArg("--load-levels", v)) {
        double x = doubleArg("--load-levels", s, 0.01, 1000);
        if (list.contains(x)) {
          throw new UsageException("--load-levels lists " + s.trim() + " twice");
        }
        list.add(x);
      }
      if (list.isEmpty()) {
        throw new UsageException("--load-levels needs at least one level");
      }
      return list;
    }

    private static List<String> scenarioList(String v) throws UsageException {
      List<String> list = new ArrayList<>();
      for (String s : listArg("--scenario", v)) {
        String t = s.toLowerCase(Locale.ROOT);
        if (!SCENARIOS.contains(t)) {
          throw new UsageException("--scenario: unknown scenario '" + s + "' ("
              + String.join(", ", SCENARIOS) + ")");
        }
        if (list.contains(t)) {
          throw new UsageException("--scenario lists " + t + " twice");
        }
        list.add(t);
      }
      return list;
    }

    private static List<Policy> policyList(String v) throws UsageException {
      List<Policy> list = new ArrayList<>();
      for (String s : listArg("--policies", v)) {
        String t = s.toLowerCase(Locale.ROOT);
        Policy p = Policy.allPresets().get(t);
        if (p == null) {
          throw new UsageException("--policies: unknown policy '" + s + "' (presets: "
              + String.join(", ", Policy.allPresets().keySet()) + ")");
        }
        if (list.contains(p)) {
          throw new UsageException("--policies lists " + t + " twice");
        }
        list.add(p);
      }
      return list;
    }

    /** {@code --config} files run after the presets given, or alone when none was given. */
    private void addConfigPolicies(List<Path> configs) throws UsageException {
      if (configs.isEmpty()) {
        return;
      }
      if (!policiesGiven) {
        policies = new ArrayList<>();
      }
      for (Path c : configs) {
        if (Files.isDirectory(c)) {
          throw new UsageException("--config " + c + ": is a directory; give a YAML file");
        }
        if (!Files.isReadable(c)) {
          throw new UsageException("--config " + c + ": file not found or not readable");
        }
        Policy p = Policy.fromFile(c);
        // a policy is known by its name in the table, the JSON and the CSVs
        for (Policy q : policies) {
          if (q.name().equals(p.name())) {
            throw new UsageException("--config " + c + ": its policy is named '" + p.name()
                + "' (after the file), as is " + (q.file() != null
                    ? "that of --config " + q.file() : "the preset given with --policies")
                + "; rename the file");
          }
        }
        policies.add(p);
      }
    }

    /**
     * The warning for a {@code --requests N} that {@code w} cannot reach (a trace of fewer
     * lines, which is replayed whole), or null.
     */
    @Nullable String requestsShortfall(Workload w) {
      if (requests > 0 && w instanceof MooncakeTraceWorkload t && t.size() < requests) {
        return String.format(Locale.ROOT, "--requests %d: the trace holds only %d request%s;"
            + " all of them are replayed, %d fewer than asked for", requests, t.size(),
            t.size() == 1 ? "" : "s", requests - t.size());
      }
      return null;
    }

    Workload workload(String scenario, HardwareProfile hw) throws RunFailure {
      return switch (scenario) {
        case SharedPrefixWorkload.NAME -> shared;
        case MultiTurnWorkload.NAME -> multi;
        case MooncakeTraceWorkload.NAME -> loadTrace(hw);
        default -> throw new IllegalArgumentException("unknown scenario " + scenario);
      };
    }

    private Workload loadTrace(HardwareProfile hw) throws RunFailure {
      Path path;
      if (trace != null) {
        path = Path.of(trace.substring("mooncake:".length()));
      } else {
        List<Path> looked = defaultTraceCandidates();
        path = looked.stream().filter(Files::isReadable).findFirst().orElseThrow(() ->
            new RunFailure("the shared Mooncake trace was not found; looked at "
                + looked.stream().map(Path::toString).collect(Collectors.joining(", "))
                + ". It lives in shared/traces/ beside the repository (not part of it);"
                + " give a trace with --trace mooncake:PATH"));
      }
      try {
        MooncakeTraceWorkload w = MooncakeTraceWorkload.load(path, Math.max(0, requests),
            timeScale, hw.maxModelLen());
        for (double level : loadLevels) {
          w.atLoad(level); // a level below 1 slows the trace: its last arrival must still fit
        }
        return w;
      } catch (java.nio.file.NoSuchFileException e) {
        throw new RunFailure("trace file not found: " + path);
      } catch (IOException e) {
        throw new RunFailure("trace " + path + " cannot be read (" + reason(e) + ")");
      } catch (IllegalArgumentException e) {
        throw new RunFailure("trace " + e.getMessage());
      }
    }

    static int intArg(String name, String v, int min, int max) throws UsageException {
      long x = longArg(name, v);
      if (x < min || x > max) {
        throw new UsageException(name + " must be in [" + min + ", " + max + "], got " + v);
      }
      return (int) x;
    }

    static long longArg(String name, String v) throws UsageException {
      try {
        return Long.parseLong(asciiInteger(v.trim()));
      } catch (NumberFormatException e) {
        throw new UsageException(name + " needs an integer, got '" + v + "'");
      }
    }

    /**
     * {@code v} when it is an optional sign and the digits 0-9; Long.parseLong alone also takes
     * the digits of other scripts ("３" and "٣" read as 3), which no other number option takes.
     */
    static String asciiInteger(String v) {
      if (!v.matches("[+-]?[0-9]+")) {
        throw new NumberFormatException(v);
      }
      return v;
    }

    static double doubleArg(String name, String v, double min, double max)
        throws UsageException {
      // plain decimals only: parseDouble also takes a type suffix and hexadecimal ("2d", "0x1p3")
      if (!Serve.isDecimal(v.trim())) {
        throw new UsageException(name + " needs a number, got '" + v + "'");
      }
      double x = Double.parseDouble(v.trim());
      if (!(x >= min && x <= max)) {
        throw new UsageException(name + " must be in [" + min + ", " + max + "], got " + v);
      }
      return x;
    }

    static LengthDist lengthArg(String name, String v) throws UsageException {
      try {
        return LengthDist.parse(v);
      } catch (IllegalArgumentException e) {
        throw new UsageException(name + ": " + e.getMessage());
      }
    }
  }
}
