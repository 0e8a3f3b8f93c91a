package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import io.epp4j.api.Rejection;
import io.epp4j.api.RoutingDecision;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.metrics.data.PointData;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;

class OpenAiRequestParserTest {
  final OpenAiRequestParser parser = OpenAiRequestParser.defaults();

  Result<InferenceRequest> parse(String path, String body) {
    return parser.parse(path, Map.of(), body.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void namesThatDifferOnlyInCaseAreOneHeaderWithTheirValuesJoinedInTheMapsOrder() {
    // before, the session key came from the first of them and the request's headers kept the
    // last: plugins reading x-session-id saw another session than the router's key
    Map<String, String> h = new java.util.LinkedHashMap<>();
    h.put("X-Session-Id", "a");
    h.put("x-session-id", "b");
    InferenceRequest r = parser.parse("/v1/completions", h,
        "{\"model\":\"m\",\"prompt\":\"p\"}".getBytes(StandardCharsets.UTF_8)).value();
    assertThat(r.sessionKey()).isEqualTo("a,b");
    assertThat(r.headers()).containsEntry("x-session-id", "a,b").doesNotContainKey("X-Session-Id");
    // the same from a request without body
    assertThat(parser.parseHeaders(h).value().sessionKey()).isEqualTo("a,b");
    // two priorities are no integer: refused naming the header, neither one picked
    Map<String, String> p = new java.util.LinkedHashMap<>();
    p.put("X-Request-Priority", "1");
    p.put("x-request-priority", "-1");
    assertThat(parser.parseHeaders(p).errors()).singleElement().asString()
        .contains("x-request-priority");
  }

  @Test
  void aRequestWithoutBodyHasItsHeadersReadAsAPostHas() {
    OpenAiRequestParser p = OpenAiRequestParser.of(1024, List.of("x-conv"));
    InferenceRequest r = p.parseHeaders(Map.of("X-Conv", "c1", "x-request-priority", " -2 ",
        "x-request-id", "id-7")).value();
    assertThat(r.sessionKey()).isEqualTo("c1");
    assertThat(r.priority()).isEqualTo(-2);
    assertThat(r.requestId()).isEqualTo("id-7");
    assertThat(r.prompt()).isEmpty();
    assertThat(p.parseHeaders(Map.of("x-request-priority", "high")).errors()).singleElement()
        .asString().contains("x-request-priority");
    assertThat(p.parseHeaders(Map.of("x-request-priority", "+3")).value().priority()).isEqualTo(3);
    // other scripts' digits and a bare sign are not an integer in a header
    for (String bad : List.of("\u0662", "-\u0661", "\uFF11\uFF10", "-", "+", "2147483648")) {
      assertThat(p.parseHeaders(Map.of("x-request-priority", bad)).errors()).as(bad)
          .singleElement().asString().contains("x-request-priority");
    }
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(io.epp4j.api.Endpoint.parse("10.0.0.1:80"))).requestParser(p).build()) {
      RoutingDecision d = router.routeHeaders(Map.of("x-request-priority", "high"));
      assertThat(d.rejection().reason()).isEqualTo(Rejection.Reason.INVALID_REQUEST);
      assertThat(router.routeHeaders(Map.of("x-conv", "c1")).isRouted()).isTrue();
    }
  }

