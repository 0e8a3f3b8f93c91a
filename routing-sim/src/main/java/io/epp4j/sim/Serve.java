package io.epp4j.sim;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.kvevents.DefaultChatTemplateKwargs;
import io.epp4j.kvevents.HuggingFaceTokenizer;
import io.epp4j.kvevents.Tokenizer;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.jspecify.annotations.Nullable;
import org.zeromq.ZContext;

/**
 * The {@code serve} command: N emulated vLLM replicas on loopback, driven by the simulator's
 * replica model on a wall clock ({@link EmulatedCluster}). Replica {@code i} serves HTTP on
 * {@code port + i} ({@link EmulatedServer}) and publishes KV events on
 * {@code kvEventsPort + 2i} with replay on {@code kvEventsPort + 2i + 1} ({@link KvEventPublisher}).
 * Text prompts go through the Hugging Face tokenizer named by {@code --tokenizer}, or else through
 * {@link EmulatedServer#tokenize(String)}'s documented stand-in.
 */
final class Serve implements AutoCloseable {
  static final int DEFAULT_KV_EVENTS_PORT = 25557;
  /**
   * Seconds an idle keep-alive connection stays open: vLLM's HTTP server closes it after 5
   * ({@code VLLM_HTTP_TIMEOUT_KEEP_ALIVE}, uvicorn's {@code timeout_keep_alive}).
   */
  static final double DEFAULT_KEEP_ALIVE_SECONDS = 5;

  static final String USAGE = """
      usage: routing-sim serve --replicas N --port P [options]

      Starts N emulated vLLM replicas on 127.0.0.1, each driven in real time by the simulator's
      replica model. Replica i serves HTTP on P+i and publishes KV events on K+2i (replay K+2i+1),
      topic kv@127.0.0.1:<P+i>@<model>. Stops on SIGTERM or Ctrl-C: new requests get 503,
      requests in flight end, every port is released, "stopped" is printed and the JVM exits
      with status 143 (SIGTERM) or 130 (Ctrl-C).

        Each option is given once; a bad value stops the start with exit code 2.

        --replicas N           replicas to start (1..64)
        --port P               HTTP port of replica 0
        --kv-events-port K     KV event port of replica 0 (default 25557)
        --kv-events-encoding E array (vLLM's default) or map
        --kv-events-replay-bytes B
                               bytes of KV event batches each replica keeps for replay
                               (default 64m; k, m, g suffixes are KiB, MiB, GiB; 0 keeps
                               none), besides vLLM's bound of 10,000 batches: the oldest go
                               first, and a replay from a sequence no longer kept starts at
                               the oldest one kept, as vLLM's does
        --speed X              emulated seconds per wall-clock second, 0.001 to 10000
                               (default 1)
        --profile NAME         hardware profile (default qwen3-1.7b-h100-mps6)
        --seed S               seed of the filler output tokens (default 1)
        --lora-adapters A,B    LoRA adapter names also served (a request names one in 'model');
                               their blocks hash apart and their KV events carry lora_name.
                               NAME=PATH, as vLLM's --lora-modules, also gives the adapter's
                               path, which /v1/models names as its root (vLLM's); an adapter
                               without one has its name there
        --max-loras N          adapters one engine step may run (default 1, as vLLM's
                               --max-loras): a request on another adapter waits in the queue
                               until the running ones finish, and requests behind it on a
                               running adapter or the base model go first; needs --lora-adapters
        --tokenizer PATH       a Hugging Face tokenizer.json, or the directory holding it (and
                               optionally tokenizer_config.json or chat_template.jinja, whose
                               Jinja chat template renders chats): text prompts, chats and /tokenize use it, so
                               token counts, block hashes and KV events are the model's. Without
                               it, a deterministic stand-in gives one token per word.
        --default-chat-template-kwargs JSON
                               as vLLM's flag: a JSON object of chat template variables
                               (e.g. '{"enable_thinking": false}') every chat is rendered
                               with, under the request's own chat_template_kwargs (a request
                               key wins unless its value is null or "auto"); needs --tokenizer
        --exclude-tools-when-tool-choice-none
                               as vLLM's flag (no value): a chat whose tool_choice is "none" is
                               rendered without its tools; needs --tokenizer
        --enable-prompt-tokens-details
                               as vLLM's flag (no value): usage names the prompt tokens found
                               in the prefix cache, prompt_tokens_details.cached_tokens; off,
                               as in vLLM, a whole answer's usage has "prompt_tokens_details":
                               null and a stream's usage chunk no such key (load's hit% needs it)
        --enable-force-include-usage
                               as vLLM's flag (no value): every stream ends with the usage
                               chunk, with or without stream_options, whatever their
                               include_usage says
        --keep-alive-timeout S seconds a keep-alive connection may stay idle (no request
                               being read or answered) before the server closes it, on the
                               wall clock whatever --speed is; vLLM's default (5), 0 to
                               keep idle connections open until the client closes them
                               (a positive value is at least 0.001)
        --max-held-body-bytes B
                               bytes of request bodies held at once over every replica and
                               connection (default 256m, at least 64m; k, m, g suffixes): a
                               request whose body does not fit waits, its connection unread,
                               until bodies read before it have been parsed
      """;

