package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The role a chat's answer is given, as vLLM's {@code get_chat_request_role}: the assistant's,
 * unless {@code add_generation_prompt} is false, when the answer continues the last message and
 * carries that message's role, whole and in the stream's role chunk.
 */
@Timeout(60)
class ServeChatResponseRoleTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CHAT = "\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
      + "{\"role\":\"user\",\"content\":\"Dear diary,\"}]";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private String wholeRole(int port, String extra) throws Exception {
    HttpResponse<String> res = replica.post(port, "/v1/chat/completions",
        "{" + CHAT + ",\"max_tokens\":1" + extra + "}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    return JSON.readTree(res.body()).at("/choices/0/message/role").asText();
  }

  private String streamedRole(int port, String extra) throws Exception {
    HttpResponse<String> res = replica.post(port, "/v1/chat/completions",
        "{" + CHAT + ",\"max_tokens\":1,\"stream\":true" + extra + "}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    String first = res.body().lines().filter(l -> l.startsWith("data: {")).findFirst()
        .orElseThrow();
    JsonNode chunk = JSON.readTree(first.substring("data: ".length()));
    return chunk.at("/choices/0/delta/role").asText();
  }

  @Test
  void theAnswerHasTheLastMessagesRoleWithoutAGenerationPrompt() throws Exception {
    int port = replica.start();
    assertThat(wholeRole(port, "")).isEqualTo("assistant");
    assertThat(streamedRole(port, "")).isEqualTo("assistant");
    assertThat(wholeRole(port, ",\"add_generation_prompt\":true")).isEqualTo("assistant");
    assertThat(wholeRole(port, ",\"add_generation_prompt\":false")).isEqualTo("user");
    assertThat(streamedRole(port, ",\"add_generation_prompt\":false")).isEqualTo("user");
  }
}
