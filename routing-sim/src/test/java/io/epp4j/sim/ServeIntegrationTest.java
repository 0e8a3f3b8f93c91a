package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.MetricsScraper;
import io.epp4j.core.PrometheusMetrics;
import io.epp4j.core.Router;
import io.epp4j.kvevents.BlockKeys;
import io.epp4j.kvevents.KvBlockIndex;
import io.epp4j.kvevents.KvEventSubscriber;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The emulated replicas over loopback sockets, at 20x speed; every wait has a deadline. */
@Timeout(60)
class ServeIntegrationTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final double SPEED = 20;
  private final HttpClient http = HttpClient.newBuilder()
      .connectTimeout(Duration.ofSeconds(5)).build();
  private final List<AutoCloseable> open = new ArrayList<>();

  @AfterEach
  void closeAll() throws Exception {
    for (int i = open.size() - 1; i >= 0; i--) {
      open.get(i).close();
    }
  }

  /**
   * One replica started with --enable-prompt-tokens-details, whose usage names the cached
   * tokens.
   */
  private Serve startNamingCachedTokens() {
    IllegalStateException last = null;
    for (int attempt = 0; attempt < 20; attempt++) {
      int base = ThreadLocalRandom.current().nextInt(20_000, 30_000);
      try {
        Serve s = new Serve(new Serve.Options(1, base, base + 1_000, false, SPEED,
            HardwareProfile.qwen3H100Mps6(), 1, List.of(), null,
            Serve.DEFAULT_KEEP_ALIVE_SECONDS, Serve.DEFAULT_MAX_LORAS,
            KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES, BodyBudget.DEFAULT_BYTES, null, false,
            true));
        open.add(s);
        return s;
      } catch (IllegalStateException e) {
        last = e;
      }
    }
    throw new AssertionError("no free ports found", last);
  }

  /** Starts replicas on free-looking ports, retrying a few bases if one is taken meanwhile. */
  private Serve start(int replicas) {
    return start(replicas, false, SPEED, List.of());
  }

  private Serve start(int replicas, boolean mapEncoding, double speed) {
    return start(replicas, mapEncoding, speed, List.of());
  }

  private Serve start(int replicas, List<String> loraAdapters) {
    return start(replicas, false, SPEED, loraAdapters);
  }

  private Serve start(int replicas, boolean mapEncoding, double speed,
      List<String> loraAdapters) {
    return start(replicas, mapEncoding, speed, loraAdapters, Serve.DEFAULT_KEEP_ALIVE_SECONDS);
  }

  private Serve start(int replicas, boolean mapEncoding, double speed,
      List<String> loraAdapters, double keepAliveSeconds) {
    return start(replicas, mapEncoding, speed, loraAdapters, keepAliveSeconds,
        Serve.DEFAULT_MAX_LORAS);
  }

  private Serve start(int replicas, boolean mapEncoding, double speed,
      List<String> loraAdapters, double keepAliveSeconds, int maxLoras) {
    IllegalStateException last = null;
    for (int attempt = 0; attempt < 20; attempt++) {
      // below the kernel's ephemeral range, so no client socket of another process holds them
      int base = ThreadLocalRandom.current().nextInt(20_000, 30_000);
      Serve.Options o = new Serve.Options(replicas, base, base + 1_000, mapEncoding, speed,
          HardwareProfile.qwen3H100Mps6(), 1, loraAdapters, null, keepAliveSeconds, maxLoras);
      try {
        Serve s = new Serve(o);
        open.add(s);
        return s;
      } catch (IllegalStateException e) {
        last = e;
      }
    }
    throw new AssertionError("no free ports found", last);
  }

  @Test
  void aKilledReplicaRefusesOrBreaksOffButNeverAnswersThatItIsStopping() throws Exception {
    Serve s = start(2);
    int port = port(s, 0);
    List<String> seen = java.util.Collections.synchronizedList(new ArrayList<>());
    java.util.concurrent.atomic.AtomicBoolean go = new java.util.concurrent.atomic.AtomicBoolean(
        true);
    java.util.concurrent.atomic.AtomicInteger answered =
        new java.util.concurrent.atomic.AtomicInteger();
    List<Thread> clients = new ArrayList<>();
    for (int t = 0; t < 16; t++) {
      // each thread on its own keep-alive connection, asking as fast as it is answered
      HttpClient own = HttpClient.newHttpClient();
      Thread c = new Thread(() -> {
        while (go.get()) {
          try {
            int status = own.send(HttpRequest.newBuilder(
                URI.create("http://127.0.0.1:" + port + "/health"))
                .timeout(Duration.ofSeconds(5)).build(),
                HttpResponse.BodyHandlers.discarding()).statusCode();
            answered.incrementAndGet();
            if (status != 200) {
              seen.add("http " + status);
            }
          } catch (java.io.IOException refusedOrCut) {
            // what a crash looks like to a client
          } catch (InterruptedException e) {
            return;
          }
        }
      });
      c.start();
      clients.add(c);
    }
    await(() -> answered.get() > 200, "200 answers");
    s.kill(0);
    int after = answered.get();
    Thread.sleep(100);
    go.set(false);
    for (Thread c : clients) {
      c.join(10_000);
    }
    // a crashed server says nothing: a 503 "shutting down" would make a gateway relay an error
    // instead of trying the request's fallback
    assertThat(seen).isEmpty();
    assertThat(answered.get() - after).as("answers after the kill").isLessThanOrEqualTo(16);
    // the other replica goes on
    assertThat(http.send(HttpRequest.newBuilder(
        URI.create("http://127.0.0.1:" + port(s, 1) + "/health")).build(),
        HttpResponse.BodyHandlers.discarding()).statusCode()).isEqualTo(200);
  }

  /** The prompt of a small request to {@code path}, as a JSON field: messages for chat. */
  private static String promptField(String path) {
    return path.endsWith("chat/completions")
        ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : "\"prompt\":[1,2,3]";
  }

  private static int port(Serve s, int replica) {
    String line = s.describe().get(replica);
    return Integer.parseInt(line.replaceAll(".*http://127\\.0\\.0\\.1:(\\d+).*", "$1"));
  }

  private static int kvPort(Serve s, int replica) {
    String line = s.describe().get(replica);
    return Integer.parseInt(line.replaceAll(".*kv-events tcp://127\\.0\\.0\\.1:(\\d+).*", "$1"));
  }

  private HttpResponse<String> post(int port, String path, String body) throws Exception {
    return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
        .timeout(Duration.ofSeconds(20))
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  private HttpResponse<String> get(int port, String path) throws Exception {
    return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
        .timeout(Duration.ofSeconds(20)).GET().build(), HttpResponse.BodyHandlers.ofString());
  }

  private static String tokens(int from, int n) {
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < n; i++) {
      b.append(i == 0 ? "" : ",").append(from + i);
    }
    return b.append(']').toString();
  }

  private static List<JsonNode> sse(String body) throws Exception {
    List<JsonNode> events = new ArrayList<>();
    for (String line : body.split("\n")) {
      if (line.startsWith("data: ")) {
        String data = line.substring(6);
        events.add(data.equals("[DONE]") ? JSON.getNodeFactory().textNode("[DONE]")
            : JSON.readTree(data));
      }
    }
    return events;
  }

  private static void await(BooleanSupplier condition, String what) throws InterruptedException {
    await(condition, () -> what);
  }

  private static void await(BooleanSupplier condition, java.util.function.Supplier<String> what)
      throws InterruptedException {
    long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out waiting for " + what.get());
      }
      Thread.sleep(10);
    }
  }

  @Test
  void completionsAnswerInVllmShapesWholeAndStreamed() throws Exception {
    Serve s = start(1);
    int p = port(s, 0);

    HttpResponse<String> whole = post(p, "/v1/completions",
        "{\"model\":\"qwen3-1.7b\",\"prompt\":" + tokens(1, 40) + ",\"max_tokens\":5}");
    assertThat(whole.statusCode()).isEqualTo(200);
    JsonNode w = JSON.readTree(whole.body());
    assertThat(w.get("object").asText()).isEqualTo("text_completion");
    assertThat(w.at("/choices/0/text").asText()).isEqualTo(" lorem".repeat(5));
    assertThat(w.at("/choices/0/finish_reason").asText()).isEqualTo("length");
    assertThat(w.at("/usage/prompt_tokens").asInt()).isEqualTo(40);
    assertThat(w.at("/usage/completion_tokens").asInt()).isEqualTo(5);
    // vLLM names cached tokens only with --enable-prompt-tokens-details
    assertThat(w.at("/usage/prompt_tokens_details").isNull()).isTrue();

    HttpResponse<String> streamed = post(p, "/v1/completions", "{\"prompt\":\"hello there world\","
        + "\"max_tokens\":4,\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
    assertThat(streamed.statusCode()).isEqualTo(200);
    assertThat(streamed.headers().firstValue("Content-Type")).hasValueSatisfying(
        t -> assertThat(t).startsWith("text/event-stream"));
    List<JsonNode> ev = sse(streamed.body());
    assertThat(ev).hasSize(4 + 2);
    for (int i = 0; i < 4; i++) {
      assertThat(ev.get(i).at("/choices/0/text").asText()).isEqualTo(" lorem");
      assertThat(ev.get(i).has("usage")).isFalse();
    }
    assertThat(ev.get(3).at("/choices/0/finish_reason").asText()).isEqualTo("length");
    assertThat(ev.get(4).get("choices")).isEmpty();
    assertThat(ev.get(4).at("/usage/prompt_tokens").asInt()).isEqualTo(3);
    assertThat(ev.get(4).at("/usage/completion_tokens").asInt()).isEqualTo(4);
    assertThat(ev.get(4).get("usage").has("prompt_tokens_details")).isFalse();
    assertThat(ev.get(5).asText()).isEqualTo("[DONE]");

    HttpResponse<String> chat = post(p, "/v1/chat/completions", "{\"messages\":[{\"role\":"
        + "\"user\",\"content\":\"hi\"}],\"max_tokens\":3,\"stream\":true}");
    List<JsonNode> ce = sse(chat.body());
    assertThat(ce).hasSize(1 + 3 + 1); // role chunk, tokens, [DONE]; no usage chunk unasked
    assertThat(ce.get(0).get("object").asText()).isEqualTo("chat.completion.chunk");
    assertThat(ce.get(0).at("/choices/0/delta/role").asText()).isEqualTo("assistant");
    assertThat(ce.get(1).at("/choices/0/delta/content").asText()).isEqualTo(" lorem");
    assertThat(ce.get(1).has("usage")).isFalse();

    HttpResponse<String> chatWhole = post(p, "/v1/chat/completions", "{\"messages\":[{\"role\":"
        + "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],\"max_tokens\":2}");
    JsonNode cw = JSON.readTree(chatWhole.body());
    assertThat(cw.get("object").asText()).isEqualTo("chat.completion");
    assertThat(cw.at("/choices/0/message/content").asText()).isEqualTo(" lorem lorem");

    JsonNode models = JSON.readTree(get(p, "/v1/models").body());
    assertThat(models.at("/data/0/id").asText()).isEqualTo("qwen3-1.7b");
    assertThat(get(p, "/health").statusCode()).isEqualTo(200);
  }

  @Test
  void streamOptionsWithoutIncludeUsageAskForTheUsageChunkAsInVllm() throws Exception {
    // vLLM's StreamOptions.include_usage defaults to true: naming stream_options at all asks for
    // the usage chunk unless include_usage says false; before, the emulated replica sent none
    Serve s = start(1);
    int p = port(s, 0);
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String request = promptField(path);
      List<JsonNode> ev = sse(post(p, path, "{" + request + ",\"max_tokens\":2,\"stream\":true,"
          + "\"stream_options\":{}}").body());
      JsonNode usage = ev.get(ev.size() - 2);
      assertThat(usage.get("choices")).as(path).isEmpty();
      assertThat(usage.at("/usage/completion_tokens").asInt()).as(path).isEqualTo(2);

      List<JsonNode> continuous = sse(post(p, path, "{" + request + ",\"max_tokens\":2,"
          + "\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":true}}").body());
      assertThat(continuous.get(continuous.size() - 2).at("/usage/completion_tokens").asInt())
          .as(path).isEqualTo(2);

      for (String off : List.of("false", "null")) {
        List<JsonNode> none = sse(post(p, path, "{" + request + ",\"max_tokens\":2,"
            + "\"stream\":true,\"stream_options\":{\"include_usage\":" + off + "}}").body());
        assertThat(none).as(path + " " + off).noneMatch(e -> e.path("usage").isObject());
      }
    }
  }

  @Test
  void moreThanOneChoiceIsRefusedInsteadOfAnsweredWithOne() throws Exception {
    // vLLM generates n choices per request; the emulated replica generates one, and before it
    // answered n = 2 with a single choice and the usage of one, so a load test that asked for
    // several choices measured a replica doing a fraction of the work it asked for
    Serve s = start(1);
    int p = port(s, 0);
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String request = promptField(path);
      for (String n : List.of("2", "1.5", "\"2\"")) {
        HttpResponse<String> refused = post(p, path, "{" + request + ",\"max_tokens\":2,\"n\":"
            + n + "}");
        assertThat(refused.statusCode()).as(path + " n=" + n).isEqualTo(400);
        JsonNode error = JSON.readTree(refused.body()).get("error");
        assertThat(error.get("type").asText()).isEqualTo("BadRequestError");
        assertThat(error.get("message").asText()).as(path + " n=" + n).contains("'n'");
      }
      // below 1, in vLLM's words
      for (String n : List.of("0", "-1")) {
        HttpResponse<String> refused = post(p, path, "{" + request + ",\"max_tokens\":2,\"n\":"
            + n + "}");
        assertThat(refused.statusCode()).as(path + " n=" + n).isEqualTo(400);
        assertThat(JSON.readTree(refused.body()).at("/error/message").asText())
            .isEqualTo("n must be at least 1, got " + n + ".");
      }
      // null is a chat's default (its n is typed int | None); a completion's n is typed int,
      // whose null vLLM's request model refuses
      boolean chat = path.equals("/v1/chat/completions");
      for (String n : chat ? List.of("1", "null") : List.of("1")) {
        HttpResponse<String> one = post(p, path, "{" + request + ",\"max_tokens\":2,\"n\":" + n
            + "}");
        assertThat(one.statusCode()).as(path + " n=" + n).isEqualTo(200);
        assertThat(JSON.readTree(one.body()).get("choices")).hasSize(1);
      }
      if (!chat) {
        HttpResponse<String> refused = post(p, path, "{" + request + ",\"max_tokens\":2,"
            + "\"n\":null}");
        assertThat(refused.statusCode()).as(path + " n=null").isEqualTo(400);
        assertThat(JSON.readTree(refused.body()).at("/error/message").asText()).contains("'n'");
      }
    }
  }

  @Test
  void streamOptionsWithoutStreamingAreRefusedAsInVllm() throws Exception {
    // vLLM's request validators refuse stream_options unless stream is true; before, the
    // emulated replica answered such a request whole, and a client that vLLM would refuse passed
    Serve s = start(1);
    int p = port(s, 0);
    for (String path : List.of("/v1/completions", "/v1/chat/completions")) {
      String request = promptField(path);
      for (String stream : List.of("", ",\"stream\":false")) {
        HttpResponse<String> refused = post(p, path, "{" + request + ",\"max_tokens\":2" + stream
            + ",\"stream_options\":{\"include_usage\":true}}");
        assertThat(refused.statusCode()).as(path + stream).isEqualTo(400);
        JsonNode error = JSON.readTree(refused.body()).get("error");
        assertThat(error.get("type").asText()).isEqualTo("BadRequestError");
        assertThat(error.get("message").asText()).contains("stream=True");
      }
      // a stream_options that is not an object is not valid, streaming or not
      HttpResponse<String> notAnObject = post(p, path, "{" + request + ",\"max_tokens\":2,"
          + "\"stream\":true,\"stream_options\":true}");
      assertThat(notAnObject.statusCode()).as(path).isEqualTo(400);
      assertThat(JSON.readTree(notAnObject.body()).at("/error/message").asText())
          .contains("stream_options");

      // as in vLLM, an empty or null stream_options names no option and passes
      for (String none : List.of("{}", "null")) {
        assertThat(post(p, path, "{" + request + ",\"max_tokens\":2,\"stream_options\":" + none
            + "}").statusCode()).as(path + " " + none).isEqualTo(200);
      }
    }
  }

  @Test
  void theTextPartsOfAMessageAreJoinedByNewlinesAsVllmJoinsThem() throws Exception {
    // vLLM hands a string-content chat template the text parts joined with "\n"; before, the
    // emulated replica glued them together, so "hello" + "there" was the one word "hellothere"
    Serve s = start(1);
    int p = port(s, 0);
    JsonNode parts = JSON.readTree(post(p, "/tokenize", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":[{\"type\":\"text\",\"text\":\"hello\"},{\"type\":\"text\","
        + "\"text\":\"there world\"}]}]}").body());
    JsonNode joined = JSON.readTree(post(p, "/tokenize", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":\"hello\\nthere world\"}]}").body());
    assertThat(parts.get("tokens")).isEqualTo(joined.get("tokens"));
    // "user:", "hello", "there", "world", then the generation prompt "assistant:"
    assertThat(parts.get("count").asInt()).isEqualTo(5);

    JsonNode answer = JSON.readTree(post(p, "/v1/chat/completions", "{\"messages\":[{\"role\":"
        + "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hello\"},{\"type\":\"text\","
        + "\"text\":\"there world\"}]}],\"max_tokens\":1}").body());
    assertThat(answer.at("/usage/prompt_tokens").asInt()).isEqualTo(5);
  }

  @Test
  void aRepeatedPrefixIsServedFromTheCache() throws Exception {
    Serve s = startNamingCachedTokens();
    int p = port(s, 0);
    String body = "{\"prompt\":" + tokens(1_000, 200) + ",\"max_tokens\":2,\"stream\":true,"
        + "\"stream_options\":{\"include_usage\":true}}";
    List<JsonNode> first = sse(post(p, "/v1/completions", body).body());
    List<JsonNode> second = sse(post(p, "/v1/completions", body).body());
    int cachedFirst = first.get(first.size() - 2).at("/usage/prompt_tokens_details/cached_tokens")
        .asInt();
    int cachedSecond = second.get(second.size() - 2)
        .at("/usage/prompt_tokens_details/cached_tokens").asInt();
    assertThat(cachedFirst).isZero();
    // every full block of the prompt but the one holding its last token: (200 - 1) / 16 * 16
    assertThat(cachedSecond).isEqualTo(192);

    // text shares token prefixes word by word in the stand-in tokenizer
    JsonNode a = JSON.readTree(post(p, "/tokenize", "{\"prompt\":\"you are a helpful bot\"}")
        .body());
    JsonNode b = JSON.readTree(post(p, "/tokenize", "{\"prompt\":\"you are a tired cat\"}")
        .body());
    assertThat(a.get("count").asInt()).isEqualTo(5);
    for (int i = 0; i < 3; i++) {
      assertThat(a.get("tokens").get(i)).isEqualTo(b.get("tokens").get(i));
    }
    assertThat(a.get("tokens").get(3)).isNotEqualTo(b.get("tokens").get(3));
  }

  @Test
  void errorsAreOpenAiShaped() throws Exception {
    Serve s = start(1);
    int p = port(s, 0);
    HttpResponse<String> bad = post(p, "/v1/completions", "{not json");
    assertThat(bad.statusCode()).isEqualTo(400);
    assertThat(JSON.readTree(bad.body()).at("/error/type").asText()).isEqualTo("BadRequestError");

    // content after the JSON object: vLLM refuses it; before, the emulated server ignored it
    HttpResponse<String> trailing = post(p, "/v1/completions", "{\"prompt\":[1,2],\"max_tokens\":1} []");
    assertThat(trailing.statusCode()).isEqualTo(400);

    HttpResponse<String> noPrompt = post(p, "/v1/completions", "{\"max_tokens\":3}");
    assertThat(noPrompt.statusCode()).isEqualTo(400);
    assertThat(JSON.readTree(noPrompt.body()).at("/error/message").asText()).contains("prompt");

    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    HttpResponse<String> tooLong = post(p, "/v1/completions",
        "{\"prompt\":" + tokens(0, maxLen) + ",\"max_tokens\":1}");
    assertThat(tooLong.statusCode()).isEqualTo(400);
    assertThat(JSON.readTree(tooLong.body()).at("/error/message").asText())
        .contains("maximum context length is " + maxLen);

    s.stopAccepting();
    HttpResponse<String> stopping = post(p, "/v1/completions", "{\"prompt\":[1,2],\"max_tokens\":1}");
    assertThat(stopping.statusCode()).isEqualTo(503);
    assertThat(JSON.readTree(stopping.body()).at("/error/code").asInt()).isEqualTo(503);
  }

  @Test
  void metricsScraperReadsTheReplicasMetrics() throws Exception {
    Serve s = start(1);
    int p = port(s, 0);
    post(p, "/v1/completions", "{\"prompt\":" + tokens(5, 100) + ",\"max_tokens\":2}");
    post(p, "/v1/completions", "{\"prompt\":" + tokens(5, 100) + ",\"max_tokens\":2}");
    String text = get(p, "/metrics").body();
    Result<EndpointMetrics> parsed = PrometheusMetrics.parse(text);
    assertThat(parsed.isOk()).as(text).isTrue();
    EndpointMetrics m = parsed.value();
    HardwareProfile hw = HardwareProfile.qwen3H100Mps6();
    assertThat(m.kvCapacityBlocks()).isEqualTo(hw.kvBlocksPerReplica());
    assertThat(m.blockSizeTokens()).isEqualTo(hw.blockSize());
    assertThat(text).contains("vllm:prefix_cache_queries_total{engine=\"0\",model_name=\""
        + hw.model() + "\"} 200.0");
    assertThat(text).contains("vllm:prefix_cache_hits_total{engine=\"0\",model_name=\""
        + hw.model() + "\"} 96.0");
    assertThat(text).contains("vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\""
        + hw.model() + "\"} 2.0");
    // a bucket's le between engine and model_name, in name order as vLLM's client writes labels
    assertThat(text).contains("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\","
        + "model_name=\"" + hw.model() + "\"} 2.0");

    try (Router router = Router.builder().endpoint(Endpoint.of("127.0.0.1", p)).build();
        MetricsScraper scraper = MetricsScraper.builder(router)
            .interval(Duration.ofMillis(20)).start()) {
      await(() -> scraper.scrapes() >= 2, "two scrapes");
      assertThat(scraper.failures()).isZero();
    }
  }

  @Test
  void everyFinishReasonHasASuccessSeriesFromTheStartAsInVllm() throws Exception {
    Serve s = start(1);
    int p = port(s, 0);
    // in name order, as vLLM's Prometheus client writes a series' labels
    String labels = "{engine=\"0\",finished_reason=\"";
    String model = "\",model_name=\"" + HardwareProfile.qwen3H100Mps6().model() + "\"}";
    String before = get(p, "/metrics").body();
    for (String reason : List.of("stop", "length", "abort", "error", "repetition")) {
      assertThat(before).as("before any request").contains(
          "vllm:request_success_total" + labels + reason + model + " 0.0\n");
    }
    assertThat(before).containsOnlyOnce("# TYPE vllm:request_success_total counter\n");

    post(p, "/v1/completions", "{\"prompt\":" + tokens(5, 20) + ",\"max_tokens\":2}");
    String after = get(p, "/metrics").body();
    assertThat(after)
        .contains("vllm:request_success_total" + labels + "length" + model + " 1.0\n");
    for (String reason : List.of("stop", "abort", "error", "repetition")) {
      assertThat(after)
          .contains("vllm:request_success_total" + labels + reason + model + " 0.0\n");
    }
    assertThat(PrometheusMetrics.parse(after).isOk()).as(after).isTrue();
  }

  @Test
  void preciseModePicksUpTheEmulatorsKvEvents() throws Exception {
    Serve s = start(2);
    List<Endpoint> eps = new ArrayList<>();
    for (int i = 0; i < 2; i++) {
      eps.add(Endpoint.of("127.0.0.1", port(s, i), Map.of(
          KvEventSubscriber.PORT_LABEL, String.valueOf(kvPort(s, i)),
          KvEventSubscriber.REPLAY_PORT_LABEL, String.valueOf(kvPort(s, i) + 1))));
    }
    KvBlockIndex index = KvBlockIndex.create();
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            kvEvents: {mode: per-endpoint, replayTimeoutMs: 10000}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """;
    try (Router router = Router.builder().endpoints(eps).service(KvBlockIndex.class, index)
        .configYaml(yaml, "emulator").build()) {
      // the subscription is asynchronous: warm up until each replica's events arrive
      for (int i = 0; i < 2; i++) {
        int replica = i;
        int[] n = {0};
        await(() -> {
          try {
            post(port(s, replica), "/v1/completions",
                "{\"prompt\":" + tokens(90_000 + 100 * n[0]++, 40) + ",\"max_tokens\":1}");
          } catch (Exception e) {
            throw new AssertionError(e);
          }
          return index.blockCount(eps.get(replica).id()) > 0;
        }, "events of replica " + i);
      }
      // distinct prompts, each served by one replica: the router must find each where it is
      for (int k = 0; k < 6; k++) {
        post(port(s, k % 2), "/v1/completions",
            "{\"prompt\":" + tokens(10_000 * (k + 1), 160) + ",\"max_tokens\":1}");
      }
      for (int k = 0; k < 6; k++) {
        int[] prompt = new int[160];
        for (int t = 0; t < prompt.length; t++) {
          prompt[t] = 10_000 * (k + 1) + t;
        }
        Endpoint expected = eps.get(k % 2);
        await(() -> {
          RoutingDecision d = router.route(InferenceRequest.builder().model("qwen3-1.7b")
              .tokenIds(prompt).build());
          return d.isRouted() && d.primary().id().equals(expected.id());
        }, "prompt " + k + " routed to the replica holding it");
      }
      for (int i = 0; i < 2; i++) {
        int replica = i;
        await(() -> s.cluster().idle(replica), "replica idle");
        // batches published before the subscription was made are lost to it (as with vLLM's
        // PUB socket), so the index may miss warm-up blocks, but it holds every block of the
        // three 160-token prompts and nothing the replica does not hold
        await(() -> index.blockCount(eps.get(replica).id()) >= 3 * 160 / 16,
            () -> "index holds the prompts' blocks: " + index.blockCount(eps.get(replica).id()));
        assertThat(index.blockCount(eps.get(replica).id()))
            .isLessThanOrEqualTo(s.cluster().cachedBlocks(replica));
        assertThat(index.metrics().decodeErrors()).isZero();
      }
    }
  }

  @Test
  void theMapEncodingOverZeroMqIsReadByTheSubscriber() throws Exception {
    Serve s = start(1, true, SPEED);
    int p = port(s, 0);
    Endpoint ep = Endpoint.of("127.0.0.1", p, Map.of(
        KvEventSubscriber.PORT_LABEL, String.valueOf(kvPort(s, 0)),
        KvEventSubscriber.REPLAY_PORT_LABEL, String.valueOf(kvPort(s, 0) + 1)));
    KvBlockIndex index = KvBlockIndex.create();
    try (KvEventSubscriber sub = KvEventSubscriber.perEndpoint(index)
        .replayTimeout(Duration.ofSeconds(10)).build()) {
      sub.addEndpoint(ep);
      // a PUB socket drops what it sends before the subscription is made: ask until it lands
      int[] n = {0};
      await(() -> {
        try {
          post(p, "/v1/completions", "{\"prompt\":" + tokens(70_000 + 100 * n[0]++, 40)
              + ",\"max_tokens\":1}");
        } catch (Exception e) {
          throw new AssertionError(e);
        }
        return index.blockCount(ep.id()) > 0;
      }, "the first map-encoded batch");
      int before = index.blockCount(ep.id());
      post(p, "/v1/completions", "{\"prompt\":" + tokens(120_000, 160) + ",\"max_tokens\":1}");
      // the 160-token prompt's ten full blocks arrive as BlockStored in the map encoding
      await(() -> index.blockCount(ep.id()) >= before + 160 / 16,
          () -> "the prompt's blocks: " + index.blockCount(ep.id()) + " after " + before);
      assertThat(index.metrics().decodeErrors()).isZero();
      assertThat(index.metrics().blocksStored()).isGreaterThanOrEqualTo(160 / 16);
    }
  }

  @Test
  void closeWhileAnswersStreamEndsThemAndFreesEveryPort() throws Exception {
    // real time: a 4,000-token answer takes far longer than the test, so it is cut, not done
    Serve s = start(2, false, 1);
    open.remove(s);
    List<java.util.concurrent.CompletableFuture<HttpResponse<String>>> answers = new ArrayList<>();
    List<Lines> streams = new ArrayList<>();
    for (int i = 0; i < 4; i++) {
      Lines lines = new Lines();
      streams.add(lines);
      answers.add(http.sendAsync(HttpRequest.newBuilder(URI.create("http://127.0.0.1:"
              + port(s, i % 2) + "/v1/completions")).timeout(Duration.ofSeconds(20))
          .header("Content-Type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":" + tokens(300 + i * 50, 32)
              + ",\"max_tokens\":4000,\"stream\":true,"
              + "\"stream_options\":{\"include_usage\":true}}")).build(),
          HttpResponse.BodyHandlers.fromLineSubscriber(lines, Lines::text, "\n")));
    }
    for (Lines lines : streams) {
      assertThat(lines.firstToken.await(20, java.util.concurrent.TimeUnit.SECONDS)).isTrue();
    }
    long start = System.nanoTime();
    s.close();
    assertThat((System.nanoTime() - start) / 1e9).as("close() returns promptly").isLessThan(10);
    for (var answer : answers) {
      // each stream ends: with the error event vLLM sends when its engine stops, or cut off;
      // never with a usage chunk, since no answer was finished
      String text;
      try {
        text = answer.get(20, java.util.concurrent.TimeUnit.SECONDS).body();
      } catch (java.util.concurrent.ExecutionException cut) {
        text = "";
      }
      assertThat(text).doesNotContain("\"usage\":{");
    }
    Serve.Options o = s.options();
    // no thread of the replicas' HTTP servers outlives close() (by more than its last moments)
    await(() -> serverThreads(o).isEmpty(), () -> "threads left running: " + serverThreads(o));
    for (int i = 0; i < o.replicas(); i++) {
      for (int portToBind : new int[] {o.port() + i, o.kvEventsPort() + 2 * i,
          o.kvEventsPort() + 2 * i + 1}) {
        try (ServerSocket again = new ServerSocket(portToBind, 1,
            InetAddress.getLoopbackAddress())) {
          assertThat(again.getLocalPort()).isEqualTo(portToBind);
        }
      }
    }
  }

  /** The live threads of the replicas' HTTP servers: I/O and request threads. */
  private static List<String> serverThreads(Serve.Options o) {
    List<String> names = new ArrayList<>();
    for (Thread t : Thread.getAllStackTraces().keySet()) {
      for (int i = 0; i < o.replicas(); i++) {
        String name = t.getName();
        if (t.isAlive() && (name.startsWith("epp4j-emulator-io-" + (o.port() + i) + "-")
            || name.equals("epp4j-emulator-http-" + (o.port() + i)))) {
          names.add(name);
        }
      }
    }
    return names;
  }

  @Test
  void aClientThatLeavesMidStreamAbortsItsRequestAndFreesItsSlotAndBlocks() throws Exception {
    // real time: 30,000 output tokens take minutes of decode steps, far longer than the wait
    // below, so the replica is idle in time only if it dropped the request when its client left
    Serve s = start(1, false, 1);
    int p = port(s, 0);
    byte[] body = ("{\"prompt\":" + tokens(7, 512) + ",\"max_tokens\":30000,\"stream\":true}")
        .getBytes(StandardCharsets.UTF_8);
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(), p)) {
      socket.setSoTimeout(20_000);
      java.io.OutputStream out = socket.getOutputStream();
      out.write(("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
          + "Content-Type: application/json\r\nContent-Length: " + body.length + "\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(body);
      out.flush();
      java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(
          socket.getInputStream(), StandardCharsets.UTF_8));
      for (String line; (line = in.readLine()) != null && !line.startsWith("data: "); ) {
        // headers, then the first token's chunk
      }
      assertThat(s.cluster().stats(0).running()).isEqualTo(1);
    } // the client hangs up while the replica is still generating
    await(() -> s.cluster().idle(0), "the replica to drop the request of the client that left");
    await(() -> !handlerWaiting(p), "the request's handler to end");
    assertDroppedAndStillServing(s, p, 7, 0);
  }

  /** Whether a request handler of the replica on {@code port} waits for its request's tokens. */
  private static boolean handlerWaiting(int port) {
    return Thread.getAllStackTraces().entrySet().stream()
        .filter(e -> e.getKey().getName().equals("epp4j-emulator-http-" + port))
        .anyMatch(e -> java.util.Arrays.stream(e.getValue()).anyMatch(f ->
            f.getClassName().equals(EmulatedServer.class.getName())
                && f.getMethodName().equals("take")));
  }

  /**
   * Replica 0 holds nothing for an aborted request and counts no success for it (it had finished
   * {@code finishedBefore}), and answers the next request.
   */
  private void assertDroppedAndStillServing(Serve s, int port, int seed,
      long finishedBefore) throws Exception {
    EmulatedCluster.Stats after = s.cluster().stats(0);
    assertThat(after.running()).isZero();
    assertThat(after.waiting()).isZero();
    assertThat(after.kvUsage()).as("no block held for the aborted request").isZero();
    assertThat(after.requestsFinished()).as("an aborted request is not a success")
        .isEqualTo(finishedBefore);
    HttpResponse<String> next = post(port, "/v1/completions", "{\"prompt\":" + tokens(seed, 64)
        + ",\"max_tokens\":2}");
    assertThat(next.statusCode()).isEqualTo(200);
    assertThat(JSON.readTree(next.body()).at("/usage/completion_tokens").asInt()).isEqualTo(2);
  }

  @Test
  void aClientThatLeavesBeforeItsWholeAnswerAbortsItsRequestAndFreesItsSlotAndBlocks()
      throws Exception {
    // real time: 30,000 output tokens take minutes of decode steps; a replica that ran the
    // request for nobody would still hold it, and its blocks, long after the bound below
    Serve s = start(1, false, 1);
    int p = port(s, 0);
    String completion = "{\"prompt\":" + tokens(9, 512) + ",\"max_tokens\":30000}";
    String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"" + "word ".repeat(300)
        + "\"}],\"max_tokens\":30000,\"stream\":false}";
    for (boolean chunked : new boolean[] {false, true}) {
      long finishedBefore = s.cluster().stats(0).requestsFinished();
      byte[] body = (chunked ? chat : completion).getBytes(StandardCharsets.UTF_8);
      String path = chunked ? "/v1/chat/completions" : "/v1/completions";
      try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(), p)) {
        java.io.OutputStream out = socket.getOutputStream();
        out.write(("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + "Content-Type: application/json\r\n"
            + (chunked ? "Transfer-Encoding: chunked\r\n\r\n"
                : "Content-Length: " + body.length + "\r\n\r\n"))
            .getBytes(StandardCharsets.US_ASCII));
        if (chunked) {
          // the body in two chunks, then the last one
          int half = body.length / 2;
          out.write((Integer.toHexString(half) + "\r\n").getBytes(StandardCharsets.US_ASCII));
          out.write(body, 0, half);
          out.write(("\r\n" + Integer.toHexString(body.length - half) + "\r\n")
              .getBytes(StandardCharsets.US_ASCII));
          out.write(body, half, body.length - half);
          out.write("\r\n0\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
        } else {
          out.write(body);
        }
        out.flush();
        // the request is generating: it holds a slot in the batch and KV blocks
        await(() -> s.cluster().stats(0).running() == 1
            && s.cluster().stats(0).generationTokens() > 0, "the request to start decoding");
        assertThat(s.cluster().stats(0).kvUsage()).isPositive();
      } // the client hangs up while waiting for its answer
      long left = System.nanoTime();
      await(() -> s.cluster().idle(0), "the replica to drop the request of the client that left");
      assertThat((System.nanoTime() - left) / 1e9).as("seconds until the request was dropped")
          .isLessThan(5);
      await(() -> !handlerWaiting(p), "the request's handler to end");
      assertDroppedAndStillServing(s, p, chunked ? 10 : 9, finishedBefore);
    }
  }

  @Test
  void theWireIsPlainHttp11KeepAliveChunkedAndPipelined() throws Exception {
    Serve s = start(1);
    int p = port(s, 0);
    byte[] body = ("{\"prompt\":" + tokens(5, 20) + ",\"max_tokens\":2}")
        .getBytes(StandardCharsets.UTF_8);
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(), p)) {
      socket.setSoTimeout(20_000);
      java.io.OutputStream out = socket.getOutputStream();
      java.io.InputStream in = new java.io.BufferedInputStream(socket.getInputStream());
      String head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
          + "Content-Type: application/json\r\n";

      // a Content-Length body, then a chunked one on the same connection
      out.write((head + "Content-Length: " + body.length + "\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(body);
      out.flush();
      RawResponse first = RawResponse.read(in);
      assertThat(first.status()).isEqualTo(200);
      assertThat(first.header("content-type")).isEqualTo("application/json");
      assertThat(first.header("content-length")).isEqualTo(String.valueOf(first.body().length()));
      assertThat(JSON.readTree(first.body()).at("/usage/completion_tokens").asInt()).isEqualTo(2);

      out.write((head + "Transfer-Encoding: chunked\r\n\r\n" + Integer.toHexString(body.length)
          + "\r\n").getBytes(StandardCharsets.US_ASCII));
      out.write(body);
      out.write("\r\n0\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
      out.flush();
      RawResponse second = RawResponse.read(in);
      assertThat(second.status()).isEqualTo(200);
      assertThat(JSON.readTree(second.body()).at("/usage/prompt_tokens").asInt()).isEqualTo(20);

      // a streamed answer is chunked, then the connection serves the next request
      byte[] streamed = ("{\"prompt\":" + tokens(5, 20) + ",\"max_tokens\":3,\"stream\":true}")
          .getBytes(StandardCharsets.UTF_8);
      out.write((head + "Content-Length: " + streamed.length + "\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(streamed);
      out.flush();
      RawResponse third = RawResponse.read(in);
      assertThat(third.status()).isEqualTo(200);
      assertThat(third.header("transfer-encoding")).isEqualToIgnoringCase("chunked");
      assertThat(third.header("content-type")).isEqualTo("text/event-stream; charset=utf-8");
      assertThat(third.header("cache-control")).isEqualTo("no-cache");
      assertThat(sse(third.body())).hasSize(3 + 1);

      // pipelined: three requests in one write are answered in order
      String pipelined = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
          + "GET /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
          + "GET /nowhere?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
      out.write(pipelined.getBytes(StandardCharsets.US_ASCII));
      out.flush();
      RawResponse health = RawResponse.read(in);
      assertThat(health.status()).isEqualTo(200);
      assertThat(health.body()).isEmpty();
      RawResponse wrongMethod = RawResponse.read(in);
      assertThat(wrongMethod.status()).isEqualTo(405);
      assertThat(JSON.readTree(wrongMethod.body()).at("/detail").asText())
          .isEqualTo("Method Not Allowed");
      RawResponse noRoute = RawResponse.read(in);
      assertThat(noRoute.status()).isEqualTo(404);
      assertThat(JSON.readTree(noRoute.body()).at("/detail").asText()).isEqualTo("Not Found");

      // Connection: close is honoured after the answer
      out.write(("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.flush();
      RawResponse metrics = RawResponse.read(in);
      assertThat(metrics.status()).isEqualTo(200);
      assertThat(metrics.header("content-type"))
          .isEqualTo("text/plain; version=0.0.4; charset=utf-8");
      assertThat(metrics.body()).contains("vllm:num_requests_running");
      assertThat(in.read()).as("the server closed the connection").isEqualTo(-1);
    }

    // Expect: 100-continue is answered before the body is sent, as curl expects
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(), p)) {
      socket.setSoTimeout(20_000);
      java.io.OutputStream out = socket.getOutputStream();
      java.io.InputStream in = new java.io.BufferedInputStream(socket.getInputStream());
      byte[] text = "{\"prompt\":\"a b c d\"}".getBytes(StandardCharsets.US_ASCII);
      out.write(("POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
          + "Content-Type: application/json\r\nContent-Length: " + text.length + "\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.flush();
      assertThat(RawResponse.read(in).status()).isEqualTo(100);
      out.write(text);
      out.flush();
      RawResponse tokenized = RawResponse.read(in);
      assertThat(tokenized.status()).isEqualTo(200);
      assertThat(JSON.readTree(tokenized.body()).get("count").asInt()).isEqualTo(4);
    }

    // a body over the limit is refused from its Content-Length, before it is sent
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(), p)) {
      socket.setSoTimeout(20_000);
      java.io.OutputStream out = socket.getOutputStream();
      java.io.InputStream in = new java.io.BufferedInputStream(socket.getInputStream());
      out.write(("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
          + "Content-Type: application/json\r\nContent-Length: "
          + (EmulatedServer.MAX_BODY_BYTES + 1) + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
      out.flush();
      RawResponse tooLarge = RawResponse.read(in);
      assertThat(tooLarge.status()).isEqualTo(413);
      assertThat(JSON.readTree(tooLarge.body()).at("/error/code").asInt()).isEqualTo(413);
      assertThat(in.read()).as("the server closed the connection").isEqualTo(-1);
    }

    // and so is one that expects 100-continue (curl's way with any body over 1 MiB): the same
    // OpenAI-shaped 413 and close, not an empty 413 on a connection left waiting for the body
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(), p)) {
      socket.setSoTimeout(20_000);
      java.io.OutputStream out = socket.getOutputStream();
      java.io.InputStream in = new java.io.BufferedInputStream(socket.getInputStream());
      out.write(("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
          + "Content-Type: application/json\r\nContent-Length: "
          + (EmulatedServer.MAX_BODY_BYTES + 1) + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
      out.flush();
      RawResponse tooLarge = RawResponse.read(in);
      assertThat(tooLarge.status()).isEqualTo(413);
      assertThat(JSON.readTree(tooLarge.body()).at("/error/message").asText())
          .contains(String.valueOf(EmulatedServer.MAX_BODY_BYTES));
      assertThat(in.read()).as("the server closed the connection").isEqualTo(-1);
    }
  }

  @Test
  void anIdleConnectionIsClosedAfterTheKeepAliveTimeoutButNotWhileItsAnswerIsComputed()
      throws Exception {
    double keepAlive = 0.3;
    // at speed 1 an answer of 400 tokens takes over a second with nothing written before it
    Serve s = start(1, false, 1, List.of(), keepAlive);
    int p = port(s, 0);
    byte[] body = ("{\"prompt\":" + tokens(5, 20) + ",\"max_tokens\":400}")
        .getBytes(StandardCharsets.UTF_8);
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(), p)) {
      socket.setSoTimeout(20_000);
      java.io.OutputStream out = socket.getOutputStream();
      java.io.InputStream in = new java.io.BufferedInputStream(socket.getInputStream());
      long sent = System.nanoTime();
      out.write(("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
          + "Content-Type: application/json\r\nContent-Length: " + body.length + "\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(body);
      out.flush();
      RawResponse whole = RawResponse.read(in);
      double tookSeconds = (System.nanoTime() - sent) / 1e9;
      assertThat(whole.status()).isEqualTo(200);
      assertThat(JSON.readTree(whole.body()).at("/usage/completion_tokens").asInt())
          .isEqualTo(400);
      assertThat(tookSeconds).as("the answer was silent for longer than the timeout, so a close"
          + " while it was computed would have shown").isGreaterThan(2 * keepAlive);

      long answered = System.nanoTime();
      assertThat(in.read()).as("the server closed the idle connection").isEqualTo(-1);
      double idleSeconds = (System.nanoTime() - answered) / 1e9;
      assertThat(idleSeconds).as("not before the timeout").isGreaterThan(keepAlive * 0.8);
    }

    // a client that pools connections opens a new one and never sees the close as an error
    for (int i = 0; i < 3; i++) {
      HttpResponse<String> r = post(p, "/v1/completions",
          "{\"prompt\":" + tokens(5, 20) + ",\"max_tokens\":1}");
      assertThat(r.statusCode()).isEqualTo(200);
      Thread.sleep(Math.round(keepAlive * 1_500));
    }
  }

  @Test
  void aZeroKeepAliveTimeoutLeavesIdleConnectionsOpen() throws Exception {
    Serve s = start(1, false, SPEED, List.of(), 0);
    try (java.net.Socket socket = new java.net.Socket(InetAddress.getLoopbackAddress(),
        port(s, 0))) {
      java.io.OutputStream out = socket.getOutputStream();
      java.io.InputStream in = new java.io.BufferedInputStream(socket.getInputStream());
      out.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
          .getBytes(StandardCharsets.US_ASCII));
      out.flush();
      socket.setSoTimeout(20_000);
      assertThat(RawResponse.read(in).status()).isEqualTo(200);
      socket.setSoTimeout(1_500);
      org.assertj.core.api.Assertions.assertThatThrownBy(in::read).as("still open after 1.5 s idle")
          .isInstanceOf(java.net.SocketTimeoutException.class);
    }
  }

  /** One HTTP/1.1 response read off a socket: its status, headers (lower-cased names), body. */
  private record RawResponse(int status, Map<String, String> headers, String body) {
    String header(String name) {
      return headers.get(name);
    }

    static RawResponse read(java.io.InputStream in) throws java.io.IOException {
      String statusLine = line(in);
      int status = Integer.parseInt(statusLine.split(" ")[1]);
      Map<String, String> headers = new java.util.HashMap<>();
      for (String h; !(h = line(in)).isEmpty(); ) {
        int colon = h.indexOf(':');
        headers.put(h.substring(0, colon).trim().toLowerCase(java.util.Locale.ROOT),
            h.substring(colon + 1).trim());
      }
      ByteArrayOutputStream body = new ByteArrayOutputStream();
      if (status == 100) {
        return new RawResponse(status, headers, "");
      }
      if ("chunked".equalsIgnoreCase(headers.get("transfer-encoding"))) {
        for (int size; (size = Integer.parseInt(line(in).trim(), 16)) > 0; ) {
          body.write(in.readNBytes(size));
          line(in);
        }
        line(in); // the blank line after the last chunk
      } else {
        body.write(in.readNBytes(Integer.parseInt(headers.getOrDefault("content-length", "0"))));
      }
      return new RawResponse(status, headers, body.toString(StandardCharsets.UTF_8));
    }

    private static String line(java.io.InputStream in) throws java.io.IOException {
      StringBuilder b = new StringBuilder();
      for (int c; (c = in.read()) != '\n'; ) {
        if (c < 0) {
          throw new java.io.EOFException("the connection closed mid-response: " + b);
        }
        if (c != '\r') {
          b.append((char) c);
        }
      }
      return b.toString();
    }
  }

  /** An SSE answer's lines as they arrive, with a latch on its first token. */
  private static final class Lines implements java.util.concurrent.Flow.Subscriber<String> {
    final java.util.concurrent.CountDownLatch firstToken = new java.util.concurrent.CountDownLatch(1);
    private final StringBuilder text = new StringBuilder();

    @Override
    public void onSubscribe(java.util.concurrent.Flow.Subscription sub) {
      sub.request(Long.MAX_VALUE);
    }

    @Override
    public synchronized void onNext(String line) {
      text.append(line).append('\n');
      if (line.contains("lorem")) {
        firstToken.countDown();
      }
    }

    @Override
    public void onError(Throwable t) {}

    @Override
    public void onComplete() {}

    synchronized String text() {
      return text.toString();
    }
  }

  @Test
  void theAdaptersOfRunningRequestsAreInTheMetricsAsVllmReportsThem() throws Exception {
    // at speed 1, 400 tokens take over a second: time to scrape while the request runs
    Serve s = start(1, false, 1, List.of("sql", "chat"), Serve.DEFAULT_KEEP_ALIVE_SECONDS, 2);
    int p = port(s, 0);
    java.util.concurrent.CompletableFuture<HttpResponse<String>> running = complete(p, "sql", 400);
    io.epp4j.api.EndpointMetrics during =
        awaitMetrics(p, m -> !m.runningLoraAdapters().isEmpty());
    assertThat(during.runningLoraAdapters()).containsExactly("sql");
    assertThat(during.waitingLoraAdapters()).isEmpty();
    assertThat(during.maxLoras()).isEqualTo(2);
    assertThat(running.get(20, java.util.concurrent.TimeUnit.SECONDS).statusCode())
        .isEqualTo(200);
    io.epp4j.api.EndpointMetrics after =
        io.epp4j.core.PrometheusMetrics.parse(get(p, "/metrics").body()).value();
    assertThat(after.runningLoraAdapters()).isEmpty();
    assertThat(after.maxLoras()).isEqualTo(2);

    // a replica without adapters reports none, as vLLM without --enable-lora
    Serve plain = start(1);
    assertThat(get(port(plain, 0), "/metrics").body()).doesNotContain("lora_requests_info");
  }

  @Test
  void anAdapterNameHoldingAQuoteOrABackslashLeavesTheMetricsReadable() throws Exception {
    // written raw into the label, the quote ended it early and every scrape of the page failed
    String odd = "sq\"l\\v2";
    Serve s = start(1, false, 1, List.of(odd), Serve.DEFAULT_KEEP_ALIVE_SECONDS, 1);
    int p = port(s, 0);
    String inJson = odd.replace("\\", "\\\\").replace("\"", "\\\"");
    java.util.concurrent.CompletableFuture<HttpResponse<String>> running = complete(p, inJson, 400);
    io.epp4j.api.EndpointMetrics during =
        awaitMetrics(p, m -> !m.runningLoraAdapters().isEmpty());
    assertThat(during.runningLoraAdapters()).containsExactly(odd);
    assertThat(running.get(20, java.util.concurrent.TimeUnit.SECONDS).statusCode())
        .isEqualTo(200);
  }

  @Test
  void theModelListNamesTheLoraAdaptersAfterTheBaseModelAsVllmDoes() throws Exception {
    // vLLM with --lora-modules lists each adapter as a model of its own, its parent the base
    // model; before, the emulated replica listed the base model alone
    Serve s = start(1, List.of("sql", "chat"));
    JsonNode data = JSON.readTree(get(port(s, 0), "/v1/models").body()).get("data");
    assertThat(data).hasSize(3);
    assertThat(data.get(0).get("id").asText()).isEqualTo("qwen3-1.7b");
    assertThat(data.get(0).get("parent").isNull()).isTrue();
    assertThat(data.get(0).get("max_model_len").asInt())
        .isEqualTo(HardwareProfile.qwen3H100Mps6().maxModelLen());
    for (int i = 1; i <= 2; i++) {
      JsonNode adapter = data.get(i);
      assertThat(adapter.get("id").asText()).isEqualTo(i == 1 ? "sql" : "chat");
      assertThat(adapter.get("object").asText()).isEqualTo("model");
      assertThat(adapter.get("owned_by").asText()).isEqualTo("vllm");
      assertThat(adapter.get("parent").asText()).isEqualTo("qwen3-1.7b");
      assertThat(adapter.get("max_model_len").isNull()).isTrue();
    }

    // each listed model is one a request can name
    for (JsonNode m : data) {
      assertThat(post(port(s, 0), "/v1/completions", "{\"model\":\"" + m.get("id").asText()
          + "\",\"prompt\":[1,2,3],\"max_tokens\":1}").statusCode()).isEqualTo(200);
    }
  }

  @Test
  void withOneLoraSlotARequestOnAnotherAdapterWaitsWhileRequestsBehindItGoFirst()
      throws Exception {
    // vLLM's default --max-loras 1: while sql runs, chat waits in the queue and says so in the
    // metrics; a base-model request sent after it is admitted at once
    Serve s = start(1, false, 1, List.of("sql", "chat"));
    int p = port(s, 0);
    java.util.concurrent.CompletableFuture<HttpResponse<String>> sql = complete(p, "sql", 400);
    awaitMetrics(p, m -> m.runningLoraAdapters().contains("sql"));
    java.util.concurrent.CompletableFuture<HttpResponse<String>> chat = complete(p, "chat", 5);
    io.epp4j.api.EndpointMetrics queued =
        awaitMetrics(p, m -> m.waitingLoraAdapters().contains("chat"));
    assertThat(queued.runningLoraAdapters()).containsExactly("sql");
    assertThat(queued.maxLoras()).isEqualTo(1);
    HttpResponse<String> base = complete(p, "qwen3-1.7b", 5).get(20, java.util.concurrent.TimeUnit.SECONDS);
    assertThat(base.statusCode()).isEqualTo(200);
    assertThat(sql).as("the base-model request passed the queued chat request and ended while"
        + " sql still ran").isNotDone();
    assertThat(chat).isNotDone();
    assertThat(sql.get(20, java.util.concurrent.TimeUnit.SECONDS).statusCode()).isEqualTo(200);
    assertThat(chat.get(20, java.util.concurrent.TimeUnit.SECONDS).statusCode()).isEqualTo(200);

    // with two slots, the short chat request runs beside sql and ends first
    Serve two = start(1, false, 1, List.of("sql", "chat"), Serve.DEFAULT_KEEP_ALIVE_SECONDS, 2);
    int p2 = port(two, 0);
    java.util.concurrent.CompletableFuture<HttpResponse<String>> sql2 = complete(p2, "sql", 400);
    awaitMetrics(p2, m -> m.runningLoraAdapters().contains("sql"));
    assertThat(complete(p2, "chat", 5).get(20, java.util.concurrent.TimeUnit.SECONDS)
        .statusCode()).isEqualTo(200);
    assertThat(sql2).isNotDone();
    assertThat(sql2.get(20, java.util.concurrent.TimeUnit.SECONDS).statusCode()).isEqualTo(200);
  }

  private java.util.concurrent.CompletableFuture<HttpResponse<String>> complete(int port,
      String model, int maxTokens) {
    return http.sendAsync(
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/v1/completions"))
            .timeout(Duration.ofSeconds(20)).header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString("{\"model\":\"" + model + "\",\"prompt\":"
                + tokens(5, 20) + ",\"max_tokens\":" + maxTokens + "}")).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  private io.epp4j.api.EndpointMetrics awaitMetrics(int port,
      java.util.function.Predicate<io.epp4j.api.EndpointMetrics> seen) throws Exception {
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (System.nanoTime() < deadline) {
      io.epp4j.api.EndpointMetrics m =
          io.epp4j.core.PrometheusMetrics.parse(get(port, "/metrics").body()).value();
      if (seen.test(m)) {
        return m;
      }
      Thread.sleep(10);
    }
    throw new AssertionError("no scrape of port " + port + " showed what was awaited");
  }

  @Test
  void loraAdaptersAndCacheSaltsReachThePreciseScorersKeys() throws Exception {
    Serve s = start(2, List.of("sql"));
    List<Endpoint> eps = new ArrayList<>();
    for (int i = 0; i < 2; i++) {
      eps.add(Endpoint.of("127.0.0.1", port(s, i), Map.of(
          KvEventSubscriber.PORT_LABEL, String.valueOf(kvPort(s, i)),
          KvEventSubscriber.REPLAY_PORT_LABEL, String.valueOf(kvPort(s, i) + 1))));
    }
    KvBlockIndex index = KvBlockIndex.create();
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            speculative: false
            kvEvents: {mode: per-endpoint, replayTimeoutMs: 10000}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """;
    try (Router router = Router.builder().endpoints(eps).service(KvBlockIndex.class, index)
        .configYaml(yaml, "emulator-lora").build()) {
      for (int i = 0; i < 2; i++) {
        int replica = i;
        int[] n = {0};
        await(() -> {
          try {
            post(port(s, replica), "/v1/completions",
                "{\"prompt\":" + tokens(90_000 + 100 * n[0]++, 40) + ",\"max_tokens\":1}");
          } catch (Exception e) {
            throw new AssertionError(e);
          }
          return index.blockCount(eps.get(replica).id()) > 0;
        }, "events of replica " + i);
      }
      // the same 160 tokens: on adapter "sql" at replica 0, with a salt at replica 1
      assertThat(post(port(s, 0), "/v1/completions", "{\"model\":\"sql\",\"prompt\":"
          + tokens(40_000, 160) + ",\"max_tokens\":1}").statusCode()).isEqualTo(200);
      assertThat(post(port(s, 1), "/v1/completions", "{\"cache_salt\":\"tenant-7\",\"prompt\":"
          + tokens(40_000, 160) + ",\"max_tokens\":1}").statusCode()).isEqualTo(200);
      assertThat(post(port(s, 1), "/v1/completions", "{\"model\":\"nope\",\"prompt\":"
          + tokens(40_000, 16) + ",\"max_tokens\":1}").statusCode()).isEqualTo(404);
      int[] prompt = new int[160];
      for (int t = 0; t < prompt.length; t++) {
        prompt[t] = 40_000 + t;
      }
      String[][] variants = {{"sql", null}, {null, "tenant-7"}};
      for (int i = 0; i < 2; i++) {
        InferenceRequest req = InferenceRequest.builder().model("qwen3-1.7b").tokenIds(prompt)
            .loraAdapter(variants[i][0]).cacheSalt(variants[i][1]).build();
        Endpoint expected = eps.get(i);
        await(() -> router.route(req).primary().id().equals(expected.id()),
            "variant " + i + " routed to the replica holding its blocks");
      }
      for (int i = 0; i < 2; i++) {
        int replica = i;
        await(() -> s.cluster().idle(replica), "replica idle");
        long[] own = BlockKeys.chain(BlockKeys.seed("", variants[i][0], variants[i][1]), prompt,
            16, 10);
        // the replica's events reach the index after it is idle, later on a busy machine
        await(() -> index.prefixWeight(eps.get(replica).id(), own, 0) == 10.0,
            "replica " + i + "'s events for its variant applied");
        // neither replica holds the plain prompt: the adapter and the salt keyed it apart
        long[] plain = BlockKeys.chain(BlockKeys.seed("", null, null), prompt, 16, 10);
        assertThat(index.prefixWeight(eps.get(i).id(), plain, 0)).isZero();
      }
      assertThat(index.metrics().decodeErrors()).isZero();
    }
  }

  @Test
  void theReplaySocketAnswersFromTheRequestedSequence() throws Exception {
    Serve s = start(1);
    int p = port(s, 0);
    post(p, "/v1/completions", "{\"prompt\":" + tokens(7, 64) + ",\"max_tokens\":1}");
    post(p, "/v1/completions", "{\"prompt\":" + tokens(70_000, 64) + ",\"max_tokens\":1}");
    try (org.zeromq.ZContext ctx = new org.zeromq.ZContext(1)) {
      // ask until both steps' batches are buffered; a fresh socket per attempt, so an answer
      // that comes late never mixes with the next one
      List<Long> seqs = new ArrayList<>();
      long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
      while (seqs.size() < 2) {
        assertThat(System.nanoTime()).as("replayed batches in time").isLessThan(deadline);
        seqs.clear();
        org.zeromq.ZMQ.Socket dealer = ctx.createSocket(org.zeromq.SocketType.DEALER);
        dealer.setLinger(0);
        dealer.setReceiveTimeOut(2_000);
        dealer.connect("tcp://127.0.0.1:" + (kvPort(s, 0) + 1));
        dealer.sendMore(new byte[0]);
        dealer.send(java.nio.ByteBuffer.allocate(8).putLong(0).array());
        while (true) {
          byte[] empty = dealer.recv();
          if (empty == null) {
            seqs.clear(); // no complete answer in time: ask again
            break;
          }
          assertThat(empty).isEmpty();
          long seq = java.nio.ByteBuffer.wrap(dealer.recv()).getLong();
          byte[] payload = dealer.recv();
          if (seq == -1) {
            assertThat(payload).isEmpty();
            break;
          }
          seqs.add(seq);
          assertThat(io.epp4j.kvevents.KvEventDecoder.decode(payload).events()).isNotEmpty();
        }
        dealer.close();
      }
      assertThat(seqs.subList(0, 2)).containsExactly(0L, 1L);
    }
  }

  @Test
  void aTakenPortIsRefusedWithAClearMessage() throws Exception {
    try (ServerSocket taken = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      int p = taken.getLocalPort();
      ByteArrayOutputStream err = new ByteArrayOutputStream();
      int code = Main.run(new String[] {"serve", "--replicas", "1", "--port", String.valueOf(p),
          "--kv-events-port", String.valueOf(kvFreeBase())},
          new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
          new PrintStream(err, true, StandardCharsets.UTF_8));
      assertThat(code).isEqualTo(1);
      assertThat(err.toString(StandardCharsets.UTF_8))
          .contains("HTTP port " + p + " on 127.0.0.1 is already in use")
          .contains("give --port another base");

      ByteArrayOutputStream err2 = new ByteArrayOutputStream();
      int code2 = Main.run(new String[] {"serve", "--replicas", "1", "--port",
          String.valueOf(kvFreeBase()), "--kv-events-port", String.valueOf(p)},
          new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
          new PrintStream(err2, true, StandardCharsets.UTF_8));
      assertThat(code2).isEqualTo(1);
      assertThat(err2.toString(StandardCharsets.UTF_8))
          .contains("KV events port " + p + " on 127.0.0.1 cannot be bound (already in use)")
          .contains("give --kv-events-port another base")
          .doesNotContain("Errno");
    }
  }

  @Test
  void serveOptionsAreChecked() {
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    int code = Main.run(new String[] {"serve", "--port", "8000"},
        new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
    assertThat(code).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8)).contains("--replicas is required");
    assertThat(Serve.parse(new String[] {"--replicas", "2", "--port", "9000", "--speed", "20",
        "--kv-events-encoding", "map"})).isEqualTo(new Serve.Options(2, 9000, 25557, true, 20,
        HardwareProfile.qwen3H100Mps6(), 1));
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "9000",
        "--lora-adapters", "sql, chat"}).loraAdapters()).containsExactly("sql", "chat");
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "9000",
        "--lora-adapters", "sql"}).maxLoras()).isEqualTo(1);
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "9000",
        "--lora-adapters", "sql,chat", "--max-loras", "2"}).maxLoras()).isEqualTo(2);
    assertThatThrownBy(() -> Serve.parse(new String[] {
        "--replicas", "1", "--port", "9000", "--lora-adapters", "sql", "--max-loras", "0"}))
        .hasMessageContaining("--max-loras");
    assertThatThrownBy(() -> Serve.parse(new String[] {
        "--replicas", "1", "--port", "9000", "--max-loras", "2"}))
        .hasMessageContaining("--max-loras needs --lora-adapters");
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> Serve.parse(new String[] {
        "--replicas", "1", "--port", "9000", "--lora-adapters", "sql,,chat"}))
        .hasMessageContaining("--lora-adapters");
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "9000"})
        .keepAliveSeconds()).isEqualTo(5);
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "9000",
        "--keep-alive-timeout", "0.5"}).keepAliveSeconds()).isEqualTo(0.5);
    // 1e-10 s rounded to 0 ns, which the server takes as "never close": the opposite of asked
    for (String bad : new String[] {"-1", "abc", "NaN", "100000", "1e-10", "0.0009"}) {
      org.assertj.core.api.Assertions.assertThatThrownBy(() -> Serve.parse(new String[] {
          "--replicas", "1", "--port", "9000", "--keep-alive-timeout", bad}))
          .as(bad).hasMessageContaining("--keep-alive-timeout");
    }
  }

  /**
   * A port that is free now together with the one after it (a replica's KV events and replay
   * sockets), for the side of a test whose binding is not what it checks. Picked below the
   * kernel's ephemeral range, where no client socket of this or another test can hold the
   * second port by chance.
   */
  private static int kvFreeBase() throws Exception {
    for (int attempt = 0; attempt < 50; attempt++) {
      int base = ThreadLocalRandom.current().nextInt(20_000, 30_000);
      try (ServerSocket a = new ServerSocket(base, 1, InetAddress.getLoopbackAddress());
          ServerSocket b = new ServerSocket(base + 1, 1, InetAddress.getLoopbackAddress())) {
        return base;
      } catch (java.io.IOException taken) {
        // try another pair
      }
    }
    throw new AssertionError("no free pair of ports found");
  }
}
