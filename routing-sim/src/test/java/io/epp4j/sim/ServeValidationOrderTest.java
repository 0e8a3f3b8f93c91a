package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import java.util.StringJoiner;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A request wrong in several ways is told first what vLLM tells it first: a body that is not
 * JSON, then what its request model (pydantic) refuses (a field of the wrong type, those that
 * shape the prompt such as {@code add_special_tokens} and a chat template's fields too, a missing
 * prompt or chat), then a model it does not serve (404), then what needs the prompt's tokens (an
 * ID out of vocabulary, the context length) and {@code max_tokens} below 1.
 */
@Timeout(60)
class ServeValidationOrderTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String UNKNOWN = "\"model\":\"no-such-model\"";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void aBodyThatIsNotJsonIsSaidSoBeforeAnythingElse() throws Exception {
    int port = replica.start();
    assertError(port, "/v1/completions", "{" + UNKNOWN + ",\"stream\":\"maybe\"", 400,
        "not valid JSON");
  }

  @Test
  void aFieldOfTheWrongTypeIsNamedBeforeAnUnknownModel() throws Exception {
    int port = replica.start();
    assertError(port, "/v1/completions", "{" + UNKNOWN + ",\"prompt\":[1,2,3],"
        + "\"stream\":\"maybe\"}", 400, "'stream'");
    assertError(port, "/v1/completions", "{" + UNKNOWN + ",\"prompt\":[1,2,3],"
        + "\"max_tokens\":\"lots\"}", 400, "'max_tokens'");
    assertError(port, "/v1/completions", "{" + UNKNOWN + ",\"prompt\":[1,2,3],"
        + "\"return_token_ids\":\"please\"}", 400, "'return_token_ids'");
    assertError(port, "/v1/completions", "{" + UNKNOWN + ",\"prompt\":[1,2,3],"
        + "\"cache_salt\":\"\"}", 400, "'cache_salt'");
  }

  @Test
  void aPromptShapingFieldOfTheWrongTypeIsNamedBeforeAnUnknownModel() throws Exception {
    int port = replica.start();
    String chat = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    String[][] cases = {
        {"/v1/completions", "\"prompt\":\"a b\",\"add_special_tokens\":\"please\"",
            "'add_special_tokens'"},
        {"/v1/chat/completions", chat + ",\"add_special_tokens\":[]", "'add_special_tokens'"},
        {"/v1/chat/completions", chat + ",\"add_generation_prompt\":\"maybe\"",
            "'add_generation_prompt'"},
        {"/v1/chat/completions", chat + ",\"continue_final_message\":2",
            "'continue_final_message'"},
        {"/v1/chat/completions", chat + ",\"chat_template_kwargs\":[1]", "'chat_template_kwargs'"},
        {"/v1/chat/completions", chat + ",\"reasoning_effort\":1", "'reasoning_effort'"},
        {"/v1/chat/completions", chat + ",\"documents\":5", "'documents'"},
        {"/v1/chat/completions", chat + ",\"chat_template\":5", "'chat_template'"},
        {"/v1/chat/completions", chat + ",\"add_generation_prompt\":true,"
            + "\"continue_final_message\":true", "Cannot set both `continue_final_message`"},
        {"/tokenize", "\"prompt\":\"a b\",\"add_special_tokens\":\"please\"",
            "'add_special_tokens'"},
        {"/tokenize", chat + ",\"chat_template_kwargs\":\"x\"", "'chat_template_kwargs'"}};
    for (String[] c : cases) {
      assertError(port, c[0], "{" + UNKNOWN + "," + c[1] + "}", 400, c[2]);
    }
    // a request's own chat template is refused by vLLM's serving code, after the model
    assertError(port, "/v1/chat/completions", "{" + UNKNOWN + "," + chat
        + ",\"chat_template\":\"{{ messages }}\"}", 404, "model");
    assertError(port, "/v1/chat/completions", "{" + chat
        + ",\"chat_template\":\"{{ messages }}\"}", 400, "--trust-request-chat-template");
  }

  @Test
  void aMissingPromptOrChatIsNamedBeforeAnUnknownModel() throws Exception {
    int port = replica.start();
    // in the words of vLLM's request validator, which names the prompt without quotes
    assertError(port, "/v1/completions", "{" + UNKNOWN + ",\"max_tokens\":1}", 400,
        "Either prompt or prompt_embeds must be provided");
    assertError(port, "/v1/chat/completions", "{" + UNKNOWN + ",\"max_tokens\":1}", 400,
        "'messages'");
  }

  @Test
  void whatNeedsThePromptsTokensComesAfterTheModel() throws Exception {
    int port = replica.start();
    int vocab = HardwareProfile.qwen3H100Mps6().vocab();
    assertError(port, "/v1/completions", "{" + UNKNOWN + ",\"prompt\":[1," + vocab + "]}", 404,
        "model");
    // vLLM checks max_tokens >= 1 in its sampling parameters, after the model
    assertError(port, "/v1/completions", "{" + UNKNOWN + ",\"prompt\":[1,2,3],"
        + "\"max_tokens\":0}", 404, "model");
  }

  @Test
  void aFieldOfTheWrongTypeIsNamedBeforeAPromptOverTheContext() throws Exception {
    int port = replica.start();
    StringJoiner ids = new StringJoiner(",", "[", "]");
    for (int i = 0; i <= HardwareProfile.qwen3H100Mps6().maxModelLen(); i++) {
      ids.add("7");
    }
    assertError(port, "/v1/completions", "{\"prompt\":" + ids + ",\"max_tokens\":1,"
        + "\"return_token_ids\":\"please\"}", 400, "'return_token_ids'");
    assertError(port, "/v1/completions", "{\"prompt\":" + ids + ",\"max_tokens\":1,"
        + "\"stream\":true,\"stream_options\":{\"include_usage\":\"sure\"}}", 400,
        "'stream_options.include_usage'");
  }

  private void assertError(int port, String path, String body, int status, String named)
      throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(status);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText()).as(body.length() > 200
        ? body.substring(0, 200) : body).contains(named);
  }
}
