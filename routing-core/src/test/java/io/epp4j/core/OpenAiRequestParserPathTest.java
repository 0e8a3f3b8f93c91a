package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The path a request came in on, as a gateway hands it over: with its query string (Azure-style
 * clients send {@code ?api-version=...}) it selects the same shape as without.
 */
class OpenAiRequestParserPathTest {
  final OpenAiRequestParser parser = OpenAiRequestParser.defaults();

  Result<InferenceRequest> parse(String path, String body) {
    return parser.parse(path, Map.of(), body.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void aChatPathWithAQueryStillNeedsMessages() {
    for (String path : new String[] {"/v1/chat/completions", "/v1/chat/completions?api-version=1",
        "/v1/chat/completions#x"}) {
      assertThat(parse(path, "{\"model\":\"m\",\"input\":\"hi\"}").errors()).as(path)
          .containsExactly("field 'messages' is required");
    }
  }

  @Test
  void aResponsesPathWithAQueryNamesInputWhenItIsMissing() {
    for (String path : new String[] {"/v1/responses", "/v1/responses?api-version=1"}) {
      assertThat(parse(path, "{\"model\":\"m\"}").errors()).as(path)
          .containsExactly("field 'input' is required");
    }
  }

  @Test
  void aCompletionsPathWithAQueryReadsItsPromptAndSkipsInput() {
    InferenceRequest r = parse("/v1/completions?api-version=1",
        "{\"model\":\"m\",\"prompt\":\"p\",\"input\":5,\"max_tokens\":3}").value();
    assertThat(r.prompt()).isEqualTo("p");
    assertThat(r.maxTokens()).isEqualTo(3);
  }
}
