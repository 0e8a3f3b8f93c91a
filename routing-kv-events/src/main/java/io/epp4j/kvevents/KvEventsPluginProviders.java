package io.epp4j.kvevents;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import io.opentelemetry.api.OpenTelemetry;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/** ServiceLoader providers of the precise-mode plugins. */
public final class KvEventsPluginProviders {
  private KvEventsPluginProviders() {}

  /**
   * The longest {@code speculativeTtlMs} and {@code memoryTtlMs} (365 days): both are kept in
   * nanoseconds and added to the ticker's time, which a larger value could overflow.
   */
  static final long MAX_TTL_MS = Duration.ofDays(365).toMillis();

  /**
   * {@code precise-prefix-cache-scorer}. Uses the {@link KvBlockIndex} registered with the router
   * as a service when there is one (then fed in process, no sockets unless {@code kvEvents.mode}
   * says so); otherwise builds its own index and subscribes to every endpoint's KV events.
   */
  public static final class PrecisePrefixCacheScorerProvider implements PluginProvider {
    @Override
    public String type() {
      return "precise-prefix-cache-scorer";
    }

    /** The first llm-d name of the precise scorer. */
    @Override
    public Set<String> aliases() {
      return Set.of("kvcache-aware-scorer");
    }

    @Override
    public Result<? extends Plugin> create(PluginContext context, Parameters p) {
      return AbstractPluginProvider.checked(p, createPrecise(context, p)).map(s -> (Plugin) s);
    }
  }

  /**
   * {@code precise-prefix-cache-producer}: llm-d's precise index split out of its scorer, with the
   * precise scorer's parameters. It is the same plugin as a {@code precise-prefix-cache-scorer};
   * the file's {@code prefix-cache-scorer} reads it when its {@code prefixMatchInfoProducerName}
   * names it.
   */
  public static final class PrecisePrefixCacheProducerProvider implements PluginProvider {
    @Override
    public String type() {
      return "precise-prefix-cache-producer";
    }

    @Override
    public Result<? extends Plugin> create(PluginContext context, Parameters p) {
      return AbstractPluginProvider.checked(p, createPrecise(context, p)).map(s -> (Plugin) s);
    }
  }

  /** {@code hybrid-prefix-cache-scorer}: see {@link HybridPrefixCacheScorer}. */
  public static final class HybridPrefixCacheScorerProvider implements PluginProvider {
    @Override
    public String type() {
      return "hybrid-prefix-cache-scorer";
    }

    @Override
    public Result<? extends Plugin> create(PluginContext context, Parameters p) {
      double discount = p.getDouble("memoryDiscount", 0.8, 0.0, 1.0);
      long ttlMs = p.getLong("memoryTtlMs", 600_000);
      if (ttlMs < 1) {
        p.error("memoryTtlMs", "must be >= 1, got " + ttlMs);
      } else if (ttlMs > MAX_TTL_MS) {
        p.error("memoryTtlMs", "must be at most " + MAX_TTL_MS + " (365 days), got " + ttlMs);
      }
      int capacity = p.getInt("memoryBlocksPerEndpoint", 31_250, 1, 1 << 24);
      boolean fallbackOnly = p.getBoolean("fallbackOnly", false);
      // the hybrid's own parameters were read first, so their errors stop createPrecise before
      // it opens sockets; checked() still closes a scorer should any error come later
      return AbstractPluginProvider.checked(p, createPrecise(context, p))
          .map(precise -> new HybridPrefixCacheScorer(precise, discount, ttlMs * 1_000_000L,
              capacity, fallbackOnly));
    }
  }

