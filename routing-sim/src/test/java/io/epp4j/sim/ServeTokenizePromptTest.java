package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The prompt of {@code /tokenize} as vLLM takes one: an empty text is counted (no tokens with the
 * stand-in tokenizer), as vLLM tokenizes it without handing anything to the engine that refuses
 * an empty prompt.
 */
@Timeout(60)
class ServeTokenizePromptTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void anEmptyTextIsCountedAsNoTokens() throws Exception {
    int port = replica.start();
    HttpResponse<String> res = replica.post(port, "/tokenize", "{\"prompt\":\"\"}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    JsonNode body = JSON.readTree(res.body());
    assertThat(body.get("count").asInt()).isZero();
    assertThat(body.get("tokens")).isEmpty();
    assertThat(body.get("max_model_len").asInt())
        .isEqualTo(HardwareProfile.qwen3H100Mps6().maxModelLen());
    // a completion of the same prompt is still refused as vLLM's request model refuses it
    assertThat(replica.post(port, "/v1/completions", "{\"prompt\":\"\",\"max_tokens\":1}")
        .statusCode()).isEqualTo(400);
  }
}
