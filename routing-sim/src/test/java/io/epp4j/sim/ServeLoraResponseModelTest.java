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
 * An answer names the model the request ran on: vLLM's completions and chat completions put the
 * LoRA adapter's name in {@code model} ({@code OpenAIServingModels.model_name(lora_request)}),
 * so that a gateway accounting per adapter can tell its answers apart; the emulator named the
 * base model whatever the request asked for.
 */
@Timeout(60)
class ServeLoraResponseModelTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void everyAnswerNamesTheAdapterTheRequestNamed() throws Exception {
    int port = replica.start(List.of("sql"));
    String base = HardwareProfile.qwen3H100Mps6().model();
    for (String model : List.of("sql", base)) {
      for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
        String prompt = path.endsWith("chat/completions")
            ? "\"messages\":[{\"role\":\"user\",\"content\":\"a b c\"}]"
            : "\"prompt\":[1,2,3,4]";
        String what = model + " " + path;
        HttpResponse<String> whole = replica.post(port, path,
            "{\"model\":\"" + model + "\"," + prompt + ",\"max_tokens\":2}");
        assertThat(whole.statusCode()).as(what + ": " + whole.body()).isEqualTo(200);
        assertThat(JSON.readTree(whole.body()).get("model").asText()).as(what).isEqualTo(model);
        HttpResponse<String> streamed = replica.post(port, path,
            "{\"model\":\"" + model + "\"," + prompt + ",\"max_tokens\":2,\"stream\":true}");
        assertThat(streamed.statusCode()).as(what + ": " + streamed.body()).isEqualTo(200);
        int chunks = 0;
        for (String line : streamed.body().split("\n")) {
          if (line.startsWith("data: {")) {
            JsonNode chunk = JSON.readTree(line.substring(6));
            assertThat(chunk.get("model").asText()).as(what + ": " + line).isEqualTo(model);
            chunks++;
          }
        }
        assertThat(chunks).as(what).isGreaterThanOrEqualTo(2);
      }
    }
  }
}
