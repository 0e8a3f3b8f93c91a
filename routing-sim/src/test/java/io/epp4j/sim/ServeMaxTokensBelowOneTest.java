package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.StringJoiner;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A {@code max_tokens} (or a chat's {@code max_completion_tokens}) of 0 or below is refused as
 * vLLM's sampling parameters refuse it: in their words, which clients match, with the parameter
 * named in {@code param}, and only once the prompt is known to fit the context (a prompt that
 * fills it is refused for that first, as in vLLM).
 */
@Timeout(60)
class ServeMaxTokensBelowOneTest {
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"a b c\"}]";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void zeroAndNegativeLimitsGetVllmsMessageAndParam() throws Exception {
    int port = replica.start();
    JsonNode zero = replica.refusal(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":0}");
    assertThat(zero.get("message").asText())
        .isEqualTo("max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)");
    assertThat(zero.get("param").asText()).isEqualTo("max_tokens");
    assertThat(zero.get("type").asText()).isEqualTo("BadRequestError");
    assertThat(replica.refusal(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":-7}")
        .get("message").asText())
        .isEqualTo("max_tokens must be at least 1, got -7. (parameter=max_tokens, value=-7)");
    // a chat's max_completion_tokens becomes vLLM's sampling max_tokens, and is named so
    JsonNode chat = replica.refusal(port, "/v1/chat/completions",
        "{" + CHAT + ",\"max_completion_tokens\":0}");
    assertThat(chat.get("message").asText())
        .isEqualTo("max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)");
    assertThat(chat.get("param").asText()).isEqualTo("max_tokens");
    assertThat(replica.refusal(port, "/v1/chat/completions", "{" + CHAT + ",\"max_tokens\":-1,"
        + "\"stream\":true}").get("message").asText())
        .startsWith("max_tokens must be at least 1, got -1.");
  }

  @Test
  void aPromptOverTheContextIsRefusedForThatFirst() throws Exception {
    int port = replica.start();
    StringJoiner ids = new StringJoiner(",", "[", "]");
    for (int i = 0; i < HardwareProfile.qwen3H100Mps6().maxModelLen(); i++) {
      ids.add("7");
    }
    // a prompt that fills the context exactly, with no output asked for, fits: then the limit
    assertThat(replica.refusal(port, "/v1/completions", "{\"prompt\":" + ids + ",\"max_tokens\":0}")
        .get("message").asText()).startsWith("max_tokens must be at least 1, got 0.");
    ids.add("7");
    assertThat(replica.refusal(port, "/v1/completions", "{\"prompt\":" + ids + ",\"max_tokens\":0}")
        .get("message").asText()).startsWith("This model's maximum context length is");
  }
}
