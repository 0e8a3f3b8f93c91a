package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The prompt of {@code /tokenize} as vLLM's request model for it takes one: a text only
 * ({@code prompt: str}), so token IDs, a batch, anything else or none at all is a 400 naming the
 * field, before the model is checked; and an empty text is counted (no tokens with the stand-in
 * tokenizer), as vLLM tokenizes it without handing anything to the engine that refuses an empty
 * prompt.
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
  void aPromptThatIsNoTextIsRefusedBeforeTheModel() throws Exception {
    int port = replica.start();
    for (String prompt : new String[] {"[1,2,3]", "[[1,2,3]]", "[\"a b\"]", "[]", "5", "null",
        "{\"prompt\":\"a\"}"}) {
      for (String model : new String[] {"", "\"model\":\"nope\","}) {
        JsonNode e = replica.refusal(port, "/tokenize", "{" + model + "\"prompt\":" + prompt + "}");
        assertThat(e.get("message").asText()).as(model + prompt)
            .isEqualTo("field 'prompt' must be a string");
        assertThat(e.get("type").asText()).isEqualTo("BadRequestError");
      }
    }
    // no prompt at all is the request model's refusal too
    assertThat(replica.refusal(port, "/tokenize", "{\"model\":\"nope\"}").get("message").asText())
        .isEqualTo("field 'prompt' is required");
    // the completions endpoint still takes token IDs
    assertThat(replica.post(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":1}")
        .statusCode()).isEqualTo(200);
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
