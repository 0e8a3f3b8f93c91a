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

  }

  @Test
  void aChatChunkCarriesTheFieldsVllmSetsOnIt() throws Exception {
    int port = replica.start();
    // vLLM writes a chat chunk without its unset fields, but sets token_ids on every token's
    // choice, stop_reason on the finishing one and prompt_token_ids on the role chunk: those are
    // written, null when there is nothing to name
    List<JsonNode> chat = events(port, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"stream\":true}");
    assertThat(chat).hasSize(3);
    assertThat(names(chat.get(0))).containsExactly("id", "object", "created", "model", "choices",
        "prompt_token_ids");
    assertThat(chat.get(0).get("prompt_token_ids").isNull()).isTrue();
    assertThat(names(chat.get(0).at("/choices/0")))
        .containsExactly("index", "delta", "logprobs", "finish_reason");
    assertThat(names(chat.get(1))).containsExactly("id", "object", "created", "model", "choices");
    assertThat(names(chat.get(1).at("/choices/0")))
        .containsExactly("index", "delta", "logprobs", "finish_reason", "token_ids");
    assertThat(chat.get(1).at("/choices/0/token_ids").isNull()).isTrue();
    JsonNode last = chat.get(2).at("/choices/0");
    assertThat(names(last)).containsExactly("index", "delta", "logprobs", "finish_reason",
        "stop_reason", "token_ids");
    assertThat(last.get("finish_reason").asText()).isEqualTo("length");
    assertThat(last.get("stop_reason").isNull()).isTrue();
    assertThat(last.get("token_ids").isNull()).isTrue();
  }

  private JsonNode whole(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return JSON.readTree(res.body());
  }

  @Test
  void aWholeCompletionCarriesEveryFieldOfVllmsResponseModel() throws Exception {
    int port = replica.start();
    JsonNode answer = whole(port, "/v1/completions", "{\"prompt\":[5,6,7],\"max_tokens\":2}");
    assertThat(names(answer)).containsExactly("id", "object", "created", "model", "choices",
        "service_tier", "system_fingerprint", "usage", "kv_transfer_params");
    JsonNode choice = answer.at("/choices/0");
    assertThat(names(choice)).containsExactly("index", "text", "logprobs", "finish_reason",
        "stop_reason", "token_ids", "prompt_logprobs", "prompt_token_ids");
    for (String nullField : new String[] {"stop_reason", "token_ids", "prompt_logprobs",
        "prompt_token_ids"}) {
      assertThat(choice.get(nullField).isNull()).as(nullField).isTrue();
    }
    for (String nullField : new String[] {"service_tier", "system_fingerprint",
        "kv_transfer_params"}) {
      assertThat(answer.get(nullField).isNull()).as(nullField).isTrue();
    }
  }

  @Test
  void aWholeChatCarriesEveryFieldOfVllmsResponseModel() throws Exception {
    int port = replica.start();
    JsonNode answer = whole(port, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}");
    assertThat(names(answer)).containsExactly("id", "object", "created", "model", "choices",
        "service_tier", "system_fingerprint", "usage", "prompt_logprobs", "prompt_token_ids",
        "kv_transfer_params");
    JsonNode choice = answer.at("/choices/0");
    assertThat(names(choice)).containsExactly("index", "message", "logprobs", "finish_reason",
        "stop_reason", "token_ids");
    JsonNode message = choice.get("message");
    assertThat(names(message)).containsExactly("role", "content", "refusal", "annotations",
        "audio", "function_call", "tool_calls", "reasoning", "reasoning_content");
    // tool_calls is an empty list, not null, as vLLM's default
    assertThat(message.get("tool_calls").isArray()).isTrue();
    assertThat(message.get("tool_calls")).isEmpty();
    assertThat(message.get("reasoning_content").isNull()).isTrue();
    assertThat(answer.get("prompt_token_ids").isNull()).isTrue();

    // return_token_ids fills the same fields instead of adding new ones
    JsonNode withIds = whole(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"hi\"}],\"max_tokens\":2,\"return_token_ids\":true}");
    assertThat(names(withIds)).isEqualTo(names(answer));
    assertThat(withIds.get("prompt_token_ids").isArray()).isTrue();
    assertThat(withIds.at("/choices/0/token_ids")).hasSize(2);
  }
}
