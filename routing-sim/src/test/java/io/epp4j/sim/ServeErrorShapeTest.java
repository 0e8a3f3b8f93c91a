package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * vLLM's error object, {@code {"error": {"message", "type", "param", "code"}}}, is one shape
 * whether it is a whole answer or an event of a stream (its streaming error response dumps the
 * same model): a client that reads {@code error.param} finds it, null, in both.
 */
@Timeout(60)
class ServeErrorShapeTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  @Test
  void aStreamedErrorEventCarriesTheSameFieldsAsAWholeErrorAnswer() throws Exception {
    try (OneReplica replica = new OneReplica();
        Socket s = new Socket()) {
      // real time: 2,000 tokens last far longer than the test
      int port = replica.start(List.of(), 1);
      HttpResponse<String> whole = replica.post(port, "/v1/completions", "{\"max_tokens\":1}");
      assertThat(whole.statusCode()).as(whole.body()).isEqualTo(400);
      JsonNode wholeError = JSON.readTree(whole.body()).get("error");

      s.connect(new java.net.InetSocketAddress(InetAddress.getLoopbackAddress(), port));
      s.setSoTimeout(30_000);
      byte[] body = "{\"prompt\":[1,2,3],\"max_tokens\":2000,\"stream\":true}"
          .getBytes(StandardCharsets.UTF_8);
      OutputStream out = s.getOutputStream();
      out.write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          + "Content-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
      out.write(body);
      out.flush();
      StringBuilder read = new StringBuilder();
      InputStream in = s.getInputStream();
      readUntil(in, read, "\"text\"");
      // a stop while the stream is under way: it ends with an error event
      replica.serve().close();
      readUntil(in, read, "data: [DONE]");
      JsonNode streamed = null;
      for (String line : read.toString().split("\r?\n")) {
        if (line.startsWith("data: {\"error\"")) {
          streamed = JSON.readTree(line.substring("data: ".length())).get("error");
        }
      }
      assertThat(streamed).as("the error event in %s", read).isNotNull();
      assertThat(fieldNames(streamed)).isEqualTo(fieldNames(wholeError))
          .containsExactly("message", "type", "param", "code");
      assertThat(streamed.get("param").isNull()).isTrue();
      assertThat(streamed.get("code").asInt()).isEqualTo(503);
      assertThat(streamed.get("type").asText()).isEqualTo("ServiceUnavailableError");
    }
  }

  private static List<String> fieldNames(JsonNode n) {
    List<String> names = new ArrayList<>();
    n.fieldNames().forEachRemaining(names::add);
    return names;
  }

  private static void readUntil(InputStream in, StringBuilder b, String marker)
      throws IOException {
    byte[] buf = new byte[8192];
    while (b.indexOf(marker) < 0) {
      int n = in.read(buf);
      assertThat(n).as("bytes before %s", marker).isPositive();
      b.append(new String(buf, 0, n, StandardCharsets.UTF_8));
    }
  }
}