  /**
   * Parsed {@code serve} options.
   *
   * @param tokenizer a {@code tokenizer.json} or the directory holding it; {@code null} for the
   *                  stand-in tokenizer
   * @param keepAliveSeconds how long an idle keep-alive connection stays open (wall clock);
   *                  0 for as long as its client keeps it
   * @param maxLoras  LoRA adapters one engine step may run (vLLM's {@code --max-loras})
   * @param replayBufferBytes bytes of KV event batches each replica keeps for replay
   * @param maxHeldBodyBytes bytes of request bodies held at once over every replica and
   *                  connection; a request that does not fit waits, its connection unread
   * @param defaultChatTemplateKwargs vLLM's {@code --default-chat-template-kwargs}: chats are
   *                  rendered with these under each request's own {@code chat_template_kwargs};
   *                  {@code null} for none
   * @param excludeToolsWhenToolChoiceNone vLLM's {@code --exclude-tools-when-tool-choice-none}:
   *                  a chat whose {@code tool_choice} is {@code "none"} is rendered without its
   *                  {@code tools}
   * @param enablePromptTokensDetails vLLM's {@code --enable-prompt-tokens-details}: usage names
   *                  the prompt tokens found in the prefix cache
   *                  ({@code prompt_tokens_details.cached_tokens})
   * @param enableForceIncludeUsage vLLM's {@code --enable-force-include-usage}: every stream
   *                  ends with the usage chunk, asked for or not
   * @param loraPaths the path of each adapter given one ({@code NAME=PATH}), by name: an
   *                  adapter's {@code root} in {@code /v1/models}, as vLLM names its path there
   */
  record Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
      HardwareProfile profile, long seed, List<String> loraAdapters, @Nullable Path tokenizer,
      double keepAliveSeconds, int maxLoras, long replayBufferBytes, long maxHeldBodyBytes,
      @Nullable DefaultChatTemplateKwargs defaultChatTemplateKwargs,
      boolean excludeToolsWhenToolChoiceNone, boolean enablePromptTokensDetails,
      boolean enableForceIncludeUsage, Map<String, String> loraPaths) {
    Options {
      loraAdapters = List.copyOf(loraAdapters);
      loraPaths = Map.copyOf(loraPaths);
      for (String adapter : loraPaths.keySet()) {
        if (!loraAdapters.contains(adapter)) {
          throw new IllegalArgumentException("--lora-adapters: a path is given for " + adapter
              + ", which is not among the adapters " + loraAdapters);
        }
      }
      // here, before anything is made: the cluster's own check came after the ZeroMQ context,
      // which stayed open (four file descriptors per refused start)
      if (replicas < 1) {
        throw new IllegalArgumentException("--replicas must be at least 1, got " + replicas);
      }
      if (!(speed >= MIN_SPEED && speed <= MAX_SPEED)) {
        throw new IllegalArgumentException("--speed must be in [" + MIN_SPEED + ", "
            + (long) MAX_SPEED + "], got " + speed);
      }
      if (maxHeldBodyBytes < BodyBudget.MIN_BYTES || maxHeldBodyBytes > MAX_REPLAY_BUFFER_BYTES) {
        throw new IllegalArgumentException("--max-held-body-bytes must be in ["
            + BodyBudget.MIN_BYTES + " (the largest body, 64m), " + MAX_REPLAY_BUFFER_BYTES
            + "] bytes, got " + maxHeldBodyBytes);
      }
      if (replayBufferBytes < 0 || replayBufferBytes > MAX_REPLAY_BUFFER_BYTES) {
        throw new IllegalArgumentException("--kv-events-replay-bytes must be in [0, "
            + MAX_REPLAY_BUFFER_BYTES + "], got " + replayBufferBytes);
      }
      if (!(keepAliveSeconds >= 0) || keepAliveSeconds > MAX_KEEP_ALIVE_SECONDS) {
        throw new IllegalArgumentException("--keep-alive-timeout must be in [0, "
            + (long) MAX_KEEP_ALIVE_SECONDS + "] seconds, got " + keepAliveSeconds);
      }
      if (keepAliveSeconds > 0 && keepAliveSeconds < MIN_KEEP_ALIVE_SECONDS) {
        // a timeout this short would round to 0 ns, which means "never close"
        throw new IllegalArgumentException("--keep-alive-timeout must be 0 (never close) or at"
            + " least " + MIN_KEEP_ALIVE_SECONDS + " seconds, got " + keepAliveSeconds);
      }
      if (defaultChatTemplateKwargs != null && tokenizer == null) {
        // the stand-in renders no template: the defaults would change nothing
        throw new IllegalArgumentException("--default-chat-template-kwargs needs --tokenizer,"
            + " whose chat template reads them");
      }
      if (excludeToolsWhenToolChoiceNone && tokenizer == null) {
        // the stand-in renders no tools: the flag would change nothing
        throw new IllegalArgumentException("--exclude-tools-when-tool-choice-none needs"
            + " --tokenizer, whose chat template renders the tools");
      }
      if (maxLoras < 1 || maxLoras > MAX_LORAS) {
        throw new IllegalArgumentException("--max-loras must be in [1, " + MAX_LORAS + "], got "
            + maxLoras);
      }
    }

    /** Without adapter paths: each adapter's {@code root} in /v1/models is its name. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, List<String> loraAdapters, @Nullable Path tokenizer,
        double keepAliveSeconds, int maxLoras, long replayBufferBytes, long maxHeldBodyBytes,
        @Nullable DefaultChatTemplateKwargs defaultChatTemplateKwargs,
        boolean excludeToolsWhenToolChoiceNone, boolean enablePromptTokensDetails,
        boolean enableForceIncludeUsage) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, loraAdapters,
          tokenizer, keepAliveSeconds, maxLoras, replayBufferBytes, maxHeldBodyBytes,
          defaultChatTemplateKwargs, excludeToolsWhenToolChoiceNone, enablePromptTokensDetails,
          enableForceIncludeUsage, Map.of());
    }

    /** A stream's usage chunk only when the request asks for it, as vLLM's by default. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, List<String> loraAdapters, @Nullable Path tokenizer,
        double keepAliveSeconds, int maxLoras, long replayBufferBytes, long maxHeldBodyBytes,
        @Nullable DefaultChatTemplateKwargs defaultChatTemplateKwargs,
        boolean excludeToolsWhenToolChoiceNone, boolean enablePromptTokensDetails) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, loraAdapters,
          tokenizer, keepAliveSeconds, maxLoras, replayBufferBytes, maxHeldBodyBytes,
          defaultChatTemplateKwargs, excludeToolsWhenToolChoiceNone, enablePromptTokensDetails,
          false);
    }

    /** Usage without prompt_tokens_details, as vLLM's by default. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, List<String> loraAdapters, @Nullable Path tokenizer,
        double keepAliveSeconds, int maxLoras, long replayBufferBytes, long maxHeldBodyBytes,
        @Nullable DefaultChatTemplateKwargs defaultChatTemplateKwargs,
        boolean excludeToolsWhenToolChoiceNone) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, loraAdapters,
          tokenizer, keepAliveSeconds, maxLoras, replayBufferBytes, maxHeldBodyBytes,
          defaultChatTemplateKwargs, excludeToolsWhenToolChoiceNone, false);
    }

    /** Rendering a chat's tools whatever its tool_choice, as vLLM does by default. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, List<String> loraAdapters, @Nullable Path tokenizer,
        double keepAliveSeconds, int maxLoras, long replayBufferBytes, long maxHeldBodyBytes,
        @Nullable DefaultChatTemplateKwargs defaultChatTemplateKwargs) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, loraAdapters,
          tokenizer, keepAliveSeconds, maxLoras, replayBufferBytes, maxHeldBodyBytes,
          defaultChatTemplateKwargs, false);
    }

    /** Without default chat template kwargs. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, List<String> loraAdapters, @Nullable Path tokenizer,
        double keepAliveSeconds, int maxLoras, long replayBufferBytes, long maxHeldBodyBytes) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, loraAdapters,
          tokenizer, keepAliveSeconds, maxLoras, replayBufferBytes, maxHeldBodyBytes, null);
    }

    /** With the default bound of request bodies held at once. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, List<String> loraAdapters, @Nullable Path tokenizer,
        double keepAliveSeconds, int maxLoras, long replayBufferBytes) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, loraAdapters,
          tokenizer, keepAliveSeconds, maxLoras, replayBufferBytes, BodyBudget.DEFAULT_BYTES);
    }

    /** With the default replay buffer bound. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, List<String> loraAdapters, @Nullable Path tokenizer,
        double keepAliveSeconds, int maxLoras) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, loraAdapters,
          tokenizer, keepAliveSeconds, maxLoras, KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES);
    }

    /** With vLLM's default of one adapter per step. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, List<String> loraAdapters, @Nullable Path tokenizer,
        double keepAliveSeconds) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, loraAdapters,
          tokenizer, keepAliveSeconds, DEFAULT_MAX_LORAS);
    }

    /** With vLLM's keep-alive timeout. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, List<String> loraAdapters, @Nullable Path tokenizer) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, loraAdapters,
          tokenizer, DEFAULT_KEEP_ALIVE_SECONDS);
    }

    /** Without LoRA adapters, with the stand-in tokenizer. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, List.of(), null);
    }

    /** With LoRA adapters and the stand-in tokenizer. */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, List<String> loraAdapters) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, loraAdapters, null);
    }

    /** Without LoRA adapters, with a Hugging Face tokenizer (or the stand-in for null). */
    Options(int replicas, int port, int kvEventsPort, boolean mapEncoding, double speed,
        HardwareProfile profile, long seed, @Nullable Path tokenizer) {
      this(replicas, port, kvEventsPort, mapEncoding, speed, profile, seed, List.of(), tokenizer);
    }
  }

  /** vLLM's default {@code --max-loras}. */
  static final int DEFAULT_MAX_LORAS = 1;
  /** Largest {@code --max-loras}. */
  static final int MAX_LORAS = 1024;

  /**
   * Smallest {@code --speed}: a thousand wall seconds per emulated second. Slower, a step of
   * milliseconds would take hours, and far below it wall times overflow.
   */
  static final double MIN_SPEED = 0.001;
  /**
   * Largest {@code --speed}: an emulated step of 2 ms is then 0.2 µs of wall time, below what the
   * driver's clock and scheduling can keep to; far above it emulated times overflow.
   */
  static final double MAX_SPEED = 10_000;

  /**
   * Seconds a stop waits, over every replica, for the answers it ended to reach their sockets: a
   * client that reads nothing does not hold the stop up longer.
   */
  static final long DRAIN_SECONDS = 5;

  /** Largest {@code --kv-events-replay-bytes}: 1 TiB. */
  static final long MAX_REPLAY_BUFFER_BYTES = 1L << 40;

  /**
   * Refuses HTTP and KV-event port ranges of {@code replicas} replicas that leave 65535 or that
   * overlap (the emulator's own KV sockets would take an HTTP port first, and the start would fail
   * as if another process held it), naming the two settings as the caller calls them.
   */
  static void checkPorts(int replicas, int port, int kvPort, String portName, String kvName) {
    if (port + replicas - 1 > 65535) {
      throw new IllegalArgumentException(portName + " " + port + " leaves no room for " + replicas
          + " replicas");
    }
    if (kvPort + 2 * replicas - 1 > 65535) {
      throw new IllegalArgumentException(kvName + " " + kvPort + " leaves no room for "
          + replicas + " replicas");
    }
    if (port <= kvPort + 2 * replicas - 1 && kvPort <= port + replicas - 1) {
      throw new IllegalArgumentException(portName + " " + port + " and " + kvName + " " + kvPort
          + " overlap: " + replicas + " replicas use HTTP ports " + port + ".."
          + (port + replicas - 1) + " and KV event ports " + kvPort + ".."
          + (kvPort + 2 * replicas - 1));
    }
  }

  /** Smallest positive {@code --keep-alive-timeout}: a millisecond. */
  static final double MIN_KEEP_ALIVE_SECONDS = 0.001;

  /** Largest {@code --keep-alive-timeout}: a day. */
  static final double MAX_KEEP_ALIVE_SECONDS = 86_400;

  private final ZContext zmq;
  private final EmulatedCluster cluster;
  private final List<EmulatedServer> servers = new ArrayList<>();
  // read by the engine's driver thread while later replicas may still be starting
  private final List<KvEventPublisher> publishers = new CopyOnWriteArrayList<>();
  private final Options options;
  private final @Nullable Tokenizer tokenizer;
  private volatile boolean closing;

  /**
   * Starts every replica, or none: a port that cannot be bound closes what was started.
   *
   * @throws IllegalStateException naming the port that could not be bound, or naming
   *     {@code --tokenizer} when its tokenizer cannot be loaded
   */
  Serve(Options o) {
    this.options = o;
    // first, so that a bad tokenizer path fails before any port is taken
    Tokenizer tok = o.tokenizer() == null ? null : loadTokenizer(o.tokenizer());
    DefaultChatTemplateKwargs defaults = o.defaultChatTemplateKwargs();
    if (tok != null && defaults != null) {
      tok = new WithDefaultKwargs(tok, defaults);
    }
    this.tokenizer = tok;
    ZContext context = new ZContext(1);
    this.zmq = context;
    // A listener socket may still be finishing on JeroMQ's I/O thread when the context is
    // terminated; what it throws then belongs to the shutdown. Anything else is reported.
    Thread.UncaughtExceptionHandler zmqErrors = (t, e) -> {
      if (!closing) {
        System.err.println("error: KV event publisher: " + e);
      }
    };
    zmq.setUncaughtExceptionHandler(zmqErrors);
    zmq.setNotificationExceptionHandler(zmqErrors);
    List<KvEventPublisher> pubs = publishers;
    try {
      this.cluster = new EmulatedCluster(o.profile(), o.replicas(), o.speed(), o.seed(),
          (i, events) -> pubs.get(i).publish(events));
    } catch (RuntimeException e) {
      // nothing else is running yet: what was made so far goes with the failure
      context.close();
      if (tok != null) {
        tok.close();
      }
      throw e;
    }
    if (!o.loraAdapters().isEmpty()) {
      cluster.maxLoras(o.maxLoras());
    }
    BodyBudget bodies = new BodyBudget(o.maxHeldBodyBytes());
    try {
      for (int i = 0; i < o.replicas(); i++) {
        int httpPort = o.port() + i;
        String topic = "kv@127.0.0.1:" + httpPort + "@" + o.profile().model();
        publishers.add(new KvEventPublisher(zmq, topic, o.kvEventsPort() + 2 * i,
            o.kvEventsPort() + 2 * i + 1, o.mapEncoding(), o.replayBufferBytes()));
        servers.add(new EmulatedServer(cluster, i, httpPort, o.loraAdapters(), tokenizer,
            Math.round(o.keepAliveSeconds() * 1e9), bodies, o.excludeToolsWhenToolChoiceNone(),
            o.enablePromptTokensDetails(), o.enableForceIncludeUsage(), o.loraPaths()));
      }
    } catch (RuntimeException e) {
      close();
      throw e;
    }
  }

  /**
   * The option that moves a port that could not be bound, for the command line's message (the
   * ports are derived from two base options, so the port alone does not say which to change).
   */
  static String portHint(String message) {
    if (message.startsWith("HTTP port")) {
      return " (replica i serves HTTP on --port P + i: give --port another base)";
    }
    if (message.startsWith("KV event")) {
      return " (replica i publishes KV events on --kv-events-port K + 2i and replays on K + 2i + 1:"
          + " give --kv-events-port another base)";
    }
    return "";
  }

  EmulatedCluster cluster() {
    return cluster;
  }

  /** One line per replica naming its addresses. */
  List<String> describe() {
    List<String> lines = new ArrayList<>();
    for (int i = 0; i < options.replicas(); i++) {
      int k = options.kvEventsPort() + 2 * i;
      lines.add("replica " + i + ": http://127.0.0.1:" + (options.port() + i)
          + " kv-events tcp://127.0.0.1:" + k + " replay tcp://127.0.0.1:" + (k + 1)
          + " topic kv@127.0.0.1:" + (options.port() + i) + "@" + options.profile().model());
    }
    return lines;
  }

  /**
   * Closes replica {@code i}'s HTTP server as a crash would: its port refuses connections and
   * its requests in flight break off. The other replicas go on.
   */
  void kill(int i) {
    servers.get(i).close();
  }

  Options options() {
    return options;
  }

  /** Requests replica {@code i}'s HTTP server has read so far. */
  long requestsRead(int i) {
    return servers.get(i).requestsRead();
  }

  /** Every replica answers new requests with 503 from now on (the first half of a shutdown). */
  void stopAccepting() {
    for (EmulatedServer s : servers) {
      s.beginStopping();
    }
  }

  /**
   * New requests get 503 from now on; in-flight ones are aborted (a stream ends with an error
   * event and {@code data: [DONE]}, written to its socket before the connection closes, for up to
   * {@link #DRAIN_SECONDS} in all), then everything closes.
   */
  @Override
  public void close() {
    closing = true;
    stopAccepting();
    cluster.close();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(DRAIN_SECONDS);
    for (EmulatedServer s : servers) {
      s.drain(deadline);
    }
    for (EmulatedServer s : servers) {
      s.close();
    }
    for (KvEventPublisher p : publishers) {
      p.close();
    }
    zmq.close();
    if (tokenizer != null) {
      tokenizer.close();
    }
  }

  /**
   * Loads the Hugging Face tokenizer of {@code --tokenizer}: a {@code tokenizer.json} file, or a
   * directory holding one (with {@code tokenizer_config.json} or {@code chat_template.jinja} for
   * the chat template).
   *
   * @throws IllegalStateException naming {@code --tokenizer}, the path and what is wrong
   */
  static Tokenizer loadTokenizer(Path path) {
    String what = "--tokenizer " + path;
    if (!Files.exists(path)) {
      throw new IllegalStateException(what + ": no such file or directory");
    }
    Path absolute = path.toAbsolutePath();
    boolean isDirectory = Files.isDirectory(absolute);
    Path dir = isDirectory ? absolute : absolute.getParent();
    if (dir == null || (!isDirectory
        && !String.valueOf(absolute.getFileName()).equals("tokenizer.json"))) {
      throw new IllegalStateException(what + ": expected a file named tokenizer.json or the"
          + " directory holding it");
    }
    if (isDirectory && !Files.exists(dir.resolve("tokenizer.json"))) {
      throw new IllegalStateException(what + ": the directory holds no tokenizer.json");
    }
    Path json = dir.resolve("tokenizer.json");
    if (!Files.isRegularFile(json) || !Files.isReadable(json)) {
      throw new IllegalStateException(what + ": " + json + " cannot be read");
    }
    try {
      return HuggingFaceTokenizer.load(dir);
    } catch (IOException | RuntimeException e) {
      throw new IllegalStateException(what + ": cannot load the tokenizer: " + e.getMessage(), e);
    } catch (LinkageError e) {
      // DJL's classes or its native library missing from the class path
      throw new IllegalStateException(what + ": the Hugging Face tokenizer library cannot be"
          + " loaded: " + e, e);
    }
  }

  /** Runs the command until the JVM is told to stop; returns the exit code. */
  static int run(String[] args, PrintStream out, PrintStream err) {
    Options o;
    try {
      o = parse(args);
    } catch (IllegalArgumentException e) {
      err.println("error: " + e.getMessage());
      err.print(USAGE);
      return 2;
    }
    if (o == null) {
      out.print(USAGE);
      return 0;
    }
    if (o.tokenizer() != null && System.getProperty("slf4j.internal.verbosity") == null) {
      // DJL logs through SLF4J, which the runnable jar gives no backend: without this, SLF4J
      // warns about the missing one on stderr at every start with --tokenizer
      System.setProperty("slf4j.internal.verbosity", "ERROR");
    }
    Serve serve;
    try {
      serve = new Serve(o);
    } catch (IllegalStateException e) {
      err.println("error: " + e.getMessage() + portHint(String.valueOf(e.getMessage())));
      return 1;
    }
    CountDownLatch stopped = new CountDownLatch(1);
    // The JVM runs this on SIGTERM or Ctrl-C and then exits with 128 + the signal's number
    // (143, 130): main's own exit waits behind the shutdown already under way.
    Thread hook = new Thread(() -> {
      serve.close();
      out.printf("stopped %d emulated replicas; every port is released%n", o.replicas());
      out.flush();
      stopped.countDown();
    }, "epp4j-emulator-shutdown");
    Runtime.getRuntime().addShutdownHook(hook);
    out.printf("serving %d emulated replicas of %s (profile %s, speed %sx, tokenizer %s)%n",
        o.replicas(), o.profile().model(), o.profile().name(), o.speed(),
        o.tokenizer() == null ? "stand-in, one token per word" : o.tokenizer());
    for (String line : serve.describe()) {
      out.println(line);
    }
    out.flush();
    try {
      stopped.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    return 0;
  }

  /** vLLM's flag of that name, which takes no value. */
  static final String EXCLUDE_TOOLS = "--exclude-tools-when-tool-choice-none";
  /** vLLM's flag of that name, which takes no value. */
  static final String PROMPT_TOKENS_DETAILS = "--enable-prompt-tokens-details";
  /** vLLM's flag of that name, which takes no value. */
  static final String FORCE_INCLUDE_USAGE = "--enable-force-include-usage";
  /** The options of {@code serve} that take no value, as vLLM's flags of those names. */
  static final Set<String> FLAGS = Set.of(EXCLUDE_TOOLS, PROMPT_TOKENS_DETAILS,
      FORCE_INCLUDE_USAGE);

  /** The options of {@code serve}, each taking a value (the cases of {@link #parse}). */
  static final Set<String> OPTIONS = Set.of("--replicas", "--port", "--kv-events-port",
      "--kv-events-encoding", "--kv-events-replay-bytes", "--speed", "--profile",
      "--lora-adapters", "--seed", "--tokenizer", "--max-loras", "--keep-alive-timeout",
      "--max-held-body-bytes", "--default-chat-template-kwargs");

  /** Parses the options after {@code serve}; null when help was asked for. */
  static @Nullable Options parse(String[] args) {
    int replicas = -1;
    int port = -1;
    int kvPort = DEFAULT_KV_EVENTS_PORT;
    boolean map = false;
    double speed = 1;
    HardwareProfile profile = HardwareProfile.qwen3H100Mps6();
    long seed = 1;
    List<String> lora = List.of();
    Map<String, String> loraPaths = new java.util.HashMap<>();
    Path tokenizer = null;
    double keepAlive = DEFAULT_KEEP_ALIVE_SECONDS;
    Integer maxLoras = null;
    long replayBytes = KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES;
    long heldBodyBytes = BodyBudget.DEFAULT_BYTES;
    DefaultChatTemplateKwargs defaultKwargs = null;
    boolean excludeTools = false;
    boolean promptTokensDetails = false;
    boolean forceIncludeUsage = false;
    java.util.Map<String, String> given = new java.util.HashMap<>();
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      if (a.equals("--help") || a.equals("-h")) {
        return null;
      }
      if (!a.startsWith("--")) {
        // -x is an option serve does not know; -3 (no option's value here) or a word is stray
        throw new IllegalArgumentException(Main.Options.isSingleDashOption(a)
            ? "unknown option " + a : "unexpected argument '" + a + "'");
      }
      String name = a;
      String v;
      int eq = a.indexOf('=');
      if (FLAGS.contains(a)) {
        // vLLM's flags take no value
        v = "";
      } else if (eq > 0 && FLAGS.contains(a.substring(0, eq))) {
        throw new IllegalArgumentException(a.substring(0, eq) + " takes no value, got " + a);
      } else if (a.startsWith("--") && eq > 0) {
        name = a.substring(0, eq);
        v = a.substring(eq + 1);
      } else {
        if (i + 1 >= args.length) {
          throw new IllegalArgumentException(OPTIONS.contains(a) ? a + " needs a value"
              : "unknown option " + a);
        }
        String next = args[i + 1];
        if (next.startsWith("--") || next.equals("-h") || Main.Options.isSingleDashOption(next)) {
          // not this option's value: "--lora-adapters --enable-prompt-tokens-details" served an
          // adapter of that name and left the flag off, "--lora-adapters -x" one named -x (a
          // negative number, "--port -1", is a value, refused by its range)
          throw new IllegalArgumentException(OPTIONS.contains(a) ? a + " needs a value"
              + Main.Options.followedByOption(a, next) : "unknown option " + a);
        }
        v = args[++i];
      }
      String before = given.put(name, v);
      if (before != null) {
        // the last one would win silently
        throw new IllegalArgumentException(name + " is given twice ('" + before + "' and '" + v
            + "'); give it once");
      }
      switch (name) {
        case "--replicas" -> replicas = intArg(name, v, 1, 64);
        case "--port" -> port = intArg(name, v, 1, 65535);
        case "--kv-events-port" -> kvPort = intArg(name, v, 1, 65535);
        case "--kv-events-encoding" -> {
          if (!v.equals("array") && !v.equals("map")) {
            throw new IllegalArgumentException("--kv-events-encoding must be array or map, got "
                + v);
          }
          map = v.equals("map");
        }
        case "--speed" -> {
          if (!isDecimal(v)) {
            throw new IllegalArgumentException("--speed must be a number, got " + v);
          }
          speed = Double.parseDouble(v);
          if (!(speed >= MIN_SPEED && speed <= MAX_SPEED)) {
            throw new IllegalArgumentException("--speed must be in [" + MIN_SPEED + ", "
                + (long) MAX_SPEED + "], got " + v);
          }
        }
        case "--profile" -> {
          HardwareProfile p = HardwareProfile.named(v);
          if (p == null) {
            throw new IllegalArgumentException("--profile: unknown profile " + v + "; known: "
                + HardwareProfile.builtIns().keySet());
          }
          profile = p;
        }
        case "--lora-adapters" -> {
          lora = new ArrayList<>();
          for (String entry : v.split(",", -1)) {
            // NAME or NAME=PATH, as vLLM's --lora-modules takes them
            int at = entry.indexOf('=');
            String adapter = (at < 0 ? entry : entry.substring(0, at)).trim();
            if (adapter.isEmpty()) {
              throw new IllegalArgumentException("--lora-adapters: empty adapter name in " + v);
            }
            if (lora.contains(adapter)) {
              throw new IllegalArgumentException("--lora-adapters lists " + adapter + " twice");
            }
            if (at >= 0) {
              String path = entry.substring(at + 1).trim();
              if (path.isEmpty()) {
                throw new IllegalArgumentException("--lora-adapters: empty path for adapter "
                    + adapter + " in " + v + "; give NAME=PATH or NAME alone");
              }
              loraPaths.put(adapter, path);
            }
            lora.add(adapter);
          }
        }
        case "--seed" -> {
          try {
            seed = Long.parseLong(Main.Options.asciiInteger(v));
          } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--seed must be an integer, got " + v);
          }
        }
        case "--tokenizer" -> {
          if (v.isBlank()) {
            throw new IllegalArgumentException("--tokenizer needs a path");
          }
          try {
            tokenizer = Path.of(v);
          } catch (java.nio.file.InvalidPathException e) {
            throw new IllegalArgumentException("--tokenizer: not a path: " + v);
          }
          if (!Files.exists(tokenizer)) {
            // a typo, told as such; a file that exists and cannot be loaded is found by
            // loadTokenizer when the server starts
            throw new IllegalArgumentException("--tokenizer " + v + ": no such file or directory");
          }
        }
        case "--default-chat-template-kwargs" -> {
          try {
            defaultKwargs = DefaultChatTemplateKwargs.parse(v);
          } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(name + " " + e.getMessage());
          }
        }
        case EXCLUDE_TOOLS -> excludeTools = true;
        case PROMPT_TOKENS_DETAILS -> promptTokensDetails = true;
        case FORCE_INCLUDE_USAGE -> forceIncludeUsage = true;
        case "--max-loras" -> maxLoras = intArg(name, v, 1, MAX_LORAS);
        case "--kv-events-replay-bytes" -> replayBytes = byteSize(name, v);
        case "--max-held-body-bytes" -> {
          heldBodyBytes = byteSize(name, v);
          if (heldBodyBytes < BodyBudget.MIN_BYTES) {
            // the largest body would wait for ever
            throw new IllegalArgumentException(name + " must be at least 64m (the largest request"
                + " body), got " + v);
          }
        }
        case "--keep-alive-timeout" -> {
          if (!isDecimal(v)) {
            throw new IllegalArgumentException("--keep-alive-timeout must be a number of"
                + " seconds, got " + v);
          }
          keepAlive = Double.parseDouble(v);
          // the range is checked with the other fields, by Options
        }
        default -> throw new IllegalArgumentException("unknown option " + name);
      }
    }
    if (replicas < 0) {
      throw new IllegalArgumentException("--replicas is required");
    }
    if (port < 0) {
      throw new IllegalArgumentException("--port is required");
    }
    checkPorts(replicas, port, kvPort, "--port", "--kv-events-port");
    if (lora.contains(profile.model())) {
      // a request naming the base model would get the adapter, and the base model no replica
      throw new IllegalArgumentException("--lora-adapters: " + profile.model() + " is the base"
          + " model's name; give the adapters names of their own");
    }
    if (maxLoras != null && lora.isEmpty()) {
      throw new IllegalArgumentException("--max-loras needs --lora-adapters");
    }
    return new Options(replicas, port, kvPort, map, speed, profile, seed, lora, tokenizer,
        keepAlive, maxLoras == null ? DEFAULT_MAX_LORAS : maxLoras, replayBytes, heldBodyBytes,
        defaultKwargs, excludeTools, promptTokensDetails, forceIncludeUsage, loraPaths);
  }

  /**
   * Whether {@code v} is a plain decimal number ({@code 20}, {@code 0.5}, {@code 1e-3}): Java's
   * parseDouble also takes a type suffix ({@code 2d}, {@code 5f}) and hexadecimal, so
   * {@code --keep-alive-timeout 1d} (a day?) was one second.
   */
  static boolean isDecimal(String v) {
    return v.matches("[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?");
  }

  /** A byte count: digits, optionally followed by k, m or g (KiB, MiB, GiB). */
  static long byteSize(String name, String v) {
    String t = v.trim().toLowerCase(java.util.Locale.ROOT);
    int shift = 0;
    if (!t.isEmpty()) {
      switch (t.charAt(t.length() - 1)) {
        case 'k' -> shift = 10;
        case 'm' -> shift = 20;
        case 'g' -> shift = 30;
        default -> { }
      }
    }
    String digits = shift == 0 ? t : t.substring(0, t.length() - 1);
    // 0-9 only: isDigit and parseLong also take the digits of other scripts (a full-width
    // "16k" was 16k)
    if (digits.isEmpty() || digits.length() > 15
        || !digits.chars().allMatch(c -> c >= '0' && c <= '9')) {
      throw new IllegalArgumentException(name + " must be a number of bytes (digits, optionally"
          + " followed by k, m or g), got " + v);
    }
    long n = Long.parseLong(digits);
    if (n > MAX_REPLAY_BUFFER_BYTES >> shift) {
      throw new IllegalArgumentException(name + " must be in [0, " + MAX_REPLAY_BUFFER_BYTES
          + "] bytes, got " + v);
    }
    return n << shift;
  }

  private static int intArg(String name, String v, int min, int max) {
    int n;
    try {
      // parseInt alone also takes the digits of other scripts: a full-width "--port 8000" was
      // port 8000
      n = Integer.parseInt(Main.Options.asciiInteger(v));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(name + " must be an integer, got " + v);
    }
    if (n < min || n > max) {
      throw new IllegalArgumentException(name + " must be in [" + min + ", " + max + "], got " + v);
    }
    return n;
  }
  /**
   * The tokenizer of {@code --tokenizer} rendering chats with
   * {@code --default-chat-template-kwargs} under each request's own, as vLLM renders them.
   */
  record WithDefaultKwargs(Tokenizer tokenizer, DefaultChatTemplateKwargs defaults)
      implements Tokenizer {
    @Override
    public int[] encode(String text) {
      return tokenizer.encode(text);
    }

    @Override
    public int[] encodePrompt(String prompt) {
      return tokenizer.encodePrompt(prompt);
    }

    @Override
    public int[] encodeChat(List<ChatMessage> messages) {
      return encodeChat(messages, null, ChatTemplateArgs.DEFAULTS);
    }

    @Override
    public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson) {
      return encodeChat(messages, toolsJson, ChatTemplateArgs.DEFAULTS);
    }

    @Override
    public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
        ChatTemplateArgs args) {
      // a default tools gives way to the request's own, as in vLLM
      return tokenizer.encodeChat(messages, toolsJson, defaults.applyTo(args, toolsJson));
    }

    @Override
    public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
        ChatTemplateArgs args, boolean addSpecialTokens) {
      return tokenizer.encodeChat(messages, toolsJson, defaults.applyTo(args, toolsJson),
          addSpecialTokens);
    }

    @Override
    public void close() {
      tokenizer.close();
    }
  }
}
