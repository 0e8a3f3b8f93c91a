package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.Router;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * vLLM tokenizes a request's prompt text with the tokenizer's special tokens (Llama 3's BOS)
 * when its {@code add_special_tokens} is true: by default for a completion, not for a chat,
 * whose template writes the BOS itself. A request that sets the field otherwise starts its
 * first KV block with other tokens; the scorer tokenized it as if it had not set it, so it
 * looked up keys its engine never stored and missed the endpoint that holds its prefix.
 */
class AddSpecialTokensTest {
  private static final String WITH = "10.0.0.1:8000";
  private static final String WITHOUT = "10.0.0.2:8000";

  private static void store(KvBlockIndex index, String ep, int[] tokens, long firstHash) {
    int blocks = tokens.length / 16;
    long[] hashes = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      hashes[i] = firstHash + i;
    }
    index.apply(ep, KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(hashes, null,
        Arrays.copyOf(tokens, blocks * 16), 16))));
  }

  @Test
  void theScorerTokenizesAsTheRequestsAddSpecialTokensSays() throws Exception {
    try (HuggingFaceTokenizer llama = HuggingFaceTokenizer.load(RealTokenizers.dir("llama3_1"))) {
      String text = "The quick brown fox jumps over the lazy dog. ".repeat(12);
      List<ChatMessage> chat = List.of(ChatMessage.user(text));
      String rendered = llama.renderChat(chat, null, ChatTemplateArgs.DEFAULTS);
      assertThat(llama.encodePrompt(text)).hasSize(llama.encode(text).length + 1);

      AtomicLong now = new AtomicLong(1_000_000_000L);
      KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();
      // what each engine stored: with and without the BOS the tokenizer adds
      store(index, WITH, llama.encodePrompt(text), 100);
      store(index, WITHOUT, llama.encode(text), 200);
      store(index, WITH, llama.encodePrompt(rendered), 300);
      store(index, WITHOUT, llama.encode(rendered), 400);
      try (Router router = Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
          .service(KvBlockIndex.class, index).service(Tokenizer.class, llama)
          .configYaml(PrecisePrefixCacheScorerTest.yaml("precise-prefix-cache-scorer"), "t")
          .ticker(now::get).randomSeed(5).build()) {
        InferenceRequest completion = InferenceRequest.builder()
            .model(PrecisePrefixCacheScorerTest.MODEL).prompt(text).build();
        assertThat(router.route(completion).primary().id()).isEqualTo(WITH);
        assertThat(router.route(completion.toBuilder().addSpecialTokens(false).build())
            .primary().id()).isEqualTo(WITHOUT);
        InferenceRequest chatRequest = InferenceRequest.builder()
            .model(PrecisePrefixCacheScorerTest.MODEL).messages(chat).build();
        assertThat(router.route(chatRequest).primary().id()).isEqualTo(WITHOUT);
        assertThat(router.route(chatRequest.toBuilder().addSpecialTokens(true).build())
            .primary().id()).isEqualTo(WITH);
        // the per-chunk cache of rendered chats tokenizes such a chat whole, alike
        try (CachingChatTokenizer cached = CachingChatTokenizer.ofRenderedChats(llama, 1 << 20)) {
          assertThat(cached.encodeChat(chat, null, ChatTemplateArgs.DEFAULTS, true))
              .isEqualTo(llama.encodePrompt(rendered));
          assertThat(cached.encodeChat(chat, null, ChatTemplateArgs.DEFAULTS, false))
              .isEqualTo(llama.encode(rendered));
        }
      }
    }
  }
}
