package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
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
  private final HttpClient http = HttpClient.newBuilder()
      .connectTimeout(Duration.ofSeconds(5)).build();
  private Serve serve;

  @AfterEach
  void close() {
    if (serve != null) {
      serve.close();
    }
  }

  private int start() {
    IllegalStateException last = null;
    for (int attempt = 0; attempt < 20; attempt++) {
      int base = ThreadLocalRandom.current().nextInt(20_000, 30_000);
      try {
        serve = new Serve(new Serve.Options(1, base, base + 1_000, false, 20,
            HardwareProfile.qwen3H100Mps6(), 1, List.of(), null));
        return base;
      } catch (IllegalStateException e) {
        last = e;
      }
    }
    throw new AssertionError("no free ports found", last);
  }

  private HttpResponse<String> post(int port, String path, String body) throws Exception {
    return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
        .timeout(Duration.ofSeconds(30))
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofString());
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
    int port = start();
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String prompt = path.endsWith("chat/completions")
          ? "\"messages\":[{\"role\":\"user\",\"content\":\"a b c\"}]"
          : "\"prompt\":[1,2,3,4]";
      HttpResponse<String> res = post(port, path, "{" + prompt + ",\"max_tokens\":3,"
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
