package com.example.epp4j.gateway;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.jspecify.annotations.Nullable;

/**
 * A stand-in for a vLLM server, so that the gateway can be tried and tested without a GPU. It
 * speaks the parts of vLLM's HTTP interface a gateway touches: {@code /v1/completions} and
 * {@code /v1/chat/completions} (JSON or SSE streaming, with vLLM's final usage chunk),
 * {@code /v1/models}, {@code /health} (and {@code /ping}, vLLM's alias of it), {@code /load},
 * {@code /version}, {@code /metrics} under vLLM's metric names, and {@code /tokenize} with its own
 * tokenizer ({@code /detokenize} checks its request, but cannot decode that tokenizer's IDs).
 *
 * <p>It is not a model and not an emulator of vLLM's performance: it answers with canned words,
 * counts about four bytes of prompt as one token, waits a fixed time to first token and between
 * tokens, and keeps a prefix cache of chained 16-token blocks so that the prefix-cache counters
 * (and, with {@link Options#promptTokensDetails}, as vLLM's {@code --enable-prompt-tokens-details},
 * {@code usage.prompt_tokens_details.cached_tokens}) show whether a router sends a shared prefix
 * to the same replica.
 */
public final class StandInVllm implements AutoCloseable {
  /**
   * What {@code GET /version} names where vLLM names its release: below every vLLM release, so a
   * client that compares versions assumes nothing of a real one, with a local label naming the
   * stand-in; it parses as a PEP 440 version and as SemVer.
   */
  static final String VERSION = "0.0.0+epp4j.standin";

  /**
   * The share of GPU memory {@code vllm:cache_config_info} names, as Python writes vLLM's default
   * {@code --gpu-memory-utilization}: the stand-in has no GPU, and claims no other share.
   */
  static final String GPU_MEMORY_UTILIZATION = "0.9";

