package io.epp4j.core;

import io.epp4j.api.Ticker;

/**
 * Saturation as the upstream EPP defines it: per endpoint {@code max(waiting / queueThreshold,
 * kvUsage / kvThreshold)}, and 1 for an endpoint whose metrics are missing or older than the
 * staleness limit, or whose engine sleeps (it serves nothing, whatever its idle queue says); the
 * pool's saturation is the average. Sheddable requests are rejected when
 * it reaches 1.
 */
final class PoolSaturation {
  final int queueThreshold;
  final double kvThreshold;
  final long stalenessNanos;
  final Ticker ticker;

  PoolSaturation(int queueThreshold, double kvThreshold, long stalenessNanos, Ticker ticker) {
    this.queueThreshold = queueThreshold;
    this.kvThreshold = kvThreshold;
    // metrics never scraped are Long.MAX_VALUE old and must stay stale under any limit
    this.stalenessNanos = Math.min(stalenessNanos, Long.MAX_VALUE - 1);
    this.ticker = ticker;
  }

  double poolSaturation(PoolSnapshot snap) {
    return poolSaturation(snap, ticker.nanos());
  }

  double poolSaturation(PoolSnapshot snap, long now) {
    EndpointState[] s = snap.states;
    if (s.length == 0) {
      return 1.0;
    }
    double sum = 0;
    for (EndpointState e : s) {
      if (e.metricsAgeNanos(now) > stalenessNanos || e.metrics.asleep()) {
        sum += 1.0;
      } else {
        sum += Math.max(e.metrics.waitingRequests() / (double) queueThreshold,
            e.metrics.kvCacheUsage() / kvThreshold);
      }
    }
    return sum / s.length;
  }
}
