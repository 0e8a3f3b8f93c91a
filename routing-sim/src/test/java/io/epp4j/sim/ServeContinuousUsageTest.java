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
 * {@code stream_options.continuous_usage_stats}: vLLM puts the usage so far
 * ({@code prompt_tokens}, {@code completion_tokens}, {@code total_tokens}) in every chunk of the
 * stream; the emulator sent {@code "usage": null} in each, which a client reading the running
 * count from the chunks cannot use.
 */
@Timeout(60)
class ServeContinuousUsageTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private static List<JsonNode> chunks(String body) throws Exception {
    List<JsonNode> events = new ArrayList<>();
    for (String line : body.split("\n")) {
      if (line.startsWith("data: ") && !line.equals("data: [DONE]")) {
        events.add(JSON.readTree(line.substring(6)));
      }
    }
    return events;
  }

  @Test
  void everyChunkCarriesTheUsageSoFar() throws Exception {
    int port = replica.start();
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String prompt = path.endsWith("chat/completions")
          // "user:", a, b, then the generation prompt "assistant:"
          ? "\"messages\":[{\"role\":\"user\",\"content\":\"a b\"}]"
          : "\"prompt\":[1,2,3,4]";
      HttpResponse<String> res = replica.post(port, path, "{" + prompt + ",\"max_tokens\":3,"
          + "\"stream\":true,\"stream_options\":{\"include_usage\":true,"
          + "\"continuous_usage_stats\":true}}");
      assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
      int generated = 0;
      for (JsonNode chunk : chunks(res.body())) {
        JsonNode usage = chunk.get("usage");
        assertThat(usage.isObject()).as(path + ": " + chunk).isTrue();
        assertThat(usage.get("prompt_tokens").asInt()).as(path).isEqualTo(4);
        if (chunk.get("choices").size() == 1 && (chunk.at("/choices/0/text").isTextual()
            || chunk.at("/choices/0/delta/content").asText().length() > 0)) {
          generated++;
        }
        assertThat(usage.get("completion_tokens").asInt()).as(path + ": " + chunk)
            .isEqualTo(generated);
        assertThat(usage.get("total_tokens").asInt()).isEqualTo(4 + generated);
      }
      assertThat(generated).isEqualTo(3);
    }
  }
}
