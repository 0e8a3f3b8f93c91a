package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * vLLM's {@code truncate_prompt_tokens}: the prompt keeps its last k tokens (-1: as many as the
 * context leaves after the output tokens asked for), so the emulated request prefills, caches and
 * counts the truncated prompt; a k over that room, below -1 or not an integer is refused naming
 * the field.
 */
@Timeout(60)
class ServeTruncatePromptTokensTest {
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

  private JsonNode whole(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return JSON.readTree(res.body());
  }

  private static String ids(int from, int count) {
    return IntStream.range(from, from + count).mapToObj(Integer::toString)
        .collect(Collectors.joining(",", "[", "]"));
  }

  private static String words(int count) {
    return IntStream.range(0, count).mapToObj(i -> "w" + i).collect(Collectors.joining(" "));
  }

  @Test
  void aCompletionKeepsTheLastTokensWhichAreTheOnesPrefilledCachedAndCounted() throws Exception {
    int port = start();
    JsonNode cut = whole(port, "/v1/completions", "{\"prompt\":" + ids(1_000, 100)
        + ",\"truncate_prompt_tokens\":40,\"max_tokens\":2,\"return_token_ids\":true}");
    assertThat(cut.at("/usage/prompt_tokens").asInt()).isEqualTo(40);
    assertThat(cut.at("/choices/0/prompt_token_ids").toString())
        .isEqualTo(ids(1_060, 40).replace(" ", ""));
    // the engine ran the last 40 tokens: their full blocks but the last token's are cached,
    // (40 - 1) / 16 * 16, and the whole prompt's first blocks are not
    assertThat(whole(port, "/v1/completions", "{\"prompt\":" + ids(1_060, 40)
        + ",\"max_tokens\":2}").at("/usage/prompt_tokens_details/cached_tokens").asInt())
        .isEqualTo(32);
    assertThat(whole(port, "/v1/completions", "{\"prompt\":" + ids(1_000, 100)
        + ",\"max_tokens\":2}").at("/usage/prompt_tokens_details/cached_tokens").asInt())
        .isZero();
    // a k at or above the prompt's length keeps it whole; a string of digits is an integer
    assertThat(whole(port, "/v1/completions", "{\"prompt\":" + ids(1_000, 100)
        + ",\"truncate_prompt_tokens\":\"100\",\"max_tokens\":2}").at("/usage/prompt_tokens")
        .asInt()).isEqualTo(100);
    // null is no truncation
    assertThat(whole(port, "/v1/completions", "{\"prompt\":" + ids(1_000, 100)
        + ",\"truncate_prompt_tokens\":null,\"max_tokens\":2}").at("/usage/prompt_tokens")
        .asInt()).isEqualTo(100);
  }

  @Test
  void textPromptsAndChatsAreCutAfterTokenizing() throws Exception {
    int port = start();
    assertThat(whole(port, "/v1/completions", "{\"prompt\":\"" + words(50)
        + "\",\"truncate_prompt_tokens\":10,\"max_tokens\":2}").at("/usage/prompt_tokens")
        .asInt()).isEqualTo(10);
    assertThat(whole(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"" + words(50) + "\"}],\"truncate_prompt_tokens\":7,\"max_tokens\":2}")
        .at("/usage/prompt_tokens").asInt()).isEqualTo(7);
  }

  @Test
  void minusOneKeepsWhatTheContextLeavesAfterTheOutputAskedFor() throws Exception {
    int port = start();
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    JsonNode usage = whole(port, "/v1/completions", "{\"prompt\":" + ids(0, maxLen + 50)
        + ",\"truncate_prompt_tokens\":-1,\"max_tokens\":10}").get("usage");
    assertThat(usage.get("prompt_tokens").asInt()).isEqualTo(maxLen - 10);
    assertThat(usage.get("completion_tokens").asInt()).isEqualTo(10);
    // a completion without max_tokens asks for 16
    assertThat(whole(port, "/v1/completions", "{\"prompt\":" + ids(0, maxLen + 50)
        + ",\"truncate_prompt_tokens\":-1}").at("/usage/prompt_tokens").asInt())
        .isEqualTo(maxLen - 16);
    // a chat's max_completion_tokens is its output
    assertThat(whole(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"" + words(maxLen + 50) + "\"}],\"truncate_prompt_tokens\":-1,"
        + "\"max_completion_tokens\":5}").at("/usage/prompt_tokens").asInt())
        .isEqualTo(maxLen - 5);
  }

  @Test
  void aSizeOverTheRoomLeftIsRefusedInVllmsWords() throws Exception {
    int port = start();
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    JsonNode error = replica.refusal(port, "/v1/completions", "{\"prompt\":" + ids(0, 10)
        + ",\"truncate_prompt_tokens\":" + (maxLen - 9) + ",\"max_tokens\":10}");
    assertThat(error.get("message").asText()).isEqualTo("truncate_prompt_tokens="
        + (maxLen - 9) + " cannot be greater than max_model_len - max_tokens = " + (maxLen - 10)
        + ". Please request a smaller truncation size. (parameter=truncate_prompt_tokens, value="
        + (maxLen - 9) + ")");
    assertThat(error.get("param").asText()).isEqualTo("truncate_prompt_tokens");
    // a chat without a limit leaves the whole context; one with max_completion_tokens names it
    assertThat(replica.refusal(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"hi\"}],\"truncate_prompt_tokens\":" + (maxLen + 1) + "}")
        .get("message").asText()).startsWith("truncate_prompt_tokens=" + (maxLen + 1)
        + " cannot be greater than max_model_len - max_tokens = " + maxLen + ".");
    assertThat(replica.refusal(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"hi\"}],\"truncate_prompt_tokens\":" + maxLen
        + ",\"max_completion_tokens\":1}").get("message").asText())
        .startsWith("truncate_prompt_tokens=" + maxLen
            + " cannot be greater than max_model_len - max_completion_tokens = " + (maxLen - 1)
            + ".");
    // 0 leaves no token, which the engine refuses
    assertThat(replica.refusal(port, "/v1/completions", "{\"prompt\":" + ids(0, 10)
        + ",\"truncate_prompt_tokens\":0}").get("message").asText())
        .isEqualTo("The decoder prompt cannot be empty");
  }

  @Test
  void aValueOfTheWrongTypeOrBelowMinusOneIsNamedBeforeTheModelCheck() throws Exception {
    int port = start();
    for (String bad : List.of("-2", "\"a\"", "1.5", "[3]", "{}", "1e30")) {
      for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
        String input = path.endsWith("chat/completions")
            ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : "\"prompt\":\"hi\"";
        JsonNode error = replica.refusal(port, path, "{" + input
            + ",\"model\":\"no-such-model\",\"truncate_prompt_tokens\":" + bad + "}");
        assertThat(error.get("message").asText()).as(bad)
            .contains("field 'truncate_prompt_tokens'").doesNotContain("hi");
        assertThat(error.get("param").asText()).isEqualTo("truncate_prompt_tokens");
      }
    }
  }
}
