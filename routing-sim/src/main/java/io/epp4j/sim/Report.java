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

/** Writes a comparison as a text table, JSON, CSV or a PNG chart of TTFT CDFs. */
public final class Report {
  private Report() {}

  /** The table for one scenario, with its description above. */
  public static void printTable(ScenarioResult s, PrintStream out) {
    out.println("== " + s.scenario());
    for (String line : s.description().split("\\R")) {
      out.println("   " + line);
    }
    String header = String.format(Locale.ROOT,
        "%-18s %6s %9s %9s %9s %7s %9s %9s %8s %6s %6s %8s %10s %10s %9s %8s",
        "policy", "hit%", "ttft p50", "ttft p95", "ttft p99", "itl p50", "e2e p50", "e2e p95",
        "out tok/s", "reqs", "preempt", "evict", "req/rep", "sess/rep", "route µs", "clipped");
    out.println(header);
    for (PolicyResult r : s.results()) {
      out.println(String.format(Locale.ROOT,
          "%-18s %5.1f%% %9s %9s %9s %7s %9s %9s %8.0f %6d %6d %8d %4d/%5.1f %4d/%5.1f %4.0f/%4.0f %8d",
          r.policy(), r.prefixCacheHitRate() * 100, ms(r.ttftP50Ms()), ms(r.ttftP95Ms()),
          ms(r.ttftP99Ms()), ms(r.itlP50Ms()), ms(r.e2eP50Ms()), ms(r.e2eP95Ms()),
          r.outputTokensPerSec(), r.requests(), r.preemptions(), r.evictions(),
          r.maxRequestsPerReplica(), r.meanRequestsPerReplica(), r.maxSessionsPerReplica(),
          r.meanSessionsPerReplica(), r.routingMeanMicros(), r.routingP99Micros(),
          r.clippedRequests()));
    }
    out.println("   (req/rep and sess/rep: max/mean per replica; route µs: mean/p99 wall time per"
        + " routing decision)");
    for (PolicyResult r : s.results()) {
      out.println(String.format(Locale.ROOT,
          "   %s: %.1f simulated s in %.2f wall s, %.0f simulated requests per wall second%s",
          r.policy(), r.simulatedSeconds(), r.wallSeconds(), r.simulatedRequestsPerWallSecond(),
          r.rejectedRequests() > 0 ? ", " + r.rejectedRequests() + " rejected" : ""));
    }
  }

  static String ms(double v) {
    return v >= 10_000 ? String.format(Locale.ROOT, "%.1fs", v / 1000)
        : v >= 100 ? String.format(Locale.ROOT, "%.0fms", v)
        : String.format(Locale.ROOT, "%.1fms", v);
  }

