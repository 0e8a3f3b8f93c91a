package io.epp4j.kvevents;

import io.epp4j.api.Candidate;
import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PoolListener;
import io.epp4j.api.PoolOrder;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.PrefixHitsProducer;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * {@code precise-prefix-cache-scorer}: for each candidate, the weighted number of consecutive
 * blocks from block 0 of the prompt that the replica really holds according to its KV events
 * (GPU 1.0, offloaded 0.8 per block), divided by the prompt's full blocks. The run stops where
 * vLLM stops serving from its cache: it computes a prompt's last token whatever it holds
 * ({@code max_cache_hit_length = num_tokens - 1}), so a prompt that ends exactly at a block's end
 * is never served that last block, and no endpoint is credited with it. After routing, the
 * chosen endpoint's blocks are recorded as speculative entries until the engine's own event
 * confirms them (TTL 2 s by default), so a burst of requests with one new prefix stays together.
 * The match is published as {@link PrefixHits} (the weighted run is the cached block count).
 *
 * <p>Speculative entries are recorded only for endpoints the pool announced and has not removed
 * since: recording one would otherwise make the index learn an endpoint again after its removal
 * forgot it, and a replaced pod's address never returns to clear it.
 */
final class PrecisePrefixCacheScorer implements PrefixHitsProducer, RequestListener, PoolListener {

  // PdProfileHandler.PREFILL_PROFILE: spelled out because this module does not compile against
  // routing-scorers, where the prefill/decode handler lives
  private static final String PREFILL_PROFILE = "prefill";
  private @Nullable KvEventTelemetry telemetry;

  /** Makes this scorer own the index's metrics export (closed with the scorer). */
  void ownTelemetry(@Nullable KvEventTelemetry t) {
    this.telemetry = t;
  }

  private static final Logger LOG = Logger.getLogger(PrecisePrefixCacheScorer.class.getName());

  private final KvBlockIndex index;
  /**
   * Its own, a {@link Tokenizer} service's, one a {@code token-producer} listed before it lent,
   * or one a {@code token-producer} listed after it lends once built ({@link #lendTokenizer});
   * null: requests without token IDs score 0.
   */
  private volatile @Nullable Tokenizer tokenizer;
  /** The subscribers feeding the index: none, one, or per-endpoint and central together. */
  private final List<KvEventSubscriber> subscribers;
  private final int maxPromptBlocks;
  private final boolean speculative;
  private final boolean forgetRemovedEndpoints;
  private final boolean ownsTokenizer;
  /** The engines' {@code --default-chat-template-kwargs}, or null for none. */
  private final @Nullable DefaultChatTemplateKwargs defaultKwargs;
  /**
   * The engines' {@code --exclude-tools-when-tool-choice-none}: a chat whose {@code tool_choice}
   * is {@code "none"} is rendered without its tools.
   */
  private final boolean excludeToolsWhenToolChoiceNone;
  /** Endpoints in the pool, as announced through {@link PoolListener}. */
  private final Set<String> members = ConcurrentHashMap.newKeySet();
  /** When a request with its own chat template was last reported; MIN_VALUE for never. */
  private final java.util.concurrent.atomic.AtomicLong lastRequestTemplateReport =
      new java.util.concurrent.atomic.AtomicLong(Long.MIN_VALUE);

  PrecisePrefixCacheScorer(KvBlockIndex index, @Nullable Tokenizer tokenizer,
      @Nullable KvEventSubscriber subscriber, int maxPromptBlocks, boolean speculative,
      boolean forgetRemovedEndpoints, boolean ownsTokenizer) {
    this(index, tokenizer, subscriber == null ? List.of() : List.of(subscriber), maxPromptBlocks,
        speculative, forgetRemovedEndpoints, ownsTokenizer, null, false);
  }

  /** A scorer fed by every one of {@code subscribers}, which it tells of pool changes and closes. */
  static PrecisePrefixCacheScorer following(KvBlockIndex index, @Nullable Tokenizer tokenizer,
      List<KvEventSubscriber> subscribers, int maxPromptBlocks, boolean speculative,
      boolean forgetRemovedEndpoints, boolean ownsTokenizer) {
    return following(index, tokenizer, subscribers, maxPromptBlocks, speculative,
        forgetRemovedEndpoints, ownsTokenizer, null);
  }

