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
 * A request's tools reach the template as vLLM hands them over: each tool dumped from its
 * request model (keys {@code type}, {@code function}; a function's {@code name},
 * {@code description}, {@code parameters}, absent ones as {@code null}, then its other keys as
 * given) and the parameter schema in the client's key order. Qwen3's template prints each tool
 * with {@code tojson}, which keeps that order, so sorted keys would be other tokens than the
 * engine's.
 */
class ChatToolsOrderTest {
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

  @Test
  void toolsRenderInTheOrderTheEngineGivesThem() {
    String body = """
        {"model":"m","messages":[{"role":"user","content":"Weather?"}],
         "tools":[
          {"function":{"parameters":{"type":"object","required":["city"],
             "properties":{"unit":{"enum":["c","f"],"type":"string"},"city":{"type":"string"}}},
             "strict":true,"name":"get_weather","description":"Current weather"},"type":"function"},
          {"type":"function","function":{"name":"ping"}}]}
        """;
    InferenceRequest r = OpenAiRequestParser.defaults().parse("/v1/chat/completions", Map.of(),
        body.getBytes(StandardCharsets.UTF_8)).value();
    // Python's jinja2 rendering of the model's template (set up as transformers does) with the
    // tools as vLLM passes them: ChatCompletionToolsParam.model_validate(tool).model_dump()
    String expected = "<|im_start|>system\n# Tools\n\nYou may call one or more functions to"
        + " assist with the user query.\n\nYou are provided with function signatures within"
        + " <tools></tools> XML tags:\n<tools>\n"
        + "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\":"
        + " \"Current weather\", \"parameters\": {\"type\": \"object\", \"required\": [\"city\"],"
        + " \"properties\": {\"unit\": {\"enum\": [\"c\", \"f\"], \"type\": \"string\"}, \"city\":"
        + " {\"type\": \"string\"}}}, \"strict\": true}}\n"
        + "{\"type\": \"function\", \"function\": {\"name\": \"ping\", \"description\": null,"
        + " \"parameters\": null}}\n"
        + "</tools>\n\nFor each function call, return a json object with function name and"
        + " arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\":"
        + " <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        + "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n";
    assertThat(qwen3.renderChat(r.messages(), r.toolsJson(), true)).isEqualTo(expected);
    assertThat(qwen3.encodeChat(r.messages(), r.toolsJson()))
        .containsExactly(qwen3.encode(expected));
  }
}
