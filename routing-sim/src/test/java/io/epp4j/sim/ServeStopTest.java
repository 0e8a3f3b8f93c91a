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
 * Stop strings end the answer as in vLLM: the text is cut before the stop string (kept with
 * include_stop_str_in_output), the answer ends with finish_reason "stop" and stop_reason naming
 * the string, the engine generates no token past the one that completed it, and a stream holds
 * back what a stop string could still begin with. The filler output is " lorem" per token.
 */
@Timeout(60)
class ServeStopTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private JsonNode whole(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return JSON.readTree(res.body());
  }

  @Test
  void aStopStringCutsACompletionAndEndsItsGeneration() throws Exception {
    int port = replica.start();
    JsonNode a = whole(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":10,\"stop\":\"em lo\"}");
    JsonNode c = a.at("/choices/0");
    // " lorem lorem": "em lo" is completed by the second token
    assertThat(c.get("text").asText()).isEqualTo(" lor");
    assertThat(c.get("finish_reason").asText()).isEqualTo("stop");
    assertThat(c.get("stop_reason").asText()).isEqualTo("em lo");
    assertThat(a.at("/usage/completion_tokens").asInt()).isEqualTo(2);

    // kept in the output on request; the first of a list found in the token that completes it
    c = whole(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":10,"
        + "\"stop\":[\"xyz\",\"rem\"],\"include_stop_str_in_output\":true}").at("/choices/0");
    assertThat(c.get("text").asText()).isEqualTo(" lorem");
    assertThat(c.get("stop_reason").asText()).isEqualTo("rem");

    // a stop string the answer never holds changes nothing
    c = whole(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":3,\"stop\":[\"xyz\"]}").at("/choices/0");
    assertThat(c.get("text").asText()).isEqualTo(" lorem lorem lorem");
    assertThat(c.get("finish_reason").asText()).isEqualTo("length");
    assertThat(c.get("stop_reason").isNull()).isTrue();
  }

  @Test
  void minTokensComeBeforeAnyStopString() throws Exception {
    int port = replica.start();
    JsonNode a = whole(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"hi\"}],\"max_tokens\":10,\"min_tokens\":3,\"stop\":\"lorem\"}");
    // tokens 1 to 3 are not checked; the fourth completes "lorem" again
    assertThat(a.at("/choices/0/message/content").asText()).isEqualTo(" lorem lorem lorem ");
    assertThat(a.at("/choices/0/stop_reason").asText()).isEqualTo("lorem");
    assertThat(a.at("/usage/completion_tokens").asInt()).isEqualTo(4);
  }

  @Test
  void aStreamHoldsBackWhatAStopStringCouldBeginWith() throws Exception {
    int port = replica.start();
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":3,\"stream\":true,\"stop\":[\"xyz\"]}");
    List<JsonNode> chunks = chunks(res.body());
    assertThat(chunks).hasSize(3);
    // two characters held back until the answer ends
    assertThat(chunks.get(0).at("/choices/0/text").asText()).isEqualTo(" lor");
    assertThat(chunks.get(1).at("/choices/0/text").asText()).isEqualTo("em lor");
    assertThat(chunks.get(2).at("/choices/0/text").asText()).isEqualTo("em lorem");
    assertThat(chunks.get(2).at("/choices/0/stop_reason").isNull()).isTrue();

    res = replica.post(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"hi\"}],\"max_tokens\":9,\"stream\":true,\"stop\":\"m lo\"}");
    chunks = chunks(res.body());
    // the role chunk, then one per token: the second completes the stop string
    assertThat(chunks).hasSize(3);
    StringBuilder text = new StringBuilder();
    for (JsonNode c : chunks) {
      text.append(c.at("/choices/0/delta/content").asText());
    }
    assertThat(text.toString()).isEqualTo(" lore");
    JsonNode last = chunks.get(2).at("/choices/0");
    assertThat(last.get("finish_reason").asText()).isEqualTo("stop");
    assertThat(last.get("stop_reason").asText()).isEqualTo("m lo");
  }

  @Test
  void badStopFieldsAreRefusedNamingThem() throws Exception {
    int port = replica.start();
    String p = "{\"prompt\":[1,2,3],\"max_tokens\":2,";
    assertThat(replica.refusal(port, "/v1/completions", p + "\"stop\":[\"a\",\"\"]}")
        .get("message").asText()).isEqualTo("stop cannot contain an empty string.");
    assertThat(replica.refusal(port, "/v1/completions", p + "\"stop\":[1]}")
        .get("param").asText()).isEqualTo("stop");
    assertThat(replica.refusal(port, "/v1/completions", p + "\"stop_token_ids\":[\"x\"]}")
        .get("param").asText()).isEqualTo("stop_token_ids");
    // an ordinary token the filler may generate is refused; a special token is served
    JsonNode e = replica.refusal(port, "/v1/completions", p + "\"stop_token_ids\":[100]}");
    assertThat(e.get("param").asText()).isEqualTo("stop_token_ids");
    int special = HardwareProfile.qwen3H100Mps6().ordinaryTokens() + 2;
    assertThat(replica.post(port, "/v1/completions", p + "\"stop_token_ids\":[" + special
        + "]}").statusCode()).isEqualTo(200);
  }

  private static List<JsonNode> chunks(String sse) throws Exception {
    List<JsonNode> out = new ArrayList<>();
    for (String line : sse.split("\n")) {
      if (line.startsWith("data: {")) {
        JsonNode n = JSON.readTree(line.substring(6));
        if (n.get("choices").size() > 0) {
          out.add(n);
        }
      }
    }
    return out;
  }
}
