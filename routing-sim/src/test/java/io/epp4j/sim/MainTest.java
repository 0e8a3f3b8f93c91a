package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class MainTest {
  private final ByteArrayOutputStream out = new ByteArrayOutputStream();
  private final ByteArrayOutputStream err = new ByteArrayOutputStream();

  private int run(String... args) {
    return Main.run(args, new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
  }

  private String stdout() {
    return out.toString(StandardCharsets.UTF_8);
  }

  private String stderr() {
    return err.toString(StandardCharsets.UTF_8);
  }

  private static final String[] SMALL = {
      "--requests", "120", "--groups", "6", "--users-per-group", "3", "--system-prompt-len", "2000",
      "--output-len", "10-30", "--concurrency", "12", "--dialogs", "6", "--turns", "3",
      "--reply-len", "50"};

  private static String[] with(String... extra) {
    List<String> a = new ArrayList<>(List.of(SMALL));
    a.addAll(List.of(extra));
    return a.toArray(new String[0]);
  }

  @Test
  void badFlagsPrintUsageAndExitWith2() {
    assertThat(run("--no-such-flag", "1")).isEqualTo(2);
    assertThat(stderr()).contains("unknown option '--no-such-flag'", "Usage:");
    assertThat(run("--replicas", "zero")).isEqualTo(2);
    assertThat(run("--scenario", "chess")).isEqualTo(2);
    assertThat(run("--policies", "epp-exact")).isEqualTo(2);
    assertThat(stderr()).contains("unknown policy 'epp-exact'", "epp-precise-hybrid");
    assertThat(run("--question-len", "9-3")).isEqualTo(2);
    assertThat(run("--replicas")).isEqualTo(2);
    assertThat(stdout()).isEmpty();
  }

  @Test
  void aMissingTraceFileIsNamed() {
    assertThat(run("--quiet", "--scenario", "trace", "--trace", "mooncake:/no/such/trace.jsonl"))
        .isEqualTo(1);
    assertThat(stderr()).contains("file not found: /no/such/trace.jsonl");
  }

  @Test
  void helpPrintsUsage() {
    assertThat(run("--help")).isZero();
    assertThat(stdout()).contains("--scenario", "--policies", "--trace mooncake:PATH");
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
    assertThat(run(with("--quiet", "--config", cfg.toString()))).isEqualTo(1);
    assertThat(stderr()).contains("no-such-scorer");
  }

  @Test
  void writesTableJsonCsvAndChart(@TempDir Path dir) throws Exception {
    Path json = dir.resolve("r.json");
    Path csv = dir.resolve("r.csv");
    Path png = dir.resolve("r.png");
    Path cfg = dir.resolve("queue-only.yaml");
    Files.writeString(cfg, """
        plugins:
        - type: queue-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: queue-scorer
          - pluginRef: max-score-picker
        """);
    int code = run(with("--policies", "round-robin,epp-approximate", "--config", cfg.toString(),
        "--json", json.toString(), "--csv", csv.toString(), "--chart", png.toString()));
    assertThat(code).as(stderr()).isZero();
    assertThat(stdout()).contains("== shared-prefix", "== multi-turn", "round-robin",
        "epp-approximate", "queue-only", "simulated requests per wall second");
    assertThat(stderr()).contains("running shared-prefix / round-robin");

    JsonNode root = new ObjectMapper().readTree(json.toFile());
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

    assertThat(Files.readAllLines(csv)).hasSize(1 + 2 * 3);
    byte[] head = java.util.Arrays.copyOf(Files.readAllBytes(png), 8);
    assertThat(head).startsWith(0x89, 'P', 'N', 'G');
  }
}
