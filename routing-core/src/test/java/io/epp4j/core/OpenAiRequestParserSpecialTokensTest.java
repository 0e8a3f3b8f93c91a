package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * vLLM tokenizes a request's prompt text with the special tokens of the model's tokenizer (the
 * BOS of Llama, Gemma, DeepSeek) as the request's {@code add_special_tokens} says: true by
 * default for {@code /v1/completions}, false for {@code /v1/chat/completions}, whose template
 * writes them itself. The field was skipped, so a request that set it was tokenized for routing
 * as if it had not, and its first block's key was not the engine's.
 */
class OpenAiRequestParserSpecialTokensTest {
  private final OpenAiRequestParser parser = OpenAiRequestParser.defaults();

  private Result<InferenceRequest> chat(String fields) {
    return parser.parse("/v1/chat/completions", Map.of(), ("{\"model\":\"m\",\"messages\":["
        + "{\"role\":\"user\",\"content\":\"hi\"}]" + fields + "}")
        .getBytes(StandardCharsets.UTF_8));
  }

  private Result<InferenceRequest> completion(String fields) {
    return parser.parse("/v1/completions", Map.of(),
        ("{\"model\":\"m\",\"prompt\":\"hi\"" + fields + "}").getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void theFieldReachesTheRequestWithTheEnginesDefaults() {
    assertThat(chat("").value().addSpecialTokens()).isFalse();
    assertThat(chat(",\"add_special_tokens\":null").value().addSpecialTokens()).isFalse();
    assertThat(chat(",\"add_special_tokens\":true").value().addSpecialTokens()).isTrue();
    assertThat(completion("").value().addSpecialTokens()).isTrue();
    assertThat(completion(",\"add_special_tokens\":false").value().addSpecialTokens()).isFalse();
    assertThat(completion(",\"add_special_tokens\":true").value().addSpecialTokens()).isTrue();
    // kept by a copy of the request
    assertThat(completion(",\"add_special_tokens\":false").value().toBuilder().build()
        .addSpecialTokens()).isFalse();
  }

  @Test
  void aBadValueIsRefusedByName() {
    assertThat(chat(",\"add_special_tokens\":\"maybe\"").errors()).singleElement().asString()
        .startsWith("field 'add_special_tokens' must be true or false");
    assertThat(completion(",\"add_special_tokens\":[1]").errors()).singleElement().asString()
        .startsWith("field 'add_special_tokens' must be true or false");
  }
}
