package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * A {@code null} prompt field counts as absent, as a null {@code tools}, {@code cache_salt},
 * {@code max_tokens} or {@code input} already did and as the engines read it: a client that
 * writes every field of one request type for both APIs sends {@code "prompt": null} with its chat
 * messages (or {@code "messages": null} with its completion prompt), which vLLM serves, and which
 * the parser refused with a 400 saying the field must be a string or an array.
 */
class OpenAiRequestParserNullFieldsTest {
  final OpenAiRequestParser parser = OpenAiRequestParser.defaults();

  Result<InferenceRequest> parse(String path, String body) {
    return parser.parse(path, Map.of(), body.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void aChatRequestWithANullPromptIsReadAsItsMessages() {
    Result<InferenceRequest> r = parse("/v1/chat/completions",
        "{\"model\":\"m\",\"prompt\":null,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");

    assertThat(r.errors()).isEmpty();
    assertThat(r.value().messages()).singleElement()
        .satisfies(m -> assertThat(m.content()).isEqualTo("hi"));
  }

  @Test
  void aCompletionRequestWithNullMessagesIsReadAsItsPrompt() {
    Result<InferenceRequest> r = parse("/v1/completions",
        "{\"model\":\"m\",\"messages\":null,\"prompt\":\"hello\"}");

    assertThat(r.errors()).isEmpty();
    assertThat(r.value().prompt()).isEqualTo("hello");
  }

  @Test
  void aNullPromptOrMessagesAloneIsStillMissing() {
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":null}").errors())
        .containsExactly("field 'prompt' is required");
    assertThat(parse("/v1/chat/completions", "{\"model\":\"m\",\"messages\":null}").errors())
        .containsExactly("field 'messages' is required");
    // given twice, the last one counts: a null after a prompt leaves none
    assertThat(parse("/v1/completions", "{\"model\":\"m\",\"prompt\":\"x\",\"prompt\":null}")
        .errors()).containsExactly("field 'prompt' is required");
  }
}
