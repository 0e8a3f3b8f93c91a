package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * vLLM's {@code --enable-prompt-tokens-details}: usage names the prompt's cached tokens only with
 * the flag. Without it (vLLM's default) a whole answer, dumped with every field of its model, has
 * {@code "prompt_tokens_details": null}, and a stream's usage chunk, dumped without its null
 * fields, has no such key.
 */
@Timeout(60)
class ServePromptTokensDetailsTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private int start(boolean promptTokensDetails) {
    return replica.start(base -> new Serve.Options(1, base, base + 1_000, false, 20,
        HardwareProfile.qwen3H100Mps6(), 1, List.of(), null, Serve.DEFAULT_KEEP_ALIVE_SECONDS,
        Serve.DEFAULT_MAX_LORAS, KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES,
        BodyBudget.DEFAULT_BYTES, null, false, promptTokensDetails));
  }

  private static List<String> names(JsonNode n) {
    List<String> out = new ArrayList<>();
    n.fieldNames().forEachRemaining(out::add);
    return out;
  }

  private JsonNode whole(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return JSON.readTree(res.body());
  }

  /** The usage of a stream's last chunk before {@code [DONE]}. */
  private JsonNode streamedUsage(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    JsonNode last = null;
    for (String line : res.body().split("\n")) {
      if (line.startsWith("data: {")) {
        last = JSON.readTree(line.substring("data: ".length()));
      }
    }
    assertThat(last).isNotNull();
    assertThat(last.get("choices")).isEmpty();
    return last.get("usage");
  }

  private static String ids(int from, int count) {
    return IntStream.range(from, from + count).mapToObj(Integer::toString)
        .collect(Collectors.joining(",", "[", "]"));
  }

  @Test
  void withoutTheFlagUsageNamesNoCachedTokens() throws Exception {
    int port = start(false);
    String prompt = "\"prompt\":" + ids(1_000, 40);
    for (int i = 0; i < 2; i++) {
      // the second time the prompt is cached, and still not reported
      JsonNode usage = whole(port, "/v1/completions", "{" + prompt + ",\"max_tokens\":2}")
          .get("usage");
      assertThat(names(usage)).containsExactly("prompt_tokens", "total_tokens",
          "completion_tokens", "prompt_tokens_details");
      assertThat(usage.get("prompt_tokens_details").isNull()).isTrue();
    }
    JsonNode chat = whole(port, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}").get("usage");
    assertThat(chat.get("prompt_tokens_details").isNull()).isTrue();
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String input = path.endsWith("chat/completions")
          ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : prompt;
      JsonNode usage = streamedUsage(port, path, "{" + input + ",\"max_tokens\":2,"
          + "\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
      assertThat(names(usage)).as(path).containsExactly("prompt_tokens", "total_tokens",
          "completion_tokens");
    }
  }

  @Test
  void withTheFlagUsageNamesTheCachedTokensWholeAndStreamed() throws Exception {
    int port = start(true);
    String body = "{\"prompt\":" + ids(2_000, 200) + ",\"max_tokens\":2}";
    JsonNode first = whole(port, "/v1/completions", body).get("usage");
    assertThat(names(first)).containsExactly("prompt_tokens", "total_tokens",
        "completion_tokens", "prompt_tokens_details");
    // nothing cached is still named, as 0
    assertThat(first.at("/prompt_tokens_details/cached_tokens").isInt()).isTrue();
    assertThat(first.at("/prompt_tokens_details/cached_tokens").asInt()).isZero();
    // every full block of the prompt but the one holding its last token: (200 - 1) / 16 * 16
    assertThat(whole(port, "/v1/completions", body)
        .at("/usage/prompt_tokens_details/cached_tokens").asInt()).isEqualTo(192);
    JsonNode streamed = streamedUsage(port, "/v1/completions", body.replace("}",
        ",\"stream\":true,\"stream_options\":{\"include_usage\":true}}"));
    assertThat(streamed.at("/prompt_tokens_details/cached_tokens").asInt()).isEqualTo(192);
    JsonNode chat = whole(port, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}").get("usage");
    assertThat(chat.at("/prompt_tokens_details/cached_tokens").isInt()).isTrue();
  }

  @Test
  void theFlagTakesNoValueAsVllmsAndIsOffByDefault() {
    String[] base = {"--replicas", "1", "--port", "9000"};
    assertThat(Serve.parse(base).enablePromptTokensDetails()).isFalse();
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "9000",
        Serve.PROMPT_TOKENS_DETAILS}).enablePromptTokensDetails()).isTrue();
    assertThatThrownBy(() -> Serve.parse(new String[] {"--replicas", "1", "--port", "9000",
        Serve.PROMPT_TOKENS_DETAILS + "=true"}))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining(Serve.PROMPT_TOKENS_DETAILS + " takes no value");
  }
}
