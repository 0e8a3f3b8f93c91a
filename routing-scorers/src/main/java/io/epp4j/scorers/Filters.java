package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;

/** Built-in filters. All keep the candidates' order and return the input list when nothing is dropped. */
final class Filters {
  private Filters() {}

  /** Keeps the candidates for which {@code keep} holds; returns the input list if all are kept. */
  static List<Candidate> retain(List<Candidate> in, java.util.function.Predicate<Candidate> keep) {
    int n = in.size();
    int i = 0;
    while (i < n && keep.test(in.get(i))) {
      i++;
    }
    if (i == n) {
      return in;
    }
    List<Candidate> out = new ArrayList<>(n - 1);
    for (int j = 0; j < i; j++) {
      out.add(in.get(j));
    }
    for (int j = i + 1; j < n; j++) {
      Candidate c = in.get(j);
      if (keep.test(c)) {
        out.add(c);
      }
    }
    return out;
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

  /**
   * {@code label-selector-filter}: keeps endpoints whose labels satisfy every {@code matchLabels}
   * entry and every {@code matchExpressions} requirement (operators In, NotIn, Exists,
   * DoesNotExist), as a Kubernetes label selector does. An empty selector keeps everything.
   */
  static final class LabelSelectorFilter implements Filter {
    private final Map<String, String> matchLabels;
    private final List<Requirement> expressions;

    LabelSelectorFilter(Map<String, String> matchLabels, List<Requirement> expressions) {
      this.matchLabels = Map.copyOf(matchLabels);
      this.expressions = List.copyOf(expressions);
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
      return retain(candidates, c -> matches(c.endpoint()));
    }

    @Override
    public String toString() {
      return "label-selector-filter";
    }
  }

  /**
   * {@code prefill-filter} / {@code decode-filter}: keeps endpoints whose {@value Endpoint#ROLE_LABEL}
   * label is one of the accepted roles. Prefill accepts {@code prefill}; decode accepts
   * {@code decode}, {@code both} and unlabelled endpoints (a plain vLLM server does both).
   */
  static final class RoleFilter implements Filter {
    private final String type;
    private final Set<String> roles;
    private final boolean acceptUnlabelled;

    RoleFilter(String type, Set<String> roles, boolean acceptUnlabelled) {
      this.type = type;
      this.roles = Set.copyOf(roles);
      this.acceptUnlabelled = acceptUnlabelled;
    }

    boolean accepts(Endpoint e) {
      String role = e.label(Endpoint.ROLE_LABEL);
      return role == null ? acceptUnlabelled : roles.contains(role);
    }

    @Override
    public List<Candidate> filter(InferenceRequest request, CycleState state,
        List<Candidate> candidates) {
      return retain(candidates, c -> accepts(c.endpoint()));
    }

    @Override
    public String toString() {
      return type;
    }
  }

  /**
   * {@code utilization-filter} (also registered as upstream's {@code low-queue-filter}): drops
   * endpoints whose fresh metrics show a waiting queue of at least {@code queueThreshold} or KV
   * usage of at least {@code kvCacheThreshold}. Fails open: if every candidate would be dropped,
   * all are kept. Endpoints without usable metrics are kept (unknown is not saturated; the
   * metric scorers already rank them neutrally).
   */
  static final class UtilizationFilter implements Filter {
    private final String type;
    private final int queueThreshold;
    private final double kvThreshold;
    private final Staleness staleness;

    UtilizationFilter(String type, int queueThreshold, double kvThreshold, Staleness staleness) {
      this.type = type;
      this.queueThreshold = queueThreshold;
      this.kvThreshold = kvThreshold;
      this.staleness = staleness;
    }

    @Override
    public List<Candidate> filter(InferenceRequest request, CycleState state,
        List<Candidate> candidates) {
      long now = state.nowNanos();
      List<Candidate> kept = retain(candidates, c -> !staleness.usable(c, now)
          || (c.metrics().waitingRequests() < queueThreshold
              && c.metrics().kvCacheUsage() < kvThreshold));
      return kept.isEmpty() ? candidates : kept;
    }

    @Override
    public String toString() {
      return type;
    }
  }
}
