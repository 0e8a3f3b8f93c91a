package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Scorer;
import java.util.List;

/** Scorers driven by endpoint metrics or router-tracked load. */
final class LoadScorers {
  private LoadScorers() {}

  /**
   * {@code queue-scorer} and {@code running-requests-size-scorer}: min–max normalisation of a
   * request count over the candidates with usable metrics, {@code (max − v) / (max − min)}, all
   * 1.0 when max = min. Endpoints without usable metrics: see {@link Staleness}.
   */
  static final class MinMaxCountScorer implements Scorer {
    private final boolean running;
    private final Staleness staleness;
    private final String type;

    MinMaxCountScorer(boolean running, Staleness staleness) {
      this.running = running;
      this.staleness = staleness;
      this.type = running ? "running-requests-size-scorer" : "queue-scorer";
    }

    private int value(EndpointMetrics m) {
      return running ? m.runningRequests() : m.waitingRequests();
    }

    @Override
    public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
        double[] scores) {
      int n = candidates.size();
      long now = state.nowNanos();
      int min = Integer.MAX_VALUE;
      int max = Integer.MIN_VALUE;
      for (int i = 0; i < n; i++) {
        Candidate c = candidates.get(i);
        if (staleness.usable(c, now)) {
          int v = value(c.metrics());
          min = Math.min(min, v);
          max = Math.max(max, v);
        }
      }
      boolean anyUsable = min != Integer.MAX_VALUE;
      for (int i = 0; i < n; i++) {
        Candidate c = candidates.get(i);
        double s = anyUsable ? normalise(value(c.metrics()), min, max) : Staleness.NEUTRAL;
        scores[i] = staleness.usable(c, now) ? s : Staleness.unusableScore(c, s);
      }
    }

    private static double normalise(int v, int min, int max) {
      if (max == min) {
        return v <= min ? 1.0 : 0.0;
      }
      double s = (double) (max - v) / (max - min);
      return s < 0 ? 0 : s > 1 ? 1 : s;
    }

    @Override
    public String toString() {
      return type;
    }
  }

  /** {@code kv-cache-utilization-scorer}: {@code 1 − kvCacheUsage}. */
  static final class KvCacheUtilizationScorer implements Scorer {
    private final Staleness staleness;

    KvCacheUtilizationScorer(Staleness staleness) {
      this.staleness = staleness;
    }

    @Override
    public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
        double[] scores) {
      long now = state.nowNanos();
      for (int i = 0, n = candidates.size(); i < n; i++) {
        Candidate c = candidates.get(i);
        double s = 1.0 - c.metrics().kvCacheUsage();
        scores[i] = staleness.usable(c, now) ? s : Staleness.unusableScore(c, s);
      }
    }

    @Override
    public String toString() {
      return "kv-cache-utilization-scorer";
    }
  }

  /**
   * {@code load-aware-scorer} (llm-d): waiting queue q against a threshold T; 0.5 when q = 0,
   * else {@code 0.5 × (1 − min(q, T) / T)}. Its range is [0, 0.5], so its neutral score for
   * unusable metrics is 0.25.
   */
  static final class LoadAwareScorer implements Scorer {
    private final int threshold;
    private final Staleness staleness;

    LoadAwareScorer(int threshold, Staleness staleness) {
      this.threshold = threshold;
      this.staleness = staleness;
    }

    @Override
    public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
        double[] scores) {
      long now = state.nowNanos();
      for (int i = 0, n = candidates.size(); i < n; i++) {
        Candidate c = candidates.get(i);
        int q = c.metrics().waitingRequests();
        double s = q == 0 ? 0.5 : 0.5 * (1.0 - (double) Math.min(q, threshold) / threshold);
        if (!staleness.usable(c, now)) {
          s = Staleness.known(c) ? Math.min(0.25, s) : 0.25;
        }
        scores[i] = s;
      }
    }

    @Override
    public String toString() {
      return "load-aware-scorer";
    }
  }

  /**
   * {@code active-request-scorer} (llm-d): router-tracked in-flight requests (counted from the
   * routing decision until {@code onComplete}/{@code onFailure}); 1.0 at or below
   * {@code idleThreshold}, else {@code (maxCount − count) / maxCount} over the candidates. Needs no
   * metrics, so staleness does not apply.
   */
  static final class ActiveRequestScorer implements Scorer {
    private final int idleThreshold;

    ActiveRequestScorer(int idleThreshold) {
      this.idleThreshold = idleThreshold;
    }

    @Override
    public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
        double[] scores) {
      int n = candidates.size();
      int max = 0;
      for (int i = 0; i < n; i++) {
        max = Math.max(max, candidates.get(i).inFlightRequests());
      }
      for (int i = 0; i < n; i++) {
        int c = candidates.get(i).inFlightRequests();
        scores[i] = c <= idleThreshold || max == 0 ? 1.0 : (double) (max - c) / max;
      }
    }

    @Override
    public String toString() {
      return "active-request-scorer";
    }
  }

  /**
   * {@code token-load-scorer}: router-tracked in-flight tokens (estimated prompt plus
   * {@code max_tokens} of every request in flight); {@code (max − t) / max}, all 1.0 when nothing
   * is in flight.
   */
  static final class TokenLoadScorer implements Scorer {
    @Override
    public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
        double[] scores) {
      int n = candidates.size();
      long max = 0;
      for (int i = 0; i < n; i++) {
        max = Math.max(max, candidates.get(i).inFlightTokens());
      }
      for (int i = 0; i < n; i++) {
        long t = Math.max(0, candidates.get(i).inFlightTokens());
        scores[i] = max <= 0 ? 1.0 : (double) (max - t) / max;
      }
    }

    @Override
    public String toString() {
      return "token-load-scorer";
    }
  }

  /**
   * {@code lora-affinity-scorer}: for a request naming a LoRA adapter, 1.0 where the adapter is
   * running, 0.8 where an adapter slot is free ({@code maxLoras} unknown counts as free), 0.6
   * where it is waiting to load, else 0. Requests for the base model score 1.0 everywhere.
   */
  static final class LoraAffinityScorer implements Scorer {
    private final Staleness staleness;

    LoraAffinityScorer(Staleness staleness) {
      this.staleness = staleness;
    }

    static double affinity(EndpointMetrics m, String adapter) {
      if (m.runningLoraAdapters().contains(adapter)) {
        return 1.0;
      }
      int loaded = m.runningLoraAdapters().size() + m.waitingLoraAdapters().size();
      if (m.maxLoras() == 0 || loaded < m.maxLoras()) {
        return 0.8;
      }
      if (m.waitingLoraAdapters().contains(adapter)) {
        return 0.6;
      }
      return 0.0;
    }

    @Override
    public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
        double[] scores) {
      String adapter = request.loraAdapter();
      long now = state.nowNanos();
      for (int i = 0, n = candidates.size(); i < n; i++) {
        Candidate c = candidates.get(i);
        if (adapter == null) {
          scores[i] = 1.0;
          continue;
        }
        double s = affinity(c.metrics(), adapter);
        scores[i] = staleness.usable(c, now) ? s : Staleness.unusableScore(c, s);
      }
    }

    @Override
    public String toString() {
      return "lora-affinity-scorer";
    }
  }
}
