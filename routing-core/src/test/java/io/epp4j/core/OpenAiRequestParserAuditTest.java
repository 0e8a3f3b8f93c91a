package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import io.epp4j.api.RoutingDecision;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Request shapes vLLM's OpenAI server and the upstream EPP take, read as they do. */
class OpenAiRequestParserAuditTest {
  final OpenAiRequestParser parser = OpenAiRequestParser.defaults();

  Result<InferenceRequest> parse(String path, String body) {
    return parser.parse(path, Map.of(), body.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void anEmbeddingsBodyOnTheDocumentedV1RouteIsRoutedWithItsInputAsThePrompt() {
    // the README's SCG route is Path=/v1/**; vLLM serves /v1/embeddings with "input", and the
    // upstream EPP's openai-parser routes it; here it was a 400 "field 'prompt' is required"
    Result<InferenceRequest> r = parse("/v1/embeddings",
        "{\"model\":\"e5\",\"input\":\"The food was delicious\",\"encoding_format\":\"float\"}");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().prompt()).isEqualTo("The food was delicious");
    assertThat(r.value().model()).isEqualTo("e5");
    InferenceRequest tokens = parse("/v1/embeddings", "{\"model\":\"e5\",\"input\":[1,2,3]}").value();
    assertThat(tokens.tokenIds()).containsExactly(1, 2, 3);
    assertThat(parse("/v1/embeddings", "{\"model\":\"e5\",\"input\":[[1,2],[3]]}").value().tokenIds())
        .containsExactly(1, 2, 3);
    assertThat(parse("/v1/embeddings", "{\"model\":\"e5\",\"input\":[\"a\",\"\",\"b\"]}").value()
        .prompt()).isEqualTo("a\u001E\u001Eb");
    // errors name the field, never quote the input
    String secret = "ZQXSECRETQZX";
    for (String bad : List.of("[\"" + secret + "\",1]", "[1,\"" + secret + "\"]", "7",
        "[[1],[\"" + secret + "\"]]", "[\"" + secret + "\",{\"a\":1}]")) {
      assertThat(parse("/v1/embeddings", "{\"model\":\"e5\",\"input\":" + bad + "}").errors())
          .as(bad).singleElement().asString().startsWith("field 'input").doesNotContain(secret);
    }
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .profile(SchedulingProfile.builder("default").build())
        .endpoints(List.of(Endpoint.parse("10.0.0.1:80"))).build()) {
      RoutingDecision d = router.route("/v1/embeddings", Map.of(),
          "{\"model\":\"e5\",\"input\":[\"a\",\"b\"]}".getBytes(StandardCharsets.UTF_8));
      assertThat(d.rejection()).isNull();
      assertThat(d.isRouted()).isTrue();
    }
  }

  @Test
  void onTheCompletionsPathsTheInputFieldsAreNotTheRequestsAndAreSkipped() {
    // a completions body that also carries fields of the input APIs (a client's extra fields):
    // they were skipped before those APIs were read, and must not fail the request now
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String prompt = path.endsWith("chat/completions")
          ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : "\"prompt\":\"hi\"";
      Result<InferenceRequest> r = parse(path, "{\"model\":\"m\"," + prompt
          + ",\"input\":7,\"instructions\":{\"a\":1},\"max_output_tokens\":\"x\",\"max_tokens\":5}");
      assertThat(r.errors()).as(path).isEmpty();
      assertThat(r.value().maxTokens()).as(path).isEqualTo(5);
    }
  }

  @Test
  void aResponsesBodyIsRoutedWithItsInstructionsAndInputAsThePrompt() {
    Result<InferenceRequest> s = parse("/v1/responses",
        "{\"model\":\"m\",\"instructions\":\"Be terse.\",\"input\":\"Hello\",\"max_output_tokens\":20}");
    assertThat(s.errors()).isEmpty();
    assertThat(s.value().prompt()).startsWith("Be terse.").endsWith("Hello");
    assertThat(s.value().maxTokens()).isEqualTo(20);
    // items: the same conversation in another key order and spacing is the same prompt
    String a = parse("/v1/responses", """
        {"model":"m","input":[{"role":"user","content":"hi","type":"message"}]}
        """).value().prompt();
    String b = parse("/v1/responses", """
        {"input" : [ {"type":"message", "content":"hi", "role":"user"} ], "model":"m"}
        """).value().prompt();
    assertThat(a).isNotNull().isEqualTo(b);
    // a next turn extends the previous turn's prompt, so its full blocks are shared
    String next = parse("/v1/responses", """
        {"model":"m","input":[{"role":"user","content":"hi","type":"message"},
          {"role":"assistant","content":"hello","type":"message"},
          {"role":"user","content":"more","type":"message"}]}
        """).value().prompt();
    assertThat(next).startsWith(a.substring(0, a.length() - 1));
    assertThat(parse("/v1/responses", "{\"model\":\"m\"}").errors()).singleElement().asString()
        .isEqualTo("field 'input' is required");
  }

  @Test
  void aMessagesNameAndToolCallIdCountTheSameWhateverTheirKeyOrder() {
    // a tool result carries both; clients write them in either order, the engine's template
    // reads them by name, so the same conversation must give the same prompt identity
    ChatMessage a = parse("/v1/chat/completions", """
        {"model":"m","messages":[{"role":"tool","tool_call_id":"c1","name":"get_weather","content":"20C"}]}
        """).value().messages().get(0);
    ChatMessage b = parse("/v1/chat/completions", """
        {"model":"m","messages":[{"role":"tool","name":"get_weather","content":"20C","tool_call_id":"c1"}]}
        """).value().messages().get(0);
    assertThat(a).isEqualTo(b);
    assertThat(a.fields()).isEqualTo("{\"name\":\"get_weather\",\"tool_call_id\":\"c1\"}");
  }

  @Test
  void aBatchOfPromptsIsRoutedAsVllmAndTheEppTakeIt() {
    // vLLM's /v1/completions takes a list of prompts (text or token lists) in one request, and the
    // upstream EPP routes a list of strings; here both were a 400
    Result<InferenceRequest> text = parse("/v1/completions",
        "{\"model\":\"m\",\"prompt\":[\"Once upon a time\",\"Long ago\"]}");
    assertThat(text.errors()).isEmpty();
    assertThat(text.value().prompt()).startsWith("Once upon a time").contains("Long ago");
    Result<InferenceRequest> ids = parse("/v1/completions",
        "{\"model\":\"m\",\"prompt\":[[1,2,3],[4,5]]}");
    assertThat(ids.errors()).isEmpty();
    assertThat(ids.value().tokenIds()).startsWith(1, 2, 3).contains(4, 5);
  }
}
