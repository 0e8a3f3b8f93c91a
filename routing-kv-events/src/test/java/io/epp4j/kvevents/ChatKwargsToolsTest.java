package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * vLLM puts a chat request's {@code tools} among the defaults of its chat template kwargs and
 * merges the request's {@code chat_template_kwargs} over them ({@code ChatParams.with_defaults};
 * a value of {@code null} or {@code "auto"} leaves the default), then hands the merged
 * {@code tools} to {@code apply_chat_template}. So a {@code tools} kwarg replaces the request's
 * tools, as given; the renderer refused such a request, which was then scored as uncached.
 */
class ChatKwargsToolsTest {
  private static final List<ChatMessage> CHAT = List.of(ChatMessage.user("Hi"));
  private static final String REQUEST_TOOLS =
      "[{\"type\":\"function\",\"function\":{\"name\":\"fromRequest\"}}]";
  private static final JinjaChatTemplate TEMPLATE = JinjaChatTemplate.compile(
      "{% if tools is defined and tools %}{% for t in tools %}[{{ t.function.name }}"
          + "/{{ t.function | length }}]{% endfor %}"
          + "{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}",
      Map.of(), "model");

  private static ChatTemplateArgs kwargs(String json) {
    return new ChatTemplateArgs(true, false, json);
  }

  @Test
  void aToolsKwargReplacesTheRequestsToolsAsGiven() {
    String kwargs = "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"fromKwargs\"}}]}";
    // as given: not read into the request's tool model, which would add a null description
    assertThat(TEMPLATE.render(CHAT, REQUEST_TOOLS, kwargs(kwargs)))
        .isEqualTo("[fromKwargs/1]<user>Hi");
    assertThat(TEMPLATE.render(CHAT, null, kwargs(kwargs))).isEqualTo("[fromKwargs/1]<user>Hi");
    // the request's own tools are read into that model
    assertThat(TEMPLATE.render(CHAT, REQUEST_TOOLS, ChatTemplateArgs.DEFAULTS))
        .isEqualTo("[fromRequest/3]<user>Hi");
  }

  @Test
  void aNullOrAutoToolsKwargLeavesTheRequestsTools() {
    for (String unset : new String[] {"null", "\"auto\""}) {
      assertThat(TEMPLATE.render(CHAT, REQUEST_TOOLS, kwargs("{\"tools\":" + unset + "}")))
          .isEqualTo("[fromRequest/3]<user>Hi");
      assertThat(TEMPLATE.render(CHAT, null, kwargs("{\"tools\":" + unset + "}")))
          .isEqualTo("<user>Hi");
    }
  }
}
