package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * A chat's {@code tool_choice} reaches the request when it is a string: vLLM started with
 * {@code --exclude-tools-when-tool-choice-none} renders a chat whose {@code tool_choice} is
 * {@code "none"} without its tools, and a tokenizer rendering for routing needs to know.
 */
class OpenAiRequestParserToolChoiceTest {
  private static final String TOOLS =
      ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
  private final OpenAiRequestParser parser = OpenAiRequestParser.defaults();

  private Result<InferenceRequest> chat(String fields) {
    return parser.parse("/v1/chat/completions", Map.of(), ("{\"model\":\"m\",\"messages\":["
        + "{\"role\":\"user\",\"content\":\"hi\"}]" + TOOLS + fields + "}")
        .getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void aStringIsKeptAndANamedToolOrNullIsNot() {
    assertThat(chat("").value().toolChoice()).isNull();
    assertThat(chat(",\"tool_choice\":\"none\"").value().toolChoice()).isEqualTo("none");
    assertThat(chat(",\"tool_choice\":\"auto\"").value().toolChoice()).isEqualTo("auto");
    assertThat(chat(",\"tool_choice\":null").value().toolChoice()).isNull();
    assertThat(chat(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}")
        .value().toolChoice()).isNull();
    // the last one given counts, as the engine's JSON reader takes it
    assertThat(chat(",\"tool_choice\":\"none\",\"tool_choice\":{\"type\":\"function\"}").value()
        .toolChoice()).isNull();
    // the tools stay on the request: whether they are rendered is the engine's setting
    assertThat(chat(",\"tool_choice\":\"none\"").value().toolsJson()).contains("\"f\"");
    // kept by a copy of the request
    assertThat(chat(",\"tool_choice\":\"none\"").value().toBuilder().build().toolChoice())
        .isEqualTo("none");
  }

  @Test
  void aValueOfAnotherTypeIsRefusedByName() {
    assertThat(chat(",\"tool_choice\":1").errors()).singleElement().asString()
        .startsWith("field 'tool_choice' must be a string or an object");
    assertThat(chat(",\"tool_choice\":[\"none\"]").errors()).singleElement().asString()
        .startsWith("field 'tool_choice' must be a string or an object");
  }

  @Test
  void aCompletionRequestDoesNotReadIt() {
    InferenceRequest r = parser.parse("/v1/completions", Map.of(),
        "{\"model\":\"m\",\"prompt\":\"hi\",\"tool_choice\":1}".getBytes(StandardCharsets.UTF_8))
        .value();
    assertThat(r.toolChoice()).isNull();
  }
}
