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
 * {@code /tokenize} checks its {@code model} field as the generation endpoints do, as vLLM's
 * does: a model the replica does not serve is a 404, not a count from another model's tokenizer;
 * the base model, an adapter, or no model at all is counted.
 */
@Timeout(60)
class ServeTokenizeModelTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void tokenizeRefusesAModelNotServed() throws Exception {
    int port = replica.start(List.of("sql"));
    HttpResponse<String> unknown = replica.post(port, "/tokenize",
        "{\"model\":\"gpt-4o\",\"prompt\":\"a b c\"}");
    assertThat(unknown.statusCode()).isEqualTo(404);
    JsonNode error = JSON.readTree(unknown.body()).get("error");
    assertThat(error.get("message").asText()).isEqualTo("The model `gpt-4o` does not exist.");
    assertThat(error.get("type").asText()).isEqualTo("NotFoundError");
    assertThat(error.get("param").asText()).isEqualTo("model");
    HttpResponse<String> chat = replica.post(port, "/tokenize",
        "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    assertThat(chat.statusCode()).isEqualTo(404);
    HttpResponse<String> notAString = replica.post(port, "/tokenize",
        "{\"model\":7,\"prompt\":\"a b c\"}");
    assertThat(notAString.statusCode()).isEqualTo(400);
    assertThat(JSON.readTree(notAString.body()).at("/error/message").asText())
        .contains("'model'");

    for (String served : List.of("\"model\":\"sql\",", "\"model\":\""
        + HardwareProfile.qwen3H100Mps6().model() + "\",", "")) {
      HttpResponse<String> ok = replica.post(port, "/tokenize",
          "{" + served + "\"prompt\":\"a b c\"}");
      assertThat(ok.statusCode()).as(served).isEqualTo(200);
      assertThat(JSON.readTree(ok.body()).get("count").asInt()).isEqualTo(3);
    }
  }
}
