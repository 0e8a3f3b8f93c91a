package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.core.OpenAiRequestParser;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The emulated replica reads a chat's template fields as the router does (and as vLLM does), so
 * that {@code serve --tokenizer} renders the prompt the router's tokenizer renders.
 */
class ServeChatTemplateFieldsTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  private static void sameAsTheRouter(String fields) throws Exception {
    String body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]"
        + fields + "}";
    Object served = EmulatedServer.chatTemplateArgs(JSON.readTree(body));
    Object routed = OpenAiRequestParser.defaults().parse("/v1/chat/completions", Map.of(),
        body.getBytes(StandardCharsets.UTF_8)).value().chatTemplateArgs();
    assertThat(served).isEqualTo(routed);
  }

  @Test
  void documentsJoinTheKwargsAsInTheRouter() throws Exception {
    sameAsTheRouter(",\"documents\":[{\"title\":\"T\",\"text\":\"x\"}]");
    sameAsTheRouter(",\"chat_template_kwargs\":{\"documents\":[],\"a\":1},"
        + "\"documents\":[{\"text\":\"x\"}]");
    assertThat(EmulatedServer.chatTemplateArgs(JSON.readTree("{\"documents\":[{\"t\":1}]}")))
        .isEqualTo("field 'documents' must be an array of objects of strings");
  }

  @Test
  void aRequestsOwnChatTemplateIsRefusedAsVllmRefusesItByDefault() throws Exception {
    assertThat(EmulatedServer.chatTemplateArgs(JSON.readTree(
        "{\"chat_template\":\"{{ messages }}\"}")).toString())
        .contains("--trust-request-chat-template");
    sameAsTheRouter(",\"chat_template\":null");
  }

  @Test
  void reasoningEffortJoinsTheKwargsAsInTheRouter() throws Exception {
    sameAsTheRouter(",\"reasoning_effort\":\"none\"");
    sameAsTheRouter(",\"reasoning_effort\":\"high\",\"documents\":[],"
        + "\"chat_template_kwargs\":{\"a\":1}");
    sameAsTheRouter(",\"reasoning_effort\":\"none\","
        + "\"chat_template_kwargs\":{\"enable_thinking\":true}");
  }
}
