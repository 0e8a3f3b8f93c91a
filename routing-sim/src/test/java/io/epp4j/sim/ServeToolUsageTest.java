package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A chat's {@code tools} and {@code tool_choice} as vLLM's request model checks them: an empty
 * {@code tools} array, and a {@code tool_choice} without {@code tools}, are refused with vLLM's
 * 400, its words and its param. Before, serve answered both. So is a {@code tool_choice} that
 * chooses nothing vLLM takes: a value other than "none", "auto" or "required", or a named function
 * that is not among the tools.
 */
@Timeout(60)
class ServeToolUsageTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CHAT = "/v1/chat/completions";
  private static final String MESSAGES =
      "\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}],\"max_tokens\":2";
  private static final String TOOL = "{\"type\":\"function\",\"function\":{\"name\":\"f\","
      + "\"parameters\":{\"type\":\"object\",\"properties\":{}}}}";
  private static final String EMPTY = "`tools` must not be an empty array. Either provide at"
      + " least one tool or omit the field entirely. (parameter=tools)";
  private static final String NO_TOOLS =
      "When using `tool_choice`, `tools` must be set. (parameter=tool_choice)";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private void assertRefused(int port, String fields, String message, String param)
      throws Exception {
    String body = "{" + MESSAGES + fields + "}";
    HttpResponse<String> res = replica.post(port, CHAT, body);
    assertThat(res.statusCode()).as(body).isEqualTo(400);
    JsonNode e = JSON.readTree(res.body()).path("error");
    assertThat(e.path("message").asText()).as(body).isEqualTo(message);
    assertThat(e.path("param").asText()).as(body).isEqualTo(param);
    assertThat(e.path("type").asText()).isEqualTo("BadRequestError");
  }

  private void assertServed(int port, String path, String body) throws Exception {
    HttpResponse<String> res = replica.post(port, path, body);
    assertThat(res.statusCode()).as(body + ": " + res.body()).isEqualTo(200);
  }

  @Test
  void anEmptyToolsArrayIsRefusedAsVllmRefusesIt() throws Exception {
    int port = replica.start();
    assertRefused(port, ",\"tools\":[]", EMPTY, "tools");
    // checked before tool_choice, whatever it says
    assertRefused(port, ",\"tools\":[],\"tool_choice\":\"none\"", EMPTY, "tools");
    assertRefused(port, ",\"tools\":[],\"tool_choice\":\"auto\"", EMPTY, "tools");
    assertServed(port, CHAT, "{" + MESSAGES + ",\"tools\":[" + TOOL + "]}");
    assertServed(port, CHAT, "{" + MESSAGES + ",\"tools\":null}");
    // a completion request has no tools field: vLLM ignores it there
    assertServed(port, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":2,\"tools\":[]}");
  }

  @Test
  void aToolChoiceWithoutToolsIsRefusedAsVllmRefusesIt() throws Exception {
    int port = replica.start();
    for (String choice : new String[] {"\"auto\"", "\"required\"",
        "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"}) {
      assertRefused(port, ",\"tool_choice\":" + choice, NO_TOOLS, "tool_choice");
      assertRefused(port, ",\"tool_choice\":" + choice + ",\"tools\":null", NO_TOOLS,
          "tool_choice");
    }
    // "none" and null need no tools
    assertServed(port, CHAT, "{" + MESSAGES + ",\"tool_choice\":\"none\"}");
    assertServed(port, CHAT, "{" + MESSAGES + ",\"tool_choice\":null}");
    assertServed(port, CHAT, "{" + MESSAGES + ",\"tool_choice\":\"auto\",\"tools\":[" + TOOL
        + "]}");
  }

  @Test
  void aToolChoiceThatChoosesNoneOfTheToolsIsRefusedAsVllmRefusesIt() throws Exception {
    int port = replica.start();
    String tools = ",\"tools\":[" + TOOL + "]";
    String usage = " Correct usage: `{\"type\": \"function\", \"function\": {\"name\":"
        + " \"my_function\"}}`";
    assertRefused(port, tools + ",\"tool_choice\":\"sometimes\"", "Invalid value for"
        + " `tool_choice`: sometimes! Only named tools, \"none\", \"auto\" or \"required\" are"
        + " supported. (parameter=tool_choice)", "tool_choice");
    assertRefused(port, tools + ",\"tool_choice\":5", "Invalid value for `tool_choice`: 5!"
        + " Only named tools, \"none\", \"auto\" or \"required\" are supported."
        + " (parameter=tool_choice)", "tool_choice");
    assertRefused(port, tools + ",\"tool_choice\":{\"type\":\"function\"}", "Invalid value"
        + " for `function`: `None` in `tool_choice`!" + usage
        + " (parameter=tool_choice.function)", "tool_choice.function");
    assertRefused(port, tools + ",\"tool_choice\":{\"function\":{}}", "Expected field `name`"
        + " in `function` in `tool_choice`!" + usage + " (parameter=tool_choice.function.name)",
        "tool_choice.function.name");
    assertRefused(port, tools + ",\"tool_choice\":{\"function\":{\"name\":\"\"}}", "Invalid"
        + " `name` in `function`: `` in `tool_choice`!" + usage
        + " (parameter=tool_choice.function.name)", "tool_choice.function.name");
    assertRefused(port, tools + ",\"tool_choice\":{\"type\":\"function\",\"function\":"
        + "{\"name\":\"g\"}}", "The tool specified in `tool_choice` does not match any of the"
        + " specified `tools` (parameter=tool_choice)", "tool_choice");
    // a validator of the request model: before an unknown model's 404
    HttpResponse<String> unknown = replica.post(port, CHAT, "{\"model\":\"nope\"," + MESSAGES
        + tools + ",\"tool_choice\":\"sometimes\"}");
    assertThat(unknown.statusCode()).isEqualTo(400);
    // the choices vLLM takes are served
    for (String choice : new String[] {"\"auto\"", "\"required\"", "\"none\"",
        "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"}) {
      assertServed(port, CHAT, "{" + MESSAGES + tools + ",\"tool_choice\":" + choice + "}");
    }
  }

  /**
   * Tools that are not vLLM's {@code ChatCompletionToolsParam} list (not an array, an element
   * that is not an object, a type other than "function", a function without a string name, a
   * description that is not a string, parameters that are not an object) are a 400 naming the
   * field, on chat completions and {@code /tokenize} alike, before the model is looked up, as
   * vLLM's request model refuses them; a well-typed tool without a type or with nulls is served.
   */
  @Test
  void toolsOfTheWrongShapeAreRefusedNamingTheField() throws Exception {
    int port = replica.start();
    String[][] bad = {
        {"\"x\"", "tools"}, {"{}", "tools"}, {"[1]", "tools[0]"},
        {"[" + TOOL + ",{\"type\":\"function\"}]", "tools[1]"},
        {"[{\"type\":\"retrieval\",\"function\":{\"name\":\"f\"}}]", "tools[0]"},
        {"[{\"type\":null,\"function\":{\"name\":\"f\"}}]", "tools[0]"},
        {"[{\"function\":{\"name\":5}}]", "tools[0]"},
        {"[{\"function\":{\"name\":\"f\",\"description\":[]}}]", "tools[0]"},
        {"[{\"function\":{\"name\":\"f\",\"parameters\":\"p\"}}]", "tools[0]"},
    };
    for (String[] b : bad) {
      for (String path : new String[] {CHAT, "/tokenize"}) {
        String body = "{\"model\":\"no-such-model\"," + MESSAGES + ",\"tools\":" + b[0] + "}";
        HttpResponse<String> res = replica.post(port, path, body);
        assertThat(res.statusCode()).as(path + " " + body).isEqualTo(400);
        JsonNode e = JSON.readTree(res.body()).path("error");
        assertThat(e.path("message").asText()).as(body).startsWith("field '" + b[1] + "' must be");
        assertThat(e.path("param").asText()).as(body).isEqualTo("tools");
      }
    }
    assertServed(port, CHAT, "{" + MESSAGES + ",\"tools\":[{\"function\":{\"name\":\"f\","
        + "\"description\":null,\"parameters\":null}}]}");
    assertServed(port, "/tokenize", "{" + MESSAGES + ",\"tools\":[" + TOOL + "]}");
  }
}
