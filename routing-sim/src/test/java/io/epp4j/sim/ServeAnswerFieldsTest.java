package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The fields of serve's answers are the ones vLLM writes from its response models, null where
 * vLLM has no value, so a client that reads a field vLLM always sends finds it.
 */
@Timeout(60)
class ServeAnswerFieldsTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private static List<String> names(JsonNode n) {
    List<String> out = new ArrayList<>();
    n.fieldNames().forEachRemaining(out::add);
    return out;
  }

  /** The stream's chunks, {@code [DONE]} left out. */
  private List<JsonNode> events(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    List<JsonNode> chunks = new ArrayList<>();
    for (String line : res.body().split("\n")) {
      if (line.startsWith("data: {")) {
        chunks.add(JSON.readTree(line.substring("data: ".length())));
      }
    }
    return chunks;
  }

  @Test
  void aCompletionChunksChoiceCarriesEveryFieldOfVllmsModel() throws Exception {
    int port = replica.start();
    List<JsonNode> chunks = events(port, "/v1/completions",
        "{\"prompt\":[5,6,7],\"max_tokens\":3,\"stream\":true}");
    assertThat(chunks).hasSize(3);
    for (JsonNode chunk : chunks) {
      JsonNode choice = chunk.at("/choices/0");
      assertThat(names(choice)).containsExactly("index", "text", "logprobs", "finish_reason",
          "stop_reason", "prompt_token_ids", "token_ids");
      assertThat(choice.get("stop_reason").isNull()).isTrue();
      assertThat(choice.get("prompt_token_ids").isNull()).isTrue();
      assertThat(choice.get("token_ids").isNull()).isTrue();
    }
    assertThat(chunks.get(2).at("/choices/0/finish_reason").asText()).isEqualTo("length");

    // a chat chunk is written without its unset fields, as vLLM writes it
    List<JsonNode> chat = events(port, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"stream\":true}");
    assertThat(names(chat.get(1).at("/choices/0")))
        .containsExactly("index", "delta", "logprobs", "finish_reason");
  }
}
