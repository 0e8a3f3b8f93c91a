package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * {@code label-selector-filter}: keeps endpoints whose labels satisfy every {@code matchLabels}
 * entry and every {@code matchExpressions} requirement (operators In, NotIn, Exists,
 * DoesNotExist), as a Kubernetes label selector does. An empty selector keeps everything.
 */
final class LabelSelectorFilter implements Filter {
  private final Map<String, String> matchLabels;
  private final List<Requirement> expressions;

  LabelSelectorFilter(Map<String, String> matchLabels, List<Requirement> expressions) {
    this.matchLabels = Map.copyOf(matchLabels);
    this.expressions = List.copyOf(expressions);
  }

  /** One Kubernetes-style label requirement. */
  record Requirement(String key, String operator, Set<String> values) {
    boolean matches(Endpoint e) {
      String v = e.label(key);
      switch (operator) {
        case "In":
          return v != null && values.contains(v);
        case "NotIn":
          return v == null || !values.contains(v);
        case "Exists":
          return v != null;
        case "DoesNotExist":
          return v == null;
        default:
          return false;
      }
    }
  }

  boolean matches(Endpoint e) {
    for (Map.Entry<String, String> m : matchLabels.entrySet()) {
      if (!m.getValue().equals(e.label(m.getKey()))) {
        return false;
      }
    }
    for (int i = 0; i < expressions.size(); i++) {
      if (!expressions.get(i).matches(e)) {
        return false;
      }
    }
    return true;
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    return CandidateLists.retain(candidates, c -> matches(c.endpoint()));
  }

  @Override
  public String toString() {
    return "label-selector-filter";
  }

  /** Provides {@code label-selector-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    private static final Set<String> OPERATORS = Set.of("In", "NotIn", "Exists", "DoesNotExist");

    public Provider() {
      // llm-d's name for this filter until 2026, which it still accepts
      super("label-selector-filter", "by-label-selector");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      Map<String, String> labels = new LinkedHashMap<>();
      Object ml = p.raw("matchLabels");
      if (ml instanceof Map<?, ?> m) {
        m.forEach((k, v) -> {
          if (v instanceof String s) {
            labels.put(String.valueOf(k), s);
          } else {
            p.error("matchLabels." + k, notALabelValue(v));
          }
        });
      } else if (ml != null) {
        p.error("matchLabels", "must be a mapping of label to value");
      }
      List<Requirement> reqs = new ArrayList<>();
      Object me = p.raw("matchExpressions");
      if (me instanceof List<?> list) {
        for (int i = 0; i < list.size(); i++) {
          Requirement r = requirement(p, "matchExpressions[" + i + "]", list.get(i));
          if (r != null) {
            reqs.add(r);
          }
        }
      } else if (me != null) {
        p.error("matchExpressions", "must be a list");
      }
      return new LabelSelectorFilter(labels, reqs);
    }

    /**
     * Why {@code v}, not a string, is no label value. Upstream decodes the parameters into a
     * Kubernetes {@code LabelSelector}, whose values are strings, and refuses a number or a
     * boolean there; a decimal number has also lost the text it was written as ({@code 1.10} is
     * 1.1, {@code 1e3} is 1000.0), so read as text it selected other endpoints than the file
     * names.
     */
    private static String notALabelValue(@org.jspecify.annotations.Nullable Object v) {
      if (v instanceof Double || v instanceof Float || v instanceof java.math.BigDecimal) {
        return "must be a label value (a string); a decimal number is not read as written (1.10"
            + " reads as 1.1): quote it, got " + describe(v);
      }
      if (v instanceof Number || v instanceof Boolean) {
        return "must be a label value (a string), got " + describe(v) + ": quote it, as"
            + " upstream refuses a number or a boolean here too";
      }
      return "must be a label value (a string), got " + describe(v);
    }

    private static String describe(@org.jspecify.annotations.Nullable Object v) {
      return v == null ? "no value" : v instanceof Map ? "an object" : v instanceof List ? "a list"
          : "'" + v + "'";
    }

    /** One entry of {@code matchExpressions}, or null after recording what is wrong with it. */
    private static @org.jspecify.annotations.Nullable Requirement requirement(Parameters p,
        String where, Object entry) {
      if (!(entry instanceof Map<?, ?> m)) {
        p.error(where, "must be a mapping with key, operator and values");
        return null;
      }
      Object key = m.get("key");
      Object op = m.get("operator");
      if (!(key instanceof String k) || k.isEmpty()) {
        p.error(where + ".key", "is required");
        return null;
      }
      if (!(op instanceof String o) || !OPERATORS.contains(o)) {
        p.error(where + ".operator", "must be one of In, NotIn, Exists, DoesNotExist, got '"
            + op + "'");
        return null;
      }
      Set<String> values = new LinkedHashSet<>();
      Object vs = m.get("values");
      if (vs instanceof List<?> vl) {
        for (Object v : vl) {
          if (!(v instanceof String s)) {
            p.error(where + ".values", notALabelValue(v));
            return null;
          }
          values.add(s);
        }
      } else if (vs != null) {
        p.error(where + ".values", "must be a list");
        return null;
      }
      boolean needsValues = o.equals("In") || o.equals("NotIn");
      if (needsValues && values.isEmpty()) {
        p.error(where + ".values", "must not be empty for operator " + o);
        return null;
      }
      if (!needsValues && !values.isEmpty()) {
        p.error(where + ".values", "must be empty for operator " + o);
        return null;
      }
      return new Requirement(k, o, values);
    }
  }
}
