package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.kvevents.HuggingFaceTokenizer;
import io.epp4j.kvevents.KvBlockIndex;
import io.epp4j.kvevents.KvEventSubscriber;
import io.epp4j.kvevents.Tokenizer;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve --tokenizer}: text prompts and chats through a Hugging Face {@code tokenizer.json}
 * written here (a word-level vocabulary, so the expected IDs are plain to see), over loopback at
 * 20x speed. Nothing is downloaded: DJL's native library comes from its jar.
 */
@Timeout(60)
class ServeTokenizerTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CHATML =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
      + "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  /** Words w0 .. w(WORDS-1) have IDs FIRST_WORD_ID + i. */
  private static final int WORDS = 600;
  private static final int FIRST_WORD_ID = 20;

  private final HttpClient http = HttpClient.newBuilder()
      .connectTimeout(Duration.ofSeconds(5)).build();
  private final List<AutoCloseable> open = new ArrayList<>();

  @BeforeAll
  static void offline(@TempDir Path cache) {
    // any download attempt would go to a dead proxy; the native library must come from the jar
    System.setProperty("DJL_CACHE_DIR", cache.toString());
    System.setProperty("ai.djl.offline", "true");
    System.setProperty("http.proxyHost", "127.0.0.1");
    System.setProperty("http.proxyPort", "9");
    System.setProperty("https.proxyHost", "127.0.0.1");
    System.setProperty("https.proxyPort", "9");
  }

  @AfterAll
  static void restore() {
    for (String p : List.of("DJL_CACHE_DIR", "ai.djl.offline", "http.proxyHost",
        "http.proxyPort", "https.proxyHost", "https.proxyPort")) {
      System.clearProperty(p);
    }
  }

  @AfterEach
  void closeAll() throws Exception {
    for (int i = open.size() - 1; i >= 0; i--) {
      open.get(i).close();
    }
  }

  /**
   * A WordLevel tokenizer: ChatML markers 0 and 1, unknown 2, role names 3..5, punctuation 6..7,
   * {@code hello} 8, {@code world} 9, then the words {@code w0 ..}. Whitespace pre-tokenization
   * splits punctuation off words, so its counts differ from the stand-in's one token per word.
   */
  static Path writeTokenizer(Path dir, @org.jspecify.annotations.Nullable String chatTemplate)
      throws Exception {
    ObjectNode root = JSON.createObjectNode();
    root.put("version", "1.0");
    root.putNull("truncation");
    root.putNull("padding");
    ArrayNode added = root.putArray("added_tokens");
    String[] markers = {"<|im_start|>", "<|im_end|>"};
    for (int i = 0; i < markers.length; i++) {
      added.addObject().put("id", i).put("content", markers[i]).put("single_word", false)
          .put("lstrip", false).put("rstrip", false).put("normalized", false)
          .put("special", true);
    }
    root.putNull("normalizer");
    root.putObject("pre_tokenizer").put("type", "Whitespace");
    root.putNull("post_processor");
    root.putNull("decoder");
    ObjectNode model = root.putObject("model");
    model.put("type", "WordLevel");
    model.put("unk_token", "[UNK]");
    ObjectNode vocab = model.putObject("vocab");
    String[] fixed = {"<|im_start|>", "<|im_end|>", "[UNK]", "system", "user", "assistant", ",",
        "!", "hello", "world"};
    for (int i = 0; i < fixed.length; i++) {
      vocab.put(fixed[i], i);
    }
    for (int i = fixed.length; i < FIRST_WORD_ID; i++) {
      vocab.put("spare" + i, i);
    }
    for (int i = 0; i < WORDS; i++) {
      vocab.put("w" + i, FIRST_WORD_ID + i);
    }
    Files.writeString(dir.resolve("tokenizer.json"), JSON.writeValueAsString(root));
    if (chatTemplate != null) {
      Files.writeString(dir.resolve("tokenizer_config.json"),
          JSON.writeValueAsString(JSON.createObjectNode().put("chat_template", chatTemplate)));
    }
    return dir;
  }

  private Serve start(int replicas, Path tokenizer) {
    return start(replicas, tokenizer, null);
  }

  private Serve start(int replicas, Path tokenizer,
      io.epp4j.kvevents.@org.jspecify.annotations.Nullable DefaultChatTemplateKwargs defaults) {
    return start(replicas, tokenizer, defaults, false);
  }

  private Serve start(int replicas, Path tokenizer,
      io.epp4j.kvevents.@org.jspecify.annotations.Nullable DefaultChatTemplateKwargs defaults,
      boolean excludeToolsWhenToolChoiceNone) {
    IllegalStateException last = null;
    for (int attempt = 0; attempt < 20; attempt++) {
      int base = ThreadLocalRandom.current().nextInt(20_000, 30_000);
      Serve.Options o = new Serve.Options(replicas, base, base + 1_000, false, 20,
          HardwareProfile.qwen3H100Mps6(), 1, List.of(), tokenizer,
          Serve.DEFAULT_KEEP_ALIVE_SECONDS, Serve.DEFAULT_MAX_LORAS,
          KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES, BodyBudget.DEFAULT_BYTES, defaults,
          excludeToolsWhenToolChoiceNone, true); // usage names the cached tokens, read here
      try {
        Serve s = new Serve(o);
        open.add(s);
        return s;
      } catch (IllegalStateException e) {
        if (e.getMessage().contains("--tokenizer")) {
          throw e;
        }
        last = e;
      }
    }
    throw new AssertionError("no free ports found", last);
  }

  private static int port(Serve s, int replica) {
    return s.options().port() + replica;
  }

  private HttpResponse<String> post(int port, String path, String body) throws Exception {
    return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
        .timeout(Duration.ofSeconds(20))
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  private static void await(BooleanSupplier condition, String what) throws InterruptedException {
    long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out waiting for " + what);
      }
      Thread.sleep(10);
    }
  }

  private static List<Integer> ints(JsonNode array) {
    List<Integer> out = new ArrayList<>();
    array.forEach(n -> out.add(n.asInt()));
    return out;
  }

  /** {@code n} vocabulary words starting at word {@code from}, space-separated. */
  private static String words(int from, int n) {
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < n; i++) {
      b.append(i == 0 ? "" : " ").append('w').append(from + i);
    }
    return b.toString();
  }

  @Test
  void textAndChatsAreTokenizedByTheGivenTokenizer(@TempDir Path dir) throws Exception {
    // the file itself is accepted as well as its directory; the config next to it is read
    Serve s = start(1, writeTokenizer(dir, CHATML).resolve("tokenizer.json"));
    int p = port(s, 0);

    JsonNode text = JSON.readTree(post(p, "/tokenize",
        "{\"prompt\":\"hello, world! nope\"}").body());
    // the stand-in would give 3 hashed IDs, one per word
    assertThat(ints(text.get("tokens"))).containsExactly(8, 6, 9, 7, 2);
    assertThat(text.get("count").asInt()).isEqualTo(5);

    JsonNode chat = JSON.readTree(post(p, "/tokenize", "{\"messages\":["
        + "{\"role\":\"system\",\"content\":\"hello\"},"
        + "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"world\"}]}]}").body());
    assertThat(ints(chat.get("tokens"))).containsExactly(0, 3, 8, 1, 0, 4, 9, 1, 0, 5);

    // prompt token counts in usage are the tokenizer's, and so is the cache's view of the prompt
    String prompt = words(0, 100);
    String body = "{\"prompt\":\"" + prompt + "\",\"max_tokens\":2}";
    JsonNode first = JSON.readTree(post(p, "/v1/completions", body).body());
    JsonNode second = JSON.readTree(post(p, "/v1/completions", body).body());
    assertThat(first.at("/usage/prompt_tokens").asInt()).isEqualTo(100);
    assertThat(first.at("/usage/prompt_tokens_details/cached_tokens").asInt()).isZero();
    // every full block but the one holding the last prompt token: (100 - 1) / 16 * 16
    assertThat(second.at("/usage/prompt_tokens_details/cached_tokens").asInt()).isEqualTo(96);

    HttpResponse<String> chatCompletion = post(p, "/v1/chat/completions", "{\"messages\":["
        + "{\"role\":\"user\",\"content\":\"hello world\"}],\"max_tokens\":1}");
    assertThat(chatCompletion.statusCode()).isEqualTo(200);
    // <|im_start|> user hello world <|im_end|> <|im_start|> assistant
    assertThat(JSON.readTree(chatCompletion.body()).at("/usage/prompt_tokens").asInt())
        .isEqualTo(7);
  }

  @Test
  void detokenizeGivesBackTheTextTokenizeCounted(@TempDir Path dir) throws Exception {
    Serve s = start(1, writeTokenizer(dir, CHATML));
    int p = port(s, 0);
    JsonNode tokens = JSON.readTree(post(p, "/tokenize", "{\"prompt\":\"hello w5 world\"}")
        .body()).get("tokens");
    HttpResponse<String> res = post(p, "/detokenize", "{\"tokens\":" + tokens + "}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    JsonNode answer = JSON.readTree(res.body());
    // vLLM's DetokenizeResponse: the text, under "prompt", and nothing else
    assertThat(answer.get("prompt").asText()).isEqualTo("hello w5 world");
    assertThat(answer.size()).isEqualTo(1);
    // special tokens are decoded too, as the Hugging Face tokenizer's decode does by default
    assertThat(JSON.readTree(post(p, "/detokenize", "{\"tokens\":[0,8]}").body())
        .get("prompt").asText()).contains("<|im_start|>").contains("hello");
    assertThat(JSON.readTree(post(p, "/detokenize", "{\"tokens\":[]}").body())
        .get("prompt").asText()).isEmpty();
  }

  @Test
  void anEchoedPromptOfTokenIdsIsDecodedByTheGivenTokenizer(@TempDir Path dir) throws Exception {
    Serve s = start(1, writeTokenizer(dir, CHATML));
    int p = port(s, 0);
    HttpResponse<String> res = post(p, "/v1/completions",
        "{\"prompt\":[8,9],\"max_tokens\":1,\"echo\":true}");
    assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
    // the word-level vocabulary decodes its words joined by spaces
    assertThat(JSON.readTree(res.body()).at("/choices/0/text").asText())
        .startsWith("hello world").endsWith(" lorem");
  }

  @Test
  void defaultChatTemplateKwargsRenderUnderTheRequestsOwnAsVllmsFlag(@TempDir Path dir)
      throws Exception {
    // ChatML whose generation prompt says "hello" when thinking is turned off
    String template = CHATML.replace("<|im_start|>assistant\n{% endif %}",
        "<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}"
            + "hello{% endif %}{% endif %}");
    String[] args = {"--replicas", "1", "--port", "20000", "--tokenizer",
        writeTokenizer(dir, template).toString(),
        "--default-chat-template-kwargs", "{\"enable_thinking\": false}"};
    Serve.Options parsed = Serve.parse(args);
    assertThat(parsed.defaultChatTemplateKwargs())
        .isEqualTo(io.epp4j.kvevents.DefaultChatTemplateKwargs.parse("{\"enable_thinking\":false}"));
    Serve s = start(1, parsed.tokenizer(), parsed.defaultChatTemplateKwargs());
    int p = port(s, 0);
    String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"world\"}]";
    // the server's default, then the request's own value, then a null one that leaves the default
    assertThat(ints(JSON.readTree(post(p, "/tokenize", chat + "}").body()).get("tokens")))
        .containsExactly(0, 4, 9, 1, 0, 5, 8);
    assertThat(ints(JSON.readTree(post(p, "/tokenize",
        chat + ",\"chat_template_kwargs\":{\"enable_thinking\":true}}").body()).get("tokens")))
        .containsExactly(0, 4, 9, 1, 0, 5);
    assertThat(ints(JSON.readTree(post(p, "/tokenize",
        chat + ",\"chat_template_kwargs\":{\"enable_thinking\":null}}").body()).get("tokens")))
        .containsExactly(0, 4, 9, 1, 0, 5, 8);
    HttpResponse<String> completion = post(p, "/v1/chat/completions",
        chat + ",\"max_tokens\":1}");
    assertThat(JSON.readTree(completion.body()).at("/usage/prompt_tokens").asInt()).isEqualTo(7);
    // not an object, or without a template to read it: refused naming the option
    String[] notObject = args.clone();
    notObject[7] = "[1]";
    assertThatThrownBy(() -> Serve.parse(notObject)).isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("--default-chat-template-kwargs must be a JSON object");
    assertThatThrownBy(() -> Serve.parse(new String[] {"--replicas", "1", "--port", "20000",
        "--default-chat-template-kwargs", "{}"})).isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("--default-chat-template-kwargs needs --tokenizer");
  }

  @Test
  void aChatsToolsAreRenderedByTheTemplateAsVllmRendersThem(@TempDir Path dir) throws Exception {
    // ChatML that lists the tools' names first, as tool-calling templates put their schemas in
    // front of the conversation
    String template = "{% if tools %}{% for t in tools %}{{ t.function.name }} {% endfor %}"
        + "{% endif %}" + CHATML;
    Serve s = start(1, writeTokenizer(dir, template));
    int p = port(s, 0);
    String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"world\"}]";
    String tools = ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"hello\"}}]";
    assertThat(ints(JSON.readTree(post(p, "/tokenize", chat + "}").body()).get("tokens")))
        .containsExactly(0, 4, 9, 1, 0, 5);
    assertThat(ints(JSON.readTree(post(p, "/tokenize", chat + tools + "}").body()).get("tokens")))
        .containsExactly(8, 0, 4, 9, 1, 0, 5);
    HttpResponse<String> completion = post(p, "/v1/chat/completions",
        chat + tools + ",\"max_tokens\":1}");
    assertThat(JSON.readTree(completion.body()).at("/usage/prompt_tokens").asInt()).isEqualTo(7);
  }

  /**
   * vLLM adds the tokenizer's special tokens (here a post-processor's leading {@code <|im_start|>},
   * 0) to a completion's prompt and not to a chat's, unless the request's
   * {@code add_special_tokens} says otherwise; the router tokenizes by the same rule, so the
   * blocks the replica publishes are the ones it looks up.
   */
  @Test
  void addSpecialTokensIsFollowedAsVllmFollowsIt(@TempDir Path dir) throws Exception {
    Path tok = writeTokenizer(dir, CHATML);
    ObjectNode root = (ObjectNode) JSON.readTree(tok.resolve("tokenizer.json").toFile());
    ObjectNode post = root.putObject("post_processor").put("type", "TemplateProcessing");
    post.putArray("single").addObject().putObject("SpecialToken").put("id", "<|im_start|>")
        .put("type_id", 0);
    ((ArrayNode) post.get("single")).addObject().putObject("Sequence").put("id", "A")
        .put("type_id", 0);
    post.putArray("pair").addAll((ArrayNode) post.get("single"));
    ((ArrayNode) post.get("pair")).addObject().putObject("Sequence").put("id", "B")
        .put("type_id", 1);
    ObjectNode bos = post.putObject("special_tokens").putObject("<|im_start|>");
    bos.put("id", "<|im_start|>");
    bos.putArray("ids").add(0);
    bos.putArray("tokens").add("<|im_start|>");
    Files.writeString(tok.resolve("tokenizer.json"), JSON.writeValueAsString(root));
    int p = port(start(1, tok), 0);
    String text = "{\"prompt\":\"hello world\"";
    assertThat(ints(JSON.readTree(post(p, "/tokenize", text + "}").body()).get("tokens")))
        .containsExactly(0, 8, 9);
    assertThat(ints(JSON.readTree(post(p, "/tokenize", text + ",\"add_special_tokens\":false}")
        .body()).get("tokens"))).containsExactly(8, 9);
    String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"world\"}]";
    assertThat(ints(JSON.readTree(post(p, "/tokenize", chat + "}").body()).get("tokens")))
        .containsExactly(0, 4, 9, 1, 0, 5);
    assertThat(ints(JSON.readTree(post(p, "/tokenize", chat + ",\"add_special_tokens\":true}")
        .body()).get("tokens"))).containsExactly(0, 0, 4, 9, 1, 0, 5);
    // a completion's prompt tokens, and so the blocks the replica caches, follow the flag too
    JsonNode served = JSON.readTree(post(p, "/v1/completions",
        text + ",\"add_special_tokens\":false,\"max_tokens\":1}").body());
    assertThat(served.at("/usage/prompt_tokens").asInt()).isEqualTo(2);
    // a list holding the empty text passes vLLM's request model ("" alone does not) and is
    // tokenized like any text: its one prompt token is the special token
    HttpResponse<String> empty = post(p, "/v1/completions", "{\"prompt\":[\"\"],\"max_tokens\":1}");
    assertThat(empty.statusCode()).as(empty.body()).isEqualTo(200);
    assertThat(JSON.readTree(empty.body()).at("/usage/prompt_tokens").asInt()).isEqualTo(1);
    // through --default-chat-template-kwargs too
    int withDefaults = port(start(1, tok, io.epp4j.kvevents.DefaultChatTemplateKwargs
        .parse("{\"unused\":1}")), 0);
    assertThat(ints(JSON.readTree(post(withDefaults, "/tokenize",
        chat + ",\"add_special_tokens\":true}").body()).get("tokens")))
        .containsExactly(0, 0, 4, 9, 1, 0, 5);
    HttpResponse<String> bad = post(p, "/v1/completions", text + ",\"add_special_tokens\":\"x\"}");
    assertThat(bad.statusCode()).isEqualTo(400);
    assertThat(bad.body()).contains("add_special_tokens");
  }

  @Test
  void defaultToolsRenderAChatWithoutToolsOfItsOwnAsVllmsFlag(@TempDir Path dir)
      throws Exception {
    // vLLM merges a request's tools over --default-chat-template-kwargs: the default tools
    // render a chat that has none, and give way to a chat's own
    String template = "{% if tools %}{% for t in tools %}{{ t.function.name }} {% endfor %}"
        + "{% endif %}" + CHATML;
    Serve s = start(1, writeTokenizer(dir, template), io.epp4j.kvevents.DefaultChatTemplateKwargs
        .parse("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"system\"}}]}"));
    int p = port(s, 0);
    String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"world\"}]";
    String tools = ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"hello\"}}]";
    assertThat(ints(JSON.readTree(post(p, "/tokenize", chat + "}").body()).get("tokens")))
        .containsExactly(3, 0, 4, 9, 1, 0, 5);
    assertThat(ints(JSON.readTree(post(p, "/tokenize", chat + tools + "}").body()).get("tokens")))
        .containsExactly(8, 0, 4, 9, 1, 0, 5);
  }

  /**
   * vLLM's {@code --exclude-tools-when-tool-choice-none}: a chat completion whose
   * {@code tool_choice} is {@code "none"} is rendered without its tools (a default tools then
   * applies, as for a chat without any); another tool_choice keeps them, as does {@code /tokenize},
   * which renders the tools it is given whatever the flag says. Without the flag, tool_choice
   * "none" keeps them too.
   */
  @Test
  void toolChoiceNoneLeavesTheToolsOutWithVllmsFlag(@TempDir Path dir) throws Exception {
    String template = "{% if tools %}{% for t in tools %}{{ t.function.name }} {% endfor %}"
        + "{% endif %}" + CHATML;
    Path tok = writeTokenizer(dir, template);
    String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"world\"}],\"max_tokens\":1"
        + ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"hello\"}}]";
    int flagged = port(start(1, tok, null, true), 0);
    int plain = port(start(1, tok, null, false), 0);
    java.util.function.BiFunction<Integer, String, Integer> promptTokens = (p, body) -> {
      try {
        HttpResponse<String> res = post(p, "/v1/chat/completions", body);
        assertThat(res.statusCode()).as(res.body()).isEqualTo(200);
        return JSON.readTree(res.body()).at("/usage/prompt_tokens").asInt();
      } catch (Exception e) {
        throw new AssertionError(e);
      }
    };
    // ChatML alone is 6 tokens; the tool's name adds 1
    assertThat(promptTokens.apply(flagged, chat + ",\"tool_choice\":\"none\"}")).isEqualTo(6);
    assertThat(promptTokens.apply(flagged, chat + ",\"tool_choice\":\"auto\"}")).isEqualTo(7);
    assertThat(promptTokens.apply(flagged, chat + "}")).isEqualTo(7);
    assertThat(promptTokens.apply(plain, chat + ",\"tool_choice\":\"none\"}")).isEqualTo(7);
    assertThat(ints(JSON.readTree(post(flagged, "/tokenize",
        chat + ",\"tool_choice\":\"none\"}").body()).get("tokens"))).hasSize(7);

    // the flag takes no value, and needs a template to leave the tools out of
    assertThat(Serve.parse(new String[] {"--replicas", "1", "--port", "20000", "--tokenizer",
        tok.toString(), Serve.EXCLUDE_TOOLS}).excludeToolsWhenToolChoiceNone()).isTrue();
    assertThatThrownBy(() -> Serve.parse(new String[] {"--replicas", "1", "--port", "20000",
        Serve.EXCLUDE_TOOLS})).isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining(Serve.EXCLUDE_TOOLS + " needs --tokenizer");
    assertThatThrownBy(() -> Serve.parse(new String[] {"--replicas", "1", "--port", "20000",
        "--tokenizer", tok.toString(), Serve.EXCLUDE_TOOLS + "=true"}))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("takes no value");
  }

  /**
   * The real Qwen3 tokenizer of {@code routing-kv-events/scripts/fetch-tokenizers.sh}; the test
   * is skipped without it, and fails in CI, which fetches it.
   */
  private static Path qwen3() {
    String root = System.getenv("EPP4J_TOKENIZERS");
    Path dir = (root != null && !root.isEmpty() ? Path.of(root)
        : Path.of(System.getProperty("user.home"), ".cache", "epp4j-tokenizers")).resolve("qwen3");
    boolean present = Files.isRegularFile(dir.resolve("tokenizer.json"))
        && Files.isRegularFile(dir.resolve("tokenizer_config.json"));
    String ci = System.getenv("CI");
    if (!present && ci != null && !ci.isEmpty() && !ci.equals("false")) {
      throw new AssertionError("CI is set but Qwen3's tokenizer files are not in " + dir);
    }
    org.junit.jupiter.api.Assumptions.assumeTrue(present, "no tokenizer files in " + dir);
    return dir;
  }

  @Test
  void aToolCallingChatRendersAsTheRouterRendersIt() throws Exception {
    Path qwen3 = qwen3();
    // an assistant's reasoning and tool calls and the tool results' id and name, which Qwen3's
    // template renders itself (<think>, <tool_call> and <tool_response> blocks)
    String body = """
        {"tools":[{"type":"function","function":{"name":"get_weather",
          "description":"Current weather","parameters":{"type":"object",
          "properties":{"city":{"type":"string"}},"required":["city"]}}}],
         "messages":[
          {"role":"user","content":"Weather in Paris and Tokyo?"},
          {"role":"assistant","content":null,"reasoning":"Two cities: call twice.",
           "tool_calls":[
            {"id":"c1","type":"function","function":{"name":"get_weather",
             "arguments":"{\\"city\\":\\"Paris\\"}"}},
            {"id":"c2","type":"function","function":{"name":"get_weather",
             "arguments":"{\\"city\\": \\"Tokyo\\"}"}}]},
          {"role":"tool","tool_call_id":"c1","name":"get_weather","content":"20C"},
          {"role":"tool","content":"25C","tool_call_id":"c2","name":"get_weather"}]}
        """;
    InferenceRequest r = io.epp4j.core.OpenAiRequestParser.defaults().parse(
        "/v1/chat/completions", Map.of(),
        ("{\"model\":\"m\"," + body.strip().substring(1)).getBytes(StandardCharsets.UTF_8))
        .value();
    int[] routed;
    int[] withoutFields;
    try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(qwen3)) {
      routed = t.encodeChat(r.messages(), r.toolsJson(), r.chatTemplateArgs());
      withoutFields = t.encodeChat(r.messages().stream()
          .map(m -> new io.epp4j.api.ChatMessage(m.role(), m.content())).toList(),
          r.toolsJson(), r.chatTemplateArgs());
    }
    // the fields change the prompt, so that a rendering without them cannot pass
    assertThat(routed).isNotEqualTo(withoutFields);
    Serve s = start(1, qwen3);
    List<Integer> served = ints(JSON.readTree(post(port(s, 0), "/tokenize", body).body())
        .get("tokens"));
    assertThat(served).containsExactlyElementsOf(
        java.util.Arrays.stream(routed).boxed().toList());
    HttpResponse<String> completion = post(port(s, 0), "/v1/chat/completions",
        body.substring(0, body.lastIndexOf('}')) + ",\"max_tokens\":1}");
    assertThat(completion.statusCode()).as(completion.body()).isEqualTo(200);
    assertThat(JSON.readTree(completion.body()).at("/usage/prompt_tokens").asInt())
        .isEqualTo(routed.length);
  }

  @Test
  void aChatsTemplateFieldsAreRenderedAsVllmRendersThem(@TempDir Path dir) throws Exception {
    // ChatML whose generation prompt says "hello" when thinking is turned off, as Qwen3's
    // template adds an empty think block
    String template = CHATML.replace("<|im_start|>assistant\n{% endif %}",
        "<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}"
            + "hello{% endif %}{% endif %}");
    Serve s = start(1, writeTokenizer(dir, template));
    int p = port(s, 0);
    String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"world\"}]";
    assertThat(ints(JSON.readTree(post(p, "/tokenize", chat + "}").body()).get("tokens")))
        .containsExactly(0, 4, 9, 1, 0, 5);
    assertThat(ints(JSON.readTree(post(p, "/tokenize",
        chat + ",\"chat_template_kwargs\":{\"enable_thinking\":false}}").body()).get("tokens")))
        .containsExactly(0, 4, 9, 1, 0, 5, 8);
    assertThat(ints(JSON.readTree(post(p, "/tokenize",
        chat + ",\"add_generation_prompt\":false}").body()).get("tokens")))
        .containsExactly(0, 4, 9, 1);
    // the chat completion's prompt is the same rendering
    HttpResponse<String> completion = post(p, "/v1/chat/completions",
        chat + ",\"chat_template_kwargs\":{\"enable_thinking\":false},\"max_tokens\":1}");
    assertThat(JSON.readTree(completion.body()).at("/usage/prompt_tokens").asInt()).isEqualTo(7);
    String[][] bad = {
        {",\"add_generation_prompt\":true,\"continue_final_message\":true",
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."},
        {",\"add_generation_prompt\":\"maybe\"", "field 'add_generation_prompt'"},
        {",\"chat_template_kwargs\":[1]", "field 'chat_template_kwargs' must be an object"},
    };
    for (String[] b : bad) {
      for (String path : List.of("/tokenize", "/v1/chat/completions")) {
        HttpResponse<String> r = post(p, path, chat + b[0] + "}");
        assertThat(r.statusCode()).as(path + b[0]).isEqualTo(400);
        assertThat(JSON.readTree(r.body()).at("/error/message").asText()).as(path + b[0])
            .contains(b[1]);
      }
    }
  }

  @Test
  void aRouterWithTheSameTokenizerFindsTextPromptsInTheReplicasKvEvents(@TempDir Path dir)
      throws Exception {
    Path model = writeTokenizer(dir, CHATML);
    Serve s = start(2, model);
    List<Endpoint> eps = new ArrayList<>();
    for (int i = 0; i < 2; i++) {
      int kv = s.options().kvEventsPort() + 2 * i;
      eps.add(Endpoint.of("127.0.0.1", port(s, i), Map.of(
          KvEventSubscriber.PORT_LABEL, String.valueOf(kv),
          KvEventSubscriber.REPLAY_PORT_LABEL, String.valueOf(kv + 1))));
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
    try (Tokenizer gatewayTokenizer = HuggingFaceTokenizer.load(model);
        Router router = Router.builder().endpoints(eps).service(KvBlockIndex.class, index)
            .service(Tokenizer.class, gatewayTokenizer).configYaml(yaml, "emulator").build()) {
      // events published before the subscription was made are lost to it: warm up each replica
      for (int i = 0; i < 2; i++) {
        int replica = i;
        int[] n = {0};
        await(() -> {
          try {
            // a new first word each time, so each warm-up prompt stores new blocks
            post(port(s, replica), "/v1/completions", "{\"prompt\":\"w" + (n[0]++ % WORDS)
                + " " + words(400 + 50 * replica, 39) + "\",\"max_tokens\":1}");
          } catch (Exception e) {
            throw new AssertionError(e);
          }
          return index.blockCount(eps.get(replica).id()) > 0;
        }, "events of replica " + i);
      }
      // text prompts, each served by one replica; the router sees only their text
      for (int k = 0; k < 4; k++) {
        post(port(s, k % 2), "/v1/completions",
            "{\"prompt\":\"" + words(100 * k, 96) + "\",\"max_tokens\":1}");
      }
      for (int k = 0; k < 4; k++) {
        String prompt = words(100 * k, 96);
        Endpoint expected = eps.get(k % 2);
        await(() -> {
          RoutingDecision d = router.route(InferenceRequest.builder().model("qwen3-1.7b")
              .prompt(prompt).build());
          return d.isRouted() && d.primary().id().equals(expected.id());
        }, "text prompt " + k + " routed to the replica holding it");
      }
      assertThat(index.metrics().decodeErrors()).isZero();
    }
  }

  @Test
  void aTemplateThatRendersNoChatStopsTheStartNamingTheOption(@TempDir Path dir) throws Exception {
    Path tokenizer = writeTokenizer(dir, "{{ raise_exception('this template renders no chat') }}");
    assertThatThrownBy(() -> new Serve(new Serve.Options(1, 0, 0, false, 20,
        HardwareProfile.qwen3H100Mps6(), 1, tokenizer)))
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("--tokenizer").hasMessageContaining("chat template");
  }

  @Test
  void aChatTheTemplateRefusesIsTheRequestsError(@TempDir Path dir)
      throws Exception {
    // the template refuses system messages (as some models' do): those chats fail, the others
    // and completions still work
    Serve s = start(1, writeTokenizer(dir, "{% for m in messages %}{% if m.role == 'system' %}"
        + "{{ raise_exception('System role not supported') }}{% endif %}"
        + "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"));
    int p = port(s, 0);
    assertThat(post(p, "/tokenize",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hello world\"}]}").statusCode())
        .isEqualTo(200);
    for (String path : List.of("/v1/chat/completions", "/tokenize")) {
      HttpResponse<String> r = post(p, path, "{\"messages\":[{\"role\":\"system\","
          + "\"content\":\"hello world\"}],\"max_tokens\":1}");
      assertThat(r.statusCode()).as(path).isEqualTo(400);
      JsonNode error = JSON.readTree(r.body()).get("error");
      assertThat(error.get("type").asText()).isEqualTo("BadRequestError");
      assertThat(error.get("code").asInt()).isEqualTo(400);
      assertThat(error.get("message").asText()).contains("chat template", "--tokenizer")
          .doesNotContain("hello world");
    }
    HttpResponse<String> text = post(p, "/v1/completions",
        "{\"prompt\":\"hello world\",\"max_tokens\":1}");
    assertThat(text.statusCode()).isEqualTo(200);
    assertThat(JSON.readTree(text.body()).at("/usage/prompt_tokens").asInt()).isEqualTo(2);
  }

  @Test
  void aTokenizerPathThatCannotBeLoadedStopsTheStartNamingTheOption(@TempDir Path dir)
      throws Exception {
    Path missing = dir.resolve("no-such-model");
    Path empty = Files.createDirectory(dir.resolve("empty"));
    Path wrongName = Files.writeString(dir.resolve("vocab.txt"), "hello\n");
    Path garbage = Files.createDirectory(dir.resolve("garbage"));
    Files.writeString(garbage.resolve("tokenizer.json"), "{\"model\": 42");
    // A taken HTTP port: the tokenizer is checked before any port is bound, so each error is
    // about --tokenizer; and were a bad path accepted, the run would still end instead of serving.
    try (ServerSocket taken = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      for (Path bad : List.of(missing, empty, wrongName, garbage)) {
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        int code = Main.run(new String[] {"serve", "--replicas", "1",
            "--port", String.valueOf(taken.getLocalPort()), "--tokenizer", bad.toString()},
            new PrintStream(out, true, StandardCharsets.UTF_8),
            new PrintStream(err, true, StandardCharsets.UTF_8));
        // a path that does not exist is a usage error; one that exists and cannot be loaded
        // fails the start
        assertThat(code).as(bad.toString()).isEqualTo(bad.equals(missing) ? 2 : 1);
        assertThat(err.toString(StandardCharsets.UTF_8)).as(bad.toString())
            .startsWith("error: --tokenizer " + bad + ": ");
        assertThat(out.size()).isZero();
      }
    }
  }
}
