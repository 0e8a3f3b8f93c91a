package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A request that asks for log probabilities is refused with a 400 naming the field: vLLM would
 * answer them, and the emulated replica, whose output is filler, has none to give ("logprobs":
 * null is what a client that did not ask gets). Asking for none (false, null, 0 top tokens, left
 * out) is served.
 */
@Timeout(60)
class ServeLogprobsTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CHAT =
      "\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}],\"max_tokens\":2";
  private static final String COMPLETION = "\"prompt\":[1,2,3],\"max_tokens\":2";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private void assertRefused(int port, String path, String body, String field) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(body).isEqualTo(400);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText())
        .startsWith("field '" + field + "' asks for log probabilities");
  }

  private void assertServed(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(body).isEqualTo(200);
    assertThat(JSON.readTree(res.body()).at("/choices/0/logprobs").isNull()).isTrue();
  }

  @Test
  void aChatThatAsksForLogprobsIsRefusedNamingTheField() throws Exception {
    int port = replica.start();
    String path = "/v1/chat/completions";
    assertRefused(port, path, "{" + CHAT + ",\"logprobs\":true}", "logprobs");
    assertRefused(port, path, "{" + CHAT + ",\"logprobs\":true,\"stream\":true}", "logprobs");
    assertRefused(port, path, "{" + CHAT + ",\"top_logprobs\":3}", "top_logprobs");
    assertRefused(port, path, "{" + CHAT + ",\"prompt_logprobs\":1}", "prompt_logprobs");
    assertServed(port, path, "{" + CHAT + ",\"logprobs\":false,\"top_logprobs\":0}");
    assertServed(port, path, "{" + CHAT + ",\"logprobs\":null,\"prompt_logprobs\":null}");
  }

  @Test
  void aCompletionThatAsksForLogprobsIsRefusedNamingTheField() throws Exception {
    int port = replica.start();
    String path = "/v1/completions";
    assertRefused(port, path, "{" + COMPLETION + ",\"logprobs\":0}", "logprobs");
    assertRefused(port, path, "{" + COMPLETION + ",\"logprobs\":5,\"stream\":true}", "logprobs");
    assertRefused(port, path, "{" + COMPLETION + ",\"prompt_logprobs\":0}", "prompt_logprobs");
    assertServed(port, path, "{" + COMPLETION + ",\"logprobs\":null}");
    assertServed(port, path, "{" + COMPLETION + "}");
  }
}
