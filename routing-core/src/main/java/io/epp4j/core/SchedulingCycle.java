package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Picker;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.ProfileRunner;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * One scheduling cycle: the profile handler asks it to run profiles, and each profile runs its
 * filters, then its weighted scorers, then its picker over the candidates of one pool snapshot
 * (all of them, or the subset the gateway allowed for this request). Results are kept
 * so a profile runs at most once per cycle; most cycles run one profile, so the first result
 * lives in fields and a map is built only for a second one.
 *
 * <p>A plugin that throws ends the cycle with a {@link PluginFailure}, already logged under the
 * plugin's name, which the router turns into a 503.
 */
final class SchedulingCycle implements ProfileRunner {
  /**
   * Per-thread score arrays, one per scorer of the profile; taken out while in use, so a nested
   * route gets its own.
   */
  private static final ThreadLocal<double[][][]> SCORE_SCRATCH =
      ThreadLocal.withInitial(() -> new double[1][][]);
  /**
   * Per-thread totals handed to the picker, taken out while in use like the score scratch. A
   * picker reads them during its call only (none of the built-in ones keeps them), so a fresh
   * array per cycle, 8 bytes per candidate, would be garbage the moment the pick returns.
   */
  private static final ThreadLocal<double[][]> TOTAL_SCRATCH =
      ThreadLocal.withInitial(() -> new double[1][]);

  private final InferenceRequest request;
  private final CycleState state;
  /** The snapshot's candidates, or the part of them the request may go to. */
  private final List<Candidate> eligible;
  private final ActiveConfig active;
  private @Nullable String firstName;
  private @Nullable ProfileResult firstResult;
  private @Nullable Map<String, ProfileResult> more;

  SchedulingCycle(InferenceRequest request, CycleState state, List<Candidate> eligible,
      ActiveConfig active) {
    this.request = request;
    this.state = state;
    this.eligible = eligible;
    this.active = active;
  }

  @Override
  public Set<String> profileNames() {
    return active.config.profiles().keySet();
  }

  @Override
  public @Nullable ProfileResult result(String profile) {
    if (more != null) {
      return more.get(profile);
    }
    return profile.equals(firstName) ? firstResult : null;
  }

  /** Every result in the order the profiles ran. */
  Map<String, ProfileResult> results() {
    if (more != null) {
      return more;
    }
    return firstName == null || firstResult == null ? Map.of() : Map.of(firstName, firstResult);
  }

  @Override
  public ProfileResult run(String name) {
    ProfileResult done = result(name);
    if (done != null) {
      return done;
    }
    SchedulingProfile profile = active.config.profiles().get(name);
    if (profile == null) {
      throw new IllegalArgumentException("no scheduling profile named '" + name + "'");
    }
    ProfileResult r = runProfile(profile);
    if (firstName == null) {
      firstName = name;
      firstResult = r;
    } else {
      if (more == null) {
        more = new LinkedHashMap<>(4);
        more.put(firstName, firstResult);
      }
      more.put(name, r);
    }
    return r;
  }

  private ProfileResult runProfile(SchedulingProfile profile) {
    List<Candidate> candidates = eligible;
    List<Filter> filters = profile.filters();
    for (int i = 0; i < filters.size() && !candidates.isEmpty(); i++) {
      Filter f = filters.get(i);
      try {
        candidates = f.filter(request, state, candidates);
      } catch (RuntimeException e) {
        throw failure(f, "filter", e);
      }
    }
    int n = candidates.size();
    if (n == 0) {
      return new ProfileResult(profile.name(), List.of());
    }
    double[][] totalHolder = TOTAL_SCRATCH.get();
    double[] total = totalHolder[0];
    totalHolder[0] = null;
    if (total == null || total.length != n) {
      total = new double[n];
    } else {
      Arrays.fill(total, 0.0);
    }
    try {
      return scoreAndPick(profile, candidates, total, n);
    } finally {
      totalHolder[0] = total;
    }
  }

