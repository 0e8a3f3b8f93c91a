package io.epp4j.kvevents;

import io.epp4j.api.Parameters;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * llm-d's parameter shapes for the precise scorer, read into epp4j's own: every field changes
 * what epp4j does (block size, prompt length, where events come from), is refused, or gets a
 * notice that says why it does not apply. Shapes over the versions:
 *
 * <pre>
 * tokenProcessorConfig: {blockSizeTokens | blockSize, hashSeed, hashAlgorithm}  # newer, top level
 * indexerConfig:
 *   tokenProcessorConfig: {blockSize, hashSeed}                     # older, nested
 *   kvBlockIndexConfig: {maxPrefixBlocksToMatch, enableMetrics, metricsLoggingInterval,
 *                        inMemoryConfig | redisConfig | valkeyConfig | costAwareMemoryConfig}
 *   tokenizersPoolConfig: {...}
 *   prefixStoreConfig: {cacheSize, blockSize}                       # tokenization cache only
 * kvEventsConfig: {zmqEndpoint, topicFilter, concurrency, engineType, discoverPods,
 *                  podDiscoveryConfig: {socketPort, replaySocketPort, podLabelSelector,
 *                                       podNamespace}}
 * </pre>
 *
 * @param blockSize the block size the file names, or null
 * @param maxPromptBlocks the prompt length in blocks the file names, or null
 * @param kvEvents epp4j's {@code kvEvents} settings the file's {@code kvEventsConfig} means, or
 *     null when it has none
 * @param alsoBind with {@code discoverPods} true (or left out, true in llm-d) and a
 *     {@code zmqEndpoint}, the address to bind beside the per-endpoint subscriptions
 *     {@code kvEvents} names (llm-d runs both); else null
 */
