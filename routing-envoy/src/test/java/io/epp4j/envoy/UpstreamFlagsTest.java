package io.epp4j.envoy;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/** The upstream endpoint picker's flags, as a Deployment copied from its chart passes them. */
class UpstreamFlagsTest {
  final ByteArrayOutputStream out = new ByteArrayOutputStream();
  final ByteArrayOutputStream err = new ByteArrayOutputStream();

  Main.Running start(String... args) {
    try {
      return Main.start(args, new PrintStream(out, true, StandardCharsets.UTF_8),
          new PrintStream(err, true, StandardCharsets.UTF_8));
    } catch (Main.Exit e) {
      throw new AssertionError("exit " + e.code + ": " + err(), e);
    }
  }

  int exitOf(String... args) {
    err.reset();
    try (Main.Running r = Main.start(args, new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8))) {
      throw new AssertionError("started with " + String.join(" ", args));
    } catch (Main.Exit e) {
      return e.code;
    }
  }

  String err() {
    return err.toString(StandardCharsets.UTF_8);
  }

  @Test
  void upstreamNamesOfMetricsOptionsMapOntoThemWithGoDurations() {
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1",
        "--model-server-metrics-path", "/vllm/metrics", "--model-server-metrics-scheme", "https",
        "--refresh-metrics-interval", "50ms")) {
      assertThat(r.scraper).isNotNull();
    }
    // each upstream name is read as the option it stands for
    assertThat(Main.parse(new String[] {"--model-server-metrics-path", "/vllm/metrics",
        "--model-server-metrics-scheme=https", "--refresh-metrics-interval", "50ms"}))
        .containsEntry("metrics-path", "/vllm/metrics").containsEntry("scheme", "https")
        .containsEntry("metrics-interval", "50ms")
        .doesNotContainKeys("model-server-metrics-path", "model-server-metrics-scheme",
            "refresh-metrics-interval");
    assertThat(Main.duration("x", "1m30s")).isEqualTo(Duration.ofSeconds(90));
    assertThat(Main.duration("x", "1.5s")).isEqualTo(Duration.ofMillis(1500));
    assertThat(Main.duration("x", "250us")).isEqualTo(Duration.ofNanos(250_000));
    assertThat(Main.duration("x", "1h0m0s")).isEqualTo(Duration.ofHours(1));
  }

  @Test
  void aBadValueOfAnAliasNamesTheFlagAsTyped() {
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--grpc-port", "abc")).isEqualTo(2);
    assertThat(err()).contains("--grpc-port: 'abc'").doesNotContain("--port:");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--model-server-metrics-scheme", "ftp")).isEqualTo(2);
    assertThat(err()).contains("--model-server-metrics-scheme: 'ftp'");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--model-server-metrics-path", "metrics")).isEqualTo(2);
    assertThat(err()).contains("--model-server-metrics-path: 'metrics'");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--refresh-metrics-interval", "1x")).isEqualTo(2);
    assertThat(err()).contains("--refresh-metrics-interval: '1x'");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0",
        "--model-server-metrics-path=/a", "--metrics-path=/b")).isEqualTo(2);
    assertThat(err()).contains("--metrics-path is given twice (--model-server-metrics-path and "
        + "--metrics-path)");
  }

  @Test
  void flagsWithoutEffectHereStartAndAreNamedOnceInOneWarning() {
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false",
        "--zap-encoder", "json", "-v", "4", "--tracing=false", "--metrics-endpoint-auth=false",
        "--ha-enable-leader-election", "--enable-pprof", "--metrics-port", "9090",
        "--zap-log-level=debug", "--zap-devel=false", "--health-checking")) {
      assertThat(r.server.port()).isPositive();
    }
    String e = err();
    assertThat(e.lines().filter(l -> l.contains("warning"))).hasSize(1);
    String warning = e.lines().filter(l -> l.contains("warning")).findFirst().orElseThrow();
    assertThat(warning).contains("have no effect here");
    for (String flag : new String[] {"--zap-encoder", "--v ", "--tracing", "--metrics-endpoint-auth",
        "--ha-enable-leader-election", "--enable-pprof", "--metrics-port", "--zap-log-level",
        "--zap-devel", "--health-checking"}) {
      assertThat(warning.split(java.util.regex.Pattern.quote(flag), -1)).as(flag).hasSize(2);
    }
    assertThat(warning).contains("--metrics-port (no Prometheus metrics endpoint is served here)")
        .contains("--ha-enable-leader-election (there is no leader election: every replica "
            + "serves");
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false", "--v=2")) {
      assertThat(r.server.port()).isPositive();
    }
  }

  @Test
  void flagsWithoutEffectHaveTheirValuesCheckedAsUpstream() {
    String[][] bad = {{"--tracing", "false"}, {"--tracing=maybe"}, {"--zap-encoder", "xml"},
        {"--v", "high"}, {"-v=x"}, {"--metrics-port", "http"}, {"--zap-log-level", "loud"},
        {"--zap-log-level", "0"}, {"--zap-time-encoding", "unix"},
        {"--zap-stacktrace-level", "debug"}, {"--enable-pprof=1x"}};
    String[] named = {"unexpected argument 'false'", "--tracing: 'maybe'", "--zap-encoder: 'xml'",
        "--v: 'high'", "--v: 'x'", "--metrics-port: 'http'", "--zap-log-level: 'loud'",
        "--zap-log-level: '0'", "--zap-time-encoding: 'unix'", "--zap-stacktrace-level: 'debug'",
        "--enable-pprof: '1x'"};
    for (int i = 0; i < bad.length; i++) {
      String[] args = new String[bad[i].length + 3];
      args[0] = "--endpoints=10.0.0.1:8000";
      args[1] = "--port=0";
      args[2] = "--metrics-enabled=false";
      System.arraycopy(bad[i], 0, args, 3, bad[i].length);
      assertThat(exitOf(args)).as(named[i]).isEqualTo(2);
      assertThat(err()).as(named[i]).contains(named[i]).doesNotContain("warning");
    }
  }

  @Test
  void configTextIsAnInlineConfigurationAndNotWithConfigOrPreset() {
    String yaml = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: queue-scorer
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: queue-scorer
        """;
    try (Main.Running r = start("--endpoints", "10.0.0.1:8000", "--port=0",
        "--grpc-health-port=0", "--host=127.0.0.1", "--metrics-enabled=false",
        "--config-text", yaml)) {
      assertThat(out.toString(StandardCharsets.UTF_8)).contains("the --config-text configuration");
    }
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0", "--config-text",
        yaml.replace("queue-scorer", "no-such-scorer"))).isEqualTo(2);
    assertThat(err()).contains("--config-text is not valid").contains("no-such-scorer");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0", "--config-text", yaml,
        "--preset", "epp4j")).isEqualTo(2);
    assertThat(err()).contains("--config-text and --preset are both given");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0", "--config-file", "x.yaml",
        "--config-text", yaml)).isEqualTo(2);
    assertThat(err()).contains("--config-file and --config-text are both given");
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--port=0", "--config-text", " "))
        .isEqualTo(2);
    assertThat(err()).contains("--config-text is empty");
  }
}
