package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A chat request without {@code max_tokens}/{@code max_completion_tokens}: vLLM only refuses it
 * when the prompt alone fills the context ({@code token_num >= max_model_len} in
 * {@code _validate_input}) and otherwise generates at most what the context has left.
 */
@Timeout(60)
class ServeChatContextTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  /**
   * A chat whose prompt is {@code tokens} stand-in tokens ("user:", one per word, then the
   * generation prompt "assistant:").
   */
  private static String chat(int tokens) {
    StringBuilder words = new StringBuilder();
    for (int i = 0; i < tokens - 2; i++) {
      words.append(i == 0 ? "" : " ").append('w').append(i % 97);
    }
    return "{\"messages\":[{\"role\":\"user\",\"content\":\"" + words + "\"}]";
  }

  @Test
  void aChatWithoutMaxTokensNearTheContextEndIsAnsweredWithWhatTheContextLeaves()
      throws Exception {
    int port = replica.start();
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    String nearEnd = chat(maxLen - 4);
    JsonNode counted = JSON.readTree(replica.post(port, "/tokenize", nearEnd + "}").body());
    assertThat(counted.get("count").asInt()).isEqualTo(maxLen - 4);

    HttpResponse<String> res = replica.post(port, "/v1/chat/completions", nearEnd + "}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    JsonNode usage = JSON.readTree(res.body()).get("usage");
    assertThat(usage.get("prompt_tokens").asInt()).isEqualTo(maxLen - 4);
    assertThat(usage.get("completion_tokens").asInt()).isEqualTo(4);

    // a prompt that fills the context leaves no token to generate, refused as vLLM refuses it
    HttpResponse<String> full = replica.post(port, "/v1/chat/completions", chat(maxLen) + "}");
    assertThat(full.statusCode()).isEqualTo(400);
    assertThat(JSON.readTree(full.body()).at("/error/message").asText())
        .startsWith("max_tokens must be at least 1, got 0.");
    // and one past it is longer than the context
    HttpResponse<String> over = replica.post(port, "/v1/chat/completions", chat(maxLen + 1) + "}");
    assertThat(over.statusCode()).isEqualTo(400);
    assertThat(JSON.readTree(over.body()).at("/error/message").asText())
        .contains("maximum context length is " + maxLen);
  }

  /**
   * A completion whose {@code max_tokens} is an explicit {@code null} gets the field's default of
   * 16, as current vLLM's request model reads it (it turns the null into the default), not the
   * rest of the context: a prompt that leaves room for fewer than 16 tokens is refused as it is
   * with the field left out, and a short one is answered with 16 tokens ending on "length".
   */
  @Test
  void aCompletionWithMaxTokensNullGetsTheDefaultOf16() throws Exception {
    int port = replica.start();
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    StringBuilder ids = new StringBuilder("[");
    for (int i = 0; i < maxLen - 3; i++) {
      ids.append(i == 0 ? "" : ",").append(i % 1000);
    }
    ids.append(']');
    for (String body : List.of("{\"prompt\":" + ids + ",\"max_tokens\":null}",
        "{\"prompt\":" + ids + "}")) {
      HttpResponse<String> res = replica.post(port, "/v1/completions", body);
      assertThat(res.statusCode()).isEqualTo(400);
      assertThat(JSON.readTree(res.body()).at("/error/message").asText())
          .contains("you requested 16 output tokens");
    }
    HttpResponse<String> shortOne = replica.post(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":null}");
    assertThat(shortOne.statusCode()).as(shortOne.body()).isEqualTo(200);
    JsonNode answer = JSON.readTree(shortOne.body());
    assertThat(answer.at("/usage/completion_tokens").asInt()).isEqualTo(16);
    assertThat(answer.at("/choices/0/finish_reason").asText()).isEqualTo("length");
  }
}
