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
    assertRefused(port, path, "{" + CHAT + ",\"logprobs\":true,\"top_logprobs\":3}",
        "logprobs");
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
  /** A refusal's message and param, checking that it is a 400. */
  private com.fasterxml.jackson.databind.JsonNode vllmRefusal(int port, String path, String body)
      throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(body).isEqualTo(400);
    return JSON.readTree(res.body()).path("error");
  }

  private void assertVllmRefusal(int port, String path, String body, String message,
      String param) throws Exception {
    com.fasterxml.jackson.databind.JsonNode e = vllmRefusal(port, path, body);
    assertThat(e.path("message").asText()).as(body).isEqualTo(message);
    assertThat(e.path("param").asText()).as(body).isEqualTo(param);
  }

  /**
   * Values vLLM itself refuses are refused in its words and with its param, not as a request the
   * emulator does not serve: counts below 0 but for -1, a chat's top_logprobs without logprobs,
   * prompt_logprobs in a stream, a count that is not a number, and counts above vLLM's
   * --max-logprobs default of 20 (-1 being the whole vocabulary).
   */
  @Test
  void valuesVllmRefusesAreRefusedInItsWords() throws Exception {
    int port = replica.start();
    String chat = "/v1/chat/completions";
    String completion = "/v1/completions";
    assertVllmRefusal(port, chat, "{" + CHAT + ",\"logprobs\":true,\"top_logprobs\":-2}",
        "`top_logprobs` must be a positive value or -1. (parameter=top_logprobs, value=-2)",
        "top_logprobs");
    assertVllmRefusal(port, chat, "{" + CHAT + ",\"top_logprobs\":3}",
        "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)",
        "top_logprobs");
    assertVllmRefusal(port, chat, "{" + CHAT + ",\"logprobs\":true,\"top_logprobs\":\"3\"}",
        "`top_logprobs` must be an integer.", "top_logprobs");
    assertVllmRefusal(port, chat, "{" + CHAT + ",\"logprobs\":true,\"top_logprobs\":21}",
        "Requested sample logprobs of 21, which is greater than max allowed: 20"
            + " (parameter=logprobs, value=21)", "logprobs");
    int vocab = HardwareProfile.qwen3H100Mps6().vocab();
    assertVllmRefusal(port, chat, "{" + CHAT + ",\"logprobs\":true,\"top_logprobs\":-1}",
        "Requested sample logprobs of " + vocab + ", which is greater than max allowed: 20"
            + " (parameter=logprobs, value=" + vocab + ")", "logprobs");
    assertVllmRefusal(port, chat, "{" + CHAT + ",\"prompt_logprobs\":2,\"stream\":true}",
        "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)",
        "prompt_logprobs");
    assertVllmRefusal(port, completion, "{" + COMPLETION + ",\"logprobs\":-3}",
        "`logprobs` must be a positive value or -1. (parameter=logprobs, value=-3)", "logprobs");
    assertVllmRefusal(port, completion, "{" + COMPLETION + ",\"logprobs\":\"five\"}",
        "`logprobs` must be an integer.", "logprobs");
    assertVllmRefusal(port, completion, "{" + COMPLETION + ",\"prompt_logprobs\":-2.0}",
        "`prompt_logprobs` must be a positive value or -1. (parameter=prompt_logprobs,"
            + " value=-2.0)", "prompt_logprobs");
    assertVllmRefusal(port, completion, "{" + COMPLETION + ",\"prompt_logprobs\":25}",
        "Requested prompt logprobs of 25, which is greater than max allowed: 20"
            + " (parameter=prompt_logprobs, value=25)", "prompt_logprobs");
    // within vLLM's bounds, the emulator's own refusal, naming the field
    assertThat(vllmRefusal(port, completion, "{" + COMPLETION + ",\"logprobs\":20}")
        .path("param").asText()).isEqualTo("logprobs");
  }
}
