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
 * {@code return_token_ids: true} names the prompt's token IDs as well as the generated ones, as
 * vLLM (0.10.2 and later) does: in a completion's choice, at the top of a chat answer, and once
 * in a stream (a completion's first token chunk, its later chunks naming them null, as vLLM
 * writes every field of a completion chunk; a chat's first chunk). A client that keeps a
 * dialog's token IDs needs both halves.
 */
@Timeout(60)
class ServeReturnTokenIdsTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void aWholeCompletionNamesThePromptsIdsInItsChoice() throws Exception {
    int port = replica.start();
    JsonNode answer = ok(port, "/v1/completions",
        "{\"prompt\":[5,6,7],\"max_tokens\":2,\"return_token_ids\":true}");
    JsonNode choice = answer.at("/choices/0");
    assertThat(ids(choice.get("prompt_token_ids"))).containsExactly(5, 6, 7);
    assertThat(choice.get("token_ids")).hasSize(2);

    JsonNode without = ok(port, "/v1/completions", "{\"prompt\":[5,6,7],\"max_tokens\":2}");
    assertThat(without.at("/choices/0/prompt_token_ids").isNull()).isTrue();
  }

  @Test
  void aWholeChatNamesThePromptsIdsAtTheTop() throws Exception {
    int port = replica.start();
    List<Integer> rendered = ids(ok(port, "/tokenize", "{" + CHAT + "}").get("tokens"));
    JsonNode answer = ok(port, "/v1/chat/completions",
        "{" + CHAT + ",\"max_tokens\":2,\"return_token_ids\":true}");
    assertThat(ids(answer.get("prompt_token_ids"))).isNotEmpty().isEqualTo(rendered);
    assertThat(answer.at("/choices/0/token_ids")).hasSize(2);
  }

  @Test
  void aStreamNamesThePromptsIdsOnceInItsFirstChunk() throws Exception {
    int port = replica.start();
    List<JsonNode> completion = events(port, "/v1/completions",
        "{\"prompt\":[5,6,7],\"max_tokens\":3,\"stream\":true,\"return_token_ids\":true}");
    assertThat(completion).hasSize(3);
    assertThat(ids(completion.get(0).at("/choices/0/prompt_token_ids"))).containsExactly(5, 6, 7);
    assertThat(completion.subList(1, 3))
        .allSatisfy(c -> assertThat(c.at("/choices/0/prompt_token_ids").isNull()).isTrue());

    List<Integer> rendered = ids(ok(port, "/tokenize", "{" + CHAT + "}").get("tokens"));
    List<JsonNode> chat = events(port, "/v1/chat/completions",
        "{" + CHAT + ",\"max_tokens\":3,\"stream\":true,\"return_token_ids\":true}");
    // the role chunk, then one per token
    assertThat(chat).hasSize(4);
    assertThat(ids(chat.get(0).get("prompt_token_ids"))).isNotEmpty().isEqualTo(rendered);
    assertThat(chat.subList(1, 4)).allSatisfy(c -> assertThat(c.has("prompt_token_ids")).isFalse());
  }

  private JsonNode ok(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return JSON.readTree(res.body());
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

  private static List<Integer> ids(JsonNode array) {
    List<Integer> ids = new ArrayList<>();
    if (array != null) {
      array.forEach(n -> ids.add(n.asInt()));
    }
    return ids;
  }
}