  static Result<PrecisePrefixCacheScorer> createPrecise(PluginContext context, Parameters p) {
    Optional<KvBlockIndex> shared = context.service(KvBlockIndex.class);
    UpstreamPreciseParameters up = UpstreamPreciseParameters.read(p, shared.isPresent());
    int blockSize = p.getInt("blockSizeTokens", up.blockSize() == null ? 16 : up.blockSize(), 1,
        4096);
    if (up.blockSize() != null && p.has("blockSizeTokens") && blockSize != up.blockSize()) {
      p.error("blockSizeTokens", "is " + blockSize + " but tokenProcessorConfig names block size "
          + up.blockSize() + "; keep one");
    }
    int maxPromptBlocks = p.getInt("maxPromptBlocks",
        up.maxPromptBlocks() == null ? 16_384 : up.maxPromptBlocks(), 1, 1 << 22);
    // llm-d's names for the same settings: speculativeIndexing (bool), speculativeTTL (duration)
    long ttlDefault = 2_000;
    boolean upstreamTtlDefault = false;
    if (p.has("speculativeTTL")) {
      if (p.has("speculativeTtlMs")) {
        p.error("speculativeTTL", "and speculativeTtlMs name the same lifetime; keep one");
      }
      long ttl = upstreamSpeculativeTtlMs(p, ttlDefault);
      upstreamTtlDefault = ttl < 0;
      ttl = upstreamTtlDefault ? ttlDefault : ttl;
      if (ttl > MAX_TTL_MS) {
        // refused under the name the file uses: speculativeTtlMs, checked below, is not in it
        p.error("speculativeTTL", "must be at most 8760h (365 days), got '"
            + p.getString("speculativeTTL", "") + "'");
        ttl = MAX_TTL_MS;
      }
      ttlDefault = ttl;
    }
    long ttlParam = p.getLong("speculativeTtlMs", ttlDefault);
    if (ttlParam < 0) {
      p.error("speculativeTtlMs", "must be >= 0, got " + ttlParam);
    } else if (ttlParam > MAX_TTL_MS) {
      p.error("speculativeTtlMs", "must be at most " + MAX_TTL_MS + " (365 days), got "
          + ttlParam);
    }
    long ttlMs = Math.min(MAX_TTL_MS, Math.max(0, ttlParam));
    double cpuWeight = p.getDouble("cpuWeight", 0.8, 0.0, 1.0);
    int maxBlocks = p.getInt("maxBlocksPerEndpoint", 1 << 18, 1, Integer.MAX_VALUE);
    String model = p.getString("model", "");
    DefaultChatTemplateKwargs defaultKwargs = defaultChatTemplateKwargs(p);
    boolean excludeToolsWhenToolChoiceNone = p.getBoolean("excludeToolsWhenToolChoiceNone", false);
    if (p.has("speculativeIndexing") && p.has("speculative")) {
      p.error("speculativeIndexing", "and speculative name the same switch; keep one");
    }
    boolean speculative = p.getBoolean("speculative", p.getBoolean("speculativeIndexing", true))
        && ttlMs > 0;
    boolean ttlGiven = !upstreamTtlDefault;
    shared.ifPresent(index -> differFromShared(p, index, up.blockSize(), blockSize, maxBlocks,
        ttlGiven ? ttlMs : 0, cpuWeight, model == null ? "" : model));

    Parameters ev = up.kvEvents() != null ? Parameters.of(up.kvEvents()) : p.getNested("kvEvents");
    String mode = ev.getEnum("mode", shared.isPresent() ? "none" : "per-endpoint",
        Set.of("none", "per-endpoint", "central"));
    int port = ev.getInt("port", KvEventSubscriber.DEFAULT_PORT, 1, 65535);
    int replayPort = ev.getInt("replayPort", 0, 0, 65535);
    String topicFilter = ev.getString("topicFilter", "kv@");
    String bind = ev.getString("bindAddress", "tcp://*:" + KvEventSubscriber.DEFAULT_PORT);
    int replayTimeoutMs = ev.getInt("replayTimeoutMs", 1_000, 1, 600_000);
    int hwm = ev.getInt("receiveHighWaterMark", 10_000, 1, Integer.MAX_VALUE);
    long receiveBufferBytes = ev.getLong("receiveBufferBytes",
        KvEventSubscriber.DEFAULT_RECEIVE_BUFFER_BYTES);
    if (receiveBufferBytes < KvEventDecoder.MAX_PAYLOAD_BYTES) {
      ev.error("receiveBufferBytes", "must be at least " + KvEventDecoder.MAX_PAYLOAD_BYTES
          + " (one message of the largest size accepted, 16 MiB), got " + receiveBufferBytes);
    }
    int dpSize = ev.getInt("dataParallelSize", 1, 1, KvEventSubscriber.MAX_DATA_PARALLEL_SIZE);
    int dpFirstPort = ev.getInt("dataParallelFirstPort", 0, 1, 65535);
    if (dpSize > 1) {
      if (!ev.has("dataParallelFirstPort")) {
        ev.error("dataParallelFirstPort", "is required when dataParallelSize is above 1: the"
            + " serving port of rank 0 (the endpoint on that port + r is rank r)");
      } else if (dpFirstPort > 0 && dpFirstPort + dpSize - 1 > 65535) {
        ev.error("dataParallelFirstPort", dpFirstPort + " + dataParallelSize " + dpSize
            + " - 1 is past port 65535");
      }
      if (mode.equals("central")) {
        ev.error("dataParallelSize", "needs mode per-endpoint: vLLM's rank r connects to the"
            + " bound port + r, and central mode binds one address");
      }
      if (port + dpSize - 1 > 65535) {
        ev.error("dataParallelSize", "puts rank " + (dpSize - 1) + "'s port (port " + port
            + " + rank) past 65535");
      }
      if (replayPort > 0 && replayPort + dpSize - 1 > 65535) {
        ev.error("dataParallelSize", "puts rank " + (dpSize - 1) + "'s replay port (replayPort "
            + replayPort + " + rank) past 65535");
      }
    } else if (ev.has("dataParallelFirstPort")) {
      ev.error("dataParallelFirstPort", "has no effect without a dataParallelSize above 1");
    }
    unusedInMode(ev, mode);
    for (String e : ev.errors()) {
      p.error("kvEvents", e);
    }
    for (String unread : ev.unreadNames()) {
      p.error("kvEvents", "has unknown parameter '" + unread + "'");
    }
    if (!p.errors().isEmpty()) {
      return Result.errors(p.errors());
    }
    KvBlockIndex index = shared.orElseGet(() -> KvBlockIndex.builder()
        .defaultBlockSize(blockSize)
        .maxBlocksPerEndpoint(maxBlocks)
        .speculativeTtl(Duration.ofMillis(ttlMs))
        .cpuWeight(cpuWeight)
        .model(model == null ? "" : model)
        .ticker(context.ticker())
        .build());
    List<KvEventSubscriber> subscribers = new java.util.ArrayList<>(2);
    try {
      if (!mode.equals("none")) {
        KvEventSubscriber.Builder b = mode.equals("central")
            ? KvEventSubscriber.central(index, bind == null ? "" : bind)
            : KvEventSubscriber.perEndpoint(index);
        b.port(port).replayPort(replayPort)
            .topicFilter(topicFilter == null ? "" : topicFilter)
            .replayTimeout(Duration.ofMillis(replayTimeoutMs)).receiveHighWaterMark(hwm)
            .receiveBufferBytes(receiveBufferBytes);
        if (dpSize > 1) {
          b.dataParallel(dpSize, dpFirstPort);
        }
        subscribers.add(b.build());
      }
    } catch (RuntimeException e) {
      // name what the file wrote: llm-d's kvEventsConfig.zmqEndpoint, or epp4j's own kvEvents
      boolean upstream = up.kvEvents() != null;
      return Result.error("parameter '" + (upstream ? "kvEventsConfig" : "kvEvents") + "' "
          + (!mode.equals("central") ? "could not start the subscriber: "
              : upstream ? "field 'zmqEndpoint': " : "field 'bindAddress': ") + e.getMessage());
    }
    String alsoBind = up.alsoBind();
    if (alsoBind != null && mode.equals("per-endpoint")) {
      // llm-d's discoverPods with a zmqEndpoint: engines that connect to the router are heard
      // on the bound socket, the others on their own ports
      try {
        subscribers.add(KvEventSubscriber.central(index, alsoBind).portLabelFollowedElsewhere()
            .topicFilter(topicFilter == null ? "" : topicFilter)
            .replayTimeout(Duration.ofMillis(replayTimeoutMs)).receiveHighWaterMark(hwm)
            .receiveBufferBytes(receiveBufferBytes).build());
      } catch (RuntimeException e) {
        subscribers.forEach(KvEventSubscriber::close);
        return Result.error("parameter 'kvEventsConfig' field 'zmqEndpoint': " + e.getMessage());
      }
    }
    Tokenizer tokenizer = context.service(Tokenizer.class).orElse(null);
    if (tokenizer == null && !p.has("tokenizer")) {
      // llm-d's token-producer tokenizes for the scorers after it; here it lends its tokenizer
      for (Plugin earlier : context.earlierPlugins()) {
        if (earlier instanceof TokenProducer producer) {
          tokenizer = producer.tokenizer();
          break;
        }
      }
    }
    boolean ownsTokenizer = false;
    if (tokenizer == null && p.has("tokenizer")) {
      Result<Tokenizer> t = createTokenizer(p.getNested("tokenizer"));
      if (!t.isOk()) {
        subscribers.forEach(KvEventSubscriber::close);
        return Result.errors(t.errors());
      }
      tokenizer = t.value();
      ownsTokenizer = true;
    }
    PrecisePrefixCacheScorer scorer = PrecisePrefixCacheScorer.following(index, tokenizer,
        subscribers, maxPromptBlocks, speculative, true, ownsTokenizer, defaultKwargs,
        excludeToolsWhenToolChoiceNone);
    context.service(OpenTelemetry.class)
        .ifPresent(otel -> scorer.ownTelemetry(KvEventTelemetry.register(index, otel)));
    return Result.ok(scorer);
  }

