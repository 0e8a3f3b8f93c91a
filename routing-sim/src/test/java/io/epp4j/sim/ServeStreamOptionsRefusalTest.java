package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * vLLM's {@code validate_stream_options}: {@code stream_options} without a stream is a 400 in its
 * words, naming the field in the message's {@code (parameter=...)} and in {@code param}. Both
 * values are tested for Python truth on the raw body, before any field's type is checked.
 */
@Timeout(60)
class ServeStreamOptionsRefusalTest {
  private static final String MESSAGE = "Stream options can only be defined when `stream=True`."
      + " (parameter=stream_options)";
  private static final String CHAT = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
  private static final String COMPLETION = "\"prompt\":[5,6,7]";
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private static String path(String input) {
    return input.equals(CHAT) ? "/v1/chat/completions" : "/v1/completions";
  }

  @Test
  void streamOptionsWithoutAStreamAreRefusedInVllmsWordsNamingTheField() throws Exception {
    int port = replica.start();
    for (String input : List.of(COMPLETION, CHAT)) {
      for (String body : List.of(
          "{" + input + ",\"max_tokens\":2,\"stream_options\":{\"include_usage\":true}}",
          "{" + input + ",\"max_tokens\":2,\"stream\":false,\"stream_options\":"
              + "{\"include_usage\":true}}",
          "{" + input + ",\"max_tokens\":2,\"stream\":0,\"stream_options\":"
              + "{\"continuous_usage_stats\":true}}",
          "{" + input + ",\"max_tokens\":2,\"stream\":null,\"stream_options\":"
              + "{\"include_usage\":false}}",
          // vLLM's validator runs before the fields' types are checked
          "{" + input + ",\"max_tokens\":2,\"stream_options\":\"yes\"}",
          "{" + input + ",\"max_tokens\":2,\"model\":5,\"stream_options\":"
              + "{\"include_usage\":true}}")) {
        JsonNode error = replica.refusal(port, path(input), body);
        assertThat(error.get("message").asText()).as(body).isEqualTo(MESSAGE);
        assertThat(error.get("param").asText()).as(body).isEqualTo("stream_options");
        assertThat(error.get("type").asText()).as(body).isEqualTo("BadRequestError");
      }
    }
  }

  @Test
  void streamOptionsThatAreFalseInPythonOrAStreamThatIsTrueInPythonPass() throws Exception {
    int port = replica.start();
    for (String input : List.of(COMPLETION, CHAT)) {
      for (String options : List.of("{}", "null")) {
        assertThat(replica.post(port, path(input), "{" + input + ",\"max_tokens\":2,"
            + "\"stream_options\":" + options + "}").statusCode()).as(options).isEqualTo(200);
      }
      // the string "false" is true to vLLM's validator, and the field then reads it as false:
      // a whole answer
      var res = replica.post(port, path(input), "{" + input + ",\"max_tokens\":2,"
          + "\"stream\":\"false\",\"stream_options\":{\"include_usage\":true}}");
      assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
      assertThat(res.body()).startsWith("{");
    }
  }
}
