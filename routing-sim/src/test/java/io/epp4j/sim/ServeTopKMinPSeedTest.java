package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * top_k, min_p, seed and n are read as vLLM reads them: a value of the wrong type is refused
 * naming the field, one out of vLLM's range in its sampling parameters' words, and a seed makes
 * the same prompt generate the same token IDs.
 */
@Timeout(60)
class ServeTopKMinPSeedTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String C = "/v1/completions";
  private static final String P = "{\"prompt\":[1,2,3],\"max_tokens\":2,";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private String message(int port, String path, String body) throws Exception {
    return replica.refusal(port, path, body).get("message").asText();
  }

  @Test
  void valuesOutOfVllmsRangesAreRefusedInItsWords() throws Exception {
    int port = replica.start();
    assertThat(message(port, C, P + "\"top_k\":-2}"))
        .isEqualTo("top_k must be 0 (disable), or at least 1, got -2.");
    assertThat(message(port, C, P + "\"min_p\":1.5}"))
        .isEqualTo("min_p must be in [0, 1], got 1.5.");
    assertThat(message(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"hi\"}],\"min_p\":-0.1}"))
        .isEqualTo("min_p must be in [0, 1], got -0.1.");
    assertThat(message(port, C, P + "\"n\":0}")).isEqualTo("n must be at least 1, got 0.");
    // in vLLM's order: n first, top_p before top_k, top_k before min_p
    assertThat(message(port, C, P + "\"n\":0,\"temperature\":9}")).startsWith("n must");
    assertThat(message(port, C, P + "\"top_k\":-5,\"top_p\":0}")).startsWith("top_p");
    assertThat(message(port, C, P + "\"top_k\":-5,\"min_p\":2}")).startsWith("top_k");
  }

  @Test
  void valuesOfTheWrongTypeAreNamed() throws Exception {
    int port = replica.start();
    for (String[] c : new String[][] {{"top_k", "1.5"}, {"top_k", "\"many\""},
        {"min_p", "\"low\""}, {"seed", "\"abc\""}, {"seed", "9223372036854775808"},
        {"seed", "0.5"}}) {
      JsonNode e = replica.refusal(port, C, P + "\"" + c[0] + "\":" + c[1] + "}");
      assertThat(e.get("message").asText()).as(c[1]).contains("'" + c[0] + "'");
      assertThat(e.get("param").asText()).isEqualTo(c[0]);
    }
  }

  @Test
  void valuesInRangeAreServed() throws Exception {
    int port = replica.start();
    for (String ok : new String[] {"\"top_k\":0", "\"top_k\":-1", "\"top_k\":40",
        "\"min_p\":0", "\"min_p\":1", "\"min_p\":\"0.05\"", "\"seed\":-1",
        "\"seed\":9223372036854775807", "\"seed\":\"7\"", "\"top_k\":null"}) {
      HttpResponse<String> res = replica.post(port, C, P + ok + "}");
      assertThat(res.statusCode()).as(ok + ": " + res.body()).isEqualTo(200);
    }
  }

  @Test
  void aSeedMakesTheSamePromptGenerateTheSameTokens() throws Exception {
    int port = replica.start();
    String seeded = "{\"prompt\":[5,6,7],\"max_tokens\":8,\"return_token_ids\":true,"
        + "\"seed\":42}";
    JsonNode first = ids(port, seeded);
    assertThat(ids(port, seeded)).isEqualTo(first);
    // without a seed, each request draws its own
    String unseeded = "{\"prompt\":[5,6,7],\"max_tokens\":8,\"return_token_ids\":true}";
    assertThat(ids(port, unseeded)).isNotEqualTo(ids(port, unseeded));
  }

  private JsonNode ids(int port, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, C, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    JsonNode ids = JSON.readTree(res.body()).at("/choices/0/token_ids");
    assertThat(ids.size()).isEqualTo(8);
    return ids;
  }
}