  /**
   * As above, rendering chats with the engines' default {@code chat_template_kwargs} under each
   * request's own ({@code null}: none).
   */
  static PrecisePrefixCacheScorer following(KvBlockIndex index, @Nullable Tokenizer tokenizer,
      List<KvEventSubscriber> subscribers, int maxPromptBlocks, boolean speculative,
      boolean forgetRemovedEndpoints, boolean ownsTokenizer,
      @Nullable DefaultChatTemplateKwargs defaultKwargs) {
    return following(index, tokenizer, subscribers, maxPromptBlocks, speculative,
        forgetRemovedEndpoints, ownsTokenizer, defaultKwargs, false);
  }

  /**
   * As above; with {@code excludeToolsWhenToolChoiceNone} a chat whose {@code tool_choice} is
   * {@code "none"} is rendered without its tools, as vLLM's flag of that name has it.
   */
  static PrecisePrefixCacheScorer following(KvBlockIndex index, @Nullable Tokenizer tokenizer,
      List<KvEventSubscriber> subscribers, int maxPromptBlocks, boolean speculative,
      boolean forgetRemovedEndpoints, boolean ownsTokenizer,
      @Nullable DefaultChatTemplateKwargs defaultKwargs, boolean excludeToolsWhenToolChoiceNone) {
    return new PrecisePrefixCacheScorer(index, tokenizer, subscribers, maxPromptBlocks,
        speculative, forgetRemovedEndpoints, ownsTokenizer, defaultKwargs,
        excludeToolsWhenToolChoiceNone);
  }

  private PrecisePrefixCacheScorer(KvBlockIndex index, @Nullable Tokenizer tokenizer,
      List<KvEventSubscriber> subscribers, int maxPromptBlocks, boolean speculative,
      boolean forgetRemovedEndpoints, boolean ownsTokenizer,
      @Nullable DefaultChatTemplateKwargs defaultKwargs, boolean excludeToolsWhenToolChoiceNone) {
    this.ownsTokenizer = ownsTokenizer;
    this.excludeToolsWhenToolChoiceNone = excludeToolsWhenToolChoiceNone;
    this.defaultKwargs = defaultKwargs == null || defaultKwargs.isEmpty() ? null : defaultKwargs;
    this.index = index;
    this.tokenizer = tokenizer;
    this.subscribers = List.copyOf(subscribers);
    this.maxPromptBlocks = maxPromptBlocks;
    this.speculative = speculative;
    this.forgetRemovedEndpoints = forgetRemovedEndpoints;
  }

  KvBlockIndex index() {
    return index;
  }

  /** The address the central-mode subscriber bound, or null (no subscriber, or per endpoint). */
  @Nullable String boundEventsEndpoint() {
    for (KvEventSubscriber s : subscribers) {
      String bound = s.boundEndpoint();
      if (bound != null) {
        return bound;
      }
    }
    return null;
  }

  /** Whether a subscriber connects to each endpoint's publisher (per-endpoint mode); for tests. */
  boolean followsEachEndpoint() {
    for (KvEventSubscriber s : subscribers) {
      if (!s.isCentral()) {
        return true;
      }
    }
    return false;
  }

  /**
   * A {@code token-producer} listed after this scorer lends it its tokenizer, as llm-d's
   * tokenizes for every scorer whatever the order of the file; kept only when this scorer has
   * none (neither its own {@code tokenizer}, a {@link Tokenizer} service, nor an earlier
   * producer's). Called while the configuration is built, before it routes.
   */
  void lendTokenizer(Tokenizer lent) {
    if (tokenizer == null) {
      tokenizer = lent;
    }
  }

  /** The tokenizer in use, or null; for tests. */
  @Nullable Tokenizer tokenizer() {
    return tokenizer;
  }

  int maxPromptBlocks() {
    return maxPromptBlocks;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    PreciseMatch m = match(request, state, candidates);
    if (m == null) {
      return;
    }
    if (m.scoredOver(candidates)) {
      // positions align, and the scores array arrives zeroed: only holders need a score
      for (int i = 0, n = candidates.size(); i < n; i++) {
        double matched = m.matchedWeightAt(i);
        if (matched > 0) {
          scores[i] = matched / m.totalBlocksAt(i);
        }
      }
      PrefixHits.publish(state, m);
      return;
    }
    for (int i = 0; i < candidates.size(); i++) {
      String id = candidates.get(i).id();
      boolean same = m.isAt(i, id); // same candidate order as when the match was computed
      int total = same ? m.totalBlocksAt(i) : m.totalBlocks(id);
      double matched = same ? m.matchedWeightAt(i) : m.matchedWeight(id);
      scores[i] = total == 0 ? 0 : matched / total;
    }
    PrefixHits.publish(state, m);
  }

