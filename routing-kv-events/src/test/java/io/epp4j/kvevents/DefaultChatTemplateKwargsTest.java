package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

/**
 * A deployment started with vLLM's {@code --default-chat-template-kwargs} renders every chat
 * with those variables unless the request sets them; the precise scorer's
 * {@code defaultChatTemplateKwargs} gives the router's rendering the same defaults, merged as
 * vLLM merges them (the request's own kwargs over the defaults, but a {@code null} or
 * {@code "auto"} one leaves the default).
 */
class DefaultChatTemplateKwargsTest {
  private static final List<ChatMessage> QUESTION = List.of(ChatMessage.user("Hi"));

  @Test
  void theScorerRendersChatsWithTheEnginesDefaultsUnderTheRequestsOwnKwargs() throws Exception {
    try (HuggingFaceTokenizer qwen3 = HuggingFaceTokenizer.load(RealTokenizers.dir("qwen3"))) {
      List<String> rendered = new ArrayList<>();
      Tokenizer recording = new Tokenizer() {
        @Override
        public int[] encode(String text) {
          return qwen3.encode(text);
        }

        @Override
        public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
            ChatTemplateArgs args) {
          String text = qwen3.renderChat(messages, toolsJson, args);
          rendered.add(text);
          return encode(text);
        }
      };
      AtomicLong now = new AtomicLong(1_000_000_000L);
      KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();
      String yaml = PrecisePrefixCacheScorerTest.preciseOnly(
          "defaultChatTemplateKwargs: {enable_thinking: false}");
      try (Router router = Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
          .service(KvBlockIndex.class, index).service(Tokenizer.class, recording)
          .configYaml(yaml, "t").ticker(now::get).randomSeed(1).build()) {
        for (String kwargs : new String[] {null, "{\"enable_thinking\":true}",
            "{\"enable_thinking\":null}", "{\"enable_thinking\":\"auto\"}"}) {
          router.route(InferenceRequest.builder().model(PrecisePrefixCacheScorerTest.MODEL)
              .messages(QUESTION).chatTemplateArgs(new ChatTemplateArgs(true, false, kwargs))
              .build());
        }
      }
      // Qwen3's template: thinking off renders an empty think block after the generation prompt
      String off = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
      String on = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
      assertThat(rendered).containsExactly(off, on, off, off);
    }
  }

  @Test
  void mergesAsVllmMerges() {
    DefaultChatTemplateKwargs d = DefaultChatTemplateKwargs.parse(
        "{\"enable_thinking\":false,\"reasoning_effort\":\"low\"}");
    // the request's keys over the defaults, in the defaults' places; its other keys after
    assertThat(d.applyTo(new ChatTemplateArgs(false, true,
        "{\"x\":1,\"reasoning_effort\":\"high\",\"enable_thinking\":null}")))
        .isEqualTo(new ChatTemplateArgs(false, true,
            "{\"enable_thinking\":false,\"reasoning_effort\":\"high\",\"x\":1}"));
    assertThat(d.applyTo(ChatTemplateArgs.DEFAULTS)).isEqualTo(new ChatTemplateArgs(true, false,
        "{\"enable_thinking\":false,\"reasoning_effort\":\"low\"}"));
    // no defaults: the request's kwargs as given, nulls included, as vLLM passes them
    ChatTemplateArgs withNull = new ChatTemplateArgs(true, false, "{\"enable_thinking\":null}");
    assertThat(DefaultChatTemplateKwargs.parse("{}").applyTo(withNull)).isSameAs(withNull);
  }

  @Test
  void aBadValueIsRefusedNamingTheField() {
    for (String[] c : new String[][] {
        {"defaultChatTemplateKwargs: [1]", "must be an object"},
        {"defaultChatTemplateKwargs: {add_generation_prompt: false}",
            "must not set 'add_generation_prompt'"},
        {"defaultChatTemplateKwargs: {messages: []}", "must not set 'messages'"}}) {
      String yaml = PrecisePrefixCacheScorerTest.preciseOnly("kvEvents: {mode: none}, " + c[0]);
      assertThatThrownBy(() -> Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
          .configYaml(yaml, "t").build()).as(c[0]).isInstanceOf(ConfigException.class)
          .hasMessageContaining("defaultChatTemplateKwargs").hasMessageContaining(c[1]);
    }
    assertThatThrownBy(() -> DefaultChatTemplateKwargs.parse("{\"enable_thinking\":"))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("not valid JSON");
  }
}
