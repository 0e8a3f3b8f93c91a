package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class MainTest {
  private final CapturedMain cli = new CapturedMain();

  private static final String[] SMALL = {
      "--requests", "120", "--groups", "6", "--users-per-group", "3", "--system-prompt-len", "2000",
      "--output-len", "10-30", "--concurrency", "12", "--dialogs", "6", "--turns", "3",
      "--reply-len", "50"};

  /** SMALL's shared-prefix options only (no warning about multi-turn ones on stderr). */
  private static String[] sharedOnly(String... extra) {
    List<String> a = new ArrayList<>(List.of(SMALL).subList(0, 12));
    a.addAll(List.of(extra));
    return a.toArray(new String[0]);
  }

  private static String[] with(String... extra) {
    List<String> a = new ArrayList<>(List.of(SMALL));
    a.addAll(List.of(extra));
    return a.toArray(new String[0]);
  }

  @Test
  void optionsOfAScenarioTheRunLeavesOutAreNamedNotIgnoredSilently() {
    // SMALL sets both seed workloads; only shared-prefix runs, so the multi-turn knobs and the
    // trace file do nothing and each is named (even with --quiet), while shared-prefix's are not
    int code = cli.run(with("--quiet", "--scenario", "shared-prefix", "--policies", "round-robin",
        "--trace", "mooncake:/no/such/trace.jsonl"));
    assertThat(code).isZero();
    assertThat(cli.stderr())
        .contains("warning: --dialogs has no effect: it sets the multi-turn scenario")
        .contains("warning: --turns has no effect", "warning: --reply-len has no effect")
        .contains("warning: --trace has no effect: it sets the trace scenario")
        .contains("scenarios: shared-prefix; add it with --scenario")
        .doesNotContain("--groups has no effect", "--concurrency has no effect",
            "--requests has no effect");
  }

  @Test
  @org.junit.jupiter.api.Timeout(value = 60,
      threadMode = org.junit.jupiter.api.Timeout.ThreadMode.SEPARATE_THREAD)
  void poissonArrivalsPastTheSimulatedClockStopTheRunNamingTheRate() {
    // 200 requests at 0.000001 × 0.01 requests/s: about 3 years apart, so about 600 years for
    // all, past the 146 the clock holds; before, the clock overflowed and the run never ended
    int code = cli.run("--quiet", "--scenario", "shared-prefix", "--policies", "round-robin",
        "--rate", "0.000001", "--load-levels", "0.01", "--requests", "200", "--output-len", "10");
    assertThat(code).as(cli.stderr()).isEqualTo(1);
    assertThat(cli.stderr()).contains("error: Poisson arrivals", "--rate", "146 years");
  }

  @Test
  @org.junit.jupiter.api.Timeout(value = 60,
      threadMode = org.junit.jupiter.api.Timeout.ThreadMode.SEPARATE_THREAD)
  void thinkTimesPastTheSimulatedClockStopTheRunNamingTheThinkTime() {
    // 10,000 turns of 1,000,000 s mean think time: about 317 years for the dialog
    int code = cli.run("--quiet", "--scenario", "multi-turn", "--policies", "round-robin",
        "--dialogs", "1", "--turns", "10000", "--think-time", "1000000", "--mt-system-len", "1",
        "--user-len", "1", "--reply-len", "1");
    assertThat(code).as(cli.stderr()).isEqualTo(1);
    assertThat(cli.stderr()).contains("error: dialog 1's turn", "--think-time", "146 years");
  }

  @Test
  void requestsIsNamedWhenNeitherSharedPrefixNorTheTraceRuns() {
    // --requests sizes shared-prefix and caps the trace: with multi-turn alone it does nothing
    int code = cli.run("--quiet", "--scenario", "multi-turn", "--policies", "round-robin",
        "--requests", "50", "--dialogs", "4", "--turns", "2", "--reply-len", "20");
    assertThat(code).as(cli.stderr()).isZero();
    assertThat(cli.stderr())
        .contains("warning: --requests has no effect: it sets the shared-prefix and trace"
            + " scenarios, which this run does not include")
        .contains("scenarios: multi-turn; add one with --scenario");
  }

  @Test
  void requestsGivesNoWarningWhenTheTraceRunsWithoutSharedPrefix(@TempDir Path dir)
      throws Exception {
    Path trace = dir.resolve("t.jsonl");
    Files.writeString(trace, """
        {"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}
        {"timestamp": 5, "input_length": 600, "output_length": 8, "hash_ids": [1, 3]}
        """);
    int code = cli.run("--quiet", "--scenario", "trace", "--policies", "round-robin",
        "--requests", "1", "--trace", "mooncake:" + trace);
    assertThat(code).as(cli.stderr()).isZero();
    assertThat(cli.stderr()).doesNotContain("--requests has no effect");
  }

  /**
   * {@code --requests N} replays a trace's first N requests; a trace of fewer is replayed
   * whole, and the run says how many fewer than asked for (even with --quiet) instead of
   * reporting fewer requests without a word.
   */
  @Test
  void requestsBeyondTheTracesLengthIsNamed(@TempDir Path dir) throws Exception {
    Path trace = dir.resolve("t.jsonl");
    Files.writeString(trace, """
        {"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}
        {"timestamp": 5, "input_length": 600, "output_length": 8, "hash_ids": [1, 3]}
        """);
    int code = cli.run("--quiet", "--scenario", "trace", "--policies", "round-robin",
        "--requests", "5", "--trace", "mooncake:" + trace);
    assertThat(code).as(cli.stderr()).isZero();
    assertThat(cli.stderr()).contains("warning: --requests 5: the trace holds only 2 requests;"
        + " all of them are replayed, 3 fewer than asked for");
    assertThat(cli.stdout()).contains("round-robin");

    // as many as the trace holds, or fewer: nothing to say
    cli.reset();
    assertThat(cli.run("--quiet", "--scenario", "trace", "--policies", "round-robin",
        "--requests", "2", "--trace", "mooncake:" + trace)).as(cli.stderr()).isZero();
    assertThat(cli.stderr()).doesNotContain("--requests");

    // the load command reads the trace before it sends anything, and says the same
    LoadCommand.Options o = LoadCommand.parse(new String[] {"--target", "http://127.0.0.1:1",
        "--scenario", "trace", "--requests", "3", "--trace", "mooncake:" + trace});
    assertThat(o).isNotNull();
    assertThat(o.warnings()).containsExactly("--requests 3: the trace holds only 2 requests;"
        + " all of them are replayed, 1 fewer than asked for");
  }

  /**
   * Hint sharing needs several gateways: --shared-state replicated or --replication-delay-ms on
   * a run that has no routers to share between changed nothing, without a word.
   */
  @Test
  void hintSharingOptionsWithoutSeveralGatewaysAreNamed() throws Exception {
    assertThat(Main.Options.parse(new String[] {"--shared-state", "replicated"}).warnings)
        .containsExactly("--shared-state replicated has no effect: one gateway has no other"
            + " router to share hints with (add --gateways N, N at least 2)");
    assertThat(Main.Options.parse(new String[] {"--gateways", "3",
        "--replication-delay-ms", "5"}).warnings)
        .containsExactly("--replication-delay-ms has no effect: only the routers of --gateways"
            + " N with --shared-state replicated share hints");
    assertThat(Main.Options.parse(new String[] {"--replication-delay-ms", "5"}).warnings)
        .hasSize(1);
    assertThat(Main.Options.parse(new String[] {"--gateways", "2", "--shared-state",
        "replicated", "--replication-delay-ms", "5"}).warnings).isEmpty();
    assertThat(Main.Options.parse(new String[] {"--gateways", "2", "--shared-state", "none"})
        .warnings).isEmpty();

    // on stderr, even with --quiet, and the run goes on
    int code = cli.run("--quiet", "--scenario", "multi-turn", "--policies", "round-robin",
        "--dialogs", "2", "--turns", "1", "--shared-state", "replicated");
    assertThat(code).as(cli.stderr()).isZero();
    assertThat(cli.stderr()).contains("warning: --shared-state replicated has no effect");
  }

  /** --rate makes arrivals Poisson: a --concurrency given with it used to be dropped silently. */
  @Test
  void concurrencyWithRateIsNamed() throws Exception {
    assertThat(Main.Options.parse(new String[] {"--rate", "5", "--concurrency", "8"}).warnings)
        .containsExactly("--concurrency has no effect: --rate sends Poisson arrivals, which"
            + " wait for no client (give one of them)");
    assertThat(Main.Options.parse(new String[] {"--rate", "5"}).warnings).isEmpty();
    assertThat(Main.Options.parse(new String[] {"--concurrency", "8"}).warnings).isEmpty();
  }

  @Test
  void optionsOfTheScenariosRunGiveNoWarning() {
    int code = cli.run(with("--quiet", "--policies", "round-robin"));
    assertThat(code).isZero();
    assertThat(cli.stderr()).doesNotContain("warning:");
  }

  @Test
  void badFlagsPrintUsageAndExitWith2() {
    assertThat(cli.run("--no-such-flag", "1")).isEqualTo(2);
    assertThat(cli.stderr()).contains("unknown option '--no-such-flag'", "Usage:");
    assertThat(cli.run("--replicas", "zero")).isEqualTo(2);
    assertThat(cli.run("--scenario", "chess")).isEqualTo(2);
    assertThat(cli.run("--policies", "epp-exact")).isEqualTo(2);
    assertThat(cli.stderr()).contains("unknown policy 'epp-exact'", "epp-precise-hybrid");
    assertThat(cli.run("--question-len", "9-3")).isEqualTo(2);
    assertThat(cli.run("--replicas")).isEqualTo(2);
    assertThat(cli.stdout()).isEmpty();
  }

  @Test
  void usageErrorsPrintAShortUsageNotTheWholeHelp() {
    assertThat(cli.run("--no-such-flag", "1")).isEqualTo(2);
    assertThat(cli.stderr()).contains("Usage:", "--help")
        .doesNotContain("--max-num-batched-tokens", "--mt-system-len");
    assertThat(cli.stderr().lines().count()).isLessThanOrEqualTo(4);
  }

  @Test
  void theDialogsStartWithinTheStartSpread(@TempDir Path dir) throws Exception {
    assertThat(cli.run("--start-spread", "-1")).isEqualTo(2);
    assertThat(cli.stderr()).contains("--start-spread");
    Path json = dir.resolve("r.json");
    Path csv = dir.resolve("requests.csv");
    int code = cli.run(with("--scenario", "multi-turn", "--policies", "round-robin", "--start-spread",
        "30", "--json", json.toString(), "--requests-csv", csv.toString()));
    assertThat(code).as(cli.stderr()).isZero();
    JsonNode load = new ObjectMapper().readTree(json.toFile()).get("scenarios").get(0).get("load");
    assertThat(load.get("startSpreadSeconds").asDouble()).isEqualTo(30.0);
    // the first turns of the six dialogs: with a 30 s spread they do not all start in 2 s
    List<String> lines = Files.readAllLines(csv);
    List<String> header = List.of(lines.get(0).split(","));
    int id = header.indexOf("id");
    int sent = header.indexOf("arrival_s");
    assertThat(id).as(lines.get(0)).isNotNegative();
    assertThat(sent).as(lines.get(0)).isNotNegative();
    double first = Double.MAX_VALUE;
    double last = 0;
    for (String line : lines.subList(1, lines.size())) {
      String[] f = line.split(",");
      if (f[id].endsWith("-0")) {
        double at = Double.parseDouble(f[sent]);
        first = Math.min(first, at);
        last = Math.max(last, at);
      }
    }
    assertThat(last - first).isGreaterThan(2).isLessThanOrEqualTo(30);
  }

  @Test
  void aMalformedLengthNamesTheOptionAndTheExpectedForm() {
    assertThat(cli.run("--question-len", "5-")).isEqualTo(2);
    assertThat(cli.stderr()).contains("--question-len", "'5-'", "A-B")
        .doesNotContain("For input string", "NumberFormatException");
    assertThat(cli.run("--reply-len", "exp:x")).isEqualTo(2);
    assertThat(cli.stderr()).contains("--reply-len", "exp:MEAN").doesNotContain("For input string");
  }

  @Test
  void aLengthPastTheBoundIsAUsageErrorNotACrashInsideTheRun() {
    // each once ran and died: the prompt's parts overflowed an int (shared-prefix), a sample of
    // exp:1e308 wrapped to -1, a two-billion-token reply did not fit in the heap (multi-turn)
    String sp = "--scenario=shared-prefix";
    String[][] runs = {
        {"--question-len", "2147483647", sp},
        {"--output-len", "exp:1e308", sp},
        {"--system-prompt-len", "1-2000000000", sp},
        {"--reply-len", "2000000000", "--scenario=multi-turn"}};
    for (String[] r : runs) {
      cli.reset();
      String what = r[0] + " " + r[1];
      assertThat(cli.run("--quiet", "--policies", "round-robin", r[2], r[0], r[1]))
          .as(what).isEqualTo(2);
      assertThat(cli.stderr()).as(what)
          .contains(r[0], "'" + r[1] + "'", "at most " + LengthDist.MAX_TOKENS)
          .doesNotContain("\tat ", "Exception");
      assertThat(cli.stdout()).as(what).isEmpty();
    }
    // the bound itself is a length
    assertThat(LengthDist.parse("10000000").max()).isEqualTo(LengthDist.MAX_TOKENS);
    // an exponential's tail is cut there, never wrapped past it
    LengthDist huge = LengthDist.parse("exp:10000000");
    java.util.SplittableRandom rng = new java.util.SplittableRandom(1);
    for (int i = 0; i < 10_000; i++) {
      assertThat(huge.sample(rng)).isBetween(1, LengthDist.MAX_TOKENS);
    }
  }

  @Test
  void unwritableOutputPathsAreRejectedBeforeAnythingRuns(@TempDir Path dir) {
    assertThat(cli.run("--json", "/proc/x.json")).isEqualTo(2);
    assertThat(cli.stderr()).contains("--json", "/proc/x.json").doesNotContain("trace", "\tat ");
    cli.reset();
    assertThat(cli.run("--chart", "/nonexistent/dir/c.png")).isEqualTo(2);
    assertThat(cli.stderr()).contains("--chart", "/nonexistent/dir", "does not exist")
        .doesNotContain("\tat ", "Exception");
    cli.reset();
    assertThat(cli.run("--csv", dir.toString())).isEqualTo(2);
    assertThat(cli.stderr()).contains("--csv", "is a directory");
    // nothing was simulated: no progress line, no table
    assertThat(cli.stderr()).doesNotContain("running");
    assertThat(cli.stdout()).isEmpty();
  }

  @Test
  void helpListsEveryPresetAndExplainsClipped() {
    assertThat(cli.run("--help")).isZero();
    assertThat(cli.stdout()).contains(Policy.presets().keySet()).contains("clipped");
  }

  @Test
  void aPolicyThatRoutesNothingFailsTheRunQuietlyNamingPolicyAndScenario(@TempDir Path dir)
      throws Exception {
    Path cfg = dir.resolve("broken-plugin.yaml");
    Files.writeString(cfg, """
        plugins:
        - type: throwing-scorer
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: throwing-scorer
        """);
    List<LogRecord> leaked = new ArrayList<>();
    Handler spy = new Handler() {
      @Override
      public void publish(LogRecord r) {
        if (r.getLoggerName() != null && r.getLoggerName().startsWith("io.epp4j")) {
          leaked.add(r);
        }
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    Logger root = Logger.getLogger("");
    root.addHandler(spy);
    try {
      int code = cli.run(sharedOnly("--quiet", "--scenario", "shared-prefix", "--policies",
          "round-robin", "--config", cfg.toString()));
      assertThat(code).isEqualTo(1);
    } finally {
      root.removeHandler(spy);
    }
    assertThat(leaked).as("router warnings reaching the console").isEmpty();
    assertThat(cli.stderr()).contains("broken-plugin", "shared-prefix", "no request",
        "the router rejected").doesNotContain("\tat ", "round-robin");
    assertThat(cli.stderr().lines().count()).as(cli.stderr()).isLessThanOrEqualTo(3);
    // the table still shows what happened: a closed-loop client whose request was refused goes on
    // with its next one, so all 120 reached the router
    assertThat(cli.stdout()).contains("broken-plugin", "120 rejected (120 by the router");
  }

  @Test
  void withoutQuietAThrowingPluginIsShownOnceNotOncePerRequest(@TempDir Path dir)
      throws Exception {
    Path cfg = dir.resolve("broken-plugin.yaml");
    Files.writeString(cfg, """
        plugins:
        - type: throwing-scorer
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: throwing-scorer
        """);
    assertThat(cli.run(with("--scenario", "shared-prefix", "--config", cfg.toString()))).isEqualTo(1);
    // the router logged every one of the 120 failures; one stack trace at most reaches stderr
    assertThat(cli.stderr().split("\tat io.epp4j.core.Router.route", -1).length - 1)
        .as(cli.stderr()).isLessThanOrEqualTo(1);
    assertThat(cli.stderr()).contains("shared-prefix / broken-plugin: 120 requests rejected by"
        + " the router");
  }

  @Test
  void theDefaultTraceIsLookedForBesideTheRepositoryOfTheJar() {
    Path repo = Path.of("/x/repo");
    Path expected = Path.of("/x/shared/traces/mooncake_synthetic_trace.jsonl");
    assertThat(Main.traceCandidates(repo.resolve("routing-sim/target/routing-sim.jar"),
        Path.of("/elsewhere/cwd"))).first().isEqualTo(expected);
    assertThat(Main.traceCandidates(repo.resolve("routing-sim/target/classes"),
        Path.of("/elsewhere/cwd"))).first().isEqualTo(expected);
    // the working directory is still tried, last
    assertThat(Main.traceCandidates(repo.resolve("routing-sim/target/routing-sim.jar"),
        Path.of("/elsewhere/cwd")))
        .contains(Path.of("/elsewhere/shared/traces/mooncake_synthetic_trace.jsonl"));
  }

  @Test
  void aMissingTraceFileIsAUsageErrorNamingTheOption(@TempDir Path dir) {
    assertThat(cli.run("--quiet", "--scenario", "trace", "--trace", "mooncake:/no/such/trace.jsonl"))
        .isEqualTo(2);
    assertThat(cli.stderr()).contains("--trace mooncake:/no/such/trace.jsonl: file not found",
        "Usage:");
    assertThat(cli.run("--quiet", "--scenario", "trace", "--trace", "mooncake:" + dir)).isEqualTo(2);
    assertThat(cli.stderr()).contains("--trace mooncake:" + dir + ": is a directory");
    assertThat(cli.stdout()).isEmpty();
  }

  @Test
  void helpPrintsUsage() {
    assertThat(cli.run("--help")).isZero();
    assertThat(cli.stdout()).contains("--scenario", "--policies", "--trace mooncake:PATH");
  }

  @Test
  void aBadConfigFileExitsNonZeroNamingTheProblem(@TempDir Path dir) throws Exception {
    Path cfg = dir.resolve("broken.yaml");
    Files.writeString(cfg, """
        plugins:
        - type: no-such-scorer
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: no-such-scorer
        """);
    assertThat(cli.run(with("--quiet", "--config", cfg.toString()))).isEqualTo(1);
    assertThat(cli.stderr()).contains("no-such-scorer");
  }

  @Test
  void writesTableJsonCsvAndChart(@TempDir Path dir) throws Exception {
    Path json = dir.resolve("r.json");
    Path csv = dir.resolve("r.csv");
    Path png = dir.resolve("r.png");
    Path cfg = dir.resolve("queue-only.yaml");
    Files.writeString(cfg, CapturedMain.QUEUE_ONLY_CONFIG);
    int code = cli.run(with("--policies", "round-robin,epp-approximate", "--config", cfg.toString(),
        "--json", json.toString(), "--csv", csv.toString(), "--chart", png.toString()));
    assertThat(code).as(cli.stderr()).isZero();
    assertThat(cli.stdout()).contains("== shared-prefix", "== multi-turn", "round-robin",
        "epp-approximate", "queue-only", "simulated requests per wall second");
    assertThat(cli.stderr()).contains("running shared-prefix / round-robin");

    JsonNode root = new ObjectMapper().readTree(json.toFile());
    JsonNode run = root.get("run");
    assertThat(run).as("run metadata").isNotNull();
    assertThat(run.get("seed").asLong()).isEqualTo(1);
    assertThat(run.get("replicas").asInt()).isEqualTo(6);
    assertThat(run.get("profile").asText()).isEqualTo("qwen3-1.7b-h100-mps6");
    assertThat(run.get("scrapeIntervalMs").asDouble()).isEqualTo(50.0);
    assertThat(run.get("version").asText()).isNotBlank().doesNotContain("${");
    assertThat(root.get("scenarios").get(0).get("load").get("requests").asInt()).isEqualTo(120);
    assertThat(root.get("scenarios").get(1).get("load").get("dialogs").asInt()).isEqualTo(6);
    assertThat(root.get("scenarios")).hasSize(2);
    JsonNode first = root.get("scenarios").get(0);
    assertThat(first.get("scenario").asText()).isEqualTo("shared-prefix");
    JsonNode r = first.get("results").get(0);
    for (String f : List.of("policy", "prefixCacheHitRate", "ttftP50Ms", "ttftP95Ms", "ttftP99Ms",
        "itlP50Ms", "e2eP50Ms", "e2eP95Ms", "outputTokensPerSec", "requests", "preemptions",
        "maxSessionsPerReplica", "routingP99Micros", "clippedRequests")) {
      assertThat(r.has(f)).as(f).isTrue();
    }
    assertThat(r.get("requests").asInt()).isEqualTo(120);
    assertThat(first.get("results")).hasSize(3);

    List<String> rows = Files.readAllLines(csv);
    assertThat(rows).hasSize(1 + 2 * 3);
    assertThat(rows.get(0)).contains(",seed,replicas,profile,scrapeIntervalMs,version,load");
    assertThat(rows.get(1)).contains(",1,6,qwen3-1.7b-h100-mps6,50.0,").contains("groups=6");
    byte[] head = java.util.Arrays.copyOf(Files.readAllBytes(png), 8);
    assertThat(head).startsWith(0x89, 'P', 'N', 'G');
  }

  @Test
  void requestsCsvHoldsEveryCompletedRequestWithTheTtftsTheReportSummarises(@TempDir Path dir)
      throws Exception {
    Path json = dir.resolve("r.json");
    Path requests = dir.resolve("requests.csv");
    int code = cli.run(with("--policies", "round-robin,epp4j", "--load-levels", "1,2", "--json",
        json.toString(), "--requests-csv", requests.toString()));
    assertThat(code).as(cli.stderr()).isZero();
    List<String> rows = Files.readAllLines(requests);
    assertThat(rows.get(0)).isEqualTo(RequestsCsv.HEADER);
    java.util.Map<String, List<Double>> ttfts = new java.util.HashMap<>();
    for (String row : rows.subList(1, rows.size())) {
      String[] f = row.split(",", -1);
      assertThat(f).hasSize(20);
      assertThat(f[17] + f[18] + f[19]).as("no P/D: the P/D columns are empty").isEmpty();
      ttfts.computeIfAbsent(f[0] + "|" + f[1] + "|" + f[3], k -> new ArrayList<>())
          .add(Double.parseDouble(f[8]));
      assertThat(Integer.parseInt(f[11])).isBetween(0, Integer.parseInt(f[10]));
      assertThat(Double.parseDouble(f[16])).isBetween(0.0, 1.0);
    }
    JsonNode root = new ObjectMapper().readTree(json.toFile());
    int runs = 0;
    for (JsonNode scenario : root.get("scenarios")) {
      for (JsonNode r : scenario.get("results")) {
        String key = scenario.get("scenario").asText() + "|"
            + RequestsCsvFormat.level(scenario.get("loadLevel").asDouble()) + "|"
            + r.get("policy").asText();
        List<Double> v = ttfts.get(key);
        assertThat(v).as(key).isNotNull().hasSize(r.get("requests").asInt());
        v.sort(null);
        // the report's p95 is the nearest rank of the same values
        double p95 = v.get(Math.max(0, (int) Math.ceil(0.95 * v.size()) - 1));
        assertThat(p95).as(key).isCloseTo(r.get("ttftP95Ms").asDouble(),
            org.assertj.core.api.Assertions.within(0.01));
        runs++;
      }
    }
    assertThat(runs).isEqualTo(2 * 2 * 2);
    assertThat(ttfts).hasSize(runs);

    assertThat(cli.run("--dominance", "--requests-csv", requests.toString())).isEqualTo(2);
    assertThat(cli.stderr()).contains("--requests-csv");
  }

  @Test
  void requestsCsvOfAPdRunSaysWhereEachRequestWasPrefilledAndHowLongItsKvTookToArrive(
      @TempDir Path dir) throws Exception {
    Path requests = dir.resolve("requests.csv");
    int code = cli.run(sharedOnly("--quiet", "--scenario", "shared-prefix", "--replicas", "4",
        "--pd", "2:2", "--policies", "epp4j,pd-epp4j", "--requests-csv", requests.toString()));
    assertThat(code).as(cli.stderr()).isZero();
    List<String> rows = Files.readAllLines(requests);
    int split = 0;
    for (String row : rows.subList(1, rows.size())) {
      String[] f = row.split(",", -1);
      assertThat(f).hasSize(20);
      if (f[3].equals("epp4j")) {
        assertThat(f[17] + f[18] + f[19]).as("aggregated: %s", row).isEmpty();
        continue;
      }
      if (f[17].isEmpty()) {
        continue; // served where it was routed (no prefill pick)
      }
      split++;
      // replicas 0-1 prefill, 2-3 decode; what the decode replica held is part of the prompt
      assertThat(Integer.parseInt(f[17])).as(row).isBetween(0, 1);
      assertThat(Integer.parseInt(f[6])).as(row).isBetween(2, 3);
      assertThat(Integer.parseInt(f[18])).as(row).isBetween(0, Integer.parseInt(f[10]));
      assertThat(Double.parseDouble(f[19])).as(row).isPositive();
    }
    assertThat(split).as("requests prefilled on another replica").isPositive();
  }

  /** How the requests CSV writes a load level. */
  static final class RequestsCsvFormat {
    static String level(double v) {
      return v == Math.rint(v) ? String.valueOf((long) v) : String.valueOf(v);
    }
  }

  @Test
  void loadLevelsGiveOneScenarioEntryPerLevelWithItsLoadAndFacts(@TempDir Path dir)
      throws Exception {
    Path json = dir.resolve("r.json");
    Path csv = dir.resolve("r.csv");
    Path png = dir.resolve("r.png");
    int code = cli.run(with("--policies", "round-robin,sticky", "--load-levels", "1,2",
        "--json", json.toString(), "--csv", csv.toString(), "--chart", png.toString()));
    assertThat(code).as(cli.stderr()).isZero();
    assertThat(cli.stdout()).contains("== shared-prefix\n", "== shared-prefix (load level 2)",
        "== multi-turn (load level 2)", "hit-rate ceiling", "KV capacity crossover at load level");
    assertThat(cli.stderr()).contains("running multi-turn ×2 / sticky");

    JsonNode scenarios = new ObjectMapper().readTree(json.toFile()).get("scenarios");
    assertThat(scenarios).hasSize(4);
    double[] levels = {1, 2, 1, 2};
    for (int i = 0; i < 4; i++) {
      JsonNode sc = scenarios.get(i);
      assertThat(sc.get("loadLevel").isNumber()).isTrue();
      assertThat(sc.get("loadLevel").asDouble()).isEqualTo(levels[i]);
      assertThat(sc.get("hitRateCeiling").asDouble()).isBetween(0.0, 1.0);
      assertThat(sc.get("capacityCrossoverLoadLevel").isNumber()).isTrue();
    }
    assertThat(scenarios.get(0).get("load").get("concurrency").asInt()).isEqualTo(12);
    assertThat(scenarios.get(1).get("load").get("concurrency").asInt()).isEqualTo(24);
    assertThat(scenarios.get(3).get("load").get("dialogs").asInt()).isEqualTo(12);
    // the crossover is the base workload's, whatever level a run is at
    assertThat(scenarios.get(3).get("capacityCrossoverLoadLevel").asDouble())
        .isEqualTo(scenarios.get(2).get("capacityCrossoverLoadLevel").asDouble());

    List<String> rows = Files.readAllLines(csv);
    assertThat(rows).hasSize(1 + 4 * 2);
    assertThat(rows.get(0)).contains(",simulatedSeconds,loadLevel,seed,");
    assertThat(rows.get(3)).startsWith("shared-prefix,round-robin,").contains(",2.0,1,6,");
    byte[] head = java.util.Arrays.copyOf(Files.readAllBytes(png), 8);
    assertThat(head).startsWith(0x89, 'P', 'N', 'G');
  }

  @Test
  void badLoadLevelsAndOptionsTheDominanceRunDoesNotTakeAreUsageErrors() {
    assertThat(cli.run("--load-levels", "1,x")).isEqualTo(2);
    assertThat(cli.stderr()).contains("--load-levels needs a number, got 'x'");
    // Java's own number forms are not numbers here: "2d" is no level 2, "0x1p1" no level 2
    assertThat(cli.run("--load-levels", "1,2d")).isEqualTo(2);
    assertThat(cli.stderr()).contains("--load-levels needs a number, got '2d'");
    assertThat(cli.run("--time-scale", "0x1p1")).isEqualTo(2);
    assertThat(cli.stderr()).contains("--time-scale needs a number, got '0x1p1'");
    assertThat(cli.run("--load-levels", "0")).isEqualTo(2);
    assertThat(cli.run("--load-levels", "1,1.0")).isEqualTo(2);
    assertThat(cli.stderr()).contains("twice");
    assertThat(cli.run("--dominance", "--replicas", "3")).isEqualTo(2);
    assertThat(cli.stderr()).contains("--dominance runs a fixed experiment; --replicas does not apply");
    assertThat(cli.stdout()).isEmpty();
  }

  @Test
  void helpDescribesLoadLevelsAndDominance() {
    assertThat(cli.run("--help")).isZero();
    assertThat(cli.stdout()).contains("--load-levels LIST", "--dominance");
  }
}
