package com.example.epp4j.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Result;
import io.epp4j.core.PrometheusMetrics;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The stand-in answers the way a gateway sees vLLM answer. */
class StandInVllmTest {
  static final ObjectMapper JSON = new ObjectMapper();
  static final Duration DEADLINE = Duration.ofSeconds(10);
  final HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
  final List<StandInVllm> servers = new ArrayList<>();

  StandInVllm start(StandInVllm.Options o) throws IOException {
    StandInVllm s = StandInVllm.start(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), o);
    servers.add(s);
    return s;
  }

  StandInVllm start() throws IOException {
    return start(StandInVllm.Options.defaults().withLatency(Duration.ZERO, Duration.ZERO));
  }

  @AfterEach
  void stop() {
    servers.forEach(StandInVllm::close);
  }

  HttpRequest.Builder request(StandInVllm s, String path) {
    return HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + s.port() + path)).timeout(DEADLINE);
  }

  HttpResponse<String> post(StandInVllm s, String path, String body) throws Exception {
    return client.send(request(s, path).POST(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  HttpResponse<String> get(StandInVllm s, String path) throws Exception {
    return client.send(request(s, path).GET().build(), HttpResponse.BodyHandlers.ofString());
  }

  EndpointMetrics metrics(StandInVllm s) throws Exception {
    Result<EndpointMetrics> m = PrometheusMetrics.parse(get(s, "/metrics").body());
    assertThat(m.errors()).isEmpty();
    return m.value();
  }

  static void await(String what, BooleanSupplier condition) throws InterruptedException {
    long end = System.nanoTime() + DEADLINE.toNanos();
    while (!condition.getAsBoolean()) {
      assertThat(System.nanoTime() < end).as("within %s: %s", DEADLINE, what).isTrue();
      Thread.sleep(5);
    }
  }

  /** The JSON objects of an SSE body, and whether it ended with {@code [DONE]}. */
  static List<JsonNode> events(String sse) throws IOException {
    List<JsonNode> out = new ArrayList<>();
    String[] parts = sse.split("\n\n");
    assertThat(parts[parts.length - 1]).isEqualTo("data: [DONE]");
    for (int i = 0; i < parts.length - 1; i++) {
      assertThat(parts[i]).startsWith("data: ");
      out.add(JSON.readTree(parts[i].substring(6)));
    }
    return out;
  }

  /** {@code n} streamed completions of {@code body} on {@code s}, each past its first bytes. */
  private List<InputStream> startedStreams(StandInVllm s, String body, int n) throws Exception {
    List<InputStream> open = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      InputStream in = client.send(request(s, "/v1/completions")
          .POST(HttpRequest.BodyPublishers.ofString(body)).build(),
          HttpResponse.BodyHandlers.ofInputStream()).body();
      assertThat(in.read(new byte[16])).isPositive();
      open.add(in);
    }
    return open;
  }

  @Test
  void completionHasVllmsShapeAndUsage() throws Exception {
    StandInVllm s = start();
    HttpResponse<String> r = post(s, "/v1/completions",
        "{\"model\":\"stand-in\",\"prompt\":\"" + "a".repeat(100) + "\",\"max_tokens\":3}");
    assertThat(r.statusCode()).isEqualTo(200);
    JsonNode body = JSON.readTree(r.body());
    assertThat(body.path("object").asText()).isEqualTo("text_completion");
    assertThat(body.path("choices").get(0).path("text").asText()).isNotBlank();
    assertThat(body.path("choices").get(0).path("finish_reason").asText()).isEqualTo("length");
    JsonNode u = body.path("usage");
    assertThat(u.path("prompt_tokens").asInt()).isEqualTo(25); // 100 bytes at four per token
    assertThat(u.path("completion_tokens").asInt()).isEqualTo(3);
    assertThat(u.path("total_tokens").asInt()).isEqualTo(28);
    assertThat(u.has("prompt_tokens_details")).isTrue();
    assertThat(u.path("prompt_tokens_details").isNull()).isTrue(); // as vLLM without the flag
  }

  @Test
  void aCompletionWithoutAPromptIsRefusedInVllmsWordsAndOrder() throws Exception {
    StandInVllm s = start();
    // left out, null or "": vLLM's request validator, before the stream options and the model
    for (String prompt : new String[] {"", "\"prompt\":\"\",", "\"prompt\":null,",
        "\"prompt\":\"\",\"prompt_embeds\":[],"}) {
      HttpResponse<String> r = post(s, "/v1/completions", "{" + prompt
          + "\"model\":\"other\",\"max_tokens\":1,\"stream_options\":{\"include_usage\":true}}");
      assertThat(r.statusCode()).as(prompt).isEqualTo(400);
      JsonNode error = JSON.readTree(r.body()).path("error");
      assertThat(error.path("message").asText()).as(prompt)
          .isEqualTo("Either prompt or prompt_embeds must be provided and non-empty.");
      assertThat(error.path("type").asText()).isEqualTo("BadRequestError");
      assertThat(error.path("param").isNull()).as(prompt).isTrue();
    }
    // a list without tokens: vLLM's engine, once the model is found
    for (String prompt : new String[] {"[]", "[[]]"}) {
      HttpResponse<String> r = post(s, "/v1/completions",
          "{\"prompt\":" + prompt + ",\"max_tokens\":1}");
      assertThat(r.statusCode()).as(prompt).isEqualTo(400);
      JsonNode error = JSON.readTree(r.body()).path("error");
      assertThat(error.path("message").asText()).isEqualTo("The decoder prompt cannot be empty");
      assertThat(error.path("param").isNull()).isTrue();
      assertThat(post(s, "/v1/completions", "{\"model\":\"other\",\"prompt\":" + prompt
          + ",\"max_tokens\":1}").statusCode()).as(prompt).isEqualTo(404);
    }
    assertThat(s.finishedRequests() + s.abortedRequests()).isZero();
  }

  @Test
  void usageNamesCachedTokensOnlyWithPromptTokensDetails() throws Exception {
    String whole = "{\"prompt\":\"" + "a".repeat(100) + "\",\"max_tokens\":2}";
    String stream = "{\"prompt\":\"" + "a".repeat(100) + "\",\"max_tokens\":2,\"stream\":true,"
        + "\"stream_options\":{\"include_usage\":true}}";
    StandInVllm plain = start();
    JsonNode plainWhole = JSON.readTree(post(plain, "/v1/completions", whole).body()).path("usage");
    assertThat(plainWhole.path("prompt_tokens").asInt()).isEqualTo(25);
    assertThat(plainWhole.get("prompt_tokens_details").isNull()).isTrue();
    List<JsonNode> plainEvents = events(post(plain, "/v1/completions", stream).body());
    JsonNode plainChunk = plainEvents.get(plainEvents.size() - 1).path("usage");
    assertThat(plainChunk.path("prompt_tokens").asInt()).isEqualTo(25);
    assertThat(plainChunk.has("prompt_tokens_details")).isFalse();

    StandInVllm detailed = start(StandInVllm.Options.defaults()
        .withLatency(Duration.ZERO, Duration.ZERO).withPromptTokensDetails(true));
    JsonNode first = JSON.readTree(post(detailed, "/v1/completions", whole).body()).path("usage");
    assertThat(first.path("prompt_tokens_details").path("cached_tokens").isInt()).isTrue();
    assertThat(first.path("prompt_tokens_details").path("cached_tokens").asInt()).isZero();
    List<JsonNode> again = events(post(detailed, "/v1/completions", stream).body());
    assertThat(again.get(again.size() - 1).path("usage").path("prompt_tokens_details")
        .path("cached_tokens").asInt()).isEqualTo(16); // one full block of the 25 tokens
  }

  @Test
  void chatStreamEndsWithTheUsageChunkThenDone() throws Exception {
    StandInVllm s = start();
    HttpResponse<String> r = post(s, "/v1/chat/completions", "{\"max_tokens\":4,\"stream\":true,"
        + "\"stream_options\":{\"include_usage\":true},"
        + "\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}");
    assertThat(r.headers().firstValue("content-type").orElseThrow()).startsWith("text/event-stream");
    List<JsonNode> events = events(r.body());
    assertThat(events).hasSize(1 + 4 + 1); // role, four tokens, usage
    assertThat(events.get(0).path("choices").get(0).path("delta").path("role").asText())
        .isEqualTo("assistant");
    assertThat(events.subList(1, 5)).allSatisfy(e -> {
      assertThat(e.path("object").asText()).isEqualTo("chat.completion.chunk");
      assertThat(e.path("choices").get(0).path("delta").path("content").asText()).isNotEmpty();
    });
    assertThat(events.get(4).path("choices").get(0).path("finish_reason").asText())
        .isEqualTo("length");
    JsonNode last = events.get(5);
    assertThat(last.path("choices")).isEmpty();
    assertThat(last.path("usage").path("completion_tokens").asInt()).isEqualTo(4);
    assertThat(last.path("usage").path("prompt_tokens").asInt()).isPositive();
  }

  @Test
  void usageChunkOnlyWhenAskedForOrForced() throws Exception {
    String body = "{\"prompt\":\"hi\",\"max_tokens\":2,\"stream\":true}";
    List<JsonNode> plain = events(post(start(), "/v1/completions", body).body());
    assertThat(plain).hasSize(2).noneMatch(e -> e.has("usage"));
    StandInVllm forced = start(new StandInVllm.Options("stand-in", Duration.ZERO, Duration.ZERO,
        4000, 64, 32768, true));
    List<JsonNode> withUsage = events(post(forced, "/v1/completions", body).body());
    assertThat(withUsage).hasSize(3);
    assertThat(withUsage.get(2).path("usage").path("completion_tokens").asInt()).isEqualTo(2);
  }

  @Test
  void aSharedPrefixIsCachedBlockByBlock() throws Exception {
    StandInVllm s = start(StandInVllm.Options.defaults().withLatency(Duration.ZERO, Duration.ZERO)
        .withPromptTokensDetails(true));
    String prefix = "p".repeat(640); // ten 16-token blocks at four bytes per token
    int[] cached = new int[2];
    for (int i = 0; i < 2; i++) {
      HttpResponse<String> r = post(s, "/v1/completions",
          "{\"prompt\":\"" + prefix + "question " + i + "?\",\"max_tokens\":1}");
      cached[i] = JSON.readTree(r.body()).path("usage").path("prompt_tokens_details")
          .path("cached_tokens").asInt();
    }
    assertThat(cached).containsExactly(0, 160);
    String text = get(s, "/metrics").body();
    assertThat(text).contains("vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"stand-in\"} 160.0");
  }

  @Test
  void metricsShowRunningAndWaitingRequestsUnderVllmNames() throws Exception {
    StandInVllm s = start(new StandInVllm.Options("stand-in", Duration.ZERO, Duration.ofMillis(20),
        4000, 1, 32768, false));
    EndpointMetrics idle = metrics(s);
    assertThat(idle.kvCapacityBlocks()).isEqualTo(4000);
    assertThat(idle.blockSizeTokens()).isEqualTo(16);
    assertThat(idle.runningRequests()).isZero();
    String slow = "{\"prompt\":\"" + "x".repeat(640) + "\",\"max_tokens\":5000,\"stream\":true}";
    HttpResponse<InputStream> first = client.send(request(s, "/v1/completions")
        .POST(HttpRequest.BodyPublishers.ofString(slow)).build(),
        HttpResponse.BodyHandlers.ofInputStream());
    CompletableFuture<HttpResponse<InputStream>> second = client.sendAsync(
        request(s, "/v1/completions").POST(HttpRequest.BodyPublishers.ofString(slow)).build(),
        HttpResponse.BodyHandlers.ofInputStream());
    try (InputStream in = first.body()) {
      assertThat(in.read(new byte[16])).isPositive();
      // --max-num-seqs 1: the second request waits for the first
      await("one running, one waiting", () -> {
        try {
          EndpointMetrics m = metrics(s);
          return m.runningRequests() == 1 && m.waitingRequests() == 1 && m.kvCacheUsage() > 0;
        } catch (Exception e) {
          throw new AssertionError(e);
        }
      });
    }
    // the first client left: the second one runs
    second.get(DEADLINE.toMillis(), TimeUnit.MILLISECONDS).body().close();
    await("both requests ended", () -> s.runningRequests() == 0);
    assertThat(s.abortedRequests()).isEqualTo(2);
  }

  /**
   * vLLM answers {@code GET /version} with {@code {"version": "<its release>"}}; the stand-in
   * answered 404. It names a version below every vLLM release, with a label naming itself.
   */
  @Test
  void versionIsAnsweredInVllmsShapeNamingNoVllmRelease() throws Exception {
    StandInVllm s = start();
    HttpResponse<String> version = get(s, "/version");
    assertThat(version.statusCode()).isEqualTo(200);
    assertThat(version.headers().firstValue("content-type")).hasValue("application/json");
    assertThat(version.body()).isEqualTo("{\"version\":\"0.0.0+epp4j.standin\"}");
    HttpResponse<String> post = post(s, "/version", "{}");
    assertThat(post.statusCode()).isEqualTo(405);
    assertThat(post.headers().firstValue("allow")).hasValue("GET");
  }

  @Test
  void modelsHealthAndVllmsErrors() throws Exception {
    StandInVllm s = start(StandInVllm.Options.defaults().withModel("qwen3")
        .withLatency(Duration.ZERO, Duration.ZERO));
    JsonNode models = JSON.readTree(get(s, "/v1/models").body());
    assertThat(models.path("data").get(0).path("id").asText()).isEqualTo("qwen3");
    assertThat(get(s, "/health").statusCode()).isEqualTo(200);

    HttpResponse<String> unknown = post(s, "/v1/completions", "{\"model\":\"gpt\",\"prompt\":\"hi\"}");
    assertThat(unknown.statusCode()).isEqualTo(404);
    assertThat(JSON.readTree(unknown.body()).path("error").path("type").asText())
        .isEqualTo("NotFoundError");
    // current vLLM's model check names the field; the stand-in's param was null
    assertThat(JSON.readTree(unknown.body()).path("error").path("param").asText())
        .isEqualTo("model");
    assertThat(JSON.readTree(unknown.body()).path("error").path("message").asText())
        .isEqualTo("The model `gpt` does not exist.");

    HttpResponse<String> broken = post(s, "/v1/completions", "{\"prompt\":\"SECRET-MARKER");
    assertThat(broken.statusCode()).isEqualTo(400);
    assertThat(broken.body()).doesNotContain("SECRET-MARKER");

    HttpResponse<String> tooLong = post(s, "/v1/completions",
        "{\"prompt\":\"hi\",\"max_tokens\":40000}");
    assertThat(tooLong.statusCode()).isEqualTo(400);
    assertThat(JSON.readTree(tooLong.body()).path("error").path("message").asText())
        .contains("maximum context length is 32768 tokens");

    assertThat(get(s, "/v1/completions").statusCode()).isEqualTo(405);
    assertThat(get(s, "/nowhere").statusCode()).isEqualTo(404);

    // vLLM refuses both; before, 3.5 was taken as 3 and the trailing object was ignored
    assertThat(post(s, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":3.5}").statusCode())
        .isEqualTo(400);
    assertThat(post(s, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":3} {\"x\":1}")
        .statusCode()).isEqualTo(400);
  }

  /**
   * vLLM's chat request model refuses an empty {@code tools} array and a {@code tool_choice}
   * other than "none" without {@code tools}; the stand-in answered both.
   */
  @Test
  void emptyToolsAndToolChoiceWithoutToolsAreRefusedAsVllmRefusesThem() throws Exception {
    StandInVllm s = start();
    String messages = "\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    String empty = "`tools` must not be an empty array. Either provide at least one tool or omit"
        + " the field entirely. (parameter=tools)";
    String noTools = "When using `tool_choice`, `tools` must be set. (parameter=tool_choice)";
    String[][] refused = {
        {",\"tools\":[]", empty, "tools"},
        {",\"tools\":[],\"tool_choice\":\"none\"", empty, "tools"},
        {",\"tool_choice\":\"auto\"", noTools, "tool_choice"},
        {",\"tool_choice\":\"required\",\"tools\":null", noTools, "tool_choice"},
        {",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", noTools,
            "tool_choice"}};
    for (String[] r : refused) {
      String body = "{" + messages + r[0] + "}";
      HttpResponse<String> res = post(s, "/v1/chat/completions", body);
      assertThat(res.statusCode()).as(body).isEqualTo(400);
      JsonNode error = JSON.readTree(res.body()).path("error");
      assertThat(error.path("type").asText()).isEqualTo("BadRequestError");
      assertThat(error.path("message").asText()).as(body).isEqualTo(r[1]);
      assertThat(error.path("param").asText()).as(body).isEqualTo(r[2]);
    }
    String tool = "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}";
    for (String served : new String[] {",\"tool_choice\":\"none\"", ",\"tool_choice\":null",
        ",\"tools\":null", ",\"tools\":[" + tool + "]",
        ",\"tools\":[" + tool + "],\"tool_choice\":\"auto\""}) {
      String body = "{" + messages + served + "}";
      assertThat(post(s, "/v1/chat/completions", body).statusCode()).as(body).isEqualTo(200);
    }
    // a completion request has no tools field: vLLM ignores it there
    assertThat(post(s, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"tools\":[],"
        + "\"tool_choice\":\"auto\"}").statusCode()).isEqualTo(200);
  }

  @Test
  void aChatsToolsAreCheckedBeforeItsStreamOptionsAsVllmsValidatorsRun() throws Exception {
    StandInVllm s = start();
    // vLLM runs a chat's check_tool_usage before validate_stream_options (its validators run
    // the one defined last first): a chat wrong both ways is told about its tools
    for (String tools : new String[] {"\"tools\":[]", "\"tool_choice\":\"auto\""}) {
      HttpResponse<String> r = post(s, "/v1/chat/completions", "{\"max_tokens\":1,"
          + "\"stream_options\":{\"include_usage\":true}," + tools + ","
          + "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
      assertThat(r.statusCode()).as(tools).isEqualTo(400);
      assertThat(JSON.readTree(r.body()).path("error").path("param").asText()).as(tools)
          .isEqualTo(tools.startsWith("\"tools") ? "tools" : "tool_choice");
    }
  }

  @Test
  void streamOptionsWithoutStreamIsRefusedAsVllmRefusesIt() throws Exception {
    StandInVllm s = start();
    // vLLM's request validator: stream_options set while stream is false or absent is a 400, so
    // a gateway that turns a stream into a JSON answer must drop stream_options too
    for (String body : new String[] {
        "{\"prompt\":\"hi\",\"max_tokens\":1,\"stream_options\":{\"include_usage\":true}}",
        "{\"prompt\":\"hi\",\"max_tokens\":1,\"stream\":false,"
            + "\"stream_options\":{\"include_usage\":true}}"}) {
      HttpResponse<String> r = post(s, "/v1/completions", body);
      assertThat(r.statusCode()).as(body).isEqualTo(400);
      JsonNode error = JSON.readTree(r.body()).path("error");
      assertThat(error.path("type").asText()).isEqualTo("BadRequestError");
      assertThat(error.path("message").asText()).isEqualTo("Stream options can only be defined"
          + " when `stream=True`. (parameter=stream_options)");
      assertThat(error.path("param").asText()).isEqualTo("stream_options");
    }
    HttpResponse<String> chat = post(s, "/v1/chat/completions", "{\"max_tokens\":1,"
        + "\"stream_options\":{\"include_usage\":true},"
        + "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    assertThat(chat.statusCode()).isEqualTo(400);
    // an empty stream_options object passes vLLM's check (it tests the value for truth)
    assertThat(post(s, "/v1/completions",
        "{\"prompt\":\"hi\",\"max_tokens\":1,\"stream_options\":{}}").statusCode())
        .isEqualTo(200);
    assertThat(post(s, "/v1/completions",
        "{\"prompt\":\"hi\",\"max_tokens\":1,\"stream_options\":null}").statusCode())
        .isEqualTo(200);
    // counted once the answer is written, so possibly just after the client has read it
    await("2 answered", () -> s.finishedRequests() >= 2);
    assertThat(s.finishedRequests()).isEqualTo(2);
  }

  @Test
  void theTokenLimitComesFromTheFieldVllmReadsAndErrorsNameIt() throws Exception {
    StandInVllm s = start();
    String messages = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    // chat: max_completion_tokens wins, a null one falls back to max_tokens
    assertThat(completionTokens(post(s, "/v1/chat/completions",
        "{\"max_completion_tokens\":2,\"max_tokens\":5," + messages + "}"))).isEqualTo(2);
    assertThat(completionTokens(post(s, "/v1/chat/completions",
        "{\"max_completion_tokens\":null,\"max_tokens\":3," + messages + "}"))).isEqualTo(3);
    // completions: vLLM's completion request has no max_completion_tokens and ignores it
    assertThat(completionTokens(post(s, "/v1/completions",
        "{\"prompt\":\"hi\",\"max_tokens\":2,\"max_completion_tokens\":5}"))).isEqualTo(2);
    HttpResponse<String> bad = post(s, "/v1/chat/completions",
        "{\"max_completion_tokens\":-1," + messages + "}");
    assertThat(bad.statusCode()).isEqualTo(400);
    JsonNode error = JSON.readTree(bad.body()).path("error");
    assertThat(error.path("message").asText()).contains("max_completion_tokens");
    assertThat(error.path("param").asText()).isEqualTo("max_completion_tokens");
    HttpResponse<String> zero = post(s, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":0}");
    assertThat(zero.statusCode()).isEqualTo(400);
    assertThat(JSON.readTree(zero.body()).path("error").path("param").asText())
        .isEqualTo("max_tokens");
  }

  static int completionTokens(HttpResponse<String> r) throws IOException {
    assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
    return JSON.readTree(r.body()).path("usage").path("completion_tokens").asInt();
  }

  @Test
  void aBodyAboveTheLimitIsA413BeforeItIsReadWhole() throws Exception {
    StandInVllm s = start();
    // a declared gigabyte is refused at once, not waited for and held in memory
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(), s.port())) {
      socket.setSoTimeout((int) DEADLINE.toMillis());
      socket.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
          + "Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n"
          + "{\"prompt\":\"").getBytes(java.nio.charset.StandardCharsets.US_ASCII));
      socket.getOutputStream().flush();
      java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(
          socket.getInputStream(), java.nio.charset.StandardCharsets.US_ASCII));
      assertThat(in.readLine()).startsWith("HTTP/1.1 413");
    }
    // a chunked body, without a length, is cut off once it passes the limit
    byte[] big = ("{\"prompt\":\"" + "x".repeat(PlainGateway.MAX_BODY_BYTES) + "\"}")
        .getBytes(java.nio.charset.StandardCharsets.UTF_8);
    HttpResponse<String> chunked = client.send(request(s, "/v1/completions")
        .POST(HttpRequest.BodyPublishers.ofInputStream(() -> new java.io.ByteArrayInputStream(big)))
        .build(), HttpResponse.BodyHandlers.ofString());
    assertThat(chunked.statusCode()).isEqualTo(413);
    assertThat(JSON.readTree(chunked.body()).path("error").path("code").asInt()).isEqualTo(413);
    assertThat(s.finishedRequests() + s.abortedRequests()).isZero();
  }

  @Test
  void aMaxTokensNearTheIntegerLimitIsOverTheContextNotAnEndlessAnswer() throws Exception {
    StandInVllm s = start();
    // prompt + max_tokens must not wrap around: that would pass the context check and then
    // "generate" for ever, holding a slot
    for (String path : new String[] {"/v1/completions", "/v1/chat/completions"}) {
      String body = path.contains("chat")
          ? "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2147483647}"
          : "{\"prompt\":\"hi\",\"max_tokens\":2147483647}";
      HttpResponse<String> r = post(s, path, body);
      assertThat(r.statusCode()).as(path).isEqualTo(400);
      assertThat(JSON.readTree(r.body()).path("error").path("message").asText())
          .contains("This model's maximum context length is 32768 tokens. However, you requested"
              + " 2147483647 output tokens");
    }
    assertThat(s.runningRequests()).isZero();
  }

  @Test
  void aRequestLongerThanTheContextIsRefusedInCurrentVllmsWordsAndOrder() throws Exception {
    StandInVllm s = start(new StandInVllm.Options("stand-in", Duration.ZERO, Duration.ZERO, 4000,
        64, 100, false));
    StringBuilder ids = new StringBuilder("[");
    for (int i = 0; i < 105; i++) {
      ids.append(i == 0 ? "" : ",").append(i);
    }
    String full = ids.append(']').toString();
    // the prompt and the output asked for over the context, told in one message with the counts
    HttpResponse<String> r = post(s, "/v1/completions", "{\"prompt\":" + full
        + ",\"max_tokens\":1}");
    assertThat(r.statusCode()).isEqualTo(400);
    JsonNode e = JSON.readTree(r.body()).path("error");
    assertThat(e.path("message").asText()).isEqualTo("This model's maximum context length is 100"
        + " tokens. However, you requested 1 output tokens and your prompt contains 105 input"
        + " tokens, for a total of 106 tokens. Please reduce the length of the input prompt or the"
        + " number of requested output tokens. (parameter=input_tokens, value=105)");
    assertThat(e.path("param").asText()).isEqualTo("input_tokens");
    // a null asks for the field's default of 16, as current vLLM reads it
    r = post(s, "/v1/completions", "{\"prompt\":" + full + ",\"max_tokens\":null}");
    assertThat(JSON.readTree(r.body()).path("error").path("message").asText())
        .contains("you requested 16 output tokens and your prompt contains 105 input tokens");
    // a text prompt is counted to one token past the room left, "at least", as vLLM counts it
    r = post(s, "/v1/completions", "{\"prompt\":\"" + "abcd".repeat(20) + "\",\"max_tokens\":95}");
    assertThat(JSON.readTree(r.body()).path("error").path("message").asText())
        .contains("you requested 95 output tokens and your prompt contains at least 6 input"
            + " tokens, for a total of at least 101 tokens.");
    assertThat(s.runningRequests()).isZero();
  }

  @Test
  void blockHashesDependOnlyOnThePrefix() {
    byte[] a = ("s".repeat(128) + "tail one").getBytes(java.nio.charset.StandardCharsets.UTF_8);
    byte[] b = ("s".repeat(128) + "another, longer tail".repeat(10))
        .getBytes(java.nio.charset.StandardCharsets.UTF_8);
    long[] ha = StandInVllm.blockHashes(a);
    long[] hb = StandInVllm.blockHashes(b);
    assertThat(ha).hasSize(2);
    assertThat(hb[0]).isEqualTo(ha[0]);
    assertThat(hb[1]).isEqualTo(ha[1]);
    byte[] c = a.clone();
    c[0] = 't';
    assertThat(StandInVllm.blockHashes(c)[1]).as("a block's hash covers the blocks before it")
        .isNotEqualTo(ha[1]);
    int[] tokens = new int[40];
    assertThat(StandInVllm.blockHashes(tokens)).hasSize(2);
  }

  @Test
  void connectionsBeyondTheThreadBoundWaitTheirTurnInsteadOfGettingAThreadEach() throws Exception {
    // two threads, 64 slots: a third request finds no thread, waits, and runs once one is free
    StandInVllm s = start(new StandInVllm.Options("stand-in", Duration.ZERO, Duration.ofMillis(20),
        4000, 64, 32768, false, 2));
    String slow = "{\"prompt\":\"hi\",\"max_tokens\":5000,\"stream\":true}";
    List<InputStream> open = startedStreams(s, slow, 2);
    CompletableFuture<HttpResponse<String>> third = client.sendAsync(request(s, "/v1/completions")
        .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"hi\",\"max_tokens\":1}")).build(),
        HttpResponse.BodyHandlers.ofString());
    // without a bound it is answered at once (no token waits); with it, it cannot be
    org.assertj.core.api.Assertions.assertThatThrownBy(
        () -> third.get(1, TimeUnit.SECONDS))
        .isInstanceOf(java.util.concurrent.TimeoutException.class);
    assertThat(s.runningRequests()).isEqualTo(2);
    // a scrape and a health check do not wait for those threads: the router would take the
    // replica's metrics for stale, and its health for gone, exactly when it is busiest
    HttpResponse<String> metrics = client.send(request(s, "/metrics").GET().build(),
        HttpResponse.BodyHandlers.ofString());
    assertThat(metrics.statusCode()).isEqualTo(200);
    assertThat(metrics.body()).contains("vllm:num_requests_running");
    assertThat(client.send(request(s, "/health").GET().build(),
        HttpResponse.BodyHandlers.ofString()).statusCode()).isEqualTo(200);
    assertThat(third.isDone()).as("the third completion still waits for a thread").isFalse();
    open.get(0).close();
    assertThat(third.get(DEADLINE.toMillis(), TimeUnit.MILLISECONDS).statusCode()).isEqualTo(200);
    open.get(1).close();
  }

  @Test
  void aModelThatIsNotAStringIsA400NamingTheField() throws Exception {
    StandInVllm s = start();
    // vLLM's request model declares model a string: a number or object fails validation (400),
    // it is not an unknown model (404)
    for (String model : new String[] {"7", "{\"name\":\"stand-in\"}", "[\"stand-in\"]", "true"}) {
      HttpResponse<String> r = post(s, "/v1/completions",
          "{\"model\":" + model + ",\"prompt\":\"hi\",\"max_tokens\":1}");
      assertThat(r.statusCode()).as(model).isEqualTo(400);
      JsonNode error = JSON.readTree(r.body()).path("error");
      assertThat(error.path("param").asText()).isEqualTo("model");
      assertThat(error.path("message").asText()).contains("model");
    }
    assertThat(post(s, "/v1/completions", "{\"model\":null,\"prompt\":\"hi\",\"max_tokens\":1}")
        .statusCode()).isEqualTo(200);
  }

  @Test
  void chatMessagesWithoutAStringRoleOrWithContentOfAnotherTypeAreA400() throws Exception {
    StandInVllm s = start();
    for (String messages : new String[] {
        "[{\"content\":\"hi\"}]",
        "[{\"role\":7,\"content\":\"hi\"}]",
        "[{\"role\":null,\"content\":\"hi\"}]",
        "[{\"role\":\"user\",\"content\":5}]",
        "[{\"role\":\"user\",\"content\":{\"text\":\"hi\"}}]",
        "[\"hi\"]",
        "[{\"role\":\"user\",\"content\":\"hi\"},{\"content\":\"again\"}]"}) {
      HttpResponse<String> r = post(s, "/v1/chat/completions",
          "{\"max_tokens\":1,\"messages\":" + messages + "}");
      assertThat(r.statusCode()).as(messages).isEqualTo(400);
      JsonNode error = JSON.readTree(r.body()).path("error");
      assertThat(error.path("param").asText()).as(messages).startsWith("messages[");
    }
    HttpResponse<String> second = post(s, "/v1/chat/completions",
        "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"content\":\"x\"}]}");
    assertThat(JSON.readTree(second.body()).path("error").path("param").asText())
        .isEqualTo("messages[1].role");
    // content is optional in vLLM's own message type (an assistant turn with tool calls has none)
    assertThat(post(s, "/v1/chat/completions", "{\"max_tokens\":1,\"messages\":["
        + "{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\"},"
        + "{\"role\":\"user\",\"content\":null}]}").statusCode()).isEqualTo(200);
    // counted once the answer is written, so possibly just after the client has read it
    await("1 answered", () -> s.finishedRequests() >= 1);
    assertThat(s.finishedRequests()).isEqualTo(1);
  }

  @Test
  void tokenIdsOutsideTheVocabularyAreA400() throws Exception {
    StandInVllm s = start();
    int top = StandInVllm.VOCAB_SIZE - 1;
    assertThat(post(s, "/v1/completions", "{\"prompt\":[0,1," + top + "],\"max_tokens\":1}")
        .statusCode()).isEqualTo(200);
    for (String ids : new String[] {"[1," + (top + 1) + "]", "[1,-1]", "[2147483647]"}) {
      HttpResponse<String> r = post(s, "/v1/completions",
          "{\"prompt\":" + ids + ",\"max_tokens\":1}");
      assertThat(r.statusCode()).as(ids).isEqualTo(400);
      JsonNode error = JSON.readTree(r.body()).path("error");
      assertThat(error.path("param").asText()).isEqualTo("prompt");
      assertThat(error.path("message").asText()).contains("out of vocabulary");
    }
    // counted once the answer is written, so possibly just after the client has read it
    await("1 answered", () -> s.finishedRequests() >= 1);
    assertThat(s.finishedRequests()).isEqualTo(1);
  }

  @Test
  void fieldsTheStandInDoesNotHonourAreRefusedNamingThemInsteadOfIgnored() throws Exception {
    StandInVllm s = start();
    for (String path : new String[] {"/v1/completions", "/v1/chat/completions"}) {
      String ask = path.contains("chat")
          ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : "\"prompt\":\"hi\"";
      for (String[] f : new String[][] {{"echo", "true"}, {"stop", "\"\\n\""},
          {"stop", "[\"lorem\"]"}, {"temperature", "0.7"}, {"top_p", "0.9"}, {"seed", "42"},
          {"logprobs", "true"}, {"top_k", "5"}, {"presence_penalty", "1"}}) {
        HttpResponse<String> r = post(s, path, "{" + ask + ",\"max_tokens\":1,\"" + f[0] + "\":"
            + f[1] + "}");
        assertThat(r.statusCode()).as(path + " " + f[0]).isEqualTo(400);
        JsonNode e = JSON.readTree(r.body()).path("error");
        assertThat(e.path("param").asText()).isEqualTo(f[0]);
        assertThat(e.path("message").asText()).contains("'" + f[0] + "'");
      }
      // left at what asks for nothing, they are served
      for (String neutral : new String[] {"\"echo\":false", "\"stop\":[]", "\"seed\":null",
          "\"ignore_eos\":true"}) {
        assertThat(post(s, path, "{" + ask + ",\"max_tokens\":1," + neutral + "}").statusCode())
            .as(path + " " + neutral).isEqualTo(200);
      }
    }
  }

  @Test
  void moreThanOneChoiceIsRefusedNamingN() throws Exception {
    StandInVllm s = start();
    // the stand-in answers one choice; n > 1 is refused rather than silently answered with one
    for (String path : new String[] {"/v1/completions", "/v1/chat/completions"}) {
      String ask = path.contains("chat")
          ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : "\"prompt\":\"hi\"";
      for (String n : new String[] {"2", "0", "1.5", "\"2\""}) {
        HttpResponse<String> r = post(s, path, "{" + ask + ",\"max_tokens\":1,\"n\":" + n + "}");
        assertThat(r.statusCode()).as(path + " n=" + n).isEqualTo(400);
        assertThat(JSON.readTree(r.body()).path("error").path("param").asText()).isEqualTo("n");
      }
      assertThat(post(s, path, "{" + ask + ",\"max_tokens\":1,\"n\":1}").statusCode())
          .isEqualTo(200);
      assertThat(post(s, path, "{" + ask + ",\"max_tokens\":1,\"n\":null}").statusCode())
          .isEqualTo(200);
    }
  }

  @Test
  void kvCacheUsageCountsTheBlocksOfGeneratedTokensToo() throws Exception {
    StandInVllm s = start(new StandInVllm.Options("stand-in", Duration.ZERO, Duration.ofMillis(2),
        100, 64, 32768, false));
    // a one-block prompt (64 bytes, 16 tokens) that goes on generating
    String body = "{\"prompt\":\"" + "x".repeat(64) + "\",\"max_tokens\":20000,\"stream\":true}";
    try (InputStream in = client.send(request(s, "/v1/completions")
        .POST(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofInputStream()).body()) {
      // 64 token events read: at least 16 + 64 tokens are held, five blocks of 100
      java.io.BufferedReader lines = new java.io.BufferedReader(
          new java.io.InputStreamReader(in, java.nio.charset.StandardCharsets.UTF_8));
      int events = 0;
      while (events < 64) {
        String line = lines.readLine();
        assertThat(line).isNotNull();
        if (line.startsWith("data: ")) {
          events++;
        }
      }
      assertThat(metrics(s).kvCacheUsage()).isGreaterThanOrEqualTo(0.05);
    }
    await("the request ended", () -> s.runningRequests() == 0);
    assertThat(metrics(s).kvCacheUsage()).isZero();
  }

  @Test
  void kvCacheUsageCountsOnceTheBlocksTwoRunningRequestsShare() throws Exception {
    StandInVllm s = start(new StandInVllm.Options("stand-in", Duration.ZERO, Duration.ofMillis(20),
        1000, 64, 32768, false));
    // the same prompt twice, 64 full blocks (4096 bytes, 1024 tokens): vLLM's second request
    // takes the first one's blocks from the prefix cache and holds no copy of them
    String body = "{\"prompt\":\"" + "x".repeat(4096) + "\",\"max_tokens\":20000,\"stream\":true}";
    List<InputStream> open = new ArrayList<>();
    try {
      open.addAll(startedStreams(s, body, 2));
      await("both running", () -> s.runningRequests() == 2);
      // 64 shared blocks, and each request's own blocks for what it generated: a few in the
      // first seconds, far from the 64 more that a copy per request would make
      double usage = metrics(s).kvCacheUsage();
      assertThat(usage * 1000).isBetween(64.0, 100.0);
    } finally {
      for (InputStream in : open) {
        in.close();
      }
    }
    await("both ended", () -> s.runningRequests() == 0);
    assertThat(metrics(s).kvCacheUsage()).isZero();
  }

  @Test
  void requestSuccessHasASeriesPerFinishReasonAsVllmsAndAbortsAreNotCounted() throws Exception {
    StandInVllm s = start(new StandInVllm.Options("stand-in", Duration.ZERO, Duration.ofMillis(20),
        4000, 64, 32768, false));
    String text = get(s, "/metrics").body();
    // current vLLM's finish reasons (FINISH_REASON_STRINGS), each a series from the start
    for (String reason : new String[] {"stop", "length", "abort", "error", "repetition"}) {
      assertThat(text).contains("vllm:request_success_total{engine=\"0\",finished_reason=\""
          + reason + "\",model_name=\"stand-in\"} 0.0");
    }
    post(s, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1}");
    try (InputStream in = client.send(request(s, "/v1/completions")
        .POST(HttpRequest.BodyPublishers.ofString(
            "{\"prompt\":\"hi\",\"max_tokens\":5000,\"stream\":true}")).build(),
        HttpResponse.BodyHandlers.ofInputStream()).body()) {
      assertThat(in.read(new byte[16])).isPositive();
    }
    await("the request was aborted", () -> s.abortedRequests() == 1);
    text = get(s, "/metrics").body();
    // vLLM's abort path ends the request without recording finished-request stats, so a
    // client that leaves is not counted here, under abort or any other reason
    assertThat(text)
        .contains("vllm:request_success_total{engine=\"0\",finished_reason=\"length\","
            + "model_name=\"stand-in\"} 1.0")
        .contains("vllm:request_success_total{engine=\"0\",finished_reason=\"abort\","
            + "model_name=\"stand-in\"} 0.0");
    assertThat(PrometheusMetrics.parse(text).errors()).isEmpty();
  }

  /**
   * {@code vllm:cache_config_info} carries the {@code CacheConfig} fields routing-sim's serve
   * writes, in name order, in Python's words; the stand-in wrote 4 of them, so a dashboard reading
   * the KV cache's dtype or the GPU memory share from it found nothing.
   */
  @Test
  void cacheConfigInfoHasTheCacheConfigFieldsInNameOrderAsPythonWritesThem() throws Exception {
    StandInVllm s = start(StandInVllm.Options.defaults().withLatency(Duration.ZERO, Duration.ZERO));
    List<String> info = get(s, "/metrics").body().lines()
        .filter(l -> l.startsWith("vllm:cache_config_info")).toList();
    assertThat(info).containsExactly("vllm:cache_config_info{block_size=\"16\","
        + "cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"0\","
        + "gpu_memory_utilization=\"0.9\",is_attention_free=\"False\",num_gpu_blocks=\"4000\","
        + "num_gpu_blocks_override=\"None\",sliding_window=\"None\"} 1.0");
    assertThat(metrics(s).kvCapacityBlocks()).isEqualTo(4000);
  }

  HttpResponse<String> send(StandInVllm s, String method, String path) throws Exception {
    return client.send(request(s, path).method(method, method.equals("GET")
        ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofString("{}")).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  /** An answer as vLLM's /health gives it: 200, no body and no content type. */
  static void assertHealthy(HttpResponse<String> res, String what) {
    assertThat(res.statusCode()).as(what).isEqualTo(200);
    assertThat(res.body()).as(what).isEmpty();
    assertThat(res.headers().firstValue("content-type")).as(what).isEmpty();
    assertThat(res.headers().firstValue("content-length")).as(what).hasValue("0");
  }

  /**
   * vLLM serves {@code /ping}, its alias of {@code /health} (for SageMaker), on GET and POST;
   * the stand-in answered 404, so a probe configured for a vLLM container failed against it.
   */
  @Test
  void pingIsHealthOnGetAndPost() throws Exception {
    StandInVllm s = start();
    assertHealthy(send(s, "GET", "/health"), "GET /health");
    assertHealthy(send(s, "GET", "/ping"), "GET /ping");
    assertHealthy(send(s, "POST", "/ping"), "POST /ping");
    HttpResponse<String> put = send(s, "PUT", "/ping");
    assertThat(put.statusCode()).isEqualTo(405);
    assertThat(put.body()).isEqualTo("{\"detail\":\"Method Not Allowed\"}");
    assertThat(put.headers().firstValue("allow")).hasValue("GET, POST");
    assertThat(send(s, "POST", "/health").headers().firstValue("allow")).hasValue("GET");
  }

  /**
   * vLLM serves {@code GET /load}, {@code {"server_load": n}}, whether or not it tracks the load;
   * by default it does not, and the count stays 0. The stand-in answered 404.
   */
  @Test
  void loadIsServedAsVllmServesItByDefault() throws Exception {
    StandInVllm s = start();
    HttpResponse<String> load = get(s, "/load");
    assertThat(load.statusCode()).isEqualTo(200);
    assertThat(load.headers().firstValue("content-type")).hasValue("application/json");
    assertThat(load.body()).isEqualTo("{\"server_load\":0}");
    HttpResponse<String> post = post(s, "/load", "{}");
    assertThat(post.statusCode()).isEqualTo(405);
    assertThat(post.headers().firstValue("allow")).hasValue("GET");
  }

  /**
   * vLLM's model check takes a {@code model} left out, null or empty as the served model; the
   * stand-in answered an empty one with a 404 saying that the model `` does not exist.
   */
  @Test
  void anEmptyModelIsTheServedModelAsInVllm() throws Exception {
    StandInVllm s = start(StandInVllm.Options.defaults().withModel("qwen3")
        .withLatency(Duration.ZERO, Duration.ZERO));
    for (String model : new String[] {"\"model\":\"\",", "\"model\":null,", ""}) {
      HttpResponse<String> r = post(s, "/v1/completions",
          "{" + model + "\"prompt\":\"hi\",\"max_tokens\":1}");
      assertThat(r.statusCode()).as(model).isEqualTo(200);
      assertThat(JSON.readTree(r.body()).path("model").asText()).as(model).isEqualTo("qwen3");
      HttpResponse<String> chat = post(s, "/v1/chat/completions", "{" + model
          + "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1}");
      assertThat(chat.statusCode()).as(model).isEqualTo(200);
    }
  }

  /** Sends a POST over a socket of its own, which the caller closes to leave. */
  java.net.Socket rawPost(StandInVllm s, String body) throws IOException {
    java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(), s.port());
    byte[] b = body.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    socket.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
        + "Content-Type: application/json\r\nContent-Length: " + b.length + "\r\n\r\n")
        .getBytes(java.nio.charset.StandardCharsets.US_ASCII));
    socket.getOutputStream().write(b);
    socket.getOutputStream().flush();
    return socket;
  }

  @Test
  void aWaitingRequestWhoseClientLeftIsDroppedAndNeverTakesASlot() throws Exception {
    StandInVllm s = start(new StandInVllm.Options("stand-in", Duration.ZERO, Duration.ofMillis(20),
        4000, 1, 32768, false));
    try (InputStream first = client.send(request(s, "/v1/completions")
        .POST(HttpRequest.BodyPublishers.ofString(
            "{\"prompt\":\"hi\",\"max_tokens\":5000,\"stream\":true}")).build(),
        HttpResponse.BodyHandlers.ofInputStream()).body()) {
      assertThat(first.read(new byte[16])).isPositive();
      // --max-num-seqs 1: the second request waits; its client leaves while it does
      try (java.net.Socket second = rawPost(s, "{\"prompt\":\"hi\",\"max_tokens\":1}")) {
        await("the second request waiting", () -> waiting(s) == 1);
      }
      await("the left request no longer waiting", () -> waiting(s) == 0);
      assertThat(s.abortedRequests()).isEqualTo(1);
      assertThat(s.runningRequests()).isEqualTo(1);
    }
    await("the first request ended", () -> s.runningRequests() == 0);
    assertThat(s.finishedRequests()).isZero();
    assertThat(s.abortedRequests()).isEqualTo(2);
  }

  int waiting(StandInVllm s) {
    try {
      return metrics(s).waitingRequests();
    } catch (Exception e) {
      throw new AssertionError(e);
    }
  }

  @Test
  void aRunningRequestThatIsNotStreamedFreesItsSlotWhenItsClientLeaves() throws Exception {
    // 5,000 tokens at 20 ms would hold the only slot for 100 s
    StandInVllm s = start(new StandInVllm.Options("stand-in", Duration.ZERO, Duration.ofMillis(20),
        4000, 1, 32768, false));
    try (java.net.Socket socket = rawPost(s, "{\"prompt\":\"hi\",\"max_tokens\":5000}")) {
      await("the request running", () -> s.runningRequests() == 1);
    }
    await("the slot freed", () -> s.runningRequests() == 0);
    assertThat(s.abortedRequests()).isEqualTo(1);
    assertThat(post(s, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1}").statusCode())
        .isEqualTo(200);
  }

  /** The count of the stand-in's {@code /tokenize} for {@code body}, with its shape checked. */
  int tokenizeCount(StandInVllm s, String body) throws Exception {
    HttpResponse<String> r = post(s, "/tokenize", body);
    assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
    assertThat(r.headers().firstValue("content-type")).hasValue("application/json");
    JsonNode t = JSON.readTree(r.body());
    List<String> fields = new ArrayList<>();
    t.fieldNames().forEachRemaining(fields::add);
    assertThat(fields).containsExactly("count", "max_model_len", "tokens", "token_strs");
    assertThat(t.get("max_model_len").asInt()).isEqualTo(s.options().maxModelLen());
    assertThat(t.get("token_strs").isNull()).isTrue();
    assertThat(t.get("tokens").size()).isEqualTo(t.get("count").asInt());
    for (JsonNode id : t.get("tokens")) {
      assertThat(id.isInt()).isTrue();
      assertThat(id.asInt()).isBetween(0, StandInVllm.VOCAB_SIZE - 1);
    }
    return t.get("count").asInt();
  }

  int promptTokens(StandInVllm s, String path, String body) throws Exception {
    HttpResponse<String> r = post(s, path, body);
    assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
    return JSON.readTree(r.body()).at("/usage/prompt_tokens").asInt();
  }

  /**
   * {@code /tokenize}, which vLLM serves by default, answered 404; it now counts a prompt or a
   * chat as the completions count it, in vLLM's answer shape.
   */
  @Test
  void tokenizeCountsAPromptOrAChatAsItsCompletionsReportPromptTokens() throws Exception {
    StandInVllm s = start(StandInVllm.Options.defaults().withModel("qwen3")
        .withLatency(Duration.ZERO, Duration.ZERO));
    for (String prompt : List.of("a", "abcd", "abcde", "a".repeat(100), "héllo wörld ☃ 日本語",
        "x".repeat(4093))) {
      String p = JSON.writeValueAsString(prompt);
      int count = tokenizeCount(s, "{\"model\":\"qwen3\",\"prompt\":" + p + "}");
      assertThat(count).as(prompt).isEqualTo(
          promptTokens(s, "/v1/completions", "{\"prompt\":" + p + ",\"max_tokens\":1}"));
      assertThat(tokenizeCount(s, "{\"prompt\":" + p + ",\"add_special_tokens\":false}"))
          .isEqualTo(count);
    }
    assertThat(tokenizeCount(s, "{\"prompt\":\"" + "a".repeat(100) + "\"}")).isEqualTo(25);
    String messages = "\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
        + "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"},"
        + "{\"type\":\"text\",\"text\":\"there\"}]}]";
    int chat = tokenizeCount(s, "{" + messages + "}");
    assertThat(chat).isEqualTo(
        promptTokens(s, "/v1/chat/completions", "{" + messages + ",\"max_tokens\":1}"));
    // the same text gives the same IDs; another text other ones
    JsonNode once = JSON.readTree(post(s, "/tokenize", "{\"prompt\":\"abcdefgh\"}").body());
    JsonNode again = JSON.readTree(post(s, "/tokenize", "{\"prompt\":\"abcdefgh\"}").body());
    JsonNode other = JSON.readTree(post(s, "/tokenize", "{\"prompt\":\"abcdefgi\"}").body());
    assertThat(again.get("tokens")).isEqualTo(once.get("tokens"));
    assertThat(other.get("tokens").get(0)).isEqualTo(once.get("tokens").get(0));
    assertThat(other.get("tokens").get(1)).isNotEqualTo(once.get("tokens").get(1));
  }

  /**
   * A chat's rendering, "<|im_start|>user\nhi<|im_end|>\n" then the assistant's opening
   * "<|im_start|>assistant\n", at four bytes per token: vLLM's add_generation_prompt and
   * continue_final_message change it as they change vLLM's.
   */
  @Test
  void tokenizeAChatWithOrWithoutTheGenerationPromptOrWithTheLastMessageOpen() throws Exception {
    StandInVllm s = start();
    String messages = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    int turn = "<|im_start|>user\nhi".length();
    int end = "<|im_end|>\n".length();
    int opening = "<|im_start|>assistant\n".length();
    assertThat(tokenizeCount(s, "{" + messages + "}"))
        .isEqualTo((turn + end + opening + 3) / 4);
    assertThat(tokenizeCount(s, "{" + messages + ",\"add_generation_prompt\":true}"))
        .isEqualTo((turn + end + opening + 3) / 4);
    assertThat(tokenizeCount(s, "{" + messages + ",\"add_generation_prompt\":false}"))
        .isEqualTo((turn + end + 3) / 4);
    assertThat(tokenizeCount(s, "{" + messages
        + ",\"add_generation_prompt\":false,\"continue_final_message\":true}"))
        .isEqualTo((turn + 3) / 4);
    HttpResponse<String> both = post(s, "/tokenize", "{" + messages
        + ",\"continue_final_message\":true}");
    assertThat(both.statusCode()).isEqualTo(400);
    assertThat(JSON.readTree(both.body()).at("/error/message").asText())
        .contains("continue_final_message").contains("add_generation_prompt");
  }

  @Test
  void tokenizeGivesEachTokensTextWhenAskedFor() throws Exception {
    StandInVllm s = start();
    HttpResponse<String> r = post(s, "/tokenize",
        "{\"prompt\":\"the stand-in\",\"return_token_strs\":true}");
    assertThat(r.statusCode()).isEqualTo(200);
    JsonNode t = JSON.readTree(r.body());
    assertThat(t.get("count").asInt()).isEqualTo(3);
    assertThat(t.get("token_strs")).hasSize(3);
    assertThat(t.get("token_strs").get(0).asText()).isEqualTo("the ");
    assertThat(t.get("token_strs").get(1).asText()).isEqualTo("stan");
    assertThat(t.get("token_strs").get(2).asText()).isEqualTo("d-in");
    // a character split between two tokens is U+FFFD in each
    JsonNode split = JSON.readTree(post(s, "/tokenize",
        "{\"prompt\":\"abcé\",\"return_token_strs\":true}").body());
    assertThat(split.get("count").asInt()).isEqualTo(2);
    assertThat(split.get("token_strs").get(0).asText()).isEqualTo("abc\uFFFD");
    assertThat(split.get("token_strs").get(1).asText()).isEqualTo("\uFFFD");
  }

  JsonNode error(HttpResponse<String> r, int status) throws IOException {
    assertThat(r.statusCode()).as(r.body()).isEqualTo(status);
    assertThat(r.headers().firstValue("content-type")).hasValue("application/json");
    JsonNode e = JSON.readTree(r.body()).get("error");
    assertThat(e.get("code").asInt()).isEqualTo(status);
    return e;
  }

  @Test
  void tokenizeRefusesWhatVllmRefusesNamingTheField() throws Exception {
    StandInVllm s = start(StandInVllm.Options.defaults().withModel("qwen3")
        .withLatency(Duration.ZERO, Duration.ZERO));
    JsonNode unknown = error(post(s, "/tokenize", "{\"model\":\"gpt-4o\",\"prompt\":\"hi\"}"), 404);
    assertThat(unknown.get("message").asText()).isEqualTo("The model `gpt-4o` does not exist.");
    assertThat(unknown.get("type").asText()).isEqualTo("NotFoundError");
    assertThat(unknown.get("param").asText()).isEqualTo("model");
    assertThat(error(post(s, "/tokenize", "{\"model\":\"gpt-4o\",\"messages\":"
        + "[{\"role\":\"user\",\"content\":\"hi\"}]}"), 404).get("param").asText())
        .isEqualTo("model");
    String[][] cases = {
        {"{\"model\":7,\"prompt\":\"hi\"}", "model"},
        {"{}", "prompt"},
        {"{\"prompt\":null}", "prompt"},
        {"{\"prompt\":[1,2]}", "prompt"},
        {"{\"prompt\":\"hi\",\"return_token_strs\":\"yes\"}", "return_token_strs"},
        {"{\"prompt\":\"hi\",\"add_special_tokens\":1}", "add_special_tokens"},
        {"{\"messages\":[{\"content\":\"hi\"}]}", "messages[0].role"},
        {"{\"messages\":[{\"role\":\"user\"}],\"add_generation_prompt\":\"no\"}",
            "add_generation_prompt"},
    };
    for (String[] c : cases) {
      JsonNode e = error(post(s, "/tokenize", c[0]), 400);
      assertThat(e.get("type").asText()).as(c[0]).isEqualTo("BadRequestError");
      assertThat(e.get("param").asText()).as(c[0]).isEqualTo(c[1]);
      assertThat(e.get("message").asText()).as(c[0]).contains("'" + c[1]);
    }
    assertThat(error(post(s, "/tokenize", "not json"), 400).get("message").asText())
        .contains("not valid JSON");
    HttpResponse<String> get = get(s, "/tokenize");
    assertThat(get.statusCode()).isEqualTo(405);
    assertThat(get.headers().firstValue("allow")).hasValue("POST");
  }

  /**
   * {@code /detokenize} answered 404. The stand-in's token IDs are hashes and cannot be decoded:
   * it checks the request as vLLM does, answers the empty prompt for no tokens, and refuses
   * others saying why, instead of answering with text that is not theirs.
   */
  @Test
  void detokenizeChecksItsRequestAndSaysItCannotDecodeTheStandInsIds() throws Exception {
    StandInVllm s = start(StandInVllm.Options.defaults().withModel("qwen3")
        .withLatency(Duration.ZERO, Duration.ZERO));
    HttpResponse<String> none = post(s, "/detokenize", "{\"model\":\"qwen3\",\"tokens\":[]}");
    assertThat(none.statusCode()).isEqualTo(200);
    assertThat(none.body()).isEqualTo("{\"prompt\":\"\"}");
    JsonNode ids = JSON.readTree(post(s, "/tokenize", "{\"prompt\":\"hello\"}").body())
        .get("tokens");
    JsonNode refused = error(post(s, "/detokenize", "{\"tokens\":" + ids + "}"), 400);
    assertThat(refused.get("type").asText()).isEqualTo("BadRequestError");
    assertThat(refused.get("param").asText()).isEqualTo("tokens");
    assertThat(refused.get("message").asText()).contains("'tokens'").contains("--tokenizer");
    JsonNode unknown = error(post(s, "/detokenize", "{\"model\":\"gpt-4o\",\"tokens\":[]}"), 404);
    assertThat(unknown.get("message").asText()).isEqualTo("The model `gpt-4o` does not exist.");
    assertThat(unknown.get("param").asText()).isEqualTo("model");
    String[][] cases = {
        {"{\"model\":7,\"tokens\":[]}", "model"},
        {"{}", "tokens"},
        {"{\"tokens\":\"1 2\"}", "tokens"},
        {"{\"tokens\":[1,\"2\"]}", "tokens"},
        {"{\"tokens\":[1,-2]}", "tokens"},
        {"{\"tokens\":[" + StandInVllm.VOCAB_SIZE + "]}", "tokens"},
        {"{\"tokens\":[1,99999999999]}", "tokens"},
    };
    for (String[] c : cases) {
      JsonNode e = error(post(s, "/detokenize", c[0]), 400);
      assertThat(e.get("param").asText()).as(c[0]).isEqualTo(c[1]);
      assertThat(e.get("message").asText()).as(c[0]).contains("'" + c[1] + "'");
    }
    assertThat(error(post(s, "/detokenize", "{\"tokens\":[-2]}"), 400).get("message").asText())
        .contains("out of vocabulary");
    HttpResponse<String> get = get(s, "/detokenize");
    assertThat(get.statusCode()).isEqualTo(405);
    assertThat(get.headers().firstValue("allow")).hasValue("POST");
  }

  @Test
  void tokenIdsAreOnePerFourBytesAndDependOnlyOnThoseBytes() {
    byte[] text = "abcdefghi".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    int[] ids = StandInVllm.tokenIds(text);
    assertThat(ids).hasSize(3);
    assertThat(StandInVllm.tokenIds(new byte[0])).isEmpty();
    int[] shifted = StandInVllm.tokenIds(
        "abcdXXXXi".getBytes(java.nio.charset.StandardCharsets.UTF_8));
    assertThat(shifted[0]).isEqualTo(ids[0]);
    assertThat(shifted[1]).isNotEqualTo(ids[1]);
    assertThat(shifted[2]).isEqualTo(ids[2]);
  }

  /**
   * A tokenizer request reads a body: clients that send theirs slowly hold threads of the pool
   * that serves completions, not the server's own few, which answer /health meanwhile.
   */
  @Test
  void tokenizerRequestsWhoseBodiesAreSlowLeaveHealthAndMetricsAnswered() throws Exception {
    StandInVllm s = start();
    List<java.net.Socket> slow = new ArrayList<>();
    try {
      for (int i = 0; i < 12; i++) {
        java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(), s.port());
        slow.add(socket);
        String path = i % 2 == 0 ? "/tokenize" : "/detokenize";
        // a body of 100 bytes declared, and only its first byte sent
        socket.getOutputStream().write(("POST " + path + " HTTP/1.1\r\nHost: localhost\r\n"
            + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            .getBytes(java.nio.charset.StandardCharsets.US_ASCII));
        socket.getOutputStream().flush();
      }
      assertHealthy(get(s, "/health"), "/health while tokenizer bodies are read");
      assertThat(get(s, "/metrics").statusCode()).isEqualTo(200);
      assertThat(tokenizeCount(s, "{\"prompt\":\"abcdefgh\"}")).isEqualTo(2);
    } finally {
      for (java.net.Socket socket : slow) {
        socket.close();
      }
    }
  }
}
