package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A request longer than the context is refused in vLLM's words, which clients parse to find the
 * room left ({@code max_model_len - input tokens}): first a prompt that fills the context on its
 * own, whatever {@code max_tokens} says, then a {@code max_tokens} the prompt leaves no room for,
 * naming the field's value, the context, the prompt's tokens and the subtraction.
 */
@Timeout(60)
class ServeContextLengthMessageTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private static String ids(int n) {
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < n; i++) {
      b.append(i == 0 ? "" : ",").append(i % 1000);
    }
    return b.append(']').toString();
  }

  private JsonNode refusal(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    JsonNode error = JSON.readTree(res.body()).get("error");
    assertThat(error.get("type").asText()).isEqualTo("BadRequestError");
    assertThat(error.get("code").asInt()).isEqualTo(400);
    return error;
  }

  @Test
  void maxTokensBeyondTheRoomLeftIsRefusedInVllmsWords() throws Exception {
    int port = replica.start();
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    int prompt = maxLen - 10;
    JsonNode error = refusal(port, "/v1/completions",
        "{\"prompt\":" + ids(prompt) + ",\"max_tokens\":20}");
    assertThat(error.get("message").asText()).isEqualTo("'max_tokens' or 'max_completion_tokens'"
        + " is too large: 20. This model's maximum context length is " + maxLen + " tokens and"
        + " your request has " + prompt + " input tokens (20 > " + maxLen + " - " + prompt + ").");

    // a chat's max_completion_tokens is told the same way
    StringBuilder words = new StringBuilder();
    for (int i = 0; i < 99; i++) {
      words.append(i == 0 ? "" : " ").append('w').append(i);
    }
    JsonNode chat = refusal(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"" + words + "\"}],\"max_completion_tokens\":" + maxLen + "}");
    assertThat(chat.get("message").asText()).startsWith("'max_tokens' or"
        + " 'max_completion_tokens' is too large: " + maxLen + ". This model's maximum context"
        + " length is " + maxLen + " tokens and your request has 100 input tokens");
  }

  @Test
  void aPromptThatFillsTheContextIsRefusedForItsLengthWhateverMaxTokensSays() throws Exception {
    int port = replica.start();
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    String expected = "This model's maximum context length is " + maxLen + " tokens. However,"
        + " your request has " + (maxLen + 5) + " input tokens. Please reduce the length of the"
        + " input messages.";
    assertThat(refusal(port, "/v1/completions",
        "{\"prompt\":" + ids(maxLen + 5) + ",\"max_tokens\":1}").get("message").asText())
        .isEqualTo(expected);
    assertThat(refusal(port, "/v1/completions",
        "{\"prompt\":" + ids(maxLen + 5) + ",\"max_tokens\":null}").get("message").asText())
        .isEqualTo(expected);
  }
}
