package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.MetricAttributeSource;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Scorer;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * {@code endpoint-attribute-scorer} (llm-d): scores endpoints linearly by a numeric attribute,
 * {@code (value - min) / (max - min)}, inverted for {@code linear_lower_is_better}. The range is
 * the candidates' own lowest and highest value ({@code adaptiveRange}, the default; every
 * endpoint with the attribute scores 1 when they all share one value) or a configured one
 * ({@code fixedRange}, values beyond it clamped). An endpoint without the attribute (one never
 * scraped) scores 0 and takes no part in the adaptive range. The attribute is a scraped figure a
 * {@code core-metrics-extractor} publishes under a name of its {@code customMetrics} (see
 * {@link EndpointAttributes}).
 */
final class EndpointAttributeScorer implements Scorer {
  private final MetricAttributeSource.Reader attribute;
  private final boolean lowerIsBetter;
  private final boolean fixed;
  private final double min;
  private final double max;

  /** A scorer with a fixed range when {@code fixed}, else with the candidates' own range. */
  EndpointAttributeScorer(MetricAttributeSource.Reader attribute, boolean lowerIsBetter,
      boolean fixed, double min, double max) {
    this.attribute = attribute;
    this.lowerIsBetter = lowerIsBetter;
    this.fixed = fixed;
    this.min = min;
    this.max = max;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    double lo = min;
    double hi = max;
    if (!fixed) {
      lo = Double.POSITIVE_INFINITY;
      hi = Double.NEGATIVE_INFINITY;
      // the values go into the score array first: each is read once
      for (int i = 0; i < n; i++) {
        double v = attribute.read(candidates.get(i));
        scores[i] = v;
        if (!Double.isNaN(v)) {
          lo = Math.min(lo, v);
          hi = Math.max(hi, v);
        }
      }
    } else {
      for (int i = 0; i < n; i++) {
        scores[i] = attribute.read(candidates.get(i));
      }
    }
    for (int i = 0; i < n; i++) {
      double v = scores[i];
      if (Double.isNaN(v)) {
        scores[i] = 0.0; // without the attribute
        continue;
      }
      if (!fixed && hi == lo) {
        scores[i] = 1.0; // every endpoint with the attribute has the same value
        continue;
      }
      double s = (v - lo) / (hi - lo);
      s = Math.max(0.0, Math.min(1.0, s));
      scores[i] = lowerIsBetter ? 1.0 - s : s;
    }
  }

  @Override
  public String toString() {
    return "endpoint-attribute-scorer(" + (lowerIsBetter ? "lower" : "higher")
        + " is better" + (fixed ? ", range [" + min + ", " + max + "])" : ")");
  }

  /**
   * Provides {@code endpoint-attribute-scorer}; public only for
   * {@link java.util.ServiceLoader}.
   */
  public static final class Provider extends AbstractPluginProvider {
    private static final String LOWER = "linear_lower_is_better";
    private static final String HIGHER = "linear_higher_is_better";

    public Provider() {
      super("endpoint-attribute-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      MetricAttributeSource.Reader attribute = EndpointAttributes.resolve(c, p, "attributeKey",
          "score every endpoint 0");
      boolean lower = true;
      boolean fixed = false;
      double min = 0;
      double max = 0;
      Map<?, ?> algorithm = EndpointAttributes.object(p, "algorithm", p.raw("algorithm"));
      if (algorithm == null) {
        if (p.raw("algorithm") == null) {
          p.error("algorithm", "is required: {type: " + LOWER + " or " + HIGHER + "}");
        }
      } else {
        EndpointAttributes.noticeUnknown(p, "algorithm", algorithm,
            Set.of("type", "normalization"));
        Object type = algorithm.get("type");
        if (HIGHER.equals(type)) {
          lower = false;
        } else if (!LOWER.equals(type)) {
          p.error("algorithm.type", "must be '" + LOWER + "' or '" + HIGHER + "', got "
              + (type == null ? "nothing" : "'" + type + "'"));
        }
        Map<?, ?> norm = EndpointAttributes.object(p, "algorithm.normalization",
            algorithm.get("normalization"));
        if (norm != null) {
          EndpointAttributes.noticeUnknown(p, "algorithm.normalization", norm,
              Set.of("fixedRange", "adaptiveRange"));
          Map<?, ?> range = EndpointAttributes.object(p, "algorithm.normalization.fixedRange",
              norm.get("fixedRange"));
          Map<?, ?> adaptive = EndpointAttributes.object(p,
              "algorithm.normalization.adaptiveRange", norm.get("adaptiveRange"));
          if (range != null && adaptive != null) {
            p.error("algorithm.normalization", "takes one of fixedRange and adaptiveRange,"
                + " got both");
          } else if (range != null) {
            String where = "algorithm.normalization.fixedRange";
            EndpointAttributes.noticeUnknown(p, where, range, Set.of("min", "max"));
            // as upstream, a bound left out is 0
            Double lo = EndpointAttributes.number(p, where + ".min", range.get("min"), 0);
            Double hi = EndpointAttributes.number(p, where + ".max", range.get("max"), 0);
            if (lo != null && hi != null) {
              if (lo >= hi) {
                p.error(where, "needs min < max, got min " + lo + ", max " + hi);
              }
              fixed = true;
              min = lo;
              max = hi;
            }
          }
        }
      }
      if (attribute == null) {
        throw new IllegalArgumentException("no attribute"); // the recorded errors win
      }
      return new EndpointAttributeScorer(attribute, lower, fixed, min, max);
    }
  }
}
