package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * vLLM's {@code --enable-force-include-usage}: every stream ends with the usage chunk, whether
 * the request asked for it in {@code stream_options} or not; without the flag (vLLM's default)
 * only a request that asks gets it.
 */
@Timeout(60)
class ServeForceIncludeUsageTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
  private static final String COMPLETION = "\"prompt\":[5,6,7]";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private int start(boolean forceIncludeUsage) {
    return replica.start(base -> new Serve.Options(1, base, base + 1_000, false, 20,
        HardwareProfile.qwen3H100Mps6(), 1, List.of(), null, Serve.DEFAULT_KEEP_ALIVE_SECONDS,
        Serve.DEFAULT_MAX_LORAS, KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES,
        BodyBudget.DEFAULT_BYTES, null, false, false, forceIncludeUsage));
  }

  /** The stream's chunks, {@code [DONE]} left out (and checked to be last). */
  private List<JsonNode> events(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    assertThat(res.body()).endsWith("data: [DONE]\n\n");
    List<JsonNode> chunks = new ArrayList<>();
    for (String line : res.body().split("\n")) {
      if (line.startsWith("data: {")) {
        chunks.add(JSON.readTree(line.substring("data: ".length())));
      }
    }
    return chunks;
  }

  private static String path(String input) {
    return input.equals(CHAT) ? "/v1/chat/completions" : "/v1/completions";
  }

  @Test
  void withoutTheFlagOnlyAStreamThatAsksGetsTheUsageChunk() throws Exception {
    int port = start(false);
    for (String input : List.of(COMPLETION, CHAT)) {
      for (String options : List.of("", ",\"stream_options\":{\"include_usage\":false}",
          ",\"stream_options\":null")) {
        List<JsonNode> chunks = events(port, path(input),
            "{" + input + ",\"max_tokens\":3,\"stream\":true" + options + "}");
        for (JsonNode chunk : chunks) {
          assertThat(chunk.has("usage")).as(input + options).isFalse();
          assertThat(chunk.get("choices")).as(input + options).hasSize(1);
        }
      }
      List<JsonNode> asked = events(port, path(input), "{" + input + ",\"max_tokens\":3,"
          + "\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
      assertThat(asked.get(asked.size() - 1).get("choices")).as(input).isEmpty();
    }
  }

  @Test
  void withTheFlagEveryStreamEndsWithTheUsageChunk() throws Exception {
    int port = start(true);
    for (String input : List.of(COMPLETION, CHAT)) {
      for (String options : List.of("", ",\"stream_options\":{\"include_usage\":false}",
          ",\"stream_options\":null", ",\"stream_options\":{}")) {
        List<JsonNode> chunks = events(port, path(input),
            "{" + input + ",\"max_tokens\":3,\"stream\":true" + options + "}");
        JsonNode last = chunks.get(chunks.size() - 1);
        assertThat(last.get("choices")).as(input + options).isEmpty();
        assertThat(last.at("/usage/completion_tokens").asInt()).as(input + options)
            .isEqualTo(3);
        assertThat(last.at("/usage/prompt_tokens").asInt()).as(input + options).isPositive();
        // the usage chunk is the stream's last message: it carries the fingerprint, the
        // finishing chunk does not
        assertThat(last.has("system_fingerprint")).as(input + options).isTrue();
        for (JsonNode chunk : chunks.subList(0, chunks.size() - 1)) {
          assertThat(chunk.has("usage")).as(input + options).isFalse();
          assertThat(chunk.has("system_fingerprint")).as(input + options).isFalse();
        }
      }
      // continuous usage still needs the request to ask for it
      List<JsonNode> continuous = events(port, path(input), "{" + input + ",\"max_tokens\":3,"
          + "\"stream\":true,\"stream_options\":{\"include_usage\":false,"
          + "\"continuous_usage_stats\":true}}");
      for (JsonNode chunk : continuous) {
        assertThat(chunk.has("usage")).as(input).isTrue();
      }
    }
    // a whole answer has its usage either way, and a stream_options without a stream is still
    // refused
    HttpResponse<String> whole = replica.post(port, "/v1/completions",
        "{" + COMPLETION + ",\"max_tokens\":2}");
    assertThat(JSON.readTree(whole.body()).at("/usage/completion_tokens").asInt()).isEqualTo(2);
    assertThat(replica.post(port, "/v1/completions", "{" + COMPLETION + ",\"max_tokens\":2,"
        + "\"stream_options\":{\"include_usage\":true}}").statusCode()).isEqualTo(400);
  }

  @Test
  void theFlagTakesNoValueAsVllmsAndIsOffByDefault() {
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "9000"})
        .enableForceIncludeUsage()).isFalse();
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "9000",
        Serve.FORCE_INCLUDE_USAGE}).enableForceIncludeUsage()).isTrue();
    assertThatThrownBy(() -> Serve.parse(new String[] {"--replicas", "1", "--port", "9000",
        Serve.FORCE_INCLUDE_USAGE + "=1"}))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining(Serve.FORCE_INCLUDE_USAGE + " takes no value");
  }
}
