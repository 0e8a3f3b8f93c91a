package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

/**
 * vLLM's {@code --default-chat-template-kwargs} may give {@code tools} and {@code documents}:
 * the server merges the request's tools over the defaults ({@code merge_kwargs}, where a request
 * without tools leaves the default) and the request's kwargs and {@code documents} over both, so
 * a chat without tools of its own is rendered with the default tools. The scorer refused such
 * defaults, so a deployment that sets them could not be given its engines' rendering.
 */
class DefaultChatTemplateToolsTest {
  private static final List<ChatMessage> CHAT = List.of(ChatMessage.user("Hi"));
  private static final String REQUEST_TOOLS =
      "[{\"type\":\"function\",\"function\":{\"name\":\"fromRequest\"}}]";
  private static final JinjaChatTemplate TEMPLATE = JinjaChatTemplate.compile(
      "{% if tools %}{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% endif %}"
          + "{% if documents %}{% for d in documents %}({{ d.title }}){% endfor %}{% endif %}"
          + "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}",
      Map.of(), "model");

  @Test
  void aChatWithoutToolsIsRenderedWithTheDefaultToolsAndOneWithToolsWithItsOwn()
      throws Exception {
    List<String> rendered = new ArrayList<>();
    Tokenizer recording = new Tokenizer() {
      @Override
      public int[] encode(String text) {
        byte[] b = text.getBytes(StandardCharsets.UTF_8);
        int[] t = new int[b.length];
        for (int i = 0; i < b.length; i++) {
          t[i] = b[i];
        }
        return t;
      }

      @Override
      public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
          ChatTemplateArgs args) {
        String text = TEMPLATE.render(messages, toolsJson, args);
        rendered.add(text);
        return encode(text);
      }
    };
    AtomicLong now = new AtomicLong(1_000_000_000L);
    KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();
    String yaml = PrecisePrefixCacheScorerTest.preciseOnly("defaultChatTemplateKwargs: {tools:"
        + " [{type: function, function: {name: fromDefaults}}], documents: [{title: manual}]}");
    try (Router router = Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
        .service(KvBlockIndex.class, index).service(Tokenizer.class, recording)
        .configYaml(yaml, "t").ticker(now::get).randomSeed(1).build()) {
      for (String[] c : new String[][] {{null, null}, {REQUEST_TOOLS, null},
          {REQUEST_TOOLS, "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"k\"}}]}"},
          {null, "{\"documents\":[{\"title\":\"own\"}]}"}}) {
        router.route(InferenceRequest.builder().model(PrecisePrefixCacheScorerTest.MODEL)
            .messages(CHAT).toolsJson(c[0]).chatTemplateArgs(new ChatTemplateArgs(true, false,
                c[1])).build());
      }
    }
    assertThat(rendered).containsExactly(
        "[fromDefaults](manual)<user>Hi", // neither tools nor documents: the defaults'
        "[fromRequest](manual)<user>Hi", // the request's tools over the default tools
        "[k](manual)<user>Hi", // the request's kwargs over both
        "[fromDefaults](own)<user>Hi"); // the request's documents over the default documents
  }

  @Test
  void theDefaultToolsGiveWayToTheRequestsTools() {
    DefaultChatTemplateKwargs d = DefaultChatTemplateKwargs.parse(
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"fromDefaults\"}}],"
            + "\"enable_thinking\":false}");
    assertThat(d.applyTo(ChatTemplateArgs.DEFAULTS, null).kwargsJson()).isEqualTo(
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"fromDefaults\"}}],"
            + "\"enable_thinking\":false}");
    assertThat(d.applyTo(ChatTemplateArgs.DEFAULTS, REQUEST_TOOLS).kwargsJson())
        .isEqualTo("{\"enable_thinking\":false}");
    assertThat(d.applyTo(new ChatTemplateArgs(true, false, "{\"x\":1}"), REQUEST_TOOLS)
        .kwargsJson()).isEqualTo("{\"enable_thinking\":false,\"x\":1}");
  }
}
