package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.ChatMessage;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * In-process chat templates against the reference: for real models' tokenizer files, every
 * golden case (multi-turn with a system prompt, tools, with and without the generation prompt,
 * non-ASCII and edge whitespace, a tool result, roles a template refuses) must render to the
 * exact text Python's jinja2 renders as transformers sets it up, and tokenize to the exact IDs
 * an independent tokenizer implementation gives for that text. The goldens and the scripts
 * that made them are in src/test/resources/chat-goldens and scripts/.
 */
class ChatTemplateExactnessTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  /** Loaded once per family: Gemma's tokenizer.json alone is 33 MB. */
  private static final Map<String, HuggingFaceTokenizer> LOADED = new HashMap<>();

  private static HuggingFaceTokenizer tokenizer(String family) throws Exception {
    HuggingFaceTokenizer t = LOADED.get(family);
    if (t == null) {
      t = HuggingFaceTokenizer.load(RealTokenizers.dir(family));
      LOADED.put(family, t);
    }
    return t;
  }

  @AfterAll
  static void close() {
    LOADED.values().forEach(HuggingFaceTokenizer::close);
    LOADED.clear();
  }

  @ParameterizedTest
  @ValueSource(strings = {"llama3_1", "qwen3", "gemma3", "deepseek_v3"})
  void rendersAndTokenizesExactlyAsTheReference(String family) throws Exception {
    JsonNode golden = golden(family);
    HuggingFaceTokenizer t = tokenizer(family);
    int checked = 0;
    for (JsonNode c : golden.get("cases")) {
      String name = family + "/" + c.get("name").asText();
      List<ChatMessage> messages = messages(c);
      String tools = c.get("tools").isNull() ? null : JSON.writeValueAsString(c.get("tools"));
      boolean genPrompt = c.get("add_generation_prompt").asBoolean();
      if (c.has("error")) {
        assertThatThrownBy(() -> t.renderChat(messages, tools, genPrompt)).as(name)
            .isInstanceOf(Tokenizer.TokenizationException.class)
            .hasMessageContaining(c.get("error").asText());
        continue;
      }
      String text = t.renderChat(messages, tools, genPrompt);
      assertThat(text).as(name + " rendered text").isEqualTo(c.get("text").asText());
      int[] want = ids(c.get("ids"));
      assertThat(t.encode(text)).as(name + " token IDs").containsExactly(want);
      if (genPrompt) {
        assertThat(t.encodeChat(messages, tools)).as(name + " encodeChat").containsExactly(want);
      }
      checked++;
    }
    assertThat(checked).as("golden cases rendered").isGreaterThanOrEqualTo(4);
  }

  @ParameterizedTest
  @ValueSource(strings = {"llama3_1", "qwen3", "gemma3", "deepseek_v3"})
  void cachedChunksGiveTheWholeChatsTokensTurnAfterTurn(String family) throws Exception {
    JsonNode golden = golden(family);
    HuggingFaceTokenizer t = tokenizer(family);
    assertThat(t.chunkingExact()).as(family + ": every message between special tokens")
        .isTrue();
    // not closed: closing it would close the shared tokenizer
    CachingChatTokenizer cached = CachingChatTokenizer.ofRenderedChats(t, 1_000_000);
    for (int round = 0; round < 2; round++) {
      for (JsonNode c : golden.get("cases")) {
        if (c.has("error") || !c.get("add_generation_prompt").asBoolean()) {
          continue;
        }
        String tools = c.get("tools").isNull() ? null : JSON.writeValueAsString(c.get("tools"));
        List<ChatMessage> messages = messages(c);
        assertThat(cached.encodeChat(messages, tools)).as(family + "/" + c.get("name"))
            .containsExactly(ids(c.get("ids")));
      }
    }
    assertThat(cached.tokensFromCache()).as("second round served from the cache").isPositive();
  }

  static JsonNode golden(String family) throws Exception {
    try (InputStream in = ChatTemplateExactnessTest.class
        .getResourceAsStream("/chat-goldens/" + family + ".json")) {
      assertThat(in).as("golden file of " + family).isNotNull();
      return JSON.readTree(in);
    }
  }

  static List<ChatMessage> messages(JsonNode c) {
    List<ChatMessage> out = new ArrayList<>();
    for (JsonNode m : c.get("messages")) {
      out.add(new ChatMessage(m.get("role").asText(), m.get("content").asText()));
    }
    return out;
  }

  static int[] ids(JsonNode arr) {
    int[] out = new int[arr.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = arr.get(i).asInt();
    }
    return out;
  }
}
