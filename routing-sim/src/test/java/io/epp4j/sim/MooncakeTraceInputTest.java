package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** Malformed Mooncake trace input: the line and the field named, nothing silently dropped. */
class MooncakeTraceInputTest {
  private static final String GOOD =
      "{\"timestamp\": 10, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [1, 2]}";

  @TempDir
  Path dir;

  private Path trace(String... lines) throws Exception {
    return Files.writeString(dir.resolve("t.jsonl"), String.join("\n", lines) + "\n");
  }

  @ParameterizedTest(name = "{0}")
  @CsvSource(delimiter = '|', quoteCharacter = '`', value = {
      "not JSON|{\"timestamp\": 10,|not a JSON object",
      "trailing content|" + "`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1]} {\"x\": 1}`|not a JSON object",
      "an array|[1, 2, 3]|not a JSON object",
      "a field twice|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1], \"timestamp\": 5}`|Duplicate field 'timestamp'",
      "missing timestamp|`{\"input_length\": 600, \"output_length\": 8, \"hash_ids\": [1]}`"
          + "|field 'timestamp' is missing",
      "missing input_length|`{\"timestamp\": 20, \"output_length\": 8, \"hash_ids\": [1]}`"
          + "|field 'input_length' is missing",
      "missing output_length|`{\"timestamp\": 20, \"input_length\": 600, \"hash_ids\": [1]}`"
          + "|field 'output_length' is missing",
      "missing hash_ids|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 8}`"
          + "|field 'hash_ids' is missing",
      "negative timestamp|`{\"timestamp\": -5, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1]}`|field 'timestamp' must be in [0,",
      "out of order|`{\"timestamp\": 9, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1]}`|field 'timestamp' is 9, before line 1's 10",
      "timestamp as text|`{\"timestamp\": \"20\", \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1]}`|field 'timestamp' must be a whole number of milliseconds",
      "fractional timestamp|`{\"timestamp\": 20.5, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1]}`|field 'timestamp' must be a whole number",
      "input_length 0|`{\"timestamp\": 20, \"input_length\": 0, \"output_length\": 8,"
          + " \"hash_ids\": []}`|field 'input_length' must be in [1,",
      "input_length too big|`{\"timestamp\": 20, \"input_length\": 3000000000,"
          + " \"output_length\": 8, \"hash_ids\": [1]}`|field 'input_length' must be in [1,",
      "output_length 0|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 0,"
          + " \"hash_ids\": [1]}`|field 'output_length' must be in [1,",
      "output_length negative|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": -3,"
          + " \"hash_ids\": [1]}`|field 'output_length' must be in [1,",
      "hash_ids not a list|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": 7}`|field 'hash_ids' must be an array",
      "a hash id as text|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1, \"x\"]}`|field 'hash_ids' holds \"x\" at index 1",
      "a null hash id|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [null]}`|field 'hash_ids' holds null at index 0",
      "more ids than blocks|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1, 2, 3]}`|field 'hash_ids' has 3 ids, more than the 2 blocks"})
  void aMalformedSecondLineIsNamedWithItsField(String what, String line, String message)
      throws Exception {
    Path t = trace(GOOD, line, GOOD.replace("10", "30"));
    assertThatThrownBy(() -> MooncakeTraceWorkload.load(t, 0, 1.0, 32_768))
        .as(what).isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith(t + ":2: ").hasMessageContaining(message);
  }

  /**
   * A line that is not JSON is named with its column in the trace's terms: the parser's message
   * once read "[Source: REDACTED (`StreamReadFeature.INCLUDE_SOURCE_IN_LOCATION` disabled); line:
   * 1, column: 1]", "bound as `com.fasterxml.jackson.databind.JsonNode`" or "enable
   * `JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS` to allow", naming the parser's internals.
   */
  @ParameterizedTest(name = "{0}")
  @CsvSource(delimiter = '|', quoteCharacter = '`', value = {
      "unclosed object|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1]`|expected close marker for Object (start marker at column 1)",
      // the column of the second object's brace; of the end of a token the parser refuses
      "a second object|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1]} {\"x\": 1}`|column 77: more JSON after the object; a line"
          + " holds one request",
      "NaN|`{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 8,"
          + " \"hash_ids\": [1], \"x\": NaN}`|column 85: Non-standard token 'NaN'",
      "single quotes|{'timestamp': 20}|column 2: Unexpected character (''' (code 39))"})
  void aLineThatIsNotJsonIsNamedWithItsColumnNotTheParsersInternals(String what, String line,
      String message) throws Exception {
    Path t = trace(GOOD, line);
    assertThatThrownBy(() -> MooncakeTraceWorkload.load(t, 0, 1.0, 32_768))
        .as(what).isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith(t + ":2: not a JSON object (").hasMessageContaining(message)
        .message().doesNotContain("`", "Source", "REDACTED", "jackson", "Feature");
  }

  @Test
  void aHugeHashIdsListIsRefusedNotHeld() throws Exception {
    StringBuilder ids = new StringBuilder("0");
    for (int i = 1; i < 200_000; i++) {
      ids.append(',').append(i);
    }
    Path t = trace("{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 8,"
        + " \"hash_ids\": [" + ids + "]}");
    assertThatThrownBy(() -> MooncakeTraceWorkload.load(t, 0, 1.0, 32_768))
        .hasMessage(t + ":1: field 'hash_ids' has 200000 ids, more than the 2 blocks of 512"
            + " tokens that input_length 1000 makes");
  }

  @Test
  void anEmptyFileOrOneOfBlankLinesIsAnError() throws Exception {
    Path empty = Files.writeString(dir.resolve("empty.jsonl"), "");
    assertThatThrownBy(() -> MooncakeTraceWorkload.load(empty, 0, 1.0, 32_768))
        .hasMessageStartingWith(empty + ": no requests");
    Path blank = Files.writeString(dir.resolve("blank.jsonl"), "\n  \n\n");
    assertThatThrownBy(() -> MooncakeTraceWorkload.load(blank, 0, 1.0, 32_768))
        .hasMessageStartingWith(blank + ": no requests");
  }

  @Test
  void blankLinesAreSkippedAndCounted() throws Exception {
    Path t = trace(GOOD, "", "   ", GOOD.replace("10", "30"));
    MooncakeTraceWorkload w = MooncakeTraceWorkload.load(t, 0, 1.0, 32_768);
    assertThat(w.size()).isEqualTo(2);
    assertThat(w.blankLines()).isEqualTo(2);
  }

  @Test
  void aByteOrderMarkThatBeginsTheFileIsSkipped() throws Exception {
    // what Notepad and PowerShell's Out-File -Encoding utf8 write first
    byte[] bom = {(byte) 0xEF, (byte) 0xBB, (byte) 0xBF};
    byte[] body = (GOOD + "\r\n" + GOOD.replace("10", "30") + "\r\n")
        .getBytes(StandardCharsets.UTF_8);
    byte[] file = new byte[bom.length + body.length];
    System.arraycopy(bom, 0, file, 0, bom.length);
    System.arraycopy(body, 0, file, bom.length, body.length);
    Path t = Files.write(dir.resolve("bom.jsonl"), file);
    MooncakeTraceWorkload w = MooncakeTraceWorkload.load(t, 0, 1.0, 32_768);
    assertThat(w.size()).isEqualTo(2);
    assertThat(w.hitRateCeiling(1, 16))
        .isEqualTo(MooncakeTraceWorkload.load(trace(GOOD, GOOD.replace("10", "30")), 0, 1.0,
            32_768).hitRateCeiling(1, 16));
    // past the file's start it is a character in the line, not an encoding mark
    Path inside = trace(GOOD, "\uFEFF" + GOOD.replace("10", "30"));
    assertThatThrownBy(() -> MooncakeTraceWorkload.load(inside, 0, 1.0, 32_768))
        .hasMessageStartingWith(inside + ":2: not a JSON object");
  }

  @Test
  void aTimestampPastTheSimulatedClocksRangeIsRefusedNamingItsLine() throws Exception {
    // 1e17 ms is 3.2 million years: as nanoseconds it overflowed to the clock's end, and the run
    // scraped idle replicas every 50 ms until then
    Path t = trace(GOOD, "{\"timestamp\": 100000000000000000, \"input_length\": 600,"
        + " \"output_length\": 8, \"hash_ids\": [1]}");
    assertThatThrownBy(() -> MooncakeTraceWorkload.load(t, 0, 1.0, 32_768))
        .hasMessageStartingWith(t + ":2: field 'timestamp' is 100000000000000000 ms, which at"
            + " time scale 1.0 arrives after 3.17e+06 years; the simulated clock holds arrivals"
            + " up to 146 years");
    // the bound is the clock's: 1e11 ms (3.2 years) fits at scale 1, not 100 times slower
    Path late = trace(GOOD, "{\"timestamp\": 100000000000, \"input_length\": 600,"
        + " \"output_length\": 8, \"hash_ids\": [1]}");
    MooncakeTraceWorkload w = MooncakeTraceWorkload.load(late, 0, 1.0, 32_768);
    assertThat(w.atLoad(2).size()).isEqualTo(2);
    assertThatThrownBy(() -> MooncakeTraceWorkload.load(late, 0, 100.0, 32_768))
        .hasMessageStartingWith(late + ":2: field 'timestamp' is 100000000000 ms");
    assertThatThrownBy(() -> w.atLoad(0.01))
        .hasMessageStartingWith(late + ":2: field 'timestamp' is 100000000000 ms, which at"
            + " time scale 100.0 arrives after");
  }

  @Test
  void aLoadLevelThatSlowsTheTracePastTheClockStopsTheRunBeforeItStarts() throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    Path late = trace(GOOD, "{\"timestamp\": 100000000000, \"input_length\": 600,"
        + " \"output_length\": 8, \"hash_ids\": [1]}");
    int code = Main.run(new String[] {"--quiet", "--scenario", "trace", "--policies",
        "round-robin", "--trace", "mooncake:" + late, "--load-levels", "0.01"},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
    assertThat(code).isEqualTo(1);
    assertThat(err.toString(StandardCharsets.UTF_8))
        .startsWith("error: trace " + late + ":2: field 'timestamp' is 100000000000 ms")
        .doesNotContain("\tat ");
    assertThat(out.toString(StandardCharsets.UTF_8)).isEmpty();
  }

  @Test
  void bytesThatAreNotUtf8AreHarmlessInAnIgnoredFieldAndNamedWithTheirLineElsewhere()
      throws Exception {
    // "café" in Latin-1: E9 is not UTF-8; the JDK's strict reader refused the whole file, with
    // "Input length = 1" and no line
    byte[] latin1 = {'c', 'a', 'f', (byte) 0xE9};
    Path ignored = Files.write(dir.resolve("ignored.jsonl"), concat(GOOD + "\n"
        + GOOD.replace("10", "30").replace("}", ", \"note\": \""), latin1, "\"}\n"));
    MooncakeTraceWorkload w = MooncakeTraceWorkload.load(ignored, 0, 1.0, 32_768);
    assertThat(w.size()).isEqualTo(2);
    // past the read-ahead buffer, in a field that is read: the line is named
    StringBuilder many = new StringBuilder();
    for (int i = 0; i < 200; i++) {
      many.append(GOOD).append('\n');
    }
    Path read = Files.write(dir.resolve("read.jsonl"), concat(many
        + "{\"timestamp\": 30, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [1",
        new byte[] {(byte) 0xE9}, "]}\n"));
    assertThatThrownBy(() -> MooncakeTraceWorkload.load(read, 0, 1.0, 32_768))
        .hasMessageStartingWith(read + ":201: not a JSON object");
  }

  private static byte[] concat(String head, byte[] middle, String tail) {
    byte[] h = head.getBytes(StandardCharsets.UTF_8);
    byte[] t = tail.getBytes(StandardCharsets.UTF_8);
    byte[] all = new byte[h.length + middle.length + t.length];
    System.arraycopy(h, 0, all, 0, h.length);
    System.arraycopy(middle, 0, all, h.length, middle.length);
    System.arraycopy(t, 0, all, h.length + middle.length, t.length);
    return all;
  }

  @Test
  void equalTimestampsAreInOrder() throws Exception {
    Path t = trace(GOOD, GOOD, GOOD.replace("10", "11"));
    assertThat(MooncakeTraceWorkload.load(t, 0, 1.0, 32_768).size()).isEqualTo(3);
  }

  @Test
  void theRunNamesTheLineAndSaysHowManyBlankLinesItSkipped() throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    Path bad = trace(GOOD, "{\"timestamp\": -1, \"input_length\": 600, \"output_length\": 8,"
        + " \"hash_ids\": [1]}");
    int code = Main.run(new String[] {"--quiet", "--scenario", "trace", "--policies",
        "round-robin", "--trace", "mooncake:" + bad},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
    assertThat(code).isEqualTo(1);
    assertThat(err.toString(StandardCharsets.UTF_8))
        .startsWith("error: trace " + bad + ":2: field 'timestamp' must be in [0,");
    assertThat(out.size()).isZero();

    err.reset();
    Path blanks = Files.writeString(dir.resolve("b.jsonl"), GOOD + "\n\n" + GOOD + "\n");
    code = Main.run(new String[] {"--scenario", "trace", "--policies", "round-robin",
        "--trace", "mooncake:" + blanks},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
    assertThat(code).as(err.toString(StandardCharsets.UTF_8)).isZero();
    assertThat(err.toString(StandardCharsets.UTF_8)).contains("trace: 1 blank line skipped");
  }

  @Test
  void aLineLongerThanTheBoundStopsTheRunNamingIt() throws Exception {
    // valid JSON, but padded far past any request's line: held whole before, now refused
    String padded = " ".repeat(MooncakeTraceWorkload.MAX_LINE_CHARS) + GOOD.replace("10", "20");
    Path t = trace(GOOD, padded, GOOD.replace("10", "30"));
    assertThatThrownBy(() -> MooncakeTraceWorkload.load(t, 0, 1.0, 32_768))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage(t + ":2: line longer than " + MooncakeTraceWorkload.MAX_LINE_CHARS
            + " characters; a trace line is one request's JSON object");
  }

  @Test
  void theLineReaderStopsAtTheBoundOfALineThatNeverEnds() throws Exception {
    // a line without an end, as /dev/zero or a FIFO gives: before, the reader read on looking
    // for its end for ever (here it would hit the guard, 1 GiB on)
    long[] read = {0};
    java.io.Reader endless = new java.io.Reader() {
      @Override
      public int read(char[] cbuf, int off, int len) throws java.io.IOException {
        if (read[0] >= 1L << 30) {
          throw new java.io.IOException("read 1 GiB of one line");
        }
        java.util.Arrays.fill(cbuf, off, off + len, 'x');
        read[0] += len;
        return len;
      }

      @Override
      public void close() {}
    };
    MooncakeTraceWorkload.LineReader r = new MooncakeTraceWorkload.LineReader(endless, 1000);
    String first = r.next();
    assertThat(r.overlong()).isTrue();
    assertThat(first).hasSize(1000);
    // one buffer's worth, not the line's rest
    assertThat(read[0]).isLessThanOrEqualTo(8192);
    assertThatThrownBy(r::next).isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("longer than 1000 characters");
  }

  @Test
  void aTraceWithNoLineEndStopsTheRunAtTheBound() throws Exception {
    // a file of one line and no line end, longer than the bound: exit code 1 naming file and line
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    Path flat = dir.resolve("flat.jsonl");
    Files.writeString(flat, GOOD + "\n" + "x".repeat(MooncakeTraceWorkload.MAX_LINE_CHARS + 1));
    assertThat(runTrace(flat, err)).isEqualTo(1);
    assertThat(err.toString(StandardCharsets.UTF_8)).isEqualTo("error: trace " + flat + ":2: line"
        + " longer than " + MooncakeTraceWorkload.MAX_LINE_CHARS + " characters; a trace line is"
        + " one request's JSON object\n");

    // the same line from a FIFO whose writer never ends it (as --trace mooncake:/dev/zero): the
    // run stops at the bound and closes the file, which ends the writer with a broken pipe; before,
    // it read the writer's every byte, here 64 MiB, looking for the line's end
    Path fifo = dir.resolve("fifo.jsonl");
    int made;
    try {
      made = new ProcessBuilder("mkfifo", fifo.toString()).inheritIO().start().waitFor();
    } catch (java.io.IOException e) {
      made = -1;
    }
    org.junit.jupiter.api.Assumptions.assumeTrue(made == 0, "mkfifo is not available");
    long cap = 64L << 20;
    long[] written = {0};
    boolean[] broken = {false};
    Thread writer = new Thread(() -> {
      byte[] chunk = new byte[1 << 16];
      java.util.Arrays.fill(chunk, (byte) 'x');
      try (java.io.OutputStream o = Files.newOutputStream(fifo,
          java.nio.file.StandardOpenOption.WRITE)) {
        while (written[0] < cap) {
          o.write(chunk);
          written[0] += chunk.length;
        }
      } catch (java.io.IOException e) {
        broken[0] = true; // the reader closed its end
      }
    }, "endless-trace-writer");
    writer.setDaemon(true);
    writer.start();
    err.reset();
    assertThat(runTrace(fifo, err)).isEqualTo(1);
    assertThat(err.toString(StandardCharsets.UTF_8)).isEqualTo("error: trace " + fifo + ":1: line"
        + " longer than " + MooncakeTraceWorkload.MAX_LINE_CHARS + " characters; a trace line is"
        + " one request's JSON object\n");
    // a generous deadline for something that happens as soon as the reader closes
    writer.join(120_000);
    assertThat(writer.isAlive()).isFalse();
    assertThat(broken[0]).as("the writer was stopped by the reader closing").isTrue();
    assertThat(written[0]).isLessThan(cap);
  }

  private static int runTrace(Path trace, ByteArrayOutputStream err) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    return Main.run(new String[] {"--scenario", "trace", "--policies", "round-robin",
        "--trace", "mooncake:" + trace},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
  }

  @Test
  void theLineReaderEndsLinesAsBufferedReaderDoes() throws Exception {
    String text = "a\nb\r\nc\rd\n\n\r\ne" + "y".repeat(8190) + "\r\nlast";
    // 8190 cuts the 8191-character line, which ends the reading there
    for (int bound : new int[] {100_000, 8191, 8190}) {
      // chunks of one character and of many: a CRLF split between two reads is one line end
      for (int chunk : new int[] {1, 3, 8192}) {
        MooncakeTraceWorkload.LineReader r = new MooncakeTraceWorkload.LineReader(
            new java.io.Reader() {
              int at;

              @Override
              public int read(char[] cbuf, int off, int len) {
                if (at == text.length()) {
                  return -1;
                }
                int n = Math.min(Math.min(len, chunk), text.length() - at);
                text.getChars(at, at + n, cbuf, off);
                at += n;
                return n;
              }

              @Override
              public void close() {}
            }, bound);
        java.io.BufferedReader b = new java.io.BufferedReader(new java.io.StringReader(text));
        String want;
        boolean stopped = false;
        while (!stopped && (want = b.readLine()) != null) {
          String got = r.next();
          if (want.length() > bound) {
            // an overlong line ends the reading
            assertThat(r.overlong()).isTrue();
            assertThat(got).isEqualTo(want.substring(0, bound));
            assertThatThrownBy(r::next).isInstanceOf(IllegalStateException.class);
            stopped = true;
          } else {
            assertThat(r.overlong()).isFalse();
            assertThat(got).as("bound %d chunk %d", bound, chunk).isEqualTo(want);
          }
        }
        if (!stopped) {
          assertThat(r.next()).isNull();
        }
        assertThat(stopped).isEqualTo(bound == 8190);
      }
    }
  }
}
