package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Details of vLLM's answers that a client can see. vLLM writes a stream's chunks without their
 * unset fields ({@code model_dump_json(exclude_unset=True)} in its chat and completion servers), so
 * a chunk carries {@code usage} only with {@code continuous_usage_stats}; the emulator wrote
 * {@code "usage": null} in every chunk once {@code include_usage} was asked for. And vLLM's
 * {@code /metrics} is also a mount of prometheus_client's ASGI app, which answers any method:
 * the emulator does too.
 */
@Timeout(60)
class ServeStreamUsageTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private static List<JsonNode> chunks(String body) throws Exception {
    List<JsonNode> events = new ArrayList<>();
    for (String line : body.split("\n")) {
      if (line.startsWith("data: ") && !line.equals("data: [DONE]")) {
        events.add(JSON.readTree(line.substring(6)));
      }
    }
    return events;
  }

  @Test
  void aChunkHasNoUsageKeyUnlessContinuousUsageIsAsked() throws Exception {
    int port = replica.start();
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String prompt = path.endsWith("chat/completions")
          ? "\"messages\":[{\"role\":\"user\",\"content\":\"a b c\"}]"
          : "\"prompt\":[1,2,3,4]";
      for (String options : List.of("", ",\"stream_options\":{\"include_usage\":true}")) {
        HttpResponse<String> res = replica.post(port, path, "{" + prompt + ",\"max_tokens\":3,"
            + "\"stream\":true" + options + "}");
        assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
        List<JsonNode> chunks = chunks(res.body());
        for (JsonNode chunk : chunks) {
          if (chunk.get("choices").isEmpty()) {
            // the usage chunk that include_usage asks for
            assertThat(options).isNotEmpty();
            assertThat(chunk.get("usage").isObject()).isTrue();
          } else {
            assertThat(chunk.has("usage")).as(path + options + ": " + chunk).isFalse();
          }
        }
      }
    }
  }

  @Test
  void metricsAnswerAnyMethodAsVllmsMountedAsgiAppDoes() throws Exception {
    int port = replica.start();
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    for (String method : List.of("GET", "POST", "PUT")) {
      HttpResponse<String> res = http.send(HttpRequest.newBuilder(
          URI.create("http://127.0.0.1:" + port + "/metrics")).timeout(Duration.ofSeconds(30))
          .method(method, HttpRequest.BodyPublishers.noBody()).build(),
          HttpResponse.BodyHandlers.ofString());
      assertThat(res.statusCode()).as(method).isEqualTo(200);
      assertThat(res.body()).as(method).contains("vllm:num_requests_waiting");
    }
  }
}
