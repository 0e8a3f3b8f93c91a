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
 * The stand-in's chat rendering follows {@code add_generation_prompt} and
 * {@code continue_final_message} as vLLM's rendering does: by default the prompt ends with the
 * opening of the assistant's reply, without it (or when the last message is continued) it ends
 * with the last message, and continuing it while the generation prompt is on is refused. The
 * prompt's token count and the blocks the replica caches follow the rendering.
 */
@Timeout(60)
class ServeChatGenerationPromptTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private int start() {
    return replica.start(base -> new Serve.Options(1, base, base + 1_000, false, 20,
        HardwareProfile.qwen3H100Mps6(), 1, List.of(), null, Serve.DEFAULT_KEEP_ALIVE_SECONDS,
        Serve.DEFAULT_MAX_LORAS, KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES,
        BodyBudget.DEFAULT_BYTES, null, false, true));
  }

  /** {@code count} distinct words, each one stand-in token. */
  private static String words(String prefix, int count) {
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < count; i++) {
      b.append(i == 0 ? "" : " ").append(prefix).append(i);
    }
    return b.toString();
  }

  private static String message(String role, String content) {
    return "{\"role\":\"" + role + "\",\"content\":\"" + content + "\"}";
  }

  private List<Integer> tokens(int port, String messages, String fields) throws Exception {
    HttpResponse<String> res = replica.post(port, "/tokenize",
        "{\"messages\":[" + messages + "]" + fields + "}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    JsonNode answer = JSON.readTree(res.body());
    List<Integer> ids = new ArrayList<>();
    answer.get("tokens").forEach(t -> ids.add(t.asInt()));
    assertThat(answer.get("count").asInt()).isEqualTo(ids.size());
    return ids;
  }

  private JsonNode usage(int port, String messages, String fields) throws Exception {
    HttpResponse<String> res = replica.post(port, "/v1/chat/completions",
        "{\"messages\":[" + messages + "],\"max_tokens\":1" + fields + "}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return JSON.readTree(res.body()).get("usage");
  }

  @Test
  void theGenerationPromptIsOneTokenAfterTheMessagesUnlessTurnedOffOrTheLastMessageContinues()
      throws Exception {
    int port = start();
    String user = message("user", words("q", 10));
    String chat = user + "," + message("assistant", words("a", 5));

    List<Integer> withPrompt = tokens(port, user, "");
    List<Integer> without = tokens(port, user, ",\"add_generation_prompt\":false");
    // "user:" and ten words, then "assistant:"
    assertThat(without).hasSize(11);
    assertThat(withPrompt).hasSize(12).startsWith(without.toArray(Integer[]::new));
    assertThat(tokens(port, user, ",\"add_generation_prompt\":true")).isEqualTo(withPrompt);

    // continuing the assistant's message ends the prompt with its words, no new header
    List<Integer> continued = tokens(port, chat,
        ",\"add_generation_prompt\":false,\"continue_final_message\":true");
    assertThat(continued).hasSize(11 + 6).startsWith(without.toArray(Integer[]::new))
        .isEqualTo(tokens(port, chat, ",\"add_generation_prompt\":false"));
    // the next turn's history holds the reply after the header that opened it
    assertThat(tokens(port, chat, ",\"add_generation_prompt\":false").subList(0, 12))
        .isEqualTo(withPrompt);

    // the chat completion's prompt is the same rendering
    assertThat(usage(port, user, "").get("prompt_tokens").asInt()).isEqualTo(12);
    assertThat(usage(port, user, ",\"add_generation_prompt\":false").get("prompt_tokens").asInt())
        .isEqualTo(11);
    assertThat(usage(port, chat,
        ",\"add_generation_prompt\":false,\"continue_final_message\":true")
        .get("prompt_tokens").asInt()).isEqualTo(17);
  }

  @Test
  void theGenerationPromptFillsTheBlocksTheReplicaCaches() throws Exception {
    int port = start();
    // "user:" and 31 words, then "assistant:": 33 tokens, two full blocks of 16 with the header
    // the last token of the second
    String user = message("user", words("q", 31));
    // a continued answer: the same 32 tokens, then its own words
    usage(port, user + "," + message("assistant", words("a", 16)),
        ",\"add_generation_prompt\":false,\"continue_final_message\":true");
    JsonNode next = usage(port, user, "");
    assertThat(next.get("prompt_tokens").asInt()).isEqualTo(33);
    assertThat(next.at("/prompt_tokens_details/cached_tokens").asInt()).isEqualTo(32);
    // and a completion of the tokens /tokenize names finds the same blocks
    List<Integer> ids = tokens(port, user, "");
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":" + ids + ",\"max_tokens\":1}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    assertThat(JSON.readTree(res.body()).at("/usage/prompt_tokens_details/cached_tokens").asInt())
        .isEqualTo(32);
  }

  @Test
  void continuingTheLastMessageNeedsTheGenerationPromptTurnedOff() throws Exception {
    int port = start();
    String chat = "{\"messages\":[" + message("user", "hi") + "," + message("assistant", "hello")
        + "],\"continue_final_message\":true}";
    for (String path : List.of("/tokenize", "/v1/chat/completions")) {
      JsonNode error = replica.refusal(port, path, chat);
      assertThat(error.get("message").asText()).as(path)
          .isEqualTo(EmulatedServer.CONTINUE_WITH_GENERATION_PROMPT)
          .startsWith("continue_final_message and add_generation_prompt are not compatible.");
      assertThat(error.get("type").asText()).isEqualTo("BadRequestError");
    }
  }
}
