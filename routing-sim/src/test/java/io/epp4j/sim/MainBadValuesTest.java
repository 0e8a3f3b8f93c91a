package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Every option of the simulator's command line given a bad value: a message naming the option,
 * exit code 2 and the short usage, before anything runs; never a stack trace, never a default.
 */
class MainBadValuesTest {
  private final CapturedMain cli = new CapturedMain();

  private void assertUsageError(String option, String... args) {
    assertThat(cli.run(args)).as(cli.stderr()).isEqualTo(2);
    assertThat(cli.stderr()).contains("error: ", option, "Usage:").doesNotContain("Exception", "\tat ");
    assertThat(cli.stdout()).isEmpty();
  }

  @ParameterizedTest(name = "{0} {1}")
  @CsvSource(delimiter = '|', value = {
      "--replicas|-1", "--replicas|0", "--replicas|x", "--replicas|''", "--replicas|1.5",
      "--gateways|0", "--gateways|-2",
      "--replication-delay-ms|-1", "--replication-delay-ms|NaN",
      "--seed|one", "--seed|99999999999999999999", "--seed|\u0663", "--replicas|\uff13",
      "--pd|\uff12:4", "--groups|\uff13", "--question-len|\uff13", "--user-len|1-\u0663",
      "--requests|0", "--requests|-5",
      "--scrape-interval|0", "--scrape-interval|Infinity",
      "--max-num-seqs|0", "--max-num-batched-tokens|-1",
      "--time-scale|0", "--time-scale|-1",
      "--profile|no-such-gpu", "--shared-state|sometimes",
      "--scenario|chess", "--scenario|''", "--scenario|multi-turn,", "--scenario|,multi-turn",
      "--scenario|multi-turn,multi-turn", "--scenario|multi-turn, MULTI-TURN",
      "--policies|epp-exact", "--policies|''", "--policies|,", "--policies|round-robin,,sticky",
      "--policies|round-robin,round-robin",
      "--load-levels|''", "--load-levels|1,,2", "--load-levels|0", "--load-levels|1,1.0",
      "--load-levels|-1",
      "--groups|0", "--users-per-group|-1", "--concurrency|0", "--rate|0", "--rate|-3",
      "--dialogs|0", "--turns|0", "--mt-system-len|0", "--think-time|-1", "--start-spread|x",
      "--system-prompt-len|0", "--question-len|9-3", "--output-len|exp:0", "--user-len|-4",
      "--reply-len|abc",
      "--trace|mooncake:", "--trace|other:/x",
      "--config|/no/such/config.yaml",
      "--pd|0:4", "--pd|2", "--pd|2:x", "--pd|-1:3", "--pd|''", "--pd|1:2:3", "--pd|2:",
      "--pd|4000:100", "--kv-link|infiniband", "--kv-link|''"})
  void aBadValueIsAUsageErrorNamingTheOption(String option, String value) {
    assertUsageError(option, option, value);
  }

  @Test
  void anOptionGivenTwiceIsAUsageErrorNotALastOneWins() {
    assertUsageError("--replicas", "--replicas", "3", "--replicas", "4");
    assertThat(cli.stderr()).contains("--replicas is given twice ('3' and '4')");
    assertUsageError("--policies", "--policies", "sticky", "--policies=round-robin");
    assertThat(cli.stderr()).contains("comma-separated list");
  }

  /**
   * An option whose value was left out took the next option as its value: {@code --json --quiet}
   * created a report named {@code --quiet} and ran without {@code --quiet}; {@code --replicas
   * --seed 3} blamed the {@code 3}.
   */
  @Test
  void anOptionFollowedByAnotherOptionInsteadOfItsValueIsAUsageErrorNamingBoth(
      @TempDir Path dir) {
    assertUsageError("--replicas needs a value, but is followed by the option --seed",
        "--replicas", "--seed", "3");
    assertUsageError("--json needs a value, but is followed by the option --quiet",
        "--scenario", "multi-turn", "--json", "--quiet");
    assertUsageError("--trace needs a value, but is followed by the option --scenario",
        "--trace", "--scenario", "trace");
    assertUsageError("--config needs a value, but is followed by the option -h",
        "--config", "-h");
    // a misspelt option is still named as unknown, not as one that needs a value
    assertUsageError("unknown option '--quite'", "--quite", "--json", "x.json");
    // the first bad option on the command line is the one reported
    assertUsageError("--replicas must be in", "--replicas", "0", "--csv", "--quiet");
    // a value that begins with -- is given with =
    Path report = dir.resolve("--report.json");
    Main.Options o = assertDoesNotThrow(() -> Main.Options.parse(
        new String[] {"--json=" + report, "--quiet"}));
    assertThat(o.json).isEqualTo(report);
    assertThat(o.quiet).isTrue();
  }

  /**
   * An option whose value was left out took a following one-dash word as its value:
   * {@code --json -q} wrote the report to a file named {@code -q}, {@code --policies -x} blamed
   * an unknown policy. A negative number stays the option's value and meets its range check.
   */
  @Test
  void anOptionFollowedByAOneDashWordThatIsNoNumberNeedsAValue(@TempDir Path dir) {
    assertUsageError("--json needs a value, but is followed by the option -q (a value that"
        + " begins with a dash and is not a number is given as --json=VALUE)",
        "--scenario", "multi-turn", "--json", "-q");
    assertUsageError("--policies needs a value, but is followed by the option -x",
        "--policies", "-x");
    assertUsageError("--seed needs a value, but is followed by the option -q", "--seed", "-q");
    assertUsageError("--output-len needs a value, but is followed by the option -exp:3",
        "--output-len", "-exp:3");
    // numbers, negative or not, are values: the range check names them
    assertUsageError("--replicas must be in [1, 4096], got -1", "--replicas", "-1");
    assertUsageError("--time-scale must be in", "--time-scale", "-.5");
    // given with =, a value may begin with a dash
    Path report = dir.resolve("-q");
    Main.Options o = assertDoesNotThrow(() -> Main.Options.parse(
        new String[] {"--json=" + report, "--seed", "-3"}));
    assertThat(o.json).isEqualTo(report);
    assertThat(o.seed).isEqualTo(-3);
  }