  /** The JSON report: {@code {"scenarios":[{"scenario":..,"results":[{..}]}]}}. */
  public static String toJson(List<ScenarioResult> scenarios) {
    ObjectMapper m = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
    ObjectNode root = m.createObjectNode();
    ArrayNode arr = root.putArray("scenarios");
    for (ScenarioResult s : scenarios) {
      ObjectNode sn = arr.addObject();
      sn.put("scenario", s.scenario());
      sn.put("description", s.description());
      ArrayNode rs = sn.putArray("results");
      for (PolicyResult r : s.results()) {
        ObjectNode o = rs.addObject();
        o.put("policy", r.policy());
        o.put("prefixCacheHitRate", round(r.prefixCacheHitRate(), 4));
        o.put("ttftP50Ms", round(r.ttftP50Ms(), 2));
        o.put("ttftP95Ms", round(r.ttftP95Ms(), 2));
        o.put("ttftP99Ms", round(r.ttftP99Ms(), 2));
        o.put("itlP50Ms", round(r.itlP50Ms(), 2));
        o.put("e2eP50Ms", round(r.e2eP50Ms(), 2));
        o.put("e2eP95Ms", round(r.e2eP95Ms(), 2));
        o.put("outputTokensPerSec", round(r.outputTokensPerSec(), 1));
        o.put("requests", r.requests());
        o.put("preemptions", r.preemptions());
        o.put("evictions", r.evictions());
        o.put("maxRequestsPerReplica", r.maxRequestsPerReplica());
        o.put("meanRequestsPerReplica", round(r.meanRequestsPerReplica(), 2));
        o.put("maxSessionsPerReplica", r.maxSessionsPerReplica());
        o.put("meanSessionsPerReplica", round(r.meanSessionsPerReplica(), 2));
        o.put("routingMeanMicros", round(r.routingMeanMicros(), 1));
        o.put("routingP99Micros", round(r.routingP99Micros(), 1));
        o.put("clippedRequests", r.clippedRequests());
        o.put("rejectedRequests", r.rejectedRequests());
        o.put("simulatedSeconds", round(r.simulatedSeconds(), 3));
      }
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
    return toJson(scenarios).replaceAll("\"routing(Mean|P99)Micros\" : [0-9.E-]+", "\"routing$1Micros\" : 0");
  }

  private static double round(double v, int digits) {
    double f = Math.pow(10, digits);
    return Math.round(v * f) / f;
  }

  /** CSV, one row per scenario and policy. */
  public static String toCsv(List<ScenarioResult> scenarios) {
    StringBuilder sb = new StringBuilder();
    sb.append("scenario,policy,prefixCacheHitRate,ttftP50Ms,ttftP95Ms,ttftP99Ms,itlP50Ms,"
        + "e2eP50Ms,e2eP95Ms,outputTokensPerSec,requests,preemptions,evictions,"
        + "maxRequestsPerReplica,meanRequestsPerReplica,maxSessionsPerReplica,"
        + "meanSessionsPerReplica,routingMeanMicros,routingP99Micros,clippedRequests,"
        + "rejectedRequests,simulatedSeconds\n");
    for (ScenarioResult s : scenarios) {
      for (PolicyResult r : s.results()) {
        sb.append(String.format(Locale.ROOT,
            "%s,%s,%.4f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.1f,%d,%d,%d,%d,%.2f,%d,%.2f,%.1f,%.1f,%d,%d,%.3f%n",
            s.scenario(), r.policy(), r.prefixCacheHitRate(), r.ttftP50Ms(), r.ttftP95Ms(),
            r.ttftP99Ms(), r.itlP50Ms(), r.e2eP50Ms(), r.e2eP95Ms(), r.outputTokensPerSec(),
            r.requests(), r.preemptions(), r.evictions(), r.maxRequestsPerReplica(),
            r.meanRequestsPerReplica(), r.maxSessionsPerReplica(), r.meanSessionsPerReplica(),
            r.routingMeanMicros(), r.routingP99Micros(), r.clippedRequests(),
            r.rejectedRequests(), r.simulatedSeconds()));
      }
    }
    return sb.toString();
  }

  public static void writeJson(List<ScenarioResult> s, Path p) throws IOException {
    Files.writeString(p, toJson(s), StandardCharsets.UTF_8);
  }

  public static void writeCsv(List<ScenarioResult> s, Path p) throws IOException {
    Files.writeString(p, toCsv(s), StandardCharsets.UTF_8);
  }

  private static final Color[] PALETTE = {
      new Color(0x1f77b4), new Color(0xd62728), new Color(0x2ca02c), new Color(0xff7f0e),
      new Color(0x9467bd), new Color(0x8c564b), new Color(0xe377c2), new Color(0x7f7f7f)};

  /** A PNG with one TTFT CDF panel per scenario (log-scaled time axis), one line per policy. */
  public static void writeChart(List<ScenarioResult> scenarios, Path p) throws IOException {
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
    g.setStroke(new BasicStroke(2f));
    int li = 0;
    for (PolicyResult r : s.results()) {
      Color c = PALETTE[li % PALETTE.length];
      g.setColor(c);
      double[] v = r.ttftCdfMs();
      int px = -1;
      int py = -1;
      for (int i = 0; i < v.length; i++) {
        double lx = Math.log10(Math.max(v[i], Math.pow(10, logLo)));
        int x = (int) (left + (lx - logLo) / (logHi - logLo) * (right - left));
        int y = (int) (bottom - (i + 1) / (double) v.length * (bottom - top));
        if (px >= 0) {
          g.drawLine(px, py, x, py);
          g.drawLine(x, py, x, y);
        }
        px = x;
        py = y;
      }
      g.fillRect(left + 10, top + 10 + li * 16, 12, 4);
      g.setColor(Color.BLACK);
      g.drawString(r.policy(), left + 28, top + 16 + li * 16);
      li++;
    }
  }
}
