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
 * Request fields as vLLM's request models (pydantic, lax mode) take them: an integer field takes
 * a float without a fractional part or a string of digits ({@code "max_tokens": 8.0} from a
 * Python client that computed it), and {@code model}, a string field, takes no number (a 400
 * from the request's validation, not a 404 for a model that does not exist).
 */
@Timeout(60)
class ServeFieldTypesTest {
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
  void integerFieldsTakeWhatVllmsValidationTakes() throws Exception {
    int port = start();
    for (String max : new String[] {"2.0", "\"2\""}) {
      HttpResponse<String> res = post(port, "/v1/completions",
          "{\"prompt\":[1,2,3],\"max_tokens\":" + max + "}");
      assertThat(res.statusCode()).as(max + ": " + res.body()).isEqualTo(200);
      assertThat(JSON.readTree(res.body()).at("/usage/completion_tokens").asInt()).isEqualTo(2);
    }
    assertThat(post(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":2.5}")
        .statusCode()).isEqualTo(400);
    assertThat(post(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":1,"
        + "\"n\":1.0}").statusCode()).isEqualTo(200);
  }

  @Test
  void aModelThatIsNotAStringIsABadRequest() throws Exception {
    int port = start();
    HttpResponse<String> res = post(port, "/v1/completions",
        "{\"model\":7,\"prompt\":[1,2,3],\"max_tokens\":1}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText()).contains("model");
  }
}
