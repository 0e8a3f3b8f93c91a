package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.assertj.core.api.AbstractThrowableAssert;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class TokenizerTest {
  static final ObjectMapper JSON = new ObjectMapper();

  /**
   * A toy BPE-like tokenizer: special tokens are split out first, the rest is cut into pairs of
   * characters, so tokenizing two halves of a text separately differs from tokenizing it whole
   * unless the cut falls on a special token.
   */
  static List<Integer> pairTokens(String text) {
    List<Integer> out = new ArrayList<>();
    int i = 0;
    StringBuilder run = new StringBuilder();
    while (i <= text.length()) {
      boolean end = i == text.length();
      int special = end ? 0 : text.startsWith("<|im_start|>", i) ? 1
          : text.startsWith("<|im_end|>", i) ? 2 : 0;
      if (end || special != 0) {
        for (int j = 0; j < run.length(); j += 2) {
          out.add(j + 1 < run.length() ? 1000 + run.charAt(j) * 70_000 + run.charAt(j + 1)
              : 1000 + run.charAt(j));
        }
        run.setLength(0);
        if (end) {
          break;
        }
        out.add(special);
        i += special == 1 ? "<|im_start|>".length() : "<|im_end|>".length();
      } else {
        run.append(text.charAt(i++));
      }
    }
    return out;
  }

  /** The BOS token the fake server adds to a prompt, as a Llama tokenizer does. */
  static final int BOS = 3;

  HttpServer server;
  final AtomicInteger calls = new AtomicInteger();
  final AtomicReference<JsonNode> lastBody = new AtomicReference<>();
  final AtomicReference<com.sun.net.httpserver.Headers> lastHeaders = new AtomicReference<>();
  volatile int status = 200;
  volatile String override;
  /** The chat template the fake server renders chats with. */
  volatile ChatTemplate serverTemplate = ChatTemplate.CHATML;

  @BeforeEach
  void start() throws Exception {
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/tokenize", ex -> {
      calls.incrementAndGet();
      lastHeaders.set(ex.getRequestHeaders());
      JsonNode body = JSON.readTree(ex.getRequestBody());
      lastBody.set(body);
      String text;
      if (body.has("messages")) {
        List<ChatMessage> msgs = new ArrayList<>();
        body.get("messages").forEach(m -> msgs.add(
            new ChatMessage(m.get("role").asText(), m.path("content").asText())));
        text = serverTemplate.render(msgs);
      } else {
        text = body.get("prompt").asText();
      }
      List<Integer> tokens = pairTokens(text);
      if (!body.has("messages") && body.path("add_special_tokens").asBoolean(true)) {
        tokens.add(0, BOS); // vLLM's default for a prompt: the tokenizer's special tokens added
      }
      byte[] answer = (override != null ? override
          : "{\"count\":1,\"max_model_len\":4096,\"tokens\":"
              + JSON.writeValueAsString(tokens) + "}")
          .getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(status, answer.length);
      try (OutputStream os = ex.getResponseBody()) {
        os.write(answer);
      }
    });
    server.start();
  }

  @AfterEach
  void stop() {
    server.stop(0);
  }

  @Test
  void aTokenizeCallIsPlainHttp11WithoutAnUpgradeToHttp2() {
    // an h2c upgrade request is refused by some engine servers; the call asks for none
    tokenizer().encode("hello there");
    assertThat(lastHeaders.get().containsKey("Upgrade")).as("%s", lastHeaders.get().keySet())
        .isFalse();
  }

  VllmTokenizer tokenizer() {
    return new VllmTokenizer("http://127.0.0.1:" + server.getAddress().getPort() + "/", "m",
        Duration.ofSeconds(5));
  }

  static int[] ints(List<Integer> l) {
    return l.stream().mapToInt(Integer::intValue).toArray();
  }

  @Test
  void vllmTokenizerPostsTheTextAndReadsTheTokens() {
    int[] t = tokenizer().encode("hello world");
    assertThat(t).containsExactly(ints(pairTokens("hello world")));
    assertThat(lastBody.get().get("model").asText()).isEqualTo("m");
    assertThat(lastBody.get().get("add_special_tokens").asBoolean()).isFalse();
    List<ChatMessage> chat = List.of(ChatMessage.system("be brief"), ChatMessage.user("hi"));
    assertThat(tokenizer().encodeChat(chat))
        .containsExactly(ints(pairTokens(ChatTemplate.CHATML.render(chat))));
    assertThat(lastBody.get().get("add_generation_prompt").asBoolean()).isTrue();
  }

  @Test
  void serverErrorsBecomeTokenizationExceptions() {
    status = 500;
    assertThatThrownBy(() -> tokenizer().encode("x"))
        .isInstanceOf(Tokenizer.TokenizationException.class).hasMessageContaining("500");
    status = 200;
    override = "{\"tokens\": \"nope\"}";
    assertThatThrownBy(() -> tokenizer().encode("x"))
        .isInstanceOf(Tokenizer.TokenizationException.class).hasMessageContaining("tokens");
    VllmTokenizer down = new VllmTokenizer("http://127.0.0.1:1", "m", Duration.ofSeconds(2));
    assertThatThrownBy(() -> down.encode("x")).isInstanceOf(Tokenizer.TokenizationException.class);
  }

  /**
   * A tokenizer whose server answers every call with {@code answer}, from a context of its own;
   * the answer is written in 64 KiB pieces, with its length declared or chunked, and
   * {@code written} counts what the server could
   * write before the tokenizer stopped reading ({@code done} opens when the answer ends).
   */
  VllmTokenizer answering(String name, byte[] head, long padding, byte[] tail,
      boolean declareLength, java.util.concurrent.atomic.AtomicLong written,
      java.util.concurrent.CountDownLatch done) {
    server.createContext("/" + name + "/tokenize", ex -> {
      ex.getRequestBody().readAllBytes();
      // chunked (0) has no length to refuse up front
      ex.sendResponseHeaders(200, declareLength ? head.length + padding + tail.length : 0);
      byte[] spaces = new byte[64 << 10];
      java.util.Arrays.fill(spaces, (byte) ' ');
      try (OutputStream os = ex.getResponseBody()) {
        os.write(head);
        written.addAndGet(head.length);
        for (long left = padding; left > 0; left -= spaces.length) {
          int n = (int) Math.min(left, spaces.length);
          os.write(spaces, 0, n);
          written.addAndGet(n);
        }
        os.write(tail);
        written.addAndGet(tail.length);
      } catch (java.io.IOException e) {
        // the tokenizer hung up
      } finally {
        done.countDown();
      }
    });
    return new VllmTokenizer("http://127.0.0.1:" + server.getAddress().getPort() + "/" + name,
        "m", Duration.ofSeconds(30));
  }

  @Test
  void anAnswerFarLargerThanTheRequestCouldNeedFailsTheTokenizationAndIsNotReadToTheEnd()
      throws Exception {
    // a valid answer padded with 64 MiB of JSON whitespace: read whole, a server could make the
    // router hold any amount of memory for one prompt of a few bytes
    long padding = 64L << 20;
    for (boolean declared : new boolean[] {false, true}) {
      java.util.concurrent.atomic.AtomicLong written =
          new java.util.concurrent.atomic.AtomicLong();
      java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);
      VllmTokenizer t = answering("huge" + declared,
          "{\"tokens\":[1,2,3]".getBytes(StandardCharsets.UTF_8), padding,
          "}".getBytes(StandardCharsets.UTF_8), declared, written, done);
      assertThatThrownBy(() -> t.encode("hello")).as("length declared: %s", declared)
          .isInstanceOf(Tokenizer.TokenizationException.class)
          .hasMessageContaining("above the limit of");
      assertThat(done.await(30, java.util.concurrent.TimeUnit.SECONDS)).isTrue();
      // the server got no further than what the sockets' buffers hold: a few MiB, not 64
      assertThat(written.get()).as("length declared: %s", declared).isLessThan(padding / 2);
    }
  }

  @Test
  void anAnswerWithinTheAllowanceOfALongPromptIsRead() throws Exception {
    // the allowance grows with the request: a prompt of 1 MiB may be answered with 2 MiB
    String prompt = "ab".repeat(1 << 19);
    java.util.concurrent.atomic.AtomicLong written = new java.util.concurrent.atomic.AtomicLong();
    java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);
    VllmTokenizer t = answering("long", "{\"tokens\":[4,5]".getBytes(StandardCharsets.UTF_8),
        2L << 20, "}".getBytes(StandardCharsets.UTF_8), true, written, done);
    assertThat(t.encode(prompt)).containsExactly(4, 5);
  }

  @Test
  void aServerThatTricklesItsAnswerFailsTheTokenizationWithinTheTimeoutAndIsHungUpOn()
      throws Exception {
    // the answer's headers come at once, then a byte of its body every 50 ms, never ending: the
    // call must still end near its timeout, not hold the routing thread for as long as the
    // server likes, and the connection must be dropped, not left to the server
    java.util.concurrent.CountDownLatch hungUp = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
    server.createContext("/trickle/tokenize", ex -> {
      ex.getRequestBody().readAllBytes();
      ex.sendResponseHeaders(200, 0);
      try (OutputStream os = ex.getResponseBody()) {
        os.write("{\"tokens\":[1,".getBytes(StandardCharsets.UTF_8));
        while (!release.await(50, java.util.concurrent.TimeUnit.MILLISECONDS)) {
          os.write(' ');
          os.flush();
        }
      } catch (java.io.IOException e) {
        hungUp.countDown();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    });
    VllmTokenizer t = new VllmTokenizer("http://127.0.0.1:" + server.getAddress().getPort()
        + "/trickle", "m", Duration.ofMillis(300));
    try {
      long start = System.nanoTime();
      org.junit.jupiter.api.Assertions.assertTimeoutPreemptively(Duration.ofSeconds(20),
          () -> assertThatThrownBy(() -> t.encode("x"))
              .isInstanceOf(Tokenizer.TokenizationException.class)
              .hasMessageContaining("300 ms"));
      // generous: the point is that it ends, bounded by the timeout rather than the server
      assertThat(Duration.ofNanos(System.nanoTime() - start)).isLessThan(Duration.ofSeconds(10));
      assertThat(hungUp.await(20, java.util.concurrent.TimeUnit.SECONDS))
          .as("the tokenizer closed the connection").isTrue();
    } finally {
      release.countDown();
    }
  }

  @Test
  void tokenIdsThatAreNotNonNegativeIntegersMakeTheAnswerMalformed() {
    // 1.5 used to be read as token 1, and -1 as token -1: neither is a token ID of any model
    for (String bad : List.of("[1, 1.5, 2]", "[1, -1, 2]", "[1.0]", "[1, \"2\"]",
        "[4294967296]")) {
      override = "{\"tokens\": " + bad + "}";
      assertThatThrownBy(() -> tokenizer().encode("x")).as(bad)
          .isInstanceOf(Tokenizer.TokenizationException.class)
          .hasMessageContaining("not a token ID");
    }
    override = "{\"tokens\": [0, 7, 2147483647]}";
    assertThat(tokenizer().encode("x")).containsExactly(0, 7, Integer.MAX_VALUE);
  }

  @Test
  void turnNOfADialogOnlyTokenizesWhatIsNew() {
    CachingChatTokenizer cached =
        new CachingChatTokenizer(tokenizer(), ChatTemplate.CHATML, 1_000_000);
    List<ChatMessage> dialog = new ArrayList<>();
    dialog.add(ChatMessage.system("You are a helpful assistant. ".repeat(20)));
    long uncachedTokens = 0;
    for (int turn = 1; turn <= 10; turn++) {
      dialog.add(ChatMessage.user("question " + turn + " about item " + turn * 7));
      int callsBefore = calls.get();
      int[] got = cached.encodeChat(dialog);
      int[] whole = ints(pairTokens(ChatTemplate.CHATML.render(dialog)));
      assertThat(got).as("turn %d", turn).containsExactly(whole); // per-message = whole
      uncachedTokens += whole.length;
      // only the new user message (and, once, the generation prompt) reached the server
      assertThat(calls.get() - callsBefore).isLessThanOrEqualTo(turn == 1 ? 3 : 1);
      dialog.add(ChatMessage.assistant("answer " + turn + " ".repeat(turn)));
      cached.encodeChat(dialog.subList(0, dialog.size())); // the assistant turn gets cached too
    }
    // tokens actually tokenized vs tokens a whole-history tokenizer would have processed
    assertThat(cached.tokensEncoded()).isLessThan(uncachedTokens / 5);
    assertThat(cached.tokensFromCache()).isGreaterThan(cached.tokensEncoded());
  }

  @Test
  void theChatCacheBoundCountsTheTextItKeepsNotOnlyItsTokens() {
    // prompts are the users': a message of 100,000 characters that tokenizes to one token (a
    // run of whitespace, a repeated character) weighed 17 and kept its whole text, so a cache
    // of 1,000 tokens could hold megabytes of prompts. Its text now counts too
    Tokenizer oneTokenEach = text -> new int[] {7};
    CachingChatTokenizer cached =
        new CachingChatTokenizer(oneTokenEach, ChatTemplate.CHATML, 1_000);
    for (int i = 0; i < 50; i++) {
      cached.encodeChat(List.of(ChatMessage.user(i + " ".repeat(100_000))));
    }
    // a piece weighs at least a token per 4 chars of its text
    assertThat(cached.cachedTextChars()).isLessThanOrEqualTo(4 * 1_000);
    for (int i = 0; i < 50; i++) {
      cached.encodeChat(List.of(ChatMessage.user("short " + i)));
    }
    assertThat(cached.cachedTextChars()).as("short pieces are still cached").isPositive();
  }

  @Test
  void ordinaryTextInTheChatCacheWeighsItsTokensSoTheBudgetHoldsAsManyTokensAsItSays() {
    // about 4 characters a token, as in prose: 100 pieces of some 110 tokens fit a budget of
    // 20,000 tokens (16 more per entry); a weight that also charged for the text would keep
    // only about half of them
    Tokenizer fourCharsEach = text -> new int[text.length() / 4];
    CachingChatTokenizer cached =
        new CachingChatTokenizer(fourCharsEach, ChatTemplate.CHATML, 20_000);
    for (int i = 0; i < 100; i++) {
      cached.encodeChat(List.of(ChatMessage.user(String.format("%03d", i) + "x".repeat(397))));
    }
    assertThat(cached.cachedTextChars()).isGreaterThanOrEqualTo(100 * 400);
  }

  @Test
  void aTokenizerConfiguredOnTheScorerLetsChatRequestsMatchEngineBlocks() {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(4).build();
    List<ChatMessage> chat = List.of(ChatMessage.system("You are terse. ".repeat(10)),
        ChatMessage.user("what is a KV cache?"));
    int[] tokens = ints(pairTokens(ChatTemplate.CHATML.render(chat)));
    int blocks = tokens.length / 4;
    long[] hashes = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      hashes[i] = 1000 + i;
    }
    index.apply("10.0.0.2:8000", KvEvent.BlockStored.of(hashes, null,
        java.util.Arrays.copyOf(tokens, blocks * 4), 4));
    try (io.epp4j.core.Router router = vllmPreciseRouter(index, true)) {
      io.epp4j.api.InferenceRequest req = io.epp4j.api.InferenceRequest.builder().model("m")
          .messages(chat).build();
      for (int i = 0; i < 5; i++) {
        assertThat(router.route(req).primary().id()).isEqualTo("10.0.0.2:8000");
      }
    }
  }

  @Test
  void chatsThroughAVllmTokenizerAreRenderedWithTheServersTemplateNotChatMl() {
    // a Llama-style server: its template is not ChatML, and only the server knows it
    serverTemplate = new ChatTemplate("<|start_header_id|>{role}<|end_header_id|>\n\n",
        "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n");
    List<ChatMessage> chat = List.of(ChatMessage.system("You are terse. ".repeat(10)),
        ChatMessage.user("what is a KV cache?"));
    int[] engine = ints(pairTokens(serverTemplate.render(chat)));
    int[] chatMl = ints(pairTokens(ChatTemplate.CHATML.render(chat)));
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(4).build();
    index.apply("10.0.0.2:8000", KvEvent.BlockStored.of(new long[] {1, 2, 3}, null,
        java.util.Arrays.copyOf(engine, 12), 4));
    index.apply("10.0.0.3:8000", KvEvent.BlockStored.of(new long[] {1, 2, 3}, null,
        java.util.Arrays.copyOf(chatMl, 12), 4));
    try (io.epp4j.core.Router router = vllmPreciseRouter(index, false)) {
      io.epp4j.api.InferenceRequest req = io.epp4j.api.InferenceRequest.builder().model("m")
          .messages(chat).build();
      assertThat(router.route(req).primary().id()).isEqualTo("10.0.0.2:8000");
    }
  }

  @Test
  void aVllmTokenizerSendsAMessagesToolCallsAsFieldsOfTheMessage() throws Exception {
    // the server's template reads message.tool_calls, tool_call_id, name and reasoning: they
    // go as the client wrote them, beside the content, not inside it
    String calls = "{\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":"
        + "{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}],\"reasoning\":\"r\"}";
    tokenizer().encodeChat(List.of(ChatMessage.user("go"),
        new ChatMessage("assistant", "", List.of(), calls),
        new ChatMessage("tool", "1", List.of(), "{\"tool_call_id\":\"c1\",\"name\":\"f\"}")));
    JsonNode sent = lastBody.get().get("messages");
    assertThat(sent.get(0)).isEqualTo(JSON.readTree("{\"role\":\"user\",\"content\":\"go\"}"));
    assertThat(sent.get(1)).isEqualTo(JSON.readTree("{\"role\":\"assistant\",\"content\":\"\","
        + calls.substring(1)));
    assertThat(sent.get(2)).isEqualTo(JSON.readTree(
        "{\"role\":\"tool\",\"content\":\"1\",\"tool_call_id\":\"c1\",\"name\":\"f\"}"));
  }

  @Test
  void aVllmTokenizerLeavesOutAContentTheClientGaveAsNull() throws Exception {
    // the server gives a template that iterates over content no parts for a null content, and
    // one empty text part for "": sending "" would render another prompt than the request's
    var parsed = io.epp4j.core.OpenAiRequestParser.defaults().parse("/v1/chat/completions",
        java.util.Map.of(), ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
            + "\"content\":\"go\"},{\"role\":\"assistant\",\"content\":null,"
            + "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":"
            + "{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"assistant\","
            + "\"content\":\"\"}]}").getBytes(StandardCharsets.UTF_8)).value();
    tokenizer().encodeChat(parsed.messages(), null, parsed.chatTemplateArgs());
    JsonNode sent = lastBody.get().get("messages");
    assertThat(sent.get(1).has("content")).isFalse();
    assertThat(sent.get(1).get("tool_calls")).hasSize(1);
    assertThat(sent.get(2).get("content").textValue()).isEmpty();
  }

  @Test
  void aVllmTokenizerSendsTheRequestsOwnChatTemplate() throws Exception {
    // the server renders it as for the request when it trusts request templates (else refuses
    // it, as it refuses the request): its model's template would be other tokens
    String own = "{% for m in messages %}{{ m.content }}{% endfor %}";
    tokenizer().encodeChat(List.of(ChatMessage.user("go")), null,
        new ChatTemplateArgs(true, false, null, own));
    assertThat(lastBody.get().path("chat_template").textValue()).isEqualTo(own);
    tokenizer().encodeChat(List.of(ChatMessage.user("go")), null, ChatTemplateArgs.DEFAULTS);
    assertThat(lastBody.get().has("chat_template")).isFalse();
  }

  @Test
  void aVllmTokenizerSendsContentPartsAsTheClientSentThemMediaIncluded() throws Exception {
    // vLLM reads an image part itself and renders the model's placeholder tokens for it; the
    // part's JSON as text (what the parts joined into one string hold) is other tokens
    String content = "[{\"type\":\"text\",\"text\":\"Look at\"},"
        + "{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/1.png\"}},"
        + "{\"type\":\"text\",\"text\":\"this\"}]";
    var parsed = io.epp4j.core.OpenAiRequestParser.defaults().parse("/v1/chat/completions",
        java.util.Map.of(), ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
            + content + "}]}").getBytes(StandardCharsets.UTF_8)).value();
    tokenizer().encodeChat(parsed.messages(), null, parsed.chatTemplateArgs());
    JsonNode sent = lastBody.get().get("messages");
    assertThat(sent).hasSize(1);
    assertThat(sent.get(0).get("content")).isEqualTo(JSON.readTree(content));
  }

  @Test
  void aPerMessageTemplateRefusesAChatWithToolCallsItCannotRender() {
    // ChatML per message would drop them: tokens of a chat the engine never renders
    CachingChatTokenizer t = new CachingChatTokenizer(tokenizer(), ChatTemplate.CHATML, 1000);
    assertThatThrownBy(() -> t.encodeChat(List.of(ChatMessage.user("go"),
        new ChatMessage("assistant", "", List.of(), "{\"tool_calls\":[]}"))))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .hasMessageContaining("tool calls");
  }

  @Test
  void completionPromptsAreTokenizedWithTheSpecialTokensVllmAddsToThem() {
    // vLLM's /v1/completions adds the tokenizer's special tokens (BOS for Llama, Gemma, ...) to
    // a text prompt, so the engine's first block starts with BOS: the router's keys must too
    String prompt = "Summarize the following report. ".repeat(4);
    List<Integer> engine = pairTokens(prompt);
    engine.add(0, BOS);
    int[] withBos = ints(engine);
    int[] withoutBos = ints(pairTokens(prompt));
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(4).build();
    int blocks = withoutBos.length / 4;
    long[] hashes = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      hashes[i] = 1000 + i;
    }
    index.apply("10.0.0.2:8000", KvEvent.BlockStored.of(hashes, null,
        java.util.Arrays.copyOf(withBos, blocks * 4), 4));
    index.apply("10.0.0.3:8000", KvEvent.BlockStored.of(hashes, null,
        java.util.Arrays.copyOf(withoutBos, blocks * 4), 4));
    try (io.epp4j.core.Router router = vllmPreciseRouter(index, false)) {
      assertThat(router.route(io.epp4j.api.InferenceRequest.completion("m", prompt)).primary()
          .id()).isEqualTo("10.0.0.2:8000");
    }
  }

  @Test
  void aTokenProducerListedAfterTheScorerStillTokenizesForIt() {
    // llm-d's token-producer tokenizes for every scorer whatever the order of the file; here it
    // was lent only to scorers listed after it, so one listed before had no tokenizer, scored 0
    // everywhere and said nothing
    String prompt = "Summarize the following report. ".repeat(4);
    List<Integer> engine = pairTokens(prompt);
    engine.add(0, BOS);
    int[] withBos = ints(engine);
    int blocks = withBos.length / 4;
    long[] hashes = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      hashes[i] = 1000 + i;
    }
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(4).build();
    index.apply("10.0.0.2:8000", KvEvent.BlockStored.of(hashes, null,
        java.util.Arrays.copyOf(withBos, blocks * 4), 4));
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters: {speculative: false}
        - type: max-score-picker
        - type: token-producer
          parameters:
            modelName: m
            vllm: {http: "http://127.0.0.1:%d", timeout: 5s}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
          - pluginRef: max-score-picker
        """.formatted(server.getAddress().getPort());
    try (io.epp4j.core.Router router = io.epp4j.core.Router.builder()
        .endpoints(PrecisePrefixCacheScorerTest.EPS).service(KvBlockIndex.class, index)
        .configYaml(yaml, "t").build()) {
      for (int i = 0; i < 5; i++) {
        assertThat(router.route(io.epp4j.api.InferenceRequest.completion("m", prompt)).primary()
            .id()).isEqualTo("10.0.0.2:8000");
      }
      assertThat(calls.get()).isPositive();
    }
  }

  /**
   * A router over {@link PrecisePrefixCacheScorerTest#EPS} whose precise scorer reads
   * {@code index} and tokenizes with this test's vLLM stand-in.
   */
  private io.epp4j.core.Router vllmPreciseRouter(KvBlockIndex index, boolean speculative) {
    String parameters = (speculative ? "" : "speculative: false, ")
        + "tokenizer: {type: vllm, url: \"http://127.0.0.1:" + server.getAddress().getPort()
        + "\", model: m, timeoutMs: 5000}";
    return io.epp4j.core.Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
        .service(KvBlockIndex.class, index)
        .configYaml(PrecisePrefixCacheScorerTest.preciseOnly(parameters), "t").build();
  }

  @Test
  void anIncompleteTokenizerConfigurationIsReportedByName() {
    assertRefused("{type: vllm, model: m}")
        .hasMessageContaining("tokenizer").hasMessageContaining("url");
  }

  @Test
  void aChatCacheSizeForAVllmTokenizerIsRefusedByName() {
    // a vllm tokenizer sends each chat whole to the server, which renders its own template, so
    // it caches nothing: cacheTokens was read and ignored, and a file that sized the cache (as
    // it did when vllm chats were cut into ChatML messages) loaded as if it took effect
    assertRefused("{type: vllm, url: \"http://127.0.0.1:1\", model: m, cacheTokens: 100000}")
        .hasMessageContaining("'tokenizer' field 'cacheTokens' has no effect with type vllm");
  }

  @Test
  void aTokenizerFieldThatIsNotReadIsReportedByName() {
    // a misspelt field used to be ignored, so the tokenizer ran with the default (200 ms
    // here), and a field of the other type (a vllm tokenizer given a path) did nothing
    assertRefused("{type: vllm, url: \"http://127.0.0.1:1\", model: m, timeoutMS: 5000, "
        + "path: /models/m}")
        .hasMessageContaining("'tokenizer' has unknown parameter 'timeoutMS'")
        .hasMessageContaining("'tokenizer' field 'path' has no effect with type vllm");
  }

  @org.junit.jupiter.params.ParameterizedTest
  @org.junit.jupiter.params.provider.ValueSource(strings = {"vllm-svc:8000", "localhost:8000",
      "ftp://127.0.0.1:8000", "http:///v1", "http://"})
  void aTokenizerUrlThatIsNotAnHttpUrlIsRefusedByName(String url) {
    // such a URL used to load: every call then threw before sending anything, the scorer took
    // the failure for a tokenizer outage, and every request scored 0 everywhere, unseen
    assertRefused("{type: vllm, url: \"" + url + "\", model: m}")
        .hasMessageContaining("'url'").hasMessageContaining(url);
  }

  @Test
  void aTokenProducerUrlThatIsNotAnHttpUrlIsRefusedByName() {
    String yaml = """
        plugins:
        - type: token-producer
          parameters:
            modelName: m
            vllm: {http: "vllm-svc:8000"}
        - type: precise-prefix-cache-scorer
          parameters:
            kvEvents: {mode: none}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """;
    assertThatThrownBy(() -> io.epp4j.core.Router.builder().configYaml(yaml, "t").build())
        .isInstanceOf(io.epp4j.core.ConfigException.class)
        .hasMessageContaining("vllm-svc:8000").hasMessageContaining("http");
  }

  @org.junit.jupiter.params.ParameterizedTest
  @org.junit.jupiter.params.provider.ValueSource(strings = {"0", "0s", "-5s", "-0s", "-1ms"})
  void aTokenProducerTimeoutThatIsNotPositiveIsRefusedByName(String timeout) {
    // 0 used to become 1 ms, so every call timed out unnoticed; llm-d takes 0 and negative
    // durations too, but its calls then start past their deadline and all fail
    assertThatThrownBy(() -> tokenProducerRouter("timeout: \"" + timeout + "\"").close())
        .isInstanceOf(io.epp4j.core.ConfigException.class)
        .hasMessageContaining("'vllm' parameter 'timeout' must be a positive duration")
        .hasMessageContaining("'" + timeout + "'");
  }

  @org.junit.jupiter.params.ParameterizedTest
  @org.junit.jupiter.params.provider.CsvSource({"20m, 1200000000000", "8760h, 31536000000000000",
      "500us, 500000", "1.5ms, 1500000", "5s, 5000000000"})
  void aTokenProducerTimeoutIsTakenAsGiven(String timeout, long nanos) {
    // it used to be cut to whole milliseconds and held to 1 ms-10 min, unnoticed: 20m waited
    // 10 minutes, 500us 1 ms and 1.5ms 1 ms; llm-d takes any positive duration as it is
    try (io.epp4j.core.Router router = tokenProducerRouter("timeout: " + timeout)) {
      VllmTokenizer lent = (VllmTokenizer) java.util.Objects.requireNonNull(((TokenProducer)
          router.config().plugins().get("token-producer")).tokenizer());
      assertThat(lent.timeout()).isEqualTo(Duration.ofNanos(nanos));
      if (nanos >= 1_000_000_000L) {
        // a long timeout still lets the call through
        assertThat(lent.encode("hello")).containsExactly(ints(pairTokens("hello")));
      }
    }
  }

  @Test
  void aTokenProducerWaitsMmTimeoutForAChatWithContentPartsAndTimeoutForOthers() {
    // vllm.mmTimeout got a notice saying epp4j tokenizes text only, yet a chat's media parts go
    // to the server, which fetches them before it answers; such a chat was held to vllm.timeout
    // (5 s by default) where llm-d waits mmTimeout (30 s by default) and failed, unscored
    server.createContext("/media/tokenize", ex -> {
      JsonNode body = JSON.readTree(ex.getRequestBody());
      boolean parts = false;
      for (JsonNode m : body.path("messages")) {
        parts |= m.path("content").isArray();
      }
      if (parts) {
        try {
          Thread.sleep(1_000); // fetching the image
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      byte[] answer = "{\"tokens\":[1,2,3]}".getBytes(StandardCharsets.UTF_8);
      try {
        ex.sendResponseHeaders(200, answer.length);
        try (OutputStream os = ex.getResponseBody()) {
          os.write(answer);
        }
      } catch (java.io.IOException hungUp) {
        // the tokenizer gave up waiting
      }
    });
    String imageJson = "{\"image_url\":{\"url\":\"u\"},\"type\":\"image_url\"}";
    List<ChatMessage> image = List.of(new ChatMessage("user", imageJson + "\nwhat is it",
        List.of(new ChatMessage.Part("image", "", imageJson),
            ChatMessage.Part.text("what is it"))));
    List<ChatMessage> text = List.of(ChatMessage.user("what is it"));
    for (String mm : List.of(", mmTimeout: 20s", "")) {
      try (io.epp4j.core.Router router = tokenProducerRouter("timeout: 300ms" + mm, "/media")) {
        Tokenizer lent = java.util.Objects.requireNonNull(((TokenProducer)
            router.config().plugins().get("token-producer")).tokenizer());
        // 20s as given, else llm-d's default of 30s: either outlasts the image's second
        assertThat(lent.encodeChat(image)).as(mm).containsExactly(1, 2, 3);
        assertThat(lent.encodeChat(text)).as(mm).containsExactly(1, 2, 3);
        assertThat(router.config().warnings()).as(mm).noneMatch(w -> w.contains("mmTimeout"));
      }
    }
    try (io.epp4j.core.Router router = tokenProducerRouter("timeout: 20s, mmTimeout: 300ms",
        "/media")) {
      Tokenizer lent = java.util.Objects.requireNonNull(((TokenProducer)
          router.config().plugins().get("token-producer")).tokenizer());
      assertThatThrownBy(() -> lent.encodeChat(image))
          .isInstanceOf(Tokenizer.TokenizationException.class);
      assertThat(lent.encodeChat(text)).containsExactly(1, 2, 3);
    }
  }

  @Test
  void anEmptyTokenProducerTimeoutIsTheDefault() {
    // llm-d reads an empty vllm.timeout or mmTimeout as its default; both were refused here
    try (io.epp4j.core.Router router = tokenProducerRouter("timeout: \"\", mmTimeout: \"\"")) {
      VllmTokenizer lent = (VllmTokenizer) java.util.Objects.requireNonNull(((TokenProducer)
          router.config().plugins().get("token-producer")).tokenizer());
      assertThat(lent.timeout()).isEqualTo(Duration.ofSeconds(5));
      assertThat(lent.partsTimeout()).isEqualTo(Duration.ofSeconds(30));
    }
  }

  @org.junit.jupiter.params.ParameterizedTest
  @org.junit.jupiter.params.provider.ValueSource(strings = {"0s", "-30s"})
  void aTokenProducerMmTimeoutThatIsNotPositiveIsRefusedByName(String timeout) {
    assertThatThrownBy(() -> tokenProducerRouter("mmTimeout: \"" + timeout + "\"").close())
        .isInstanceOf(io.epp4j.core.ConfigException.class)
        .hasMessageContaining("'vllm' parameter 'mmTimeout' must be a positive duration")
        .hasMessageContaining("'" + timeout + "'");
  }

  private io.epp4j.core.Router tokenProducerRouter(String more) {
    return tokenProducerRouter(more, "");
  }

  /**
   * A router whose token-producer asks this test's server under {@code path}, {@code vllm} given
   * {@code more}.
   */
  private io.epp4j.core.Router tokenProducerRouter(String more, String path) {
    String yaml = """
        plugins:
        - type: token-producer
          parameters:
            modelName: m
            vllm: {url: "http://127.0.0.1:%d%s", %s}
        - type: precise-prefix-cache-scorer
          parameters:
            kvEvents: {mode: none}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """.formatted(server.getAddress().getPort(), path, more);
    return io.epp4j.core.Router.builder().configYaml(yaml, "t").build();
  }

  /**
   * Builds a router from a configuration whose only plugin is a precise scorer reading no KV
   * events and tokenizing with {@code tokenizer}, a YAML mapping; the build must be refused.
   */
  private static AbstractThrowableAssert<?, ? extends Throwable> assertRefused(String tokenizer) {
    String yaml = """
        plugins:
        - type: precise-prefix-cache-scorer
          parameters:
            kvEvents: {mode: none}
            tokenizer: %s
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: precise-prefix-cache-scorer
        """.formatted(tokenizer);
    return assertThatThrownBy(() -> io.epp4j.core.Router.builder().configYaml(yaml, "t").build())
        .isInstanceOf(io.epp4j.core.ConfigException.class);
  }
}
