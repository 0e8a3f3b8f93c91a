package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;

class OpenAiRequestParserTest {
  final OpenAiRequestParser parser = OpenAiRequestParser.defaults();

  Result<InferenceRequest> parse(String path, String body) {
    return parser.parse(path, Map.of(), body.getBytes(StandardCharsets.UTF_8));
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
    assertThat(r.toolsJson()).isEqualTo(
        "[{\"function\":{\"name\":\"f\",\"parameters\":{\"a\":2,\"b\":1}},\"type\":\"function\"}]");
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
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"x\"} trailing").errors().get(0)).isNotEmpty();
    assertThat(parse("/v1/completions", "").errors().get(0)).contains("empty");
  }

  @Test
  void errorMessagesNeverContainPromptText() {
    String secret = "SECRET-PROMPT-TEXT";
    Result<InferenceRequest> r = parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"" + secret + "\",\"max_tokens\":\"x\"}");
    assertThat(r.isOk()).isFalse();
    assertThat(String.join(" ", r.errors())).doesNotContain(secret);
  }

  @Test
  void oversizedBodyIsRejected() {
    OpenAiRequestParser small = OpenAiRequestParser.of(100, OpenAiRequestParser.DEFAULT_SESSION_HEADERS);
    String body = "{\"model\":\"m\",\"prompt\":\"" + "x".repeat(200) + "\"}";
    Result<InferenceRequest> r = small.parse("/v1/completions", Map.of(), body.getBytes(StandardCharsets.UTF_8));
    assertThat(r.errors().get(0)).contains("above the limit of 100");
  }

  @Test
  void randomGarbageNeverThrows() {
    Random rnd = new Random(42);
    String valid = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],\"tools\":[{\"a\":1}],\"prompt\":[1,2]}";
    for (int i = 0; i < 5000; i++) {
      byte[] b = valid.getBytes(StandardCharsets.UTF_8);
      int edits = 1 + rnd.nextInt(4);
      for (int e = 0; e < edits; e++) {
        b[rnd.nextInt(b.length)] = (byte) rnd.nextInt(128);
      }
      int cut = rnd.nextInt(b.length + 1);
      Result<InferenceRequest> r = parser.parse("/v1/chat/completions", Map.of(), java.util.Arrays.copyOf(b, cut));
      assertThat(r.isOk() || !r.errors().isEmpty()).isTrue();
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
      assertThat(OpenAiRequestParser.canonical(node)).isEqualTo(JACKSON_SORTED.writeValueAsString(node));
    }
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
        .isEqualTo("a{\"image_url\":{\"url\":\"u\"},\"type\":\"image_url\"}b");
    assertThat(r.messages().get(1).content()).isEqualTo("cd");
    assertThat(parse("/v1/chat/completions",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}")
        .errors()).containsExactly("field 'messages[0].content[0].type' is required");
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
        var actual = OpenAiRequestParser.readTree(p);
        assertThat(actual).isEqualTo(expected);
        assertThat(OpenAiRequestParser.canonical(actual))
            .isEqualTo(JACKSON_SORTED.writeValueAsString(expected));
      }
    }
    for (String text : new String[] {"{\"a\":1,\"a\":2}", "[1e400,-0,0.1,1E2]", "{\"b\":{},\"a\":[]}"}) {
      try (var p = factory.createParser(text)) {
        p.nextToken();
        assertThat(OpenAiRequestParser.canonical(OpenAiRequestParser.readTree(p)))
            .isEqualTo(JACKSON_SORTED.writeValueAsString(JACKSON_SORTED.readTree(text)));
      }
    }
  }

  @Test
  void repeatedAndSameLengthToolsAreCanonicalisedEachByItsOwnBytes() {
    String a = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"b\":1,\"a\":2}}}]";
    String b = a.replace("\"f\"", "\"g\"");
    for (int i = 0; i < 3; i++) {
      for (String tools : new String[] {a, b, " " + a.replace(",", " ,\n")}) {
        InferenceRequest r = parse("/v1/chat/completions",
            "{\"model\":\"m\",\"tools\": " + tools + " ,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}")
            .value();
        String name = tools == b ? "g" : "f";
        assertThat(r.toolsJson()).isEqualTo(
            "[{\"function\":{\"name\":\"" + name + "\",\"parameters\":{\"a\":2,\"b\":1}},\"type\":\"function\"}]");
      }
    }
    assertThat(parse("/v1/chat/completions", "{\"model\":\"m\",\"tools\":[{\"a\":1,]}").isOk()).isFalse();
  }
}
