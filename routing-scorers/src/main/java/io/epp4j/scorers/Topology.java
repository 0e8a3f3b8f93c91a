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
import io.epp4j.api.Scorer;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * llm-d's topology plugins for prefill/decode: {@code topology-extractor} says which endpoint
 * labels hold an endpoint's host, rack, zone and region; {@code topology-affinity-filter} and
 * {@code topology-affinity-scorer}, in the prefill profile, keep or favour the prefill candidates
 * near the decode pick, over which the prompt's KV moves. The levels, tightest first: host (1.0),
 * rack (0.2), zone (0.05), region (0.02), none (0); two endpoints share the tightest level whose
 * label both carry with the same, non-empty value (a missing value never matches).
 */
final class Topology {
  /** Level scores, indexed by level: none, region, zone, rack, host. */
  private static final double[] SCORES = {0.0, 0.02, 0.05, 0.2, 1.0};
  static final int NONE = 0;
  static final int REGION = 1;
  static final int ZONE = 2;
  static final int RACK = 3;
  static final int HOST = 4;

  private Topology() {}

  /** {@code topology-extractor}: the labels that carry each level. */
  static final class Extractor implements Plugin {
    static final Extractor DEFAULT = new Extractor("kubernetes.io/hostname",
        "topology.kubernetes.io/rack", "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region");

    /** Label names by level (index 0 unused). */
    private final String[] labels;

    Extractor(String hostname, String rack, String zone, String region) {
      this.labels = new String[] {"", region, zone, rack, hostname};
    }

    /** The tightest level {@code a} and {@code b} share, {@link #NONE} when none. */
    int level(Endpoint a, Endpoint b) {
      for (int level = HOST; level >= REGION; level--) {
        String x = a.label(labels[level]);
        if (x != null && !x.isEmpty() && x.equals(b.label(labels[level]))) {
          return level;
        }
      }
      return NONE;
    }

    /** Whether {@code e} carries any level at all. */
    boolean located(Endpoint e) {
      for (int level = REGION; level <= HOST; level++) {
        String x = e.label(labels[level]);
        if (x != null && !x.isEmpty()) {
          return true;
        }
      }
      return false;
    }

    @Override
    public String toString() {
      return "topology-extractor(host=" + labels[HOST] + ", rack=" + labels[RACK] + ", zone="
          + labels[ZONE] + ", region=" + labels[REGION] + ")";
    }
  }

  /** The extractor {@code topologyProducerName} names, else the file's only one, else defaults. */
  static Extractor extractor(PluginContext c, Parameters p) {
    String param = "topologyProducerName";
    if (p.has(param)) {
      String name = java.util.Objects.requireNonNullElse(p.getString(param, ""), "");
      Plugin named = c.plugin(name).orElse(null);
      if (named == null) {
        p.error(param, CommonParameters.noSuchPlugin(name));
      } else if (!(named instanceof Extractor e)) {
        p.error(param, "names '" + name + "', " + named + ", not a topology-extractor");
      } else {
        return e;
      }
      return Extractor.DEFAULT;
    }
    Extractor only = null;
    for (Plugin earlier : c.earlierPlugins()) {
      if (earlier instanceof Extractor e) {
        if (only != null) {
          p.error(param, "is required: the file declares more than one topology-extractor");
          return Extractor.DEFAULT;
        }
        only = e;
      }
    }
    return only != null ? only : Extractor.DEFAULT;
  }

  /**
   * {@code topology-affinity-filter}: in the prefill profile, keeps the candidates that share at
   * least {@code minAffinity} with the decode pick. Fails open: without a decode pick (not a
   * disaggregated request) or one that carries no level, and when no candidate is near enough,
   * every candidate stays.
   */
  static final class AffinityFilter implements Filter {
    private final Extractor extractor;
    private final int minLevel;

    AffinityFilter(Extractor extractor, int minLevel) {
      this.extractor = extractor;
      this.minLevel = minLevel;
    }

    @Override
    public List<Candidate> filter(InferenceRequest request, CycleState state,
        List<Candidate> candidates) {
      Endpoint peer = state.get(PdProfileHandler.PEER_ENDPOINT);
      if (peer == null || !extractor.located(peer)) {
        return candidates;
      }
      List<Candidate> near = new ArrayList<>(candidates.size());
      for (Candidate c : candidates) {
        if (extractor.level(c.endpoint(), peer) >= minLevel) {
          near.add(c);
        }
      }
      return near.isEmpty() || near.size() == candidates.size() ? candidates : near;
    }

    @Override
    public String toString() {
      return "topology-affinity-filter(minAffinity=" + LEVEL_NAMES[minLevel] + ")";
    }
  }

  /** {@code topology-affinity-scorer}: the level a candidate shares with the decode pick. */
  static final class AffinityScorer implements Scorer {
    private final Extractor extractor;

    AffinityScorer(Extractor extractor) {
      this.extractor = extractor;
    }

    @Override
    public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
        double[] scores) {
      Endpoint peer = state.get(PdProfileHandler.PEER_ENDPOINT);
      for (int i = 0, n = candidates.size(); i < n; i++) {
        scores[i] = peer == null ? 0 : SCORES[extractor.level(candidates.get(i).endpoint(), peer)];
      }
    }

    @Override
    public String toString() {
      return "topology-affinity-scorer";
    }
  }

  private static final String[] LEVEL_NAMES = {"none", "region", "zone", "rack", "host"};

  /** Provides {@code topology-extractor}; public only for {@link java.util.ServiceLoader}. */
  public static final class ExtractorProvider extends AbstractPluginProvider {
    public ExtractorProvider() {
      super("topology-extractor");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new Extractor(label(p, "hostname", "kubernetes.io/hostname"),
          label(p, "rack", "topology.kubernetes.io/rack"),
          label(p, "zone", "topology.kubernetes.io/zone"),
          label(p, "region", "topology.kubernetes.io/region"));
    }

    private static String label(Parameters p, String name, String fallback) {
      String v = p.getString(name, fallback);
      return v == null || v.isEmpty() ? fallback : v; // upstream: empty is the default
    }
  }

  /** Provides {@code topology-affinity-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class FilterProvider extends AbstractPluginProvider {
    public FilterProvider() {
      super("topology-affinity-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      String min = p.getEnum("minAffinity", "host", Set.of("host", "rack", "zone", "region"));
      int level = switch (min.toLowerCase(Locale.ROOT)) {
        case "rack" -> RACK;
        case "zone" -> ZONE;
        case "region" -> REGION;
        default -> HOST;
      };
      return new AffinityFilter(extractor(c, p), level);
    }
  }

  /** Provides {@code topology-affinity-scorer}; public only for {@link java.util.ServiceLoader}. */
  public static final class ScorerProvider extends AbstractPluginProvider {
    public ScorerProvider() {
      super("topology-affinity-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new AffinityScorer(extractor(c, p));
    }
  }
}
