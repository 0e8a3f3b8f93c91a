package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The sampling parameters the filler output does not use are still checked as vLLM checks them:
 * a value that is not a number is refused naming the field, one out of vLLM's range in its
 * sampling parameters' words, instead of being accepted and ignored.
 */
@Timeout(60)
class ServeSamplingRangesTest {
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void valuesOutOfVllmsRangesAreRefusedInItsWords() throws Exception {
    int port = replica.start();
    String c = "/v1/completions";
    String p = "{\"prompt\":[1,2,3],\"max_tokens\":2,";
    assertThat(replica.refusal(port, c, p + "\"temperature\":3}").get("message").asText())
        .isEqualTo("temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)");
    assertThat(replica.refusal(port, c, p + "\"temperature\":-0.5}").get("message").asText())
        .isEqualTo("temperature must be non-negative, got -0.5."
            + " (parameter=temperature, value=-0.5)");
    assertThat(replica.refusal(port, "/v1/chat/completions", "{" + CHAT + ",\"top_p\":0}")
        .get("message").asText())
        .isEqualTo("top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)");
    assertThat(replica.refusal(port, c, p + "\"presence_penalty\":2.5}").get("message").asText())
        .isEqualTo("presence_penalty must be in [-2, 2], got 2.5.");
    assertThat(replica.refusal(port, c, p + "\"frequency_penalty\":-3}").get("message").asText())
        .isEqualTo("frequency_penalty must be in [-2, 2], got -3.0.");
    assertThat(replica.refusal(port, c, p + "\"repetition_penalty\":0}").get("message").asText())
        .isEqualTo("repetition_penalty must be greater than zero, got 0.0.");
    // in vLLM's order: the penalties before the temperature
    assertThat(replica.refusal(port, c, p + "\"temperature\":9,\"presence_penalty\":9}")
        .get("message").asText()).startsWith("presence_penalty");
  }

  @Test
  void valuesInRangeOrLeftOutAreServed() throws Exception {
    int port = replica.start();
    for (String ok : new String[] {"\"temperature\":0", "\"temperature\":2", "\"top_p\":1",
        "\"top_p\":\"0.5\"", "\"temperature\":null", "\"presence_penalty\":-2",
        "\"repetition_penalty\":1.3"}) {
      HttpResponse<String> res = replica.post(port, "/v1/completions",
          "{\"prompt\":[1,2,3],\"max_tokens\":1," + ok + "}");
      assertThat(res.statusCode()).as(ok + ": " + res.body()).isEqualTo(200);
    }
  }

  @Test
  void aValueThatIsNotANumberIsNamed() throws Exception {
    int port = replica.start();
    JsonNode e = replica.refusal(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":1,\"temperature\":\"warm\"}");
    assertThat(e.get("message").asText()).contains("'temperature'").doesNotContain("warm");
    assertThat(e.get("param").asText()).isEqualTo("temperature");
  }

  @Test
  void floatsAreWrittenAsPythonWritesThem() {
    assertThat(EmulatedServer.pyFloat(3)).isEqualTo("3.0");
    assertThat(EmulatedServer.pyFloat(-0.5)).isEqualTo("-0.5");
    assertThat(EmulatedServer.pyFloat(1e-5)).isEqualTo("1e-05");
    assertThat(EmulatedServer.pyFloat(2.5e20)).isEqualTo("2.5e+20");
    assertThat(EmulatedServer.pyFloat(123456789.0)).isEqualTo("123456789.0");
    assertThat(EmulatedServer.pyFloat(Double.POSITIVE_INFINITY)).isEqualTo("inf");
  }
}
