package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.SaturationDetector;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * {@code concurrency-detector}: llm-d's saturation detector by in-flight accounting. As the
 * configuration's saturation detector, the pool's saturation is the requests in flight over
 * {@code maxConcurrency} per endpoint ({@code concurrencyMode: requests}), the tokens in flight
 * over {@code maxTokenConcurrency} per endpoint ({@code tokens}), or the average over the
 * endpoints of the larger of each endpoint's two ratios ({@code hybrid}); at 1 sheddable requests
 * are shed. An endpoint whose engine sleeps ({@link io.epp4j.api.EndpointMetrics#asleep()})
 * counts as full, as in the router's built-in rule: it serves none of the requests. As a filter it drops the endpoints whose own load has reached the limit times
 * {@code 1 + headroom} (it may keep none). The counts are the file's
 * {@code inflight-load-producer}'s (named by {@code inFlightLoadProducerName}, or the file's
 * only one), else a producer of its own with the default parameters, as upstream adds one
 * ({@link OwnsInFlightLoad}).
 */
final class ConcurrencyDetector implements SaturationDetector, Filter, OwnsInFlightLoad {
  enum Mode { REQUESTS, TOKENS, HYBRID }

  private final Mode mode;
  private final long maxConcurrency;
  private final long maxTokenConcurrency;
  private final double headroom;
  private final InFlightLoadProducer load;
  /** Whether {@link #load} is this detector's own, which hears the lifecycle through it. */
  private final boolean ownLoad;

  ConcurrencyDetector(Mode mode, long maxConcurrency, long maxTokenConcurrency, double headroom,
      InFlightLoadProducer load, boolean ownLoad) {
    this.mode = mode;
    this.maxConcurrency = maxConcurrency;
    this.maxTokenConcurrency = maxTokenConcurrency;
    this.headroom = headroom;
    this.load = load;
    this.ownLoad = ownLoad;
  }

  @Override
  public double saturation(List<Candidate> pool) {
    int n = pool.size();
    if (n == 0) {
      return 1.0;
    }
    // a saturated pool sheds, and a route that is shed sweeps nothing: sweep here
    load.expireOverdue();
    long requests = 0;
    long tokens = 0;
    double hybrid = 0;
    for (int i = 0; i < n; i++) {
      Candidate c = pool.get(i);
      if (c.metrics().asleep()) {
        // an engine that sleeps serves nothing: counted as free capacity, it hid the load of
        // the awake endpoints that take all the requests (the router's own rule counts it full)
        requests += maxConcurrency;
        tokens += maxTokenConcurrency;
        hybrid += 1.0;
        continue;
      }
      String id = c.id();
      long r = load.requests(id);
      long t = load.tokens(id);
      requests += r;
      tokens += t;
      hybrid += Math.max((double) r / maxConcurrency, (double) t / maxTokenConcurrency);
    }
    switch (mode) {
      case TOKENS:
        return (double) tokens / ((double) maxTokenConcurrency * n);
      case HYBRID:
        return hybrid / n;
      default:
        return (double) requests / ((double) maxConcurrency * n);
    }
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    // a route this filter leaves without endpoints sweeps nothing either
    load.expireOverdue();
    long requestLimit = (long) (maxConcurrency * (1.0 + headroom));
    long tokenLimit = (long) (maxTokenConcurrency * (1.0 + headroom));
    int n = candidates.size();
    List<Candidate> kept = null;
    for (int i = 0; i < n; i++) {
      Candidate c = candidates.get(i);
      String id = c.id();
      boolean admits;
      switch (mode) {
        case TOKENS:
          admits = load.tokens(id) < tokenLimit;
          break;
        case HYBRID:
          admits = load.requests(id) < requestLimit && load.tokens(id) < tokenLimit;
          break;
        default:
          admits = load.requests(id) < requestLimit;
          break;
      }
      if (!admits && kept == null) {
        kept = new ArrayList<>(candidates.subList(0, i));
      } else if (admits && kept != null) {
        kept.add(c);
      }
    }
    return kept == null ? candidates : kept;
  }

  @Override
  public @Nullable InFlightLoadProducer ownLoad() {
    return ownLoad ? load : null;
  }

  @Override
  public String toString() {
    return "concurrency-detector";
  }

  /** Provides {@code concurrency-detector}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("concurrency-detector");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      String m = p.getEnum("concurrencyMode", "requests", Set.of("requests", "tokens", "hybrid"));
      Mode mode = Mode.valueOf(m.toUpperCase(Locale.ROOT));
      long max = p.getLong("maxConcurrency", 100);
      if (max <= 0) {
        p.error("maxConcurrency", "must be > 0, got " + max);
        max = 100;
      }
      long maxTokens = p.getLong("maxTokenConcurrency", 1_000_000);
      if (maxTokens <= 0) {
        p.error("maxTokenConcurrency", "must be > 0, got " + maxTokens);
        maxTokens = 1_000_000;
      }
      double headroom = p.getDouble("headroom", 0.0);
      if (!(headroom >= 0) || Double.isInfinite(headroom)) {
        p.error("headroom", "must be a finite fraction >= 0 (0.2 for 20 %), got " + headroom);
        headroom = 0;
      }
      InFlightLoadProducer fileLoad = InFlightLoadProducer.find(c, p, "inFlightLoadProducerName");
      InFlightLoadProducer own = fileLoad != null ? fileLoad : new InFlightLoadProducer(false,
          InFlightLoadProducer.DEFAULT_OUTPUT_RATIO, -1, c.ticker(),
          InFlightLoadProducer.maxAgeNanos(c));
      return new ConcurrencyDetector(mode, max, maxTokens, headroom, own, fileLoad == null);
    }
  }
}
