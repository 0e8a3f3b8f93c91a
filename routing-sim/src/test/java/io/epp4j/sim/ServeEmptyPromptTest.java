package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A completion without a prompt is refused as vLLM refuses it: a prompt left out, null or
 * {@code ""} by the request model's validator, before the model is looked up or the stream
 * options are checked; a list that holds no token ({@code []}, {@code [[]]}, or {@code [""]},
 * which passes the validator and is tokenized, to no token with the stand-in, and to the
 * tokenizer's special tokens with a tokenizer that adds some: see {@code ServeTokenizerTest}) by
 * the engine, once the model is found. Each is a 400 in vLLM's words, with no param, as vLLM's
 * names none.
 */
@Timeout(60)
class ServeEmptyPromptTest {
  private static final String VALIDATOR =
      "Either prompt or prompt_embeds must be provided and non-empty.";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @ParameterizedTest
  @ValueSource(strings = {"\"prompt\":\"\",", "\"prompt\":null,", "",
      "\"prompt\":\"\",\"prompt_embeds\":[],", "\"prompt_embeds\":null,"})
  void aMissingOrEmptyTextPromptIsTheRequestModelsRefusal(String prompt) throws Exception {
    int port = replica.start();
    // a model no replica serves and stream options without a stream: vLLM's validator of the
    // prompt runs before both are looked at
    JsonNode error = replica.refusal(port, "/v1/completions", "{" + prompt
        + "\"model\":\"no-such-model\",\"max_tokens\":1,\"stream_options\":{\"include_usage\":true}}");
    assertThat(error.path("type").asText()).isEqualTo("BadRequestError");
    assertThat(error.path("message").asText()).isEqualTo(VALIDATOR);
    assertThat(error.path("param").isNull()).isTrue();
    assertThat(error.path("code").asInt()).isEqualTo(400);
  }

  @ParameterizedTest
  @ValueSource(strings = {"[]", "[[]]", "[\"\"]"})
  void aPromptListWithoutTokensIsTheEnginesRefusal(String prompt) throws Exception {
    int port = replica.start();
    JsonNode error = replica.refusal(port, "/v1/completions",
        "{\"prompt\":" + prompt + ",\"max_tokens\":1}");
    assertThat(error.path("type").asText()).isEqualTo("BadRequestError");
    assertThat(error.path("message").asText()).isEqualTo("The decoder prompt cannot be empty");
    assertThat(error.path("param").isNull()).isTrue();
    // the engine's check comes after the model's: another model name is a 404 first
    assertThat(replica.post(port, "/v1/completions", "{\"model\":\"no-such-model\",\"prompt\":"
        + prompt + ",\"max_tokens\":1}").statusCode()).isEqualTo(404);
  }
}
