package io.epp4j.sim;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.awt.BasicStroke;
import java.awt.Color;
import java.awt.Font;
import java.awt.Graphics2D;
import java.awt.RenderingHints;
import java.awt.image.BufferedImage;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import javax.imageio.ImageIO;
import org.jspecify.annotations.Nullable;

/** Writes a comparison as a text table, JSON, CSV or a PNG chart of TTFT CDFs. */
public final class Report {
  private Report() {}

  /**
   * What produced a report: the settings every scenario shared. The JSON and CSV carry it so that
   * a result file can be traced back to the run.
   *
   * @param version   the simulator's version
   * @param arguments the command line as given
   */
  public record RunInfo(String version, long seed, int replicas, String profile,
      int maxNumSeqs, int maxNumBatchedTokens, double scrapeIntervalMs, List<String> arguments) {
    public RunInfo {
      arguments = List.copyOf(arguments);
    }
  }

  private static final String[] COLUMNS = {"policy", "hit%", "ttft p50", "ttft p95", "ttft p99",
      "itl p50", "e2e p50", "e2e p95", "out tok/s", "reqs", "preempt", "evict", "req/rep",
      "sess/rep", "route µs", "warm µs", "clipped"};

  /** The legend under every table: the columns whose meaning is not in their name. */
  static final String LEGEND = "   (req/rep and sess/rep: max/mean per replica; route µs: mean/p99"
      + " wall time per routing decision;\n    warm µs: the same over the run's second half, past"
      + " the JIT's warm-up;\n    clipped: trace requests longer than the model's"
      + " context, replayed with the prompt cut to fit)";

  /**
   * The table for one scenario, with its description above. Columns are as wide as their widest
   * cell, so large routing times or counts widen a column instead of shifting the rest.
   */
  public static void printTable(ScenarioResult s, PrintStream out) {
    printRows(s, out, LEGEND);
    for (PolicyResult r : s.results()) {
      out.println(String.format(Locale.ROOT,
          "   %s: %.1f simulated s in %.2f wall s, %.0f simulated requests per wall second%s",
          r.policy(), r.simulatedSeconds(), r.wallSeconds(), r.simulatedRequestsPerWallSecond(),
          rejectedNote(r)));
    }
    for (PolicyResult r : s.results()) {
      if (r.pd().reported()) {
        out.println(pdLine(r));
      }
    }
    for (PolicyResult r : s.results()) {
      if (r.unservedRequests() > 0) {
        out.println(unservedLine(r));
      }
    }
  }

  /**
   * Why {@code reqs} and the rejected count fall short of the run's requests: some were still
   * queued when nothing else could happen, or never sent because their dialog stalled.
   */
  static String unservedLine(PolicyResult r) {
    return String.format(Locale.ROOT, "   %s: %d requests never served: still queued when the run"
        + " ended (too large for a replica's KV cache) or never sent (later turns of a stalled"
        + " dialog)",
        r.policy(), r.unservedRequests());
  }

  /**
   * The prefill/decode figures of one run: requests prefilled elsewhere than they decoded, the KV
   * moved, the transfer times, and the inter-token latency tail (decode interference).
   */
  static String pdLine(PolicyResult r) {
    PdStats pd = r.pd();
    if (pd.disaggregated() == 0) {
      return String.format(Locale.ROOT, "   %s: P/D none (every replica prefills and decodes);"
          + " itl p95 %s", r.policy(), ms(pd.itlP95Ms()));
    }
    long prompt = pd.transferredTokens() + pd.decodeHitTokens();
    return String.format(Locale.ROOT, "   %s: P/D %d of %d requests prefilled on another"
        + " replica; KV moved for %.1f%% of their prompt tokens (the rest cached at decode),"
        + " transfer mean %s p95 %s; itl p95 %s", r.policy(), pd.disaggregated(),
        r.requests(), prompt == 0 ? 0 : 100.0 * pd.transferredTokens() / prompt,
        ms(pd.transferMeanMs()), ms(pd.transferP95Ms()), ms(pd.itlP95Ms()));
  }

