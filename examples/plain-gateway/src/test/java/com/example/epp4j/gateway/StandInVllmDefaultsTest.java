package com.example.epp4j.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** Defaults of vLLM's request fields that the stand-in must apply as vLLM does. */
class StandInVllmDefaultsTest {
  // StandInVllmTest's helpers, without running its tests again
  private final StandInVllmTest h = new StandInVllmTest();

  @AfterEach
  void stop() {
    h.stop();
  }

  /**
   * vLLM's {@code StreamOptions.include_usage} defaults to true: {@code stream_options} that does
   * not name it (e.g. {@code {}} or {@code {"continuous_usage_stats": true}}) still asks for the
   * usage chunk; the stand-in ended such a stream without it.
   */
  @Test
  void streamOptionsWithoutIncludeUsageAskForTheUsageChunk() throws Exception {
    StandInVllm s = h.start();
    for (String options : new String[] {"{}", "{\"continuous_usage_stats\":false}"}) {
      String body = h.post(s, "/v1/completions",
          "{\"prompt\":\"hi\",\"max_tokens\":2,\"stream\":true,\"stream_options\":" + options
              + "}").body();
      List<JsonNode> events = StandInVllmTest.events(body);
      JsonNode last = events.get(events.size() - 1);
      assertThat(last.path("usage").isObject()).as(options + ": " + body).isTrue();
      assertThat(last.path("choices").isEmpty()).isTrue();
    }
    // an explicit false still asks for none
    List<JsonNode> none = StandInVllmTest.events(h.post(s, "/v1/completions",
        "{\"prompt\":\"hi\",\"max_tokens\":2,\"stream\":true,"
            + "\"stream_options\":{\"include_usage\":false}}").body());
    assertThat(none.get(none.size() - 1).path("usage").isObject()).isFalse();
  }

