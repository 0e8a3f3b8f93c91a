package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.ConfigException;
import io.epp4j.core.OpenAiRequestParser;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * vLLM started with {@code --exclude-tools-when-tool-choice-none} renders a chat whose
 * {@code tool_choice} is {@code "none"} without its tools ({@code tool_dicts = None}), so the
 * prompt, and every block after the tools' system prompt, differs from the one rendered with
 * them. The scorer's {@code excludeToolsWhenToolChoiceNone} renders such chats the same way.
 */
class ExcludeToolsWhenToolChoiceNoneTest {
  private static final String HOLDS_WITHOUT_TOOLS = "10.0.0.1:8000";
  private static final String HOLDS_WITH_TOOLS = "10.0.0.2:8000";
  private static HuggingFaceTokenizer qwen3;

  @BeforeAll
  static void load() throws Exception {
    qwen3 = HuggingFaceTokenizer.load(RealTokenizers.dir("qwen3"));
  }

  @AfterAll
  static void close() {
    if (qwen3 != null) {
      qwen3.close();
    }
  }

  private static InferenceRequest chat(String toolChoice) {
    String body = """
        {"model":"%s","messages":[{"role":"system","content":"%s"},
          {"role":"user","content":"What is the weather in Paris today, and should I take an umbrella?"}],
         "tools":[{"type":"function","function":{"name":"get_weather",
           "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]
         %s}
        """.formatted(PrecisePrefixCacheScorerTest.MODEL,
        "You answer questions about the weather in one short paragraph. ".repeat(8),
        toolChoice == null ? "" : ",\"tool_choice\":" + toolChoice);
    return OpenAiRequestParser.defaults().parse("/v1/chat/completions", Map.of(),
        body.getBytes(StandardCharsets.UTF_8)).value();
  }

  /** The endpoint the scorer picks with the given parameters, each engine holding one prompt. */
  private static String route(String parameters, InferenceRequest request) {
    int[] without = qwen3.encodeChat(request.messages(), null, ChatTemplateArgs.DEFAULTS);
    int[] with = qwen3.encodeChat(request.messages(), request.toolsJson(),
        ChatTemplateArgs.DEFAULTS);
    AtomicLong now = new AtomicLong(1_000_000_000L);
    KvBlockIndex index = KvBlockIndex.builder().ticker(now::get).build();
    store(index, HOLDS_WITHOUT_TOOLS, without, 1_000);
    store(index, HOLDS_WITH_TOOLS, with, 2_000);
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters: {speculative: false%s}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
          - pluginRef: max-score-picker
        """.formatted(parameters);
    try (Router router = Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
        .service(KvBlockIndex.class, index).service(Tokenizer.class, qwen3)
        .configYaml(yaml, "t").ticker(now::get).randomSeed(1).build()) {
      return router.route(request).primary().id();
    }
  }

  private static void store(KvBlockIndex index, String endpoint, int[] tokens, long firstHash) {
    int blocks = tokens.length / 16;
    long[] hashes = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      hashes[i] = firstHash + i;
    }
    index.apply(endpoint, KvEventBatch.of(0, List.of(KvEvent.BlockStored.of(hashes, null,
        Arrays.copyOf(tokens, blocks * 16), 16))));
  }

  @Test
  void theTwoRenderingsShareTheSystemPromptAndPartAfterIt() {
    InferenceRequest r = chat("\"none\"");
    String without = qwen3.renderChat(r.messages(), null, ChatTemplateArgs.DEFAULTS);
    String with = qwen3.renderChat(r.messages(), r.toolsJson(), ChatTemplateArgs.DEFAULTS);
    // Qwen3's template appends the tools' section to the system message: the blocks of the
    // system prompt are common to both, the ones after it are not
    String system = "<|im_start|>system\n" + r.messages().get(0).content();
    assertThat(with).startsWith(system + "\n\n# Tools\n");
    assertThat(without).startsWith(system + "<|im_end|>\n<|im_start|>user\n");
  }

  @Test
  void withTheFlagAChatWhoseToolChoiceIsNoneIsRenderedWithoutItsTools() {
    String flag = ", excludeToolsWhenToolChoiceNone: true";
    assertThat(route(flag, chat("\"none\""))).isEqualTo(HOLDS_WITHOUT_TOOLS);
    // any other tool_choice keeps the tools, as in vLLM
    assertThat(route(flag, chat(null))).isEqualTo(HOLDS_WITH_TOOLS);
    assertThat(route(flag, chat("\"auto\""))).isEqualTo(HOLDS_WITH_TOOLS);
    assertThat(route(flag, chat("\"required\""))).isEqualTo(HOLDS_WITH_TOOLS);
    assertThat(route(flag, chat("{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}")))
        .isEqualTo(HOLDS_WITH_TOOLS);
  }

  @Test
  void withoutTheFlagToolChoiceNoneKeepsTheTools() {
    // vLLM's default: the tools are rendered whatever tool_choice says
    assertThat(route("", chat("\"none\""))).isEqualTo(HOLDS_WITH_TOOLS);
    assertThat(route(", excludeToolsWhenToolChoiceNone: false", chat("\"none\"")))
        .isEqualTo(HOLDS_WITH_TOOLS);
  }

  @Test
  void aValueThatIsNotABooleanIsRefusedNamingTheField() {
    String yaml = PrecisePrefixCacheScorerTest.preciseOnly(
        "kvEvents: {mode: none}, excludeToolsWhenToolChoiceNone: [1]");
    assertThatThrownBy(() -> Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
        .configYaml(yaml, "t").build()).isInstanceOf(ConfigException.class)
        .hasMessageContaining("excludeToolsWhenToolChoiceNone");
  }
}
