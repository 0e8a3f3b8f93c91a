package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A completion's {@code suffix} is refused with vLLM's 400, once the model is found and before
 * the prompt is tokenized, rather than ignored: a fill-in-the-middle client that falls back to a
 * plain prefix when vLLM refuses the suffix must see the same refusal here.
 */
@Timeout(60)
class ServeSuffixTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private JsonNode error(int port, String body, int status) throws Exception {
    HttpResponse<String> res = replica.post(port, "/v1/completions", body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(status);
    return JSON.readTree(res.body()).get("error");
  }

  @Test
  void aSuffixIsRefusedInVllmsWords() throws Exception {
    int port = replica.start();
    JsonNode e = error(port, "{\"prompt\":\"def f(\",\"suffix\":\"  return x\",\"max_tokens\":2}",
        400);
    assertThat(e.get("message").asText()).isEqualTo("suffix is not currently supported");
    assertThat(e.get("type").asText()).isEqualTo("BadRequestError");
    // an empty string is a suffix too (vLLM checks for None)
    assertThat(error(port, "{\"prompt\":[1,2],\"suffix\":\"\"}", 400).get("message").asText())
        .isEqualTo("suffix is not currently supported");
    // a suffix that is not a string is the request model's error, naming the field
    assertThat(error(port, "{\"prompt\":[1,2],\"suffix\":7}", 400).get("message").asText())
        .contains("'suffix'");
    // after the model's 404
    assertThat(error(port, "{\"model\":\"nope\",\"prompt\":[1,2],\"suffix\":\"x\"}", 404)
        .get("type").asText()).isEqualTo("NotFoundError");
    // null, or no suffix, is a completion as usual
    HttpResponse<String> ok = replica.post(port, "/v1/completions",
        "{\"prompt\":[1,2],\"suffix\":null,\"max_tokens\":2}");
    assertThat(ok.statusCode()).as(ok.body()).isEqualTo(200);
  }
}