  /**
   * Computes (or reuses) the cycle's match and keeps it under {@link PreciseMatch#KEY}. A match
   * of an earlier profile is reused when it covers {@code candidates}, else extended with them
   * (a prefill pool is usually not the decode pool).
   */
  @Nullable PreciseMatch match(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    PreciseMatch existing = state.get(PreciseMatch.KEY);
    if (existing != null && covers(existing, candidates)) {
      return existing;
    }
    int[] tokens = tokens(request);
    if (tokens == null) {
      return null;
    }
    int n = candidates.size();
    Layout layout = layout(candidates, request.targetModel());
    if (layout != null) {
      PreciseMatch m = matchByLayout(layout, request, tokens, state.nowNanos(),
          (PoolOrder) candidates);
      if (existing != null) {
        m = existing.plus(m);
      }
      state.put(PreciseMatch.KEY, m);
      return m;
    }
    EndpointHoldings[] byPosition = viewsByPosition(candidates);
    String[] ids = new String[n];
    long[][] keys = new long[n][];
    Scratch scratch = SCRATCH.get().fit(n);
    int[] slots = scratch.slots; // per-route working arrays, written before they are read
    double[] weights = new double[n];
    int[] blockSizes = new int[n];
    // key variants: (block size, model seed); nearly always one per pool
    int variants = 0;
    int[] vBlockSize = new int[Math.min(n, 4)];
    String[] vModel = new String[vBlockSize.length];
    long[][] vKeys = new long[vBlockSize.length][];
    int[] variantOf = scratch.variantOf;
    String target = request.targetModel();
    String lastModel = null; // endpoints of one pool share their model's string: compared once
    boolean lastServes = false;
    for (int i = 0; i < n; i++) {
      Candidate c = candidates.get(i);
      ids[i] = c.id();
      EndpointHoldings e = byPosition != null ? byPosition[i] : index.endpointView(ids[i]);
      slots[i] = e == null ? -1 : e.slot;
      String model = e == null ? index.endpointModel(ids[i]) : e.model;
      if (model != lastModel) {
        lastModel = model;
        lastServes = model.isEmpty() || model.equals(target);
      }
      if (!lastServes) {
        variantOf[i] = -1; // serves another model: holds nothing of this request
        keys[i] = new long[0];
        blockSizes[i] = index.defaultBlockSize();
        continue;
      }
      int bs = e != null && e.blockSize > 0 ? e.blockSize
          : c.metrics().blockSizeTokens() > 0 ? c.metrics().blockSizeTokens()
          : index.defaultBlockSize();
      blockSizes[i] = bs;
      int v = -1;
      for (int j = 0; j < variants; j++) {
        if (vBlockSize[j] == bs && vModel[j].equals(model)) {
          v = j;
          break;
        }
      }
      if (v < 0) {
        long seed = BlockKeys.seed(model, request.loraAdapter(), request.cacheSalt());
        long[] k = BlockKeys.chain(seed, tokens, bs, maxPromptBlocks);
        if (variants < vBlockSize.length) {
          v = variants++;
          vBlockSize[v] = bs;
          vModel[v] = model;
          vKeys[v] = k;
        } else {
          keys[i] = k; // rare: more variants than slots, compute alone
          variantOf[i] = -2;
          continue;
        }
      }
      variantOf[i] = v;
      keys[i] = vKeys[v];
    }
    long now = state.nowNanos();
    boolean[] use = scratch.use;
    int[] knownReal = new int[n];
    for (int v = 0; v < variants; v++) {
      for (int i = 0; i < n; i++) {
        use[i] = variantOf[i] == v;
      }
      index.prefixWeights(vKeys[v], KvBlockIndex.servableBlocks(vKeys[v], tokens.length,
          vBlockSize[v]), slots, use, now, weights, knownReal);
    }
    for (int i = 0; i < n; i++) {
      if (variantOf[i] == -2) {
        weights[i] = index.prefixWeight(ids[i], keys[i],
            KvBlockIndex.servableBlocks(keys[i], tokens.length, blockSizes[i]), now);
      }
    }
    PreciseMatch m = new PreciseMatch(ids, keys, weights, blockSizes, knownReal,
        candidates instanceof PoolOrder po ? po : null, tokens.length);
    if (existing != null) {
      m = existing.plus(m);
    }
    state.put(PreciseMatch.KEY, m);
    return m;
  }

