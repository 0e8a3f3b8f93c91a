package io.epp4j.sim;

/**
 * What one policy achieved on one scenario. The JSON report uses these component names; the
 * ones named in the issue ({@code policy}, {@code prefixCacheHitRate}, {@code ttftP50Ms},
 * {@code ttftP95Ms}, {@code ttftP99Ms}, {@code itlP50Ms}, {@code e2eP50Ms}, {@code e2eP95Ms},
 * {@code outputTokensPerSec}, {@code requests}, {@code preemptions},
 * {@code maxSessionsPerReplica}, {@code routingP99Micros}, {@code clippedRequests}) are stable.
 *
 * @param ttftCdfMs sorted TTFT samples for the chart (not written to JSON)
 */
public record PolicyResult(
    String policy,
    double prefixCacheHitRate,
    double ttftP50Ms,
    double ttftP95Ms,
    double ttftP99Ms,
    double itlP50Ms,
    double e2eP50Ms,
    double e2eP95Ms,
    double outputTokensPerSec,
    int requests,
    long preemptions,
    long evictions,
    int maxRequestsPerReplica,
    double meanRequestsPerReplica,
    int maxSessionsPerReplica,
    double meanSessionsPerReplica,
    double routingMeanMicros,
    double routingP99Micros,
    int clippedRequests,
    int rejectedRequests,
    double simulatedSeconds,
    double wallSeconds,
    double simulatedRequestsPerWallSecond,
    double[] ttftCdfMs) {
}
