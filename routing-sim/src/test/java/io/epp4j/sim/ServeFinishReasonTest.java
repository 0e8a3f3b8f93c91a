package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Without a limit from the client (a chat without {@code max_tokens}, or with it null) vLLM
 * generates until the model ends its answer, and says {@code "stop"}; the emulated model ends it
 * after 16 tokens, and says so too. A limit the client set, the completions' default of 16 (left
 * out or null), or the context's end is {@code "length"}. Clients act on
 * the difference: the OpenAI SDK's {@code parse()} raises on {@code "length"} as a cut answer.
 */
@Timeout(60)
class ServeFinishReasonTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}]";
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

  /** The stream's events before {@code [DONE]}. */
  private List<JsonNode> streamed(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    List<JsonNode> events = new ArrayList<>();
    for (String line : res.body().split("\n")) {
      if (line.startsWith("data: ") && !line.equals("data: [DONE]")) {
        events.add(JSON.readTree(line.substring(6)));
      }
    }
    return events;
  }

  @Test
  void anAnswerTheModelEndedItselfIsStopAndOneCutByALimitIsLength() throws Exception {
    int port = replica.start();
    String chats = "/v1/chat/completions";
    String completions = "/v1/completions";

    JsonNode own = whole(port, chats, "{" + CHAT + "}");
    assertThat(own.at("/choices/0/finish_reason").asText()).isEqualTo("stop");
    assertThat(own.at("/usage/completion_tokens").asInt())
        .isEqualTo(EmulatedServer.DEFAULT_MAX_TOKENS);
    assertThat(whole(port, chats, "{" + CHAT + ",\"max_tokens\":null}")
        .at("/choices/0/finish_reason").asText()).isEqualTo("stop");
    List<JsonNode> ownStream = streamed(port, chats, "{" + CHAT + ",\"stream\":true}");
    assertThat(ownStream.get(ownStream.size() - 1).at("/choices/0/finish_reason").asText())
        .isEqualTo("stop");
    for (int i = 0; i < ownStream.size() - 1; i++) {
      assertThat(ownStream.get(i).at("/choices/0/finish_reason").isNull()).isTrue();
    }

    // a limit the client set, even one of 16, and the completions' default of 16
    assertThat(whole(port, chats, "{" + CHAT + ",\"max_tokens\":16}")
        .at("/choices/0/finish_reason").asText()).isEqualTo("length");
    assertThat(whole(port, chats, "{" + CHAT + ",\"max_completion_tokens\":3}")
        .at("/choices/0/finish_reason").asText()).isEqualTo("length");
    assertThat(whole(port, completions, "{\"prompt\":[1,2,3]}")
        .at("/choices/0/finish_reason").asText()).isEqualTo("length");
    assertThat(whole(port, completions, "{\"prompt\":[1,2,3],\"max_tokens\":null}")
        .at("/choices/0/finish_reason").asText()).isEqualTo("length");
    List<JsonNode> limited = streamed(port, completions,
        "{\"prompt\":[1,2,3],\"max_tokens\":2,\"stream\":true}");
    assertThat(limited.get(limited.size() - 1).at("/choices/0/finish_reason").asText())
        .isEqualTo("length");

    // no limit, but the context ends before the model would have: a chat of maxLen - 3 stand-in
    // tokens ("user:", one per word, then the generation prompt "assistant:")
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    StringBuilder words = new StringBuilder();
    for (int i = 0; i < maxLen - 5; i++) {
      words.append(i == 0 ? "" : " ").append('w').append(i);
    }
    JsonNode atTheEnd = whole(port, chats, "{\"messages\":[{\"role\":\"user\",\"content\":\""
        + words + "\"}],\"max_tokens\":null}");
    assertThat(atTheEnd.at("/choices/0/finish_reason").asText()).isEqualTo("length");
    assertThat(atTheEnd.at("/usage/completion_tokens").asInt()).isEqualTo(3);

    // /metrics counts each answer under its reason: 3 stopped, 6 cut
    HttpResponse<String> metrics = HttpClient.newHttpClient().send(HttpRequest.newBuilder(
        URI.create("http://127.0.0.1:" + port + "/metrics")).GET().build(),
        HttpResponse.BodyHandlers.ofString());
    // in name order, as vLLM's Prometheus client writes a series' labels
    String labels = "{engine=\"0\",finished_reason=\"";
    String model = "\",model_name=\"" + HardwareProfile.qwen3H100Mps6().model() + "\"}";
    assertThat(metrics.body())
        .contains("vllm:request_success_total" + labels + "stop" + model + " 3.0\n")
        .contains("vllm:request_success_total" + labels + "length" + model + " 6.0\n");
  }

  /**
   * With {@code ignore_eos} vLLM ignores the model's end of answer: a chat without a limit runs
   * to the context's end and says {@code "length"}, where without it the model ends the answer
   * after 16 tokens. A limit the client set is generated in full either way.
   */
  @Test
  void ignoreEosRunsAChatWithoutALimitToTheContextsEnd() throws Exception {
    int port = replica.start();
    String chats = "/v1/chat/completions";
    // a chat of maxLen - 40 stand-in tokens ("user:", one per word, then the generation prompt
    // "assistant:"): 40 left in the context
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    StringBuilder words = new StringBuilder();
    for (int i = 0; i < maxLen - 42; i++) {
      words.append(i == 0 ? "" : " ").append('w').append(i);
    }
    String messages = "\"messages\":[{\"role\":\"user\",\"content\":\"" + words + "\"}]";

    JsonNode own = whole(port, chats, "{" + messages + "}");
    assertThat(own.at("/choices/0/finish_reason").asText()).isEqualTo("stop");
    assertThat(own.at("/usage/completion_tokens").asInt())
        .isEqualTo(EmulatedServer.DEFAULT_MAX_TOKENS);

    for (String limitless : List.of("", ",\"max_tokens\":null",
        ",\"max_completion_tokens\":null")) {
      JsonNode ignored = whole(port, chats, "{" + messages + limitless + ",\"ignore_eos\":true}");
      assertThat(ignored.at("/choices/0/finish_reason").asText()).as(limitless)
          .isEqualTo("length");
      assertThat(ignored.at("/usage/completion_tokens").asInt()).as(limitless).isEqualTo(40);
      assertThat(ignored.at("/usage/prompt_tokens").asInt()).as(limitless).isEqualTo(maxLen - 40);
    }
    List<JsonNode> stream = streamed(port, chats, "{" + messages + ",\"ignore_eos\":true,"
        + "\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
    JsonNode usage = stream.get(stream.size() - 1);
    assertThat(usage.at("/usage/completion_tokens").asInt()).isEqualTo(40);
    assertThat(stream.get(stream.size() - 2).at("/choices/0/finish_reason").asText())
        .isEqualTo("length");

    // a short chat with a limit: the limit, as without ignore_eos
    JsonNode limited = whole(port, chats, "{" + CHAT + ",\"max_tokens\":3,\"ignore_eos\":true}");
    assertThat(limited.at("/usage/completion_tokens").asInt()).isEqualTo(3);
    assertThat(limited.at("/choices/0/finish_reason").asText()).isEqualTo("length");
    // false is the default
    assertThat(whole(port, chats, "{" + CHAT + ",\"ignore_eos\":false}")
        .at("/choices/0/finish_reason").asText()).isEqualTo("stop");
    // a value that is not a boolean is named, as vLLM's request model refuses it
    JsonNode refused = replica.refusal(port, chats, "{" + CHAT + ",\"ignore_eos\":\"maybe\"}");
    assertThat(refused.get("param").asText()).isEqualTo("ignore_eos");
    assertThat(refused.get("message").asText()).contains("ignore_eos");
  }
}
