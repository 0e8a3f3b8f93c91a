package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.OpenAiRequestParser;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * An assistant message that calls tools comes with {@code content: null}. vLLM's
 * {@code _parse_chat_message_content} turns a null content into no parts at all: a template that
 * iterates over content (the "openai" format) gets an empty list, where a {@code ""} content is
 * one empty text part, and a template that prints content gets {@code ""} for both. The
 * expected renderings are Python jinja2's for the conversation vLLM builds.
 */
class ChatContentNullTest {
  private static final Map<String, String> SPECIAL = Map.of("bos_token", "<s>");

  private static final String CHAT = """
      {"model":"m","messages":[
       {"role":"user","content":"Weather?"},
       {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
         "function":{"name":"get_weather","arguments":"{\\"city\\":\\"Oslo\\"}"}}]},
       {"role":"tool","content":"sunny","tool_call_id":"c1"},
       {"role":"assistant","content":""}]}
      """;

  private static InferenceRequest parse(String body) {
    return OpenAiRequestParser.defaults().parse("/v1/chat/completions", Map.of(),
        body.getBytes(StandardCharsets.UTF_8)).value();
  }

  @Test
  void aTemplateIteratingOverContentGetsNoPartsForANullContent() {
    JinjaChatTemplate t = JinjaChatTemplate.compile("{% for m in messages %}{{ m.role }}:"
        + "{% if m.content is string %}S[{{ m.content }}]{% elif m.content %}"
        + "{% for c in m.content %}<{{ c.type }}:{{ c.text }}>{% endfor %}{% else %}(none)"
        + "{% endif %}{% if m.tool_calls %}{% for c in m.tool_calls %}[call {{ c.function.name }}]"
        + "{% endfor %}{% endif %}|{% endfor %}", SPECIAL, "openai");
    InferenceRequest r = parse(CHAT);
    assertThat(t.render(r.messages(), null, false)).isEqualTo("user:<text:Weather?>|"
        + "assistant:(none)[call get_weather]|tool:S[sunny]|assistant:<text:>|");
  }

  @Test
  void aTemplatePrintingContentGetsAnEmptyStringForANullContent() {
    JinjaChatTemplate t = JinjaChatTemplate.compile("{% for m in messages %}{{ m.role }}"
        + "[{{ m.content }}]{% if m.content is none %}NONE{% endif %}{% endfor %}", SPECIAL,
        "string");
    InferenceRequest r = parse(CHAT);
    assertThat(t.render(r.messages(), null, false))
        .isEqualTo("user[Weather?]assistant[]tool[sunny]assistant[]");
  }

  @Test
  void continuingAFinalMessageWithoutContentIsRefusedWhereTransformersFindsNoText() {
    // transformers looks for the last text part of a list content and raises when there is none
    JinjaChatTemplate t = JinjaChatTemplate.compile("{% for m in messages %}"
        + "{% for c in m.content %}{{ c.text }}{% endfor %}|{% endfor %}", SPECIAL, "openai");
    InferenceRequest r = parse("""
        {"model":"m","messages":[{"role":"user","content":"Hi"},
         {"role":"assistant","content":null}],"add_generation_prompt":false,
         "continue_final_message":true}
        """);
    ChatTemplateArgs args = r.chatTemplateArgs();
    assertThatThrownBy(() -> t.render(r.messages(), null, args))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .hasMessageContaining("no text to continue");
  }
}
