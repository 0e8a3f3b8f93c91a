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
}
