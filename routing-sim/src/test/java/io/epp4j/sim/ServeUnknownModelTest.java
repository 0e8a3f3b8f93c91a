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
 * A model the replica does not serve gets vLLM's 404 error object, word for word: clients and
 * gateways tell a wrong model name from a missing route by its message.
 */
@Timeout(60)
class ServeUnknownModelTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void aModelNotServedIsVllmsNotFoundError() throws Exception {
    int port = replica.start(List.of("sql"));
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String prompt = path.endsWith("chat/completions")
          ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : "\"prompt\":[1,2,3]";
      HttpResponse<String> res = replica.post(port, path,
          "{\"model\":\"gpt-4o\"," + prompt + ",\"max_tokens\":1}");
      assertThat(res.statusCode()).isEqualTo(404);
      JsonNode error = JSON.readTree(res.body()).get("error");
      assertThat(error.get("message").asText()).isEqualTo("The model `gpt-4o` does not exist.");
      assertThat(error.get("type").asText()).isEqualTo("NotFoundError");
      assertThat(error.get("code").asInt()).isEqualTo(404);
      // current vLLM's model check names the field (it was null here before)
      assertThat(error.get("param").asText()).isEqualTo("model");
    }
    // the base model and the adapter are served
    assertThat(replica.post(port, "/v1/completions", "{\"model\":\"sql\",\"prompt\":[1,2,3],"
        + "\"max_tokens\":1}").statusCode()).isEqualTo(200);
  }
}
