package io.epp4j.sim;

import java.io.PrintStream;
import java.net.URI;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * The {@code load} command: replays the simulator's workloads against an OpenAI-compatible base
 * URL with {@link LoadGenerator} and prints the simulator's report. Exit codes: 0 done (failed
 * requests are counted in the report, not an exit code), 1 no request completed at all or a
 * report that cannot be written, 2 bad usage.
 */
final class LoadCommand {
  private LoadCommand() {}

  static final String USAGE = """
      usage: routing-sim load --target BASE_URL [options]

      Replays the simulator's workloads over HTTP against an OpenAI-compatible server or gateway
      (POST BASE_URL/v1/completions, token-ID prompts, streamed with include_usage, the session
      key in x-session-id) and prints the simulator's table measured by the client: TTFT, time
      between tokens, end-to-end latency, cached tokens from usage, failures by kind. Progress on
      stderr. Stops by itself when every request of the workload has ended.

        --target URL           base URL, e.g. http://127.0.0.1:8100 (required)
        --label NAME           the row's name in the table (default: load)
        --model NAME           model field of the requests, not empty (default: the first of
                               GET /v1/models)
        --speed X              the target's emulated seconds per wall second (serve --speed):
                               the workload's clock runs X times faster and measured times are
                               multiplied by X (default 1)
        --max-requests N       send at most N measured requests, the warm-up aside
                               (default: all the workload's)
        --timeout-s S          per request, sending to the end of its answer (default 60)
        --warmup N             N unmeasured requests first (1,024-token prompts of their own,
                               four at a time), so the JIT has compiled the request path of
                               client and server (default 0)
        --json PATH            write the report as JSON (checked before the run)
        --chart PATH.png       draw the TTFT CDF of each scenario (checked before the run)
        --quiet                no progress on stderr

      Workload options as in the simulator (java -jar routing-sim.jar --help): --scenario
      (shared-prefix, multi-turn, trace; default shared-prefix), --seed, --requests, --groups,
      --users-per-group, --system-prompt-len, --question-len, --output-len, --concurrency, --rate,
      --dialogs, --turns, --mt-system-len, --user-len, --reply-len, --think-time,
      --start-spread, --trace, --time-scale.
      Exit codes: 0 done (failed requests are in the report); 1 no request completed, or the
      report cannot be written; 2 bad usage.
      """;

  /** The options {@code load} reads itself; the others go to the simulator's parser. */
  private static final Set<String> LOAD_OPTIONS = Set.of("--target", "--label", "--model",
      "--speed", "--max-requests", "--timeout-s", "--warmup");

  /** Simulator options that make no sense against a server. */
  private static final Set<String> NOT_FOR_LOAD = Set.of("--policies", "--config", "--replicas",
      "--profile", "--scrape-interval", "--max-num-seqs", "--max-num-batched-tokens", "--csv",
      "--load-levels", "--dominance", "--gateways", "--shared-state", "--replication-delay-ms",
      "--requests-csv", "--pd", "--kv-link");

  /** Parsed {@code load} options. */
  record Options(URI target, String label, @Nullable String model, double speed, int maxRequests,
      Duration timeout, int warmup, @Nullable Path json, @Nullable Path chart, boolean quiet,
      List<Workload> workloads, long seed, List<String> arguments, List<String> warnings) {}

