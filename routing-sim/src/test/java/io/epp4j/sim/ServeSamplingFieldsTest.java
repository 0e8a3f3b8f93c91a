package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Fields vLLM turns into sampling parameters and refuses when it cannot: a json_schema response
 * format without its schema, and logit_bias keys that are not token IDs. Both are a 400 naming
 * the field, on the chat and the completions endpoint alike; what the client sent is not quoted.
 */
@Timeout(60)
class ServeSamplingFieldsTest {
  private static final String CHAT = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
      + "\"max_tokens\":2,";
  private static final String COMPLETION = "{\"prompt\":[1,2,3],\"max_tokens\":2,";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void aJsonSchemaResponseFormatWithoutItsSchemaIsRefused() throws Exception {
    int port = replica.start();
    for (String format : new String[] {"{\"type\":\"json_schema\"}",
        "{\"type\":\"json_schema\",\"json_schema\":null}"}) {
      for (String[] req : new String[][] {{"/v1/chat/completions", CHAT},
          {"/v1/completions", COMPLETION}}) {
        JsonNode e = replica.refusal(port, req[0], req[1] + "\"response_format\":" + format + "}");
        assertThat(e.get("param").asText()).as(req[0]).isEqualTo("response_format");
        assertThat(e.get("message").asText()).contains("'response_format.json_schema'");
      }
    }
    // the other formats need no schema
    assertThat(replica.post(port, "/v1/chat/completions",
        CHAT + "\"response_format\":{\"type\":\"json_object\"}}").statusCode()).isEqualTo(200);
    assertThat(replica.post(port, "/v1/chat/completions",
        CHAT + "\"response_format\":{\"type\":\"text\"}}").statusCode()).isEqualTo(200);
  }

  /**
   * A response format of a shape vLLM's request model does not take (its type, its
   * {@code json_schema}'s fields, a structural tag's) is a 400 naming the field, before the
   * model is looked up, as a field of the wrong type is; the shapes it takes are served.
   */
  @Test
  void aResponseFormatOfAnotherShapeIsRefusedBeforeTheModel() throws Exception {
    int port = replica.start();
    String[][] bad = {{"5", "'response_format'"}, {"{}", "'response_format'"},
        {"{\"type\":null}", "'response_format'"},
        {"{\"type\":\"xml\"}", "'response_format.type'"},
        {"{\"type\":\"json_schema\",\"json_schema\":5}", "'response_format.json_schema'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{}}", "'response_format.json_schema.name'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"schema\":[]}}",
            "'response_format.json_schema.schema'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"strict\":\"maybe\"}}",
            "'response_format.json_schema.strict'"},
        {"{\"type\":\"json_object\",\"json_schema\":{\"name\":7}}",
            "'response_format.json_schema.name'"},
        {"{\"type\":\"structural_tag\"}", "'response_format'"},
        {"{\"type\":\"structural_tag\",\"structures\":[{\"begin\":\"<a>\"}],\"triggers\":[]}",
            "'response_format'"}};
    for (String[] format : bad) {
      for (String[] req : new String[][] {{"/v1/chat/completions", CHAT},
          {"/v1/completions", COMPLETION}}) {
        for (String model : new String[] {"", "\"model\":\"nope\","}) {
          JsonNode e = replica.refusal(port, req[0],
              req[1] + model + "\"response_format\":" + format[0] + "}");
          assertThat(e.get("param").asText()).as(req[0] + " " + format[0])
              .isEqualTo("response_format");
          assertThat(e.get("message").asText()).as(format[0]).contains(format[1]);
        }
      }
    }
    for (String format : new String[] {"null", "{\"type\":\"text\",\"extra\":1}",
        "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"description\":null,"
            + "\"schema\":{\"type\":\"object\"},\"strict\":true}}",
        "{\"type\":\"structural_tag\",\"format\":{\"type\":\"any_text\"}}",
        "{\"type\":\"structural_tag\",\"structures\":[{\"begin\":\"<a>\",\"end\":\"</a>\","
            + "\"schema\":{}}],\"triggers\":[\"<a\"]}"}) {
      assertThat(replica.post(port, "/v1/chat/completions",
          CHAT + "\"response_format\":" + format + "}").statusCode()).as(format).isEqualTo(200);
    }
  }