  /**
   * {@code defaultChatTemplateKwargs}: the engines' {@code --default-chat-template-kwargs}, an
   * object; null when absent (or on an error, which is recorded under the field's name).
   */
  private static @Nullable DefaultChatTemplateKwargs defaultChatTemplateKwargs(Parameters p) {
    Object raw = p.raw("defaultChatTemplateKwargs");
    if (raw == null) {
      return null;
    }
    if (!(raw instanceof Map<?, ?> map)) {
      p.error("defaultChatTemplateKwargs", "must be an object (vLLM's"
          + " --default-chat-template-kwargs, e.g. {enable_thinking: false})");
      return null;
    }
    try {
      return DefaultChatTemplateKwargs.of(map);
    } catch (IllegalArgumentException e) {
      p.error("defaultChatTemplateKwargs", String.valueOf(e.getMessage()));
      return null;
    }
  }

  /**
   * llm-d's {@code speculativeTTL} in whole milliseconds, rounded up. llm-d reads it with Go's
   * {@code time.ParseDuration} and takes a duration that is not positive ({@code 0s},
   * {@code -1s}) for its default, 2 s: so does epp4j, with a notice, where {@code 0} used to turn
   * speculative entries off and a negative duration was refused. The empty string is the
   * default, as llm-d reads it. -1 for the default (which a {@code KvBlockIndex} service sets).
   */
  private static long upstreamSpeculativeTtlMs(Parameters p, long defaultMs) {
    Object raw = p.raw("speculativeTTL");
    if ("".equals(raw)) {
      return -1;
    }
    if (raw instanceof String s && s.trim().startsWith("-")) {
      // a negative Go duration: the same text after its sign must be one
      String magnitude = s.trim().substring(1);
      Parameters check = Parameters.of(Map.of("speculativeTTL", magnitude));
      check.getDuration("speculativeTTL", Duration.ZERO);
      if (magnitude.startsWith("+") || !check.errors().isEmpty()) {
        p.error("speculativeTTL", "must be a duration with a unit such as '200ms', '5s' or"
            + " '1m30s', got '" + s + "'");
        return defaultMs;
      }
    } else {
      int before = p.errors().size();
      Duration d = p.getDuration("speculativeTTL", Duration.ofMillis(defaultMs));
      if (p.errors().size() > before || !d.isZero()) {
        return ceilMillis(d);
      }
    }
    p.notice("speculativeTTL", "is '" + raw + "', not a positive duration, which llm-d reads as"
        + " its default, 2s, and so does epp4j (or a KvBlockIndex service's own lifetime; to turn"
        + " speculative entries off, set speculativeIndexing: false)");
    return -1;
  }

