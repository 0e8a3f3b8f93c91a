package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.ChatMessage;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class HuggingFaceTokenizerTest {

  @BeforeAll
  static void offline(@TempDir Path cache) {
    // any attempt to download would go to a dead proxy; the native library must come from the jar
    System.setProperty("DJL_CACHE_DIR", cache.toString());
    System.setProperty("ai.djl.offline", "true");
    System.setProperty("http.proxyHost", "127.0.0.1");
    System.setProperty("http.proxyPort", "9");
    System.setProperty("https.proxyHost", "127.0.0.1");
    System.setProperty("https.proxyPort", "9");
  }

  @AfterAll
  static void restore() {
    for (String p : List.of("ai.djl.offline", "http.proxyHost", "http.proxyPort",
        "https.proxyHost", "https.proxyPort")) {
      System.clearProperty(p);
    }
  }

  static final String TOKENIZER_JSON = """
      {"version": "1.0", "truncation": null, "padding": null,
       "added_tokens": [
         {"id": 0, "content": "<|im_start|>", "single_word": false, "lstrip": false,
          "rstrip": false, "normalized": false, "special": true},
         {"id": 1, "content": "<|im_end|>", "single_word": false, "lstrip": false,
          "rstrip": false, "normalized": false, "special": true}],
       "normalizer": null,
       "pre_tokenizer": {"type": "Whitespace"},
       "post_processor": null, "decoder": null,
       "model": {"type": "WordLevel", "unk_token": "[UNK]",
         "vocab": {"<|im_start|>": 0, "<|im_end|>": 1, "[UNK]": 2, "system": 3, "user": 4,
                   "assistant": 5, "hello": 6, "world": 7, "be": 8, "brief": 9}}}
      """;

  static Path modelDir(Path dir, String chatTemplate) throws Exception {
    Files.writeString(dir.resolve("tokenizer.json"), TOKENIZER_JSON);
    Files.writeString(dir.resolve("tokenizer_config.json"),
        "{\"chat_template\": " + new com.fasterxml.jackson.databind.ObjectMapper()
            .writeValueAsString(chatTemplate) + "}");
    return dir;
  }

  @Test
  void aModelFileThatCannotBeReadIsNamedInTheError(@TempDir Path dir) throws Exception {
    // the loader's errors reach the operator as "parameter 'path' cannot be loaded: <message>";
    // Jackson and the charset decoder do not say which file they were reading
    Files.writeString(dir.resolve("tokenizer.json"), TOKENIZER_JSON);
    Files.writeString(dir.resolve("tokenizer_config.json"), "{\"chat_template\": ");
    assertThatThrownBy(() -> HuggingFaceTokenizer.load(dir))
        .isInstanceOf(java.io.IOException.class)
        .hasMessageContaining(dir.resolve("tokenizer_config.json").toString());
    Files.delete(dir.resolve("tokenizer_config.json"));
    Files.write(dir.resolve("chat_template.jinja"), new byte[] {'{', '{', (byte) 0xff, '}', '}'});
    assertThatThrownBy(() -> HuggingFaceTokenizer.load(dir))
        .isInstanceOf(java.io.IOException.class)
        .hasMessageContaining(dir.resolve("chat_template.jinja").toString());
  }

  @Test
  void tokenizesTextAndChatMlChatsFromAGeneratedTokenizerFile(@TempDir Path dir) throws Exception {
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(modelDir(dir,
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
        + "{% if add_generation_prompt %}<|im_start|>assistant{% endif %}"))) {
      assertThat(t.encode("hello world nope")).containsExactly(6, 7, 2);
      int[] chat = t.encodeChat(List.of(ChatMessage.system("be brief"),
          ChatMessage.user("hello")));
      assertThat(chat).containsExactly(0, 3, 8, 9, 1, 0, 4, 6, 1, 0, 5);
      // the per-message cache gives the same tokens
      CachingChatTokenizer cached = CachingChatTokenizer.ofRenderedChats(t, 10_000);
      assertThat(cached.encodeChat(List.of(ChatMessage.system("be brief"),
          ChatMessage.user("hello")))).containsExactly(chat);
    }
  }

  @Test
  void rendersAnyJinjaTemplateNotOnlyChatMl(@TempDir Path dir) throws Exception {
    String inst = "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] "
        + "{{ m.content.strip() }} [/INST]{% else %}{{ m.content }}{{ eos_token }}{% endif %}"
        + "{% endfor %}";
    Files.writeString(dir.resolve("tokenizer.json"), TOKENIZER_JSON);
    Files.writeString(dir.resolve("tokenizer_config.json"), "{\"bos_token\": \"<s>\","
        + " \"eos_token\": {\"content\": \"</s>\"}, \"chat_template\": "
        + new com.fasterxml.jackson.databind.ObjectMapper().writeValueAsString(inst) + "}");
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(dir)) {
      assertThat(t.renderChat(List.of(ChatMessage.user("  hello "),
          ChatMessage.assistant("world")), null, true))
          .isEqualTo("<s>[INST] hello [/INST]world</s>");
    }
  }

  @Test
  void chatTemplateJinjaFileWinsAndNamedTemplatesPickDefaultOrToolUse(@TempDir Path dir)
      throws Exception {
    Files.writeString(dir.resolve("tokenizer.json"), TOKENIZER_JSON);
    Files.writeString(dir.resolve("tokenizer_config.json"), """
        {"chat_template": [
          {"name": "default", "template": "D{% for m in messages %}{{ m.content }}{% endfor %}"},
          {"name": "tool_use", "template": "T{{ tools[0].function.name }}"}]}
        """);
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(dir)) {
      assertThat(t.renderChat(List.of(ChatMessage.user("hi")), null, true)).isEqualTo("Dhi");
      assertThat(t.renderChat(List.of(ChatMessage.user("hi")),
          "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", true))
          .isEqualTo("Tf");
    }
    Files.writeString(dir.resolve("chat_template.jinja"), "J{{ messages | length }}");
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(dir)) {
      assertThat(t.renderChat(List.of(ChatMessage.user("hi")), null, true)).isEqualTo("J1");
    }
  }

  @Test
  void anObjectOfNamedTemplatesIsReadAsTransformersReadsIt(@TempDir Path dir) throws Exception {
    // transformers takes chat_template as an object of named templates as well as a list; it
    // loaded here as no template at all, and every chat then failed as if the model had none
    Files.writeString(dir.resolve("tokenizer.json"), TOKENIZER_JSON);
    Files.writeString(dir.resolve("tokenizer_config.json"), """
        {"chat_template": {
          "default": "D{% for m in messages %}{{ m.content }}{% endfor %}",
          "tool_use": "T{{ tools[0].function.name }}"}}
        """);
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(dir)) {
      assertThat(t.renderChat(List.of(ChatMessage.user("hi")), null, true)).isEqualTo("Dhi");
      assertThat(t.renderChat(List.of(ChatMessage.user("hi")),
          "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", true))
          .isEqualTo("Tf");
    }
  }

  @Test
  void aChatTemplateOfAnotherShapeFailsAtLoadNamingTheFile(@TempDir Path dir) throws Exception {
    // a number, or a named entry without a string template, loaded as no template or as an
    // empty one (every chat rendered as nothing), unnoticed until chats failed or missed
    Files.writeString(dir.resolve("tokenizer.json"), TOKENIZER_JSON);
    for (String chat : List.of("5", "true", "[{\"name\": \"default\", \"template\": 5}]",
        "[{\"name\": \"default\"}]", "{\"default\": [\"x\"]}")) {
      Files.writeString(dir.resolve("tokenizer_config.json"), "{\"chat_template\": " + chat
          + "}");
      assertThatThrownBy(() -> HuggingFaceTokenizer.load(dir)).as(chat)
          .isInstanceOf(java.io.IOException.class)
          .hasMessageContaining(dir.resolve("tokenizer_config.json").toString())
          .hasMessageContaining("chat_template");
    }
  }

  @Test
  void aTemplateThatCannotRenderFailsAtLoadNamingTheFile(@TempDir Path dir) throws Exception {
    assertThatThrownBy(() -> HuggingFaceTokenizer.load(modelDir(dir,
        "{{ raise_exception('this model takes no chats') }}")))
        .isInstanceOf(java.io.IOException.class)
        .hasMessageContaining("tokenizer_config.json")
        .hasMessageContaining("this model takes no chats");
    assertThatThrownBy(() -> HuggingFaceTokenizer.load(modelDir(dir,
        "{% for m in messages %}{{ m.content }}")))
        .isInstanceOf(java.io.IOException.class)
        .hasMessageContaining("tokenizer_config.json");
  }

  @Test
  void withoutAChatTemplateChatsAreRefusedWithAClearMessage(@TempDir Path dir) throws Exception {
    Files.writeString(dir.resolve("tokenizer.json"), TOKENIZER_JSON);
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(dir)) {
      assertThat(t.hasChatTemplate()).isFalse();
      assertThatThrownBy(() -> t.encodeChat(List.of(ChatMessage.user("hello"))))
          .isInstanceOf(Tokenizer.TokenizationException.class)
          .hasMessageContaining("no chat template");
    }
  }

  @Test
  void chatsWhoseMessagesShareAChunkAreTokenizedWholeNotCached(@TempDir Path dir)
      throws Exception {
    // messages joined by plain text: no special token between them, so per-chunk caching would
    // cache whole conversations, and the tokenizer must not pretend otherwise
    modelDir(dir, "<|im_start|>{% for m in messages %}{{ m.role }} {{ m.content }} "
        + "{% endfor %}<|im_end|>");
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(dir)) {
      assertThat(t.chunkingExact()).isFalse();
      assertThatThrownBy(() -> CachingChatTokenizer.ofRenderedChats(t, 1_000))
          .isInstanceOf(IllegalArgumentException.class);
    }
    io.epp4j.api.Parameters p = io.epp4j.api.Parameters.of(java.util.Map.of(
        "type", "huggingface", "path", dir.toString()));
    var made = KvEventsPluginProviders.createTokenizer(p);
    assertThat(made.isOk()).isTrue();
    try (Tokenizer t = made.value()) {
      assertThat(t).isInstanceOf(HuggingFaceTokenizer.class);
      assertThat(t.encodeChat(List.of(ChatMessage.user("hello world"))))
          .containsExactly(0, 4, 6, 7, 1);
    }
    modelDir(dir, "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>"
        + "{% endfor %}");
    var cached = KvEventsPluginProviders.createTokenizer(io.epp4j.api.Parameters.of(
        java.util.Map.of("type", "huggingface", "path", dir.toString())));
    try (Tokenizer t = cached.value()) {
      assertThat(t).isInstanceOf(CachingChatTokenizer.class);
    }
  }

  /** {@link #TOKENIZER_JSON} whose post-processor adds a BOS token, as Llama's and Gemma's do. */
  static final String BOS_TOKENIZER_JSON = """
      {"version": "1.0", "truncation": null, "padding": null,
       "added_tokens": [
         {"id": 10, "content": "<s>", "single_word": false, "lstrip": false,
          "rstrip": false, "normalized": false, "special": true}],
       "normalizer": null,
       "pre_tokenizer": {"type": "Whitespace"},
       "post_processor": {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<s>": {"id": "<s>", "ids": [10], "tokens": ["<s>"]}}},
       "decoder": null,
       "model": {"type": "WordLevel", "unk_token": "[UNK]",
         "vocab": {"[UNK]": 2, "hello": 6, "world": 7, "<s>": 10}}}
      """;

  @Test
  void completionPromptsStartWithTheBosTokenVllmAddsAndMatchTheEnginesBlocks(@TempDir Path dir)
      throws Exception {
    // vLLM's /v1/completions tokenizes the prompt with add_special_tokens=true: a Llama or Gemma
    // engine stores blocks that start with BOS. Chats get theirs from the template instead.
    Files.writeString(dir.resolve("tokenizer.json"), BOS_TOKENIZER_JSON);
    Files.writeString(dir.resolve("tokenizer_config.json"), "{\"bos_token\": \"<s>\","
        + " \"chat_template\": \"{{ bos_token }}{% for m in messages %}{{ m.content }} "
        + "{% endfor %}\"}");
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(dir)) {
      assertThat(t.encodePrompt("hello world")).containsExactly(10, 6, 7);
      assertThat(t.encode("hello world")).containsExactly(6, 7);
      assertThat(t.encodeChat(List.of(ChatMessage.user("hello")))).containsExactly(10, 6);
      KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(2).build();
      // 10.0.0.2 holds the prompt as the engine tokenized it, 10.0.0.3 the same words without BOS
      index.apply("10.0.0.2:8000", KvEvent.BlockStored.of(new long[] {1, 2}, null,
          new int[] {10, 6, 7, 6}, 2));
      index.apply("10.0.0.3:8000", KvEvent.BlockStored.of(new long[] {1, 2}, null,
          new int[] {6, 7, 6, 7}, 2));
      String yaml = PrecisePrefixCacheScorerTest.preciseOnly("speculative: false");
      try (io.epp4j.core.Router router = io.epp4j.core.Router.builder()
          .endpoints(PrecisePrefixCacheScorerTest.EPS).service(KvBlockIndex.class, index)
          .service(Tokenizer.class, t).configYaml(yaml, "t").build()) {
        io.epp4j.api.InferenceRequest completion =
            io.epp4j.api.InferenceRequest.completion("m", "hello world hello world");
        assertThat(router.route(completion).primary().id()).isEqualTo("10.0.0.2:8000");
        io.epp4j.api.InferenceRequest chat = io.epp4j.api.InferenceRequest.builder().model("m")
            .messages(List.of(ChatMessage.user("hello world hello"))).build();
        assertThat(router.route(chat).primary().id()).isEqualTo("10.0.0.2:8000");
      }
    }
  }

  @Test
  void longTextsAreNotTruncated(@TempDir Path dir) throws Exception {
    // precise mode matches every block of a prompt: the tokenizer must not stop at a length
    String text = "hello world ".repeat(3_000);
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(modelDir(dir, "x"))) {
      assertThat(t.encode(text)).hasSize(6_000);
    }
  }
}
