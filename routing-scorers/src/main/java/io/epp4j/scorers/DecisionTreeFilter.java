package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * {@code decision-tree-filter} (Gateway API Inference Extension 0.5): runs its {@code current}
 * filter; when that keeps some endpoints, runs {@code nextOnSuccess} (else
 * {@code nextOnSuccessOrFailure}) on what it kept; when it keeps none, runs
 * {@code nextOnFailure} (else {@code nextOnSuccessOrFailure}) on the endpoints it was given.
 * Without a next filter for the outcome, the current filter's result stands. Each node names a
 * filter defined earlier in the file ({@code pluginRef}) or nests another tree
 * ({@code decisionTree}).
 */
final class DecisionTreeFilter implements Filter {
  private final Filter current;
  private final @Nullable Filter onSuccess;
  private final @Nullable Filter onFailure;

  DecisionTreeFilter(Filter current, @Nullable Filter onSuccess, @Nullable Filter onFailure) {
    this.current = current;
    this.onSuccess = onSuccess;
    this.onFailure = onFailure;
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    List<Candidate> kept = current.filter(request, state, candidates);
    if (!kept.isEmpty()) {
      return onSuccess == null ? kept : onSuccess.filter(request, state, kept);
    }
    return onFailure == null ? kept : onFailure.filter(request, state, candidates);
  }

  @Override
  public String toString() {
    return "decision-tree-filter(" + current + ")";
  }

  /** Provides {@code decision-tree-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    /** Deeper trees than this are refused: no real profile nests so far, a loop would. */
    static final int MAX_DEPTH = 32;

    public Provider() {
      super("decision-tree-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      DecisionTreeFilter tree = tree(c, p, p, "", 0);
      if (tree == null) {
        throw new IllegalArgumentException("parameter 'current' is required");
      }
      return tree;
    }

    /** A tree from one level's fields; errors go to {@code top} with the path to the field. */
    private static @Nullable DecisionTreeFilter tree(PluginContext c, Parameters level,
        Parameters top, String path, int depth) {
      if (depth > MAX_DEPTH) {
        top.error(path + "current", "nests decision trees deeper than " + MAX_DEPTH);
        return null;
      }
      // upstream's tree has these four fields and no other, so any other name, at the top as
      // below, is a misspelt or misplaced branch: loaded, the tree would route without it
      for (String name : level.names()) {
        if (!List.of("current", "nextOnSuccess", "nextOnFailure", "nextOnSuccessOrFailure")
            .contains(name)) {
          top.error(path + name, "is not a decision tree field; expected current, nextOnSuccess,"
              + " nextOnFailure, nextOnSuccessOrFailure");
        }
      }
      if (!level.has("current")) {
        top.error(path + "current", "is required");
        return null;
      }
      Filter current = node(c, level, "current", top, path, depth);
      Filter either = node(c, level, "nextOnSuccessOrFailure", top, path, depth);
      Filter success = node(c, level, "nextOnSuccess", top, path, depth);
      Filter failure = node(c, level, "nextOnFailure", top, path, depth);
      if (current == null) {
        return null;
      }
      return new DecisionTreeFilter(current, success != null ? success : either,
          failure != null ? failure : either);
    }

    /** One node: {@code {pluginRef: name}} or {@code {decisionTree: {...}}}; null when absent. */
    private static @Nullable Filter node(PluginContext c, Parameters level, String field,
        Parameters top, String path, int depth) {
      if (!level.has(field)) {
        return null;
      }
      Object raw = level.raw(field);
      String at = path + field;
      if (!(raw instanceof Map<?, ?> m)) {
        top.error(at, "must be a mapping with 'pluginRef' or 'decisionTree'");
        return null;
      }
      // a branch written inside the node (one level too deep) would otherwise be dropped unread
      for (Object k : m.keySet()) {
        if (!"pluginRef".equals(k) && !"decisionTree".equals(k)) {
          top.error(at + "." + k, "is not a field of a decision tree node; expected pluginRef or"
              + " decisionTree");
        }
      }
      Object ref = m.get("pluginRef");
      Object sub = m.get("decisionTree");
      if ((ref == null) == (sub == null)) {
        top.error(at, "must have exactly one of 'pluginRef' and 'decisionTree'");
        return null;
      }
      if (ref != null) {
        Optional<Plugin> plugin = c.plugin(String.valueOf(ref));
        if (plugin.isEmpty()) {
          top.error(at + ".pluginRef", CommonParameters.noSuchPlugin(String.valueOf(ref)));
          return null;
        }
        if (!(plugin.get() instanceof Filter f)) {
          top.error(at + ".pluginRef", "must name a filter, '" + ref + "' is not one");
          return null;
        }
        return f;
      }
      if (!(sub instanceof Map<?, ?> subMap)) {
        top.error(at + ".decisionTree", "must be a mapping");
        return null;
      }
      Map<String, Object> fields = new java.util.LinkedHashMap<>();
      subMap.forEach((k, v) -> fields.put(String.valueOf(k), v));
      return tree(c, Parameters.of(fields), top, at + ".decisionTree.", depth + 1);
    }
  }
}
