package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.ChatTemplateArgs;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The fields of a chat on {@code /tokenize} as vLLM's {@code TokenizeChatRequest} has them: it has
 * no {@code documents} or {@code reasoning_effort} (the chat completion's request model has), so
 * vLLM ignores them there, as any field it does not have: not checked, not handed to the chat
 * template. The template fields it has are still checked.
 */
@Timeout(60)
class ServeTokenizeChatFieldsTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"a b\"}]";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void documentsAndReasoningEffortAreIgnoredByTokenize() throws Exception {
    int port = replica.start();
    JsonNode plain = tokenized(port, "{" + CHAT + "}");
    for (String fields : new String[] {",\"reasoning_effort\":1", ",\"documents\":5",
        ",\"reasoning_effort\":\"extreme\",\"documents\":[{\"t\":1}]",
        ",\"reasoning_effort\":\"none\",\"documents\":[{\"title\":\"T\",\"text\":\"x\"}]"}) {
      assertThat(tokenized(port, "{" + CHAT + fields + "}").get("tokens")).as(fields)
          .isEqualTo(plain.get("tokens"));
      // a chat completion's request model has them, and refuses such values
      if (!fields.contains("\"none\"")) {
        assertThat(replica.post(port, "/v1/chat/completions", "{" + CHAT + fields
            + ",\"max_tokens\":1}").statusCode()).as(fields).isEqualTo(400);
      }
    }
    // a template field TokenizeChatRequest has is still checked
    assertThat(replica.refusal(port, "/tokenize", "{" + CHAT
        + ",\"chat_template_kwargs\":5,\"reasoning_effort\":1}").get("message").asText())
        .contains("'chat_template_kwargs'");
  }

  @Test
  void tokenizeHandsTheTemplateNeitherDocumentsNorThinking() throws Exception {
    JsonNode body = JSON.readTree("{" + CHAT + ",\"reasoning_effort\":\"none\","
        + "\"documents\":[{\"title\":\"T\",\"text\":\"x\"}]}");
    assertThat(EmulatedServer.chatTemplateArgs(body, false)).isEqualTo(ChatTemplateArgs.DEFAULTS);
    // where a chat completion hands it both, and enable_thinking from the effort
    assertThat(((ChatTemplateArgs) EmulatedServer.chatTemplateArgs(body, true)).kwargsJson())
        .contains("\"documents\"").contains("\"reasoning_effort\":\"none\"")
        .contains("\"enable_thinking\":false");
    assertThat(EmulatedServer.promptFieldsInvalid(JSON.readTree("{" + CHAT
        + ",\"documents\":5}"), true, false)).isNull();
    assertThat(EmulatedServer.promptFieldsInvalid(JSON.readTree("{" + CHAT
        + ",\"documents\":5}"), true, true)).contains("'documents'");
  }

  private JsonNode tokenized(int port, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, "/tokenize", body);
    assertThat(res.statusCode()).as(body + " " + res.body()).isEqualTo(200);
    return JSON.readTree(res.body());
  }
}
