package io.epp4j.sim;

import io.epp4j.core.ConfigException;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * Command line of the simulator. With no arguments it compares every preset policy on the
 * seed experiment's two scenarios ({@code shared-prefix} and {@code multi-turn}) and prints the
 * table. Exit codes: 0 done, 1 a run failed (for example a configuration error), 2 bad usage.
 */
public final class Main {
  static final String DEFAULT_TRACE = "../shared/traces/mooncake_synthetic_trace.jsonl";

  private static final String USAGE = """
      Usage: java -jar routing-sim.jar [options]
      Compares routing policies on simulated vLLM replicas driven by the real epp4j router.
      Without options: both seed scenarios (shared-prefix, multi-turn), all preset policies.

      General
        --scenario LIST        shared-prefix, multi-turn, trace (comma-separated)
                               default: shared-prefix,multi-turn
        --policies LIST        presets: round-robin, sticky, epp-approximate (default: all)
        --config FILE.yaml     also run an EndpointPickerConfig file (repeatable)
        --replicas N           replicas (default 6)
        --profile NAME         hardware profile (default qwen3-1.7b-h100-mps6)
        --seed N               random seed (default 1)
        --requests N           requests (shared-prefix total, trace: first N lines)
        --scrape-interval MS   metrics publication interval in ms (default 50)
        --max-num-seqs N       override the profile's max_num_seqs
        --max-num-batched-tokens N  override the profile's max_num_batched_tokens
        --json PATH --csv PATH --chart PATH.png   write the report
        --quiet                no progress on stderr
        --help                 this text

      shared-prefix
        --groups N (28)  --users-per-group N (8)  --system-prompt-len L (6000)
        --question-len L (300-700)  --output-len L (100-300)
        --concurrency N (48, closed loop)  --rate R (Poisson req/s; overrides concurrency)
      multi-turn
        --dialogs N (36)  --turns N (8)  --mt-system-len N (1000)  --user-len L (450)
        --reply-len L (400)  --think-time S (1.0, mean seconds)
      trace
        --trace mooncake:PATH  (default mooncake:%s)
        --time-scale X         multiply trace timestamps by X (default 1.0)

      Lengths L: N, A-B (uniform) or exp:MEAN.
      """.formatted(DEFAULT_TRACE);

  /** Thrown for bad command lines; the message goes to stderr with the usage text. */
  static final class UsageException extends Exception {
    private static final long serialVersionUID = 1L;

    UsageException(String message) {
      super(message);
    }
  }

  private Main() {}

  public static void main(String[] args) {
    System.exit(run(args, System.out, System.err));
  }

  /** Runs the command line; returns the exit code. */
  static int run(String[] args, PrintStream out, PrintStream err) {
    Options o;
    try {
      o = Options.parse(args);
    } catch (UsageException e) {
      err.println("error: " + e.getMessage());
      err.println();
      err.print(USAGE);
      return 2;
    }
    if (o.help) {
      out.print(USAGE);
      return 0;
    }
    try {
      List<ScenarioResult> results = compare(o, o.quiet ? null : err);
      for (ScenarioResult s : results) {
        Report.printTable(s, out);
        out.println();
      }
      if (o.json != null) {
        Report.writeJson(results, o.json);
      }
      if (o.csv != null) {
        Report.writeCsv(results, o.csv);
      }
      if (o.chart != null) {
        Report.writeChart(results, o.chart);
      }
      return 0;
    } catch (ConfigException e) {
      err.println("error: a policy configuration cannot be used:");
      for (String m : e.errors()) {
        err.println("  - " + m);
      }
      return 1;
    } catch (java.nio.file.NoSuchFileException e) {
      err.println("error: file not found: " + e.getFile()
          + " (give the trace as --trace mooncake:PATH)");
      return 1;
    } catch (IOException | IllegalArgumentException e) {
      err.println("error: " + e.getMessage());
      return 1;
    }
  }

  /** Runs every scenario × policy of the options. */
  static List<ScenarioResult> compare(Options o, @Nullable PrintStream progress) throws IOException {
    HardwareProfile hw = o.profile;
    Simulation.Settings settings = new Simulation.Settings(hw, o.replicas, o.seed,
        Math.round(o.scrapeIntervalMs * 1e6), progress);
    List<ScenarioResult> out = new ArrayList<>();
    for (String scenario : o.scenarios) {
      Workload w = o.workload(scenario);
      List<PolicyResult> rs = new ArrayList<>();
      for (Policy p : o.policies) {
        if (progress != null) {
          progress.printf("running %s / %s ...%n", scenario, p.name());
        }
        PolicyResult r = new Simulation(settings, w, p, null).run();
        if (progress != null) {
          progress.printf("  %s / %s: %d requests in %.2f s (%.0f simulated requests/s)%n",
              scenario, p.name(), r.requests(), r.wallSeconds(), r.simulatedRequestsPerWallSecond());
        }
        rs.add(r);
      }
      out.add(new ScenarioResult(scenario, w.describe(hw, o.replicas), rs));
    }
    return out;
  }