  static int run(String[] args, PrintStream out, PrintStream err) {
    Options o;
    try {
      o = parse(args);
      if (o == null) {
        out.print(USAGE);
        return 0;
      }
    } catch (Main.UsageException e) {
      err.println("error: " + e.getMessage());
      err.println("usage: routing-sim load --target BASE_URL [options]   (load --help for all)");
      return 2;
    } catch (Main.RunFailure e) {
      err.println("error: " + e.getMessage());
      return 1;
    }
    for (String w : o.warnings()) {
      err.println("warning: " + w);
    }
    PrintStream progress = o.quiet() ? null : err;
    LoadGenerator.Settings settings = new LoadGenerator.Settings(o.target(), o.model(),
        o.timeout(), o.maxRequests(), o.speed(), o.seed(), progress);
    List<LoadReport.Scenario> scenarios = new ArrayList<>();
    LoadGenerator gen = new LoadGenerator(settings);
    try {
      if (o.warmup() > 0) {
        if (progress != null) {
          progress.printf("warm-up: %d requests (not measured) ...%n", o.warmup());
        }
        Map<String, Integer> failed = gen.warmUp(o.warmup());
        if (!failed.isEmpty() && progress != null) {
          progress.println("  warm-up failures: " + failed);
        }
      }
      for (Workload w : o.workloads()) {
        if (progress != null) {
          progress.printf("running %s against %s ...%n", w.name(), o.target());
        }
        LoadGenerator.Result r = gen.run(w, o.label());
        LoadReport.Scenario s = LoadReport.Scenario.of(w, o.target().toString(), o.speed(),
            List.of(r));
        LoadReport.print(s, out);
        out.println();
        scenarios.add(s);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      err.println("error: interrupted");
      return 1;
    } finally {
      gen.close();
    }
    if (o.json() != null) {
      Report.RunInfo info = LoadReport.runInfo(o.seed(), 0, false, 0, o.arguments());
      try {
        LoadReport.writeJson(info, scenarios, Map.of("target", o.target().toString()), o.json());
      } catch (java.io.IOException | RuntimeException e) {
        err.println("error: --json " + o.json() + ": cannot write (" + e.getMessage() + ")");
        return 1;
      }
    }
    if (o.chart() != null) {
      try {
        Report.writeChart(scenarios.stream().map(LoadReport.Scenario::result).toList(), o.chart());
      } catch (java.io.IOException | RuntimeException e) {
        err.println("error: --chart " + o.chart() + ": cannot write (" + e.getMessage() + ")");
        return 1;
      }
    }
    boolean none = scenarios.stream().anyMatch(s -> s.result().results().get(0).requests() == 0);
    if (none) {
      err.println("error: no request completed in at least one scenario; see the failures above");
      return 1;
    }
    return 0;
  }

  /** Parses the options after {@code load}; null when help was asked for. */
  static @Nullable Options parse(String[] args) throws Main.UsageException, Main.RunFailure {
    URI target = null;
    String label = "load";
    String model = null;
    double speed = 1;
    int maxRequests = Integer.MAX_VALUE;
    Duration timeout = Duration.ofSeconds(60);
    int warmup = 0;
    boolean scenarioGiven = false;
    List<String> rest = new ArrayList<>();
    java.util.Set<String> given = new java.util.HashSet<>();
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      if (a.equals("--help") || a.equals("-h")) {
        return null;
      }
      if (a.equals("--quiet")) {
        rest.add(a);
        continue;
      }
      if (!a.startsWith("--")) {
        throw Main.Options.notAnOption(a);
      }
      if (a.equals("--dominance")) { // a flag: named before a value is looked for
        throw new Main.UsageException(a + " does not apply to load (it measures a server;"
            + " load --help lists the options)");
      }
      String name = a;
      String v;
      int eq = a.indexOf('=');
      if (eq > 0) {
        name = a.substring(0, eq);
        v = a.substring(eq + 1);
        if (Main.Options.FLAGS.contains(name)) {
          throw new Main.UsageException(name + " takes no value");
        }
      } else {
        if (i + 1 >= args.length) {
          if (!LOAD_OPTIONS.contains(a) && !NOT_FOR_LOAD.contains(a)) {
            // a workload option, or none: the simulator's parser says which
            rest.add(a);
            continue;
          }
          if (LOAD_OPTIONS.contains(a)) {
            throw new Main.UsageException(a + " needs a value");
          }
          v = "";
        } else if (args[i + 1].startsWith("--") || args[i + 1].equals("-h")
            || Main.Options.isSingleDashOption(args[i + 1])) {
          // the next argument is an option, not this one's value ("--label --quiet" named the
          // run "--quiet" and ran without --quiet; "--label -q" named it "-q")
          if (LOAD_OPTIONS.contains(a)) {
            throw new Main.UsageException(a + " needs a value"
                + Main.Options.followedByOption(a, args[i + 1]));
          }
          if (!NOT_FOR_LOAD.contains(a)) {
            // a workload option, or none: the simulator's parser says which, and refuses both
            Main.Options.parse(new String[] {a, args[i + 1]});
            throw new IllegalStateException(a + " followed by " + args[i + 1] + " was accepted");
          }
          v = "";
        } else {
          v = args[++i];
        }
      }
      if (NOT_FOR_LOAD.contains(name)) {
        throw new Main.UsageException(name + " does not apply to load (it measures a server;"
            + " load --help lists the options)");
      }
      boolean ours = LOAD_OPTIONS.contains(name);
      if (ours && !given.add(name)) {
        // the last one would win silently
        throw new Main.UsageException(name + " is given twice; give it once");
      }
      if (!ours) {
        scenarioGiven |= name.equals("--scenario");
        // as one argument: a value given as --name=-x must not look like an option to the
        // simulator's parser
        rest.add(name + "=" + v);
        continue;
      }
      switch (name) {
        case "--target" -> target = targetArg(v);
        case "--label" -> {
          if (v.isBlank()) {
            throw new Main.UsageException("--label must not be empty");
          }
          label = v;
        }
        case "--model" -> {
          if (v.isBlank()) {
            // an empty model field names no model: every request would be refused
            throw new Main.UsageException("--model must not be empty (leave it out to use the"
                + " first model GET /v1/models names)");
          }
          model = v;
        }
        case "--speed" -> speed = Main.Options.doubleArg(name, v, 0.001, 10_000);
        case "--max-requests" -> maxRequests = Main.Options.intArg(name, v, 1, 100_000_000);
        case "--warmup" -> warmup = Main.Options.intArg(name, v, 0, 100_000);
        case "--timeout-s" -> timeout = Duration.ofMillis(
            Math.round(Main.Options.doubleArg(name, v, 0.001, 86_400) * 1000));
        default -> throw new IllegalStateException(name);
      }
    }
    if (target == null) {
      throw new Main.UsageException("--target is required (the server's base URL, e.g."
          + " http://127.0.0.1:8100)");
    }
    if (!scenarioGiven) {
      // in front, so that an option left without a value stays the last argument
      rest.add(0, "--scenario");
      rest.add(1, SharedPrefixWorkload.NAME);
    }
    Main.Options sim = Main.Options.parse(rest.toArray(String[]::new));
    Main.checkOutput("--json", sim.json);
    Main.checkOutput("--chart", sim.chart);
    Main.checkDistinctOutputs(sim);
    List<Workload> workloads = new ArrayList<>();
    List<String> warnings = new ArrayList<>(sim.warnings);
    for (String scenario : sim.scenarios) {
      Workload w = sim.workload(scenario, sim.profile);
      String shortfall = sim.requestsShortfall(w);
      if (shortfall != null) {
        warnings.add(shortfall);
      }
      workloads.add(w);
    }
    return new Options(target, label, model, speed, maxRequests, timeout, warmup, sim.json,
        sim.chart, sim.quiet, workloads, sim.seed, List.of(args), List.copyOf(warnings));
  }

  private static URI targetArg(String v) throws Main.UsageException {
    URI u;
    try {
      u = URI.create(v.strip());
    } catch (IllegalArgumentException e) {
      throw new Main.UsageException("--target is not a URL: '" + v + "'");
    }
    if (!"http".equals(u.getScheme()) || u.getHost() == null) {
      throw new Main.UsageException("--target must be an http:// URL with a host, got '" + v
          + "'");
    }
    return u;
  }
}