  /** vLLM's default KV block size. */
  static final int BLOCK_TOKENS = 16;
  /** Bytes of prompt text counted as one token (a rough average for English BPE vocabularies). */
  static final int BYTES_PER_TOKEN = 4;
  /**
   * Vocabulary size the stand-in takes token-ID prompts against: IDs 0 to 262,143 are accepted
   * (that covers Llama 3's, Qwen's and Gemma 3's vocabularies); others are refused with 400, as
   * vLLM refuses an ID beyond its tokenizer's.
   */
  static final int VOCAB_SIZE = 262_144;
  // content after the JSON object is an error, as vLLM's JSON reader makes it
  private static final ObjectMapper JSON = new ObjectMapper()
      .enable(com.fasterxml.jackson.databind.DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
  private static final String[] WORDS =
      {" the", " stand", "-in", " server", " says", " hello", " from", " epp4j", "."};

  /**
   * What the stand-in serves and how slowly.
   *
   * @param model             the served model name; requests naming another model get 404
   * @param ttft              time to first token
   * @param interTokenLatency time between two generated tokens
   * @param kvBlocks          KV-cache capacity in 16-token blocks (prefix cache and
   *                          {@code vllm:kv_cache_usage_perc})
   * @param maxNumSeqs        requests generating at once; more wait (as vLLM's
   *                          {@code --max-num-seqs}, shown as {@code vllm:num_requests_waiting})
   * @param maxModelLen       prompt + max_tokens limit; longer requests get vLLM's 400
   * @param forceIncludeUsage send the usage chunk on every stream, as vLLM's
   *                          {@code --enable-force-include-usage}; otherwise only when the request
   *                          asks with {@code stream_options} (whose {@code include_usage}
   *                          defaults to true, as in vLLM)
   * @param maxThreads        threads that serve completions (each holds one while it waits for a
   *                          slot or generates); a completion beyond them waits, in arrival
   *                          order, until one is free (none is refused or dropped), so a flood of
   *                          requests cannot make the server start a thread for each. /health,
   *                          /ping, /load, /version, /metrics and /v1/models are answered by the
   *                          server's own few threads, at once however many completions wait;
   *                          {@code /tokenize} and {@code /detokenize}, which read a body, are
   *                          served by these threads too, each holding one only while it runs
   * @param promptTokensDetails usage names the prompt tokens found in the prefix cache,
   *                          {@code prompt_tokens_details.cached_tokens} (0 included), as vLLM's
   *                          {@code --enable-prompt-tokens-details}; off, as in vLLM, a whole
   *                          answer's usage has {@code "prompt_tokens_details": null} and a
   *                          stream's usage chunk no such key
   */
  public record Options(String model, Duration ttft, Duration interTokenLatency, int kvBlocks,
      int maxNumSeqs, int maxModelLen, boolean forceIncludeUsage, int maxThreads,
      boolean promptTokensDetails) {
    /** Default for {@link #maxThreads}. */
    public static final int DEFAULT_MAX_THREADS = 1024;

    /** With {@link #DEFAULT_MAX_THREADS} threads and no prompt tokens details. */
    public Options(String model, Duration ttft, Duration interTokenLatency, int kvBlocks,
        int maxNumSeqs, int maxModelLen, boolean forceIncludeUsage) {
      this(model, ttft, interTokenLatency, kvBlocks, maxNumSeqs, maxModelLen, forceIncludeUsage,
          DEFAULT_MAX_THREADS);
    }

    /** Without prompt tokens details, as vLLM by default. */
    public Options(String model, Duration ttft, Duration interTokenLatency, int kvBlocks,
        int maxNumSeqs, int maxModelLen, boolean forceIncludeUsage, int maxThreads) {
      this(model, ttft, interTokenLatency, kvBlocks, maxNumSeqs, maxModelLen, forceIncludeUsage,
          maxThreads, false);
    }

    public Options {
      Objects.requireNonNull(model, "model");
      if (ttft.isNegative() || interTokenLatency.isNegative()) {
        throw new IllegalArgumentException("ttft and interTokenLatency must not be negative");
      }
      if (kvBlocks < 1 || maxNumSeqs < 1 || maxModelLen < 1 || maxThreads < 1) {
        throw new IllegalArgumentException(
            "kvBlocks, maxNumSeqs, maxModelLen and maxThreads must be >= 1");
      }
    }

    /** Defaults: model {@code stand-in}, 20 ms to first token, 5 ms per token, 4,000 blocks. */
    public static Options defaults() {
      return new Options("stand-in", Duration.ofMillis(20), Duration.ofMillis(5), 4000, 64,
          32768, false);
    }

    public Options withModel(String m) {
      return new Options(m, ttft, interTokenLatency, kvBlocks, maxNumSeqs, maxModelLen,
          forceIncludeUsage, maxThreads, promptTokensDetails);
    }

    public Options withLatency(Duration firstToken, Duration perToken) {
      return new Options(model, firstToken, perToken, kvBlocks, maxNumSeqs, maxModelLen,
          forceIncludeUsage, maxThreads, promptTokensDetails);
    }

    /** As vLLM's {@code --enable-prompt-tokens-details}: see {@link #promptTokensDetails}. */
    public Options withPromptTokensDetails(boolean on) {
      return new Options(model, ttft, interTokenLatency, kvBlocks, maxNumSeqs, maxModelLen,
          forceIncludeUsage, maxThreads, on);
    }
  }

  private final Options options;
  private final HttpServer server;
  private final ExecutorService executor;
  /** The server's threads: they answer the quick requests and hand completions over. */
  private final ExecutorService front;
  private static final int FRONT_THREADS = 8;
  /** Guards {@link #freeSlots} and {@link #queue}. */
  private final Object admission = new Object();
  private int freeSlots;
  /** Requests waiting for a slot, first come first served. */
  private final ArrayDeque<Ticket> queue = new ArrayDeque<>();
  private final PrefixCache cache;
  private final AtomicLong ids = new AtomicLong();
  private final AtomicInteger running = new AtomicInteger();
  private final AtomicInteger waiting = new AtomicInteger();
  private final AtomicLong blocksInUse = new AtomicLong();
  private final AtomicLong promptTokens = new AtomicLong();
  private final AtomicLong generationTokens = new AtomicLong();
  private final AtomicLong prefixQueries = new AtomicLong();
  private final AtomicLong prefixHits = new AtomicLong();
  private final AtomicLong finished = new AtomicLong();
  /** Of {@link #finished}, the answers that ended with finish_reason "stop". */
  private final AtomicLong stopped = new AtomicLong();
  private final AtomicLong aborted = new AtomicLong();
  private final AtomicBoolean closed = new AtomicBoolean();

  private StandInVllm(InetSocketAddress address, Options options) throws IOException {
    this.options = options;
    this.freeSlots = options.maxNumSeqs();
    this.cache = new PrefixCache(options.kvBlocks());
    this.server = HttpServer.create(address, 0);
    server.createContext("/", this::handle);
    // a completion holds its thread while it waits for a slot and "generates": at most
    // maxThreads of them, and completions beyond wait in an unbounded FIFO queue (a rejected
    // task would leave the connection open and unanswered); threads are started as needed
    ThreadPoolExecutor pool = new ThreadPoolExecutor(options.maxThreads(), options.maxThreads(),
        30, TimeUnit.SECONDS, new LinkedBlockingQueue<>());
    pool.allowCoreThreadTimeOut(true);
    this.executor = pool;
    // the server's own threads read each request and answer the quick ones (/health, /metrics,
    // /v1/models) themselves, so that a scrape is answered at once however many completions
    // wait for a thread, as vLLM's event loop answers it; a completion is handed to the pool
    ThreadPoolExecutor front = new ThreadPoolExecutor(FRONT_THREADS, FRONT_THREADS,
        30, TimeUnit.SECONDS, new LinkedBlockingQueue<>());
    front.allowCoreThreadTimeOut(true);
    this.front = front;
    server.setExecutor(front);
    server.start();
  }

  /** Starts a stand-in server on {@code address} (port 0 picks a free port). */
  public static StandInVllm start(InetSocketAddress address, Options options) throws IOException {
    return new StandInVllm(address, options);
  }

  /** What the server was started with. */
  public Options options() {
    return options;
  }

  /** The port it listens on. */
  public int port() {
    return server.getAddress().getPort();
  }

  /** Requests generating right now. */
  public int runningRequests() {
    return running.get();
  }

  /** Requests answered to the end. */
  public long finishedRequests() {
    return finished.get();
  }

  /** Requests whose client went away before the answer was complete. */
  public long abortedRequests() {
    return aborted.get();
  }

  @Override
  public void close() {
    if (closed.getAndSet(true)) {
      return;
    }
    server.stop(0);
    executor.shutdownNow();
    front.shutdownNow();
  }

  // ------------------------------------------------------------------------------- routing

  private void handle(HttpExchange ex) throws IOException {
    String path = ex.getRequestURI().getPath();
    // a request with a body is read on the pool's threads, so that a client sending its body
    // slowly holds none of the server's own threads
    if (List.of("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize")
        .contains(path) && "POST".equals(ex.getRequestMethod())) {
      try {
        executor.execute(() -> {
          try (ex) {
            switch (path) {
              case "/tokenize" -> tokenize(ex);
              case "/detokenize" -> detokenize(ex);
              default -> generate(ex, path.equals("/v1/chat/completions"));
            }
          } catch (IOException e) {
            // the client went away, or the server is closing: the exchange is closed above
          }
        });
      } catch (RejectedExecutionException closing) {
        ex.close();
      }
      return;
    }
    try (ex) {
      String method = ex.getRequestMethod();
      switch (path) {
        // vLLM's /health: 200 without a body or a content type; /ping is its alias (for
        // SageMaker), served on GET and POST
        case "/health" -> {
          if (allow(ex, "GET")) {
            ex.sendResponseHeaders(200, -1);
          }
        }
        case "/ping" -> {
          if (allow(ex, "GET, POST")) {
            ex.sendResponseHeaders(200, -1);
          }
        }
        // vLLM serves /load whether or not it tracks the load: without
        // --enable-server-load-tracking, its default, the count stays 0
        case "/load" -> {
          if (allow(ex, "GET")) {
            send(ex, 200, "application/json", "{\"server_load\":0}");
          }
        }
        case "/metrics" -> {
          if (allow(ex, "GET")) {
            send(ex, 200, "text/plain; version=0.0.4; charset=utf-8", metricsText());
          }
        }
        case "/v1/models" -> {
          if (allow(ex, "GET")) {
            send(ex, 200, "application/json", models());
          }
        }
        case "/version" -> {
          if (allow(ex, "GET")) {
            send(ex, 200, "application/json", "{\"version\":\"" + VERSION + "\"}");
          }
        }
        case "/v1/completions", "/v1/chat/completions" -> {
          if (allow(ex, "POST")) {
            generate(ex, path.equals("/v1/chat/completions"));
          }
        }
        case "/tokenize", "/detokenize" -> allow(ex, "POST"); // a POST is not answered here
        default -> send(ex, 404, "application/json", "{\"detail\":\"Not Found\"}");
      }
    }
  }

  /**
   * Answers 405 as vLLM's web framework does when the method is not one of {@code methods}
   * ({@code "GET"}, {@code "GET, POST"}: the {@code Allow} header it sends).
   */
  private static boolean allow(HttpExchange ex, String methods) throws IOException {
    if (List.of(methods.split(", ")).contains(ex.getRequestMethod())) {
      return true;
    }
    ex.getResponseHeaders().set("allow", methods);
    send(ex, 405, "application/json", "{\"detail\":\"Method Not Allowed\"}");
    return false;
  }

  /**
   * vLLM's model list: a card with every field of its {@code ModelCard}, in its order, and a
   * {@code permission} list of one {@code ModelPermission} with its defaults. vLLM builds the card
   * for each request, so {@code created} is the time of the request in seconds.
   */
  private String models() {
    long now = System.currentTimeMillis() / 1000;
    ObjectNode m = JSON.createObjectNode()
        .put("id", options.model())
        .put("object", "model")
        .put("created", now)
        .put("owned_by", "vllm")
        .put("root", options.model());
    m.putNull("parent");
    m.put("max_model_len", options.maxModelLen());
    m.putArray("permission").addObject()
        .put("id", "modelperm-" + UUID.randomUUID().toString().replace("-", ""))
        .put("object", "model_permission")
        .put("created", now)
        .put("allow_create_engine", false)
        .put("allow_sampling", true)
        .put("allow_logprobs", true)
        .put("allow_search_indices", false)
        .put("allow_view", true)
        .put("allow_fine_tuning", false)
        .put("organization", "*")
        .putNull("group")
        .put("is_blocking", false);
    ObjectNode list = JSON.createObjectNode().put("object", "list");
    list.putArray("data").add(m);
    return list.toString();
  }

  // ------------------------------------------------------------------------------ tokenizer

  /**
   * vLLM's {@code /tokenize}: a {@code prompt} (a string) or a chat's {@code messages}, answered
   * with {@code count}, {@code max_model_len}, {@code tokens} and {@code token_strs} (null unless
   * {@code return_token_strs}), by the stand-in's tokenizer ({@link #tokenIds}), so that the count
   * is the {@code prompt_tokens} a completion of the same prompt or chat reports. A chat is
   * rendered as a chat completion renders it, the assistant's turn opened at the end unless
   * {@code add_generation_prompt} is false, the last message left open with
   * {@code continue_final_message}; {@code add_special_tokens} is checked and changes nothing, as
   * the stand-in's tokenizer has no special tokens.
   */
  private void tokenize(HttpExchange ex) throws IOException {
    JsonNode root = jsonBody(ex);
    if (root == null) {
      return;
    }
    byte[] utf8;
    boolean tokenStrs;
    try {
      // as vLLM's request models are validated before its model check runs
      checkModelType(root);
      tokenStrs = flag(root, "return_token_strs", false);
      flag(root, "add_special_tokens", false);
      JsonNode messages = root.get("messages");
      String text;
      if (messages != null && !messages.isNull()) {
        boolean generationPrompt = flag(root, "add_generation_prompt", true);
        boolean continueFinal = flag(root, "continue_final_message", false);
        if (generationPrompt && continueFinal) {
          // vLLM's chat request models refuse the pair in these words
          throw new BadRequest("Cannot set both `continue_final_message` and"
              + " `add_generation_prompt` to True.");
        }
        text = chatText(messages, generationPrompt, continueFinal);
      } else {
        JsonNode prompt = root.get("prompt");
        if (prompt == null || prompt.isNull()) {
          throw new BadRequest(400, "BadRequestError",
              "'prompt' (or a chat's 'messages') is required", "prompt");
        }
        if (!prompt.isTextual()) {
          // vLLM's tokenize request takes the prompt as a string only
          throw new BadRequest(400, "BadRequestError", "'prompt' must be a string", "prompt");
        }
        text = prompt.textValue();
      }
      checkModel(root);
      utf8 = text.getBytes(StandardCharsets.UTF_8);
    } catch (BadRequest e) {
      error(ex, e.status, e.type, e.getMessage(), e.param);
      return;
    }
    int[] ids = tokenIds(utf8);
    // written as it goes, in the field order of vLLM's answer: no node per token
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream(64 + 8 * ids.length);
    try (com.fasterxml.jackson.core.JsonGenerator g = JSON.createGenerator(out)) {
      g.writeStartObject();
      g.writeNumberField("count", ids.length);
      g.writeNumberField("max_model_len", options.maxModelLen());
      g.writeFieldName("tokens");
      g.writeArray(ids, 0, ids.length);
      g.writeFieldName("token_strs");
      if (tokenStrs) {
        g.writeStartArray();
        for (int t = 0; t < ids.length; t++) {
          int from = t * BYTES_PER_TOKEN;
          int len = Math.min(BYTES_PER_TOKEN, utf8.length - from);
          // a character split between two tokens is U+FFFD in each
          g.writeString(new String(utf8, from, len, StandardCharsets.UTF_8));
        }
        g.writeEndArray();
      } else {
        g.writeNull();
      }
      g.writeEndObject();
    }
    send(ex, 200, "application/json", out.toByteArray());
  }

  /**
   * vLLM's {@code /detokenize}: {@code tokens}, an array of token IDs in the vocabulary, checked
   * as vLLM checks them, and the model checked as {@code /tokenize} checks it. The stand-in's IDs
   * are hashes of four bytes each and cannot be turned back into text: an empty array is the
   * empty prompt, and any other is refused saying so, rather than answered with made-up text.
   */
  private void detokenize(HttpExchange ex) throws IOException {
    JsonNode root = jsonBody(ex);
    if (root == null) {
      return;
    }
    try {
      checkModelType(root);
      JsonNode tokens = root.get("tokens");
      if (tokens == null || tokens.isNull()) {
        throw new BadRequest(400, "BadRequestError", "'tokens' is required", "tokens");
      }
      if (!tokens.isArray()) {
        throw new BadRequest(400, "BadRequestError", "'tokens' must be an array of token IDs",
            "tokens");
      }
      for (JsonNode id : tokens) {
        if (!id.isIntegralNumber()) {
          throw new BadRequest(400, "BadRequestError", "'tokens' must be an array of token IDs",
              "tokens");
        }
        if (!id.canConvertToInt() || id.asInt() < 0 || id.asInt() >= VOCAB_SIZE) {
          throw new BadRequest(400, "BadRequestError", "'tokens': token id " + id.asText()
              + " is out of vocabulary (0 to " + (VOCAB_SIZE - 1) + ")", "tokens");
        }
      }
      checkModel(root);
      if (!tokens.isEmpty()) {
        throw new BadRequest(400, "BadRequestError", "the stand-in cannot turn 'tokens' back"
            + " into text: its token IDs are hashes of four bytes of text each; routing-sim's"
            + " serve with --tokenizer decodes a model's token IDs", "tokens");
      }
    } catch (BadRequest e) {
      error(ex, e.status, e.type, e.getMessage(), e.param);
      return;
    }
    send(ex, 200, "application/json", "{\"prompt\":\"\"}");
  }

  /**
   * The stand-in's tokenizer, the one its completions count prompt tokens with: a token per four
   * bytes of UTF-8 text (the last one shorter when the length is not a multiple of four), its ID
   * a hash of those bytes into the vocabulary ({@link #VOCAB_SIZE}). Equal texts give equal IDs;
   * it is not any model's tokenizer, and its IDs cannot be decoded.
   */
  static int[] tokenIds(byte[] utf8) {
    int[] ids = new int[ceilDiv(utf8.length, BYTES_PER_TOKEN)];
    for (int t = 0; t < ids.length; t++) {
      long h = SEED;
      for (int i = t * BYTES_PER_TOKEN, end = Math.min(i + BYTES_PER_TOKEN, utf8.length);
          i < end; i++) {
        h = (h ^ (utf8[i] & 0xff)) * FNV_PRIME;
      }
      ids[t] = (int) Math.floorMod(mix(h), (long) VOCAB_SIZE);
    }
    return ids;
  }

  /**
   * A boolean field of a tokenizer request: left out or null is {@code otherwise}; anything but
   * true or false is refused naming the field.
   */
  private static boolean flag(JsonNode root, String field, boolean otherwise) throws BadRequest {
    JsonNode v = root.get(field);
    if (v == null || v.isNull()) {
      return otherwise;
    }
    if (!v.isBoolean()) {
      throw new BadRequest(400, "BadRequestError", "'" + field + "' must be a boolean", field);
    }
    return v.booleanValue();
  }

  /**
   * A request's body as a JSON object, or null once the request has been answered with the error:
   * 413 above the body limit, 400 when the body is not a JSON object.
   */
  private static @Nullable JsonNode jsonBody(HttpExchange ex) throws IOException {
    byte[] body = readBody(ex);
    if (body == null) {
      tooLarge(ex);
      return null;
    }
    try {
      return parse(body);
    } catch (BadRequest e) {
      error(ex, e.status, e.type, e.getMessage(), e.param);
      return null;
    }
  }

  /** A body read as a JSON object, as vLLM's request models read it. */
  private static JsonNode parse(byte[] body) throws BadRequest {
    JsonNode root;
    try {
      root = JSON.readTree(body);
    } catch (IOException e) {
      // never quote the body: it holds the prompt
      throw new BadRequest("request body is not valid JSON");
    }
    if (root == null || !root.isObject()) {
      throw new BadRequest("request body must be a JSON object");
    }
    return root;
  }

  // ----------------------------------------------------------------------------- generation

  /**
   * What one request asks for, read from its body; {@code finishReason} is how its answer ends:
   * "length" on a limit, "stop" where the stand-in ends it itself.
   */
  private record Ask(int promptTokens, long[] blocks, int maxTokens, String finishReason,
      boolean stream, boolean includeUsage, boolean continuousUsage) {}

  private void generate(HttpExchange ex, boolean chat) throws IOException {
    byte[] body = readBody(ex);
    if (body == null) {
      tooLarge(ex);
      return;
    }
    Ask ask;
    try {
      ask = read(body, chat);
    } catch (BadRequest e) {
      error(ex, e.status, e.type, e.getMessage(), e.param);
      return;
    }
    ClientWatch watch = new ClientWatch(ex);
    try {
      if (!admit(watch)) {
        aborted.incrementAndGet(); // as vLLM aborts a waiting request whose client left
        return;
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return;
    }
    running.incrementAndGet();
    Answer answer = null;
    try {
      int cached = cache.lookupAndInsert(ask.blocks()) * BLOCK_TOKENS;
      // vLLM recomputes at least the last prompt token, so a full hit is one token short
      cached = Math.max(0, Math.min(cached, ask.promptTokens() - 1));
      promptTokens.addAndGet(ask.promptTokens());
      prefixQueries.addAndGet(ask.promptTokens());
      prefixHits.addAndGet(cached);
      answer = new Answer(chat, "cmpl-" + ids.incrementAndGet(), ask, cached);
      boolean complete = ask.stream() ? stream(ex, answer, watch) : whole(ex, answer, watch);
      (complete ? finished : aborted).incrementAndGet();
      if (complete && ask.finishReason().equals("stop")) {
        stopped.incrementAndGet(); // after finished, so that a scrape never counts more stops
      }
    } finally {
      if (answer != null) {
        answer.releaseBlocks();
      }
      running.decrementAndGet();
      release();
    }
  }

  /**
   * The 413 of a body above the limit: the rest of it is not read, the server drains a little of
   * it, then closes the connection.
   */
  private static void tooLarge(HttpExchange ex) throws IOException {
    ex.getResponseHeaders().set("connection", "close");
    error(ex, 413, "BadRequestError", "request body is above the limit of "
        + PlainGateway.MAX_BODY_BYTES + " bytes", null);
    ex.getResponseBody().flush();
  }

  /** A request's place in the queue for a slot. */
  private static final class Ticket {
    boolean admitted;
  }

  /**
   * Takes a slot, waiting in arrival order while none is free; false, without a slot, when the
   * client leaves while its request waits.
   */
  private boolean admit(ClientWatch watch) throws InterruptedException {
    Ticket ticket = new Ticket();
    synchronized (admission) {
      if (freeSlots > 0 && queue.isEmpty()) {
        freeSlots--;
        return true;
      }
      queue.add(ticket);
      waiting.incrementAndGet();
    }
    boolean admitted = false;
    try {
      while (true) {
        synchronized (admission) {
          if (!ticket.admitted) {
            admission.wait(ClientWatch.PROBE_INTERVAL.toMillis());
          }
          if (ticket.admitted) {
            admitted = true;
            return true;
          }
        }
        if (watch.gone()) {
          return false;
        }
      }
    } finally {
      if (!admitted) {
        synchronized (admission) {
          if (ticket.admitted) {
            release(); // handed a slot just as it gave up: pass it on
          } else {
            queue.remove(ticket);
          }
        }
      }
      waiting.decrementAndGet();
    }
  }

  /** Frees a slot: the first waiting request takes it, or it stays free. */
  private void release() {
    synchronized (admission) {
      Ticket next = queue.poll();
      if (next == null) {
        freeSlots++;
      } else {
        next.admitted = true;
        admission.notifyAll();
      }
    }
  }

  /**
   * Whether a request's client closed its connection, learnt without writing to it or reading
   * from it. The JDK's HTTP server tells a handler nothing of the kind (it takes the connection
   * out of its selector while the handler runs), so the stand-in looks at the connection's socket
   * channel itself, through the server's internal fields: readable with no bytes to read is the
   * client's end of stream or a reset, as vLLM's web server takes a closed connection for a
   * disconnect. This needs {@code --add-opens jdk.httpserver/sun.net.httpserver=ALL-UNNAMED}
   * (the jar's manifest carries it); without it nothing is watched and a client that leaves is
   * noticed only when a write to it fails. Called only from the exchange's own thread, between
   * its writes.
   */
  static final class ClientWatch {
    /** How often a waiting or generating request looks at its connection. */
    static final Duration PROBE_INTERVAL = Duration.ofMillis(50);
    private static final java.lang.reflect.@Nullable Field IMPL;
    private static final java.lang.reflect.@Nullable Field CONNECTION;
    private static final java.lang.reflect.@Nullable Field CHANNEL;

    static {
      java.lang.reflect.Field impl = null;
      java.lang.reflect.Field connection = null;
      java.lang.reflect.Field channel = null;
      try {
        impl = Class.forName("sun.net.httpserver.HttpExchangeImpl").getDeclaredField("impl");
        connection = Class.forName("sun.net.httpserver.ExchangeImpl")
            .getDeclaredField("connection");
        channel = Class.forName("sun.net.httpserver.HttpConnection").getDeclaredField("chan");
        impl.setAccessible(true);
        connection.setAccessible(true);
        channel.setAccessible(true);
      } catch (ReflectiveOperationException | RuntimeException e) {
        impl = null; // not opened to this code, or another server: nothing is watched
      }
      IMPL = impl;
      CONNECTION = connection;
      CHANNEL = channel;
    }

    private final @Nullable SocketChannel channel;
    private long lastProbe = System.nanoTime();

    ClientWatch(HttpExchange ex) {
      this.channel = channelOf(ex);
    }

    /** Whether connections can be watched in this JVM. */
    static boolean enabled() {
      return IMPL != null;
    }

    private static @Nullable SocketChannel channelOf(HttpExchange ex) {
      if (IMPL == null || CONNECTION == null || CHANNEL == null
          || !IMPL.getDeclaringClass().isInstance(ex)) {
        return null;
      }
      try {
        return (SocketChannel) CHANNEL.get(CONNECTION.get(IMPL.get(ex)));
      } catch (ReflectiveOperationException | RuntimeException e) {
        return null;
      }
    }

    /** True once the client has closed its connection; looks at most every PROBE_INTERVAL. */
    boolean gone() {
      long now = System.nanoTime();
      if (channel == null || now - lastProbe < PROBE_INTERVAL.toNanos()) {
        return false;
      }
      lastProbe = now;
      try {
        channel.configureBlocking(false);
        try (Selector selector = Selector.open()) {
          channel.register(selector, SelectionKey.OP_READ);
          // bytes to read (a pipelined request) are left where they are
          return selector.selectNow() > 0 && channel.socket().getInputStream().available() == 0;
        } finally {
          channel.configureBlocking(true);
        }
      } catch (IOException | RuntimeException e) {
        return true; // reset, or closed under us
      }
    }
  }

  /**
   * The request body, or null when it is above the gateway's limit
   * ({@link PlainGateway#MAX_BODY_BYTES}): a declared length is checked before anything is read,
   * a chunked body is read only up to the limit, so that no client makes the server hold more.
   */
  private static byte @Nullable [] readBody(HttpExchange ex) throws IOException {
    String declared = ex.getRequestHeaders().getFirst("content-length");
    if (declared != null) {
      try {
        if (Long.parseLong(declared.strip()) > PlainGateway.MAX_BODY_BYTES) {
          return null;
        }
      } catch (NumberFormatException e) {
        // the HTTP server refuses a malformed length before the handler runs
      }
    }
    byte[] body = ex.getRequestBody().readNBytes(PlainGateway.MAX_BODY_BYTES + 1);
    return body.length > PlainGateway.MAX_BODY_BYTES ? null : body;
  }

  /** The answer being generated for one request. */
  private final class Answer {
    final boolean chat;
    final String id;
    final Ask ask;
    final int cachedTokens;
    final long created = System.currentTimeMillis() / 1000;
    /** Tokens generated so far. */
    int generated;
    /**
     * KV blocks this request holds alone, counted in {@code vllm:kv_cache_usage_perc}: those of
     * its generated tokens and the last, partial block of its prompt. The prompt's full blocks
     * are counted once however many running requests hold them ({@link #holdShared}).
     */
    long heldBlocks;

    Answer(boolean chat, String id, Ask ask, int cachedTokens) {
      this.chat = chat;
      this.id = id;
      this.ask = ask;
      this.cachedTokens = cachedTokens;
      holdShared(ask.blocks(), +1);
      holdBlocks();
    }

    /** The request ended: it holds no block any more. */
    void releaseBlocks() {
      blocksInUse.addAndGet(-heldBlocks);
      heldBlocks = 0;
      holdShared(ask.blocks(), -1);
    }

    /**
     * One more token generated: as in vLLM, a running request holds the blocks of its prompt and
     * of every token it generated so far, and a new block once the last one is full.
     */
    void produced() {
      generated++;
      generationTokens.incrementAndGet();
      holdBlocks();
    }

    private void holdBlocks() {
      long blocks = ceilDiv((long) ask.promptTokens() + generated, BLOCK_TOKENS)
          - ask.blocks().length;
      blocksInUse.addAndGet(blocks - heldBlocks);
      heldBlocks = blocks;
    }

    ObjectNode envelope(boolean chunk) {
      return JSON.createObjectNode()
          .put("id", (chat ? "chat" : "") + id)
          .put("object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
              : "text_completion")
          .put("created", created)
          .put("model", options.model());
    }

    /**
     * The answer's usage, as vLLM's: the cached prompt tokens only with
     * {@link Options#promptTokensDetails}; without it a whole answer, which vLLM writes with every
     * field of its usage model, has {@code "prompt_tokens_details": null}, and a stream's usage
     * chunk, written without its unset fields, has no such key.
     *
     * @param whole for a whole answer, not a stream's usage chunk
     */
    ObjectNode usage(boolean whole) {
      ObjectNode u = JSON.createObjectNode()
          .put("prompt_tokens", ask.promptTokens())
          .put("total_tokens", ask.promptTokens() + ask.maxTokens())
          .put("completion_tokens", ask.maxTokens());
      if (options.promptTokensDetails()) {
        u.putObject("prompt_tokens_details").put("cached_tokens", cachedTokens);
      } else if (whole) {
        u.putNull("prompt_tokens_details");
      }
      return u;
    }
  }

  /** A non-streaming answer: wait as long as generating every token takes, then send it. */
  private boolean whole(HttpExchange ex, Answer a, ClientWatch watch) throws IOException {
    StringBuilder text = new StringBuilder();
    for (int i = 0; i < a.ask.maxTokens(); i++) {
      // token by token, so that the blocks held grow as they would for a stream
      if (!pause(i == 0 ? options.ttft() : options.interTokenLatency(), watch)) {
        return false;
      }
      text.append(WORDS[i % WORDS.length]);
      a.produced();
    }
    ObjectNode body = a.envelope(false);
    ObjectNode choice = body.putArray("choices").addObject().put("index", 0);
    if (a.chat) {
      choice.putObject("message").put("role", "assistant").put("content", text.toString());
    } else {
      choice.put("text", text.toString());
    }
    choice.putNull("logprobs");
    choice.put("finish_reason", a.ask.finishReason());
    body.set("usage", a.usage(true));
    try {
      send(ex, 200, "application/json", body.toString());
      return true;
    } catch (IOException clientGone) {
      return false;
    }
  }

  /**
   * An SSE answer, one chunk per token, then (when asked for) vLLM's usage chunk with empty
   * choices, then {@code data: [DONE]}. Returns false when the client went away first.
   */
  private boolean stream(HttpExchange ex, Answer a, ClientWatch watch) throws IOException {
    ex.getResponseHeaders().set("content-type", "text/event-stream; charset=utf-8");
    ex.sendResponseHeaders(200, 0);
    OutputStream out = ex.getResponseBody();
    try {
      if (!pause(options.ttft(), watch)) {
        return false;
      }
      // as vLLM: with continuous_usage_stats (and the usage asked for), every chunk carries the
      // usage so far
      boolean continuous = a.ask.continuousUsage()
          && (a.ask.includeUsage() || options.forceIncludeUsage());
      if (a.chat) { // vLLM opens a chat stream with the assistant role and empty content
        ObjectNode first = a.envelope(true);
        ObjectNode c = first.putArray("choices").addObject().put("index", 0);
        c.putObject("delta").put("role", "assistant").put("content", "");
        c.putNull("logprobs");
        c.putNull("finish_reason");
        if (continuous) {
          first.set("usage", runningUsage(a.ask.promptTokens(), 0));
        }
        event(out, first.toString());
      }
      for (int i = 0; i < a.ask.maxTokens(); i++) {
        if (i > 0 && !pause(options.interTokenLatency(), watch)) {
          return false;
        }
        ObjectNode chunk = a.envelope(true);
        ObjectNode c = chunk.putArray("choices").addObject().put("index", 0);
        if (a.chat) {
          c.putObject("delta").put("content", WORDS[i % WORDS.length]);
        } else {
          c.put("text", WORDS[i % WORDS.length]);
        }
        c.putNull("logprobs");
        if (i == a.ask.maxTokens() - 1) {
          c.put("finish_reason", a.ask.finishReason());
        } else {
          c.putNull("finish_reason");
        }
        if (continuous) {
          chunk.set("usage", runningUsage(a.ask.promptTokens(), i + 1));
        }
        event(out, chunk.toString());
        a.produced();
      }
      if (a.ask.includeUsage() || options.forceIncludeUsage()) {
        ObjectNode last = a.envelope(true);
        last.putArray("choices");
        last.set("usage", a.usage(false));
        event(out, last.toString());
      }
      event(out, "[DONE]");
      return true;
    } catch (IOException clientGone) {
      return false; // vLLM aborts the request when its client disconnects; so does the stand-in
    }
  }

  private static ObjectNode runningUsage(int promptTokens, int completionTokens) {
    return JSON.createObjectNode()
        .put("prompt_tokens", promptTokens)
        .put("total_tokens", promptTokens + completionTokens)
        .put("completion_tokens", completionTokens);
  }

  private static void event(OutputStream out, String data) throws IOException {
    out.write(("data: " + data + "\n\n").getBytes(StandardCharsets.UTF_8));
    out.flush();
  }

  /**
   * Sleeps for the emulated time; false when the client left meanwhile (vLLM aborts the request
   * then) or the server is being stopped.
   */
  private static boolean pause(Duration d, ClientWatch watch) {
    long end = System.nanoTime() + d.toNanos();
    try {
      for (long left = d.toNanos(); left > 0; left = end - System.nanoTime()) {
        TimeUnit.NANOSECONDS.sleep(Math.min(left, ClientWatch.PROBE_INTERVAL.toNanos()));
        if (watch.gone()) {
          return false;
        }
      }
      return !watch.gone();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  // -------------------------------------------------------------------------- request body

  /** A request vLLM would refuse, with vLLM's status and error type. */
  private static final class BadRequest extends Exception {
    final int status;
    final String type;
    /** The request field at fault, as vLLM's {@code error.param}; null when none is. */
    final @Nullable String param;

    BadRequest(int status, String type, String message) {
      this(status, type, message, null);
    }

    BadRequest(int status, String type, String message, @Nullable String param) {
      super(message, null, false, false);
      this.status = status;
      this.type = type;
      this.param = param;
    }

    /** Never null: every constructor takes the message. */
    @Override
    public String getMessage() {
      return Objects.requireNonNull(super.getMessage());
    }

    BadRequest(String message) {
      this(400, "BadRequestError", message);
    }
  }

  /**
   * Request fields the stand-in does not honour: given (not null, false or empty), they are
   * refused. {@code ignore_eos} is not among them: the stand-in always generates up to its limit,
   * and with it a chat without a limit runs to the context's end.
   */
  static final List<String> NOT_HONOURED = List.of("echo", "suffix", "stop",
      "stop_token_ids", "include_stop_str_in_output", "logprobs", "top_logprobs",
      "prompt_logprobs", "best_of", "use_beam_search", "temperature", "top_p", "top_k", "min_p",
      "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "min_tokens",
      "logit_bias", "bad_words", "allowed_token_ids", "response_format", "structured_outputs");

  private Ask read(byte[] body, boolean chat) throws BadRequest {
    JsonNode root = parse(body);
    // a chat's tools as vLLM's request model checks them (check_tool_usage), in its words: an
    // empty tools array, and a tool_choice other than "none" without tools. A completion request
    // has no tools field, and vLLM ignores one there
    JsonNode tools = root.path("tools");
    if (chat && tools.isArray() && tools.isEmpty()) {
      throw new BadRequest(400, "BadRequestError", "`tools` must not be an empty array. Either"
          + " provide at least one tool or omit the field entirely. (parameter=tools)", "tools");
    }
    JsonNode toolChoice = root.path("tool_choice");
    if (chat && !toolChoice.isMissingNode() && !toolChoice.isNull()
        && !"none".equals(toolChoice.textValue()) && (tools.isMissingNode() || tools.isNull())) {
      throw new BadRequest(400, "BadRequestError", "When using `tool_choice`, `tools` must be"
          + " set. (parameter=tool_choice)", "tool_choice");
    }
    // a completion's prompt left out, null or "" without prompt embeds: vLLM's completion
    // request model refuses it first (validate_prompt_and_prompt_embeds, a plain ValueError that
    // names no param), before its stream options validator and the model
    if (!chat && promptMissing(root)) {
      throw new BadRequest(400, "BadRequestError",
          "Either prompt or prompt_embeds must be provided and non-empty.");
    }
    // vLLM's stream options validator, which runs before the model is looked at (for a chat
    // after its tools check, as vLLM's validators run the one defined last first), tests both
    // values for Python truth: an empty stream_options object passes. Its error names the
    // parameter, in the message as in param
    if (truthy(root.get("stream_options")) && !truthy(root.get("stream"))) {
      throw new BadRequest(400, "BadRequestError", "Stream options can only be defined when"
          + " `stream=True`. (parameter=stream_options)", "stream_options");
    }
    checkModel(root);
    // the stand-in answers one choice: n > 1 is refused rather than answered with one choice
    // (vLLM itself answers n choices; a gateway test that needs them needs a real server)
    JsonNode n = root.get("n");
    if (n != null && !n.isNull()) {
      if (!n.isIntegralNumber() || !n.canConvertToInt() || n.asInt() < 1) {
        throw new BadRequest(400, "BadRequestError", "'n' must be a positive integer", "n");
      }
      if (n.asInt() > 1) {
        throw new BadRequest(400, "BadRequestError",
            "'n' above 1 is not supported by the stand-in (it answers one choice)", "n");
      }
    }
    // the stand-in answers canned words: a field that would change the answer, or that vLLM
    // would check, is refused naming it rather than ignored (routing-sim's serve honours or
    // checks them as vLLM does)
    for (String field : NOT_HONOURED) {
      JsonNode v = root.get(field);
      if (v != null && !v.isNull() && !(v.isBoolean() && !v.booleanValue())
          && !(v.isContainerNode() && v.isEmpty())) {
        throw new BadRequest(400, "BadRequestError", "'" + field + "' is not supported by the"
            + " stand-in (it answers canned words); leave it out, or try routing-sim's serve",
            field);
      }
    }
    StringBuilder text = new StringBuilder();
    int[] tokenIds = null;
    if (chat) {
      text.append(chatText(root.get("messages"), true, false));
    } else {
      JsonNode prompt = root.get("prompt");
      if (prompt == null || prompt.isNull()) {
        // given prompt embeds instead, which the stand-in does not take
        throw new BadRequest("'prompt' is required");
      }
      if (prompt.isArray() && (prompt.isEmpty()
          || prompt.size() == 1 && prompt.get(0).isArray() && prompt.get(0).isEmpty())) {
        // [] or [[]]: valid to vLLM's request model; its engine refuses the empty prompt
        throw new BadRequest(400, "BadRequestError", "The decoder prompt cannot be empty");
      }
      if (prompt.isTextual()) {
        text.append(prompt.asText());
      } else if (prompt.isArray() && !prompt.isEmpty() && prompt.get(0).isInt()) {
        tokenIds = new int[prompt.size()];
        for (int i = 0; i < tokenIds.length; i++) {
          JsonNode id = prompt.get(i);
          if (!id.isIntegralNumber()) {
            throw new BadRequest("'prompt' must be a string or an array of token IDs");
          }
          if (!id.canConvertToInt() || id.asInt() < 0 || id.asInt() >= VOCAB_SIZE) {
            throw new BadRequest(400, "BadRequestError", "Token id " + id.asText()
                + " is out of vocabulary (0 to " + (VOCAB_SIZE - 1) + ")", "prompt");
          }
          tokenIds[i] = id.asInt();
        }
      } else if (prompt.isArray() && prompt.size() == 1 && prompt.get(0).isTextual()) {
        text.append(prompt.get(0).asText());
      } else {
        throw new BadRequest("'prompt' must be a string or an array of token IDs "
            + "(the stand-in serves one prompt per request)");
      }
    }
    byte[] utf8 = text.toString().getBytes(StandardCharsets.UTF_8);
    int promptTokens = tokenIds != null ? tokenIds.length
        : Math.max(1, ceilDiv(utf8.length, BYTES_PER_TOKEN));
    // as vLLM: a chat request's max_completion_tokens, unless null, else max_tokens; a completion
    // request has no max_completion_tokens field (vLLM ignores it there)
    String limitField = chat && !root.path("max_completion_tokens").isMissingNode()
        && !root.get("max_completion_tokens").isNull() ? "max_completion_tokens" : "max_tokens";
    JsonNode max = root.get(limitField);
    int maxTokens = 16;
    if (max != null && !max.isNull()) {
      if (!max.isIntegralNumber() || !max.canConvertToInt() || max.asInt() < 1) {
        throw new BadRequest(400, "BadRequestError",
            "'" + limitField + "' must be a positive integer", limitField);
      }
      maxTokens = max.asInt();
    }
    // vLLM's refusal of a request longer than the context, in current vLLM's words (clients
    // parse them for the room left): the prompt and the output tokens asked for (none without a
    // limit) over the context. vLLM tokenizes a text prompt no further than one token past the
    // room left, so it names that many "at least"; a prompt of token IDs is counted whole.
    int maxLen = options.maxModelLen();
    // a chat without a limit (left out or null) runs to the rest of the context; a completion's
    // max_tokens left out or null is its default of 16 (current vLLM's request model turns an
    // explicit null into the field's default)
    boolean noLimit = chat && (max == null || max.isNull());
    long asked = noLimit ? 0 : maxTokens;
    if (promptTokens + asked > maxLen) {
      boolean atLeast = tokenIds == null && asked <= maxLen;
      long counted = atLeast ? Math.min(promptTokens, maxLen - asked + 1) : promptTokens;
      String bound = atLeast ? "at least " : "";
      throw new BadRequest(400, "BadRequestError", "This model's maximum context length is "
          + maxLen + " tokens. However, you requested " + asked + " output tokens and your prompt"
          + " contains " + bound + counted + " input tokens, for a total of " + bound
          + (counted + asked) + " tokens. Please reduce the length of the input prompt or the"
          + " number of requested output tokens. (parameter=input_tokens, value=" + counted + ")",
          "input_tokens");
    }
    // as vLLM: "length" when the answer ends on a limit (max_tokens, a completion's default, the
    // context's end), "stop" when the model ends it itself
    String finishReason = "length";
    if (noLimit) {
      // vLLM's default for a chat is the rest of the context: there vLLM generates until the
      // model ends its answer ("stop"), which the stand-in does after its 16 canned tokens,
      // unless the context ends first; with ignore_eos the model never ends it, so vLLM
      // generates to the context's end
      if (truthy(root.get("ignore_eos"))) {
        maxTokens = maxLen - promptTokens;
      } else if (maxTokens < maxLen - promptTokens) {
        finishReason = "stop";
      }
      maxTokens = Math.min(maxTokens, maxLen - promptTokens);
      if (maxTokens < 1) {
        // a prompt that fills the context leaves no token, as vLLM then refuses
        throw new BadRequest(400, "BadRequestError", "max_tokens must be at least 1, got "
            + maxTokens + ". (parameter=max_tokens, value=" + maxTokens + ")", "max_tokens");
      }
    }
    boolean stream = root.path("stream").asBoolean(false);
    // vLLM's StreamOptions.include_usage defaults to true: stream_options that leave it out
    // ask for the usage chunk; an explicit false or null does not
    JsonNode streamOptions = root.path("stream_options");
    JsonNode includeUsageNode = streamOptions.path("include_usage");
    boolean includeUsage = streamOptions.isObject()
        && (includeUsageNode.isMissingNode() || includeUsageNode.asBoolean(false));
    long[] blocks = tokenIds != null ? blockHashes(tokenIds) : blockHashes(utf8);
    boolean continuousUsage = streamOptions.path("continuous_usage_stats").asBoolean(false);
    return new Ask(promptTokens, blocks, maxTokens, finishReason, stream, includeUsage,
        continuousUsage);
  }

  /**
   * A chat's messages in the stand-in's ChatML rendering, the text its tokens are counted from:
   * the same conversation gives the same text, so the same prefix blocks. With
   * {@code generationPrompt} the assistant's turn is opened at the end, as every chat completion
   * has it; with {@code continueFinal} the last message is left open, as vLLM's
   * {@code continue_final_message} leaves it.
   */
  private static String chatText(@Nullable JsonNode messages, boolean generationPrompt,
      boolean continueFinal) throws BadRequest {
    if (messages == null || !messages.isArray() || messages.isEmpty()) {
      throw new BadRequest("'messages' must be a non-empty array");
    }
    StringBuilder text = new StringBuilder();
    // a ChatML rendering, so that the same conversation gives the same prefix blocks
    for (int k = 0; k < messages.size(); k++) {
      JsonNode m = messages.get(k);
      // as vLLM's message types: an object with a string role; content optional, and when
      // given (not null) a string or a list of parts
      String at = "messages[" + k + "]";
      if (!m.isObject()) {
        throw new BadRequest(400, "BadRequestError", "'" + at + "' must be an object", at);
      }
      if (!m.path("role").isTextual()) {
        throw new BadRequest(400, "BadRequestError",
            "'" + at + ".role' is required and must be a string", at + ".role");
      }
      JsonNode content = m.path("content");
      if (!content.isMissingNode() && !content.isNull() && !content.isTextual()
          && !content.isArray()) {
        throw new BadRequest(400, "BadRequestError",
            "'" + at + ".content' must be a string or an array of content parts",
            at + ".content");
      }
      text.append("<|im_start|>").append(m.path("role").asText()).append('\n');
      if (content.isArray()) {
        for (int i = 0; i < content.size(); i++) {
          if (i > 0) {
            text.append('\n'); // as vLLM joins the parts for a string-content template
          }
          text.append(content.get(i).path("text").asText());
        }
      } else if (content.isTextual()) {
        text.append(content.asText());
      }
      if (!(continueFinal && k == messages.size() - 1)) {
        text.append("<|im_end|>\n");
      }
    }
    if (generationPrompt) {
      text.append("<|im_start|>assistant\n");
    }
    return text.toString();
  }

  /**
   * vLLM's model check: {@code model} must be a string when given, and one left out, null or
   * empty is the served model; another is a 404 naming {@code model} as its param, as current
   * vLLM's check names it.
   */
  private void checkModel(JsonNode root) throws BadRequest {
    checkModelType(root);
    JsonNode model = root.get("model");
    if (model != null && !model.isNull() && !model.asText().isEmpty()
        && !options.model().equals(model.asText())) {
      throw new BadRequest(404, "NotFoundError",
          "The model `" + model.asText() + "` does not exist.", "model");
    }
  }

  /** vLLM's request models declare model an optional string: anything else fails validation. */
  private static void checkModelType(JsonNode root) throws BadRequest {
    JsonNode model = root.get("model");
    if (model != null && !model.isNull() && !model.isTextual()) {
      throw new BadRequest(400, "BadRequestError", "'model' must be a string", "model");
    }
  }

  /**
   * Whether vLLM's completion request model refuses the body for its prompt: a prompt left out,
   * null or {@code ""}, and prompt embeds left out, null or {@code []}.
   */
  private static boolean promptMissing(JsonNode root) {
    JsonNode prompt = root.path("prompt");
    JsonNode embeds = root.path("prompt_embeds");
    boolean promptEmpty = prompt.isMissingNode() || prompt.isNull() || "".equals(prompt.textValue());
    boolean embedsEmpty = embeds.isMissingNode() || embeds.isNull()
        || embeds.isArray() && embeds.isEmpty();
    return promptEmpty && embedsEmpty;
  }

  /** Python's truth of a JSON value: null, false, 0, "" and empty containers are false. */
  private static boolean truthy(@Nullable JsonNode v) {
    if (v == null || v.isNull()) {
      return false;
    }
    if (v.isBoolean()) {
      return v.booleanValue();
    }
    if (v.isNumber()) {
      return v.doubleValue() != 0;
    }
    if (v.isTextual()) {
      return !v.textValue().isEmpty();
    }
    return !v.isEmpty();
  }

  /**
   * Chained hashes of the full 16-token blocks of a text prompt (64 bytes each at four bytes per
   * token): a block's hash covers everything before it, so equal hashes mean equal prefixes, as
   * in vLLM.
   */
  static long[] blockHashes(byte[] utf8) {
    int bytesPerBlock = BLOCK_TOKENS * BYTES_PER_TOKEN;
    long[] out = new long[utf8.length / bytesPerBlock];
    long h = SEED;
    for (int b = 0; b < out.length; b++) {
      for (int i = b * bytesPerBlock, end = i + bytesPerBlock; i < end; i++) {
        h = (h ^ (utf8[i] & 0xff)) * FNV_PRIME;
      }
      out[b] = h = mix(h);
    }
    return out;
  }

  /** The same for a prompt given as token IDs. */
  static long[] blockHashes(int[] tokens) {
    long[] out = new long[tokens.length / BLOCK_TOKENS];
    long h = SEED;
    for (int b = 0; b < out.length; b++) {
      for (int i = b * BLOCK_TOKENS, end = i + BLOCK_TOKENS; i < end; i++) {
        h = (h ^ tokens[i]) * FNV_PRIME;
      }
      out[b] = h = mix(h);
    }
    return out;
  }

  private static final long SEED = 0x6a09e667f3bcc909L;
  private static final long FNV_PRIME = 0x100000001b3L;

  private static long mix(long h) {
    h ^= h >>> 33;
    h *= 0xff51afd7ed558ccdL;
    return h ^ (h >>> 33);
  }

  /**
   * How many running requests hold each full prompt block, by its hash: as in vLLM, a block that
   * several running requests share through the prefix cache is one block of the KV cache.
   */
  private final Map<Long, Integer> sharedHolders = new HashMap<>();

  /** Adds ({@code +1}) or removes ({@code -1}) one holder of each of {@code hashes}. */
  private void holdShared(long[] hashes, int delta) {
    long change = 0;
    synchronized (sharedHolders) {
      for (long h : hashes) {
        if (delta > 0) {
          if (sharedHolders.merge(h, 1, Integer::sum) == 1) {
            change++;
          }
        } else if (sharedHolders.computeIfPresent(h, (k, n) -> n == 1 ? null : n - 1) == null) {
          change--;
        }
      }
      blocksInUse.addAndGet(change);
    }
  }

  /** vLLM's prefix cache, reduced to an LRU set of block hashes. */
  private static final class PrefixCache {
    private final int capacity;
    private final LinkedHashMap<Long, Boolean> blocks;

    PrefixCache(int capacity) {
      this.capacity = capacity;
      this.blocks = new LinkedHashMap<>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, Boolean> e) {
          return size() > PrefixCache.this.capacity;
        }
      };
    }

    /** Counts the leading blocks already cached, then caches all of them. */
    synchronized int lookupAndInsert(long[] hashes) {
      int hit = 0;
      while (hit < hashes.length && blocks.get(hashes[hit]) != null) {
        hit++;
      }
      for (long h : hashes) {
        blocks.put(h, Boolean.TRUE);
      }
      return hit;
    }
  }

  // ------------------------------------------------------------------------------- metrics

  /** Prometheus text under vLLM v1's names and labels. */
  String metricsText() {
    String model = labelValue(options.model());
    String l = "{engine=\"0\",model_name=\"" + model + "\"}";
    double kv = Math.min(1.0, blocksInUse.get() / (double) options.kvBlocks());
    StringBuilder sb = new StringBuilder(1024);
    gauge(sb, "vllm:num_requests_running", "Number of requests in model execution batches.", l,
        running.get());
    gauge(sb, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", l,
        waiting.get());
    gauge(sb, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, kv);
    counter(sb, "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.", l, prefixQueries.get());
    counter(sb, "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.", l, prefixHits.get());
    counter(sb, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", l,
        promptTokens.get());
    counter(sb, "vllm:generation_tokens_total", "Number of generation tokens processed.", l,
        generationTokens.get());
    // a series per finish reason, as vLLM creates them (one per value of its FinishReason:
    // stop, length, abort, error, repetition): the stand-in's answers end on stop or length. A
    // request whose client left is not counted under any: vLLM's abort path ends it without
    // recording finished-request stats
    String success = "vllm:request_success_total";
    sb.append("# HELP ").append(success).append(" Count of successfully processed requests.\n")
        .append("# TYPE ").append(success).append(" counter\n");
    long stops = stopped.get(); // before finished, which is counted first
    long lengths = finished.get() - stops;
    for (String reason : new String[] {"stop", "length", "abort", "error", "repetition"}) {
      sb.append(success).append("{engine=\"0\",finished_reason=\"").append(reason)
          .append("\",model_name=\"").append(model).append("\"} ")
          .append(reason.equals("length") ? (double) lengths
              : reason.equals("stop") ? (double) stops : 0.0).append('\n');
    }
    // vLLM writes the fields of its CacheConfig as labels, each as Python's str() writes it, in
    // name order: these are the ones the stand-in has a value for (its KV cache in the model's
    // own dtype, "auto"; vLLM's default GPU memory share; no block count override and no sliding
    // window), as routing-sim's serve writes them
    gauge(sb, "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
        "{block_size=\"" + BLOCK_TOKENS + "\",cache_dtype=\"auto\",enable_prefix_caching=\"True\""
            + ",engine=\"0\",gpu_memory_utilization=\"" + GPU_MEMORY_UTILIZATION + "\""
            + ",is_attention_free=\"False\",num_gpu_blocks=\"" + options.kvBlocks() + "\""
            + ",num_gpu_blocks_override=\"None\",sliding_window=\"None\"}", 1);
    return sb.toString();
  }

  /** Escapes a Prometheus label value. */
  private static String labelValue(String v) {
    return v.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n");
  }

  private static void gauge(StringBuilder sb, String name, String help, String labels, double v) {
    sb.append("# HELP ").append(name).append(' ').append(help).append('\n')
        .append("# TYPE ").append(name).append(" gauge\n")
        .append(name).append(labels).append(' ').append(v).append('\n');
  }

  private static void counter(StringBuilder sb, String name, String help, String labels, long v) {
    sb.append("# HELP ").append(name).append(' ').append(help).append('\n')
        .append("# TYPE ").append(name).append(" counter\n")
        .append(name).append(labels).append(' ').append((double) v).append('\n');
  }

  // -------------------------------------------------------------------------------- replies

  private static void error(HttpExchange ex, int status, String type, String message,
      @Nullable String param) throws IOException {
    ObjectNode e = JSON.createObjectNode();
    e.putObject("error").put("message", message).put("type", type).put("param", param);
    ((ObjectNode) e.get("error")).put("code", status);
    send(ex, status, "application/json", e.toString());
  }

  private static void send(HttpExchange ex, int status, String contentType, String body)
      throws IOException {
    send(ex, status, contentType, body.getBytes(StandardCharsets.UTF_8));
  }

  private static void send(HttpExchange ex, int status, String contentType, byte[] b)
      throws IOException {
    ex.getResponseHeaders().set("content-type", contentType);
    ex.sendResponseHeaders(status, b.length);
    ex.getResponseBody().write(b);
  }

  private static int ceilDiv(long a, int b) {
    return (int) ((a + b - 1) / b);
  }
}