  @Test
  void logitBiasKeysThatAreNoIntegersAreRefusedUnquoted() throws Exception {
    int port = replica.start();
    for (String[] req : new String[][] {{"/v1/chat/completions", CHAT},
        {"/v1/completions", COMPLETION}}) {
      for (String key : new String[] {"secretword", "1.5", "", "1__2"}) {
        JsonNode e = replica.refusal(port, req[0],
            req[1] + "\"logit_bias\":{\"7\":1,\"" + key + "\":2}}");
        assertThat(e.get("param").asText()).as(req[0] + " " + key).isEqualTo("logit_bias");
        assertThat(e.get("message").asText()).contains("'logit_bias'");
        if (!key.isEmpty()) {
          assertThat(e.get("message").asText()).doesNotContain(key);
        }
      }
      // keys Python's int() reads are token IDs
      assertThat(replica.post(port, req[0],
          req[1] + "\"logit_bias\":{\"7\":1,\" 12 \":-2,\"+3\":0,\"1_0\":5}}").statusCode())
          .as(req[0]).isEqualTo(200);
    }
  }

  /**
   * logit_bias token IDs outside the model's vocabulary (151,936 rows for the default profile's
   * Qwen3) are refused in vLLM's words, each ID once in the order the keys give it, once the
   * sampling parameters' ranges have been checked.
   */
  @Test
  void logitBiasTokenIdsOutsideTheVocabularyAreRefusedInVllmsWords() throws Exception {
    int port = replica.start();
    for (String[] req : new String[][] {{"/v1/chat/completions", CHAT},
        {"/v1/completions", COMPLETION}}) {
      JsonNode e = replica.refusal(port, req[0], req[1] + "\"logit_bias\":{\"7\":1,"
          + "\"-1\":2,\"151936\":0,\"0151936\":1,\" 2_000_000_000_000 \":1}}");
      assertThat(e.get("param").asText()).as(req[0]).isEqualTo("logit_bias");
      assertThat(e.get("message").asText()).isEqualTo("token_id(s) [-1, 151936, 2000000000000]"
          + " in logit_bias contain out-of-vocab token ids. Vocabulary size: 151936"
          + " (parameter=logit_bias, value=[-1, 151936, 2000000000000])");
      // the last row of the vocabulary is a token ID
      assertThat(replica.post(port, req[0], req[1] + "\"logit_bias\":{\"151935\":-100}}")
          .statusCode()).as(req[0]).isEqualTo(200);
      // a sampling parameter out of its range is refused first
      assertThat(replica.refusal(port, req[0], req[1] + "\"temperature\":5,"
          + "\"logit_bias\":{\"151936\":1}}").get("message").asText()).startsWith("temperature");
    }
  }

  /**
   * A logit_bias that is not an object of numbers (vLLM's request model types it as
   * {@code dict[str, float]}) is a 400 naming it before the model is looked up; numbers written
   * as strings, and booleans, are numbers, as in pydantic's lax mode.
   */
  @Test
  void aLogitBiasThatIsNoObjectOfNumbersIsRefusedBeforeTheModel() throws Exception {
    int port = replica.start();
    for (String bias : new String[] {"5", "[[7,1]]", "\"7\"", "{\"7\":null}", "{\"7\":\"high\"}",
        "{\"7\":[1]}", "{\"7\":{}}"}) {
      for (String[] req : new String[][] {{"/v1/chat/completions", CHAT},
          {"/v1/completions", COMPLETION}}) {
        JsonNode e = replica.refusal(port, req[0],
            req[1] + "\"model\":\"nope\",\"logit_bias\":" + bias + "}");
        assertThat(e.get("param").asText()).as(req[0] + " " + bias).isEqualTo("logit_bias");
        assertThat(e.get("message").asText()).contains("'logit_bias'");
      }
    }
    assertThat(replica.post(port, "/v1/chat/completions",
        CHAT + "\"logit_bias\":{\"7\":\"-1.5\",\"8\":2,\"9\":0.5,\"10\":true}}").statusCode())
        .isEqualTo(200);
    assertThat(replica.post(port, "/v1/chat/completions", CHAT + "\"logit_bias\":null}")
        .statusCode()).isEqualTo(200);
  }
}
