package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.Router;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

/**
 * A chat request's {@code add_generation_prompt}, {@code continue_final_message} and
 * {@code chat_template_kwargs} change the prompt vLLM renders; the router's tokenization must
 * render them the same way, or its block keys are keys no engine holds. The expected texts are
 * the models' templates applied by hand, cut for {@code continue_final_message} as transformers
 * cuts them.
 */
class ChatTemplateArgsTest {
  private static final List<ChatMessage> QUESTION = List.of(ChatMessage.user("Hi"));

  @Test
  void qwen3RendersEnableThinkingFalseAsItsTemplateDoes() throws Exception {
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(RealTokenizers.dir("qwen3"))) {
      ChatTemplateArgs noThinking = new ChatTemplateArgs(true, false, "{\"enable_thinking\":false}");
      String want = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
      assertThat(t.renderChat(QUESTION, null, noThinking)).isEqualTo(want);
      assertThat(t.encodeChat(QUESTION, null, noThinking)).containsExactly(t.encode(want));
      // a kwarg the template does not read changes nothing, as in vLLM
      assertThat(t.renderChat(QUESTION, null, new ChatTemplateArgs(true, false, "{\"x\":1}")))
          .isEqualTo("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
      // the generation prompt, and with it the empty think block, left out
      assertThat(t.renderChat(QUESTION, null, new ChatTemplateArgs(false, false,
          "{\"enable_thinking\":false}"))).isEqualTo("<|im_start|>user\nHi<|im_end|>\n");
      // the cached chunks render the same fields
      CachingChatTokenizer cached = CachingChatTokenizer.ofRenderedChats(t, 100_000);
      assertThat(cached.encodeChat(QUESTION, null, noThinking)).containsExactly(t.encode(want));
    }
  }

  @Test
  void llamaContinuesTheFinalMessageWhereTransformersCutsIt() throws Exception {
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(RealTokenizers.dir("llama3_1"))) {
      ChatTemplateArgs cont = new ChatTemplateArgs(false, true, null);
      String user = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
      // the template trims the message, so its trailing space is not in the rendering
      List<ChatMessage> chat = List.of(ChatMessage.user("Hi"), ChatMessage.assistant("Sure, "));
      String want = user + "<|start_header_id|>assistant<|end_header_id|>\n\nSure,";
      assertThat(t.renderChat(chat, null, cont)).isEqualTo(want);
      assertThat(t.encodeChat(chat, null, cont)).containsExactly(t.encode(want));
      assertThat(t.renderChat(QUESTION, null, new ChatTemplateArgs(false, false, null)))
          .isEqualTo(user);
      // transformers refuses the two together; with vLLM's default add_generation_prompt
      // (true), continue_final_message alone is that pair
      assertThatThrownBy(() -> t.encodeChat(chat, null, new ChatTemplateArgs(true, true, null)))
          .isInstanceOf(Tokenizer.TokenizationException.class)
          .hasMessageContaining("add_generation_prompt");
      // kwargs cannot replace what the request itself gives the template
      assertThatThrownBy(() -> t.encodeChat(chat, null,
          new ChatTemplateArgs(true, false, "{\"messages\":[]}")))
          .isInstanceOf(Tokenizer.TokenizationException.class).hasMessageContaining("messages");
    }
  }

  @Test
  void perMessageCachingRendersTheFieldsItCanAndRefusesKwargs() {
    Tokenizer chars = text -> text.chars().toArray();
    CachingChatTokenizer cached = new CachingChatTokenizer(chars, ChatTemplate.CHATML, 100_000);
    List<ChatMessage> chat = List.of(ChatMessage.user("Hi"), ChatMessage.assistant("Sure "));
    assertThat(cached.encodeChat(chat, null, new ChatTemplateArgs(false, true, null)))
        .containsExactly(chars.encode(
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nSure "));
    assertThat(cached.encodeChat(chat, null, new ChatTemplateArgs(false, false, null)))
        .containsExactly(chars.encode(
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nSure <|im_end|>\n"));
    assertThatThrownBy(() -> cached.encodeChat(chat, null,
        new ChatTemplateArgs(true, false, "{\"enable_thinking\":false}")))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .hasMessageContaining("chat_template_kwargs");
  }

  @Test
  void aTokenizerThatDoesNotRenderTheFieldsRefusesRatherThanIgnoresThem() {
    Tokenizer chars = text -> text.chars().toArray();
    assertThat(chars.encodeChat(QUESTION, null, ChatTemplateArgs.DEFAULTS))
        .containsExactly(chars.encodeChat(QUESTION));
    assertThatThrownBy(() -> chars.encodeChat(QUESTION, null,
        new ChatTemplateArgs(false, false, null)))
        .isInstanceOf(Tokenizer.TokenizationException.class);
  }

  @Test
  void thePreciseScorerTokenizesAChatWithItsTemplateFields() {
    AtomicReference<@Nullable ChatTemplateArgs> seen = new AtomicReference<>();
    Tokenizer recording = new Tokenizer() {
      @Override
      public int[] encode(String text) {
        return text.chars().toArray();
      }

      @Override
      public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
          ChatTemplateArgs args) {
        seen.set(args);
        return encode("x".repeat(80));
      }
    };
    AtomicLong now = new AtomicLong(1_000_000_000L);
    KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();
    try (Router router = Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
        .service(KvBlockIndex.class, index).service(Tokenizer.class, recording)
        .configYaml(PrecisePrefixCacheScorerTest.yaml("precise-prefix-cache-scorer"), "t")
        .ticker(now::get).randomSeed(1).build()) {
      ChatTemplateArgs args = new ChatTemplateArgs(false, true, "{\"enable_thinking\":false}");
      router.route(InferenceRequest.builder().model(PrecisePrefixCacheScorerTest.MODEL)
          .messages(List.of(ChatMessage.user("Hi"), ChatMessage.assistant("Sure")))
          .chatTemplateArgs(args).build());
      assertThat(seen.get()).isEqualTo(args);
    }
  }
}