  /**
   * A chat without {@code max_tokens}: vLLM's default is the rest of the context, so it refuses
   * only a prompt that fills the context; the stand-in added its 16 and refused a chat near the
   * context end.
   */
  @Test
  void aChatWithoutMaxTokensNearTheContextEndIsAnswered() throws Exception {
    String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"" + "word ".repeat(40) + "\"}]";
    JsonNode measured = StandInVllmTest.JSON.readTree(h.post(h.start(), "/v1/chat/completions",
        chat + ",\"max_tokens\":1}").body());
    int prompt = measured.at("/usage/prompt_tokens").asInt();
    assertThat(prompt).isGreaterThan(2);
    StandInVllm.Options d = StandInVllm.Options.defaults();
    StandInVllm tight = h.start(new StandInVllm.Options(d.model(), Duration.ZERO, Duration.ZERO,
        d.kvBlocks(), d.maxNumSeqs(), prompt + 2, false));
    var res = h.post(tight, "/v1/chat/completions", chat + "}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    assertThat(StandInVllmTest.JSON.readTree(res.body()).at("/usage/completion_tokens").asInt()).isEqualTo(2);
    // a prompt that fills the context is still refused
    StandInVllm full = h.start(new StandInVllm.Options(d.model(), Duration.ZERO, Duration.ZERO,
        d.kvBlocks(), d.maxNumSeqs(), prompt, false));
    assertThat(h.post(full, "/v1/chat/completions", chat + "}").statusCode()).isEqualTo(400);
  }

  /**
   * A chat without a limit runs, in vLLM, until the model ends its answer: finish_reason "stop",
   * which the stand-in's answer of 16 canned tokens now reports (it said "length" for every
   * answer). A limit that ends the answer, the context's end, or {@code ignore_eos} (the model
   * never ends it, so it runs to the context's end) still give "length".
   */
  @Test
  void finishReasonIsStopWhenTheAnswerEndsBeforeAnyLimit() throws Exception {
    String messages = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    StandInVllm.Options d = StandInVllm.Options.defaults();
    StandInVllm s = h.start(new StandInVllm.Options(d.model(), Duration.ZERO, Duration.ZERO,
        d.kvBlocks(), d.maxNumSeqs(), 64, false));
    for (String limit : List.of("", ",\"max_tokens\":null", ",\"max_completion_tokens\":null")) {
      JsonNode whole = StandInVllmTest.JSON.readTree(
          h.post(s, "/v1/chat/completions", "{" + messages + limit + "}").body());
      assertThat(whole.at("/choices/0/finish_reason").asText()).as(limit).isEqualTo("stop");
      assertThat(whole.at("/usage/completion_tokens").asInt()).isEqualTo(16);
      List<JsonNode> events = StandInVllmTest.events(h.post(s, "/v1/chat/completions",
          "{" + messages + limit + ",\"stream\":true}").body());
      assertThat(events.get(events.size() - 1).at("/choices/0/finish_reason").asText())
          .as(limit).isEqualTo("stop");
    }
    for (String limit : List.of(",\"max_tokens\":16", ",\"max_completion_tokens\":16")) {
      JsonNode whole = StandInVllmTest.JSON.readTree(
          h.post(s, "/v1/chat/completions", "{" + messages + limit + "}").body());
      assertThat(whole.at("/choices/0/finish_reason").asText()).as(limit).isEqualTo("length");
    }
    JsonNode ignoreEos = StandInVllmTest.JSON.readTree(h.post(s, "/v1/chat/completions",
        "{" + messages + ",\"ignore_eos\":true}").body());
    assertThat(ignoreEos.at("/choices/0/finish_reason").asText()).isEqualTo("length");
    int prompt = ignoreEos.at("/usage/prompt_tokens").asInt();
    assertThat(ignoreEos.at("/usage/completion_tokens").asInt()).isEqualTo(64 - prompt);
    // the context's end before the 16th token
    StandInVllm tight = h.start(new StandInVllm.Options(d.model(), Duration.ZERO, Duration.ZERO,
        d.kvBlocks(), d.maxNumSeqs(), prompt + 3, false));
    JsonNode cut = StandInVllmTest.JSON.readTree(
        h.post(tight, "/v1/chat/completions", "{" + messages + "}").body());
    assertThat(cut.at("/choices/0/finish_reason").asText()).isEqualTo("length");
    assertThat(cut.at("/usage/completion_tokens").asInt()).isEqualTo(3);
    // vLLM's success counter has a series per reason (an answer is counted just after it is sent)
    String stops = "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\","
        + "model_name=\"stand-in\"} 6.0";
    StandInVllmTest.await("6 stops counted", () -> s.metricsText().contains(stops));
    assertThat(h.get(s, "/metrics").body())
        .contains("vllm:request_success_total{engine=\"0\",finished_reason=\"stop\","
            + "model_name=\"stand-in\"} 6.0")
        .contains("vllm:request_success_total{engine=\"0\",finished_reason=\"length\","
            + "model_name=\"stand-in\"} 3.0");
  }

  /**
   * A completion's {@code max_tokens: null} is the field's default of 16, as current vLLM's
   * request model reads it, not the rest of the context.
   */
  @Test
  void aCompletionWithMaxTokensNullGetsTheDefaultOf16() throws Exception {
    StandInVllm.Options d = StandInVllm.Options.defaults();
    StandInVllm s = h.start(new StandInVllm.Options(d.model(), Duration.ZERO, Duration.ZERO,
        d.kvBlocks(), d.maxNumSeqs(), 10, false));
    for (String body : List.of("{\"prompt\":[1,2,3,4,5,6,7,8],\"max_tokens\":null}",
        "{\"prompt\":[1,2,3,4,5,6,7,8]}")) {
      var res = h.post(s, "/v1/completions", body);
      assertThat(res.statusCode()).as(body).isEqualTo(400);
      assertThat(StandInVllmTest.JSON.readTree(res.body()).at("/error/message").asText())
          .contains("you requested 16 output tokens");
    }
    StandInVllm roomy = h.start();
    var res = h.post(roomy, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":null}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    JsonNode answer = StandInVllmTest.JSON.readTree(res.body());
    assertThat(answer.at("/usage/completion_tokens").asInt()).isEqualTo(16);
    assertThat(answer.at("/choices/0/finish_reason").asText()).isEqualTo("length");
  }

  /**
   * {@code stream_options.continuous_usage_stats}: vLLM puts the usage so far in every chunk; the
   * stand-in put none in any chunk but the last.
   */
  @Test
  void continuousUsageStatsPutTheUsageSoFarInEveryChunk() throws Exception {
    StandInVllm s = h.start();
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String prompt = path.endsWith("chat/completions")
          ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : "\"prompt\":[1,2,3]";
      List<JsonNode> events = StandInVllmTest.events(h.post(s, path, "{" + prompt
          + ",\"max_tokens\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true,"
          + "\"continuous_usage_stats\":true}}").body());
      int promptTokens = events.get(events.size() - 1).at("/usage/prompt_tokens").asInt();
      int generated = 0;
      for (JsonNode chunk : events.subList(0, events.size() - 1)) {
        if (chunk.at("/choices/0/text").isTextual()
            || chunk.at("/choices/0/delta/content").asText().length() > 0) {
          generated++;
        }
        assertThat(chunk.path("usage").isObject()).as(path + ": " + chunk).isTrue();
        assertThat(chunk.at("/usage/prompt_tokens").asInt()).isEqualTo(promptTokens);
        assertThat(chunk.at("/usage/completion_tokens").asInt()).as(path + ": " + chunk)
            .isEqualTo(generated);
      }
      assertThat(generated).isEqualTo(3);
    }
  }
}