record UpstreamPreciseParameters(@Nullable Integer blockSize, @Nullable Integer maxPromptBlocks,
    @Nullable Map<String, Object> kvEvents, @Nullable String alsoBind) {

  private static final String TOKEN_PROCESSOR_FIELDS =
      "blockSizeTokens, blockSize, hashSeed, hashAlgorithm";
  private static final String HASH_SEED_NOTICE = "has no effect: epp4j keys blocks by the token"
      + " IDs the engines report, not by their hashes, so the engines' hash seed does not change"
      + " which blocks match";

  /** Reads the upstream fields of {@code p}, recording errors and notices in it. */
  static UpstreamPreciseParameters read(Parameters p, boolean sharedIndex) {
    Integer blockSize = null;
    String blockFrom = null;
    Integer maxBlocks = null;
    if (p.has("tokenProcessorConfig")) {
      Parameters tp = p.getNested("tokenProcessorConfig");
      blockSize = blockSize(p, tp, "tokenProcessorConfig");
      blockFrom = "tokenProcessorConfig's block size";
      seed(p, tp, "tokenProcessorConfig");
      unknown(p, tp, "tokenProcessorConfig", TOKEN_PROCESSOR_FIELDS);
    }
    if (p.has("indexerConfig")) {
      Parameters ic = p.getNested("indexerConfig");
      if (ic.has("tokenProcessorConfig")) {
        Parameters tp = ic.getNested("tokenProcessorConfig");
        Integer nested = blockSize(p, tp, "indexerConfig.tokenProcessorConfig");
        if (blockSize != null && nested != null && !blockSize.equals(nested)) {
          p.error("indexerConfig", "tokenProcessorConfig's block size " + nested + " differs"
              + " from the top-level " + blockFrom + " " + blockSize);
        } else if (nested != null) {
          blockSize = nested;
        }
        seed(p, tp, "indexerConfig");
        unknown(p, tp, "indexerConfig.tokenProcessorConfig", TOKEN_PROCESSOR_FIELDS);
      }
      if (ic.has("kvBlockIndexConfig")) {
        Parameters bi = ic.getNested("kvBlockIndexConfig");
        if (bi.has("maxPrefixBlocksToMatch")) {
          int before = bi.errors().size();
          maxBlocks = bi.getInt("maxPrefixBlocksToMatch", 0);
          if (bi.errors().size() > before) {
            maxBlocks = null; // not an integer: refused below with bi's other errors, as given
          } else if (maxBlocks < 1 || maxBlocks > (1 << 22)) {
            p.error("indexerConfig", "kvBlockIndexConfig.maxPrefixBlocksToMatch must be in"
                + " [1, 4194304], got " + maxBlocks);
            maxBlocks = null;
          }
        }
        for (String m : List.of("enableMetrics", "metricsLoggingInterval")) {
          if (bi.has(m)) {
            bi.raw(m);
            p.notice("indexerConfig", "field kvBlockIndexConfig." + m + " has no effect: the"
                + " index always exports its metrics through OpenTelemetry");
          }
        }
        if (bi.has("inMemoryConfig")) {
          bi.raw("inMemoryConfig");
          p.notice("indexerConfig", "field kvBlockIndexConfig.inMemoryConfig has no effect:"
              + " epp4j bounds its in-process index per endpoint (maxBlocksPerEndpoint)");
        }
        for (String backend : List.of("redisConfig", "valkeyConfig", "costAwareMemoryConfig")) {
          if (bi.has(backend)) {
            bi.raw(backend);
            p.error("indexerConfig", "kvBlockIndexConfig." + backend + " is not supported: epp4j"
                + " keeps the block index in process, fed by the engines' events");
          }
        }
        unknown(p, bi, "indexerConfig.kvBlockIndexConfig", "maxPrefixBlocksToMatch,"
            + " enableMetrics, metricsLoggingInterval, inMemoryConfig");
        for (String e : bi.errors()) {
          p.error("indexerConfig", "kvBlockIndexConfig: " + e);
        }
      }
      if (ic.has("prefixStoreConfig")) {
        ic.raw("prefixStoreConfig");
        p.notice("indexerConfig", "field prefixStoreConfig has no effect: it sizes upstream's cache"
            + " of tokenized prompt prefixes; epp4j caches tokens per chat message instead, and"
            + " neither changes which blocks match");
      }
      if (ic.has("tokenizersPoolConfig")) {
        ic.raw("tokenizersPoolConfig");
        p.error("indexerConfig", "tokenizersPoolConfig is not supported: give epp4j a tokenizer"
            + " with a token-producer plugin, the 'tokenizer' parameter or a Tokenizer service");
      }
      unknown(p, ic, "indexerConfig", "tokenProcessorConfig, kvBlockIndexConfig");
      // a section that is not an object, refused by getNested
      for (String e : ic.errors()) {
        p.error("indexerConfig", e);
      }
    }
    if (p.has("kvCacheRedisAddr")) {
      p.raw("kvCacheRedisAddr");
      p.error("kvCacheRedisAddr", "is not supported: epp4j keeps the block index in process");
    }
    Map<String, Object> kvEvents = null;
    String[] alsoBind = {null};
    if (p.has("kvEventsConfig")) {
      kvEvents = kvEvents(p, sharedIndex, alsoBind);
    }
    return new UpstreamPreciseParameters(blockSize, maxBlocks, kvEvents, alsoBind[0]);
  }

  /**
   * The block size of a {@code tokenProcessorConfig}: {@code blockSizeTokens}, llm-d's current
   * name, or its deprecated {@code blockSize}; 0 in either means not set. Two that differ are
   * refused.
   */
  private static @Nullable Integer blockSize(Parameters p, Parameters tp, String where) {
    Integer tokens = blockSizeField(p, tp, where, "blockSizeTokens");
    Integer old = blockSizeField(p, tp, where, "blockSize");
    if (tokens != null && old != null && !tokens.equals(old)) {
      String top = where.contains(".") ? where.substring(0, where.indexOf('.')) : where;
      p.error(top, where + ".blockSizeTokens " + tokens + " differs from its deprecated name "
          + where + ".blockSize " + old);
      return null;
    }
    return tokens != null ? tokens : old;
  }

  private static @Nullable Integer blockSizeField(Parameters p, Parameters tp, String where,
      String field) {
    if (!tp.has(field)) {
      return null;
    }
    String top = where.contains(".") ? where.substring(0, where.indexOf('.')) : where;
    int errorsBefore = tp.errors().size();
    int b = tp.getInt(field, 0);
    if (tp.errors().size() > errorsBefore || b < 0 || b > 4096) {
      p.error(top, where + "." + field + " must be an integer in [1, 4096], got '"
          + tp.raw(field) + "'");
      return null;
    }
    return b == 0 ? null : b; // llm-d: 0 is "not set", the default
  }

  private static void seed(Parameters p, Parameters tp, String param) {
    if (tp.has("hashSeed")) {
      tp.raw("hashSeed");
      p.notice(param, "field hashSeed " + HASH_SEED_NOTICE);
    }
    if (tp.has("hashAlgorithm")) {
      tp.raw("hashAlgorithm");
      p.notice(param, "field hashAlgorithm has no effect: it chooses how upstream's index keys"
          + " its blocks internally; epp4j keys them by the engines' token IDs");
    }
  }

  private static void unknown(Parameters p, Parameters nested, String where, String expected) {
    for (String u : nested.unreadNames()) {
      p.error(where.contains(".") ? where.substring(0, where.indexOf('.')) : where,
          "has unknown field '" + u + "' in " + where + "; expected " + expected);
    }
  }

  /**
   * {@code engineType} picks llm-d-kv-cache's event adapter ({@code engineadapter.NewAdapter}):
   * {@code vllm} or the empty string for vLLM, {@code sglang} for SGLang, anything else an
   * error. SGLang publishes vLLM's positional msgpack arrays with trailing optional fields left
   * out, which {@link KvEventDecoder} reads as it reads vLLM's, so both are honoured by the one
   * decoder; a value without an adapter upstream is refused naming it.
   */
  private static void engineType(Parameters p, Parameters ev) {
    if (!ev.has("engineType")) {
      return;
    }
    int before = ev.errors().size();
    String engine = ev.getString("engineType", null);
    if (engine != null && ev.errors().size() == before
        && !(engine.isEmpty() || engine.equals("vllm") || engine.equals("sglang"))) {
      p.error("kvEventsConfig", "field engineType '" + engine + "' is not supported: expected"
          + " vllm or sglang (llm-d-kv-cache has event adapters for these two, and epp4j's"
          + " decoder reads both)");
    }
  }

  /**
   * {@code podDiscoveryConfig.podLabelSelector} and {@code podNamespace} choose the Kubernetes
   * pods llm-d-kv-cache's own pod reconciler watches. llm-d's precise scorer decodes them and
   * reads neither: it subscribes to every endpoint of its pool (the InferencePool's selector
   * chose them). epp4j follows every endpoint the application gives the router in the same way,
   * so both are read (a non-string is refused) and noticed as having no effect. Selecting by
   * them here would follow fewer endpoints than llm-d does for the same file.
   */
  private static void podWatchSettings(Parameters p, Parameters pd) {
    if (pd.has("podLabelSelector")) {
      pd.getString("podLabelSelector", null);
      p.notice("kvEventsConfig", "field podDiscoveryConfig.podLabelSelector has no effect: it"
          + " selects the pods llm-d-kv-cache's own pod reconciler watches in Kubernetes; llm-d's"
          + " precise scorer does not read it and follows every endpoint of its pool, as epp4j"
          + " follows every endpoint the application gives the router");
    }
    if (pd.has("podNamespace")) {
      pd.getString("podNamespace", null);
      p.notice("kvEventsConfig", "field podDiscoveryConfig.podNamespace has no effect: it is the"
          + " Kubernetes namespace llm-d-kv-cache's own pod reconciler watches; llm-d's precise"
          + " scorer does not read it, and epp4j's endpoints come from the application, not from"
          + " a Kubernetes watch");
    }
  }

  /**
   * {@code podDiscoveryConfig.replaySocketPort}: the port of each engine's replay (ROUTER)
   * socket, which llm-d asks for the events a gap missed (rank r on this port + r): epp4j's
   * {@code kvEvents.replayPort}. 0 when not given; as in llm-d, 0 or a negative port means no
   * replay. A port above 65535 is refused naming the field.
   */
  private static int replaySocketPort(Parameters pd) {
    int before = pd.errors().size();
    int port = pd.getInt("replaySocketPort", 0);
    if (pd.errors().size() > before) {
      return 0;
    }
    if (port > 65535) {
      pd.error("replaySocketPort", "must be at most 65535 (0 or below for no replay), got "
          + port);
      return 0;
    }
    return Math.max(0, port);
  }

  /**
   * {@code kvEventsConfig}: a {@code zmqEndpoint} is a socket the router binds and the engines
   * publish to (epp4j's central mode); {@code discoverPods: true} subscribes to every endpoint
   * (per-endpoint mode, port from {@code podDiscoveryConfig.socketPort}). Both together mean
   * both, as in llm-d, whose scorer subscribes to each discovered pod and, whenever
   * {@code zmqEndpoint} is set, binds it as well: the address goes to {@code alsoBind[0]}. A
   * missing {@code discoverPods} is true, as in llm-d: its scorer decodes the file over
   * llm-d-kv-cache's {@code kvevents.DefaultConfig()}, where it is true (llm-d-kv-cache v0.5.0
   * on, commit 8877f62; llm-d-inference-scheduler v0.5.0 on). Only {@code discoverPods: false}
   * makes a {@code zmqEndpoint} the one source, and so does an explicit
   * {@code podDiscoveryConfig: null}: Go's decoder sets llm-d's pointer to nil, and its scorer
   * then subscribes to no pod. With a block index the application feeds (a
   * {@code KvBlockIndex} service), no socket is opened.
   */
  private static @Nullable Map<String, Object> kvEvents(Parameters p, boolean sharedIndex,
      @Nullable String[] alsoBind) {
    if (p.has("kvEvents")) {
      p.error("kvEventsConfig", "cannot be combined with epp4j's own 'kvEvents'; keep one");
      return null;
    }
    Parameters ev = p.getNested("kvEventsConfig");
    Map<String, Object> out = new LinkedHashMap<>();
    String endpoint = ev.getString("zmqEndpoint", null);
    boolean discover = ev.getBoolean("discoverPods", true);
    String topic = ev.getString("topicFilter", null);
    if (topic != null) {
      out.put("topicFilter", topic);
    }
    if (ev.has("concurrency")) {
      ev.getInt("concurrency", 1);
      p.notice("kvEventsConfig", "field concurrency has no effect: one subscriber thread decodes"
          + " and indexes the events of every endpoint");
    }
    engineType(p, ev);
    // null in the file is a nil *PodDiscoveryConfig in llm-d: no pod is followed at all
    boolean noPodDiscovery = ev.has("podDiscoveryConfig") && ev.raw("podDiscoveryConfig") == null;
    Parameters pd = ev.getNested("podDiscoveryConfig");
    int socketPort = pd.getInt("socketPort", KvEventSubscriber.DEFAULT_PORT, 1, 65535);
    int replayPort = replaySocketPort(pd);
    podWatchSettings(p, pd);
    for (String u : pd.unreadNames()) {
      p.error("kvEventsConfig", "podDiscoveryConfig has unknown field '" + u
          + "'; expected socketPort, replaySocketPort, podLabelSelector, podNamespace");
    }
    for (String u : ev.unreadNames()) {
      p.error("kvEventsConfig", "has unknown field '" + u + "'; expected zmqEndpoint,"
          + " topicFilter, concurrency, engineType, discoverPods, podDiscoveryConfig");
    }
    for (String e : ev.errors()) {
      p.error("kvEventsConfig", e);
    }
    for (String e : pd.errors()) {
      p.error("kvEventsConfig", "podDiscoveryConfig: " + e);
    }
    if (sharedIndex) {
      p.notice("kvEventsConfig", "opens no socket: the router was given a KvBlockIndex service,"
          + " which the application feeds with the engines' events");
      out.clear();
      out.put("mode", "none");
      return out;
    }
    if (discover && !noPodDiscovery) {
      out.put("mode", "per-endpoint");
      out.put("port", socketPort);
      if (replayPort > 0) {
        out.put("replayPort", replayPort);
      }
      alsoBind[0] = endpoint;
    } else if (endpoint != null) {
      out.put("mode", "central");
      out.put("bindAddress", endpoint);
      if (replayPort > 0) {
        p.notice("kvEventsConfig", "field podDiscoveryConfig.replaySocketPort has no effect:"
            + " no endpoint is followed (discoverPods is false), and llm-d asks the engines that"
            + " publish to zmqEndpoint for no replay either");
      }
      if (discover) {
        p.notice("kvEventsConfig", "follows no endpoint: podDiscoveryConfig is null, which llm-d"
            + " reads as no pod discovery whatever discoverPods says (its scorer subscribes to"
            + " pods only when podDiscoveryConfig is set), so only zmqEndpoint is bound; leave"
            + " podDiscoveryConfig out, or give {} for socketPort 5557, to follow each endpoint"
            + " too");
      }
    } else if (noPodDiscovery) {
      p.error("kvEventsConfig", "has podDiscoveryConfig: null, which llm-d reads as following no"
          + " endpoint, and no zmqEndpoint, so no events would be heard: set zmqEndpoint (a socket"
          + " the engines publish to, such as tcp://*:5557) or leave podDiscoveryConfig out (or"
          + " {}) to follow each endpoint on socketPort 5557");
    } else {
      p.error("kvEventsConfig", "has discoverPods: false and no zmqEndpoint, so no events would"
          + " be heard: set zmqEndpoint (a socket the engines publish to, such as tcp://*:5557)"
          + " or leave discoverPods at true");
    }
    return out;
  }
}
