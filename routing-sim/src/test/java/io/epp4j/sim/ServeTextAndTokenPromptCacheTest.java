package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * As in vLLM, which tokenizes a text prompt and keys its blocks by the token IDs, a text prompt
 * and the prompt of its token IDs (as {@code /tokenize} names them) are one prompt to the prefix
 * cache: whichever comes second finds the first's full blocks, in either order and with either
 * profile's vocabulary.
 */
@Timeout(60)
class ServeTextAndTokenPromptCacheTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private int start(String profile) {
    HardwareProfile hw = profile.equals("llama") ? HardwareProfile.llama31H100()
        : HardwareProfile.qwen3H100Mps6();
    return replica.start(base -> new Serve.Options(1, base, base + 1_000, false, 20, hw, 1,
        List.of(), null, Serve.DEFAULT_KEEP_ALIVE_SECONDS, Serve.DEFAULT_MAX_LORAS,
        KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES, BodyBudget.DEFAULT_BYTES, null, false,
        true));
  }

  /** {@code count} distinct words, each one stand-in token. */
  private static String text(String prefix, int count) {
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < count; i++) {
      b.append(i == 0 ? "" : " ").append(prefix).append(i);
    }
    return b.toString();
  }

  private JsonNode usage(int port, String prompt) throws Exception {
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":" + prompt + ",\"max_tokens\":1}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return JSON.readTree(res.body()).get("usage");
  }

  private String ids(int port, String text) throws Exception {
    HttpResponse<String> res = replica.post(port, "/tokenize", "{\"prompt\":\"" + text + "\"}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return JSON.readTree(res.body()).get("tokens").toString();
  }

  @ParameterizedTest
  @ValueSource(strings = {"qwen", "llama"})
  void aTextPromptAndItsTokenIdsShareTheirBlocks(String profile) throws Exception {
    int port = start(profile);
    // 40 tokens: two full blocks of 16 are cached, the rest is recomputed
    String first = text("a", 40);
    assertThat(usage(port, "\"" + first + "\"").at("/prompt_tokens_details/cached_tokens")
        .asInt()).isZero();
    JsonNode again = usage(port, ids(port, first));
    assertThat(again.get("prompt_tokens").asInt()).isEqualTo(40);
    assertThat(again.at("/prompt_tokens_details/cached_tokens").asInt()).isEqualTo(32);

    // and the other way round, on prompts of their own
    String second = text("b", 40);
    assertThat(usage(port, ids(port, second)).at("/prompt_tokens_details/cached_tokens")
        .asInt()).isZero();
    assertThat(usage(port, "\"" + second + "\"").at("/prompt_tokens_details/cached_tokens")
        .asInt()).isEqualTo(32);
  }
}
