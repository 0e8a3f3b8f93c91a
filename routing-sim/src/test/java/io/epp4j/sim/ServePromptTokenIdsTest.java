package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Token IDs beyond the model's vocabulary: vLLM refuses them with a 400 ("Token id N is out of
 * vocabulary", the processor's check against the tokenizer's largest ID) before they reach
 * the engine; the emulator answered them and put them in its KV events.
 */
@Timeout(60)
class ServePromptTokenIdsTest {
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

  @Test
  void tokenIdsBeyondTheVocabularyAreRefused() throws Exception {
    int port = start();
    int vocab = HardwareProfile.qwen3H100Mps6().vocab();
    HttpResponse<String> res = post(port, "/v1/completions",
        "{\"prompt\":[1,2," + vocab + "],\"max_tokens\":1}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText()).contains("vocabulary");

    HttpResponse<String> last = post(port, "/v1/completions",
        "{\"prompt\":[1,2," + (vocab - 1) + "],\"max_tokens\":1}");
    assertThat(last.statusCode()).as(last.body()).isEqualTo(200);
  }
}