  /**
   * {@code d} in whole milliseconds, rounded up: a positive duration under a millisecond (Go's
   * {@code 500us}, {@code 0.5ms}) is 1 ms, never 0, which would turn speculative entries off.
   */
  static long ceilMillis(Duration d) {
    return d.toMillis() + (d.getNano() % 1_000_000 != 0 ? 1 : 0);
  }

  /**
   * With a {@link KvBlockIndex} service, the index's own builder set its block size, budget,
   * speculative lifetime, offload weight and model, and every scorer shares them: a field of the
   * file that names another value could not take effect, so it is refused by name (the index
   * cannot be reshaped for one scorer). A field naming what the index already does is accepted,
   * and so is {@code speculativeTtlMs: 0}, which turns this scorer's speculative entries off.
   */
  private static void differFromShared(Parameters p, KvBlockIndex index,
      @Nullable Integer upstreamBlockSize, int blockSize, int maxBlocks, long ttlMs,
      double cpuWeight, String model) {
    String why = ", but the router's KvBlockIndex service was built with ";
    String fix = ": with an index service the index's builder sets it for every scorer (%s);"
        + " leave the field out or build the index with the same value";
    if (p.has("blockSizeTokens") && valid(p, "blockSizeTokens")
        && blockSize != index.defaultBlockSize()) {
      p.error("blockSizeTokens", "is " + blockSize + why + index.defaultBlockSize()
          + fix.formatted("KvBlockIndex.Builder.defaultBlockSize"));
    } else if (!p.has("blockSizeTokens") && upstreamBlockSize != null
        && upstreamBlockSize != index.defaultBlockSize()) {
      p.error("tokenProcessorConfig", "blockSize is " + upstreamBlockSize + why
          + index.defaultBlockSize() + fix.formatted("KvBlockIndex.Builder.defaultBlockSize"));
    }
    if (p.has("maxBlocksPerEndpoint") && valid(p, "maxBlocksPerEndpoint")
        && maxBlocks != index.maxBlocksPerEndpoint()) {
      p.error("maxBlocksPerEndpoint", "is " + maxBlocks + why + index.maxBlocksPerEndpoint()
          + fix.formatted("KvBlockIndex.Builder.maxBlocksPerEndpoint"));
    }
    String ttlField = p.has("speculativeTTL") ? "speculativeTTL" : "speculativeTtlMs";
    if (p.has(ttlField) && valid(p, ttlField) && ttlMs > 0
        && ttlMs * 1_000_000L != index.speculativeTtlNanos()) {
      p.error(ttlField, "is " + ttlMs + why + index.speculativeTtlNanos() / 1_000_000L
          + " ms" + fix.formatted("KvBlockIndex.Builder.speculativeTtl; 0 here turns this"
              + " scorer's speculative entries off"));
    }
    if (p.has("cpuWeight") && valid(p, "cpuWeight") && cpuWeight != index.weight(Medium.CPU)) {
      p.error("cpuWeight", "is " + cpuWeight + why + index.weight(Medium.CPU)
          + fix.formatted("KvBlockIndex.Builder.cpuWeight"));
    }
    if (p.has("model") && valid(p, "model") && !model.equals(index.defaultModel())) {
      p.error("model", "is '" + model + "'" + why + "'" + index.defaultModel() + "'"
          + fix.formatted("KvBlockIndex.Builder.model, or setEndpointModel per endpoint"));
    }
  }

