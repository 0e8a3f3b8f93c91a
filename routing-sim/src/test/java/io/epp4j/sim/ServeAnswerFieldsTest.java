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
    // the finishing chunk carries the fingerprint, the others do not
    assertThat(names(chunks.get(2))).containsExactly("id", "object", "created", "model",
        "choices", "system_fingerprint");
    assertThat(names(chunks.get(0))).doesNotContain("system_fingerprint");
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
    assertThat(names(chat.get(2))).containsExactly("id", "object", "created", "model", "choices",
        "system_fingerprint");
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
    for (String nullField : new String[] {"service_tier", "kv_transfer_params"}) {
      assertThat(answer.get(nullField).isNull()).as(nullField).isTrue();
    }
    assertThat(answer.get("system_fingerprint").asText()).matches("epp4j-serve-[0-9a-f]{8}");
  }

  /**
   * As current vLLM (its default --fingerprint-mode): the fingerprint is a string, the same on
   * every answer of a configuration, on a whole answer and on a stream's last message: the
   * finishing chunk, or the usage chunk when one follows it.
   */
  @Test
  void theFingerprintIsAStringOnTheWholeAnswerAndTheStreamsLastMessage() throws Exception {
    int port = replica.start();
    String fingerprint = whole(port, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}")
        .get("system_fingerprint").asText();
    assertThat(fingerprint).matches("epp4j-serve-[0-9a-f]{8}")
        .isEqualTo(EmulatedServer.systemFingerprint(HardwareProfile.qwen3H100Mps6(), List.of(),
            false));
    assertThat(whole(port, "/v1/completions", "{\"prompt\":[5,6,7],\"max_tokens\":2}")
        .get("system_fingerprint").asText()).isEqualTo(fingerprint);
    // another configuration, another fingerprint
    assertThat(EmulatedServer.systemFingerprint(HardwareProfile.qwen3H100Mps6(), List.of("a"),
        false)).isNotEqualTo(fingerprint);
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String prompt = path.endsWith("chat/completions")
          ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : "\"prompt\":[5,6,7]";
      List<JsonNode> chunks = events(port, path, "{" + prompt + ",\"max_tokens\":2,"
          + "\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
      JsonNode usage = chunks.get(chunks.size() - 1);
      assertThat(names(usage)).as(path).containsExactly("id", "object", "created", "model",
          "choices", "usage", "system_fingerprint");
      assertThat(usage.get("system_fingerprint").asText()).isEqualTo(fingerprint);
      for (int i = 0; i < chunks.size() - 1; i++) {
        assertThat(names(chunks.get(i))).as(path).doesNotContain("system_fingerprint");
      }
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