  /**
   * The header, the aligned table, {@code legend} and the notes on identical rows: what every
   * report of a scenario prints, whether simulated or measured over the network.
   */
  static void printRows(ScenarioResult s, PrintStream out, String legend) {
    out.println("== " + s.scenario() + (s.loadLevel() == 1.0 ? ""
        : " (load level " + Main.levelText(s.loadLevel()) + ")"));
    for (String line : s.description().split("\\R")) {
      out.println("   " + line);
    }
    List<String[]> rows = new java.util.ArrayList<>();
    rows.add(COLUMNS);
    for (PolicyResult r : s.results()) {
      rows.add(new String[] {
          r.policy(),
          Double.isNaN(r.prefixCacheHitRate()) ? NO_FIGURE
              : String.format(Locale.ROOT, "%.1f%%", r.prefixCacheHitRate() * 100),
          ms(r.ttftP50Ms()), ms(r.ttftP95Ms()), ms(r.ttftP99Ms()), ms(r.itlP50Ms()),
          ms(r.e2eP50Ms()), ms(r.e2eP95Ms()),
          String.format(Locale.ROOT, "%.0f", r.outputTokensPerSec()),
          Integer.toString(r.requests()), Long.toString(r.preemptions()),
          Long.toString(r.evictions()),
          String.format(Locale.ROOT, "%d/%.1f", r.maxRequestsPerReplica(),
              r.meanRequestsPerReplica()),
          String.format(Locale.ROOT, "%d/%.1f", r.maxSessionsPerReplica(),
              r.meanSessionsPerReplica()),
          micros(r.routingMeanMicros()) + "/" + micros(r.routingP99Micros()),
          micros(r.routingWarmMeanMicros()) + "/" + micros(r.routingWarmP99Micros()),
          Integer.toString(r.clippedRequests())});
    }
    alignPairs(rows);
    int[] width = new int[COLUMNS.length];
    for (String[] row : rows) {
      for (int c = 0; c < row.length; c++) {
        width[c] = Math.max(width[c], row[c].length());
      }
    }
    for (String[] row : rows) {
      StringBuilder line = new StringBuilder();
      for (int c = 0; c < row.length; c++) {
        if (c == 0) {
          line.append(row[c]).append(" ".repeat(width[c] - row[c].length()));
        } else {
          line.append(' ').append(" ".repeat(width[c] - row[c].length())).append(row[c]);
        }
      }
      out.println(line);
    }
    out.println(legend);
    // equal rows hide each other in the chart and look like a copying mistake in the table
    List<PolicyResult> rs = s.results();
    for (int i = 1; i < rs.size(); i++) {
      for (int j = 0; j < i; j++) {
        if (rs.get(i).sameOutcomeAs(rs.get(j))) {
          out.println("   " + rs.get(i).policy() + " = " + rs.get(j).policy()
              + " on every column but route µs (the same decisions had the same outcomes)");
          break;
        }
      }
    }
  }

  /** Pads both halves of "max/mean" style cells so the slashes line up down a column. */
  private static void alignPairs(List<String[]> rows) {
    for (int c = 1; c < COLUMNS.length; c++) {
      int left = 0;
      int right = 0;
      boolean pairs = rows.size() > 1;
      for (String[] row : rows.subList(1, rows.size())) {
        int slash = row[c].indexOf('/');
        if (slash < 0) {
          pairs = false;
          break;
        }
        left = Math.max(left, slash);
        right = Math.max(right, row[c].length() - slash - 1);
      }
      if (!pairs) {
        continue;
      }
      for (String[] row : rows.subList(1, rows.size())) {
        int slash = row[c].indexOf('/');
        String l = row[c].substring(0, slash);
        String r = row[c].substring(slash + 1);
        row[c] = " ".repeat(left - l.length()) + l + "/" + " ".repeat(right - r.length()) + r;
      }
    }
  }

  private static String rejectedNote(PolicyResult r) {
    if (r.rejectedRequests() == 0) {
      return "";
    }
    String note = ", " + r.rejectedRequests() + " rejected";
    if (r.routerRejectedRequests() > 0) {
      note += " (" + r.routerRejectedRequests() + " by the router, first: "
          + r.firstRouterRejection() + ")";
    }
    return note;
  }

  /** A figure without samples (NaN): none printed. */
  static final String NO_FIGURE = "–";

  private static String micros(double v) {
    return Double.isNaN(v) ? NO_FIGURE : String.format(Locale.ROOT, "%.0f", v);
  }

  static String ms(double v) {
    return Double.isNaN(v) ? NO_FIGURE
        : v >= 10_000 ? String.format(Locale.ROOT, "%.1fs", v / 1000)
        : v >= 100 ? String.format(Locale.ROOT, "%.0fms", v)
        : String.format(Locale.ROOT, "%.1fms", v);
  }

  /** The JSON report without run metadata: {@code {"scenarios":[..]}}. */
  public static String toJson(List<ScenarioResult> scenarios) {
    return toJson(null, scenarios);
  }

  /**
   * The JSON report: {@code {"run":{..},"scenarios":[{"scenario":..,"load":{..},
   * "results":[{..}]}]}}; {@code run} only when given.
   */
  public static String toJson(@Nullable RunInfo run, List<ScenarioResult> scenarios) {
    return toJson(run, scenarios, null);
  }

