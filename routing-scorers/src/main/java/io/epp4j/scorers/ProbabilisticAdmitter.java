package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Admitter;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * {@code probabilistic-admitter} (llm-d): sheds sheddable requests (priority below 0) gradually
 * instead of all at once. With pool saturation {@code s} = the average over endpoints of
 * {@code max(waiting / queueDepthThreshold, kvUsage / kvCacheUtilThreshold)} (an endpoint never
 * scraped counts as 1), a sheddable request is refused with probability
 * {@code min(s^power × k, 1)}, drawn from the cycle's random source. Requests with priority 0 or
 * more are always admitted. Defaults as upstream: 5, 0.8, power 5, k 300.
 */
final class ProbabilisticAdmitter implements Admitter {
  private final double queueThreshold;
  private final double kvThreshold;
  private final double power;
  private final double k;

  ProbabilisticAdmitter(double queueThreshold, double kvThreshold, double power, double k) {
    this.queueThreshold = queueThreshold;
    this.kvThreshold = kvThreshold;
    this.power = power;
    this.k = k;
  }

  @Override
  public @Nullable String refuse(InferenceRequest request, CycleState state,
      List<Candidate> pool) {
    if (request.priority() >= 0 || pool.isEmpty()) {
      return null;
    }
    double s = saturation(pool);
    double probability = Math.min(Math.pow(s, power) * k, 1.0);
    if (state.random().nextDouble() < probability) {
      return "probabilistic-admitter: sheddable request refused (pool saturation "
          + String.format(java.util.Locale.ROOT, "%.3f", s) + ")";
    }
    return null;
  }

  double saturation(List<Candidate> pool) {
    double total = 0;
    for (int i = 0, n = pool.size(); i < n; i++) {
      Candidate c = pool.get(i);
      if (!c.metrics().isKnown()) {
        total += 1.0;
      } else {
        total += Math.max(c.metrics().waitingRequests() / queueThreshold,
            c.metrics().kvCacheUsage() / kvThreshold);
      }
    }
    return total / pool.size();
  }

  @Override
  public String toString() {
    return "probabilistic-admitter";
  }

  /** Provides {@code probabilistic-admitter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("probabilistic-admitter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      int q = p.getInt("queueDepthThreshold", 5, 1, Integer.MAX_VALUE);
      // as upstream, any positive threshold and power: a threshold above 1 makes KV usage weigh
      // less than the queue. Not infinite: Math.pow(1, ∞) is NaN, which would admit everything
      double kv = p.getDouble("kvCacheUtilThreshold", 0.8);
      if (!(kv > 0 && Double.isFinite(kv))) {
        p.error("kvCacheUtilThreshold", "must be > 0, got " + kv);
      }
      double power = p.getDouble("power", 5.0);
      if (!(power > 0 && Double.isFinite(power))) {
        p.error("power", "must be > 0, got " + power);
      }
      double k = p.getDouble("k", 300.0);
      if (!(k > 0 && Double.isFinite(k))) {
        p.error("k", "must be > 0, got " + k);
      }
      return new ProbabilisticAdmitter(q, kv, power, k);
    }
  }
}
