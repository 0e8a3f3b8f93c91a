package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The report files: never written over an input, clear about a bad path, valid CSV. */
class OutputFilesTest {
  private static final String TRACE_LINE =
      "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [1, 2]}\n";
  private static final String CONFIG = CapturedMain.QUEUE_ONLY_CONFIG;

  private final CapturedMain cli = new CapturedMain();

  @Test
  void aReportNamingTheTraceFileIsRefusedAndTheTraceKept(@TempDir Path dir) throws Exception {
    Path trace = Files.writeString(dir.resolve("t.jsonl"), TRACE_LINE);
    for (String option : List.of("--json", "--csv", "--chart", "--requests-csv")) {
      cli.reset();
      assertThat(cli.run("--quiet", "--scenario", "trace", "--policies", "round-robin", "--trace",
          "mooncake:" + trace, option, dir.resolve("./t.jsonl").toString())).as(option)
          .isEqualTo(2);
      assertThat(cli.stderr()).contains(option + " ", "is the file of --trace mooncake:" + trace,
          "would overwrite its input");
      assertThat(Files.readString(trace)).isEqualTo(TRACE_LINE);
    }
  }

  @Test
  void aReportNamingAConfigFileIsRefusedAndTheConfigKept(@TempDir Path dir) throws Exception {
    Path cfg = Files.writeString(dir.resolve("queue-only.yaml"), CONFIG);
    Path link = Files.createSymbolicLink(dir.resolve("link.yaml"), cfg);
    assertThat(cli.run("--quiet", "--scenario", "multi-turn", "--dialogs", "2", "--turns", "1",
        "--config", cfg.toString(), "--csv", link.toString())).isEqualTo(2);
    assertThat(cli.stderr()).contains("--csv " + link + " is the file of --config " + cfg);
    assertThat(Files.readString(cfg)).isEqualTo(CONFIG);
  }

  @Test
  void aParentThatIsAFileIsCalledSo(@TempDir Path dir) throws Exception {
    Path file = Files.writeString(dir.resolve("plain"), "x");
    assertThat(cli.run("--json", file.resolve("r.json").toString())).isEqualTo(2);
    assertThat(cli.stderr()).contains("--json " + file.resolve("r.json") + ": " + file
        + " is a file, not a directory");
  }

  @Test
  void policyNamesWithCommasQuotesAndLineBreaksStayOneCsvField(@TempDir Path dir)
      throws Exception {
    String name = "q, \"odd\"\nname";
    Path cfg = Files.writeString(dir.resolve(name + ".yaml"), CONFIG);
    Path csv = dir.resolve("r.csv");
    Path requests = dir.resolve("req.csv");
    assertThat(cli.run("--quiet", "--scenario", "multi-turn", "--dialogs", "2", "--turns", "1",
        "--config", cfg.toString(), "--csv", csv.toString(), "--requests-csv",
        requests.toString())).as(cli.stderr()).isZero();
    for (Path p : List.of(csv, requests)) {
      List<List<String>> rows = parse(Files.readString(p));
      assertThat(rows).as(p.toString()).hasSizeGreaterThan(1);
      int columns = rows.get(0).size();
      for (List<String> row : rows) {
        assertThat(row).as(p + ": " + row).hasSize(columns);
      }
      int policy = rows.get(0).indexOf("policy");
      assertThat(rows.get(1).get(policy)).isEqualTo(name);
    }
  }

  /** RFC 4180. */
  private static List<List<String>> parse(String text) {
    List<List<String>> rows = new ArrayList<>();
    List<String> row = new ArrayList<>();
    StringBuilder field = new StringBuilder();
    boolean quoted = false;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (quoted) {
        if (c == '"' && i + 1 < text.length() && text.charAt(i + 1) == '"') {
          field.append('"');
          i++;
        } else if (c == '"') {
          quoted = false;
        } else {
          field.append(c);
        }
      } else if (c == '"') {
        quoted = true;
      } else if (c == ',') {
        row.add(field.toString());
        field.setLength(0);
      } else if (c == '\n') {
        row.add(field.toString());
        field.setLength(0);
        rows.add(row);
        row = new ArrayList<>();
      } else if (c != '\r') {
        field.append(c);
      }
    }
    if (field.length() > 0 || !row.isEmpty()) {
      row.add(field.toString());
      rows.add(row);
    }
    return rows;
  }
}
