package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A chat completion's {@code reasoning_effort} as vLLM's request model types it: one of the
 * values of its {@code Literal} (none, minimal, low, medium, high, xhigh, max) or null; any
 * other value is a 400 naming the field, before the model is looked up.
 */
@Timeout(60)
class ServeReasoningEffortTest {
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"a b\"}],"
      + "\"max_tokens\":1";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void theValuesVllmTakesAreServed() throws Exception {
    int port = replica.start();
    for (String effort : new String[] {"\"none\"", "\"minimal\"", "\"low\"", "\"medium\"",
        "\"high\"", "\"xhigh\"", "\"max\"", "null"}) {
      HttpResponse<String> res = replica.post(port, "/v1/chat/completions", "{" + CHAT
          + ",\"reasoning_effort\":" + effort + "}");
      assertThat(res.statusCode()).as(effort + " " + res.body()).isEqualTo(200);
    }
  }

  @Test
  void anyOtherValueIsA400NamingTheFieldBeforeTheModel() throws Exception {
    int port = replica.start();
    for (String effort : new String[] {"\"extreme\"", "\"HIGH\"", "\"\"", "\" low\"", "1",
        "true", "[\"low\"]", "{}"}) {
      for (String model : new String[] {"", "\"model\":\"nope\","}) {
        JsonNode e = replica.refusal(port, "/v1/chat/completions", "{" + model + CHAT
            + ",\"reasoning_effort\":" + effort + "}");
        assertThat(e.get("message").asText()).as(model + effort)
            .isEqualTo("field 'reasoning_effort' must be one of none, minimal, low, medium,"
                + " high, xhigh, max");
        assertThat(e.get("type").asText()).isEqualTo("BadRequestError");
        assertThat(e.get("code").asInt()).isEqualTo(400);
      }
    }
  }
}
