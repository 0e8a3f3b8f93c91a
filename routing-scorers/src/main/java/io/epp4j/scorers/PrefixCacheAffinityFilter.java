package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Filter;
import io.epp4j.api.HintListener;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * {@code prefix-cache-affinity-filter}, as llm-d's: keeps the "sticky" candidates, those whose
 * prefix-cache score ({@code cachedBlocks / totalBlocks}) is at least {@code affinityThreshold},
 * when there is one; all candidates otherwise. Two ways out of stickiness: with probability
 * {@code explorationProbability} the gate is skipped, and the TTFT gate keeps every candidate
 * when the best sticky endpoint's estimated time to first token exceeds the best other's by more
 * than {@code maxTTFTPenaltyMs}, the estimate being an endpoint's in-flight tokens (uncached
 * prompts not yet prefilled, see {@link InFlightLoadProducer}) over {@code peakPrefillThroughput}.
 *
 * <p>The scores come from the file's prefix-match producer (as for a {@code prefix-cache-scorer}
 * reading one), asked at filter time, before any scorer; without one in the file the filter keeps
 * an approximate index of its own with the producer's defaults, as upstream adds a default
 * producer. The in-flight tokens come from the file's {@code inflight-load-producer}, else from a
 * count of its own.
 */
final class PrefixCacheAffinityFilter implements Filter, OwnsInFlightLoad, HintListener {
  static final double DEFAULT_AFFINITY_THRESHOLD = 0.80;
  static final double DEFAULT_MAX_TTFT_PENALTY_MS = 18_000;
  /** Upstream's default: Qwen3-32B on two H100s (TP 2) with vLLM 0.19, tokens per second. */
  static final double DEFAULT_PEAK_PREFILL_THROUGHPUT = 15_928;

  /** The producer's scores, read only within {@link #filter}: an array per thread, not per route. */
  private static final ThreadLocal<double[]> SCORES = ThreadLocal.withInitial(() -> new double[0]);

  private final double affinityThreshold;
  private final double explorationProbability;
  private final double maxTtftPenaltyMs;
  private final double peakPrefillThroughput;
  private final Scorer prefix;
  /** The index this filter keeps when the file has no producer; null when it reads one. */
  private final @Nullable PrefixCacheScorer ownIndex;
  private final InFlightLoadProducer load;
  /** Whether {@link #load} is this filter's own, which then hears the request lifecycle. */
  private final boolean ownLoad;

  PrefixCacheAffinityFilter(double affinityThreshold, double explorationProbability,
      double maxTtftPenaltyMs, double peakPrefillThroughput, @Nullable Scorer producer,
      @Nullable InFlightLoadProducer load, InFlightLoadProducer fallbackLoad) {
    this.affinityThreshold = affinityThreshold;
    this.explorationProbability = explorationProbability;
    this.maxTtftPenaltyMs = maxTtftPenaltyMs;
    this.peakPrefillThroughput = peakPrefillThroughput;
    if (producer != null) {
      this.prefix = producer;
      this.ownIndex = null;
    } else {
      PrefixCacheScorer own = PrefixCacheScorer.index(Parameters.of(java.util.Map.of()), true)
          .build();
      this.prefix = own;
      this.ownIndex = own;
    }
    this.ownLoad = load == null;
    this.load = load != null ? load : fallbackLoad;
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    int n = candidates.size();
    if (n <= 1 || affinityThreshold <= 0) {
      return candidates;
    }
    if (explorationProbability > 0 && state.random().nextDouble() < explorationProbability) {
      return candidates;
    }
    double[] scores = SCORES.get();
    if (scores.length < n) {
      scores = new double[n];
      SCORES.set(scores);
    } else {
      Arrays.fill(scores, 0, n, 0.0); // a scorer is handed a zeroed array
    }
    prefix.score(request, state, candidates, scores);
    int kept = 0;
    for (int i = 0; i < n; i++) {
      if (scores[i] >= affinityThreshold) {
        kept++;
      }
    }
    if (kept == 0 || kept == n) {
      return candidates; // no in-flight load is read: it could not change the answer
    }
    List<Candidate> sticky = new ArrayList<>(kept);
    double bestSticky = Double.MAX_VALUE;
    double bestOther = Double.MAX_VALUE;
    for (int i = 0; i < n; i++) {
      Candidate c = candidates.get(i);
      boolean cached = scores[i] >= affinityThreshold;
      if (cached) {
        sticky.add(c);
      }
      if (maxTtftPenaltyMs > 0) {
        double ttft = ttftMillis(c.id());
        if (cached) {
          bestSticky = Math.min(bestSticky, ttft);
        } else {
          bestOther = Math.min(bestOther, ttft);
        }
      }
    }
    if (maxTtftPenaltyMs > 0 && bestSticky - bestOther > maxTtftPenaltyMs) {
      return candidates; // the cached endpoints are too far behind: stickiness breaks
    }
    return sticky;
  }

