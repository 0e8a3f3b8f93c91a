package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A null for a field vLLM's request model types without {@code | None} (a {@code bool} or
 * {@code int} with a default) is a 400 naming the field, before the model is looked up, as
 * pydantic refuses it; a null for a field typed {@code | None} is its default, and served.
 */
@Timeout(60)
class ServeNullFieldsTest {
  private static final String COMPLETION = "\"prompt\":\"a b\",\"max_tokens\":1";
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"a b\"}],"
      + "\"max_tokens\":1";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void aNullForAFieldThatTakesNoneIsA400NamingIt() throws Exception {
    int port = replica.start();
    String[][] cases = {
        {"/v1/completions", COMPLETION, "min_tokens"},
        {"/v1/completions", COMPLETION, "ignore_eos"},
        {"/v1/completions", COMPLETION, "include_stop_str_in_output"},
        {"/v1/completions", COMPLETION, "add_special_tokens"},
        {"/v1/completions", COMPLETION, "n"},
        {"/v1/chat/completions", CHAT, "min_tokens"},
        {"/v1/chat/completions", CHAT, "ignore_eos"},
        {"/v1/chat/completions", CHAT, "include_stop_str_in_output"},
        {"/v1/chat/completions", CHAT, "add_special_tokens"},
        {"/v1/chat/completions", CHAT, "echo"},
        {"/v1/chat/completions", CHAT, "add_generation_prompt"},
        {"/v1/chat/completions", CHAT, "continue_final_message"},
        {"/tokenize", "\"prompt\":\"a b\"", "add_special_tokens"},
        {"/tokenize", CHAT, "add_special_tokens"},
        {"/tokenize", CHAT, "add_generation_prompt"},
        {"/tokenize", CHAT, "continue_final_message"}};
    for (String[] c : cases) {
      for (String model : new String[] {"", "\"model\":\"nope\","}) {
        JsonNode e = replica.refusal(port, c[0], "{" + model + c[1] + ",\"" + c[2]
            + "\":null}");
        assertThat(e.get("message").asText()).as(c[0] + " " + model + c[2])
            .startsWith("field '" + c[2] + "' must be");
        assertThat(e.get("type").asText()).isEqualTo("BadRequestError");
      }
    }
  }

  @Test
  void aNullForAFieldThatTakesNoneIsItsDefault() throws Exception {
    int port = replica.start();
    String[][] cases = {
        {"/v1/completions", COMPLETION, "echo"},
        {"/v1/completions", COMPLETION, "stream"},
        {"/v1/completions", COMPLETION, "temperature"},
        {"/v1/completions", COMPLETION, "seed"},
        {"/v1/completions", COMPLETION, "return_token_ids"},
        {"/v1/chat/completions", CHAT, "n"},
        {"/v1/chat/completions", CHAT, "logprobs"},
        {"/v1/chat/completions", CHAT, "top_p"},
        {"/v1/chat/completions", CHAT, "stream"},
        {"/v1/chat/completions", CHAT, "chat_template_kwargs"}};
    for (String[] c : cases) {
      HttpResponse<String> res = replica.post(port, c[0], "{" + c[1] + ",\"" + c[2]
          + "\":null}");
      assertThat(res.statusCode()).as(c[0] + " " + c[2] + " " + res.body()).isEqualTo(200);
    }
  }
}
