package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A body within the emulator's limit ({@link EmulatedServer#MAX_BODY_BYTES}) is read whatever the
 * length of its strings: Jackson's default bound of 20 million characters per string made a
 * longer text prompt "not valid JSON", where vLLM reads it and answers that it exceeds the
 * model's context.
 */
@Timeout(120)
class ServeLongPromptTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void aTextPromptLongerThanJacksonsDefaultStringBoundIsReadAndMeasuredAgainstTheContext()
      throws Exception {
    int port = replica.start();
    // 22 million characters in words of 10 letters: 2 million tokens for the stand-in
    String prompt = "abcdefghij ".repeat(2_000_000);
    assertThat(prompt.length()).isGreaterThan(20_000_000)
        .isLessThan(EmulatedServer.MAX_BODY_BYTES - 100);
    HttpResponse<String> res = replica.post(port, "/v1/completions",
        "{\"prompt\":\"" + prompt + "\",\"max_tokens\":1}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    String message = JSON.readTree(res.body()).at("/error/message").asText();
    assertThat(message).contains("maximum context length", "input tokens")
        .doesNotContain("not valid JSON", "abcdefghij");
  }
}
