package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The validators vLLM's request models run first, on the raw body, before any other check:
 * {@code check_cache_salt_support} (both models) and a chat's {@code check_generation_prompt},
 * in vLLM's words, with no {@code param}, as plain errors name none; and, in its place among
 * them, {@code check_structured_outputs_count}.
 */
@Timeout(60)
class ServeRequestValidatorsTest {
  private static final String SALT = "Parameter 'cache_salt' must be a non-empty string if"
      + " provided.";
  private static final String BOTH = "Cannot set both `continue_final_message` and"
      + " `add_generation_prompt` to True.";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void aCacheSaltThatIsNotANonEmptyStringIsRefusedFirst() throws Exception {
    int port = replica.start();
    for (String salt : List.of("\"\"", "5", "[\"s\"]", "true")) {
      // before the other validators (here a chat's tools, a completion's missing prompt)
      for (String body : List.of("{\"prompt\":\"\",\"cache_salt\":" + salt + "}",
          "{\"messages\":[],\"tools\":[],\"cache_salt\":" + salt + "}")) {
        String path = body.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
        JsonNode error = replica.refusal(port, path, body);
        assertThat(error.get("message").asText()).as(body).isEqualTo(SALT);
        assertThat(error.get("param").isNull()).isTrue();
      }
    }
  }

  @Test
  void severalKindsOfStructuredOutputConstraintsAreRefusedInTheValidatorsOrder()
      throws Exception {
    int port = replica.start();
    String message = "You can only use one kind of constraints for structured outputs ('json',"
        + " 'regex' or 'choice').";
    String chat = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    for (String several : List.of("{\"json\":{},\"regex\":\"a\"}",
        "{\"regex\":\"a\",\"choice\":[\"x\"]}", "{\"json\":3,\"choice\":4}")) {
      // before the model check, whatever the constraints' types; a completion's names the field
      JsonNode completion = replica.refusal(port, "/v1/completions", "{\"prompt\":\"hi\","
          + "\"model\":\"no-such-model\",\"structured_outputs\":" + several + "}");
      assertThat(completion.get("message").asText()).as(several)
          .isEqualTo(message + " (parameter=structured_outputs)");
      assertThat(completion.get("param").asText()).isEqualTo("structured_outputs");
      JsonNode chatError = replica.refusal(port, "/v1/chat/completions", "{" + chat
          + ",\"model\":\"no-such-model\",\"structured_outputs\":" + several + "}");
      assertThat(chatError.get("message").asText()).as(several).isEqualTo(message);
      assertThat(chatError.get("param").isNull()).isTrue();
    }
    String several = ",\"structured_outputs\":{\"json\":{},\"regex\":\"a\"}";
    // a chat's tools' validator runs before it, a completion's stream options' too
    assertThat(replica.refusal(port, "/v1/chat/completions", "{" + chat + ",\"tools\":[]"
        + several + "}").get("message").asText()).startsWith("`tools` must not be an empty");
    assertThat(replica.refusal(port, "/v1/completions", "{\"prompt\":\"hi\","
        + "\"stream_options\":{\"include_usage\":true}" + several + "}").get("message").asText())
        .startsWith("Stream options can only be defined");
    // one kind, the others null, is one
    assertThat(replica.post(port, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2,"
        + "\"structured_outputs\":{\"regex\":\"a\",\"json\":null,\"choice\":null}}")
        .statusCode()).isEqualTo(200);
  }

  @Test
  void bothGenerationPromptFieldsTrueAreRefusedAsPythonTestsThem() throws Exception {
    int port = replica.start();
    String chat = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    // before the tools' validator and the model check; "false" is a true string in Python
    for (String pair : List.of("\"continue_final_message\":true,\"add_generation_prompt\":true",
        "\"continue_final_message\":\"false\",\"add_generation_prompt\":1")) {
      JsonNode error = replica.refusal(port, "/v1/chat/completions", "{" + chat + ","
          + pair + ",\"tools\":[],\"model\":\"no-such-model\"}");
      assertThat(error.get("message").asText()).as(pair).isEqualTo(BOTH);
      assertThat(error.get("param").isNull()).isTrue();
    }
  }
}
