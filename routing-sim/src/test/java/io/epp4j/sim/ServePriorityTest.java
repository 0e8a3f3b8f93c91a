package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A request's {@code priority}: vLLM's request model types it an integer (not null); its engine,
 * without {@code --scheduling-policy priority} (first come, first served, as the emulated engine
 * schedules), refuses any other than 0 once the model is found, in its words.
 */
@Timeout(60)
class ServePriorityTest {
  private static final String COMPLETION = "\"prompt\":\"a b\",\"max_tokens\":1";
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"a b\"}],"
      + "\"max_tokens\":1";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void aPriorityOfZeroIsServed() throws Exception {
    int port = replica.start();
    for (String p : new String[] {"0", "\"0\"", "0.0", "false"}) {
      for (String[] c : new String[][] {{"/v1/completions", COMPLETION},
          {"/v1/chat/completions", CHAT}}) {
        HttpResponse<String> res = replica.post(port, c[0], "{" + c[1] + ",\"priority\":" + p
            + "}");
        assertThat(res.statusCode()).as(c[0] + " " + p + " " + res.body()).isEqualTo(200);
      }
    }
    // /tokenize's request model has no priority: ignored there
    assertThat(replica.post(port, "/tokenize", "{\"prompt\":\"a b\",\"priority\":5}")
        .statusCode()).isEqualTo(200);
  }

  @Test
  void anyOtherPriorityIsRefusedInVllmsWordsAfterTheModel() throws Exception {
    int port = replica.start();
    for (String[] p : new String[][] {{"5", "5"}, {"-1", "-1"}, {"\"10\"", "10"},
        {"true", "1"}}) {
      for (String[] c : new String[][] {{"/v1/completions", COMPLETION},
          {"/v1/chat/completions", CHAT}}) {
        JsonNode e = replica.refusal(port, c[0], "{" + c[1] + ",\"priority\":" + p[0] + "}");
        assertThat(e.get("message").asText()).as(c[0] + " " + p[0])
            .isEqualTo("Got priority " + p[1] + " but Priority scheduling is not enabled.");
        assertThat(e.get("type").asText()).isEqualTo("BadRequestError");
        assertThat(replica.post(port, c[0], "{\"model\":\"nope\"," + c[1] + ",\"priority\":"
            + p[0] + "}").statusCode()).as(c[0] + " " + p[0]).isEqualTo(404);
      }
    }
  }

  @Test
  void aPriorityThatIsNoIntegerIsNamedBeforeTheModel() throws Exception {
    int port = replica.start();
    for (String p : new String[] {"null", "1.5", "\"high\"", "[]", "9223372036854775808"}) {
      JsonNode e = replica.refusal(port, "/v1/completions", "{\"model\":\"nope\"," + COMPLETION
          + ",\"priority\":" + p + "}");
      assertThat(e.get("message").asText()).as(p).contains("'priority'");
    }
  }
}
