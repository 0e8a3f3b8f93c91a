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
import io.epp4j.api.PoolListener;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.SaturationDetector;
import io.epp4j.api.Usage;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * {@code concurrency-detector}: llm-d's saturation detector by in-flight accounting. As the
 * configuration's saturation detector, the pool's saturation is the requests in flight over
 * {@code maxConcurrency} per endpoint ({@code concurrencyMode: requests}), the tokens in flight
 * over {@code maxTokenConcurrency} per endpoint ({@code tokens}), or the average over the
 * endpoints of the larger of each endpoint's two ratios ({@code hybrid}); at 1 sheddable requests
 * are shed. As a filter it drops the endpoints whose own load has reached the limit times
 * {@code 1 + headroom} (it may keep none). The counts are the file's
 * {@code inflight-load-producer}'s (named by {@code inFlightLoadProducerName}, or the file's
 * only one), else a producer of its own with the default parameters, as upstream adds one.
 */
final class ConcurrencyDetector implements SaturationDetector, Filter, RequestListener,
    PoolListener {
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
    long requests = 0;
    long tokens = 0;
    double hybrid = 0;
    for (int i = 0; i < n; i++) {
      String id = pool.get(i).id();
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

  // the lifecycle reaches the counts only when they are this detector's own: a producer of the
  // file hears it as a plugin of the file

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    if (ownLoad) {
      load.afterRouting(request, state, decision);
    }
  }

  @Override
  public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
    if (ownLoad) {
      load.onFallback(request, from, to);
    }
  }

  @Override
  public void onActivity(InferenceRequest request, Endpoint endpoint) {
    if (ownLoad) {
      load.onActivity(request, endpoint);
    }
  }

  @Override
  public void onFirstToken(InferenceRequest request, Endpoint endpoint) {
    if (ownLoad) {
      load.onFirstToken(request, endpoint);
    }
  }

  @Override
  public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
    if (ownLoad) {
      load.onComplete(request, endpoint, usage);
    }
  }

  @Override
  public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
    if (ownLoad) {
      load.onFailure(request, endpoint, cause);
    }
  }

  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    if (ownLoad) {
      load.onEndpointRemoved(endpoint);
    }
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
          Math.max(1, c.inFlightMaxAge().toNanos()));
      return new ConcurrencyDetector(mode, max, maxTokens, headroom, own, fileLoad == null);
    }
  }
}
