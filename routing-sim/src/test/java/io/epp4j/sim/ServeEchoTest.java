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
 * {@code echo}, as vLLM answers it: a completion's text starts with its prompt (with
 * {@code max_tokens} 0, the prompt alone, one token still generated and counted), a chat's
 * content with its last message's when that message has the answer's role; a prompt of token IDs
 * the stand-in tokenizer cannot turn back into text is refused naming the field.
 */
@Timeout(60)
class ServeEchoTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private JsonNode ok(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return JSON.readTree(res.body());
  }

  private static List<JsonNode> events(String sse) throws Exception {
    List<JsonNode> out = new ArrayList<>();
    for (String line : sse.split("\n")) {
      if (line.startsWith("data: ") && !line.equals("data: [DONE]")) {
        out.add(JSON.readTree(line.substring(6)));
      }
    }
    return out;
  }

  @Test
  void aCompletionEchoesItsPromptBeforeTheAnswer() throws Exception {
    int port = replica.start();
    JsonNode whole = ok(port, "/v1/completions",
        "{\"prompt\":\"tell me a story\",\"max_tokens\":3,\"echo\":true}");
    assertThat(whole.at("/choices/0/text").asText()).isEqualTo("tell me a story lorem lorem lorem");
    assertThat(whole.at("/usage/completion_tokens").asInt()).isEqualTo(3);
    // without echo, the answer alone
    assertThat(ok(port, "/v1/completions", "{\"prompt\":\"tell me a story\",\"max_tokens\":3}")
        .at("/choices/0/text").asText()).isEqualTo(" lorem lorem lorem");

    HttpResponse<String> streamed = replica.post(port, "/v1/completions",
        "{\"prompt\":\"tell me a story\",\"max_tokens\":2,\"echo\":true,\"stream\":true}");
    List<JsonNode> chunks = events(streamed.body());
    assertThat(chunks).hasSize(2);
    assertThat(chunks.get(0).at("/choices/0/text").asText()).isEqualTo("tell me a story lorem");
    assertThat(chunks.get(1).at("/choices/0/text").asText()).isEqualTo(" lorem");
    // vLLM names the prompt's IDs with its echo, return_token_ids or not
    assertThat(chunks.get(0).at("/choices/0/prompt_token_ids").isArray()).isTrue();
    assertThat(chunks.get(0).at("/choices/0/prompt_token_ids")).hasSize(4);
    assertThat(chunks.get(1).at("/choices/0/prompt_token_ids").isNull()).isTrue();
  }

  @Test
  void echoWithMaxTokensZeroAnswersThePromptAlone() throws Exception {
    int port = replica.start();
    JsonNode whole = ok(port, "/v1/completions",
        "{\"prompt\":\"tell me a story\",\"max_tokens\":0,\"echo\":true}");
    assertThat(whole.at("/choices/0/text").asText()).isEqualTo("tell me a story");
    assertThat(whole.at("/choices/0/finish_reason").asText()).isEqualTo("length");
    assertThat(whole.at("/usage/completion_tokens").asInt()).isEqualTo(1);

    List<JsonNode> chunks = events(replica.post(port, "/v1/completions",
        "{\"prompt\":\"tell me a story\",\"max_tokens\":0,\"echo\":true,\"stream\":true}").body());
    assertThat(chunks).hasSize(1);
    assertThat(chunks.get(0).at("/choices/0/text").asText()).isEqualTo("tell me a story");
    assertThat(chunks.get(0).at("/choices/0/finish_reason").asText()).isEqualTo("length");
  }

  @Test
  void aPromptOfTokenIdsIsEchoedOnlyWhenItsTextCanBeHad() throws Exception {
    int port = replica.start();
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":2,\"echo\":true}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    JsonNode error = JSON.readTree(res.body()).get("error");
    assertThat(error.get("message").asText()).contains("'echo'").contains("--tokenizer");
    assertThat(error.get("param").asText()).isEqualTo("echo");
    // with return_token_ids vLLM echoes no text at all, so none is needed
    JsonNode ids = ok(port, "/v1/completions",
        "{\"prompt\":[1,2,3],\"max_tokens\":2,\"echo\":true,\"return_token_ids\":true}");
    assertThat(ids.at("/choices/0/text").asText()).isEqualTo(" lorem lorem");
  }

  @Test
  void aChatEchoesItsLastMessageWhenItIsTheAnswersRole() throws Exception {
    int port = replica.start();
    String prefill = "\"messages\":[{\"role\":\"user\",\"content\":\"a story\"},"
        + "{\"role\":\"assistant\",\"content\":\"Once upon\"}]";
    JsonNode whole = ok(port, "/v1/chat/completions",
        "{" + prefill + ",\"max_tokens\":2,\"echo\":true}");
    assertThat(whole.at("/choices/0/message/content").asText())
        .isEqualTo("Once upon lorem lorem");
    // the last message is the user's: nothing to echo
    assertThat(ok(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"a story\"}],\"max_tokens\":2,\"echo\":true}")
        .at("/choices/0/message/content").asText()).isEqualTo(" lorem lorem");

    List<JsonNode> chunks = events(replica.post(port, "/v1/chat/completions",
        "{" + prefill + ",\"max_tokens\":2,\"echo\":true,\"stream\":true}").body());
    // the role, the echoed content, then a chunk per token
    assertThat(chunks).hasSize(4);
    assertThat(chunks.get(0).at("/choices/0/delta/role").asText()).isEqualTo("assistant");
    assertThat(chunks.get(1).at("/choices/0/delta/content").asText()).isEqualTo("Once upon");
    assertThat(chunks.get(2).at("/choices/0/delta/content").asText()).isEqualTo(" lorem");
  }

  @Test
  void anEchoThatIsNotABooleanIsNamed() throws Exception {
    int port = replica.start();
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":\"hi\",\"max_tokens\":1,\"echo\":\"perhaps\"}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    assertThat(JSON.readTree(res.body()).at("/error/message").asText()).contains("'echo'");
  }
}