  /**
   * The match of a list in the pool's order through its layout: the keys once per variant, and
   * a walk per variant that starts from the endpoints holding the first block, so an endpoint
   * that holds nothing of the prompt costs nothing but its share of a zeroed array.
   */
  private PreciseMatch matchByLayout(Layout layout, InferenceRequest request, int[] tokens,
      long now, PoolOrder order) {
    int n = layout.ids.length;
    int variants = layout.vBlockSize.length;
    long[][] vKeys = new long[variants][];
    double[] weights = new double[n];
    int[] knownReal = new int[n];
    for (int v = 0; v < variants; v++) {
      long seed = BlockKeys.seed(layout.vModel[v], request.loraAdapter(), request.cacheSalt());
      vKeys[v] = BlockKeys.chain(seed, tokens, layout.vBlockSize[v], maxPromptBlocks);
      index.prefixWeights(vKeys[v], KvBlockIndex.servableBlocks(vKeys[v], tokens.length,
          layout.vBlockSize[v]), layout.plans[v], now, weights, knownReal);
    }
    return new PreciseMatch(layout.ids, vKeys, layout.variantOf, weights, layout.blockSizes,
        knownReal, order, tokens.length);
  }

  /**
   * What a list in the pool's order looks like to the index for one target model: each
   * endpoint's slot, block size and key variant (block size, model), and per variant the plan of
   * its walk. Valid while the order token and {@link KvBlockIndex#endpointsVersion()} stay the
   * same (the version moves when the index learns or forgets an endpoint, its model or its block
   * size). {@code null} for any other list, and while some endpoint is unknown to the index or
   * has no block size yet (its size then comes from its metrics, which may change at any scrape):
   * those lists take the candidate-by-candidate match.
   */
  private @Nullable Layout layout(List<Candidate> candidates, String target) {
    if (!(candidates instanceof PoolOrder po)) {
      return null;
    }
    Object order = po.poolOrder();
    long version = index.endpointsVersion(); // read before the views below
    int n = candidates.size();
    Layout[] cached = layouts;
    for (Layout l : cached) {
      if (l.order == order && l.version == version && l.ids.length == n
          && l.target.equals(target)) {
        return l.usable ? l : null;
      }
    }
    Layout built = buildLayout(candidates, order, version, target);
    // a few target models at once keep their layouts; the oldest gives way
    Layout[] next = new Layout[Math.min(cached.length + 1, MAX_LAYOUTS)];
    next[0] = built;
    System.arraycopy(cached, 0, next, 1, next.length - 1);
    layouts = next;
    return built.usable ? built : null;
  }

  private Layout buildLayout(List<Candidate> candidates, Object order, long version,
      String target) {
    int n = candidates.size();
    String[] ids = new String[n];
    int[] slots = new int[n];
    int[] blockSizes = new int[n];
    int[] variantOf = new int[n];
    int[] vBlockSize = new int[0];
    String[] vModel = new String[0];
    int[] members = new int[n];
    for (int i = 0; i < n; i++) {
      ids[i] = candidates.get(i).id();
      EndpointHoldings e = index.endpointView(ids[i]);
      if (e == null || e.blockSize <= 0) {
        return Layout.unusable(order, version, target, n);
      }
      slots[i] = e.slot;
      String model = e.model;
      if (!(model.isEmpty() || model.equals(target))) {
        variantOf[i] = -1; // serves another model: holds nothing of this request
        blockSizes[i] = index.defaultBlockSize();
        continue;
      }
      int bs = e.blockSize;
      blockSizes[i] = bs;
      int v = 0;
      while (v < vBlockSize.length && !(vBlockSize[v] == bs && vModel[v].equals(model))) {
        v++;
      }
      if (v == vBlockSize.length) {
        vBlockSize = Arrays.copyOf(vBlockSize, v + 1);
        vModel = Arrays.copyOf(vModel, v + 1);
        vBlockSize[v] = bs;
        vModel[v] = model;
      }
      variantOf[i] = v;
    }
    KvBlockIndex.FirstBlockPlan[] plans = new KvBlockIndex.FirstBlockPlan[vBlockSize.length];
    for (int v = 0; v < plans.length; v++) {
      int m = 0;
      for (int i = 0; i < n; i++) {
        if (variantOf[i] == v) {
          members[m++] = i;
        }
      }
      KvBlockIndex.FirstBlockPlan plan =
          KvBlockIndex.firstBlockPlan(slots, Arrays.copyOf(members, m));
      if (plan == null) {
        return Layout.unusable(order, version, target, n);
      }
      plans[v] = plan;
    }
    return new Layout(order, version, target, true, ids, slots, blockSizes, variantOf,
        vBlockSize, vModel, plans);
  }