  /** Parsed command line. */
  static final class Options {
    boolean help;
    boolean quiet;
    List<String> scenarios = List.of(SharedPrefixWorkload.NAME, MultiTurnWorkload.NAME);
    List<Policy> policies = new ArrayList<>(Policy.presets().values());
    int replicas = 6;
    long seed = 1;
    int requests = -1;
    double scrapeIntervalMs = 50;
    HardwareProfile profile = HardwareProfile.qwen3H100Mps6();
    @Nullable Path json;
    @Nullable Path csv;
    @Nullable Path chart;
    SharedPrefixWorkload shared = SharedPrefixWorkload.defaults();
    MultiTurnWorkload multi = MultiTurnWorkload.defaults();
    String trace = "mooncake:" + DEFAULT_TRACE;
    double timeScale = 1.0;

    static Options parse(String[] args) throws UsageException {
      Options o = new Options();
      Map<String, String> kv = new LinkedHashMap<>();
      List<Path> configs = new ArrayList<>();
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
        if (!a.startsWith("--")) {
          throw new UsageException("unexpected argument '" + a + "'");
        }
        String name = a;
        String value;
        int eq = a.indexOf('=');
        if (eq > 0) {
          name = a.substring(0, eq);
          value = a.substring(eq + 1);
        } else {
          if (i + 1 >= args.length) {
            throw new UsageException(a + " needs a value");
          }
          value = args[++i];
        }
        if (name.equals("--config")) {
          configs.add(Path.of(value));
        } else {
          kv.put(name, value);
        }
      }
      o.apply(kv, configs);
      return o;
    }