  /**
   * The JSON report; with {@code dominance} (from {@code --dominance}) it has a
   * {@code "dominance"} object too: the target, one entry per point and the counts.
   */
  static String toJson(@Nullable RunInfo run, List<ScenarioResult> scenarios,
      @Nullable List<Dominance.Verdict> dominance) {
    ObjectMapper m = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
    ObjectNode root = m.createObjectNode();
    if (run != null) {
      ObjectNode rn = root.putObject("run");
      rn.put("version", run.version());
      rn.put("seed", run.seed());
      rn.put("replicas", run.replicas());
      rn.put("profile", run.profile());
      rn.put("maxNumSeqs", run.maxNumSeqs());
      rn.put("maxNumBatchedTokens", run.maxNumBatchedTokens());
      rn.put("scrapeIntervalMs", run.scrapeIntervalMs());
      ArrayNode a = rn.putArray("arguments");
      run.arguments().forEach(a::add);
    }
    ArrayNode arr = root.putArray("scenarios");
    for (ScenarioResult s : scenarios) {
      ObjectNode sn = arr.addObject();
      sn.put("scenario", s.scenario());
      sn.put("description", s.description());
      sn.put("loadLevel", s.loadLevel());
      sn.put("seed", s.seed());
      putNumber(sn, "hitRateCeiling", round(s.hitRateCeiling(), 4));
      putNumber(sn, "capacityCrossoverLoadLevel", round(s.capacityCrossover(), 3));
      sn.set("load", m.valueToTree(s.load()));
      ArrayNode rs = sn.putArray("results");
      for (PolicyResult r : s.results()) {
        ObjectNode o = rs.addObject();
        o.put("policy", r.policy());
        putNumber(o, "prefixCacheHitRate", round(r.prefixCacheHitRate(), 4));
        putNumber(o, "ttftP50Ms", round(r.ttftP50Ms(), 2));
        putNumber(o, "ttftP95Ms", round(r.ttftP95Ms(), 2));
        putNumber(o, "ttftP99Ms", round(r.ttftP99Ms(), 2));
        putNumber(o, "itlP50Ms", round(r.itlP50Ms(), 2));
        putNumber(o, "e2eP50Ms", round(r.e2eP50Ms(), 2));
        putNumber(o, "e2eP95Ms", round(r.e2eP95Ms(), 2));
        o.put("outputTokensPerSec", round(r.outputTokensPerSec(), 1));
        o.put("requests", r.requests());
        o.put("preemptions", r.preemptions());
        o.put("evictions", r.evictions());
        o.put("maxRequestsPerReplica", r.maxRequestsPerReplica());
        o.put("meanRequestsPerReplica", round(r.meanRequestsPerReplica(), 2));
        o.put("maxSessionsPerReplica", r.maxSessionsPerReplica());
        o.put("meanSessionsPerReplica", round(r.meanSessionsPerReplica(), 2));
        putNumber(o, "routingMeanMicros", round(r.routingMeanMicros(), 1));
        putNumber(o, "routingP99Micros", round(r.routingP99Micros(), 1));
        putNumber(o, "routingWarmMeanMicros", round(r.routingWarmMeanMicros(), 1));
        putNumber(o, "routingWarmP99Micros", round(r.routingWarmP99Micros(), 1));
        o.put("clippedRequests", r.clippedRequests());
        o.put("rejectedRequests", r.rejectedRequests());
        o.put("routerRejectedRequests", r.routerRejectedRequests());
        o.put("unservedRequests", r.unservedRequests());
        o.put("simulatedSeconds", round(r.simulatedSeconds(), 3));
        PdStats pd = r.pd();
        if (pd.reported()) {
          ObjectNode pn = o.putObject("pd");
          pn.put("roles", pd.cluster());
          pn.put("disaggregatedRequests", pd.disaggregated());
          pn.put("transferredTokens", pd.transferredTokens());
          pn.put("decodeHitTokens", pd.decodeHitTokens());
          putNumber(pn, "transferMeanMs", round(pd.transferMeanMs(), 3));
          putNumber(pn, "transferP95Ms", round(pd.transferP95Ms(), 3));
          putNumber(pn, "itlP95Ms", round(pd.itlP95Ms(), 2));
        }
      }
    }
    if (dominance != null) {
      ObjectNode dn = root.putObject("dominance");
      dn.put("subject", Dominance.SUBJECT);
      dn.put("hitTolerance", Dominance.HIT_TOLERANCE);
      dn.put("p95Factor", Dominance.P95_FACTOR);
      dn.put("p95SlackMs", Dominance.P95_SLACK_MS);
      int[] counts = new int[Dominance.Outcome.values().length];
      ArrayNode pts = dn.putArray("points");
      for (Dominance.Verdict v : dominance) {
        counts[v.outcome().ordinal()]++;
        ObjectNode pn = pts.addObject();
        pn.put("scenario", v.point().scenario());
        pn.put("loadLevel", v.point().loadLevel());
        pn.put("seed", v.point().seed());
        putNumber(pn, "hitRate", round(v.subject().prefixCacheHitRate(), 4));
        putNumber(pn, "ttftP95Ms", round(v.subject().ttftP95Ms(), 2));
        putNumber(pn, "bestOtherHitRate", round(v.bestHit().prefixCacheHitRate(), 4));
        pn.put("bestOtherHitPolicy", v.bestHit().policy());
        putNumber(pn, "bestOtherTtftP95Ms", round(v.bestP95().ttftP95Ms(), 2));
        pn.put("bestOtherP95Policy", v.bestP95().policy());
        pn.put("outcome", v.outcome().name().toLowerCase(Locale.ROOT));
      }
      for (Dominance.Outcome o : Dominance.Outcome.values()) {
        dn.put(o.name().toLowerCase(Locale.ROOT), counts[o.ordinal()]);
      }
      // the same target applied to each policy against the best of the others
      ObjectNode every = dn.putObject("everyPolicy");
      Dominance.countsByPolicy(dominance).forEach((policy, n) -> {
        ObjectNode pn = every.putObject(policy);
        for (Dominance.Outcome o : Dominance.Outcome.values()) {
          pn.put(o.name().toLowerCase(Locale.ROOT), n[o.ordinal()]);
        }
      });
    }
    try {
      return m.writeValueAsString(root) + "\n";
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * The JSON report without wall-clock measurements (routing times), which differ between
   * otherwise identical runs.
   */
  static String toDeterministicJson(List<ScenarioResult> scenarios) {
    return toJson(scenarios).replaceAll(
        "\"routing(Mean|P99|WarmMean|WarmP99)Micros\" : [0-9.E-]+", "\"routing$1Micros\" : 0");
  }

  /** A number, or JSON null for NaN (a fact that does not apply). */
  private static void putNumber(ObjectNode n, String field, double v) {
    if (Double.isNaN(v)) {
      n.putNull(field);
    } else {
      n.put(field, v);
    }
  }

  private static double round(double v, int digits) {
    if (Double.isNaN(v)) {
      return v;
    }
    double f = Math.pow(10, digits);
    return Math.round(v * f) / f;
  }

  /** CSV without run metadata. */
  public static String toCsv(List<ScenarioResult> scenarios) {
    return toCsv(null, scenarios);
  }

  /**
   * CSV, one row per scenario and policy. With {@code run}, every row ends with the run's
   * metadata and the scenario's load parameters ({@code load}: {@code name=value} pairs joined
   * by spaces), so that any row read alone says what produced it. Every figure of a JSON result
   * has a column, named as in the JSON; those of its {@code pd} object are prefixed with
   * {@code pd} ({@code pdTransferMeanMs}) and empty for a run the JSON gives no {@code pd}.
   */
  public static String toCsv(@Nullable RunInfo run, List<ScenarioResult> scenarios) {
    StringBuilder sb = new StringBuilder();
    sb.append("scenario,policy,prefixCacheHitRate,ttftP50Ms,ttftP95Ms,ttftP99Ms,itlP50Ms,"
        + "e2eP50Ms,e2eP95Ms,outputTokensPerSec,requests,preemptions,evictions,"
        + "maxRequestsPerReplica,meanRequestsPerReplica,maxSessionsPerReplica,"
        + "meanSessionsPerReplica,routingMeanMicros,routingP99Micros,clippedRequests,"
        + "rejectedRequests,simulatedSeconds,loadLevel");
    // columns added later go last, so that readers of the earlier layout keep their positions
    sb.append(run == null ? "" : ",seed,replicas,profile,scrapeIntervalMs,version,load");
    sb.append(",routingWarmMeanMicros,routingWarmP99Micros,unservedRequests,"
        + "routerRejectedRequests,pdRoles,pdDisaggregatedRequests,pdTransferredTokens,"
        + "pdDecodeHitTokens,pdTransferMeanMs,pdTransferP95Ms,pdItlP95Ms\n");
    for (ScenarioResult s : scenarios) {
      for (PolicyResult r : s.results()) {
        sb.append(String.format(Locale.ROOT,
            "%s,%s,%s,%s,%s,%s,%s,%s,%s,%.1f,%d,%d,%d,%d,%.2f,%d,%.2f,%s,%s,%d,%d,%.3f",
            s.scenario(), csvField(r.policy()), csvNumber(r.prefixCacheHitRate(), 4),
            csvNumber(r.ttftP50Ms(), 2),
            csvNumber(r.ttftP95Ms(), 2), csvNumber(r.ttftP99Ms(), 2), csvNumber(r.itlP50Ms(), 2),
            csvNumber(r.e2eP50Ms(), 2), csvNumber(r.e2eP95Ms(), 2), r.outputTokensPerSec(),
            r.requests(), r.preemptions(), r.evictions(), r.maxRequestsPerReplica(),
            r.meanRequestsPerReplica(), r.maxSessionsPerReplica(), r.meanSessionsPerReplica(),
            csvNumber(r.routingMeanMicros(), 1), csvNumber(r.routingP99Micros(), 1),
            r.clippedRequests(), r.rejectedRequests(), r.simulatedSeconds()));
        sb.append(',').append(s.loadLevel());
        if (run != null) {
          StringBuilder load = new StringBuilder();
          s.load().forEach((k, v) -> load.append(load.length() == 0 ? "" : " ")
              .append(k).append('=').append(v));
          sb.append(String.format(Locale.ROOT, ",%d,%d,%s,%s,%s,%s", run.seed(), run.replicas(),
              csvField(run.profile()), run.scrapeIntervalMs(), csvField(run.version()),
              csvField(load.toString())));
        }
        sb.append(',').append(csvNumber(r.routingWarmMeanMicros(), 1))
            .append(',').append(csvNumber(r.routingWarmP99Micros(), 1))
            .append(',').append(r.unservedRequests())
            .append(',').append(r.routerRejectedRequests());
        PdStats pd = r.pd();
        if (pd.reported()) {
          sb.append(',').append(pd.cluster()).append(',').append(pd.disaggregated())
              .append(',').append(pd.transferredTokens()).append(',').append(pd.decodeHitTokens())
              .append(',').append(csvNumber(pd.transferMeanMs(), 3))
              .append(',').append(csvNumber(pd.transferP95Ms(), 3))
              .append(',').append(csvNumber(pd.itlP95Ms(), 2));
        } else {
          // the JSON has no pd object for such a run: no P/D figure applies
          sb.append(",,,,,,,");
        }
        sb.append('\n');
      }
    }
    return sb.toString();
  }

  /** A number with {@code digits} decimals, or an empty field for a figure without samples. */
  static String csvNumber(double v, int digits) {
    return Double.isNaN(v) ? "" : String.format(Locale.ROOT, "%." + digits + "f", v);
  }

  /** Quotes a field when it holds a comma, quote or line break (RFC 4180). */
  static String csvField(String v) {
    if (v.indexOf(',') < 0 && v.indexOf('"') < 0 && v.indexOf('\n') < 0 && v.indexOf('\r') < 0) {
      return v;
    }
    return '"' + v.replace("\"", "\"\"") + '"';
  }

  public static void writeJson(@Nullable RunInfo run, List<ScenarioResult> s, Path p)
      throws IOException {
    Files.writeString(p, toJson(run, s), StandardCharsets.UTF_8);
  }

  static void writeJson(@Nullable RunInfo run, List<ScenarioResult> s,
      @Nullable List<Dominance.Verdict> dominance, Path p) throws IOException {
    Files.writeString(p, toJson(run, s, dominance), StandardCharsets.UTF_8);
  }

  public static void writeCsv(@Nullable RunInfo run, List<ScenarioResult> s, Path p)
      throws IOException {
    Files.writeString(p, toCsv(run, s), StandardCharsets.UTF_8);
  }

  private static final Color[] PALETTE = {
      new Color(0x1f77b4), new Color(0xd62728), new Color(0x2ca02c), new Color(0xff7f0e),
      new Color(0x9467bd), new Color(0x8c564b), new Color(0xe377c2), new Color(0x7f7f7f)};

  /**
   * A PNG with one TTFT CDF panel per scenario (log-scaled time axis), one line per policy; for
   * a load sweep (a scenario at more than one load level) {@link #writeSweepChart} instead.
   */
  public static void writeChart(List<ScenarioResult> scenarios, Path p) throws IOException {
    if (isSweep(scenarios)) {
      writeSweepChart(scenarios, p);
      return;
    }
    System.setProperty("java.awt.headless", "true");
    int panelW = 640;
    int panelH = 420;
    int w = panelW * scenarios.size();
    BufferedImage img = new BufferedImage(Math.max(w, panelW), panelH, BufferedImage.TYPE_INT_RGB);
    Graphics2D g = img.createGraphics();
    g.setRenderingHint(RenderingHints.KEY_ANTIALIASING, RenderingHints.VALUE_ANTIALIAS_ON);
    g.setRenderingHint(RenderingHints.KEY_TEXT_ANTIALIASING, RenderingHints.VALUE_TEXT_ANTIALIAS_ON);
    g.setColor(Color.WHITE);
    g.fillRect(0, 0, img.getWidth(), img.getHeight());
    for (int s = 0; s < scenarios.size(); s++) {
      drawPanel(g, scenarios.get(s), s * panelW, panelW, panelH);
    }
    g.dispose();
    if (!ImageIO.write(img, "png", p.toFile())) {
      throw new IOException("no PNG writer available");
    }
  }

  private static final float[][] DASHES = {
      null, {9f, 5f}, {2f, 4f}, {10f, 4f, 2f, 4f}, {16f, 6f}, {4f, 4f}, {2f, 2f, 8f, 2f}};

  private static BasicStroke stroke(int policyIndex) {
    float[] dash = DASHES[policyIndex % DASHES.length];
    return dash == null ? new BasicStroke(2f)
        : new BasicStroke(2f, BasicStroke.CAP_BUTT, BasicStroke.JOIN_MITER, 10f, dash, 0f);
  }

  /** Circle, square, triangle, diamond, cross, plus, x — one per policy. */
  private static void marker(Graphics2D g, int policyIndex, int x, int y) {
    int r = 4;
    switch (policyIndex % 7) {
      case 0 -> g.drawOval(x - r, y - r, 2 * r, 2 * r);
      case 1 -> g.drawRect(x - r, y - r, 2 * r, 2 * r);
      case 2 -> g.drawPolygon(new int[] {x - r, x + r, x}, new int[] {y + r, y + r, y - r}, 3);
      case 3 -> g.drawPolygon(new int[] {x, x + r, x, x - r}, new int[] {y - r, y, y + r, y}, 4);
      case 4 -> g.fillOval(x - r, y - r, 2 * r, 2 * r);
      case 5 -> {
        g.drawLine(x - r, y, x + r, y);
        g.drawLine(x, y - r, x, y + r);
      }
      default -> {
        g.drawLine(x - r, y - r, x + r, y + r);
        g.drawLine(x - r, y + r, x + r, y - r);
      }
    }
  }

  private static int xOf(double ms, double logLo, double logHi, int left, int right) {
    double lx = Math.log10(Math.max(ms, Math.pow(10, logLo)));
    return (int) (left + (lx - logLo) / (logHi - logLo) * (right - left));
  }

  private static void drawPanel(Graphics2D g, ScenarioResult s, int x0, int w, int h) {
    int left = x0 + 60;
    int right = x0 + w - 20;
    int top = 40;
    int bottom = h - 50;
    double lo = Double.MAX_VALUE;
    double hi = 0;
    for (PolicyResult r : s.results()) {
      double[] v = r.ttftCdfMs();
      if (v.length > 0) {
        lo = Math.min(lo, Math.max(0.1, v[0]));
        hi = Math.max(hi, v[v.length - 1]);
      }
    }
    if (hi <= 0) {
      lo = 1;
      hi = 10;
    }
    double logLo = Math.floor(Math.log10(lo));
    double logHi = Math.ceil(Math.log10(Math.max(hi, lo * 10)));
    g.setColor(Color.BLACK);
    g.setFont(new Font(Font.SANS_SERIF, Font.BOLD, 14));
    g.drawString("TTFT CDF — " + s.scenario(), left, 24);
    g.setFont(new Font(Font.SANS_SERIF, Font.PLAIN, 11));
    g.drawRect(left, top, right - left, bottom - top);
    for (double d = logLo; d <= logHi; d++) {
      int x = (int) (left + (d - logLo) / (logHi - logLo) * (right - left));
      g.setColor(new Color(0xDDDDDD));
      g.drawLine(x, top, x, bottom);
      g.setColor(Color.BLACK);
      double v = Math.pow(10, d);
      g.drawString(v >= 1000 ? String.format(Locale.ROOT, "%.0fs", v / 1000)
          : String.format(Locale.ROOT, "%sms", v >= 1 ? String.valueOf((long) v) : String.valueOf(v)),
          x - 12, bottom + 15);
    }
    for (int q = 0; q <= 4; q++) {
      int y = bottom - q * (bottom - top) / 4;
      g.setColor(new Color(0xDDDDDD));
      g.drawLine(left, y, right, y);
      g.setColor(Color.BLACK);
      g.drawString(String.format(Locale.ROOT, "%.2f", q / 4.0), x0 + 25, y + 4);
    }
    g.drawString("time to first token (log scale)", left + (right - left) / 2 - 80, h - 15);
    // policies that made the same decisions draw the same curve; distinct dashes and markers
    // (placed at different quantiles for each policy) keep the lower curves visible
    int li = 0;
    for (PolicyResult r : s.results()) {
      Color c = PALETTE[li % PALETTE.length];
      g.setColor(c);
      g.setStroke(stroke(li));
      double[] v = r.ttftCdfMs();
      java.awt.geom.Path2D.Double line = new java.awt.geom.Path2D.Double();
      int px = -1;
      int py = -1;
      for (int i = 0; i < v.length; i++) {
        int x = xOf(v[i], logLo, logHi, left, right);
        int y = (int) (bottom - (i + 1) / (double) v.length * (bottom - top));
        if (px < 0) {
          line.moveTo(x, y);
        } else {
          line.lineTo(x, py);
          line.lineTo(x, y);
        }
        px = x;
        py = y;
      }
      g.draw(line);
      g.setStroke(new BasicStroke(1.5f));
      if (v.length > 0) {
        for (int q = 0; q < 5; q++) {
          double quantile = 0.1 + q * 0.2 + li * 0.03;
          int i = Math.min(v.length - 1, (int) (quantile * v.length));
          int x = xOf(v[i], logLo, logHi, left, right);
          int y = (int) (bottom - (i + 1) / (double) v.length * (bottom - top));
          marker(g, li, x, y);
        }
      }
      int ly = top + 12 + li * 16;
      g.setStroke(stroke(li));
      g.drawLine(left + 8, ly, left + 34, ly);
      g.setStroke(new BasicStroke(1.5f));
      marker(g, li, left + 21, ly);
      g.setColor(Color.BLACK);
      g.drawString(r.policy(), left + 40, ly + 4);
      li++;
    }
  }

  /** Whether some scenario was run at more than one load level. */
  static boolean isSweep(List<ScenarioResult> scenarios) {
    java.util.Map<String, java.util.Set<Double>> levels = new java.util.HashMap<>();
    for (ScenarioResult s : scenarios) {
      levels.computeIfAbsent(s.scenario(), k -> new java.util.HashSet<>()).add(s.loadLevel());
    }
    return levels.values().stream().anyMatch(l -> l.size() > 1);
  }

  /**
   * A load sweep: one row per scenario, TTFT p95 against the load level (log-scaled) on the left
   * and the hit rate against it on the right, one line per policy; points of several seeds at
   * one level are averaged. Each policy has its own colour, dash pattern and marker, so lines
   * that coincide stay distinguishable.
   */
  static void writeSweepChart(List<ScenarioResult> scenarios, Path p) throws IOException {
    System.setProperty("java.awt.headless", "true");
    var data = sweepMeans(scenarios);
    int panelW = 560;
    int panelH = 400;
    BufferedImage img = new BufferedImage(2 * panelW, panelH * data.size(),
        BufferedImage.TYPE_INT_RGB);
    Graphics2D g = img.createGraphics();
    g.setRenderingHint(RenderingHints.KEY_ANTIALIASING, RenderingHints.VALUE_ANTIALIAS_ON);
    g.setRenderingHint(RenderingHints.KEY_TEXT_ANTIALIASING,
        RenderingHints.VALUE_TEXT_ANTIALIAS_ON);
    g.setColor(Color.WHITE);
    g.fillRect(0, 0, img.getWidth(), img.getHeight());
    int row = 0;
    for (var e : data.entrySet()) {
      drawSweepPanel(g, e.getKey(), e.getValue(), true, 0, row * panelH, panelW, panelH);
      drawSweepPanel(g, e.getKey(), e.getValue(), false, panelW, row * panelH, panelW, panelH);
      row++;
    }
    g.dispose();
    if (!ImageIO.write(img, "png", p.toFile())) {
      throw new IOException("no PNG writer available");
    }
  }

  /**
   * The sweep chart's points: scenario → policy → level → {mean TTFT p95, mean hit rate} over the
   * seeds run at that level, each mean taken over the seeds that have the figure; NaN (no point
   * drawn) when none has it, so a seed without a figure neither counts as 0 nor hides the others.
   */
  static java.util.Map<String, java.util.Map<String, java.util.TreeMap<Double, double[]>>>
      sweepMeans(List<ScenarioResult> scenarios) {
    // scenario -> policy -> level -> {sum p95, p95 count, sum hit, hit count}
    java.util.Map<String, java.util.Map<String, java.util.TreeMap<Double, double[]>>> sums =
        new java.util.LinkedHashMap<>();
    for (ScenarioResult s : scenarios) {
      var byPolicy = sums.computeIfAbsent(s.scenario(), k -> new java.util.LinkedHashMap<>());
      for (PolicyResult r : s.results()) {
        double[] acc = byPolicy.computeIfAbsent(r.policy(), k -> new java.util.TreeMap<>())
            .computeIfAbsent(s.loadLevel(), k -> new double[4]);
        if (!Double.isNaN(r.ttftP95Ms())) {
          acc[0] += r.ttftP95Ms();
          acc[1]++;
        }
        if (!Double.isNaN(r.prefixCacheHitRate())) {
          acc[2] += r.prefixCacheHitRate();
          acc[3]++;
        }
      }
    }
    for (var byPolicy : sums.values()) {
      for (var levels : byPolicy.values()) {
        levels.replaceAll((level, acc) -> new double[] {
            acc[1] == 0 ? Double.NaN : acc[0] / acc[1],
            acc[3] == 0 ? Double.NaN : acc[2] / acc[3]});
      }
    }
    return sums;
  }

  private static void drawSweepPanel(Graphics2D g, String scenario,
      java.util.Map<String, java.util.TreeMap<Double, double[]>> byPolicy, boolean p95, int x0,
      int y0, int w, int h) {
    int left = x0 + 64;
    int right = x0 + w - 20;
    // the legend gets its own rows under the title: inside the plot it would hide lines
    g.setFont(new Font(Font.SANS_SERIF, Font.PLAIN, 11));
    List<int[]> legendAt = new java.util.ArrayList<>();
    int lx0 = 0;
    int lrow = 0;
    for (String name : byPolicy.keySet()) {
      int width = 32 + g.getFontMetrics().stringWidth(name) + 14;
      if (lx0 > 0 && left + lx0 + width > right) {
        lx0 = 0;
        lrow++;
      }
      legendAt.add(new int[] {left + lx0, y0 + 42 + lrow * 16});
      lx0 += width;
    }
    int top = y0 + 56 + lrow * 16;
    int bottom = y0 + h - 50;
    double xLo = Double.MAX_VALUE;
    double xHi = -Double.MAX_VALUE;
    double yLo = Double.MAX_VALUE;
    double yHi = 0;
    for (var levels : byPolicy.values()) {
      for (var e : levels.entrySet()) {
        xLo = Math.min(xLo, e.getKey());
        xHi = Math.max(xHi, e.getKey());
        double v = e.getValue()[p95 ? 0 : 1];
        if (Double.isNaN(v)) {
          continue;
        }
        yLo = Math.min(yLo, v);
        yHi = Math.max(yHi, v);
      }
    }
    if (xHi <= xLo) {
      xHi = xLo + 1;
    }
    if (yLo > yHi) {
      // no policy has a figure at any level: an empty panel on the default scale
      yLo = 1;
      yHi = 1;
    }
    double logLo = 0;
    double logHi = 1;
    if (p95) {
      logLo = Math.floor(Math.log10(Math.max(0.1, yLo)));
      logHi = Math.max(logLo + 1, Math.ceil(Math.log10(Math.max(0.1, yHi))));
    }
    g.setColor(Color.BLACK);
    g.setFont(new Font(Font.SANS_SERIF, Font.BOLD, 14));
    g.drawString((p95 ? "TTFT p95 vs load — " : "Prefix-cache hit rate vs load — ") + scenario,
        left, y0 + 24);
    g.setFont(new Font(Font.SANS_SERIF, Font.PLAIN, 11));
    g.drawRect(left, top, right - left, bottom - top);
    final double fxLo = xLo;
    final double fxHi = xHi;
    java.util.function.DoubleToIntFunction xOf = v ->
        (int) (left + (v - fxLo) / (fxHi - fxLo) * (right - left));
    final double fLogLo = logLo;
    final double fLogHi = logHi;
    java.util.function.DoubleToIntFunction yOf = p95
        ? v -> (int) (bottom - (Math.log10(Math.max(v, Math.pow(10, fLogLo))) - fLogLo)
            / (fLogHi - fLogLo) * (bottom - top))
        : v -> (int) (bottom - v * (bottom - top));
    java.util.Set<Double> xs = new java.util.TreeSet<>();
    byPolicy.values().forEach(l -> xs.addAll(l.keySet()));
    for (double x : xs) {
      int px = xOf.applyAsInt(x);
      g.setColor(new Color(0xDDDDDD));
      g.drawLine(px, top, px, bottom);
      g.setColor(Color.BLACK);
      g.drawString("×" + Main.levelText(x), px - 8, bottom + 15);
    }
    if (p95) {
      for (double d = logLo; d <= logHi; d++) {
        int py = yOf.applyAsInt(Math.pow(10, d));
        g.setColor(new Color(0xDDDDDD));
        g.drawLine(left, py, right, py);
        g.setColor(Color.BLACK);
        double v = Math.pow(10, d);
        g.drawString(v >= 1000 ? String.format(Locale.ROOT, "%.0fs", v / 1000)
            : String.format(Locale.ROOT, "%sms", v >= 1 ? String.valueOf((long) v)
                : String.valueOf(v)), x0 + 20, py + 4);
      }
    } else {
      for (int q = 0; q <= 4; q++) {
        int py = yOf.applyAsInt(q / 4.0);
        g.setColor(new Color(0xDDDDDD));
        g.drawLine(left, py, right, py);
        g.setColor(Color.BLACK);
        g.drawString(String.format(Locale.ROOT, "%d%%", q * 25), x0 + 25, py + 4);
      }
    }
    g.drawString("load level (× the scenario's offered load)", left + (right - left) / 2 - 110,
        y0 + h - 15);
    int li = 0;
    for (var e : byPolicy.entrySet()) {
      Color c = PALETTE[li % PALETTE.length];
      g.setColor(c);
      java.awt.geom.Path2D.Double line = new java.awt.geom.Path2D.Double();
      boolean first = true;
      List<int[]> points = new java.util.ArrayList<>();
      for (var lv : e.getValue().entrySet()) {
        double v = lv.getValue()[p95 ? 0 : 1];
        if (Double.isNaN(v)) {
          // no figure at this level: no point, and the line starts again after it
          first = true;
          continue;
        }
        int px = xOf.applyAsInt(lv.getKey());
        int py = yOf.applyAsInt(v);
        if (first) {
          line.moveTo(px, py);
          first = false;
        } else {
          line.lineTo(px, py);
        }
        points.add(new int[] {px, py});
      }
      g.setStroke(stroke(li));
      g.draw(line);
      g.setStroke(new BasicStroke(1.5f));
      for (int[] pt : points) {
        marker(g, li, pt[0], pt[1]);
      }
      int lx = legendAt.get(li)[0];
      int ly = legendAt.get(li)[1];
      g.setStroke(stroke(li));
      g.drawLine(lx, ly, lx + 26, ly);
      g.setStroke(new BasicStroke(1.5f));
      marker(g, li, lx + 13, ly);
      g.setColor(Color.BLACK);
      g.drawString(e.getKey(), lx + 32, ly + 4);
      li++;
    }
  }
}
