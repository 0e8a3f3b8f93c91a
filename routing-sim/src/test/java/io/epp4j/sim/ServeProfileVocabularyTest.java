package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The token IDs the stand-in makes up (its one-token-per-word tokenizer and its filler output)
 * lie in the ordinary vocabulary of the profile's model: Llama 3.1's 128,000 tokens (its 128,256
 * rows end with 256 special tokens) for {@code llama3.1-8b-h100}, not Qwen3's 151,643, of which a
 * sixth are IDs Llama's tokenizer cannot decode or names special.
 */
@Timeout(60)
class ServeProfileVocabularyTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final int LLAMA_ORDINARY_TOKENS = 128_000;
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private int startLlama() {
    return replica.start(base -> new Serve.Options(1, base, base + 1_000, false, 20,
        HardwareProfile.llama31H100(), 1, List.of(), null));
  }

  @Test
  void generatedTokenIdsAreLlamasOrdinaryTokens() throws Exception {
    int port = startLlama();
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":300,\"return_token_ids\":true}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    JsonNode ids = JSON.readTree(res.body()).at("/choices/0/token_ids");
    assertThat(ids.size()).isEqualTo(300);
    for (JsonNode id : ids) {
      assertThat(id.asInt()).isBetween(0, LLAMA_ORDINARY_TOKENS - 1);
    }
  }

  @Test
  void textIsTokenizedIntoLlamasOrdinaryTokens() throws Exception {
    int port = startLlama();
    StringBuilder text = new StringBuilder();
    for (int i = 0; i < 300; i++) {
      text.append("word").append(i).append(' ');
    }
    HttpResponse<String> res = replica.post(port, "/tokenize",
        "{\"prompt\":\"" + text + "\"}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    JsonNode ids = JSON.readTree(res.body()).get("tokens");
    assertThat(ids.size()).isEqualTo(300);
    for (JsonNode id : ids) {
      assertThat(id.asInt()).isBetween(0, LLAMA_ORDINARY_TOKENS - 1);
    }
  }
}
