package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.awt.image.BufferedImage;
import java.nio.file.Path;
import java.util.List;
import javax.imageio.ImageIO;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ReportTest {

  private static PolicyResult result(String policy, double hitRate, double routeMean,
      double routeP99, long evictions, int clipped) {
    return new PolicyResult(policy, hitRate, 39.5, 87.3, 1609, 21.2, 4307, 8263, 2075, 1536, 0,
        evictions, 311, 256.0, 55, 44.3, routeMean, routeP99, clipped, 0, 0, "", 148.2, 0.23,
        6726, new double[] {1, 2, 3});
  }

  private static String table(PolicyResult... rs) {
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    Report.printTable(new ScenarioResult("s", "a scenario", List.of(rs)),
        new PrintStream(b, true, StandardCharsets.UTF_8));
    return b.toString(StandardCharsets.UTF_8);
  }

  @Test
  void columnsStayAlignedWhenRoutingTimesAndCountsGrow() {
    String t = table(
        result("round-robin", 0.311, 7, 38, 421_055, 0),
        result("a-long-policy-name-from-a-config-file", 0.9, 12_345.6, 987_654.3, 123_456_789, 646),
        result("sticky", 0.51, 6, 28, 0, 0));
    List<String> lines = t.lines().filter(l -> !l.startsWith(" ") && !l.startsWith("==")).toList();
    String header = lines.get(0);
    assertThat(header).startsWith("policy");
    // every column is right-aligned to the end of its header label
    for (String label : List.of("hit%", "ttft p50", "evict", "route µs", "clipped")) {
      int end = header.indexOf(label) + label.length();
      for (String row : lines.subList(1, lines.size())) {
        assertThat(row.charAt(end - 1)).as("%s in%n%s", label, t).isNotEqualTo(' ');
        assertThat(end == row.length() || row.charAt(end) == ' ').as("%s in%n%s", label, t)
            .isTrue();
      }
    }
    assertThat(lines).allSatisfy(l -> assertThat(l).hasSameSizeAs(header));
  }

  /**
   * One-token outputs have no time between tokens: the ITL figure has no sample, and the table,
   * the JSON and the CSV say so instead of reporting a measured 0 ms.
   */
  @Test
  void aFigureWithoutSamplesIsReportedAsNoneNotAsZero() throws Exception {
    SharedPrefixWorkload oneToken = new SharedPrefixWorkload(2, 2, LengthDist.fixed(500),
        LengthDist.fixed(100), LengthDist.fixed(1), 8, 2, 0);
    Simulation.Settings settings = new Simulation.Settings(HardwareProfile.qwen3H100Mps6(), 2, 1,
        50_000_000L, null);
    PolicyResult r = new Simulation(settings, oneToken, Policy.ROUND_ROBIN, null).run();
    assertThat(r.requests()).isEqualTo(8);
    assertThat(r.ttftP50Ms()).isPositive();
    assertThat(r.itlP50Ms()).isNaN();
    // a run is still the same outcome as itself
    assertThat(r.sameOutcomeAs(new Simulation(settings, oneToken, Policy.ROUND_ROBIN, null)
        .run())).isTrue();

    ScenarioResult s = new ScenarioResult("s", "a scenario", List.of(r));
    String row = table(r).lines().filter(l -> l.startsWith("round-robin")).findFirst()
        .orElseThrow();
    String[] cells = row.trim().split(" +");
    // policy, hit%, ttft p50/p95/p99, then itl p50
    assertThat(cells[5]).isEqualTo("–");
    com.fasterxml.jackson.databind.JsonNode json = new com.fasterxml.jackson.databind.ObjectMapper()
        .readTree(Report.toJson(List.of(s))).path("scenarios").path(0).path("results").path(0);
    assertThat(json.get("itlP50Ms").isNull()).isTrue();
    assertThat(json.get("ttftP50Ms").isNumber()).isTrue();
    List<String> csv = Report.toCsv(List.of(s)).lines().toList();
    List<String> header = List.of(csv.get(0).split(","));
    String[] values = csv.get(1).split(",", -1);
    assertThat(values[header.indexOf("itlP50Ms")]).isEmpty();
    assertThat(Double.parseDouble(values[header.indexOf("ttftP50Ms")])).isPositive();
  }

  /**
   * Every figure the JSON gives a policy has a CSV column of the same name (a nested object's
   * fields prefixed with the object's name) holding the same value, so that a field added to one
   * report cannot be left out of the other unnoticed.
   */
  @Test
  void everyScalarFieldOfAJsonResultHasACsvColumnWithTheSameValue() throws Exception {
    PolicyResult plain = result("round-robin", 0.311, 7, 38, 421_055, 3);
    PolicyResult pd = new PolicyResult("epp4j-pd", 0.8, 39.5, 87.3, 1609, 21.2, 4307, 8263, 2075,
        1500, 2, 10, 311, 256.0, 55, 44.3, 70, 631, 27, 72, 0, 36, 20, "no endpoints", 148.2,
        0.23, 6726, new double[] {1, 2, 3},
        new PdStats(true, 400, 123_456, 7_890, 12.345, 45.678, 30.12), 5);
    PolicyResult noItl = new PolicyResult("sticky", 0.5, 10, 20, 30, Double.NaN, 100, 200, 50,
        10, 0, 0, 2, 1.5, 2, 1.5, Double.NaN, Double.NaN, Double.NaN, Double.NaN, 0, 0, 0, "",
        1.0, 0.1, 100, new double[] {10});
    List<ScenarioResult> s = List.of(new ScenarioResult("s", "a scenario",
        List.of(plain, pd, noItl)));
    com.fasterxml.jackson.databind.JsonNode results = new com.fasterxml.jackson.databind
        .ObjectMapper().readTree(Report.toJson(s)).path("scenarios").path(0).path("results");
    List<String> csv = Report.toCsv(s).lines().toList();
    List<String> header = List.of(csv.get(0).split(","));
    assertThat(csv).hasSize(1 + results.size());
    java.util.Set<String> checked = new java.util.HashSet<>();
    for (int i = 0; i < results.size(); i++) {
      String[] row = csv.get(i + 1).split(",", -1);
      assertThat(row).as("row %d has a field per column", i).hasSize(header.size());
      java.util.Map<String, com.fasterxml.jackson.databind.JsonNode> fields =
          new java.util.LinkedHashMap<>();
      results.get(i).fields().forEachRemaining(f -> {
        if (f.getValue().isObject()) {
          f.getValue().fields().forEachRemaining(g -> fields.put(f.getKey()
              + Character.toUpperCase(g.getKey().charAt(0)) + g.getKey().substring(1),
              g.getValue()));
        } else {
          fields.put(f.getKey(), f.getValue());
        }
      });
      for (var f : fields.entrySet()) {
        assertThat(f.getValue().isValueNode()).as(f.getKey()).isTrue();
        int c = header.indexOf(f.getKey());
        assertThat(c).as("CSV column for JSON field %s", f.getKey()).isNotNegative();
        String cell = row[c];
        com.fasterxml.jackson.databind.JsonNode v = f.getValue();
        if (v.isNull()) {
          assertThat(cell).as(f.getKey()).isEmpty();
        } else if (v.isNumber()) {
          assertThat(Double.parseDouble(cell)).as(f.getKey()).isEqualTo(v.asDouble());
        } else {
          assertThat(cell).as(f.getKey()).isEqualTo(v.asText());
        }
        checked.add(f.getKey());
      }
    }
    // the P/D result's pd object was walked too
    assertThat(checked).contains("policy", "routerRejectedRequests", "pdRoles",
        "pdTransferMeanMs", "pdItlP95Ms");
  }

  @Test
  void rowsThatDifferOnlyInRoutingTimeAreNamed() {
    String t = table(result("epp-approximate", 0.898, 57, 366, 54_557, 0),
        result("epp-precise", 0.901, 122, 512, 53_013, 0),
        result("epp-precise-hybrid", 0.901, 172, 710, 53_013, 0));
    assertThat(t).contains("epp-precise-hybrid = epp-precise on every column but route µs")
        .doesNotContain("epp-precise = epp-approximate");
    assertThat(table(result("a", 0.5, 1, 2, 10, 0), result("b", 0.6, 1, 2, 10, 0)))
        .doesNotContain(" = ");
  }

  @Test
  void aCurveDrawnUnderAnIdenticalOneStaysVisibleInTheChart(@TempDir Path dir) throws Exception {
    double[] cdf = new double[400];
    for (int i = 0; i < cdf.length; i++) {
      cdf[i] = 10 * Math.pow(100, i / (double) cdf.length);
    }
    PolicyResult a = withCdf(result("epp-precise", 0.9, 1, 2, 10, 0), cdf);
    PolicyResult b = withCdf(result("epp-precise-hybrid", 0.9, 1, 2, 10, 0), cdf);
    Path png = dir.resolve("c.png");
    Report.writeChart(List.of(new ScenarioResult("s", "d", List.of(a, b))), png);
    BufferedImage img = ImageIO.read(png.toFile());
    // below the legend (two entries from y = 50) only the curves use the policies' colours
    int first = 0;
    int second = 0;
    for (int y = 100; y < img.getHeight(); y++) {
      for (int x = 0; x < img.getWidth(); x++) {
        int rgb = img.getRGB(x, y) & 0xFFFFFF;
        first += rgb == 0x1f77b4 ? 1 : 0;
        second += rgb == 0xd62728 ? 1 : 0;
      }
    }
    assertThat(second).isPositive();
    // the first policy's line shows through the gaps of the second's dashes and in its markers
    assertThat(first).as("pixels of the lower curve").isGreaterThan(second / 4);
  }

  private static PolicyResult withCdf(PolicyResult r, double[] cdf) {
    return new PolicyResult(r.policy(), r.prefixCacheHitRate(), r.ttftP50Ms(), r.ttftP95Ms(),
        r.ttftP99Ms(), r.itlP50Ms(), r.e2eP50Ms(), r.e2eP95Ms(), r.outputTokensPerSec(),
        r.requests(), r.preemptions(), r.evictions(), r.maxRequestsPerReplica(),
        r.meanRequestsPerReplica(), r.maxSessionsPerReplica(), r.meanSessionsPerReplica(),
        r.routingMeanMicros(), r.routingP99Micros(), r.clippedRequests(), r.rejectedRequests(),
        r.routerRejectedRequests(), r.firstRouterRejection(), r.simulatedSeconds(),
        r.wallSeconds(), r.simulatedRequestsPerWallSecond(), cdf);
  }

  @Test
  void warmRoutingTimesHaveTheirOwnColumnAndFieldsAndAreLeftOutOfTheDeterministicReport() {
    PolicyResult r = new PolicyResult("epp-approximate", 0.9, 39.5, 87.3, 1609, 21.2, 4307,
        8263, 2075, 1536, 0, 10, 311, 256.0, 55, 44.3, 70, 631, 27, 72, 0, 0, 0, "", 148.2, 0.23,
        6726, new double[] {1, 2, 3});
    String t = table(r);
    assertThat(t).contains("warm µs", "27/72", "70/631", "warm µs:");
    List<ScenarioResult> s = List.of(new ScenarioResult("s", "d", List.of(r)));
    assertThat(Report.toJson(s)).contains("\"routingWarmMeanMicros\" : 27.0",
        "\"routingWarmP99Micros\" : 72.0");
    assertThat(Report.toDeterministicJson(s)).contains("\"routingWarmMeanMicros\" : 0,",
        "\"routingWarmP99Micros\" : 0,").doesNotContain("27.0", "72.0");
    assertThat(Report.toCsv(s)).contains(",27.0,72.0");
  }

  @Test
  void theLegendExplainsClipped() {
    assertThat(table(result("a", 0.5, 1, 2, 10, 3))).contains("clipped:");
  }

  @Test
  void aSweepChartAveragesTheSeedsThatHaveAFigureAndDrawsNoPointWhereNoneHas(@TempDir Path dir)
      throws Exception {
    double none = Double.NaN;
    List<ScenarioResult> sweep = new java.util.ArrayList<>();
    // level 1: two seeds, one without a hit rate (it looked no prompt up); level 2: neither has
    double[][] hits = {{0.6, none}, {none, none}};
    for (int l = 0; l < 2; l++) {
      for (int seed = 0; seed < 2; seed++) {
        PolicyResult r = result("sticky", hits[l][seed], 1, 2, 10, 0);
        sweep.add(new ScenarioResult("multi-turn", "d", List.of(r), java.util.Map.of(), l + 1,
            seed + 1, 0.9, 1.7));
      }
    }
    var means = Report.sweepMeans(sweep).get("multi-turn").get("sticky");
    assertThat(means.get(1.0)[1]).isEqualTo(0.6);
    assertThat(means.get(2.0)[1]).isNaN();
    assertThat(means.get(1.0)[0]).isEqualTo(87.3);
    Path png = dir.resolve("s.png");
    Report.writeChart(sweep, png);
    BufferedImage img = ImageIO.read(png.toFile());
    // a point without a figure would be drawn at the image's top edge, over the panel titles
    int strayAtTop = 0;
    int drawn = 0;
    for (int y = 0; y < img.getHeight(); y++) {
      for (int x = 0; x < img.getWidth(); x++) {
        if ((img.getRGB(x, y) & 0xFFFFFF) == 0x1f77b4) {
          drawn++;
          strayAtTop += y < 30 ? 1 : 0;
        }
      }
    }
    assertThat(drawn).isPositive();
    assertThat(strayAtTop).isZero();
  }

  @Test
  void aSweepChartDrawsEveryPolicyAtEveryLevelEvenWhenTwoCoincide(@TempDir Path dir)
      throws Exception {
    List<ScenarioResult> sweep = new java.util.ArrayList<>();
    for (double level : new double[] {1, 1.5, 2}) {
      PolicyResult a = result("sticky", 0.9 / level, 1, 2, 10, 0);
      PolicyResult b = result("epp4j", 0.9 / level, 1, 2, 10, 0);
      sweep.add(new ScenarioResult("multi-turn", "d", List.of(a, b), java.util.Map.of(), level, 1,
          0.9, 1.7));
    }
    assertThat(Report.isSweep(sweep)).isTrue();
    assertThat(Report.isSweep(sweep.subList(0, 1))).isFalse();
    Path png = dir.resolve("s.png");
    Report.writeChart(sweep, png);
    BufferedImage img = ImageIO.read(png.toFile());
    assertThat(img.getWidth()).isGreaterThan(img.getHeight()); // two panels side by side
    int first = 0;
    int second = 0;
    for (int y = 100; y < img.getHeight(); y++) {
      for (int x = 0; x < img.getWidth(); x++) {
        int rgb = img.getRGB(x, y) & 0xFFFFFF;
        first += rgb == 0x1f77b4 ? 1 : 0;
        second += rgb == 0xd62728 ? 1 : 0;
      }
    }
    assertThat(second).isPositive();
    // the line drawn first shows through the second's dashes and around its markers
    assertThat(first).as("pixels of the hidden line").isGreaterThan(second / 4);
  }
}
