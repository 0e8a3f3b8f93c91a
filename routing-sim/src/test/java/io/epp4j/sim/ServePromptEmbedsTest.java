package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A completion's {@code prompt_embeds}, which vLLM takes only with {@code --enable-prompt-embeds}
 * and the emulated replica not at all: embeddings given, with a prompt or without, are refused
 * in vLLM's words once the model is found, never served as the prompt alone; a value that is not
 * base64 strings is named before the model check; a chat, whose request model has no such field,
 * ignores it.
 */
@Timeout(60)
class ServePromptEmbedsTest {
  private static final String EMBEDS_REFUSED = "You must set `--enable-prompt-embeds` to input"
      + " `prompt_embeds`. (parameter=prompt_embeds)";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void embeddingsAreRefusedWithAPromptOrWithout() throws Exception {
    int port = replica.start();
    for (String body : List.of("{\"prompt\":\"hi\",\"prompt_embeds\":\"AAAA\"}",
        "{\"prompt_embeds\":\"AAAA\"}", "{\"prompt_embeds\":[\"AAAA\"],\"prompt\":[1,2]}")) {
      JsonNode error = replica.refusal(port, "/v1/completions", body);
      assertThat(error.get("message").asText()).as(body).isEqualTo(EMBEDS_REFUSED);
      assertThat(error.get("param").asText()).isEqualTo("prompt_embeds");
    }
    // after the model check
    assertThat(replica.post(port, "/v1/completions",
        "{\"prompt_embeds\":[\"AAAA\"],\"model\":\"no-such-model\"}").statusCode())
        .isEqualTo(404);
    // none given is none: null, []
    for (String none : List.of("null", "[]")) {
      assertThat(replica.post(port, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2,"
          + "\"prompt_embeds\":" + none + "}").statusCode()).as(none).isEqualTo(200);
    }
  }

  @Test
  void aValueOfAnotherTypeIsNamedBeforeTheModelCheckAndAChatIgnoresIt() throws Exception {
    int port = replica.start();
    for (String bad : List.of("5", "{}", "[1]", "[[\"AAAA\"]]", "true")) {
      JsonNode error = replica.refusal(port, "/v1/completions", "{\"prompt\":\"hi\","
          + "\"model\":\"no-such-model\",\"prompt_embeds\":" + bad + "}");
      assertThat(error.get("message").asText()).as(bad)
          .startsWith("field 'prompt_embeds' must be ");
      assertThat(error.get("param").asText()).isEqualTo("prompt_embeds");
    }
    assertThat(replica.post(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"hi\"}],\"max_tokens\":2,\"prompt_embeds\":5}").statusCode())
        .isEqualTo(200);
  }
}
