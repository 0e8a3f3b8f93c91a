package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.MetricAttributeSource;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Predicate;

/**
 * {@code endpoint-attribute-filter} (llm-d): keeps the endpoints whose numeric attribute compares
 * true against a threshold ({@code value < 10} and the like). An endpoint without the attribute
 * (one never scraped) is kept with {@code onMissing: Pass}, the default, and dropped with
 * {@code Fail}. With {@code fallbackOnEmpty: true} a result with no endpoint gives back all the
 * candidates. The attribute is a scraped figure a {@code core-metrics-extractor} publishes under
 * a name of its {@code customMetrics} (see {@link EndpointAttributes}).
 */
final class EndpointAttributeFilter implements Filter {
  /** The comparisons upstream offers, by their configuration names. */
  enum Operator {
    LessThan, LessThanOrEqual, GreaterThan, GreaterThanOrEqual, Equal, NotEqual;

    boolean test(double value, double threshold) {
      switch (this) {
        case LessThan:
          return value < threshold;
        case LessThanOrEqual:
          return value <= threshold;
        case GreaterThan:
          return value > threshold;
        case GreaterThanOrEqual:
          return value >= threshold;
        case Equal:
          return value == threshold;
        default:
          return value != threshold;
      }
    }
  }

  private final MetricAttributeSource.Reader attribute;
  private final Operator operator;
  private final double threshold;
  private final boolean passOnMissing;
  private final boolean fallbackOnEmpty;
  private final Predicate<Candidate> keep = this::keeps;

  EndpointAttributeFilter(MetricAttributeSource.Reader attribute, Operator operator,
      double threshold,
      boolean passOnMissing, boolean fallbackOnEmpty) {
    this.attribute = attribute;
    this.operator = operator;
    this.threshold = threshold;
    this.passOnMissing = passOnMissing;
    this.fallbackOnEmpty = fallbackOnEmpty;
  }

  private boolean keeps(Candidate c) {
    double v = attribute.read(c);
    return Double.isNaN(v) ? passOnMissing : operator.test(v, threshold);
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    List<Candidate> kept = CandidateLists.retain(candidates, keep);
    return kept.isEmpty() && fallbackOnEmpty ? candidates : kept;
  }

  @Override
  public String toString() {
    return "endpoint-attribute-filter(" + operator + " " + threshold + ")";
  }

  /**
   * Provides {@code endpoint-attribute-filter}; public only for
   * {@link java.util.ServiceLoader}.
   */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("endpoint-attribute-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      MetricAttributeSource.Reader attribute = EndpointAttributes.resolve(c, p, "attribute",
          "keep or drop every endpoint by onMissing alone");
      String onMissing = p.getString("onMissing", "");
      if (onMissing != null && !onMissing.isEmpty() && !onMissing.equals("Pass")
          && !onMissing.equals("Fail")) {
        p.error("onMissing", "must be 'Pass' or 'Fail', got '" + onMissing + "'");
      }
      boolean fallback = p.getBoolean("fallbackOnEmpty", false);
      Operator operator = Operator.LessThan;
      double threshold = 0;
      Map<?, ?> algorithm = EndpointAttributes.object(p, "algorithm", p.raw("algorithm"));
      if (algorithm == null) {
        if (!p.has("algorithm") || p.raw("algorithm") == null) {
          p.error("algorithm", "is required: {type: threshold, threshold: {operator, value}}");
        }
      } else {
        EndpointAttributes.noticeUnknown(p, "algorithm", algorithm, Set.of("type", "threshold"));
        Object type = algorithm.get("type");
        if (!"threshold".equals(type)) {
          p.error("algorithm.type", "must be 'threshold', the one algorithm upstream offers, got "
              + (type == null ? "nothing" : "'" + type + "'"));
        }
        Map<?, ?> t = EndpointAttributes.object(p, "algorithm.threshold",
            algorithm.get("threshold"));
        if (t == null) {
          if (algorithm.get("threshold") == null) {
            p.error("algorithm.threshold", "is required: {operator, value}");
          }
        } else {
          EndpointAttributes.noticeUnknown(p, "algorithm.threshold", t,
              Set.of("operator", "value"));
          Object op = t.get("operator");
          operator = operator(op);
          if (operator == null) {
            p.error("algorithm.threshold.operator", "must be one of LessThan, LessThanOrEqual,"
                + " GreaterThan, GreaterThanOrEqual, Equal, NotEqual, got "
                + (op == null ? "nothing" : "'" + op + "'"));
            operator = Operator.LessThan;
          }
          if (t.get("value") == null) {
            p.error("algorithm.threshold.value", "is required: the number the attribute is"
                + " compared with");
          } else {
            Double v = EndpointAttributes.number(p, "algorithm.threshold.value", t.get("value"), 0);
            threshold = v == null ? 0 : v;
          }
        }
      }
      if (attribute == null) {
        throw new IllegalArgumentException("no attribute"); // the recorded errors win
      }
      return new EndpointAttributeFilter(attribute, operator, threshold,
          !"Fail".equals(onMissing), fallback);
    }

    private static @org.jspecify.annotations.Nullable Operator operator(
        @org.jspecify.annotations.Nullable Object name) {
      for (Operator o : Operator.values()) {
        if (o.name().equals(name)) {
          return o;
        }
      }
      return null;
    }
  }
}
