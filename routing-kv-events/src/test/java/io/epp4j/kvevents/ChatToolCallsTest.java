package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.InferenceRequest;
import io.epp4j.core.OpenAiRequestParser;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A tool-calling chat reaches the model's template as vLLM hands it over: the assistant's
 * {@code tool_calls} (each call's arguments parsed from their JSON string into an object), its
 * {@code reasoning}, and the tool results' {@code tool_call_id} and {@code name} as fields of
 * the message, not as text appended to the content. Qwen3's template renders them itself
 * ({@code <tool_call>} blocks, a {@code <think>} block, {@code <tool_response>} blocks).
 */
class ChatToolCallsTest {
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

  private static InferenceRequest parse(String body) {
    var r = OpenAiRequestParser.defaults().parse("/v1/chat/completions", Map.of(),
        body.getBytes(StandardCharsets.UTF_8));
    assertThat(r.errors()).isEmpty();
    return r.value();
  }

  /** Keys in vLLM's order for a tool, which is not this test's subject (see ChatToolsOrderTest). */
  private static final String TOOLS = """
      [{"type":"function","function":{"name":"get_weather","description":"Current weather",
        "parameters":{"properties":{"city":{"type":"string"},"unit":{"type":"string"}},
        "required":["city"],"type":"object"}}}]""";

  @Test
  void toolCallsReasoningAndToolResultsRenderAsTheEngineRendersThem() {
    InferenceRequest r = parse("""
        {"model":"m","tools":%s,"messages":[
          {"role":"system","content":"You are terse."},
          {"role":"user","content":"Weather in Paris and Tokyo?"},
          {"role":"assistant","content":null,"reasoning":"Two cities: call twice.",
           "tool_calls":[
            {"id":"c1","type":"function","function":{"name":"get_weather",
             "arguments":"{\\"city\\":\\"Paris\\",\\"unit\\":\\"C\\"}"}},
            {"id":"c2","type":"function","function":{"name":"get_weather",
             "arguments":"{\\"city\\": \\"東京\\"}"}}]},
          {"role":"tool","tool_call_id":"c1","name":"get_weather","content":"20C"},
          {"role":"tool","content":"25C","tool_call_id":"c2","name":"get_weather"}]}
        """.formatted(TOOLS));
    // Python's jinja2 rendering of the model's template (set up as transformers does) for the
    // messages as vLLM builds them: arguments json.loads-ed, reasoning as reasoning_content
    String expected = "<|im_start|>system\nYou are terse.\n\n# Tools\n\nYou may call one or more"
        + " functions to assist with the user query.\n\nYou are provided with function"
        + " signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\","
        + " \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather\","
        + " \"parameters\": {\"properties\": {\"city\": {\"type\": \"string\"}, \"unit\":"
        + " {\"type\": \"string\"}}, \"required\": [\"city\"], \"type\": \"object\"}}}\n"
        + "</tools>\n\nFor each function call, return a json object with function name and"
        + " arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\":"
        + " <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        + "<|im_start|>user\nWeather in Paris and Tokyo?<|im_end|>\n"
        + "<|im_start|>assistant\n<think>\nTwo cities: call twice.\n</think>\n\n"
        + "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\","
        + " \"unit\": \"C\"}}\n</tool_call>\n"
        + "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\"}}\n"
        + "</tool_call><|im_end|>\n"
        + "<|im_start|>user\n<tool_response>\n20C\n</tool_response>\n<tool_response>\n25C\n"
        + "</tool_response><|im_end|>\n<|im_start|>assistant\n";
    String rendered = qwen3.renderChat(r.messages(), r.toolsJson(), true);
    assertThat(rendered).isEqualTo(expected);
    // and the block keys come from those tokens
    assertThat(qwen3.encodeChat(r.messages(), r.toolsJson())).containsExactly(
        qwen3.encode(expected));
  }

  @Test
  void reasoningContentIsTheReasoningAsVllmRenamesIt() {
    // vLLM's ChatCompletionRequest renames a message's deprecated reasoning_content to
    // reasoning when it has none, so Qwen3 renders the <think> block for either
    String chat = """
        {"model":"m","messages":[{"role":"user","content":"Weather in Paris?"},
          {"role":"assistant","content":null,%s,"tool_calls":[{"id":"c1","type":"function",
           "function":{"name":"get_weather","arguments":"{\\"city\\":\\"Paris\\"}"}}]},
          {"role":"tool","tool_call_id":"c1","content":"20C"}]}
        """;
    String viaReasoning = qwen3.renderChat(parse(chat.formatted("\"reasoning\":\"One city.\""))
        .messages(), null, true);
    assertThat(viaReasoning).contains("<think>\nOne city.\n</think>");
    assertThat(qwen3.renderChat(parse(chat.formatted("\"reasoning_content\":\"One city.\""))
        .messages(), null, true)).isEqualTo(viaReasoning);
    // reasoning, when given, is the one kept
    assertThat(qwen3.renderChat(parse(chat.formatted("\"reasoning_content\":\"Other.\","
        + "\"reasoning\":\"One city.\"")).messages(), null, true)).isEqualTo(viaReasoning);
  }

  @Test
  void argumentsThatAreNotAJsonObjectRenderAsAnEmptyObjectAsTheEngineMakesThem() {
    // vLLM replaces absent, empty, malformed or non-object arguments with {} before rendering
    InferenceRequest r = parse("""
        {"model":"m","messages":[
          {"role":"user","content":"go"},
          {"role":"assistant","content":"ok","tool_calls":[
            {"id":"a","type":"function","function":{"name":"f","arguments":""}},
            {"id":"b","type":"function","function":{"name":"f","arguments":"{oops"}},
            {"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}},
            {"id":"d","type":"function","function":{"name":"f","arguments":"{} {}"}}]},
          {"role":"user","content":"again"}]}
        """);
    String rendered = qwen3.renderChat(r.messages(), null, false);
    String call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    assertThat(rendered).isEqualTo("<|im_start|>user\ngo<|im_end|>\n"
        + "<|im_start|>assistant\nok\n" + call + "\n" + call + "\n" + call + "\n" + call
        + "<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n");
  }

  @Test
  void anEmptyToolCallListAndFieldsOfOtherRolesAreNotGivenToTheTemplate() {
    // vLLM drops an empty tool_calls list, and reads tool_calls and reasoning of an assistant
    // only: such a chat renders as the plain one
    InferenceRequest with = parse("""
        {"model":"m","messages":[
          {"role":"user","content":"hi","tool_calls":[{"id":"x","type":"function",
           "function":{"name":"f","arguments":"{}"}}],"reasoning":"r"},
          {"role":"assistant","content":"hello","tool_calls":[]}]}
        """);
    InferenceRequest plain = parse("""
        {"model":"m","messages":[{"role":"user","content":"hi"},
          {"role":"assistant","content":"hello"}]}
        """);
    assertThat(qwen3.renderChat(with.messages(), null, true))
        .isEqualTo(qwen3.renderChat(plain.messages(), null, true));
  }
}