  /** One list order's layout for one target model (see {@link #layout}). */
  private static final class Layout {
    final Object order;
    final long version;
    final String target;
    final boolean usable;
    final String[] ids;
    final int[] slots;
    final int[] blockSizes;
    final int[] variantOf;
    final int[] vBlockSize;
    final String[] vModel;
    final KvBlockIndex.FirstBlockPlan[] plans;

    Layout(Object order, long version, String target, boolean usable, String[] ids,
        int[] slots, int[] blockSizes, int[] variantOf, int[] vBlockSize, String[] vModel,
        KvBlockIndex.FirstBlockPlan[] plans) {
      this.order = order;
      this.version = version;
      this.target = target;
      this.usable = usable;
      this.ids = ids;
      this.slots = slots;
      this.blockSizes = blockSizes;
      this.variantOf = variantOf;
      this.vBlockSize = vBlockSize;
      this.vModel = vModel;
      this.plans = plans;
    }

    /** A list that takes the candidate-by-candidate match until the version moves. */
    static Layout unusable(Object order, long version, String target, int n) {
      return new Layout(order, version, target, false, new String[n], new int[0], new int[0],
          new int[0], new int[0], new String[0], new KvBlockIndex.FirstBlockPlan[0]);
    }
  }

  /** Layouts kept at once: one per target model served through the same list order. */
  private static final int MAX_LAYOUTS = 4;

  private volatile Layout[] layouts = new Layout[0];

  /**
   * The index's view of each candidate by position, for a list in the pool's order
   * ({@link PoolOrder}): looked up by id once per order and per change of the endpoints the index
   * tracks, instead of once per candidate and route. {@code null} for any other list.
   */
  private EndpointHoldings @Nullable [] viewsByPosition(List<Candidate> candidates) {
    if (!(candidates instanceof PoolOrder po)) {
      return null;
    }
    Object order = po.poolOrder();
    Views v = views;
    long version = index.endpointsVersion(); // read before the lookups below
    int n = candidates.size();
    if (v.order == order && v.version == version && v.holdings.length == n) {
      return v.holdings;
    }
    EndpointHoldings[] holdings = new EndpointHoldings[n];
    for (int i = 0; i < n; i++) {
      holdings[i] = index.endpointView(candidates.get(i).id());
    }
    views = new Views(order, version, holdings);
    return holdings;
  }

  /** The index's views by position for one {@link PoolOrder} token and index version. */
  private record Views(@Nullable Object order, long version, EndpointHoldings[] holdings) {}

  private volatile Views views = new Views(null, -1, new EndpointHoldings[0]);

  private static final ThreadLocal<Scratch> SCRATCH = ThreadLocal.withInitial(Scratch::new);

  /** Working arrays of one match that do not outlive it, reused per thread. */
  private static final class Scratch {
    int[] slots = new int[0];
    int[] variantOf = new int[0];
    boolean[] use = new boolean[0];

    /** Arrays of exactly {@code n} entries (the index reads the pool size from their length). */
    Scratch fit(int n) {
      if (slots.length != n) {
        slots = new int[n];
        variantOf = new int[n];
        use = new boolean[n];
      }
      return this;
    }
  }

  private static boolean covers(PreciseMatch m, List<Candidate> candidates) {
    for (int i = 0, n = candidates.size(); i < n; i++) {
      String id = candidates.get(i).id();
      if (!m.isAt(i, id) && m.indexOf(id) < 0) {
        return false;
      }
    }
    return true;
  }

