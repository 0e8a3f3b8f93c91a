package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * vLLM started with {@code --enable-prompt-embeds} serves a completion whose prompt is given as
 * {@code prompt_embeds} (base64 tensors) instead of {@code prompt}. The parser refused such a
 * request ("field 'prompt' is required"), so a gateway answered 400 where the engine would serve
 * it; it is now routed as a prompt of no tokens, which no prefix plugin credits anywhere.
 */
class OpenAiRequestParserPromptEmbedsTest {
  private final OpenAiRequestParser parser = OpenAiRequestParser.defaults();

  private Result<InferenceRequest> parse(String path, String fields) {
    return parser.parse(path, Map.of(),
        ("{\"model\":\"m\"" + fields + "}").getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void aCompletionOfPromptEmbeddingsAloneIsRoutedAsAPromptOfNoTokens() {
    for (String embeds : List.of("\"AAAA\"", "[\"AAAA\",\"BBBB\"]")) {
      InferenceRequest r = parse("/v1/completions",
          ",\"prompt_embeds\":" + embeds + ",\"max_tokens\":7").value();
      assertThat(r.kind()).isEqualTo(InferenceRequest.Kind.TOKENS);
      assertThat(r.tokenIds()).isEmpty();
      assertThat(r.maxTokens()).isEqualTo(7);
    }
    // with a prompt as well, the prompt is what is routed on
    assertThat(parse("/v1/completions", ",\"prompt_embeds\":\"AAAA\",\"prompt\":\"hi\"").value()
        .prompt()).isEqualTo("hi");
  }

  @Test
  void otherwiseTheFieldChangesNothingAndABadValueIsRefusedByName() {
    assertThat(parse("/v1/completions", ",\"prompt_embeds\":null").errors()).singleElement()
        .asString().startsWith("field 'prompt' is required");
    // the chat API takes no prompt embeddings
    assertThat(parse("/v1/chat/completions", ",\"prompt_embeds\":\"AAAA\"").errors())
        .singleElement().asString().startsWith("field 'messages' is required");
    assertThat(parse("/v1/completions", ",\"prompt_embeds\":1").errors()).singleElement()
        .asString().startsWith("field 'prompt_embeds' must be a string or an array of strings");
  }
}
