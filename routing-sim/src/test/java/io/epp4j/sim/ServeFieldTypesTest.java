package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Request fields as vLLM's request models (pydantic, lax mode) take them: an integer field takes
 * a float without a fractional part or a string of digits ({@code "max_tokens": 8.0} from a
 * Python client that computed it), and {@code model}, a string field, takes no number (a 400
 * from the request's validation, not a 404 for a model that does not exist). A boolean field
 * ({@code stream}, {@code return_token_ids}, {@code stream_options.include_usage} and
 * {@code continuous_usage_stats}) takes what pydantic's lax bool takes ({@code 0}, {@code 1},
 * {@code "true"}, {@code "yes"}, {@code "off"}, ...) and refuses anything else with a 400 naming
 * the field, instead of reading it as false.
 */
@Timeout(60)
class ServeFieldTypesTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void integerFieldsTakeWhatVllmsValidationTakes() throws Exception {
    int port = replica.start();
    for (String max : new String[] {"2.0", "\"2\""}) {
      HttpResponse<String> res = replica.post(port, "/v1/completions",
          "{\"prompt\":[1,2,3],\"max_tokens\":" + max + "}");
      assertThat(res.statusCode()).as(max + ": " + res.body()).isEqualTo(200);
      assertThat(JSON.readTree(res.body()).at("/usage/completion_tokens").asInt()).isEqualTo(2);
    }
    assertThat(replica.post(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":2.5}")
        .statusCode()).isEqualTo(400);
    assertThat(replica.post(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":1,"
        + "\"n\":1.0}").statusCode()).isEqualTo(200);
  }

  @Test
  void aModelThatIsNotAStringIsABadRequest() throws Exception {
    int port = replica.start();
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"model\":7,\"prompt\":[1,2,3],\"max_tokens\":1}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText()).contains("model");
  }

  @Test
  void booleanFieldsTakeWhatVllmsValidationTakesAndRefuseTheRest() throws Exception {
    int port = replica.start();
    for (String yes : new String[] {"true", "1", "\"true\"", "\"yes\"", "\"On\""}) {
      HttpResponse<String> res = replica.post(port, "/v1/completions",
          "{\"prompt\":[1,2,3],\"max_tokens\":2,\"stream\":" + yes
              + ",\"stream_options\":{\"include_usage\":" + yes + "}}");
      assertThat(res.statusCode()).as(yes + ": " + res.body()).isEqualTo(200);
      assertThat(res.headers().firstValue("content-type")).as(yes)
          .hasValueSatisfying(t -> assertThat(t).startsWith("text/event-stream"));
      assertThat(res.body()).as(yes).contains("\"prompt_tokens\":3").endsWith("data: [DONE]\n\n");
    }
    for (String no : new String[] {"false", "0", "\"false\"", "\"off\"", "null"}) {
      HttpResponse<String> res = replica.post(port, "/v1/completions",
          "{\"prompt\":[1,2,3],\"max_tokens\":2,\"stream\":" + no + "}");
      assertThat(res.statusCode()).as(no + ": " + res.body()).isEqualTo(200);
      assertThat(JSON.readTree(res.body()).at("/usage/completion_tokens").asInt()).as(no)
          .isEqualTo(2);
    }
    String[][] bad = {
        {"\"stream\":\"maybe\"", "stream"},
        {"\"stream\":2", "stream"},
        {"\"stream\":{}", "stream"},
        {"\"return_token_ids\":\"please\"", "return_token_ids"},
        {"\"stream\":true,\"stream_options\":{\"include_usage\":\"sure\"}",
            "stream_options.include_usage"},
        {"\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":[]}",
            "stream_options.continuous_usage_stats"}};
    for (String[] b : bad) {
      HttpResponse<String> res = replica.post(port, "/v1/completions",
          "{\"prompt\":[1,2,3],\"max_tokens\":2," + b[0] + "}");
      assertThat(res.statusCode()).as(b[0] + ": " + res.body()).isEqualTo(400);
      assertThat(JSON.readTree(res.body()).at("/error/message").asText()).as(b[0])
          .contains("'" + b[1] + "'");
    }
  }

  @Test
  void aBadMaxCompletionTokensIsNamedAsSuch() throws Exception {
    int port = replica.start();
    String chat = "\"messages\":[{\"role\":\"user\",\"content\":\"a b c\"}]";
    HttpResponse<String> res = replica.post(port, "/v1/chat/completions",
        "{" + chat + ",\"max_completion_tokens\":\"lots\"}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText())
        .contains("'max_completion_tokens'");
    res = replica.post(port, "/v1/chat/completions", "{" + chat + ",\"max_tokens\":1.5}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText())
        .contains("'max_tokens'").doesNotContain("max_completion_tokens");
  }

  @Test
  void aChatsMaxTokensOfTheWrongTypeIsNamedEvenBesideAMaxCompletionTokens() throws Exception {
    // vLLM's request model types both fields, whichever of them sets the limit
    int port = replica.start();
    String chat = "\"messages\":[{\"role\":\"user\",\"content\":\"a b c\"}]";
    for (String[] c : new String[][] {
        {",\"max_completion_tokens\":2,\"max_tokens\":\"lots\"", "'max_tokens'"},
        {",\"max_completion_tokens\":2,\"max_tokens\":1.5", "'max_tokens'"},
        {",\"max_tokens\":2,\"max_completion_tokens\":[]", "'max_completion_tokens'"},
        {",\"model\":\"nope\",\"max_completion_tokens\":2,\"max_tokens\":{}", "'max_tokens'"}}) {
      HttpResponse<String> res = replica.post(port, "/v1/chat/completions", "{" + chat + c[0]
          + "}");
      assertThat(res.statusCode()).as(c[0] + " " + res.body()).isEqualTo(400);
      assertThat(JSON.readTree(res.body()).at("/error/message").asText()).as(c[0])
          .contains(c[1]);
    }
    // of the right type, max_completion_tokens sets the limit and max_tokens is not used
    HttpResponse<String> res = replica.post(port, "/v1/chat/completions", "{" + chat
        + ",\"max_completion_tokens\":2,\"max_tokens\":\"7\"}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    assertThat(JSON.readTree(res.body()).at("/usage/completion_tokens").asInt()).isEqualTo(2);
  }

  @Test
  void aBooleanIsANumberToAnIntegerOrFloatFieldAsInPydanticsLaxMode() throws Exception {
    // vLLM's request model takes true as 1 and false as 0 for an int or float field
    int port = replica.start();
    for (String fields : new String[] {",\"temperature\":true", ",\"temperature\":false",
        ",\"top_p\":true", ",\"presence_penalty\":false", ",\"repetition_penalty\":true",
        ",\"top_k\":true", ",\"min_p\":false", ",\"seed\":true", ",\"n\":true",
        ",\"min_tokens\":false"}) {
      HttpResponse<String> res = replica.post(port, "/v1/completions",
          "{\"prompt\":[1,2,3],\"max_tokens\":2" + fields + "}");
      assertThat(res.statusCode()).as(fields + " " + res.body()).isEqualTo(200);
    }
    // max_tokens true is 1 token; false is 0, which vLLM's sampling parameters refuse
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":true}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    assertThat(JSON.readTree(res.body()).at("/usage/completion_tokens").asInt()).isEqualTo(1);
    res = replica.post(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":false}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText())
        .startsWith("max_tokens must be at least 1, got 0.");
    // and a seed of true generates what a seed of 1 generates
    String seeded = "{\"prompt\":[1,2,3],\"max_tokens\":4,\"return_token_ids\":true,\"seed\":";
    assertThat(JSON.readTree(replica.post(port, "/v1/completions", seeded + "true}").body())
        .at("/choices/0/token_ids")).isEqualTo(JSON.readTree(replica.post(port,
            "/v1/completions", seeded + "1}").body()).at("/choices/0/token_ids"));
  }

  @Test
  void anEmptyModelIsTheBaseModelAsInVllm() throws Exception {
    // vLLM's _is_model_supported: a model name that is empty (or left out) is the base model
    int port = replica.start();
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"model\":\"\",\"prompt\":[1,2,3],\"max_tokens\":1}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    assertThat(JSON.readTree(res.body()).get("model").asText())
        .isEqualTo(HardwareProfile.qwen3H100Mps6().model());
  }

  @Test
  void aBadNIsNamedWithoutEchoingWhatTheClientSentInItsPlace() throws Exception {
    int port = replica.start();
    String sent = "x".repeat(10_000);
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":1,\"n\":\"" + sent + "\"}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    assertThat(res.body()).contains("'n'").doesNotContain("xxxxxxxx").hasSizeLessThan(500);
    res = replica.post(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":1,\"n\":3}");
    assertThat(res.statusCode()).isEqualTo(400);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText()).contains("got 3");
  }

  @Test
  void aBatchOfPromptsIsRefusedAsABatch() throws Exception {
    // vLLM answers a batch with a choice per prompt; the emulator serves one prompt per request
    // and says so, instead of calling the batch a bad prompt
    int port = replica.start();
    for (String batch : new String[] {"[\"alpha beta\",\"gamma delta\"]", "[[1,2],[3,4]]"}) {
      HttpResponse<String> res = replica.post(port, "/v1/completions",
          "{\"prompt\":" + batch + ",\"max_tokens\":1}");
      assertThat(res.statusCode()).as(batch + ": " + res.body()).isEqualTo(400);
      assertThat(JSON.readTree(res.body()).at("/error/message").asText()).as(batch)
          .contains("batch of 2 prompts").doesNotContain("alpha");
    }
  }
}
