package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * vLLM hands a message's content to a template that iterates over content (Gemma 3, Llama 4:
 * its "openai" content format) as a list of parts, and joins the text parts with newlines only
 * for a template that prints content as one string. A chat sent with several text parts then
 * renders differently per template, and the router must render it as vLLM does.
 */
class ChatContentPartsTest {
  private static final Map<String, String> SPECIAL = Map.of("bos_token", "<s>");

  private static ChatMessage parts(String role, String... texts) {
    return new ChatMessage(role, String.join("\n", texts),
        java.util.Arrays.stream(texts).map(ChatMessage.Part::text).toList());
  }

  @Test
  void gemma3RendersEachTextPartAsItsTemplateDoes() throws Exception {
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(RealTokenizers.dir("gemma3"))) {
      List<ChatMessage> chat = List.of(parts("user", " Describe ", "briefly. "));
      // the template trims each part and prints them one after the other
      String want = "<bos><start_of_turn>user\nDescribebriefly.<end_of_turn>\n"
          + "<start_of_turn>model\n";
      assertThat(t.renderChat(chat, null, true)).isEqualTo(want);
      assertThat(t.encodeChat(chat)).containsExactly(t.encode(want));
      // continuing the final message continues its last text part, as transformers does
      List<ChatMessage> cont = List.of(parts("user", "Hi"), parts("assistant", "One", "Two "));
      assertThat(t.renderChat(cont, null, new ChatTemplateArgs(false, true, null)))
          .endsWith("<start_of_turn>model\nOneTwo");
    }
  }

  @Test
  void aStringContentTemplateStillGetsThePartsJoinedWithNewlines() {
    JinjaChatTemplate t = JinjaChatTemplate.compile("{% for m in messages %}[{{ m.content }}]"
        + "{% endfor %}", SPECIAL, "string");
    assertThat(t.render(List.of(parts("user", "a", "b")), null, false)).isEqualTo("[a\nb]");
  }

  @Test
  void aTemplateIteratingOverContentGetsPartsAndStringsAsOnePart() {
    JinjaChatTemplate t = JinjaChatTemplate.compile("{% for m in messages %}"
        + "{% if m.content is string %}S:{{ m.content }}{% else %}"
        + "{% for p in m.content %}<{{ p.type }}:{{ p.text }}>{% endfor %}{% endif %}|"
        + "{% endfor %}",
        SPECIAL, "openai");
    ChatMessage image = new ChatMessage("user", "{\"image_url\":{\"url\":\"u\"},"
        + "\"type\":\"image_url\"}\nwhat is it", List.of(new ChatMessage.Part("image", ""),
        ChatMessage.Part.text("what is it")));
    assertThat(t.render(List.of(ChatMessage.user("hi"), parts("assistant", "a", "b"), image),
        null, false)).isEqualTo("<text:hi>|<text:a><text:b>|<image:><text:what is it>|");
    // a tool result whose parts are all text is one string, as vLLM normalises it
    assertThat(t.render(List.of(ChatMessage.user("q"), parts("tool", "r1", "r2")), null, false))
        .isEqualTo("<text:q>|S:r1\nr2|");
  }

  @Test
  void theContentFormatIsDetectedAsVllmDetectsIt() {
    // a loop over a message's content, the message a loop variable over messages (or over a
    // variable set from it through slices and filters)
    assertThat(JinjaChatTemplate.iteratesOverContent(
        "{%- for message in messages -%}{%- for item in message['content'] -%}{%- endfor -%}"
            + "{%- endfor -%}")).isTrue();
    assertThat(JinjaChatTemplate.iteratesOverContent("{% set loop_messages = messages[1:] %}"
        + "{% for m in loop_messages %}{% for c in m.content | selectattr('type') if c %}"
        + "{% endfor %}{% endfor %}")).isTrue();
    assertThat(JinjaChatTemplate.iteratesOverContent("{% for m in messages|reverse %}"
        + "{% for c in m[\"content\"][1:] %}{% endfor %}{% endfor %}")).isTrue();
    // content printed, or a loop over something else
    assertThat(JinjaChatTemplate.iteratesOverContent(
        "{% for m in messages %}{{ m.content }}{% endfor %}")).isFalse();
    assertThat(JinjaChatTemplate.iteratesOverContent(
        "{% for c in messages[0]['content'] %}{% endfor %}")).isFalse();
    assertThat(JinjaChatTemplate.iteratesOverContent("{% for m in messages %}"
        + "{% for c in m.contents %}{% endfor %}{% endfor %}")).isFalse();
  }
}