  /** Whether no error names {@code field} yet: a bad value is reported once, as bad. */
  private static boolean valid(Parameters p, String field) {
    return p.errors().stream().noneMatch(e -> e.startsWith("parameter '" + field + "'"));
  }

  /**
   * Refuses the {@code kvEvents} fields that {@code mode} does not use, which would otherwise be
   * ignored unnoticed: {@code bindAddress} outside central mode (only it binds), {@code port}
   * outside per-endpoint mode (only it connects to each engine's publisher), and every socket
   * field in mode {@code none} (no socket is opened). The data-parallel fields are checked with
   * each other above.
   */
  private static void unusedInMode(Parameters ev, String mode) {
    for (String field : List.of("port", "bindAddress", "replayPort", "topicFilter",
        "replayTimeoutMs", "receiveHighWaterMark", "receiveBufferBytes", "dataParallelSize")) {
      if (!ev.has(field)) {
        continue;
      }
      if (mode.equals("none")) {
        ev.error(field, "has no effect in mode none: no socket is opened"
            + (ev.has("mode") ? "" : " (none is the default when the router has a KvBlockIndex"
                + " service)") + "; set mode per-endpoint or central to open one");
      } else if (field.equals("port") && mode.equals("central")) {
        ev.error(field, "has no effect in mode central: the router binds bindAddress, which"
            + " the engines publish to, and connects to no publisher port");
      } else if (field.equals("bindAddress") && mode.equals("per-endpoint")) {
        ev.error(field, "has no effect in mode per-endpoint: the router connects to each"
            + " endpoint's publisher on port; only mode central binds an address");
      }
    }
  }

