package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Every option of {@code serve} given a bad value: a message naming the option, exit code 2 and
 * the usage, before anything starts; never a stack trace, never a default.
 */
class ServeBadValuesTest {
  private static final String TAKEN = "taken-port";
  /** The taken port written with full-width digits (U+FF10..U+FF19). */
  private static final String TAKEN_FULL_WIDTH = "taken-port-full-width";
  private final ByteArrayOutputStream out = new ByteArrayOutputStream();
  private final ByteArrayOutputStream err = new ByteArrayOutputStream();

  private int serve(String... args) {
    List<String> a = new ArrayList<>(List.of("serve"));
    // --port TAKEN stands for a port that is taken: were a bad value accepted, the start would
    // fail (exit code 1) instead of serving until the JVM is stopped
    try (ServerSocket taken = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      for (String arg : args) {
        String port = String.valueOf(taken.getLocalPort());
        a.add(arg.equals(TAKEN) ? port : arg.equals(TAKEN_FULL_WIDTH) ? fullWidth(port) : arg);
      }
      return Main.run(a.toArray(new String[0]),
          new PrintStream(out, true, StandardCharsets.UTF_8),
          new PrintStream(err, true, StandardCharsets.UTF_8));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static String fullWidth(String digits) {
    StringBuilder b = new StringBuilder();
    digits.chars().forEach(c -> b.append((char) (c - '0' + '\uff10')));
    return b.toString();
  }

  private String stderr() {
    return err.toString(StandardCharsets.UTF_8);
  }

  private void assertUsageError(String expected, String... args) {
    assertThat(serve(args)).as(stderr()).isEqualTo(2);
    assertThat(stderr()).startsWith("error: ").contains(expected, "usage: routing-sim serve")
        .doesNotContain("Exception", "\tat ");
    assertThat(out.size()).isZero();
  }
  /**
   * An option left without its value took the next option as its value:
   * {@code --lora-adapters --enable-prompt-tokens-details} served an adapter of that name and
   * left the flag off.
   */
  @Test
  void anOptionFollowedByAnotherOptionInsteadOfItsValueIsAUsageErrorNamingBoth() {
    assertUsageError("--lora-adapters needs a value, but is followed by the option"
        + " --enable-prompt-tokens-details", "--replicas", "1", "--port", TAKEN,
        "--lora-adapters", "--enable-prompt-tokens-details");
    err.reset();
    assertUsageError("--replicas needs a value, but is followed by the option --port",
        "--replicas", "--port", TAKEN);
    err.reset();
    assertUsageError("--tokenizer needs a value, but is followed by the option -h",
        "--replicas", "1", "--port", TAKEN, "--tokenizer", "-h");
    err.reset();
    // a one-dash word that is no number is an option too: "--lora-adapters -x" served an
    // adapter named -x
    assertUsageError("--lora-adapters needs a value, but is followed by the option -x (a value"
        + " that begins with a dash and is not a number is given as --lora-adapters=VALUE)",
        "--replicas", "1", "--port", TAKEN, "--lora-adapters", "-x");
    err.reset();
    assertUsageError("--seed needs a value, but is followed by the option -q",
        "--replicas", "1", "--port", TAKEN, "--seed", "-q");
    err.reset();
    // a negative number is a value, refused by the option's range
    assertUsageError("--port must be in [1, 65535], got -1", "--replicas", "1", "--port", "-1");
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "9000",
        "--lora-adapters=-x"}).loraAdapters()).containsExactly("-x");
    err.reset();
    // a misspelt option is still unknown, not one that needs a value
    assertUsageError("unknown option --lora-adapter", "--replicas", "1", "--port", TAKEN,
        "--lora-adapter", "--max-loras", "2");
    assertThat(stderr()).doesNotContain("needs a value");
  }


  @ParameterizedTest(name = "{0} {1}")
  @CsvSource(delimiter = '|', value = {
      "--replicas|0", "--replicas|65", "--replicas|-1", "--replicas|x",
      "--port|0", "--port|70000", "--port|''",
      "--kv-events-port|-1", "--kv-events-port|abc",
      "--kv-events-encoding|json",
      "--kv-events-replay-bytes|-1", "--kv-events-replay-bytes|x", "--kv-events-replay-bytes|''",
      "--kv-events-replay-bytes|1t", "--kv-events-replay-bytes|2000g",
      "--kv-events-replay-bytes|99999999999999999999",
      "--speed|0", "--speed|-1", "--speed|NaN", "--speed|fast", "--speed|1e-300",
      "--speed|0.0009", "--speed|1e300", "--speed|10001", "--speed|Infinity",
      // Java's parseDouble takes a type suffix and hex: 2d was 2, 0x1p3 was 8
      "--speed|2d", "--speed|2f", "--speed|0x1p3",
      "--keep-alive-timeout|1d", "--keep-alive-timeout|5F", "--keep-alive-timeout|0x1p3",
      "--max-held-body-bytes|1m", "--max-held-body-bytes|0", "--max-held-body-bytes|x",
      "--max-held-body-bytes|2000g", "--max-held-body-bytes|''",
      "--profile|no-such-gpu", "--seed|1.5",
      "--lora-adapters|''", "--lora-adapters|a,,b", "--lora-adapters|sql,sql",
      "--lora-adapters|qwen3-1.7b",
      // NAME=PATH as vLLM's --lora-modules: a path left empty, a name left empty, a name twice
      "--lora-adapters|sql=", "--lora-adapters|=/adapters/sql",
      "--lora-adapters|sql=/a,sql=/b", "--lora-adapters|qwen3-1.7b=/adapters/base",
      "--max-loras|0", "--keep-alive-timeout|-1", "--keep-alive-timeout|soon",
      "--tokenizer|/no/such/tokenizer.json",
      // digits of other scripts: parseInt read a full-width 3 (or an Arabic-Indic one) as 3
      "--replicas|\uff13", "--kv-events-port|\uff13\uff10\uff10\uff10\uff10", "--seed|\u0663",
      "--max-loras|\uff12", "--kv-events-replay-bytes|\uff11\uff16k",
      "--max-held-body-bytes|\uff11\uff12\uff18m", "--port|" + TAKEN_FULL_WIDTH})
  void aBadValueIsAUsageErrorNamingTheOption(String option, String value) {
    List<String> args = new ArrayList<>(List.of("--replicas", "1", "--port", TAKEN,
        "--kv-events-port", "30000"));
    int at = args.indexOf(option);
    if (at >= 0) {
      args.set(at + 1, value);
    } else {
      args.addAll(List.of(option, value));
    }
    if (option.equals("--max-loras")) {
      args.addAll(List.of("--lora-adapters", "sql"));
    }
    assertUsageError(option, args.toArray(new String[0]));
  }

  /**
   * A value that is neither encoding is repeated in the message, as every other bad value of
   * the command line is, so that a value mangled by a script's quoting shows what arrived.
   */
  @Test
  void aBadEncodingIsRepeatedInTheMessage() {
    assertUsageError("--kv-events-encoding must be array or map, got Map", "--replicas", "1",
        "--port", TAKEN, "--kv-events-encoding", "Map");
  }

  @Test
  void anOptionGivenTwiceIsAUsageErrorNotALastOneWins() {
    assertUsageError("--replicas is given twice ('1' and '2')", "--replicas", "1", "--port",
        TAKEN, "--replicas", "2");
    assertUsageError("--speed is given twice", "--replicas", "1", "--port", TAKEN, "--speed", "2",
        "--speed=3");
  }

  @Test
  void everyOptionOfTheUsageGivenLastWithoutAValueIsSaidToNeedOne() {
    // the options are read from the usage itself, so that one added there is covered here
    List<String> options = new ArrayList<>();
    java.util.regex.Matcher m = java.util.regex.Pattern.compile("(?m)^\\s+(--[a-z-]+) ")
        .matcher(Serve.USAGE);
    while (m.find()) {
      options.add(m.group(1));
    }
    assertThat(options).contains("--replicas", "--kv-events-replay-bytes", "--keep-alive-timeout");
    for (String option : options) {
      err.reset();
      List<String> args = new ArrayList<>(List.of("--replicas", "1", "--port", TAKEN));
      if (!args.contains(option)) {
        args.add(option);
      } else {
        args.subList(args.indexOf(option), args.indexOf(option) + 2).clear();
        args.add(option);
      }
      assertUsageError(option + " needs a value", args.toArray(new String[0]));
    }
  }

  @Test
  void anArgumentThatIsNoOptionIsNamedAsSuch() {
    assertUsageError("unexpected argument 'extra'", "--replicas", "1", "--port", TAKEN, "extra");
    err.reset();
    assertUsageError("unexpected argument '-3'", "--replicas", "1", "--port", TAKEN, "-3");
  }

  /**
   * An argument of one dash was "unexpected argument '-x'", as if it were a stray word; it is an
   * option serve does not know. A negative number stays an option's value.
   */
  @Test
  void aSingleDashArgumentIsAnUnknownOptionAndANegativeNumberStaysAValue() {
    assertUsageError("unknown option -x", "--replicas", "1", "--port", TAKEN, "-x");
    assertThat(stderr()).doesNotContain("unexpected argument");
    err.reset();
    assertUsageError("unknown option -p", "-p", TAKEN, "--replicas", "1");
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "9000", "--seed", "-3"})
        .seed()).isEqualTo(-3);
  }

  @Test
  void anAdapterNamedAsTheBaseModelIsNamed() {
    assertUsageError("--lora-adapters: llama3.1-8b is the base model's name",
        "--replicas", "1", "--port", TAKEN, "--lora-adapters", "sql,llama3.1-8b",
        "--profile", "llama3.1-8b-h100");
  }

  @Test
  void theReplayBufferBoundTakesBytesOrASuffix() {
    String[] base = {"--replicas", "1", "--port", "9000"};
    assertThat(Serve.parse(base).replayBufferBytes())
        .isEqualTo(KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES).isEqualTo(64L << 20);
    assertThat(Serve.parse(with(base, "--kv-events-replay-bytes", "0")).replayBufferBytes())
        .isZero();
    assertThat(Serve.parse(with(base, "--kv-events-replay-bytes", "12345")).replayBufferBytes())
        .isEqualTo(12_345);
    assertThat(Serve.parse(with(base, "--kv-events-replay-bytes=16k")).replayBufferBytes())
        .isEqualTo(16L << 10);
    assertThat(Serve.parse(with(base, "--kv-events-replay-bytes", "2M")).replayBufferBytes())
        .isEqualTo(2L << 20);
    assertThat(Serve.parse(with(base, "--kv-events-replay-bytes", "1g")).replayBufferBytes())
        .isEqualTo(1L << 30);
  }

  @Test
  void helpNamesTheReplayBufferBound() {
    assertThat(serve("--help")).isZero();
    assertThat(out.toString(StandardCharsets.UTF_8)).contains("--kv-events-replay-bytes B",
        "default 64m");
  }

  private static String[] with(String[] base, String... more) {
    List<String> a = new ArrayList<>(List.of(base));
    a.addAll(List.of(more));
    return a.toArray(new String[0]);
  }
}
