package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PrefixHitsProducer;
import io.epp4j.api.Scorer;
import java.util.List;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * A {@code prefix-cache-scorer} that keeps no index of its own and scores with a prefix-match
 * producer of the same file, as llm-d's current scorer reads the {@code PrefixCacheMatchInfo} an
 * {@code approx-prefix-cache-producer} or {@code precise-prefix-cache-producer} prepared. The
 * score is the producer's ({@code cachedBlocks / totalBlocks}), and the producer publishes its
 * {@link io.epp4j.api.PrefixHits} as every prefix scorer does. The producer, a plugin of the
 * file, records routed requests and follows the pool itself; this scorer only asks it, so a
 * prompt is hashed once per request however many profiles score it.
 */
final class PrefixMatchScorer implements PrefixHitsProducer {
  static final String PRODUCER_PARAMETER = "prefixMatchInfoProducerName";
  /** The name upstream gives its default producer, the one a scorer naming none reads. */
  static final String DEFAULT_PRODUCER = "approx-prefix-cache-producer";

  private final Scorer producer;

  PrefixMatchScorer(Scorer producer) {
    this.producer = producer;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    producer.score(request, state, candidates, scores);
  }

  /**
   * The producer a {@code prefix-cache-scorer} declared by {@code c} and {@code p} reads, or
   * {@code null} when it keeps its own index (see {@link #fileProducer}). Index parameters beside
   * a producer are refused: the producer's own apply.
   */
  static @Nullable Scorer producerOf(PluginContext c, Parameters p) {
    Scorer producer = fileProducer(c, p);
    if (producer != null) {
      String source = p.has(PRODUCER_PARAMETER)
          ? "'" + p.getString(PRODUCER_PARAMETER, "") + "'"
          : "the file's " + DEFAULT_PRODUCER;
      for (String index : PrefixCacheScorer.INDEX_PARAMETERS) {
        if (p.has(index)) {
          p.error(index, "cannot be set here: this scorer reads " + source
              + "; set it in that producer's parameters");
        }
      }
    }
    return producer;
  }

  /**
   * The prefix-match producer a plugin declared by {@code c} and {@code p} reads: the plugin
   * {@code prefixMatchInfoProducerName} names, else the file's approximate producer named
   * {@code approx-prefix-cache-producer} (upstream's default producer, which a name left out
   * refers to); {@code null} when there is none or after recording why the one named cannot be.
   */
  static @Nullable Scorer fileProducer(PluginContext c, Parameters p) {
    if (p.has(PRODUCER_PARAMETER)) {
      String name = java.util.Objects.requireNonNullElse(p.getString(PRODUCER_PARAMETER, ""), "");
      Optional<Plugin> named = c.plugin(name);
      if (named.isEmpty()) {
        p.error(PRODUCER_PARAMETER, CommonParameters.noSuchPlugin(name));
        return null;
      }
      if (!(named.get() instanceof PrefixHitsProducer s)) {
        p.error(PRODUCER_PARAMETER, "names '" + name + "', " + named.get()
            + ", which produces no prefix matches (an approx-prefix-cache-producer, a"
            + " precise-prefix-cache-producer or another prefix-cache scorer does)");
        return null;
      }
      return s;
    }
    // by name only, as upstream: a producer named otherwise is read by the plugins that name it
    Optional<Plugin> named = c.plugin(DEFAULT_PRODUCER);
    if (named.isPresent() && named.get() instanceof PrefixCacheScorer s && s.isProducer()) {
      return s;
    }
    return null;
  }

  @Override
  public String toString() {
    return "prefix-cache-scorer(reads " + producer + ")";
  }
}