  /**
   * {@code tokenizer: {type: vllm, url, model, timeoutMs}} or
   * {@code tokenizer: {type: huggingface, path}}. A vllm tokenizer sends each chat whole to the
   * server, which renders it with the model's own template: the router does not know that
   * template, so it cannot cut chats into pieces it could cache (rendering them as ChatML gave
   * other tokens than the engine's for every model that does not use ChatML). A huggingface
   * tokenizer renders the model's template in process, and its chats are cached per chunk
   * through a {@link CachingChatTokenizer} where that is proven exact, unless
   * {@code cacheTokens} is 0.
   */
  static Result<Tokenizer> createTokenizer(Parameters t) {
    String type = t.getEnum("type", "vllm", Set.of("vllm", "huggingface"));
    boolean vllm = type.equals("vllm");
    // a vllm tokenizer caches nothing (each chat goes whole to the server): left unread there,
    // a cacheTokens is refused below as a field of the other type
    long cacheTokens = vllm ? 0 : t.getLong("cacheTokens", 4_000_000);
    if (cacheTokens < 0) {
      t.error("cacheTokens", "must be >= 0, got " + cacheTokens);
    }
    String url = vllm ? t.getString("url", null) : null;
    String model = vllm ? t.getString("model", null) : null;
    int timeoutMs = vllm ? t.getInt("timeoutMs", 200, 1, 600_000) : 0;
    String path = vllm ? null : t.getString("path", null);
    if (vllm && (url == null || model == null)) {
      t.error(url == null ? "url" : "model", "is required for a vllm tokenizer");
    } else if (!vllm && path == null) {
      t.error("path", "is required for a huggingface tokenizer");
    }
    // a misspelt field would leave its default in force unnoticed, and a field of the other
    // type does nothing: both are refused, as kvEvents' are, before anything is loaded
    List<String> errs = new java.util.ArrayList<>();
    for (String e : t.errors()) {
      errs.add("parameter 'tokenizer': " + e);
    }
    for (String name : t.unreadNames()) {
      boolean otherType = vllm ? name.equals("path") || name.equals("cacheTokens")
          : Set.of("url", "model", "timeoutMs").contains(name);
      errs.add(otherType ? "parameter 'tokenizer' field '" + name + "' has no effect with type "
          + type : "parameter 'tokenizer' has unknown parameter '" + name + "'");
    }
    if (!errs.isEmpty()) {
      return Result.errors(errs);
    }
    Tokenizer base;
    if (vllm) {
      try {
        base = new VllmTokenizer(java.util.Objects.requireNonNull(url),
            java.util.Objects.requireNonNull(model), Duration.ofMillis(timeoutMs));
      } catch (IllegalArgumentException e) {
        return Result.error("parameter 'tokenizer': parameter 'url' " + e.getMessage());
      }
    } else {
      try {
        base = HuggingFaceTokenizer.load(java.nio.file.Path.of(java.util.Objects.requireNonNull(
            path)));
      } catch (java.io.IOException | RuntimeException e) {
        return Result.error("parameter 'tokenizer': parameter 'path' cannot be loaded: "
            + e.getMessage());
      }
    }
    if (cacheTokens > 0 && base instanceof HuggingFaceTokenizer h && h.chunkingExact()) {
      // the model's own template: cached per chunk where that is proven exact, else whole
      return Result.ok(CachingChatTokenizer.ofRenderedChats(h, cacheTokens));
    }
    // a vllm tokenizer: the server renders each chat with its own template, which only it knows
    return Result.ok(base);
  }
}
