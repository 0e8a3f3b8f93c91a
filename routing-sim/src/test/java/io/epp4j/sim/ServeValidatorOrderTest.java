package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * vLLM's request models run their validators on the raw body the one defined last first: a
 * chat's {@code check_tool_usage}, then {@code check_logprobs}, then
 * {@code validate_stream_options}; a completion's {@code validate_stream_options}, then
 * {@code check_logprobs}. A request wrong in several of these ways gets the first one's error.
 */
@Timeout(60)
class ServeValidatorOrderTest {
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
  // each wrong in one way
  private static final String TOOLS = "\"tools\":[]";
  private static final String LOGPROBS = "\"top_logprobs\":3";
  private static final String COUNT = "\"logprobs\":-2";
  private static final String OPTIONS = "\"stream_options\":{\"include_usage\":true}";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private String param(int port, String path, String body) throws Exception {
    JsonNode error = replica.refusal(port, path, body);
    return error.get("param").asText();
  }

  @Test
  void aChatsToolsComeFirstThenItsLogprobsThenItsStreamOptions() throws Exception {
    int port = replica.start();
    String chats = "/v1/chat/completions";
    assertThat(param(port, chats, "{" + CHAT + "," + OPTIONS + "," + LOGPROBS + "," + TOOLS
        + "}")).isEqualTo("tools");
    assertThat(param(port, chats, "{" + CHAT + "," + LOGPROBS + "," + TOOLS + "}"))
        .isEqualTo("tools");
    assertThat(param(port, chats, "{" + CHAT + ",\"tool_choice\":\"auto\"," + LOGPROBS + "}"))
        .isEqualTo("tool_choice");
    assertThat(param(port, chats, "{" + CHAT + "," + OPTIONS + "," + LOGPROBS + "}"))
        .isEqualTo("top_logprobs");
    assertThat(param(port, chats, "{" + CHAT + "," + OPTIONS + ",\"prompt_logprobs\":-3}"))
        .isEqualTo("prompt_logprobs");
    assertThat(param(port, chats, "{" + CHAT + "," + OPTIONS + "," + TOOLS + "}"))
        .isEqualTo("tools");
  }

  @Test
  void aCompletionsStreamOptionsComeBeforeItsLogprobs() throws Exception {
    int port = replica.start();
    String completions = "/v1/completions";
    assertThat(param(port, completions, "{\"prompt\":[5,6,7]," + OPTIONS + "," + COUNT + "}"))
        .isEqualTo("stream_options");
    assertThat(param(port, completions, "{\"prompt\":[5,6,7]," + COUNT + "}"))
        .isEqualTo("logprobs");
  }
}
