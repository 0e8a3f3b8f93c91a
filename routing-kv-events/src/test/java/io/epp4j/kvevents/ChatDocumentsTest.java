package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.InferenceRequest;
import io.epp4j.core.OpenAiRequestParser;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * A chat request's {@code documents} (retrieval-augmented generation: Granite and Command-R
 * templates print them) reach the template as vLLM hands them over: its
 * {@code build_chat_params} merges them into the template kwargs, and a {@code documents} kwarg
 * goes to {@code apply_chat_template} as its argument of that name, so the template's variable
 * {@code documents} is the request's field, else the kwarg. Ignoring them rendered a prompt
 * without the documents, tokens no engine holds.
 */
class ChatDocumentsTest {
  private static final JinjaChatTemplate TEMPLATE = JinjaChatTemplate.compile(
      "{% if documents %}{% for d in documents %}[{{ d.title }}|{{ d.text }}]{% endfor %}"
          + "{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}",
      Map.of(), "rag");

  private static String render(String fields) {
    InferenceRequest r = OpenAiRequestParser.defaults().parse("/v1/chat/completions", Map.of(),
        ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"What is the capital?\"}]"
            + fields + "}").getBytes(StandardCharsets.UTF_8)).value();
    return TEMPLATE.render(r.messages(), r.toolsJson(), r.chatTemplateArgs());
  }

  @Test
  void theRequestsDocumentsAreTheTemplatesDocuments() {
    assertThat(render(",\"documents\":[{\"title\":\"France\",\"text\":\"Paris is the capital.\"},"
        + "{\"text\":\"Lyon is a city.\",\"title\":\"Lyon\"}]"))
        .isEqualTo("[France|Paris is the capital.][Lyon|Lyon is a city.]<user>What is the capital?");
    assertThat(render(",\"documents\":null")).isEqualTo("<user>What is the capital?");
  }

  @Test
  void aDocumentsKwargIsRenderedAndTheFieldWinsOverIt() {
    String kwarg = ",\"chat_template_kwargs\":{\"documents\":[{\"title\":\"K\",\"text\":\"k\"}]}";
    assertThat(render(kwarg)).isEqualTo("[K|k]<user>What is the capital?");
    assertThat(render(kwarg + ",\"documents\":[{\"title\":\"F\",\"text\":\"f\"}]"))
        .isEqualTo("[F|f]<user>What is the capital?");
  }
}
