package io.epp4j.api;

/**
 * An endpoint as plugins see it during one scheduling cycle: identity, the latest metrics and
 * the router's own in-flight counters. Instances belong to an immutable pool snapshot and may be
 * shared by concurrent cycles; per-request data goes into {@link CycleState}.
 */
public interface Candidate {

  /** The endpoint. */
  Endpoint endpoint();

  /** The latest metrics published for this endpoint ({@link EndpointMetrics#UNKNOWN} if none). */
  EndpointMetrics metrics();

  /** Requests routed here by this router and not yet completed or failed. */
  int inFlightRequests();

  /** Estimated tokens (prompt + expected output) of the requests in flight here. */
  long inFlightTokens();

  /**
   * Age of the metrics at {@code nowNanos}, or {@link Long#MAX_VALUE} when the endpoint was never
   * scraped.
   */
  default long metricsAgeNanos(long nowNanos) {
    long at = metricsScrapedAtNanos();
    return at == EndpointMetrics.UNSET_TIME ? Long.MAX_VALUE : Math.max(0, nowNanos - at);
  }

  /**
   * {@code metrics().waitingRequests()}. The router's candidates answer this and the next three
   * from fields of their own, so that a scorer walking a large pool reads one object per
   * candidate instead of two.
   */
  default int waitingRequests() {
    return metrics().waitingRequests();
  }

  /** {@code metrics().runningRequests()}, without reading the metrics (see {@link #waitingRequests}). */
  default int runningRequests() {
    return metrics().runningRequests();
  }

  /** {@code metrics().kvCacheUsage()}, without reading the metrics (see {@link #waitingRequests}). */
  default double kvCacheUsage() {
    return metrics().kvCacheUsage();
  }

  /**
   * {@code metrics().scrapedAtNanos()}, without reading the metrics (see {@link #waitingRequests}):
   * {@link EndpointMetrics#UNSET_TIME} when the endpoint was never scraped.
   */
  default long metricsScrapedAtNanos() {
    return metrics().scrapedAtNanos();
  }

  /** Shorthand for {@code endpoint().id()}. */
  default String id() {
    return endpoint().id();
  }
}
