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
 * {@code POST /detokenize}, vLLM's companion of {@code /tokenize}: served on the same terms (its
 * {@code model} checked, its {@code tokens} read as token IDs), and with the stand-in tokenizer,
 * whose IDs cannot be turned back into words, refused saying so instead of answering 404 as a
 * path without a route. (Decoding through {@code --tokenizer} is in {@code ServeTokenizerTest}.)
 */
@Timeout(60)
class ServeDetokenizeTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private JsonNode error(HttpResponse<String> res, int status) throws Exception {
    assertThat(res.statusCode()).as(res.body()).isEqualTo(status);
    return JSON.readTree(res.body()).get("error");
  }

  @Test
  void theRouteIsServedAndChecksItsFieldsAsTokenizeDoes() throws Exception {
    int port = replica.start(List.of("sql"));
    JsonNode unknown = error(replica.post(port, "/detokenize",
        "{\"model\":\"gpt-4o\",\"tokens\":[1,2]}"), 404);
    assertThat(unknown.get("message").asText()).isEqualTo("The model `gpt-4o` does not exist.");
    assertThat(unknown.get("param").asText()).isEqualTo("model");
    assertThat(error(replica.post(port, "/detokenize", "{\"model\":7,\"tokens\":[1]}"), 400)
        .get("message").asText()).contains("'model'");
    assertThat(error(replica.post(port, "/detokenize", "{}"), 400).get("param").asText())
        .isEqualTo("tokens");
    assertThat(error(replica.post(port, "/detokenize", "{\"tokens\":\"1 2\"}"), 400)
        .get("message").asText()).contains("'tokens'");
    assertThat(error(replica.post(port, "/detokenize", "{\"tokens\":[1,-2]}"), 400)
        .get("message").asText()).contains("'tokens'");
    assertThat(error(replica.post(port, "/detokenize", "{\"tokens\":[1,999999999]}"), 400)
        .get("message").asText()).contains("'tokens'").contains("out of vocabulary");
  }

  @Test
  void theStandInTokenizerCannotDecodeAndSaysWhatWould() throws Exception {
    int port = replica.start(List.of("sql"));
    for (String model : List.of("", "\"model\":\"sql\",")) {
      JsonNode refused = error(replica.post(port, "/detokenize",
          "{" + model + "\"tokens\":[1,2,3]}"), 400);
      assertThat(refused.get("message").asText()).contains("--tokenizer");
      assertThat(refused.get("type").asText()).isEqualTo("BadRequestError");
    }
  }
}