    private void apply(Map<String, String> kv, List<Path> configs) throws UsageException {
      int maxSeqs = -1;
      int maxBatched = -1;
      var sp = new Object() {
        int groups = shared.groups();
        int users = shared.usersPerGroup();
        LengthDist system = shared.systemPromptLength();
        LengthDist question = shared.questionLength();
        LengthDist output = shared.outputLength();
        int concurrency = shared.concurrency();
        double rate = shared.rate();
        int dialogs = multi.dialogs();
        int turns = multi.turns();
        int mtSystem = multi.systemPromptLength();
        LengthDist user = multi.userLength();
        LengthDist reply = multi.replyLength();
        double think = multi.thinkTimeSeconds();
      };
      boolean policiesGiven = false;
      for (Map.Entry<String, String> e : kv.entrySet()) {
        String v = e.getValue();
        switch (e.getKey()) {
          case "--scenario" -> {
            List<String> list = new ArrayList<>();
            for (String s : v.split(",")) {
              String t = s.trim().toLowerCase(Locale.ROOT);
              if (!List.of(SharedPrefixWorkload.NAME, MultiTurnWorkload.NAME,
                  MooncakeTraceWorkload.NAME).contains(t)) {
                throw new UsageException("unknown scenario '" + s
                    + "' (shared-prefix, multi-turn, trace)");
              }
              list.add(t);
            }
            scenarios = list;
          }
          case "--policies" -> {
            policiesGiven = true;
            List<Policy> list = new ArrayList<>();
            for (String s : v.split(",")) {
              String t = s.trim().toLowerCase(Locale.ROOT);
              if (t.isEmpty()) {
                continue;
              }
              Policy p = Policy.presets().get(t);
              if (p == null) {
                throw new UsageException("unknown policy '" + s + "' (presets: "
                    + String.join(", ", Policy.presets().keySet()) + ")");
              }
              list.add(p);
            }
            policies = list;
          }
          case "--replicas" -> replicas = intArg(e.getKey(), v, 1, 4096);
          case "--seed" -> seed = longArg(e.getKey(), v);
          case "--requests" -> requests = intArg(e.getKey(), v, 1, 10_000_000);
          case "--scrape-interval" -> scrapeIntervalMs = doubleArg(e.getKey(), v, 0.001, 3_600_000);
          case "--profile" -> {
            HardwareProfile p = HardwareProfile.named(v);
            if (p == null) {
              throw new UsageException("unknown profile '" + v + "' (known: "
                  + String.join(", ", HardwareProfile.builtIns().keySet()) + ")");
            }
            profile = p;
          }
          case "--max-num-seqs" -> maxSeqs = intArg(e.getKey(), v, 1, 1_000_000);
          case "--max-num-batched-tokens" -> maxBatched = intArg(e.getKey(), v, 1, 10_000_000);
          case "--json" -> json = Path.of(v);
          case "--csv" -> csv = Path.of(v);
          case "--chart" -> chart = Path.of(v);
          case "--groups" -> sp.groups = intArg(e.getKey(), v, 1, 1_000_000);
          case "--users-per-group" -> sp.users = intArg(e.getKey(), v, 1, 1_000_000);
          case "--system-prompt-len" -> sp.system = lengthArg(e.getKey(), v);
          case "--question-len" -> sp.question = lengthArg(e.getKey(), v);
          case "--output-len" -> sp.output = lengthArg(e.getKey(), v);
          case "--concurrency" -> sp.concurrency = intArg(e.getKey(), v, 1, 1_000_000);
          case "--rate" -> sp.rate = doubleArg(e.getKey(), v, 0.000001, 1e9);
          case "--dialogs" -> sp.dialogs = intArg(e.getKey(), v, 1, 1_000_000);
          case "--turns" -> sp.turns = intArg(e.getKey(), v, 1, 10_000);
          case "--mt-system-len" -> sp.mtSystem = intArg(e.getKey(), v, 1, 10_000_000);
          case "--user-len" -> sp.user = lengthArg(e.getKey(), v);
          case "--reply-len" -> sp.reply = lengthArg(e.getKey(), v);
          case "--think-time" -> sp.think = doubleArg(e.getKey(), v, 0, 1e6);
          case "--trace" -> {
            if (!v.startsWith("mooncake:") || v.length() == "mooncake:".length()) {
              throw new UsageException("--trace must be mooncake:PATH, got '" + v + "'");
            }
            trace = v;
          }
          case "--time-scale" -> timeScale = doubleArg(e.getKey(), v, 1e-6, 1e6);
          default -> throw new UsageException("unknown option '" + e.getKey() + "'");
        }
      }
      if (maxSeqs > 0 || maxBatched > 0) {
        profile = profile.withEngineLimits(maxBatched > 0 ? maxBatched : profile.maxNumBatchedTokens(),
            maxSeqs > 0 ? maxSeqs : profile.maxNumSeqs());
      }
      shared = new SharedPrefixWorkload(sp.groups, sp.users, sp.system, sp.question, sp.output,
          requests > 0 ? requests : shared.requests(), sp.concurrency, sp.rate);
      multi = new MultiTurnWorkload(sp.dialogs, sp.turns, sp.mtSystem, sp.user, sp.reply,
          sp.think, multi.startSpreadSeconds());
      if (!configs.isEmpty()) {
        if (!policiesGiven) {
          policies = new ArrayList<>();
        }
        for (Path c : configs) {
          if (!Files.isReadable(c)) {
            throw new UsageException("--config " + c + ": file not found or not readable");
          }
          policies.add(Policy.fromFile(c));
        }
      }
      if (policies.isEmpty()) {
        throw new UsageException("no policy to run");
      }
    }

    Workload workload(String scenario) throws IOException {
      return switch (scenario) {
        case SharedPrefixWorkload.NAME -> shared;
        case MultiTurnWorkload.NAME -> multi;
        case MooncakeTraceWorkload.NAME -> MooncakeTraceWorkload.load(
            Path.of(trace.substring("mooncake:".length())), Math.max(0, requests), timeScale,
            profile.maxModelLen());
        default -> throw new IllegalArgumentException("unknown scenario " + scenario);
      };
    }

    private static int intArg(String name, String v, int min, int max) throws UsageException {
      long x = longArg(name, v);
      if (x < min || x > max) {
        throw new UsageException(name + " must be in [" + min + ", " + max + "], got " + v);
      }
      return (int) x;
    }

    private static long longArg(String name, String v) throws UsageException {
      try {
        return Long.parseLong(v.trim());
      } catch (NumberFormatException e) {
        throw new UsageException(name + " needs an integer, got '" + v + "'");
      }
    }

    private static double doubleArg(String name, String v, double min, double max)
        throws UsageException {
      double x;
      try {
        x = Double.parseDouble(v.trim());
      } catch (NumberFormatException e) {
        throw new UsageException(name + " needs a number, got '" + v + "'");
      }
      if (!(x >= min && x <= max)) {
        throw new UsageException(name + " must be in [" + min + ", " + max + "], got " + v);
      }
      return x;
    }

    private static LengthDist lengthArg(String name, String v) throws UsageException {
      try {
        return LengthDist.parse(v);
      } catch (IllegalArgumentException e) {
        throw new UsageException(name + ": " + e.getMessage());
      }
    }
  }
}