  /**
   * An argument of one dash that is not an option's value was "unexpected argument '-x'", as if
   * it were a stray word; it is an option the simulator does not know. A negative number stays
   * an option's value.
   */
  @Test
  void aSingleDashArgumentIsAnUnknownOptionAndANegativeNumberStaysAValue() {
    String[][] unknown = {{"-x"}, {"--scenario", "multi-turn", "--quiet", "-q"},
        {"-json=x.json"}, {"load", "--target", "http://127.0.0.1:1", "-x"}};
    for (String[] args : unknown) {
      cli.reset();
      String last = args[args.length - 1];
      assertThat(cli.run(args)).as(cli.stderr()).isEqualTo(2);
      assertThat(cli.stderr()).contains("error: unknown option '" + last + "'")
          .doesNotContain("unexpected argument", "Exception");
    }
    // a word, a lone dash and a lone negative number are no options
    String[][] stray = {{"x"}, {"-"}, {"-3"}, {"load", "--target", "http://127.0.0.1:1", "-3"}};
    for (String[] args : stray) {
      cli.reset();
      String last = args[args.length - 1];
      assertThat(cli.run(args)).as(cli.stderr()).isEqualTo(2);
      assertThat(cli.stderr()).contains("error: unexpected argument '" + last + "'");
    }
    Main.Options o = assertDoesNotThrow(() -> Main.Options.parse(
        new String[] {"--seed", "-3", "--quiet"}));
    assertThat(o.seed).isEqualTo(-3);
    assertThat(o.quiet).isTrue();
  }

  /**
   * vLLM refuses to start with {@code max_num_batched_tokens} below {@code max_num_seqs}; the
   * simulator ran such an engine, which no one can deploy, without a word.
   */
  @Test
  void aStepBudgetBelowTheSequenceLimitIsAUsageErrorAsInVllm() throws Exception {
    // the default profile allows 1024 sequences and 8192 batched tokens
    assertUsageError("--max-num-batched-tokens: max_num_batched_tokens (512) must be greater"
        + " than or equal to max_num_seqs (1024, the profile's)", "--max-num-batched-tokens", "512");
    assertUsageError("--max-num-seqs: max_num_batched_tokens (8192, the profile's) must be"
        + " greater than or equal to max_num_seqs (9000)", "--max-num-seqs", "9000");
    assertUsageError("--max-num-batched-tokens: max_num_batched_tokens (63) must be greater"
        + " than or equal to max_num_seqs (64)", "--max-num-seqs", "64",
        "--max-num-batched-tokens", "63");
    Main.Options ok = Main.Options.parse(
        new String[] {"--max-num-seqs", "64", "--max-num-batched-tokens", "64"});
    assertThat(ok.profile.maxNumSeqs()).isEqualTo(64);
    assertThat(ok.profile.maxNumBatchedTokens()).isEqualTo(64);
  }

  @Test
  void pdAndADifferentReplicaCountAreAUsageError() {
    assertUsageError("--pd 2:4 makes 6 replicas, but --replicas gives 8", "--pd", "2:4",
        "--replicas", "8");
  }

  @Test
  void pdDoesNotApplyToTheDominanceExperiment() {
    assertUsageError("--pd", "--dominance", "--pd", "2:4");
  }

  @Test
  void aConfigThatIsADirectoryIsAUsageErrorNamingTheOption(@TempDir Path dir) {
    assertUsageError("--config " + dir + ": is a directory", "--config", dir.toString());
  }

  @Test
  void twoPoliciesOfTheSameNameAreAUsageError(@TempDir Path dir) throws Exception {
    String yaml = CapturedMain.QUEUE_ONLY_CONFIG;
    Files.createDirectories(dir.resolve("a"));
    Files.createDirectories(dir.resolve("b"));
    Path a = Files.writeString(dir.resolve("a/round-robin.yaml"), yaml);
    Path b = Files.writeString(dir.resolve("b/round-robin.yaml"), yaml);
    assertUsageError("--config " + a + ": its policy is named 'round-robin'",
        "--policies", "round-robin", "--config", a.toString());
    assertThat(cli.stderr()).contains("the preset given with --policies");
    assertUsageError("--config " + b + ": its policy is named 'round-robin'",
        "--config", a.toString(), "--config", b.toString());
    assertThat(cli.stderr()).contains("as is that of --config " + a);
    assertUsageError("--config", "--config", a.toString(), "--config", a.toString());
  }

  @Test
  void twoReportsGivenTheSameFileAreAUsageError(@TempDir Path dir) {
    Path f = dir.resolve("report.out");
    assertUsageError("--json and --csv name the same file", "--json", f.toString(), "--csv",
        dir.resolve("x/../report.out").toString());
    assertUsageError("--csv and --requests-csv name the same file", "--csv", f.toString(),
        "--requests-csv", f.toString());
    assertThat(f).doesNotExist();
  }
}
