package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.http.HttpResponse;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The fields of vLLM's completion and chat request models that the emulator does not use are
 * still typed as vLLM types them: a value of another type is a 400 naming the field, before the
 * model check, and one vLLM takes (null where the field is optional, an integer where a float is
 * expected, pydantic's lax booleans) is taken. A field only the other request model has is
 * ignored, as vLLM ignores it.
 */
@Timeout(60)
class ServeUnusedFieldTypesTest {
  private static final String COMPLETION = "/v1/completions";
  private static final String CHAT = "/v1/chat/completions";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  /** A field, the endpoints that type it, values vLLM refuses and values it takes. */
  private record Case(String field, List<String> paths, List<String> refused,
      List<String> taken) {}

  private static final List<String> BOTH = List.of(COMPLETION, CHAT);

  private static final List<Case> CASES = List.of(
      new Case("user", BOTH, List.of("5", "true", "[\"u\"]", "{}"),
          List.of("\"u-1\"", "null")),
      new Case("use_beam_search", BOTH, List.of("null", "\"maybe\"", "2", "[]"),
          List.of("false", "0", "\"off\"")),
      new Case("length_penalty", BOTH, List.of("null", "\"a\"", "[1]", "{}"),
          List.of("1", "0.5", "\"2.5\"")),
      new Case("skip_special_tokens", BOTH, List.of("null", "\"x\"", "{}"),
          List.of("true", "\"false\"")),
      new Case("spaces_between_special_tokens", BOTH, List.of("null", "3", "[true]"),
          List.of("true", "1")),
      new Case("allowed_token_ids", BOTH, List.of("5", "[\"a\"]", "[1.5]", "[[1]]", "{}"),
          List.of("null")),
      new Case("structured_outputs", BOTH, List.of("\"json\"", "[]", "{\"regex\":5}",
          "{\"choice\":\"a\"}", "{\"choice\":[1]}", "{\"json\":3}",
          "{\"json_object\":\"x\"}", "{\"disable_fallback\":null}"),
          List.of("null", "{}", "{\"json\":{\"type\":\"object\"}}", "{\"json\":\"{}\"}",
              "{\"regex\":\"a+\",\"unknown\":[1]}", "{\"choice\":[\"a\",\"b\"]}")),
      new Case("request_id", BOTH, List.of("null", "5", "[\"r\"]"), List.of("\"r-1\"")),
      new Case("logits_processors", BOTH, List.of("\"a.b\"", "{}", "[5]", "[{}]",
          "[{\"qualname\":3}]", "[{\"qualname\":\"a.B\",\"args\":5}]",
          "[{\"qualname\":\"a.B\",\"kwargs\":[]}]"),
          List.of("null", "[]")),
      new Case("return_tokens_as_token_ids", BOTH, List.of("\"x\"", "[]", "5"),
          List.of("null", "false", "\"no\"")),
      new Case("kv_transfer_params", BOTH, List.of("[]", "\"a\"", "1"),
          List.of("null", "{}", "{\"do_remote_prefill\":false,\"x\":[1,{}]}")),
      new Case("vllm_xargs", BOTH, List.of("[]", "\"a\"", "{\"k\":{}}", "{\"k\":null}",
          "{\"k\":[{}]}"),
          List.of("null", "{}", "{\"a\":\"s\",\"b\":1,\"c\":2.5,\"d\":true}")),
      new Case("include_reasoning", List.of(CHAT), List.of("null", "\"x\"", "[]"),
          List.of("true", "\"false\"")),
      new Case("parallel_tool_calls", List.of(CHAT), List.of("\"x\"", "2", "{}"),
          List.of("null", "true")),
      new Case("bad_words", List.of(CHAT), List.of("null", "\"w\"", "[1]", "[[\"w\"]]"),
          List.of("[]", "[\"never\"]")),
      new Case("mm_processor_kwargs", List.of(CHAT), List.of("[]", "5", "\"a\""),
          List.of("null", "{}", "{\"fps\":2}")));

  private static String input(String path) {
    return path.equals(CHAT) ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}]"
        : "\"prompt\":\"hi there\"";
  }

  @Test
  void aValueOfAnotherTypeIsNamedBeforeTheModelCheck() throws Exception {
    int port = replica.start();
    for (Case c : CASES) {
      for (String path : c.paths()) {
        for (String bad : c.refused()) {
          JsonNode error = replica.refusal(port, path, "{" + input(path)
              + ",\"model\":\"no-such-model\",\"" + c.field() + "\":" + bad + "}");
          assertThat(error.get("message").asText()).as(path + " " + c.field() + " " + bad)
              .startsWith("field '" + c.field() + "' must be ")
              .doesNotContain("hi there");
          assertThat(error.get("param").asText()).isEqualTo(c.field());
        }
      }
    }
  }

  @Test
  void aValueVllmTakesIsTaken() throws Exception {
    int port = replica.start();
    for (Case c : CASES) {
      for (String path : c.paths()) {
        for (String good : c.taken()) {
          HttpResponse<String> res = replica.post(port, path, "{" + input(path)
              + ",\"max_tokens\":2,\"" + c.field() + "\":" + good + "}");
          assertThat(res.statusCode()).as(path + " " + c.field() + " " + good + ": "
              + res.body()).isEqualTo(200);
        }
      }
    }
  }

  @Test
  void aFieldOnlyTheChatModelHasIsIgnoredByCompletions() throws Exception {
    int port = replica.start();
    for (String field : List.of("\"include_reasoning\":\"x\"", "\"bad_words\":5",
        "\"mm_processor_kwargs\":5", "\"parallel_tool_calls\":[]")) {
      HttpResponse<String> res = replica.post(port, COMPLETION, "{" + input(COMPLETION)
          + ",\"max_tokens\":2," + field + "}");
      assertThat(res.statusCode()).as(field + ": " + res.body()).isEqualTo(200);
    }
    // and a chat's vllm_xargs may hold arrays, a completion's may not
    String xargs = ",\"max_tokens\":2,\"vllm_xargs\":{\"k\":[\"a\",1]}}";
    assertThat(replica.post(port, CHAT, "{" + input(CHAT) + xargs).statusCode())
        .isEqualTo(200);
    assertThat(replica.refusal(port, COMPLETION, "{" + input(COMPLETION) + xargs)
        .get("param").asText()).isEqualTo("vllm_xargs");
  }
}
