package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * An answer's {@code id} as vLLM names it: {@code cmpl-} or {@code chatcmpl-} then the request's
 * {@code X-Request-Id} header, else its {@code request_id} field, else an id of the server's own;
 * every chunk of a stream carries it.
 */
@Timeout(60)
class ServeRequestIdTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();
  private final HttpClient http = HttpClient.newHttpClient();

  @AfterEach
  void close() {
    replica.close();
  }

  private HttpResponse<String> post(int port, String path, @Nullable String header, String body)
      throws Exception {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body));
    if (header != null) {
      b.header("X-Request-Id", header);
    }
    HttpResponse<String> res = http.send(b.build(), HttpResponse.BodyHandlers.ofString());
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return res;
  }

  private static List<String> streamIds(String body) throws Exception {
    List<String> ids = new ArrayList<>();
    for (String line : body.split("\n")) {
      if (line.startsWith("data: {")) {
        ids.add(JSON.readTree(line.substring("data: ".length())).get("id").asText());
      }
    }
    return ids;
  }

  @Test
  void theBodysRequestIdNamesTheAnswer() throws Exception {
    int port = replica.start();
    JsonNode completion = JSON.readTree(post(port, "/v1/completions", null,
        "{\"prompt\":\"hi\",\"max_tokens\":2,\"request_id\":\"abc-1\"}").body());
    assertThat(completion.get("id").asText()).isEqualTo("cmpl-abc-1");
    JsonNode chat = JSON.readTree(post(port, "/v1/chat/completions", null,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,"
            + "\"request_id\":\"abc-2\"}").body());
    assertThat(chat.get("id").asText()).isEqualTo("chatcmpl-abc-2");
    List<String> streamed = streamIds(post(port, "/v1/chat/completions", null,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,\"stream\":true,"
            + "\"request_id\":\"abc-3\"}").body());
    assertThat(streamed).isNotEmpty().allMatch("chatcmpl-abc-3"::equals);
  }

  @Test
  void theHeaderWinsOverTheBody() throws Exception {
    int port = replica.start();
    assertThat(JSON.readTree(post(port, "/v1/completions", "hdr-9",
        "{\"prompt\":\"hi\",\"max_tokens\":2,\"request_id\":\"abc\"}").body()).get("id").asText())
        .isEqualTo("cmpl-hdr-9");
    List<String> streamed = streamIds(post(port, "/v1/completions", "hdr-10",
        "{\"prompt\":\"hi\",\"max_tokens\":3,\"stream\":true}").body());
    assertThat(streamed).isNotEmpty().allMatch("cmpl-hdr-10"::equals);
  }

  @Test
  void withoutEitherEachAnswerHasAnIdOfItsOwn() throws Exception {
    int port = replica.start();
    String first = JSON.readTree(post(port, "/v1/completions", null,
        "{\"prompt\":\"hi\",\"max_tokens\":2}").body()).get("id").asText();
    String second = JSON.readTree(post(port, "/v1/completions", null,
        "{\"prompt\":\"hi\",\"max_tokens\":2}").body()).get("id").asText();
    assertThat(first).startsWith("cmpl-").isNotEqualTo(second);
  }
}
