package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The answer of {@code /tokenize} has every field of vLLM's {@code TokenizeResponse}, in its
 * order, as vLLM writes it whole: {@code count}, {@code max_model_len}, {@code tokens} and
 * {@code token_strs}, null when the token strings were not asked for. A client that reads
 * {@code token_strs} finds the key it finds on vLLM. The token strings themselves
 * ({@code return_token_strs} true) are not given, and asking for them is a 400 naming the field,
 * not an answer that leaves them out.
 */
@Timeout(60)
class ServeTokenizeAnswerTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void aTokenizeAnswerHasVllmsFieldsTokenStringsNull() throws Exception {
    int port = replica.start();
    for (String body : List.of("{\"prompt\":\"a b c\"}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a b c\"}]}")) {
      HttpResponse<String> res = replica.post(port, "/tokenize", body);
      assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
      JsonNode answer = JSON.readTree(res.body());
      List<String> names = new ArrayList<>();
      answer.fieldNames().forEachRemaining(names::add);
      assertThat(names).as(body).containsExactly("count", "max_model_len", "tokens",
          "token_strs");
      assertThat(answer.get("token_strs").isNull()).as(body).isTrue();
      assertThat(answer.get("count").asInt()).isEqualTo(answer.get("tokens").size());
    }
  }

  @Test
  void askingForTheTokenStringsIsRefusedNotAnsweredWithout() throws Exception {
    int port = replica.start();
    for (String body : List.of("{\"prompt\":\"a b c\"", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"a b c\"}]")) {
      JsonNode e = replica.refusal(port, "/tokenize", body + ",\"return_token_strs\":true}");
      assertThat(e.get("message").asText()).as(body).contains("'return_token_strs'");
      assertThat(e.get("param").asText()).isEqualTo("return_token_strs");
      // a value that is no boolean is the request model's refusal, before the model's 404
      assertThat(replica.refusal(port, "/tokenize", body + ",\"model\":\"nope\","
          + "\"return_token_strs\":\"all\"}").get("message").asText()).as(body)
          .contains("'return_token_strs' must be a boolean");
      // as vLLM computes the strings once the model is found, an unknown model comes first
      assertThat(replica.post(port, "/tokenize", body + ",\"model\":\"nope\","
          + "\"return_token_strs\":true}").statusCode()).as(body).isEqualTo(404);
      // not asking, false or null, is answered
      for (String no : List.of("false", "null")) {
        assertThat(replica.post(port, "/tokenize", body + ",\"return_token_strs\":" + no + "}")
            .statusCode()).as(body + no).isEqualTo(200);
      }
    }
  }
}
