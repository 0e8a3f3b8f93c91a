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
import java.util.List;
import java.util.Set;

/**
 * {@code by-label}: llm-d's deprecated single-label filter, kept so that files written for it
 * load and route as llm-d routes them. Keeps an endpoint whose {@code label} has one of
 * {@code validValues}, and one without the label when {@code allowsNoLabel} is set. As in llm-d a
 * missing label reads as the empty value, so {@code ""} among the valid values keeps endpoints
 * without the label too. Does not fail open: no match leaves no candidate.
 */
final class ByLabelFilter implements Filter {
  private final String label;
  private final Set<String> validValues;
  private final boolean allowsNoLabel;

  ByLabelFilter(String label, Set<String> validValues, boolean allowsNoLabel) {
    this.label = label;
    this.validValues = Set.copyOf(validValues);
    this.allowsNoLabel = allowsNoLabel;
  }

  boolean accepts(Endpoint e) {
    String v = e.label(label);
    return v == null ? allowsNoLabel || validValues.contains("") : validValues.contains(v);
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    return CandidateLists.retain(candidates, c -> accepts(c.endpoint()));
  }

  @Override
  public String toString() {
    return "by-label(" + label + " in " + validValues + (allowsNoLabel ? " or absent)" : ")");
  }

  /** Provides {@code by-label}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("by-label");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      String label = null;
      Object raw = p.raw("label");
      if (raw == null) {
        p.error("label", "is required (the name of the label to check)");
      } else if (!(raw instanceof String s) || s.isEmpty()) {
        p.error("label", "must be a non-empty label name (a string), got "
            + (raw instanceof String ? "''" : raw instanceof List ? "a list"
            : raw instanceof java.util.Map ? "an object" : "'" + raw + "'"));
      } else {
        label = s;
      }
      // a number among them is refused, as upstream's []string refuses it (and parsed by YAML, a
      // decimal one has lost its text: 1.10 would match 1.1)
      List<String> values = p.getStringList("validValues", List.of());
      boolean allowsNoLabel = p.getBoolean("allowsNoLabel", false);
      if (values.isEmpty() && !allowsNoLabel && p.errors().isEmpty()) {
        p.error("validValues", "must not be empty unless allowsNoLabel is true");
      }
      p.notice("label", "belongs to llm-d's deprecated 'by-label' filter, which epp4j runs as "
          + "llm-d does; llm-d recommends 'label-selector-filter' (matchExpressions "
          + "[{key: <label>, operator: In, values: [...]}]) or 'prefill-filter' / "
          + "'decode-filter' for roles");
      return new ByLabelFilter(label == null ? "" : label, Set.copyOf(values), allowsNoLabel);
    }
  }
}
