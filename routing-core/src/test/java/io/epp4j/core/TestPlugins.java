package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import io.epp4j.api.Scorer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Small plugins for core tests: scores and filters driven by endpoint labels. */
final class TestPlugins {
  private TestPlugins() {}

  /** Scores each endpoint with the number in its label {@code label}; missing = 0. */
  static final class LabelScorer implements Scorer {
    final String label;

    LabelScorer(String label) {
      this.label = label;
    }

    @Override
    public void score(InferenceRequest request, CycleState state, List<Candidate> candidates, double[] scores) {
      for (int i = 0; i < candidates.size(); i++) {
        String v = candidates.get(i).endpoint().label(label);
        scores[i] = v == null ? 0 : Double.parseDouble(v);
      }
    }
  }

  /** Keeps endpoints whose label {@code key} equals {@code value}. */
  static final class LabelFilter implements Filter {
    final String key;
    final String value;

    LabelFilter(String key, String value) {
      this.key = key;
      this.value = value;
    }

    @Override
    public List<Candidate> filter(InferenceRequest request, CycleState state, List<Candidate> candidates) {
      List<Candidate> out = new ArrayList<>();
      for (Candidate c : candidates) {
        if (value.equals(c.endpoint().label(key))) {
          out.add(c);
        }
      }
      return out;
    }
  }

  static final class LabelScorerProvider implements PluginProvider {
    @Override
    public String type() {
      return "label-scorer";
    }

    @Override
    public Result<? extends Plugin> create(PluginContext context, Parameters p) {
      String label = p.getString("label", null);
      if (label == null) {
        p.error("label", "is required");
      }
      return p.errors().isEmpty() ? Result.ok(new LabelScorer(label)) : Result.errors(p.errors());
    }
  }

  static final class LabelFilterProvider implements PluginProvider {
    @Override
    public String type() {
      return "label-filter";
    }

    @Override
    public Result<? extends Plugin> create(PluginContext context, Parameters p) {
      String key = p.getString("key", null);
      String value = p.getString("value", null);
      if (key == null) {
        p.error("key", "is required");
      }
      if (value == null) {
        p.error("value", "is required");
      }
      return p.errors().isEmpty() ? Result.ok(new LabelFilter(key, value)) : Result.errors(p.errors());
    }
  }

  static PluginRegistry registry() {
    return PluginRegistry.of(List.of(new LabelScorerProvider(), new LabelFilterProvider(),
        new CorePluginProviders.MaxScorePickerProvider(),
        new CorePluginProviders.SingleProfileHandlerProvider()));
  }

  static io.epp4j.api.Endpoint ep(String id, Map<String, String> labels) {
    return io.epp4j.api.Endpoint.parse(id, labels);
  }
}
