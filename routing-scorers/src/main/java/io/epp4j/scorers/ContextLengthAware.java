package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Scorer;
import java.util.ArrayList;
import java.util.List;

/**
 * {@code context-length-aware}, as llm-d's: endpoints declare the prompt lengths they are meant
 * for in a label ({@code "min-max"} tokens, default label {@code llm-d.ai/context-length-range}).
 * As a scorer: inside its range an endpoint scores in (0.3, 1], more for a narrow range and for
 * room left above the prompt ({@code 0.3 + 0.7 × (0.7 × 1 / (1 + width / 10000) + 0.3 ×
 * (max − length) / width)}, 1 for a range of one length); outside it
 * {@code 0.3 / (1 + distance / 1000)}; 0.5 without the label, 0 with a label that is not a range.
 * As a filter (only with {@code enableFiltering}): drops the endpoints whose range does not hold
 * the prompt or whose label is not a range, keeps those without the label. The prompt's length
 * is its token count when the request carries token IDs, else its characters ÷ 4.
 */
final class ContextLengthAware implements Scorer, Filter {
  static final String DEFAULT_LABEL = "llm-d.ai/context-length-range";
  private static final double MAX_FALLBACK_SCORE = 0.3;

  private final String label;
  private final boolean filtering;

  ContextLengthAware(String label, boolean filtering) {
    this.label = label;
    this.filtering = filtering;
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    if (!filtering) {
      return candidates;
    }
    int length = request.estimatedPromptTokens();
    List<Candidate> kept = new ArrayList<>(candidates.size());
    for (Candidate c : candidates) {
      String text = c.endpoint().label(label);
      if (text == null) {
        kept.add(c);
        continue;
      }
      long[] r = range(text);
      if (r != null && length >= r[0] && length <= r[1]) {
        kept.add(c);
      }
    }
    return kept.size() == candidates.size() ? candidates : kept;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int length = request.estimatedPromptTokens();
    for (int i = 0, n = candidates.size(); i < n; i++) {
      String text = candidates.get(i).endpoint().label(label);
      if (text == null) {
        scores[i] = 0.5;
        continue;
      }
      long[] r = range(text);
      scores[i] = r == null ? 0.0 : rangeScore(length, r[0], r[1]);
    }
  }

  static double rangeScore(long length, long min, long max) {
    if (length >= min && length <= max) {
      long width = max - min;
      if (width == 0) {
        return 1.0;
      }
      double widthScore = 1.0 / (1.0 + width / 10_000.0);
      double positionScore = (double) (max - length) / width;
      return MAX_FALLBACK_SCORE + (0.7 * widthScore + 0.3 * positionScore)
          * (1.0 - MAX_FALLBACK_SCORE);
    }
    long distance = length > max ? length - max : min - length;
    return MAX_FALLBACK_SCORE / (1.0 + distance / 1000.0);
  }

  /**
   * {@code "min-max"} as two integers in ASCII digits with min ≤ max, or null when the text is not
   * one. Long.parseLong alone also reads other scripts' digits ({@code "٠-٢٠٤٨"}), which
   * upstream's Atoi refuses, and a leading {@code +}, which a Kubernetes label value cannot hold.
   */
  static long @org.jspecify.annotations.Nullable [] range(String text) {
    String[] parts = text.split("-", -1);
    if (parts.length != 2) {
      return null;
    }
    long min = tokenCount(parts[0].strip());
    long max = tokenCount(parts[1].strip());
    return min >= 0 && max >= 0 && min <= max ? new long[] {min, max} : null;
  }

  /** A count written in ASCII digits only, or -1 for anything else (or one beyond a long). */
  private static long tokenCount(String s) {
    if (s.isEmpty()) {
      return -1;
    }
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c < '0' || c > '9') {
        return -1;
      }
    }
    try {
      return Long.parseLong(s);
    } catch (NumberFormatException tooLarge) {
      return -1;
    }
  }

  @Override
  public String toString() {
    return "context-length-aware(label=" + label + ", enableFiltering=" + filtering + ")";
  }

  /** Provides {@code context-length-aware}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("context-length-aware");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      String label = p.getString("label", DEFAULT_LABEL);
      if (label == null || label.isEmpty()) {
        p.error("label", "must not be empty");
        label = DEFAULT_LABEL;
      }
      if (p.has("reusableTokensProducerName")) {
        p.raw("reusableTokensProducerName");
        p.error("reusableTokensProducerName", "is not supported: epp4j measures the whole"
            + " prompt, not the part a peer could supply");
      }
      return new ContextLengthAware(label, p.getBoolean("enableFiltering", false));
    }
  }
}