  private ProfileResult scoreAndPick(SchedulingProfile profile, List<Candidate> candidates,
      double[] total, int n) {
    List<SchedulingProfile.WeightedScorer> scorers = profile.scorers();
    if (!scorers.isEmpty()) {
      // each scorer writes its own array of exactly n entries, kept until the totals are known
      // to be sound; reused arrays are handed out only if they fit
      int k = scorers.size();
      double[][][] holder = SCORE_SCRATCH.get();
      double[][] out = holder[0];
      holder[0] = null;
      if (out == null || out.length < k || out[0].length != n) {
        out = new double[k][n];
      }
      try {
        for (int s = 0; s < k; s++) {
          SchedulingProfile.WeightedScorer ws = scorers.get(s);
          double[] scores = out[s];
          Arrays.fill(scores, 0.0);
          try {
            ws.scorer().score(request, state, candidates, scores);
          } catch (RuntimeException e) {
            throw failure(ws.scorer(), "score", e);
          }
          double w = ws.weight();
          for (int i = 0; i < n; i++) {
            // clamp to [0,1] in a form the JIT turns into vector instructions; a NaN score
            // passes through and is caught below
            total[i] += w * Math.min(Math.max(scores[i], 0.0), 1.0);
          }
        }
        if (maybeNaN(total, n)) {
          exactTotals(scorers, out, total, n);
        }
      } finally {
        holder[0] = out;
      }
    }
    Picker picker = profile.picker();
    List<Candidate> picked;
    try {
      picked = picker.pick(request, state, candidates, total);
    } catch (RuntimeException e) {
      throw failure(picker, "pick", e);
    }
    if (picked.size() == 1) {
      return new ProfileResult(profile.name(), List.of(picked.get(0).endpoint()));
    }
    List<Endpoint> eps = new ArrayList<>(picked.size());
    for (Candidate c : picked) {
      eps.add(c.endpoint());
    }
    return new ProfileResult(profile.name(), eps);
  }

  /**
   * Whether a total may be NaN: every term of a total is finite unless a score is NaN (weights
   * are finite, scores clamped), so a total is NaN only when a score is, and then so is their
   * sum. The sum may also be NaN when totals overflowed to both infinities under huge weights of
   * both signs; the exact pass then only computes the same totals again. Four sums, so that the
   * adds do not wait on each other.
   */
  private static boolean maybeNaN(double[] total, int n) {
    double a = 0;
    double b = 0;
    double c = 0;
    double d = 0;
    int i = 0;
    for (; i + 3 < n; i += 4) {
      a += total[i];
      b += total[i + 1];
      c += total[i + 2];
      d += total[i + 3];
    }
    for (; i < n; i++) {
      a += total[i];
    }
    double sum = (a + b) + (c + d);
    return sum != sum;
  }

  /**
   * The totals again from every scorer's scores, with a NaN score counted as 0, as the rule is;
   * the same additions in the same order, so the totals are those the fast pass gives for scores
   * without NaN.
   */
  private static void exactTotals(List<SchedulingProfile.WeightedScorer> scorers,
      double[][] out, double[] total, int n) {
    Arrays.fill(total, 0, n, 0.0);
    for (int s = 0; s < scorers.size(); s++) {
      double w = scorers.get(s).weight();
      double[] scores = out[s];
      for (int i = 0; i < n; i++) {
        double v = scores[i];
        // NaN fails both comparisons and counts as 0
        total[i] += w * (v >= 1.0 ? 1.0 : v > 0.0 ? v : 0.0);
      }
    }
  }

  /** Logs (throttled) that {@code plugin} threw and wraps the cause to end the cycle with a 503. */
  static PluginFailure failure(ActiveConfig active, Object plugin, String method,
      RuntimeException cause) {
    ThrottledWarning w = active.warning(plugin);
    w.report("threw " + cause.getClass().getName() + " in " + method
        + "; the request got a 503", cause);
    return new PluginFailure(w.source(), cause);
  }

  private PluginFailure failure(Object plugin, String method, RuntimeException cause) {
    return failure(active, plugin, method, cause);
  }

  /** A plugin's exception, already logged, on its way out of the scheduling cycle. */
  static final class PluginFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;
    final String source;

    PluginFailure(String source, RuntimeException cause) {
      super(source, cause, false, false); // no stack trace of its own: the cause has the useful one
      this.source = source;
    }
  }
}
