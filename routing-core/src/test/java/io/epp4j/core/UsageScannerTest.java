package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Usage;
import org.junit.jupiter.api.Test;

class UsageScannerTest {
  /** A chunk as a gateway hands it over: a buffer whose position is not at 0. */
  static java.nio.ByteBuffer utf8(String s) {
    byte[] b = ("xx" + s).getBytes(java.nio.charset.StandardCharsets.UTF_8);
    return java.nio.ByteBuffer.wrap(b).position(2);
  }

  static final String STREAM = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n"
      + "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\r\n\r\n"
      + "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":2,"
      + "\"total_tokens\":32,\"prompt_tokens_details\":{\"cached_tokens\":16}}}\n\n"
      + "data: [DONE]\n\n";

  static Usage scan(String contentType, String... chunks) {
    UsageScanner s = new UsageScanner(contentType);
    for (String c : chunks) {
      s.feed(utf8(c));
    }
    return s.finish();
  }

  @Test
  void anSseStreamGivesItsUsageChunkWhereverTheChunksAreCut() {
    for (int cut = 0; cut <= STREAM.length(); cut++) {
      for (int cut2 = cut; cut2 <= STREAM.length(); cut2 += 7) {
        UsageScanner s = new UsageScanner("text/event-stream; charset=utf-8");
        s.feed(utf8(STREAM.substring(0, cut)));
        s.feed(utf8(STREAM.substring(cut, cut2)));
        s.feed(utf8(STREAM.substring(cut2)));
        assertThat(s.finish()).as("cut at %d and %d", cut, cut2).isEqualTo(new Usage(30, 16, 2));
        assertThat(s.sawDone()).isTrue();
      }
    }
  }

  /** Every way to cut {@code stream} into three chunks (the second cut in steps of 3). */
  static void assertEveryCutFinds(String stream, Usage expected) {
    for (int cut = 0; cut <= stream.length(); cut++) {
      for (int cut2 = cut; cut2 <= stream.length(); cut2 += 3) {
        UsageScanner s = new UsageScanner("text/event-stream");
        s.feed(utf8(stream.substring(0, cut)));
        s.feed(utf8(stream.substring(cut, cut2)));
        s.feed(utf8(stream.substring(cut2)));
        assertThat(s.sawDone()).as("[DONE] seen before finish, cut at %d and %d", cut, cut2)
            .isTrue();
        assertThat(s.finish()).as("cut at %d and %d", cut, cut2).isEqualTo(expected);
      }
    }
  }

  @Test
  void aStreamWhoseLinesEndInACarriageReturnAloneIsReadLineByLine() {
    // SSE lines end in CRLF, LF or a CR alone; with CR alone the whole stream was one line: the
    // usage of a later chunk and data: [DONE] were not found
    String cr = "data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\r\r"
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\r\r"
        + "data: [DONE]\r\r";
    assertEveryCutFinds(cr, new Usage(7, 0, 2));
  }

