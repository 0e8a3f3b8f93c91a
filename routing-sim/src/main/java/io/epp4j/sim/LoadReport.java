package io.epp4j.sim;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.stream.Collectors;

/**
 * The report of runs measured over the network ({@link LoadGenerator}): the simulator's table and
 * JSON fields ({@link Report}), plus what only a client sees — failures by kind and the requests
 * sent.
 */
public final class LoadReport {
  private LoadReport() {}

  /**
   * One scenario measured against one or more targets (or one gateway per policy).
   *
   * @param result  the scenario with one row per run, in the simulator's shape
   * @param runs    the runs, in the rows' order
   * @param speed   the speed factor the times were multiplied by
   */
  public record Scenario(ScenarioResult result, List<LoadGenerator.Result> runs, double speed) {
    public Scenario {
      runs = List.copyOf(runs);
    }

    /** The scenario built from runs of {@code workload}, described for the header. */
    public static Scenario of(Workload workload, String target, double speed,
        List<LoadGenerator.Result> runs) {
      String description = workload.describe(HardwareProfile.qwen3H100Mps6(), 1).split("\\R")[0]
          + String.format(Locale.ROOT, "%nOver HTTP to %s; times are wall time × %s (the"
              + " target's speed factor).", target, Main.levelText(speed));
      List<PolicyResult> rows = runs.stream().map(LoadGenerator.Result::result)
          .collect(Collectors.toList());
      return new Scenario(new ScenarioResult(workload.name(), description, rows,
          workload.parameters()), runs, speed);
    }
  }

  /**
   * The run metadata of a measurement over the network: the simulator's version, the seed, the
   * replicas when known (0 otherwise) and the command line; the profile is the emulator's when
   * {@code emulated}, with the interval at which its gateway scraped the replicas (wall ms).
   */
  public static Report.RunInfo runInfo(long seed, int replicas, boolean emulated,
      double scrapeIntervalMs, List<String> arguments) {
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    return emulated
        ? new Report.RunInfo(Main.version(), seed, replicas, hw.name(), hw.maxNumSeqs(),
            hw.maxNumBatchedTokens(), scrapeIntervalMs, arguments)
        : new Report.RunInfo(Main.version(), seed, replicas, "over the network", 0, 0, 0,
            arguments);
  }

  static final String LEGEND = "   (over the network: preempt, evict and route µs are not visible"
      + " to a client: preempt and evict show 0, route µs –;\n    req/rep and sess/rep: max/mean per replica named by the"
      + " x-gateway-destination-endpoint header, 0/0 without it;\n    hit%: usage cached_tokens ÷"
      + " prompt_tokens of the completed requests whose usage names\n    cached_tokens, – when"
      + " none does (vLLM names it only with --enable-prompt-tokens-details))";

  /** The table, then one line per run with its wall time, requests sent and failures. */
  public static void print(Scenario s, PrintStream out) {
    Report.printRows(s.result(), out, LEGEND);
    for (LoadGenerator.Result r : s.runs()) {
      PolicyResult p = r.result();
      out.println(String.format(Locale.ROOT,
          "   %s: %d sent, %d completed, %d failed%s in %.2f wall s; itl p95 %s",
          p.policy(), r.sent(), p.requests(), r.failed(), failures(r), p.wallSeconds(),
          Report.ms(r.itlP95Ms())));
    }
  }

  private static String failures(LoadGenerator.Result r) {
    if (r.errors().isEmpty()) {
      return "";
    }
    return r.errors().entrySet().stream().map(e -> e.getKey() + " ×" + e.getValue())
        .collect(Collectors.joining(", ", " (", ")"));
  }

  /**
   * The simulator's JSON ({@link Report#toJson}) with, in every result, {@code sentRequests},
   * {@code failedRequests}, {@code errors} (kind → count), {@code wallSeconds} and
   * {@code itlP95Ms}, and in every scenario {@code speed}; {@code extra} becomes top-level
   * fields.
   */
  public static String toJson(Report.RunInfo run, List<Scenario> scenarios,
      Map<String, Object> extra) {
    List<ScenarioResult> plain = new ArrayList<>();
    for (Scenario s : scenarios) {
      plain.add(s.result());
    }
    ObjectMapper m = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
    try {
      ObjectNode root = (ObjectNode) m.readTree(Report.toJson(run, plain));
      ArrayNode arr = (ArrayNode) root.get("scenarios");
      for (int i = 0; i < scenarios.size(); i++) {
        Scenario s = scenarios.get(i);
        ObjectNode sn = (ObjectNode) arr.get(i);
        sn.put("speed", s.speed());
        JsonNode results = sn.get("results");
        for (int k = 0; k < s.runs().size(); k++) {
          LoadGenerator.Result r = s.runs().get(k);
          ObjectNode o = (ObjectNode) results.get(k);
          o.put("sentRequests", r.sent());
          o.put("failedRequests", r.failed());
          o.set("errors", m.valueToTree(r.errors()));
          o.put("wallSeconds", Math.round(r.result().wallSeconds() * 1000) / 1000.0);
          if (Double.isNaN(r.itlP95Ms())) {
            o.putNull("itlP95Ms"); // no inter-token gap was measured
          } else {
            o.put("itlP95Ms", Math.round(r.itlP95Ms() * 100) / 100.0);
          }
        }
      }
      for (Map.Entry<String, Object> e : extra.entrySet()) {
        root.set(e.getKey(), m.valueToTree(e.getValue()));
      }
      return m.writeValueAsString(root) + "\n";
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** Writes {@link #toJson} to {@code p}. */
  public static void writeJson(Report.RunInfo run, List<Scenario> scenarios,
      Map<String, Object> extra, Path p) throws IOException {
    Files.writeString(p, toJson(run, scenarios, extra), StandardCharsets.UTF_8);
  }
}
