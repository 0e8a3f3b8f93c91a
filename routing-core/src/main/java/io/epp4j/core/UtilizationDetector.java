package io.epp4j.core;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * {@code utilization-detector}: the upstream EPP's saturation detector as a plugin. Named by a
 * configuration's {@code saturationDetector: {pluginRef: ...}} section, its thresholds become the
 * router's shedding rule while that configuration is active (see {@link RouterConfig.Saturation}).
 * Used in a profile it is also a filter, as upstream: it drops endpoints whose fresh metrics
 * exceed a threshold relaxed by {@code headroom} ({@code threshold × (1 + headroom)}), and
 * endpoints whose metrics are stale, since upstream counts those as saturated. Like upstream's
 * {@code Detector.Filter} it fails open: when it would drop every endpoint (all saturated, or no
 * fresh metrics yet) it keeps them all, and shedding is left to the saturation rule.
 */
final class UtilizationDetector implements Filter {
  /**
   * {@link MetricsScraper.Builder}'s default interval, which a staleness limit must exceed; a
   * file loads before any scraper exists, and the scraper checks the limit against its own
   * interval once it runs the configuration.
   */
  static final Duration SCRAPER_INTERVAL = Duration.ofMillis(50);

  final RouterConfig.Saturation saturation;
  private final double headroom;

  UtilizationDetector(RouterConfig.Saturation saturation, double headroom) {
    this.saturation = saturation;
    this.headroom = headroom;
  }

  @Override
  public List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    double qLimit = saturation.queueThreshold() * (1 + headroom);
    double kvLimit = saturation.kvCacheThreshold() * (1 + headroom);
    // metrics never scraped are Long.MAX_VALUE old and must stay stale under any limit
    long staleNanos = Math.min(RouterSettings.nanos(saturation.metricsStaleness()), Long.MAX_VALUE - 1);
    long now = state.nowNanos();
    List<Candidate> kept = null;
    for (int i = 0, n = candidates.size(); i < n; i++) {
      Candidate c = candidates.get(i);
      boolean ok = c.metricsAgeNanos(now) <= staleNanos
          && c.metrics().waitingRequests() < qLimit && c.metrics().kvCacheUsage() < kvLimit;
      if (!ok && kept == null) {
        kept = new ArrayList<>(candidates.subList(0, i));
      } else if (ok && kept != null) {
        kept.add(c);
      }
    }
    // upstream returns every endpoint when none passes ("fail open at pool level")
    return kept == null || kept.isEmpty() ? candidates : kept;
  }

  @Override
  public String toString() {
    return "utilization-detector";
  }

  /** Provides {@code utilization-detector}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("utilization-detector");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters p) {
      RouterConfig.Saturation saturation = fields(p);
      // upstream takes any headroom >= 0: a large one turns the filter off, and costs nothing
      double headroom = p.getDouble("headroom", 0.0);
      if (!(headroom >= 0) || Double.isInfinite(headroom)) {
        p.error("headroom", "must be a finite fraction >= 0 (0.2 for 20 %), got " + headroom);
        headroom = 0;
      } else if (headroom > 1) {
        // legal upstream, but a headroom of 20 reads as "20 %" and is 2000 %: the filter then
        // keeps endpoints 21 times past the queue threshold and never drops one for its KV usage
        double queueLimit = saturation.queueThreshold() * (1 + headroom);
        double kvLimit = saturation.kvCacheThreshold() * (1 + headroom);
        p.notice("headroom", "is " + figure(headroom) + ", a fraction of the thresholds (0.2"
            + " for 20 %): the filter keeps an endpoint until " + figure(queueLimit)
            + " requests wait" + (kvLimit > 1
                ? " and never drops one for its KV cache usage (limit " + figure(kvLimit)
                    + ", usage is at most 1)"
                : " or its KV cache usage reaches " + figure(kvLimit))
            + "; write a percentage as a fraction");
      }
      return new UtilizationDetector(saturation, headroom);
    }
  }

  /**
   * The upstream field names and defaults (5 waiting requests, KV usage 0.8, 200 ms), read from a
   * plugin's parameters or from the older inline {@code saturationDetector} section.
   */
  static RouterConfig.Saturation fields(Parameters p) {
    int q = p.getInt("queueDepthThreshold", 5, 1, Integer.MAX_VALUE);
    double kv = p.getDouble("kvCacheUtilThreshold", 0.8);
    if (!(kv > 0 && kv <= 1.0)) {
      p.error("kvCacheUtilThreshold", "must be in (0, 1], got " + kv);
      kv = 0.8;
    }
    Duration stale = p.getDuration("metricsStalenessThreshold", Duration.ofMillis(200));
    if (stale.isZero() || stale.isNegative()) {
      p.error("metricsStalenessThreshold", "must be > 0, got " + stale);
      stale = Duration.ofMillis(200);
    } else if (stale.compareTo(SCRAPER_INTERVAL) < 0) {
      // legal upstream, but shorter than the time between two scrapes the metrics are stale
      // most of the time, and stale endpoints count as saturated: sheddable requests are shed
      // and the filter drops every endpoint (so it fails open) whatever their load
      p.notice("metricsStalenessThreshold", "is " + figure(stale.toNanos() / 1e6) + " ms,"
          + " shorter than the scraper's default interval of "
          + SCRAPER_INTERVAL.toMillis() + " ms: between scrapes every endpoint's"
          + " metrics are stale and count as saturated, so the pool reads as saturated most of"
          + " the time unless the application scrapes more often");
    }
    return new RouterConfig.Saturation(q, kv, stale);
  }

  /** A number as a person writes it: 105, not 105.0; 1.04, not 1.0400000000000003. */
  static String figure(double v) {
    if (Math.abs(v) >= 1e15) {
      return Double.toString(v);
    }
    return v == Math.rint(v) ? Long.toString((long) v)
        : java.math.BigDecimal.valueOf(v).round(new java.math.MathContext(6)).stripTrailingZeros()
            .toPlainString();
  }
}