  @Test
  void mixedLineEndsAndACrlfCutBetweenItsTwoBytesAreOneLineEndEach() {
    // a CRLF whose CR ends one chunk and whose LF starts the next is one line end: the LF must
    // not start the next line (a line "\ndata: [DONE]" is no data line)
    String mixed = ": keep-alive\r"
        + "data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r"
        + "event: x\n"
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}\r\n\n"
        + "data: [DONE]\r\n\r\n";
    assertEveryCutFinds(mixed, new Usage(9, 0, 4));
    UsageScanner s = new UsageScanner("text/event-stream");
    s.feed(utf8("data: {\"usage\":{\"prompt_tokens\":1}}\r"));
    s.feed(utf8("\ndata: [DONE]\r"));
    assertThat(s.sawDone()).isTrue();
    assertThat(s.finish()).isEqualTo(new Usage(1, 0, 0));
  }

  @Test
  void aLastDoneLineWithoutItsLineEndCountsOnceTheStreamHasEnded() {
    // while the stream runs, an unterminated line may go on in the next chunk; at the stream's
    // end (finish) it is the last line, and data: [DONE] there shows the answer whole
    for (String end : new String[] {"data: [DONE]", "data:[DONE]"}) {
      UsageScanner s = new UsageScanner("text/event-stream");
      s.feed(utf8("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2}}\n\n"));
      s.feed(utf8(end));
      assertThat(s.sawDone()).as("before the end: %s", end).isFalse();
      assertThat(s.finish()).isEqualTo(new Usage(2, 0, 0));
      assertThat(s.sawDone()).as("after the end: %s", end).isTrue();
    }
    for (String cut : new String[] {"data: [DONE", "data: [DONE]x", "data: [DO"}) {
      UsageScanner s = new UsageScanner("text/event-stream");
      s.feed(utf8("data: {\"choices\":[]}\n\n" + cut));
      s.finish();
      assertThat(s.sawDone()).as(cut).isFalse();
    }
  }

  @Test
  void countsBeyondAnIntAreHeldAtTheLargestIntNotWrapped() {
    // 2^32 + 5 kept its low bits (5) and 3e9 went negative and read as 0
    assertThat(scan("application/json", "{\"usage\":{\"prompt_tokens\":4294967301,"
        + "\"completion_tokens\":3000000000,\"prompt_tokens_details\":{\"cached_tokens\":"
        + "99999999999999999999}}}"))
        .isEqualTo(new Usage(Integer.MAX_VALUE, Integer.MAX_VALUE, Integer.MAX_VALUE));
    assertThat(scan("application/json", "{\"usage\":{\"prompt_tokens\":1e10,"
        + "\"completion_tokens\":-3000000000,\"prompt_tokens_details\":{\"cached_tokens\":"
        + "12.7}}}")).isEqualTo(new Usage(Integer.MAX_VALUE, 12, 0));
  }

  @Test
  void aStreamWithoutUsageGivesNone() {
    assertThat(scan("text/event-stream",
        "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n")).isEqualTo(Usage.NONE);
  }

  @Test
  void anOverlongLineIsSkippedAndTheUsageAfterItStillFound() {
    String huge = "data: {\"choices\":[{\"text\":\"" + "z".repeat(UsageScanner.LIMIT + 10)
        + "\"}],\"usage\":{\"prompt_tokens\":999}}\n\n";
    String usage = "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}\n\n";
    assertThat(scan("text/event-stream", huge.substring(0, 40_000), huge.substring(40_000), usage))
        .isEqualTo(new Usage(5, 0, 6));
  }

  @Test
  void aResponsesApiStreamGivesTheCompletedEventsUsage() {
    String s = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\"}\n\n"
        + "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{"
        + "\"object\":\"response\",\"usage\":{\"input_tokens\":40,\"output_tokens\":9,"
        + "\"input_tokens_details\":{\"cached_tokens\":32}}}}\n\n";
    assertThat(scan("text/event-stream", s)).isEqualTo(new Usage(40, 32, 9));
  }

  @Test
  void theUsageOfAnOverlongLineIsReadFromItsTail() {
    // the Responses API's completed event repeats the whole output before its usage: an answer
    // longer than the limit lost its usage (Usage.NONE) however the stream was cut
    String text = "w".repeat(3 * UsageScanner.LIMIT) + "a quoted \\\"usage\\\":{\\\"input_tokens\\\":1}";
    String stream = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\"}\n\n"
        + "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{"
        + "\"object\":\"response\",\"output\":[{\"type\":\"message\",\"content\":[{\"type\":"
        + "\"output_text\",\"text\":\"" + text + "\"}]}],\"usage\":{\"input_tokens\":40,"
        + "\"output_tokens\":50000,\"input_tokens_details\":{\"cached_tokens\":32}},\"user\":null}}\r\n\r\n";
    assertThat(scan("text/event-stream", stream)).isEqualTo(new Usage(40, 32, 50000));
    for (int cut : new int[] {10, 100, UsageScanner.LIMIT - 3, UsageScanner.LIMIT + 7,
        2 * UsageScanner.LIMIT, stream.length() - 40, stream.length() - 3}) {
      assertThat(scan("text/event-stream", stream.substring(0, cut), stream.substring(cut)))
          .as("cut at %d", cut).isEqualTo(new Usage(40, 32, 50000));
    }
    // the same line cut in many small pieces, and without its line end
    String[] pieces = new String[stream.length() / 5000 + 1];
    for (int i = 0; i < pieces.length; i++) {
      pieces[i] = stream.substring(i * 5000, Math.min(stream.length(), (i + 1) * 5000));
    }
    assertThat(scan("text/event-stream", pieces)).isEqualTo(new Usage(40, 32, 50000));
    assertThat(scan("text/event-stream", stream.strip())).isEqualTo(new Usage(40, 32, 50000));
    // "usage" quoted inside the text is not a usage; an overlong line that is not data is skipped
    String noUsage = "data: {\"choices\":[{\"text\":\"" + text + "\"}]}\n\n";
    assertThat(scan("text/event-stream", noUsage)).isEqualTo(Usage.NONE);
    String comment = ": " + "c".repeat(UsageScanner.LIMIT) + ",\"usage\":{\"prompt_tokens\":3}\n\n";
    assertThat(scan("text/event-stream", comment)).isEqualTo(Usage.NONE);
  }

  @Test
  void aJsonAnswerIsParsedWhole() {
    String json = "{\"object\":\"chat.completion\",\"choices\":[{\"message\":{\"content\":"
        + "\"the usage word inside text: \\\"usage\\\"\"}}],"
        + "\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":4,"
        + "\"prompt_tokens_details\":{\"cached_tokens\":8}}}";
    assertThat(scan("application/json", json.substring(0, 20), json.substring(20)))
        .isEqualTo(new Usage(11, 8, 4));
    // without a content type, the first byte tells
    assertThat(scan(null, "  \n", json)).isEqualTo(new Usage(11, 8, 4));
    assertThat(scan(null, STREAM)).isEqualTo(new Usage(30, 16, 2));
  }

  @Test
  void ofAJsonAnswerPastTheLimitOnlyTheTailIsKeptAndItsUsageRead() {
    String text = "w".repeat(3 * UsageScanner.LIMIT);
    String json = "{\"choices\":[{\"text\":\"" + text + "\"}],"
        + "\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":50,"
        + "\"prompt_token_details\":{\"cached_tokens\":64}}}";
    UsageScanner s = new UsageScanner("application/json");
    for (int from = 0; from < json.length(); from += 5000) {
      s.feed(utf8(json.substring(from, Math.min(json.length(), from + 5000))));
    }
    assertThat(s.finish()).isEqualTo(new Usage(100, 64, 50));
    // one chunk bigger than the ring
    assertThat(scan("application/json", json)).isEqualTo(new Usage(100, 64, 50));
  }

  @Test
  void aByteOrderMarkOpeningTheAnswerIsSkippedWhereverTheChunksAreCut() {
    // the SSE format ignores one U+FEFF at the start of a stream, and JSON parsers may; with it
    // the stream's first line did not start with "data:" and, without a content type, a JSON
    // body was taken for a stream (its first byte is 0xEF, not '{')
    String first =
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":6,\"completion_tokens\":1}}\n";
    String json = "{\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":4}}";
    String[][] cases = {
        {"text/event-stream", first}, {null, first}, {null, json}, {"application/json", json}};
    for (String[] c : cases) {
      byte[] b = ("\uFEFF" + c[1]).getBytes(java.nio.charset.StandardCharsets.UTF_8);
      for (int cut = 0; cut <= 4; cut++) {
        for (int cut2 = cut; cut2 <= 5; cut2++) {
          UsageScanner s = new UsageScanner(c[0]);
          s.feed(java.nio.ByteBuffer.wrap(b, 0, cut));
          s.feed(java.nio.ByteBuffer.wrap(b, cut, cut2 - cut));
          s.feed(java.nio.ByteBuffer.wrap(b, cut2, b.length - cut2));
          assertThat(s.finish()).as("%s %s, cut at %d and %d", c[0], c[1], cut, cut2)
              .isEqualTo(c[1] == json ? new Usage(11, 0, 4) : new Usage(6, 0, 1));
        }
      }
    }
    // only the first: a second mark, or one later in the stream, is the line's own text
    assertThat(scan("text/event-stream", "\uFEFF\uFEFF" + first)).isEqualTo(Usage.NONE);
    assertThat(scan("text/event-stream", "\n\uFEFF" + first)).isEqualTo(Usage.NONE);
    // bytes that only begin like a mark are kept
    UsageScanner s = new UsageScanner("text/event-stream");
    s.feed(java.nio.ByteBuffer.wrap(new byte[] {(byte) 0xEF}));
    s.feed(utf8("\n" + first));
    assertThat(s.finish()).isEqualTo(new Usage(6, 0, 1));
  }

  @Test
  void oddValuesGiveZeroesNotErrors() {
    assertThat(scan("application/json", "{\"usage\":{\"prompt_tokens\":-3,\"completion_tokens\":\"x\"}}"))
        .isEqualTo(new Usage(0, 0, 0));
    assertThat(scan("application/json", "{\"usage\":{\"prompt_tokens\":4,"
        + "\"prompt_tokens_details\":{\"cached_tokens\":9}}}")).isEqualTo(new Usage(4, 4, 0));
    assertThat(scan("application/json", "not json at all")).isEqualTo(Usage.NONE);
    assertThat(scan("application/json")).isEqualTo(Usage.NONE);
    assertThat(scan("text/event-stream", "data: {\"usage\": [1,2]}\n")).isEqualTo(Usage.NONE);
  }

  @Test
  void finishIsFinalAndMayBeCalledAgain() {
    // a second finish() of a JSON answer past the limit threw ArrayIndexOutOfBoundsException, and
    // so did a chunk fed after finish() to any JSON answer: the buffer was gone, the count was not
    String tail = "\"}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}";
    String longJson = "{\"choices\":[{\"text\":\"" + "w".repeat(UsageScanner.LIMIT) + tail;
    String shortJson = "{\"choices\":[{\"text\":\"w" + tail;
    for (String json : java.util.List.of(longJson, shortJson)) {
      for (String type : java.util.Arrays.asList("application/json", null)) {
        UsageScanner s = new UsageScanner(type);
        s.feed(utf8(json));
        assertThat(s.finish()).isEqualTo(new Usage(7, 0, 3));
        assertThat(s.finish()).isEqualTo(new Usage(7, 0, 3));
        s.feed(utf8(json));
        assertThat(s.finish()).isEqualTo(new Usage(7, 0, 3));
      }
    }
    UsageScanner sse = new UsageScanner("text/event-stream");
    sse.feed(utf8("data: {\"usage\":{\"prompt_tokens\":5}}"));
    assertThat(sse.finish()).isEqualTo(new Usage(5, 0, 0));
    sse.feed(utf8("\ndata: {\"usage\":{\"prompt_tokens\":9}}\n"));
    assertThat(sse.finish()).isEqualTo(new Usage(5, 0, 0));
  }
}
