package com.example.epp4j.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import picocli.CommandLine;

/** The command line the README documents. */
class MainTest {
  final StringWriter out = new StringWriter();
  final StringWriter err = new StringWriter();

  CommandLine commandLine() {
    return Main.commandLine(new PrintWriter(out, true), new PrintWriter(err, true));
  }

  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
      "--endpoints 127.0.0.1:8001 --port 99999 | --port",
      "--endpoints 127.0.0.1:8001 --port eighty | --port",
      "--port 0                                 | --endpoints",
      "--endpoints 127.0.0.1                    | --endpoints",
      "--endpoints 127.0.0.1:x                  | --endpoints",
      // was a stack trace and exit code 1, from the router
      "--endpoints 127.0.0.1:8001,127.0.0.1:8001 | '--endpoints': 127.0.0.1:8001 is listed twice",
      "--endpoints 127.0.0.1:8001 --config /no/such/file.yaml | --config",
      "--endpoints 127.0.0.1:8001 --bogus       | --bogus",
      "--endpoints 127.0.0.1:8001 --stream-idle-timeout-s 0 | --stream-idle-timeout-s",
      "--endpoints 127.0.0.1:8001 --stream-idle-timeout-s x | --stream-idle-timeout-s",
      "--endpoints 127.0.0.1:8001 --max-concurrent-requests 0 | --max-concurrent-requests",
      "stand-in --ttft-ms -1                    | --ttft-ms",
      "stand-in --kv-blocks 0                   | --kv-blocks",
      "stand-in --max-threads 0                 | --max-threads",
      "stand-in --port 65536                    | --port",
  })
  void errorsNameTheOptionAndGiveTheSynopsis(String args, String option) {
    int code = commandLine().execute(args.strip().split("\\s+"));
    assertThat(code).isEqualTo(2);
    String text = err.toString();
    assertThat(text.lines().findFirst().orElseThrow()).contains(option);
    assertThat(text).contains("usage: plain-gateway").contains("--help")
        .as("short usage, not the whole help").doesNotContain("Show this help message");
  }

  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
      // Arabic-Indic and full-width digits: Integer.parseInt reads both as 0-9
      "--endpoints 127.0.0.1:8001 --port \u0668\u0660\u0668\u0660 | --port",
      "--endpoints 127.0.0.1:8001 --stream-idle-timeout-s \u0663 | --stream-idle-timeout-s",
      "--endpoints 127.0.0.1:8001 --max-concurrent-requests \uff13 | --max-concurrent-requests",
      "stand-in --ttft-ms \u0663                      | --ttft-ms",
      "stand-in --kv-blocks \uff14\uff10\uff10\uff10  | --kv-blocks",
      "e2e --requests \u0663                          | --requests",
      "e2e --seed \u0663                              | --seed",
      "e2e --warmup \u0663                            | --warmup",
  })
  void digitsOfOtherScriptsAreRefusedNamingTheOption(String args, String option) {
    int code = commandLine().execute(args.strip().split("\\s+"));
    assertThat(code).isEqualTo(2);
    assertThat(err.toString().lines().findFirst().orElseThrow()).contains(option)
        .contains("is not a whole number");
  }

  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
      "--endpoints 127.0.0.1:8001 --config -x | --config",
      "stand-in --model -x                    | --model",
      "e2e --policies -x                      | --policies",
      "e2e --json -q                          | --json",
      "e2e --seed -q                          | --seed",
  })
  void aOneDashWordAfterAnOptionIsAMissingValueNotTheValue(String args, String option) {
    // "--json -q" wrote the report to a file named -q; "--model -x" served a model named -x
    int code = commandLine().execute(args.strip().split("\\s+"));
    assertThat(code).isEqualTo(2);
    assertThat(err.toString().lines().findFirst().orElseThrow())
        .contains("Expected parameter for option '" + option + "'");
  }

  @Test
  void aNegativeNumberAfterAnOptionIsItsValueAndRangeChecked() {
    assertThat(commandLine().execute("stand-in", "--ttft-ms", "-1")).isEqualTo(2);
    assertThat(err.toString().lines().findFirst().orElseThrow()).contains("--ttft-ms")
        .contains("'-1' is negative");
  }

  /**
   * e2e's --warmup took a negative count for none, without a word, and --speed read Java's
   * type suffixes and hexadecimal ("4d" was 4, "0x1p3" 8), which the simulator's --speed refuses.
   */
  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
      "e2e --warmup -1 | --warmup   | '-1' is negative",
      "e2e --speed 4d  | --speed    | '4d' is not a decimal number",
      "e2e --speed 0x1p3 | --speed  | '0x1p3' is not a decimal number",
      "e2e --speed 2f  | --speed    | '2f' is not a decimal number",
  })
  void e2eRefusesANegativeWarmUpAndASpeedThatIsNoPlainDecimal(String args, String option,
      String why) {
    int code = commandLine().execute(args.strip().split("\\s+"));
    assertThat(code).isEqualTo(2);
    assertThat(err.toString().lines().findFirst().orElseThrow()).contains(option).contains(why);
  }

  /**
   * e2e ran a policy listed twice twice, two rows of one name; the simulator's --policies refuses
   * that. (The unwritable --json comes later in the checks: accepted, the policies would be
   * refused for it, before anything runs.)
   */
  @Test
  void e2eRefusesAPolicyListedTwiceInAnyCase(@TempDir Path dir) {
    String json = dir.resolve("no-such-dir").resolve("e2e.json").toString();
    for (String list : new String[] {"epp4j,epp4j", "round-robin,ROUND-ROBIN"}) {
      err.getBuffer().setLength(0);
      assertThat(commandLine().execute("e2e", "--policies", list, "--json", json)).isEqualTo(2);
      assertThat(err.toString().lines().findFirst().orElseThrow()).as(list)
          .contains("'--policies': it lists").contains(" twice");
    }
  }

  /**
   * e2e's replicas of policy k take ports from --port + k × replicas (and twice as many from
   * --kv-events-port): beyond 65535, or overlapping, the run failed when a later policy's replicas
   * started, after the first policies had run. (The unwritable --json comes later in the checks:
   * accepted, the ports would be refused for it, before anything runs.)
   */
  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
      // 4 policies × 6 replicas: HTTP ports 65520..65543
      "--port 65520                       | Invalid value for option '--port': 65520 leaves no room",
      // KV event ports 65500..65547
      "--port 20000 --kv-events-port 65500 | '--kv-events-port': 65500 leaves no room",
      "--port 20000 --kv-events-port 19990 | '--port' and '--kv-events-port': they overlap",
  })
  void e2eRefusesPortsThatLeaveNoRoomForEveryPolicysReplicas(String ports, String message,
      @TempDir Path dir) {
    List<String> args = new ArrayList<>(List.of("e2e"));
    args.addAll(List.of(ports.strip().split("\\s+")));
    args.addAll(List.of("--json", dir.resolve("no-such-dir").resolve("e2e.json").toString()));
    assertThat(commandLine().execute(args.toArray(String[]::new))).isEqualTo(2);
    assertThat(err.toString().lines().findFirst().orElseThrow()).contains(message);
  }

  @Test
  void wholeNumbersOfEverySignStillConvert() {
    assertThat(new Main.LongConverter().convert("-5")).isEqualTo(-5L);
    assertThat(new Main.LongConverter().convert("+12")).isEqualTo(12L);
    assertThat(new Main.NonNegativeConverter().convert(" 48 ")).isEqualTo(48);
    assertThat(new Main.NonNegativeConverter().convert("0")).isZero();
    assertThat(new Main.DecimalConverter().convert("0.5")).isEqualTo(0.5);
    assertThat(new Main.DecimalConverter().convert("1e1")).isEqualTo(10.0);
  }

  @Test
  @Timeout(30) // accepted, the command would serve until stopped
  void aBlankModelNameIsRefusedNamingTheOption() {
    // a stand-in serving model '' would answer 404 to every request that names a model
    for (String blank : new String[] {"", " "}) {
      err.getBuffer().setLength(0);
      assertThat(commandLine().execute("stand-in", "--port", "0", "--model", blank)).isEqualTo(2);
      assertThat(err.toString().lines().findFirst().orElseThrow()).contains("--model");
    }
  }

  @Test
  void anInvalidConfigFileIsReportedWithEveryError(@TempDir Path dir) throws Exception {
    Path config = dir.resolve("bad.yaml");
    Files.writeString(config, "apiVersion: inference.networking.x-k8s.io/v1alpha1\n"
        + "kind: EndpointPickerConfig\nplugins:\n- type: no-such-scorer\n");
    int code = commandLine().execute("--endpoints", "127.0.0.1:8001", "--config", config.toString());
    assertThat(code).isEqualTo(2);
    assertThat(err.toString()).contains("--config").contains("no-such-scorer");
  }

  @Test
  void theGatewaysOptionsReachTheGateway() {
    CommandLine gatewayCli = commandLine();
    assertThat(gatewayCli.execute("--port", "0", "--endpoints", "127.0.0.1:8001",
        "--stream-idle-timeout-s", "7", "--max-concurrent-requests", "3")).isZero();
    try (PlainGateway gateway = ((Main.GatewayCommand) gatewayCli.getCommand()).gateway) {
      assertThat(gateway.options()).isEqualTo(new PlainGateway.Options(Duration.ofSeconds(7), 3));
    }
  }

  @Test
  void theStandInNamesCachedTokensOnlyWithEnablePromptTokensDetails() {
    for (boolean on : new boolean[] {false, true}) {
      CommandLine cli = commandLine();
      String[] args = on
          ? new String[] {"stand-in", "--port", "0", "--enable-prompt-tokens-details"}
          : new String[] {"stand-in", "--port", "0"};
      assertThat(cli.execute(args)).isZero();
      try (StandInVllm s = ((Main.StandInCommand) cli.getSubcommands().get("stand-in")
          .getCommand()).server) {
        assertThat(s.options().promptTokensDetails()).as("flag given: %s", on).isEqualTo(on);
      }
    }
  }

  @Test
  void theStandInTakesVllmsNameOfForceIncludeUsage() {
    for (String flag : new String[] {"--force-include-usage", "--enable-force-include-usage"}) {
      CommandLine cli = commandLine();
      assertThat(cli.execute("stand-in", "--port", "0", flag)).as(flag + ": " + err).isZero();
      try (StandInVllm s = ((Main.StandInCommand) cli.getSubcommands().get("stand-in")
          .getCommand()).server) {
        assertThat(s.options().forceIncludeUsage()).as(flag).isTrue();
      }
    }
  }

  @Test
  void startsTheStandInAndTheGatewayInFrontOfIt() throws Exception {
    CommandLine standInCli = commandLine();
    assertThat(standInCli.execute("stand-in", "--port", "0", "--model", "qwen3", "--ttft-ms", "0",
        "--itl-ms", "0")).isZero();
    StandInVllm standIn = ((Main.StandInCommand) standInCli.getSubcommands().get("stand-in")
        .getCommand()).server;
    CommandLine gatewayCli = commandLine();
    try (standIn) {
      assertThat(gatewayCli.execute("--port", "0", "--endpoints", "127.0.0.1:" + standIn.port()))
          .isZero();
      try (PlainGateway gateway = ((Main.GatewayCommand) gatewayCli.getCommand()).gateway) {
        assertThat(out.toString()).contains("listening on :" + gateway.port());
        assertThat(gateway.options()).isEqualTo(PlainGateway.Options.defaults());
        HttpClient client = HttpClient.newHttpClient();
        URI base = URI.create("http://127.0.0.1:" + gateway.port());
        HttpResponse<String> models = client.send(HttpRequest.newBuilder(base.resolve("/v1/models"))
            .timeout(Duration.ofSeconds(10)).build(), HttpResponse.BodyHandlers.ofString());
        assertThat(models.body()).contains("\"id\":\"qwen3\"");
        HttpResponse<String> r = client.send(HttpRequest.newBuilder(base.resolve("/v1/completions"))
            .timeout(Duration.ofSeconds(10))
            .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"qwen3\",\"prompt\":\"hi\"}"))
            .build(), HttpResponse.BodyHandlers.ofString());
        assertThat(r.statusCode()).isEqualTo(200);
        assertThat(r.body()).contains("\"usage\"");
      }
    }
  }
}