  /** The estimated time to first token on an endpoint, from its in-flight tokens. */
  private double ttftMillis(String endpointId) {
    return load.tokens(endpointId) / peakPrefillThroughput * 1000.0;
  }

  // the lifecycle reaches the index and the count only when they are this filter's own: a
  // producer of the file hears it as a plugin of the file

  @Override
  public @Nullable InFlightLoadProducer ownLoad() {
    return ownLoad ? load : null;
  }

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    PrefixCacheScorer own = ownIndex;
    if (own != null) {
      own.afterRouting(request, state, decision);
    }
    OwnsInFlightLoad.super.afterRouting(request, state, decision);
  }

  @Override
  public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
    PrefixCacheScorer own = ownIndex;
    if (own != null) {
      own.onFallback(request, from, to);
    }
    OwnsInFlightLoad.super.onFallback(request, from, to);
  }

  @Override
  public void onEndpointAdded(Endpoint endpoint) {
    PrefixCacheScorer own = ownIndex;
    if (own != null) {
      own.onEndpointAdded(endpoint);
    }
    OwnsInFlightLoad.super.onEndpointAdded(endpoint);
  }

  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    PrefixCacheScorer own = ownIndex;
    if (own != null) {
      own.onEndpointRemoved(endpoint);
    }
    OwnsInFlightLoad.super.onEndpointRemoved(endpoint);
  }

  @Override
  public void onEndpointChanged(Endpoint previous, Endpoint current) {
    PrefixCacheScorer own = ownIndex;
    if (own != null) {
      own.onEndpointChanged(previous, current);
    }
  }

  @Override
  public void onEndpointCacheDropped(Endpoint endpoint) {
    PrefixCacheScorer own = ownIndex;
    if (own != null) {
      own.onEndpointCacheDropped(endpoint);
    }
  }

  @Override
  public void onRemotePrefix(String endpointId, PrefixBlocks blocks) {
    PrefixCacheScorer own = ownIndex;
    if (own != null) {
      own.onRemotePrefix(endpointId, blocks);
    }
  }

  @Override
  public String toString() {
    return "prefix-cache-affinity-filter(affinityThreshold=" + affinityThreshold + ")";
  }

  /** Provides {@code prefix-cache-affinity-filter}; public only for ServiceLoader. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("prefix-cache-affinity-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      double threshold = p.getDouble("affinityThreshold", DEFAULT_AFFINITY_THRESHOLD,
          -Double.MAX_VALUE, 1.0);
      double exploration = p.getDouble("explorationProbability", 0.0, 0.0, 1.0);
      double penalty = p.getDouble("maxTTFTPenaltyMs", DEFAULT_MAX_TTFT_PENALTY_MS, 0.0,
          Double.MAX_VALUE);
      String source = p.getEnum("ttftSource", "prefillThroughput",
          Set.of("prefillThroughput", "latencyPredictor"));
      if ("latencyPredictor".equals(source)) {
        p.error("ttftSource", "latencyPredictor needs upstream's latency predictor, which epp4j"
            + " does not have; use prefillThroughput");
      }
      double peak = p.getDouble("peakPrefillThroughput", DEFAULT_PEAK_PREFILL_THROUGHPUT, 0.0,
          Double.MAX_VALUE);
      if (penalty > 0 && peak == 0) {
        p.error("peakPrefillThroughput", "must be > 0 when maxTTFTPenaltyMs is (the TTFT"
            + " estimate divides by it)");
      }
      if (p.has("latencyPredictionInfoProducerName")) {
        p.notice("latencyPredictionInfoProducerName", "has no effect: epp4j has no latency"
            + " predictor; the TTFT gate reads in-flight tokens");
      }
      Scorer producer = PrefixMatchScorer.fileProducer(c, p);
      InFlightLoadProducer load = InFlightLoadProducer.find(c, p, "inFlightLoadProducerName");
      InFlightLoadProducer own = load != null ? load : new InFlightLoadProducer(false,
          InFlightLoadProducer.DEFAULT_OUTPUT_RATIO, -1, c.ticker(),
          InFlightLoadProducer.maxAgeNanos(c));
      return new PrefixCacheAffinityFilter(threshold, exploration, penalty,
          peak == 0 ? 1 : peak, producer, load, own);
    }
  }
}
