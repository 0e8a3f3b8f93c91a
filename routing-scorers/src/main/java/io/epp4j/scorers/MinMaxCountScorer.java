package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Scorer;
import java.util.List;
import java.util.function.Function;

/**
 * The shared rule of {@link QueueScorer} and {@link RunningRequestsSizeScorer}: min–max
 * normalisation of a request count over the candidates with usable metrics,
 * {@code (max − v) / (max − min)}, all 1.0 when max = min. Endpoints without usable metrics: see
 * {@link Staleness}.
 */
abstract class MinMaxCountScorer implements Scorer {
  /** Offset of a stale count in the first pass: far above any int, exact in a double. */
  private static final double STALE = 0x1p40;
  /** Below this, a first-pass value is a usable count. */
  private static final double STALE_FROM = 0x1p39;
  /** Ranges of counts below this are scored through a table of each count's score. */
  private static final int TABLE = 64;
  private static final ThreadLocal<double[]> BY_VALUE =
      ThreadLocal.withInitial(() -> new double[TABLE]);

  private final String type;
  private final Staleness staleness;

  MinMaxCountScorer(String type, Staleness staleness) {
    this.type = type;
    this.staleness = staleness;
  }

  /** The count this scorer ranks by; fewer is better. */
  abstract int value(Candidate c);

  @Override
  public final void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    long now = state.nowNanos();
    int min = Integer.MAX_VALUE;
    int max = Integer.MIN_VALUE;
    // one read of each candidate's metrics: scores[i] holds the count while the range is found,
    // offset by STALE when the metrics are known but not usable, NaN when never scraped
    for (int i = 0; i < n; i++) {
      Candidate c = candidates.get(i);
      int v = value(c);
      if (staleness.usable(c, now)) {
        min = Math.min(min, v);
        max = Math.max(max, v);
        scores[i] = v;
      } else {
        scores[i] = Staleness.known(c) ? v + STALE : Double.NaN;
      }
    }
    boolean anyUsable = min != Integer.MAX_VALUE;
    // counts are small integers: with fewer distinct values than candidates, each value's score
    // is divided out once (the same division, so the same score)
    double[] byValue = null;
    long range = (long) max - min;
    if (anyUsable && range < TABLE && range < n) {
      byValue = BY_VALUE.get();
      for (int d = 0; d <= range; d++) {
        byValue[d] = normalise(min + d, min, max);
      }
    }
    for (int i = 0; i < n; i++) {
      double x = scores[i];
      if (x < STALE_FROM) { // usable (NaN fails the comparison)
        int v = (int) x;
        scores[i] = byValue != null ? byValue[v - min] : normalise(v, min, max);
      } else if (x == x) { // known, stale
        double s = anyUsable ? normalise((int) (x - STALE), min, max) : Staleness.NEUTRAL;
        scores[i] = Math.min(Staleness.NEUTRAL, s);
      } else {
        scores[i] = Staleness.NEUTRAL;
      }
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

  /** Builds a subclass from the shared staleness parameters, its only ones. */
  abstract static class Provider extends AbstractPluginProvider {
    private final Function<Staleness, MinMaxCountScorer> make;

    Provider(String type, Function<Staleness, MinMaxCountScorer> make) {
      super(type);
      this.make = make;
    }

    @Override
    protected final Plugin build(PluginContext c, Parameters p) {
      return make.apply(Staleness.from(p));
    }
  }
}
