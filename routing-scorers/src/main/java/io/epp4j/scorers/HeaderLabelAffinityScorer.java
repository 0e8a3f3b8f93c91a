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
import java.util.Locale;
import org.jspecify.annotations.Nullable;

/**
 * {@code header-label-affinity-scorer} (llm-d): a soft preference for the endpoints whose label
 * {@code labelKey} holds exactly the value of the request header {@code headerName}. Such an
 * endpoint scores 1, every other one 0 and stays eligible; without the header (or with an empty
 * one) every endpoint scores 0. One instance maps one header to one label, so that each such
 * preference has its own weight in the profile.
 */
final class HeaderLabelAffinityScorer implements Scorer {
  private final String headerName;
  private final String labelKey;

  HeaderLabelAffinityScorer(String headerName, String labelKey) {
    // the request's header names are lower-cased, as upstream's are
    this.headerName = headerName.toLowerCase(Locale.ROOT);
    this.labelKey = labelKey;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    String wanted = request.headers().get(headerName);
    if (wanted == null || wanted.isEmpty()) {
      return; // the array is zeroed: no preference
    }
    for (int i = 0; i < candidates.size(); i++) {
      scores[i] = wanted.equals(candidates.get(i).endpoint().label(labelKey)) ? 1.0 : 0.0;
    }
  }

  @Override
  public String toString() {
    return "header-label-affinity-scorer(" + headerName + " -> " + labelKey + ")";
  }

  /**
   * Provides {@code header-label-affinity-scorer}; public only for
   * {@link java.util.ServiceLoader}.
   */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("header-label-affinity-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      String header = required(p, "headerName", "the request header that holds the preferred"
          + " label value");
      String label = required(p, "labelKey", "the endpoint label compared with the header");
      if (!header.isEmpty() && !header.strip().equals(header)) {
        // no request header is named with spaces around it: it would never match
        p.error("headerName", "must not start or end with whitespace, got '" + header + "'");
      }
      return new HeaderLabelAffinityScorer(header, label);
    }

    private static String required(Parameters p, String name, String what) {
      @Nullable String v = p.getString(name, null);
      if (v == null || v.isEmpty()) {
        if (p.errors().stream().noneMatch(e -> e.startsWith("parameter '" + name + "'"))) {
          p.error(name, "is required: " + what);
        }
        return "";
      }
      return v;
    }
  }
}
