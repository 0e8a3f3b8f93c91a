package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.AttributeKey;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RequestPreparer;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * {@code p2p-source-producer}: llm-d's KV cache source for peer-to-peer pulls. Before the request
 * is scheduled it asks the file's prefix-match producer what every candidate holds of the
 * prompt and chooses a source among the endpoints within one block of the most cached tokens,
 * drawn with weight {@code 1 / (1 + waiting requests)} at a point the request id fixes (FNV-1a),
 * so that the pulls of a widely cached prefix spread over its holders and avoid queued ones.
 * After routing it names that source in {@value #HEADER} on the request the gateway forwards,
 * for the model server's sidecar to pull the blocks from, when the source holds at least
 * {@code minCachedTokenDelta} tokens more than the endpoint that computes the prompt (the
 * {@code prefillProfileName} profile's pick when that profile ran, else the primary pick). A
 * value of that header the client sent is removed either way.
 */
final class P2pSourceProducer implements RequestPreparer, RequestListener {
  /** The request header the routing sidecar reads. */
  static final String HEADER = "x-kv-cache-source-host-port";

  /** What {@link #prepare} found for one request. */
  private record Source(String endpointId, long cachedTokens, PrefixHits hits) {}

  /** The producer's scores (not read), then what each candidate holds: one array per thread. */
  private static final ThreadLocal<double[]> SCRATCH = ThreadLocal.withInitial(() -> new double[0]);

  private final Scorer producer;
  private final long minCachedTokenDelta;
  private final String prefillProfile;
  private final AttributeKey<Source> key = AttributeKey.of("p2p-source", Source.class);

  P2pSourceProducer(Scorer producer, long minCachedTokenDelta, String prefillProfile) {
    this.producer = producer;
    this.minCachedTokenDelta = minCachedTokenDelta;
    this.prefillProfile = prefillProfile;
  }

  @Override
  public void prepare(InferenceRequest request, CycleState state, List<Candidate> candidates) {
    int n = candidates.size();
    if (n == 0) {
      return;
    }
    double[] scratch = SCRATCH.get();
    if (scratch.length < 2 * n) {
      scratch = new double[2 * n];
      SCRATCH.set(scratch);
    } else {
      Arrays.fill(scratch, 0, n, 0.0); // a scorer is handed a zeroed array
    }
    producer.score(request, state, candidates, scratch); // the scores themselves are not read
    PrefixHits hits = state.get(PrefixHits.KEY);
    if (hits == null) {
      return;
    }
    // one look-up of each candidate in the hits, into the scratch: [i] the tokens it holds,
    // [n + i] those plus one of its blocks (0 when it holds none); then the band's total weight
    // and the draw read the scratch
    boolean aligned = hits.size() == n; // the producer's own match names the candidates in order
    long max = 0;
    for (int i = 0; i < n; i++) {
      String id = candidates.get(i).id();
      int at = aligned && hits.endpointId(i) == id ? i : hits.indexOf(id);
      long cached = at < 0 ? 0 : hits.cachedTokens(at);
      scratch[i] = cached;
      scratch[n + i] = cached == 0 ? 0 : cached + hits.blockSizeTokens(at);
      max = Math.max(max, cached);
    }
    if (max == 0) {
      return;
    }
    double total = 0;
    for (int i = 0; i < n; i++) {
      total += weight(scratch[n + i], candidates.get(i), max);
    }
    double target = spread(request.requestId()) * total;
    int chosen = -1;
    for (int i = 0; i < n; i++) {
      double w = weight(scratch[n + i], candidates.get(i), max);
      if (w == 0) {
        continue;
      }
      chosen = i; // the last one in the band, should rounding leave the target past them all
      if (target < w) {
        break;
      }
      target -= w;
    }
    if (chosen >= 0) {
      state.put(key, new Source(candidates.get(chosen).id(), (long) scratch[chosen], hits));
    }
  }

  /**
   * A candidate's weight in the draw: {@code 1 / (1 + waiting requests)} when it holds within one
   * block of {@code max} cached tokens ({@code reach}: the tokens it holds plus one of its
   * blocks, 0 when it holds none), else 0.
   */
  private static double weight(double reach, Candidate c, long max) {
    if (reach == 0 || reach < max) {
      return 0;
    }
    return 1.0 / (1.0 + Math.max(0, c.waitingRequests()));
  }

  /** A request id as a point of [0, 1): FNV-1a (32 bits) of its UTF-8 bytes over 2^32. */
  static double spread(String requestId) {
    int h = 0x811c9dc5;
    for (byte b : requestId.getBytes(StandardCharsets.UTF_8)) {
      h ^= b & 0xff;
      h *= 0x01000193;
    }
    return (h & 0xffffffffL) / 4294967296.0;
  }

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    Source best = state.get(key);
    if (best == null) {
      decision.setRequestHeader(HEADER, null); // a value the client sent is removed
      return;
    }
    ProfileResult prefill = decision.profileResults().get(prefillProfile);
    Endpoint prefillPick = prefill != null ? prefill.primary() : null;
    if (prefillPick != null) {
      // the prefill endpoint computes the prompt wherever the decode endpoint ends up
      decision.setRequestHeader(HEADER, source(best.endpointId(), best.cachedTokens(),
          prefillPick.id(), best.hits().cachedTokens(prefillPick.id())));
      return;
    }
    // the endpoint that computes the prompt is the one the gateway forwards to: the primary
    // pick, or after a fallback that fallback. What each of them holds is read now (the hits
    // belong to this cycle); the header's value is chosen for the endpoint of each attempt.
    List<Endpoint> endpoints = decision.endpoints();
    String[] ids = new String[endpoints.size()];
    long[] cached = new long[ids.length];
    for (int i = 0; i < ids.length; i++) {
      ids[i] = endpoints.get(i).id();
      cached[i] = best.hits().cachedTokens(ids[i]);
    }
    String bestId = best.endpointId();
    long bestCached = best.cachedTokens();
    decision.setRequestHeaderFor(HEADER, d -> {
      String computing = d.servedBy().id();
      for (int i = 0; i < ids.length; i++) {
        if (ids[i].equals(computing)) {
          return source(bestId, bestCached, computing, cached[i]);
        }
      }
      return null;
    });
  }

  /**
   * The source to name when {@code computing}, which holds {@code computingCached} tokens of
   * the prompt, computes it: the chosen one ({@code bestId}, holding {@code bestCached}) when it
   * is another endpoint and holds at least {@code minCachedTokenDelta} tokens more; else null
   * (no header).
   */
  private @Nullable String source(String bestId, long bestCached, String computing,
      long computingCached) {
    return !bestId.equals(computing) && bestCached - computingCached >= minCachedTokenDelta
        ? bestId : null;
  }

  @Override
  public String toString() {
    return "p2p-source-producer(reads " + producer + ")";
  }

  /** Provides {@code p2p-source-producer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("p2p-source-producer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      long delta = p.getLong("minCachedTokenDelta", 1);
      if (delta < 1) {
        p.error("minCachedTokenDelta", "must be >= 1, got " + delta);
      }
      String profile = p.getString("prefillProfileName", "");
      if (profile == null || profile.isBlank()) {
        profile = PdProfileHandler.PREFILL_PROFILE;
      }
      Scorer producer = PrefixMatchScorer.fileProducer(c, p);
      if (producer == null && !p.has(PrefixMatchScorer.PRODUCER_PARAMETER)) {
        p.error(PrefixMatchScorer.PRODUCER_PARAMETER, "is needed: the file has no plugin named "
            + PrefixMatchScorer.DEFAULT_PRODUCER + ", and this plugin reads what a prefix-match"
            + " producer (approx-prefix-cache-producer, precise-prefix-cache-producer) found");
      }
      return new P2pSourceProducer(producer != null ? producer : NO_PRODUCER, delta, profile);
    }
  }

  /** Stands in for a producer that could not be found; the provider has reported why. */
  private static final Scorer NO_PRODUCER = (request, state, candidates, scores) -> { };

  /** For tests: the source {@link #prepare} chose, or null. */
  @Nullable String chosen(CycleState state) {
    Source s = state.get(key);
    return s == null ? null : s.endpointId();
  }
}
