package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

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
  void theLegendExplainsClipped() {
    assertThat(table(result("a", 0.5, 1, 2, 10, 3))).contains("clipped:");
  }
}
