package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@code min_tokens}, as vLLM reads it: the model generates at least that many tokens before it
 * may end its answer, so an answer without a limit from the client is that long at least; and
 * vLLM's sampling parameters refuse a negative one, or one above {@code max_tokens}, in its words.
 */
@Timeout(60)
class ServeMinTokensTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}]";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private String refusal(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    return JSON.readTree(res.body()).at("/error/message").asText();
  }

  @Test
  void anAnswerWithoutALimitIsAtLeastMinTokensLong() throws Exception {
    int port = replica.start();
    HttpResponse<String> res = replica.post(port, "/v1/chat/completions",
        "{" + CHAT + ",\"min_tokens\":40}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    JsonNode answer = JSON.readTree(res.body());
    assertThat(answer.at("/usage/completion_tokens").asInt()).isEqualTo(40);
    assertThat(answer.at("/choices/0/finish_reason").asText()).isEqualTo("stop");

    // below the 16 the emulated model generates anyway, and within a limit: no change
    HttpResponse<String> within = replica.post(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":5,\"min_tokens\":3}");
    assertThat(within.statusCode()).isEqualTo(200);
    assertThat(JSON.readTree(within.body()).at("/usage/completion_tokens").asInt()).isEqualTo(5);
  }

  @Test
  void minTokensAboveMaxTokensOrNegativeIsRefusedInVllmsWords() throws Exception {
    int port = replica.start();
    assertThat(refusal(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":5,\"min_tokens\":6}"))
        .isEqualTo("min_tokens must be less than or equal to max_tokens=5, got 6.");
    assertThat(refusal(port, "/v1/chat/completions",
        "{" + CHAT + ",\"max_completion_tokens\":2,\"min_tokens\":3}"))
        .isEqualTo("min_tokens must be less than or equal to max_tokens=2, got 3.");
    assertThat(refusal(port, "/v1/completions", "{\"prompt\":[1,2,3],\"min_tokens\":-1}"))
        .isEqualTo("min_tokens must be greater than or equal to 0, got -1.");
    assertThat(refusal(port, "/v1/completions", "{\"prompt\":[1,2,3],\"min_tokens\":\"some\"}"))
        .contains("'min_tokens'");
  }
}
