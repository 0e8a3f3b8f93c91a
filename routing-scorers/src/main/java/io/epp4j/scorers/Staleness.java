package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Parameters;

/**
 * The shared policy of metric-based plugins towards missing and stale metrics. Metrics are
 * <em>usable</em> when the endpoint has been scraped and the scrape is at most
 * {@code metricsStalenessMillis} old (0 turns the age check off, as upstream EPP behaves).
 *
 * <p>Scorers give an endpoint without usable metrics the {@link #NEUTRAL} score, except that an
 * endpoint whose last known (stale) value scores lower keeps the lower score: stale data may
 * hide an overload but can never make an endpoint look better than an average one. Never-scraped
 * endpoints (typically just added) get exactly the neutral score, so they receive traffic without
 * being flooded. Min–max normalisations use only endpoints with usable metrics.
 */
final class Staleness {
  /** Default maximum metrics age for scoring: 2 s (a few missed scrapes at common intervals). */
  static final long DEFAULT_MILLIS = 2000;
  /** Score of an endpoint whose metrics cannot be trusted. */
  static final double NEUTRAL = 0.5;
  static final String PARAM = "metricsStalenessMillis";

  private final long maxAgeNanos;

  Staleness(long maxAgeMillis) {
    // a limit beyond what nanoseconds can hold (about 292 years) is no limit, as 0 is; the
    // product would wrap to a negative age that every scrape exceeds
    this.maxAgeNanos = maxAgeMillis <= 0 || maxAgeMillis > Long.MAX_VALUE / 1_000_000L
        ? Long.MAX_VALUE : maxAgeMillis * 1_000_000L;
  }

  static Staleness from(Parameters p) {
    long ms = p.getLong(PARAM, DEFAULT_MILLIS);
    if (ms < 0) {
      p.error(PARAM, "must be >= 0 (0 disables the check), got " + ms);
      ms = DEFAULT_MILLIS;
    }
    return new Staleness(ms);
  }

  /** Whether the endpoint has ever been scraped. */
  static boolean known(Candidate c) {
    return c.metricsScrapedAtNanos() != EndpointMetrics.UNSET_TIME;
  }

  /** Whether the endpoint's metrics are known and fresh at {@code nowNanos}. */
  boolean usable(Candidate c, long nowNanos) {
    return known(c) && c.metricsAgeNanos(nowNanos) <= maxAgeNanos;
  }

  /** The score for an endpoint without usable metrics, given what its last value would score. */
  static double unusableScore(Candidate c, double lastValueScore) {
    return known(c) ? Math.min(NEUTRAL, lastValueScore) : NEUTRAL;
  }
}
