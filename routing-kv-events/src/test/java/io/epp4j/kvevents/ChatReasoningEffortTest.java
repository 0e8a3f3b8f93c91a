package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.InferenceRequest;
import io.epp4j.core.OpenAiRequestParser;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * vLLM's {@code build_chat_params} hands a chat request's {@code reasoning_effort} to the
 * template as a variable, and with it {@code enable_thinking} ({@code false} for
 * {@code "none"}) unless the request's {@code chat_template_kwargs} set it. Qwen3's template
 * closes an empty thinking block when thinking is off, so {@code reasoning_effort: "none"} is
 * other tokens than a request without it.
 */
class ChatReasoningEffortTest {
  private static InferenceRequest chat(String fields) {
    return OpenAiRequestParser.defaults().parse("/v1/chat/completions", Map.of(),
        ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]" + fields + "}")
            .getBytes(StandardCharsets.UTF_8)).value();
  }

  private static String render(HuggingFaceTokenizer t, InferenceRequest r) {
    return t.renderChat(r.messages(), r.toolsJson(), r.chatTemplateArgs());
  }

  @Test
  void effortNoneTurnsQwen3ThinkingOffAsTheEngineDoes() throws Exception {
    try (HuggingFaceTokenizer qwen3 = HuggingFaceTokenizer.load(RealTokenizers.dir("qwen3"))) {
      String open = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
      assertThat(render(qwen3, chat(",\"reasoning_effort\":\"none\"")))
          .isEqualTo(open + "<think>\n\n</think>\n\n");
      assertThat(render(qwen3, chat(",\"reasoning_effort\":\"high\""))).isEqualTo(open);
      // the request's own enable_thinking wins over the one the effort implies
      assertThat(render(qwen3, chat(",\"reasoning_effort\":\"none\","
          + "\"chat_template_kwargs\":{\"enable_thinking\":true}"))).isEqualTo(open);
      InferenceRequest none = chat(",\"reasoning_effort\":\"none\"");
      assertThat(qwen3.encodeChat(none.messages(), null, none.chatTemplateArgs()))
          .containsExactly(qwen3.encode(open + "<think>\n\n</think>\n\n"));
    }
  }

  @Test
  void aTemplateReadingTheEffortGetsIt() {
    JinjaChatTemplate t = JinjaChatTemplate.compile("{% for m in messages %}{{ m.content }}"
        + "{% endfor %}|{{ reasoning_effort }}|{{ enable_thinking }}", Map.of(), "effort");
    InferenceRequest r = chat(",\"reasoning_effort\":\"low\"");
    assertThat(t.render(r.messages(), null, r.chatTemplateArgs())).isEqualTo("Hi|low|true");
  }
}
