package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A request longer than the context is refused in current vLLM's words, which clients parse to
 * find the room left: the context, the output tokens asked for, the prompt's tokens (a text
 * prompt's counted to one past the room left, "at least", as vLLM tokenizes it no further) and
 * the total, with {@code "param": "input_tokens"}.
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
  void aPromptOfTokenIdsAndMaxTokensOverTheContextAreCountedWhole() throws Exception {
    int port = replica.start();
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    int prompt = maxLen - 10;
    JsonNode error = refusal(port, "/v1/completions",
        "{\"prompt\":" + ids(prompt) + ",\"max_tokens\":20}");
    assertThat(error.get("message").asText()).isEqualTo("This model's maximum context length is "
        + maxLen + " tokens. However, you requested 20 output tokens and your prompt contains "
        + prompt + " input tokens, for a total of " + (prompt + 20) + " tokens. Please reduce the"
        + " length of the input prompt or the number of requested output tokens."
        + " (parameter=input_tokens, value=" + prompt + ")");
    assertThat(error.get("param").asText()).isEqualTo("input_tokens");

    // a prompt over the context alone is told the same way, whatever max_tokens says; a null
    // asks for the field's default of 16, as current vLLM reads it
    assertThat(refusal(port, "/v1/completions", "{\"prompt\":" + ids(maxLen + 5)
        + ",\"max_tokens\":null}").get("message").asText()).startsWith("This model's maximum"
        + " context length is " + maxLen + " tokens. However, you requested 16 output tokens and"
        + " your prompt contains " + (maxLen + 5) + " input tokens, for a total of "
        + (maxLen + 21) + " tokens.");
  }

  @Test
  void aTextPromptIsCountedToOnePastTheRoomLeftAsVllmTokenizesIt() throws Exception {
    int port = replica.start();
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    StringBuilder words = new StringBuilder();
    for (int i = 0; i < 99; i++) {
      words.append(i == 0 ? "" : " ").append('w').append(i);
    }
    // a chat's max_completion_tokens is the output asked for; the prompt is 100 tokens
    int asked = maxLen - 60;
    JsonNode chat = refusal(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"" + words + "\"}],\"max_completion_tokens\":" + asked + "}");
    assertThat(chat.get("message").asText()).isEqualTo("This model's maximum context length is "
        + maxLen + " tokens. However, you requested " + asked + " output tokens and your prompt"
        + " contains at least 61 input tokens, for a total of at least " + (maxLen + 1)
        + " tokens. Please reduce the length of the input prompt or the number of requested"
        + " output tokens. (parameter=input_tokens, value=61)");

    // a completion's text prompt the same way; left out, max_tokens is 16
    String text = "x ".repeat(maxLen - 10);
    assertThat(refusal(port, "/v1/completions", "{\"prompt\":\"" + text + "\"}")
        .get("message").asText()).contains("you requested 16 output tokens and your prompt"
        + " contains at least " + (maxLen - 15) + " input tokens, for a total of at least "
        + (maxLen + 1) + " tokens.");
  }

  @Test
  void aRequestThatFitsTheContextExactlyIsServed() throws Exception {
    int port = replica.start();
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":" + ids(maxLen - 4) + ",\"max_tokens\":4}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
  }
}
