package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Token IDs beyond the model's vocabulary: vLLM refuses them with a 400 ("Token id N is out of
 * vocabulary", the processor's check against the tokenizer's largest ID) before they reach
 * the engine; the emulator answered them and put them in its KV events.
 */
@Timeout(60)
class ServePromptTokenIdsTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void tokenIdsBeyondTheVocabularyAreRefused() throws Exception {
    int port = replica.start();
    int vocab = HardwareProfile.qwen3H100Mps6().vocab();
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":[1,2," + vocab + "],\"max_tokens\":1}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText()).contains("vocabulary");

    HttpResponse<String> last = replica.post(port, "/v1/completions",
        "{\"prompt\":[1,2," + (vocab - 1) + "],\"max_tokens\":1}");
    assertThat(last.statusCode()).as(last.body()).isEqualTo(200);
  }
}