  private int @Nullable [] tokens(InferenceRequest request) {
    int[] t = request.tokenIds();
    if (t != null) {
      return t;
    }
    Tokenizer tk = tokenizer;
    if (tk == null) {
      return null;
    }
    try {
      if (request.kind() == InferenceRequest.Kind.CHAT) {
        // vLLM with --exclude-tools-when-tool-choice-none hands the template no tools for
        // tool_choice "none", as for a request without any (default tools and a tools key of
        // chat_template_kwargs still apply)
        String tools = excludeToolsWhenToolChoiceNone && "none".equals(request.toolChoice())
            ? null : request.toolsJson();
        DefaultChatTemplateKwargs d = defaultKwargs;
        ChatTemplateArgs args = d == null ? request.chatTemplateArgs()
            : d.applyTo(request.chatTemplateArgs(), tools);
        return request.addSpecialTokens()
            ? tk.encodeChat(request.messages(), tools, args, true)
            : tk.encodeChat(request.messages(), tools, args);
      }
      String prompt = request.prompt() == null ? "" : request.prompt();
      // vLLM adds the special tokens to a completion's prompt unless it turns them off
      return request.addSpecialTokens() ? tk.encodePrompt(prompt) : tk.encode(prompt);
    } catch (RuntimeException e) {
      index.metrics().untokenizedRequests.increment();
      if (request.kind() == InferenceRequest.Kind.CHAT
          && request.chatTemplateArgs().requestTemplate() != null) {
        reportRequestTemplate();
      }
      // redacted: a tokenizer's message may quote the prompt or a chat template's rendering
      LOG.log(Level.FINE, "tokenization failed; scoring request as uncached",
          io.epp4j.api.RedactedException.of(e));
      return null;
    }
  }

  /**
   * A chat with its own {@code chat_template} was refused by the tokenizer (the in-process ones
   * render only the model's template): logged at most once per
   * {@link KvEventSubscriber#REPORT_INTERVAL}, without the template, which is client text.
   */
  private void reportRequestTemplate() {
    long now = System.nanoTime();
    long last = lastRequestTemplateReport.get();
    if ((last == Long.MIN_VALUE || now - last >= KvEventSubscriber.REPORT_INTERVAL.toNanos())
        && lastRequestTemplateReport.compareAndSet(last, now)) {
      LOG.warning("chat requests with their own chat_template are scored as uncached: the"
          + " tokenizer renders only the model's template (the engine renders the request's"
          + " with --trust-request-chat-template, or refuses it); a tokenizer of type vllm"
          + " asks the engine instead (" + index.metrics().untokenizedRequests()
          + " untokenizable request(s) so far, the untokenizedRequests metric)");
    }
  }

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    if (!speculative) {
      return;
    }
    PreciseMatch m = state.get(PreciseMatch.KEY);
    if (m == null) {
      return;
    }
    recordSpeculative(m, decision.primary(), state.nowNanos());
    Endpoint prefill = decision.secondaryEndpoint(PREFILL_PROFILE);
    if (prefill != null) {
      recordSpeculative(m, prefill, state.nowNanos());
    }
  }

  private void recordSpeculative(PreciseMatch m, Endpoint e, long now) {
    String id = e.id();
    long[] keys = m.keys(id);
    if (keys == null || keys.length == 0 || !members.contains(id)) {
      return;
    }
    // makes the index know the endpoint; skips the blocks the lookup saw held for real
    index.recordSpeculative(id, keys, m.knownReal(id), now);
    // A removal takes the id out of the members before it makes the index forget the endpoint.
    // Still a member here: that forgetting comes after this record. Not a member: it may have
    // come before, so it is repeated. (Should the endpoint rejoin in between, the index forgets
    // its first events again; they are re-learned as the engine reports new blocks.)
    if (forgetRemovedEndpoints && !members.contains(id)) {
      index.removeEndpoint(id);
    }
  }

  @Override
  public void onEndpointAdded(Endpoint endpoint) {
    members.add(endpoint.id());
    for (KvEventSubscriber s : subscribers) {
      s.addEndpoint(endpoint);
    }
  }

  /** A changed KV-events port label is followed at once; the endpoint's blocks are kept. */
  @Override
  public void onEndpointChanged(Endpoint previous, Endpoint current) {
    for (KvEventSubscriber s : subscribers) {
      s.changeEndpoint(previous, current);
    }
  }

  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    members.remove(endpoint.id());
    // once every subscriber has returned, none of them applies a batch of the endpoint any more
    for (KvEventSubscriber s : subscribers) {
      s.removeEndpoint(endpoint);
    }
    if (forgetRemovedEndpoints) {
      index.removeEndpoint(endpoint.id());
    }
  }

  @Override
  public void close() {
    if (telemetry != null) {
      telemetry.close();
    }
    for (KvEventSubscriber s : subscribers) {
      s.close();
    }
    Tokenizer tk = tokenizer;
    if (ownsTokenizer && tk != null) {
      tk.close();
    }
  }
}