  @Test
  void aTokenLimitWrittenAsAWholeFloatIsReadAsTheEngineReadsIt() {
    // vLLM's request model reads 100.0 and 1e3 as the integers they are (and refuses 100.5): a
    // client whose JSON writer prints numbers as doubles is served there, so it must be here
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":100.0}")
        .value().maxTokens()).isEqualTo(100);
    assertThat(parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
        + "\"content\":\"x\"}],\"max_completion_tokens\":1e3}").value().maxTokens()).isEqualTo(1000);
    for (String bad : List.of("100.5", "-1.0", "1e10", "1e400")) {
      assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":" + bad + "}")
          .errors()).as(bad).singleElement().asString()
          .startsWith("field 'max_tokens' must be a non-negative integer at line 1");
    }
  }

  @Test
  void streamAndTokenLimitsWrittenAsTheEnginesLaxModelAcceptsAreRead() {
    // vLLM's request models are pydantic in lax mode: "stream":"true" or 1 streams, and
    // "max_tokens":"100" is 100. A client served directly must be served through the router
    String c = "{\"model\":\"m\",\"prompt\":\"x\",";
    for (String yes : List.of("true", "1", "1.0", "\"true\"", "\"True\"", "\"yes\"", "\"on\"",
        "\"t\"", "\"y\"", "\"1\"")) {
      assertThat(parse("/v1/completions", c + "\"stream\":" + yes + "}").value().stream())
          .as(yes).isTrue();
    }
    for (String no : List.of("false", "0", "null", "\"false\"", "\"OFF\"", "\"no\"", "\"n\"",
        "\"f\"", "\"0\"")) {
      assertThat(parse("/v1/completions", c + "\"stream\":" + no + "}").value().stream())
          .as(no).isFalse();
    }
    for (String bad : List.of("2", "0.5", "\"maybe\"", "\"\"", "\"1.0\"", "[]")) {
      assertThat(parse("/v1/completions", c + "\"stream\":" + bad + "}").errors()).as(bad)
          .singleElement().asString().startsWith("field 'stream' must be true or false");
    }
    assertThat(parse("/v1/completions", c + "\"max_tokens\":\"100\"}").value().maxTokens())
        .isEqualTo(100);
    assertThat(parse("/v1/completions", c + "\"max_tokens\":\" 64 \"}").value().maxTokens())
        .isEqualTo(64);
    assertThat(parse("/v1/completions", c + "\"max_tokens\":\"8.00\"}").value().maxTokens())
        .isEqualTo(8);
    for (String bad : List.of("\"-1\"", "\"1e3\"", "\"ten\"", "\"\"", "\"8.5\"",
        "\"99999999999\"")) {
      assertThat(parse("/v1/completions", c + "\"max_tokens\":" + bad + "}").errors()).as(bad)
          .singleElement().asString().startsWith("field 'max_tokens' must be a non-negative integer");
    }
  }

  @Test
  void aChatRequestsMaxCompletionTokensWinsOverMaxTokensWhicheverComesFirst() {
    // the engines take max_completion_tokens or else max_tokens for chat, and ignore
    // max_completion_tokens on /v1/completions; the field written last used to win
    String chat = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],";
    assertThat(parse("/v1/chat/completions", chat
        + "\"max_completion_tokens\":100,\"max_tokens\":10}").value().maxTokens()).isEqualTo(100);
    assertThat(parse("/v1/chat/completions", chat
        + "\"max_tokens\":10,\"max_completion_tokens\":100}").value().maxTokens()).isEqualTo(100);
    assertThat(parse("/v1/chat/completions", chat
        + "\"max_completion_tokens\":null,\"max_tokens\":10}").value().maxTokens()).isEqualTo(10);
    String completion = "{\"model\":\"m\",\"prompt\":\"x\",";
    assertThat(parse("/v1/completions", completion
        + "\"max_tokens\":10,\"max_completion_tokens\":100}").value().maxTokens()).isEqualTo(10);
    assertThat(parse("/v1/completions", completion
        + "\"max_completion_tokens\":100,\"max_tokens\":10}").value().maxTokens()).isEqualTo(10);
    // one of them alone counts as before
    assertThat(parse("/v1/completions", completion + "\"max_completion_tokens\":100}").value()
        .maxTokens()).isEqualTo(100);
    assertThat(parse("/v1/chat/completions", chat + "\"max_tokens\":10}").value().maxTokens())
        .isEqualTo(10);
  }

  @Test
  void completionBody() {
    InferenceRequest r = parser.parse("/v1/completions",
        Map.of("X-Session-Id", "user-7", "x-request-id", "req-1", "X-Request-Priority", "-1"),
        """
        {"model":"qwen3","prompt":"Once upon a time","max_tokens":64,"stream":true,
         "temperature":0.2,"cache_salt":"tenant-a","logit_bias":{"1":2}}
        """.getBytes(StandardCharsets.UTF_8)).value();
    assertThat(r.kind()).isEqualTo(InferenceRequest.Kind.COMPLETION);
    assertThat(r.model()).isEqualTo("qwen3");
    assertThat(r.prompt()).isEqualTo("Once upon a time");
    assertThat(r.maxTokens()).isEqualTo(64);
    assertThat(r.stream()).isTrue();
    assertThat(r.cacheSalt()).isEqualTo("tenant-a");
    assertThat(r.sessionKey()).isEqualTo("user-7");
    assertThat(r.requestId()).isEqualTo("req-1");
    assertThat(r.priority()).isEqualTo(-1);
  }

  @Test
  void tokenPrompt() {
    InferenceRequest r = parse("/v1/completions", "{\"model\":\"m\",\"prompt\":[1,2,3,70000]}").value();
    assertThat(r.kind()).isEqualTo(InferenceRequest.Kind.TOKENS);
    assertThat(r.tokenIds()).containsExactly(1, 2, 3, 70000);
  }

  @Test
  void aFieldGivenTwiceCountsWithItsLastValueAsTheEngineReadsIt() {
    // before, a text prompt then a token prompt was refused as "'prompt' and 'messages'"
    InferenceRequest tokens = parse("/v1/completions",
        "{\"model\":\"a\",\"prompt\":\"text\",\"prompt\":[5,6],\"model\":\"m\"}").value();
    assertThat(tokens.tokenIds()).containsExactly(5, 6);
    assertThat(tokens.prompt()).isNull();
    assertThat(tokens.targetModel()).isEqualTo("m");
    InferenceRequest text = parse("/v1/completions",
        "{\"model\":\"m\",\"prompt\":[5,6],\"prompt\":\"text\"}").value();
    assertThat(text.prompt()).isEqualTo("text");
    assertThat(text.tokenIds()).isNull();
  }

  @Test
  void chatWithStringAndPartsContentAndTools() {
    InferenceRequest r = parse("/v1/chat/completions", """
        {"model":"m","messages":[
          {"role":"system","content":"You are terse."},
          {"role":"user","content":[{"type":"text","text":"Look at "},
                                     {"type":"image_url","image_url":{"url":"http://x/1.png"}},
                                     {"type":"text","text":"this"}]}],
         "tools":[{"type":"function","function":{"name":"f","parameters":{"b":1,"a":2}}}],
         "max_completion_tokens": 5}
        """).value();
    assertThat(r.kind()).isEqualTo(InferenceRequest.Kind.CHAT);
    assertThat(r.messages()).hasSize(2);
    assertThat(r.messages().get(0)).isEqualTo(ChatMessage.system("You are terse."));
    assertThat(r.messages().get(1).content())
        .startsWith("Look at ").endsWith("this").contains("http://x/1.png");
    // as written: the model's template prints the schema with tojson, which keeps key order
    assertThat(r.toolsJson()).isEqualTo(
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"b\":1,\"a\":2}}}]");
    assertThat(r.maxTokens()).isEqualTo(5);
  }

  @Test
  void differentImagesGiveDifferentContent() {
    String tpl = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\"}}]}]}";
    String a = parse("/v1/chat/completions", tpl.formatted("a.png")).value().messages().get(0).content();
    String b = parse("/v1/chat/completions", tpl.formatted("b.png")).value().messages().get(0).content();
    assertThat(a).isNotEqualTo(b);
  }

  @Test
  void malformedBodiesAreErrorsNamingTheProblem() {
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":").errors().get(0)).contains("not valid JSON");
    assertThat(parse("/v1/completions", "[1,2]").errors().get(0)).contains("must be a JSON object");
    assertThat(parse("/v1/completions", "{\"prompt\":\"x\"}").errors().get(0)).contains("'model' is required");
    assertThat(parse("/v1/chat/completions", "{\"model\":\"m\"}").errors().get(0)).contains("'messages' is required");
    assertThat(parse("/v1/completions", "{\"model\":\"m\"}").errors().get(0)).contains("'prompt' is required");
    assertThat(parse("/v1/completions", "{\"model\":7,\"prompt\":\"x\"}").errors().get(0)).contains("'model' must be a string");
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":-1}").errors().get(0)).contains("max_tokens");
    assertThat(parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}").errors().get(0)).contains("messages[0].role");
    assertThat(parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}").errors().get(0)).contains("messages[0].content[0].type");
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"x\"} {}").errors())
        .containsExactly("request body has content after the JSON object");
    assertThat(parse("/v1/completions", "").errors().get(0)).contains("empty");
  }

  @Test
  void errorMessagesNeverContainPromptText() {
    String secret = "SECRET-PROMPT-TEXT";
    Result<InferenceRequest> r = parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"" + secret + "\",\"max_tokens\":\"x\"}");
    assertThat(r.isOk()).isFalse();
    assertThat(String.join(" ", r.errors())).doesNotContain(secret);
  }

  static final String MARK = "ZQXMARKERQZX";
  // out of range for int (token IDs), long, and double precision: each range check is crossed
  static final String MARK_NUMBERS[] = {"7391846205", "98765432109876543210", "-7391846205"};

  /** Malformed bodies, each holding the marker string or a marker number somewhere. */
  static List<byte[]> bodiesWithMarkers() {
    List<String> texts = new ArrayList<>();
    String valid = "{\"model\":\"m\",\"prompt\":\"a " + MARK + " b\",\"max_tokens\":4}";
    String chat = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\""
        + MARK + "\"}]}],\"tools\":[{\"" + MARK + "\":1}]}";
    // every truncation of a valid body
    for (String v : List.of(valid, chat)) {
      for (int cut = 0; cut < v.length(); cut++) {
        texts.add(v.substring(0, cut));
      }
    }
    // bad tokens in every position a value or a name can be
    texts.addAll(List.of(
        MARK, "\"" + MARK + "\"", "[" + MARK + "]", "{" + MARK + "}", "{\"" + MARK + "\"}",
        "{\"" + MARK + "\":}", "{\"model\":" + MARK + "}", "{\"model\":\"m\",\"prompt\":" + MARK + "}",
        "{\"model\":\"m\",\"prompt\":t" + MARK + "}", "{\"model\":\"m\",\"prompt\":[1," + MARK + "]}",
        "{\"model\":\"m\",\"prompt\":\"x\"," + MARK + ":1}",
        "{\"model\":\"m\",\"prompt\":\"x\"} " + MARK,
        "{\"model\":\"m\",\"prompt\":\"x\"}{\"" + MARK + "\":1}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":true" + MARK + "}]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":" + MARK + "}]}]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"a\":" + MARK + "}]}",
        "{\"model\":\"m\",\"x\":{\"" + MARK + "\":[1,2,}},\"prompt\":\"x\"}",
        "{\"model\":\"m\",\"prompt\":\"\\q" + MARK + "\"}",
        "{\"model\":\"m\",\"prompt\":\"\\u12G4" + MARK + "\"}",
        "{\"model\":\"m\",\"prompt\":\"" + MARK + "\n" + MARK + "\"}",
        "{\"model\":\"m\",\"prompt\":\"" + MARK + "\"".repeat(1) + "\"}",
        "{\"model\":\"m\",\"prompt\":\"x\",\"stream\":tru" + MARK + "}",
        "{\"model\":\"m\",\"prompt\":\"x\",\"stream\":nul}" + MARK,
        "[".repeat(100) + "\"" + MARK + "\"" + "]".repeat(100),
        "{\"model\":\"m\",\"prompt\":\"x\",\"x\":" + "[".repeat(100) + "\"" + MARK + "\"" + "]".repeat(100) + "}"));
    // wrong types in every field the parser reads
    for (String field : List.of("model", "prompt", "messages", "tools", "cache_salt", "stream",
        "max_tokens", "max_completion_tokens")) {
      for (String value : List.of("[\"" + MARK + "\"]", "{\"" + MARK + "\":1}", "\"" + MARK + "\"", "1.5", "true")) {
        boolean validType = value.startsWith("\"") && List.of("model", "prompt", "cache_salt").contains(field)
            || value.equals("true") && field.equals("stream") || value.startsWith("[") && List.of("tools", "prompt").contains(field);
        if (validType) {
          continue;
        }
        texts.add("{\"model\":\"m\",\"prompt\":\"" + MARK + "\",\"" + field + "\":" + value + "}");
      }
    }
    for (String value : List.of("[\"" + MARK + "\"]", "{\"" + MARK + "\":1}", "7", "[]", "null")) {
      texts.add("{\"model\":\"m\",\"messages\":[{\"role\":" + value + ",\"content\":\"" + MARK + "\"}]}");
      texts.add("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":" + value
          + ",\"text\":\"" + MARK + "\"}]}]}");
      texts.add("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
          + value + ",\"x\":\"" + MARK + "\"}]}]}");
      texts.add("{\"model\":\"m\",\"messages\":[\"" + MARK + "\"," + value + "]}");
      texts.add("{\"model\":\"m\",\"prompt\":[\"" + MARK + "\"," + value + "]}");
    }
    // a batch of prompts is a valid body (the engine takes it); one that goes wrong later is not
    texts.add("{\"model\":\"m\",\"prompt\":[\"" + MARK + "\",\"" + MARK + "\",7]}");
    texts.add("{\"model\":\"m\",\"prompt\":[[1],[\"" + MARK + "\"]]}");
    texts.add("{\"model\":\"m\",\"prompt\":\"" + MARK + "\",\"messages\":[]}");
    texts.add("{\"model\":\"m\",\"messages\":[],\"cache_salt\":\"" + MARK + "\"}");
    texts.add("{\"model\":\"\",\"prompt\":\"" + MARK + "\"}");
    // marker numbers: token IDs, max_tokens, nested
    for (String n : MARK_NUMBERS) {
      texts.add("{\"model\":\"m\",\"prompt\":[1,2," + n + "]}");
      texts.add("{\"model\":\"m\",\"prompt\":[" + n + "]}");
      texts.add("{\"model\":\"m\",\"prompt\":[1," + n + ".5]}");
      texts.add("{\"model\":\"m\",\"prompt\":[1," + n + "x]}");
      texts.add("{\"model\":\"m\",\"prompt\":[1,0" + n + "]}");
      texts.add("{\"model\":\"m\",\"prompt\":[1,2," + n);
      texts.add("{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":" + n + "}");
      texts.add("{\"model\":\"m\",\"prompt\":\"x\",\"max_completion_tokens\":" + n + "e5}");
      texts.add("{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":" + n + "." + n + "}");
      texts.add("{\"model\":\"m\",\"prompt\":\"x\",\"n\":" + n + "-" + "}");
      texts.add("{\"model\":" + n + ",\"prompt\":\"x\"}");
    }
    List<byte[]> bodies = new ArrayList<>();
    for (String t : texts) {
      bodies.add(t.getBytes(StandardCharsets.UTF_8));
    }
    // invalid UTF-8 right beside the marker, in the prompt and in a skipped field
    byte[][] bad = {{(byte) 0xC0, (byte) 0x80}, {(byte) 0xF4, (byte) 0x90, (byte) 0x80, (byte) 0x80},
        {(byte) 0xED, (byte) 0xA0, (byte) 0x80}, {(byte) 0xFF}, {(byte) 0xE2, (byte) 0x82},
        {(byte) 0x80}, {(byte) 0xC3}};
    for (byte[] b : bad) {
      for (String field : List.of("prompt", "skipped")) {
        bodies.add(concat(("{\"model\":\"m\",\"prompt\":\"x\",\"" + field + "\":\"" + MARK).getBytes(StandardCharsets.UTF_8),
            b, (MARK + "\"}").getBytes(StandardCharsets.UTF_8)));
        bodies.add(concat(("{\"model\":\"m\",\"" + field + "\":" + MARK).getBytes(StandardCharsets.UTF_8),
            b, ("}").getBytes(StandardCharsets.UTF_8)));
      }
    }
    return bodies;
  }

  static byte[] concat(byte[]... parts) {
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
    for (byte[] p : parts) {
      out.writeBytes(p);
    }
    return out.toByteArray();
  }

  @Test
  void markerInMalformedBodiesNeverReachesMessagesLogsOrMetrics() throws Exception {
    List<byte[]> bodies = bodiesWithMarkers();
    List<String> logged = new ArrayList<>();
    java.util.logging.Logger core = java.util.logging.Logger.getLogger("io.epp4j");
    java.util.logging.Level oldLevel = core.getLevel();
    java.util.logging.Handler capture = new java.util.logging.Handler() {
      @Override
      public synchronized void publish(java.util.logging.LogRecord r) {
        logged.add(String.valueOf(r.getMessage()) + " " + java.util.Arrays.toString(r.getParameters())
            + " " + (r.getThrown() == null ? "" : r.getThrown().toString()));
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    core.setLevel(java.util.logging.Level.ALL);
    core.addHandler(capture);
    InMemoryMetricReader reader = InMemoryMetricReader.create();
    OpenTelemetrySdk sdk = OpenTelemetrySdk.builder()
        .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(reader).build()).build();
    List<String> messages = new ArrayList<>();
    try (Router router = RouterTest.base().openTelemetry(sdk)
        .endpoints(List.of(TestPlugins.ep("10.0.0.1:80", Map.of()))).build()) {
      OpenAiRequestParser small = OpenAiRequestParser.of(64, OpenAiRequestParser.DEFAULT_SESSION_HEADERS);
      for (byte[] body : bodies) {
        for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
          RoutingDecision d = router.route(path, Map.of("x-request-priority", MARK), body);
          assertThat(d.isRouted()).as(new String(body, StandardCharsets.UTF_8)).isFalse();
          assertThat(d.rejection().reason()).isEqualTo(Rejection.Reason.INVALID_REQUEST);
          messages.add(d.rejection().message());
          Result<InferenceRequest> r = parser.parse(path, Map.of(), body);
          assertThat(r.isOk()).as(new String(body, StandardCharsets.UTF_8)).isFalse();
          messages.addAll(r.errors());
          messages.addAll(small.parse(path, Map.of(), body).errors());
        }
      }
      for (MetricData m : reader.collectAllMetrics()) {
        for (PointData p : m.getData().getPoints()) {
          messages.add(p.getAttributes().toString());
        }
      }
    } finally {
      core.removeHandler(capture);
      core.setLevel(oldLevel);
      sdk.close();
    }
    assertThat(messages).hasSizeGreaterThan(bodies.size() * 4);
    // a part of the marker, so that a message quoting a cut-off token is caught too
    List<String> markers = new ArrayList<>(List.of(MARK.substring(2, 10)));
    for (String n : MARK_NUMBERS) {
      markers.add(n.substring(1, 9));
    }
    for (String marker : markers) {
      assertThat(messages).filteredOn(m -> m.contains(marker)).as(marker).isEmpty();
      assertThat(logged).filteredOn(m -> m.contains(marker)).as(marker).isEmpty();
    }
  }

  @Test
  void errorsNameTheFieldAndThePosition() {
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":" + MARK + "}").errors())
        .containsExactly("request body is not valid JSON: unrecognized token near field 'prompt'"
            + " at line 1, column 23 (byte offset 22)");
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\n\"prompt\":[1,2,98765432109876543210]}").errors())
        .containsExactly("field 'prompt[2]' holds a token ID outside [0, 2^31) at line 2, column 15 (byte offset 28)");
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":98765432109876543210}").errors())
        .containsExactly("field 'max_tokens' must be a non-negative integer at line 1, column 40 (byte offset 39)");
    assertThat(parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[true,\"" + MARK + "\"]}]}")
        .errors()).containsExactly("field 'messages[0].content[0]' must be an object or a string at line 1, column 52 (byte offset 51)");
    assertThat(parse("/v1/chat/completions",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"},{\"role\":\"user\",\"content\":[{\"text\":\"a").errors())
        .containsExactly("request body is not valid JSON: unexpected end of input near field 'messages[1].content[0].text'"
            + " at line 1, column 78 (byte offset 77)");
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"" + MARK + "\":{\"a\":[1,}").errors())
        .containsExactly("request body is not valid JSON: unexpected character near field '*.*[1]'"
            + " at line 1, column 37 (byte offset 36)");
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"x\"} " + MARK).errors())
        .containsExactly("request body is not valid JSON: unrecognized token"
            + " at line 1, column 28 (byte offset 27)");
  }

  @Test
  void invalidUtf8IsRejectedWithItsPosition() {
    String head = "{\"model\":\"m\",\"prompt\":\"x\",\"skipped\":\"";
    Object[][] cases = {
        {new byte[] {(byte) 0xC0, (byte) 0x80}, "overlong encoding"},
        {new byte[] {(byte) 0xE0, (byte) 0x80, (byte) 0xAF}, "overlong encoding"},
        {new byte[] {(byte) 0xF0, (byte) 0x80, (byte) 0x80, (byte) 0xAF}, "overlong encoding"},
        {new byte[] {(byte) 0xF4, (byte) 0x90, (byte) 0x80, (byte) 0x80}, "code point above U+10FFFF"},
        {new byte[] {(byte) 0xF5, (byte) 0x80, (byte) 0x80, (byte) 0x80}, "code point above U+10FFFF"},
        {new byte[] {(byte) 0xED, (byte) 0xA0, (byte) 0x80}, "surrogate code point"},
        {new byte[] {(byte) 0xED, (byte) 0xBF, (byte) 0xBF}, "surrogate code point"},
        {new byte[] {(byte) 0x80}, "unexpected continuation byte"},
        {new byte[] {(byte) 0xE2, (byte) 0x82, (byte) '"'}, "truncated sequence"},
        {new byte[] {(byte) 0xFF}, "invalid byte"},
    };
    for (Object[] c : cases) {
      for (String field : List.of("prompt", "skipped")) {
        byte[] body = concat(head.replace("skipped", field).getBytes(StandardCharsets.UTF_8), (byte[]) c[0],
            "y\"}".getBytes(StandardCharsets.UTF_8));
        int offset = head.replace("skipped", field).length();
        assertThat(parser.parse("/v1/completions", Map.of(), body).errors()).as("%s in %s", c[1], field)
            .containsExactly("request body is not valid UTF-8: " + c[1] + " at line 1, column " + (offset + 1)
                + " (byte offset " + offset + ")");
      }
    }
    byte[] twoLines = "{\"model\":\"m\",\n \"prompt\":\"\u00e9\u4e2d\ud83d\ude00\u00e9".getBytes(StandardCharsets.UTF_8);
    assertThat(parser.parse("/v1/completions", Map.of(), concat(twoLines, new byte[] {(byte) 0xC1, (byte) 0xBF}))
        .errors()).containsExactly("request body is not valid UTF-8: overlong encoding at line 2, column 23 (byte offset 36)");
    // the largest valid sequences of each length are accepted
    InferenceRequest ok = parser.parse("/v1/completions", Map.of(), concat(
        "{\"model\":\"m\",\"prompt\":\"".getBytes(StandardCharsets.UTF_8),
        new byte[] {0x7F, (byte) 0xDF, (byte) 0xBF, (byte) 0xEF, (byte) 0xBF, (byte) 0xBF, (byte) 0xED, (byte) 0x9F,
            (byte) 0xBF, (byte) 0xEE, (byte) 0x80, (byte) 0x80, (byte) 0xF4, (byte) 0x8F, (byte) 0xBF, (byte) 0xBF},
        "\"}".getBytes(StandardCharsets.UTF_8))).value();
    assertThat(ok.prompt()).isEqualTo("\u007F\u07FF\uFFFF\uD7FF\uE000\uDBFF\uDFFF");
  }

  @Test
  void nullHeaderValuesAndNamesAreTreatedAsAbsent() {
    Map<String, String> headers = new java.util.HashMap<>();
    headers.put("x-session-id", null);
    headers.put("X-Session-Token", "s-2");
    headers.put("x-request-priority", null);
    headers.put("x-request-id", null);
    headers.put(null, "v");
    headers.put("X-Other", null);
    byte[] body = "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8);
    InferenceRequest r = parser.parse("/v1/completions", headers, body).value();
    assertThat(r.sessionKey()).isEqualTo("s-2");
    assertThat(r.priority()).isZero();
    assertThat(r.requestId()).isNotBlank();
    assertThat(r.headers()).containsExactly(Map.entry("x-session-token", "s-2"));
    try (Router router = RouterTest.base().endpoints(List.of(TestPlugins.ep("10.0.0.1:80", Map.of()))).build()) {
      RoutingDecision d = router.route("/v1/completions", headers, body);
      assertThat(d.isRouted()).isTrue();
      d.onComplete(io.epp4j.api.Usage.NONE);
    }
  }

  @Test
  void oversizedBodyIsRejected() {
    OpenAiRequestParser small = OpenAiRequestParser.of(100, OpenAiRequestParser.DEFAULT_SESSION_HEADERS);
    String body = "{\"model\":\"m\",\"prompt\":\"" + "x".repeat(200) + "\"}";
    Result<InferenceRequest> r = small.parse("/v1/completions", Map.of(), body.getBytes(StandardCharsets.UTF_8));
    assertThat(r.errors().get(0)).contains("above the limit of 100");
  }

  @Test
  void mutatedBodiesAreAcceptedOnlyWhenStrictlyValid() {
    Random rnd = new Random(42);
    String valid = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"h\u00e9\u4e2d\"}]}],\"tools\":[{\"a\":1}],\"x\":[1,2]}";
    int accepted = 0;
    for (int i = 0; i < 5000; i++) {
      byte[] b = valid.getBytes(StandardCharsets.UTF_8);
      int edits = 1 + rnd.nextInt(4);
      for (int e = 0; e < edits; e++) {
        b[rnd.nextInt(b.length)] = (byte) rnd.nextInt(256);
      }
      byte[] body = rnd.nextInt(4) == 0 ? java.util.Arrays.copyOf(b, rnd.nextInt(b.length + 1)) : b;
      Result<InferenceRequest> r = parser.parse("/v1/chat/completions", Map.of(), body);
      if (r.isOk()) {
        accepted++;
        com.fasterxml.jackson.databind.JsonNode tree = strictTree(body);
        assertThat(tree).as("accepted but not strict UTF-8 JSON: %s", java.util.Arrays.toString(body)).isNotNull();
        assertThat(r.value().model()).isEqualTo(tree.get("model").textValue());
      } else {
        assertThat(r.errors()).singleElement().satisfies(m -> assertThat(m)
            .matches("(request body |field |fields ).*").hasSizeLessThan(200));
      }
    }
    // the mutations must also leave some bodies valid, else the acceptance check checks nothing
    assertThat(accepted).isPositive();
  }

  static final com.fasterxml.jackson.databind.ObjectMapper STRICT = new com.fasterxml.jackson.databind.ObjectMapper();

  /** The body as a tree if it is strict UTF-8 and exactly one JSON object, else null. */
  static com.fasterxml.jackson.databind.@org.jspecify.annotations.Nullable JsonNode strictTree(byte[] body) {
    try {
      StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(java.nio.charset.CodingErrorAction.REPORT)
          .onUnmappableCharacter(java.nio.charset.CodingErrorAction.REPORT)
          .decode(java.nio.ByteBuffer.wrap(body));
      try (com.fasterxml.jackson.core.JsonParser p = STRICT.createParser(body)) {
        com.fasterxml.jackson.databind.JsonNode tree = STRICT.readTree(p);
        return tree != null && tree.isObject() && p.nextToken() == null ? tree : null;
      }
    } catch (java.io.IOException e) {
      return null;
    }
  }

  static final com.fasterxml.jackson.databind.ObjectMapper JACKSON_SORTED =
      com.fasterxml.jackson.databind.json.JsonMapper.builder()
          .configure(com.fasterxml.jackson.databind.SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS, true)
          .configure(com.fasterxml.jackson.databind.cfg.JsonNodeFeature.WRITE_PROPERTIES_SORTED, true)
          .build();

  static com.fasterxml.jackson.databind.JsonNode randomNode(Random rnd, int depth) {
    var f = com.fasterxml.jackson.databind.node.JsonNodeFactory.instance;
    int kind = rnd.nextInt(depth > 3 ? 6 : 8);
    switch (kind) {
      case 0: return f.textNode(randomString(rnd));
      case 1: return f.numberNode(rnd.nextInt());
      case 2: return f.numberNode(rnd.nextLong());
      case 3: return f.numberNode(rnd.nextDouble() * 1e6);
      case 4: return f.booleanNode(rnd.nextBoolean());
      case 5: return f.nullNode();
      case 6: {
        var o = f.objectNode();
        for (int i = rnd.nextInt(5); i > 0; i--) {
          o.set(randomString(rnd), randomNode(rnd, depth + 1));
        }
        return o;
      }
      default: {
        var a = f.arrayNode();
        for (int i = rnd.nextInt(5); i > 0; i--) {
          a.add(randomNode(rnd, depth + 1));
        }
        return a;
      }
    }
  }

  static String randomString(Random rnd) {
    StringBuilder sb = new StringBuilder();
    for (int i = rnd.nextInt(8); i > 0; i--) {
      int k = rnd.nextInt(10);
      sb.append(k < 5 ? (char) ('a' + rnd.nextInt(26)) : k < 7 ? (char) rnd.nextInt(0x30)
          : k < 8 ? '\\' : k < 9 ? '"' : (char) (0x7F + rnd.nextInt(0x3000)));
    }
    return sb.toString();
  }

  @Test
  void canonicalJsonIsWhatJacksonWritesWithSortedKeys() throws Exception {
    Random rnd = new Random(5);
    for (int i = 0; i < 2000; i++) {
      var node = randomNode(rnd, 0);
      assertThat(CanonicalJson.canonical(node)).isEqualTo(JACKSON_SORTED.writeValueAsString(node));
    }
  }

  @Test
  void textPartsAreJoinedWithNewlinesAsVllmJoinsThem() {
    // vLLM gives a chat template that takes string content "\n".join(text parts); the rendered
    // prompt, and so precise mode's blocks, must be the same
    InferenceRequest r = parse("/v1/chat/completions", """
        {"model":"m","messages":[{"role":"user","content":[
          {"type":"text","text":"hello"},{"type":"text","text":"there world"}]},
          {"role":"user","content":[{"type":"text","text":"one part"}]}]}
        """).value();
    assertThat(r.messages().get(0).content()).isEqualTo("hello\nthere world");
    assertThat(r.messages().get(1).content()).isEqualTo("one part");
  }

  @Test
  void anEmptyTextPartAddsNoNewlineAsVllmJoinsOnlyTheTextsThatAreNotEmpty() {
    // vLLM's parser keeps the parts whose text is not empty for a template that takes string
    // content, so ["a", "", "b"] is "a\nb" there, and an empty first or last part adds nothing
    InferenceRequest r = parse("/v1/chat/completions", """
        {"model":"m","messages":[{"role":"user","content":[
          {"type":"text","text":"a"},{"type":"text","text":""},"b"]},
          {"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"c"},""]},
          {"role":"user","content":["",""]}]}
        """).value();
    assertThat(r.messages().get(0).content()).isEqualTo("a\nb");
    assertThat(r.messages().get(1).content()).isEqualTo("c");
    assertThat(r.messages().get(2).content()).isEmpty();
    assertThat(r.messages().get(0).parts()).hasSize(3);
  }

  @Test
  void textPartsWithExtraFieldsAndMediaParts() {
    InferenceRequest r = parse("/v1/chat/completions", """
        {"model":"m","messages":[{"role":"user","content":[
          {"text":"a","type":"text","cache_control":{"type":"ephemeral"}},
          {"type":"image_url","image_url":{"url":"u"}},
          {"type":"text","text":"b"}]},
          {"role":"assistant","content":"c","content":"d"}]}
        """).value();
    assertThat(r.messages().get(0).content())
        .isEqualTo("a\n{\"image_url\":{\"url\":\"u\"},\"type\":\"image_url\"}\nb");
    assertThat(r.messages().get(1).content()).isEqualTo("d"); // the last one, as the engine reads it
    assertThat(parse("/v1/chat/completions",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}")
        .errors()).containsExactly("field 'messages[0].content[0].type' is required");
  }

  @Test
  void aPartWithoutATypeThatGivesAMediaFieldIsThatMediumAsVllmReadsIt() {
    // vLLM's simple media parts: no type, the medium named by its field (chat_utils.py, "Handle
    // missing 'type' but provided direct URL fields")
    InferenceRequest r = parse("/v1/chat/completions", """
        {"model":"m","messages":[{"role":"user","content":[
          {"image_url":"http://x/a.png"},
          {"audio_url":{"url":"http://x/a.wav"}},
          {"input_audio":{"data":"AAAA","format":"wav"}},
          {"video_url":"http://x/v.mp4"},
          {"type":"text","text":"what is this?"}]}]}
        """).value();
    assertThat(r.messages().get(0).parts()).extracting(ChatMessage.Part::type)
        .containsExactly("image", "audio", "audio", "video", "text");
    assertThat(r.messages().get(0).content())
        .startsWith("{\"image_url\":\"http://x/a.png\"}\n").endsWith("\nwhat is this?");
    // a null image_url is no medium, and a part that names none is still refused, as there
    for (String part : List.of("{\"image_url\":null}", "{\"detail\":\"high\"}",
        "{\"text\":\"a\",\"cache_control\":{}}")) {
      assertThat(parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":[{\"role\":"
          + "\"user\",\"content\":[" + part + "]}]}").errors()).as(part)
          .containsExactly("field 'messages[0].content[0].type' is required");
    }
  }

  @Test
  void aMessagesNullNameToolCallsOrToolCallIdIsTheFieldAbsentAsTheEngineReadsIt() {
    // clients that serialise every field of their message type send "name": null and the like;
    // the engine renders such a message exactly as one without those fields, so its content
    // (the prompt's identity for the prefix scorers, the text precise mode tokenizes) must be
    // the same, not carry "name=null" lines the engine never sees
    String withNulls = """
        {"model":"m","messages":[
          {"role":"system","content":"You are terse.","name":null},
          {"role":"user","content":"hi","name":null,"tool_calls":null,"tool_call_id":null},
          {"role":"assistant","content":null,"tool_calls":null},
          {"role":"tool","content":"42","tool_call_id":null}]}
        """;
    String without = """
        {"model":"m","messages":[
          {"role":"system","content":"You are terse."},
          {"role":"user","content":"hi"},
          {"role":"assistant","content":null},
          {"role":"tool","content":"42"}]}
        """;
    assertThat(parse("/v1/chat/completions", withNulls).value().messages())
        .isEqualTo(parse("/v1/chat/completions", without).value().messages())
        .containsExactly(ChatMessage.system("You are terse."), new ChatMessage("user", "hi"),
            ChatMessage.withoutContent("assistant", ""), new ChatMessage("tool", "42"));
    // a value that is there still counts
    assertThat(parse("/v1/chat/completions", """
        {"model":"m","messages":[{"role":"user","content":"hi","name":"ann"}]}
        """).value().messages().get(0).fields()).isEqualTo("{\"name\":\"ann\"}");
  }

  @Test
  void aNullOrAbsentContentIsKeptApartFromAnEmptyOne() {
    // vLLM gives a template that iterates over content an empty list for a null or absent
    // content, and one empty text part for "": the tokenizers need to know which it was
    List<ChatMessage> m = parse("/v1/chat/completions", """
        {"model":"m","messages":[
          {"role":"assistant","content":null,"tool_calls":[{"id":"1"}]},
          {"role":"assistant","tool_calls":[{"id":"2"}]},
          {"role":"assistant","content":""},
          {"role":"user","content":null,"content":"q"}]}
        """).value().messages();
    assertThat(m).extracting(ChatMessage::contentAbsent).containsExactly(true, true, false,
        false);
    assertThat(m).extracting(ChatMessage::content).containsExactly("", "", "", "q");
    assertThat(m.get(0).fields()).isEqualTo("{\"tool_calls\":[{\"id\":\"1\"}]}");
  }

  @Test
  void aMessageFieldGivenTwiceCountsWithItsLastValueAsTheEngineReadsIt() {
    // the engine's JSON reader keeps a repeated key's last value, as the parser does for the
    // top-level fields; a message's content given twice was joined ("c" + "d") and its tool
    // fields appended once per occurrence, so the prefix scorers hashed, and precise mode
    // tokenized, a message the engine never renders
    List<ChatMessage> m = parse("/v1/chat/completions", """
        {"model":"m","messages":[
          {"role":"user","content":"c","content":"d"},
          {"role":"user","content":"c","content":[{"type":"text","text":"p"},{"type":"text","text":"q"}]},
          {"role":"user","content":[{"type":"text","text":"p"}],"content":"d"},
          {"role":"user","content":"c","content":null},
          {"role":"assistant","name":"a","content":"x","name":"b","tool_call_id":"t","name":null},
          {"role":"assistant","content":"x","tool_calls":[{"id":"1"}],"tool_calls":[{"id":"2"}]}]}
        """).value().messages();
    assertThat(m).extracting(ChatMessage::content).containsExactly("d", "p\nq", "d", "",
        "x", "x");
    assertThat(m).extracting(ChatMessage::fields).containsExactly("", "", "", "",
        "{\"tool_call_id\":\"t\"}", "{\"tool_calls\":[{\"id\":\"2\"}]}");
  }

  @Test
  void treesReadFromTheStreamEqualJacksonReadTree() throws Exception {
    Random rnd = new Random(6);
    var plain = new com.fasterxml.jackson.databind.ObjectMapper();
    var factory = new com.fasterxml.jackson.core.JsonFactory();
    for (int i = 0; i < 2000; i++) {
      String text = plain.writeValueAsString(randomNode(rnd, 0));
      if (i % 3 == 0) {
        text = text.replace(",", " , ").replace("1", "12345678901234567890"); // big ints, spaces
      }
      var expected = JACKSON_SORTED.readTree(text);
      try (var p = factory.createParser(text)) {
        p.nextToken();
        var actual = CanonicalJson.readTree(p);
        assertThat(actual).isEqualTo(expected);
        assertThat(CanonicalJson.canonical(actual))
            .isEqualTo(JACKSON_SORTED.writeValueAsString(expected));
      }
    }
    for (String text : new String[] {"{\"a\":1,\"a\":2}", "[1e400,-0,0.1,1E2]", "{\"b\":{},\"a\":[]}"}) {
      try (var p = factory.createParser(text)) {
        p.nextToken();
        assertThat(CanonicalJson.canonical(CanonicalJson.readTree(p)))
            .isEqualTo(JACKSON_SORTED.writeValueAsString(JACKSON_SORTED.readTree(text)));
      }
    }
  }

  @Test
  void repeatedAndSameLengthToolsAreReadEachByItsOwnBytesInTheOrderGiven() {
    String a = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"b\":1,\"a\":2}}}]";
    String b = a.replace("\"f\"", "\"g\"");
    for (int i = 0; i < 3; i++) {
      for (String tools : new String[] {a, b, " " + a.replace(",", " ,\n")}) {
        InferenceRequest r = parse("/v1/chat/completions",
            "{\"model\":\"m\",\"tools\": " + tools + " ,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}")
            .value();
        String name = tools == b ? "g" : "f";
        assertThat(r.toolsJson()).isEqualTo(
            "[{\"type\":\"function\",\"function\":{\"name\":\"" + name + "\",\"parameters\":{\"b\":1,\"a\":2}}}]");
      }
    }
    assertThat(parse("/v1/chat/completions", "{\"model\":\"m\",\"tools\":[{\"a\":1,]}").isOk()).isFalse();
  }

  @Test
  void codingAgentsSessionHeadersKeyTheSessionBeforeTheEndpointToken() {
    byte[] body = "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8);
    for (String header : List.of("X-Claude-Code-Session-Id", "x-session-affinity", "session-id",
        "session_id")) {
      InferenceRequest r = OpenAiRequestParser.defaults().parse("/v1/completions",
          Map.of(header, "conv-1", "x-session-token", "MTAuMC4wLjE6ODAwMA=="), body).value();
      assertThat(r.sessionKey()).as(header).isEqualTo("conv-1");
    }
    // x-session-id still comes first
    assertThat(OpenAiRequestParser.defaults().parse("/v1/completions",
        Map.of("x-session-id", "u-1", "session-id", "conv-1"), body).value().sessionKey())
        .isEqualTo("u-1");
  }

  /**
   * An agent's assistant turns are often tool calls alone, their arguments (a file to write, a
   * patch) rendered into the prompt by the chat template. Left out of the estimate, such a chat
   * counted as a few tokens in flight on its endpoint, and a context-length filter took it for a
   * short prompt.
   */
  @Test
  void aChatsToolCallsCountInItsPromptEstimate() {
    String args = "x".repeat(8000);
    String body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"write it\"},"
        + "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
        + "\"type\":\"function\",\"function\":{\"name\":\"write\",\"arguments\":\"" + args
        + "\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}],"
        + "\"max_tokens\":10}";
    InferenceRequest r = parse("/v1/chat/completions", body).value();
    assertThat(r.estimatedPromptTokens()).isGreaterThanOrEqualTo(args.length() / 4);
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(io.epp4j.api.Endpoint.parse("10.0.0.1:80"))).build()) {
      RoutingDecision d = router.route("/v1/chat/completions", Map.of(),
          body.getBytes(StandardCharsets.UTF_8));
      assertThat(d.isRouted()).isTrue();
      assertThat(router.endpoints().get(0).inFlightTokens())
          .isGreaterThanOrEqualTo(args.length() / 4 + 10);
      d.onComplete(io.epp4j.api.Usage.NONE);
    }
  }

  /**
   * A text part without its text, or with a null one, is refused by vLLM too: its request model
   * keeps such a part only as a media part of no known field (which drops {@code type}), and its
   * part parser then refuses a part without a type. The router refuses it, naming the field.
   */
  @Test
  void aTextPartWithoutItsTextIsRefusedAsVllmRefusesIt() {
    for (String part : new String[] {"{\"type\":\"text\"}", "{\"type\":\"text\",\"text\":null}",
        "{\"text\":null,\"type\":\"text\"}"}) {
      assertThat(parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":[{\"role\":"
          + "\"user\",\"content\":[" + part + "]}]}").errors()).as(part)
          .containsExactly("field 'messages[0].content[0].text' must be a string");
    }
  }

  /**
   * With {@code n} the engine generates n sequences, each up to {@code max_tokens}: the router
   * counted {@code max_tokens} once in flight, a fraction of the decode work it sent. A value
   * the engine refuses ({@code 0}, not an integer) counts as one sequence, left for the engine
   * to refuse.
   */
  @Test
  void nSequencesCountTheirMaxTokensEachInFlight() {
    String chat = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        + "\"max_tokens\":100,\"n\":";
    InferenceRequest r = parse("/v1/chat/completions", chat + "4}").value();
    assertThat(r.sequences()).isEqualTo(4);
    assertThat(r.maxOutputTokens()).isEqualTo(400);
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"hi\",\"max_tokens\":7,"
        + "\"n\":\"3\"}").value().maxOutputTokens()).isEqualTo(21);
    for (String bad : new String[] {"0", "null", "\"x\"", "1.5", "[2]"}) {
      assertThat(parse("/v1/chat/completions", chat + bad + "}").value().maxOutputTokens())
          .as(bad).isEqualTo(100);
    }
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(io.epp4j.api.Endpoint.parse("10.0.0.1:80"))).build()) {
      RoutingDecision d = router.route("/v1/chat/completions", Map.of(),
          (chat + "4}").getBytes(StandardCharsets.UTF_8));
      assertThat(d.isRouted()).isTrue();
      assertThat(router.endpoints().get(0).inFlightTokens())
          .isEqualTo(r.estimatedPromptTokens() + 400L);
      d.onComplete(io.epp4j.api.Usage.NONE);
    }
  }

  /**
   * vLLM's request model takes a plain string among a message's content parts (its content part
   * type includes {@code str}) and reads it as a text part, so a client that writes
   * {@code "content": ["first", "second"]} is served by the engine; the router refused it with a
   * 400.
   */
  @Test
  void aPlainStringContentPartIsATextPart() {
    InferenceRequest strings = parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":["
        + "{\"role\":\"user\",\"content\":[\"first\",{\"type\":\"text\",\"text\":\"second\"},"
        + "\"third\"]}]}").value();
    InferenceRequest parts = parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":["
        + "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"first\"},"
        + "{\"type\":\"text\",\"text\":\"second\"},{\"type\":\"text\",\"text\":\"third\"}]}]}")
        .value();
    assertThat(strings.messages()).isEqualTo(parts.messages());
    ChatMessage m = strings.messages().get(0);
    assertThat(m.content()).isEqualTo("first\nsecond\nthird");
    assertThat(m.parts()).extracting(ChatMessage.Part::text)
        .containsExactly("first", "second", "third");
    assertThat(m.parts()).allMatch(ChatMessage.Part::isText);
  }

  /**
   * vLLM reads the Responses API's {@code input_text} and {@code output_text} parts, a
   * {@code refusal} and a {@code thinking} part as text: the template gets their text. They were
   * kept as JSON, like an image, so the prompt the router hashed and handed a tokenizer was not
   * the one the engine renders, and a conversation written with them never matched the same one
   * written with text parts.
   */
  @Test
  void partsTheEngineReadsAsTextGiveTheirText() {
    InferenceRequest typed = parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":["
        + "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"ask\"}]},"
        + "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\"},"
        + "{\"type\":\"output_text\",\"text\":\"answer\",\"annotations\":[]},"
        + "{\"type\":\"refusal\",\"refusal\":\"no\"}]}]}").value();
    InferenceRequest text = parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":["
        + "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"ask\"}]},"
        + "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"hm\"},"
        + "{\"type\":\"text\",\"text\":\"answer\"},{\"type\":\"text\",\"text\":\"no\"}]}]}")
        .value();
    assertThat(typed.messages()).isEqualTo(text.messages());
    assertThat(typed.messages().get(1).content()).isEqualTo("hm\nanswer\nno");
    // media stay JSON, so two images never look alike
    assertThat(parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
        + "\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"u\"}}]}]}").value()
        .messages().get(0).parts()).singleElement().extracting(ChatMessage.Part::type)
        .isEqualTo("image");
  }
}
