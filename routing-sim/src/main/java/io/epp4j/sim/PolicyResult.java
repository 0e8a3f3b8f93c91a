package io.epp4j.sim;

/**
 * What one policy achieved on one scenario. The JSON report uses these component names; the
 * ones named in the issue ({@code policy}, {@code prefixCacheHitRate}, {@code ttftP50Ms},
 * {@code ttftP95Ms}, {@code ttftP99Ms}, {@code itlP50Ms}, {@code e2eP50Ms}, {@code e2eP95Ms},
 * {@code outputTokensPerSec}, {@code requests}, {@code preemptions},
 * {@code maxSessionsPerReplica}, {@code routingP99Micros}, {@code clippedRequests}) are stable.
 *
 * <p>A latency figure (TTFT, ITL, E2E percentiles, routing times, P/D transfer times) is NaN
 * when the run has no sample of it: ITL when every output is one token, all of them when no
 * request was served. So is the hit rate when no prompt was looked up (every request refused
 * or longer than the context). The table prints {@code –}, the JSON {@code null}, the CSV an
 * empty field.
 *
 * @param rejectedRequests requests that were never served: refused by the router, or longer than
 *     the model's context (refused before routing, as vLLM answers 400), including the later
 *     turns of a dialog that outgrew it; with {@code requests}, every request of the run
 * @param routerRejectedRequests the part of {@code rejectedRequests} the router refused
 * @param firstRouterRejection the router's message for the first request it refused, or an empty
 *     string (it names the cause, for example a plugin's exception class; never prompt text)
 * @param routingWarmMeanMicros mean wall time per routing decision over the second half of the
 *     run's decisions (past the JIT's warm-up; {@code routingMeanMicros} covers every decision)
 * @param routingWarmP99Micros the 99th percentile of the same decisions
 * @param ttftCdfMs sorted TTFT samples for the chart (not written to JSON)
 * @param pd what prefill/decode disaggregation did ({@link PdStats#NONE} without it)
 * @param unservedRequests requests of the run that were neither served nor rejected: still
 *     waiting in a replica's queue when nothing else could happen (a prompt too large for the
 *     replica's KV cache), or never submitted because the dialog turn before them was not
 *     served; {@code requests + rejectedRequests + unservedRequests} is every request of the run
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
    double routingWarmMeanMicros,
    double routingWarmP99Micros,
    int clippedRequests,
    int rejectedRequests,
    int routerRejectedRequests,
    String firstRouterRejection,
    double simulatedSeconds,
    double wallSeconds,
    double simulatedRequestsPerWallSecond,
    double[] ttftCdfMs,
    PdStats pd,
    int unservedRequests) {

  /** A result in which every request was served or rejected. */
  public PolicyResult(String policy, double prefixCacheHitRate, double ttftP50Ms,
      double ttftP95Ms, double ttftP99Ms, double itlP50Ms, double e2eP50Ms, double e2eP95Ms,
      double outputTokensPerSec, int requests, long preemptions, long evictions,
      int maxRequestsPerReplica, double meanRequestsPerReplica, int maxSessionsPerReplica,
      double meanSessionsPerReplica, double routingMeanMicros, double routingP99Micros,
      double routingWarmMeanMicros, double routingWarmP99Micros, int clippedRequests,
      int rejectedRequests, int routerRejectedRequests, String firstRouterRejection,
      double simulatedSeconds, double wallSeconds, double simulatedRequestsPerWallSecond,
      double[] ttftCdfMs, PdStats pd) {
    this(policy, prefixCacheHitRate, ttftP50Ms, ttftP95Ms, ttftP99Ms, itlP50Ms, e2eP50Ms,
        e2eP95Ms, outputTokensPerSec, requests, preemptions, evictions, maxRequestsPerReplica,
        meanRequestsPerReplica, maxSessionsPerReplica, meanSessionsPerReplica, routingMeanMicros,
        routingP99Micros, routingWarmMeanMicros, routingWarmP99Micros, clippedRequests,
        rejectedRequests, routerRejectedRequests, firstRouterRejection, simulatedSeconds,
        wallSeconds, simulatedRequestsPerWallSecond, ttftCdfMs, pd, 0);
  }

  /** A result without prefill/decode disaggregation. */
  public PolicyResult(String policy, double prefixCacheHitRate, double ttftP50Ms,
      double ttftP95Ms, double ttftP99Ms, double itlP50Ms, double e2eP50Ms, double e2eP95Ms,
      double outputTokensPerSec, int requests, long preemptions, long evictions,
      int maxRequestsPerReplica, double meanRequestsPerReplica, int maxSessionsPerReplica,
      double meanSessionsPerReplica, double routingMeanMicros, double routingP99Micros,
      double routingWarmMeanMicros, double routingWarmP99Micros, int clippedRequests,
      int rejectedRequests, int routerRejectedRequests, String firstRouterRejection,
      double simulatedSeconds, double wallSeconds, double simulatedRequestsPerWallSecond,
      double[] ttftCdfMs) {
    this(policy, prefixCacheHitRate, ttftP50Ms, ttftP95Ms, ttftP99Ms, itlP50Ms, e2eP50Ms,
        e2eP95Ms, outputTokensPerSec, requests, preemptions, evictions, maxRequestsPerReplica,
        meanRequestsPerReplica, maxSessionsPerReplica, meanSessionsPerReplica, routingMeanMicros,
        routingP99Micros, routingWarmMeanMicros, routingWarmP99Micros, clippedRequests,
        rejectedRequests, routerRejectedRequests, firstRouterRejection, simulatedSeconds,
        wallSeconds, simulatedRequestsPerWallSecond, ttftCdfMs, PdStats.NONE);
  }

  /** A result without separate warm routing times (they equal the whole run's). */
  public PolicyResult(String policy, double prefixCacheHitRate, double ttftP50Ms,
      double ttftP95Ms, double ttftP99Ms, double itlP50Ms, double e2eP50Ms, double e2eP95Ms,
      double outputTokensPerSec, int requests, long preemptions, long evictions,
      int maxRequestsPerReplica, double meanRequestsPerReplica, int maxSessionsPerReplica,
      double meanSessionsPerReplica, double routingMeanMicros, double routingP99Micros,
      int clippedRequests, int rejectedRequests, int routerRejectedRequests,
      String firstRouterRejection, double simulatedSeconds, double wallSeconds,
      double simulatedRequestsPerWallSecond, double[] ttftCdfMs) {
    this(policy, prefixCacheHitRate, ttftP50Ms, ttftP95Ms, ttftP99Ms, itlP50Ms, e2eP50Ms,
        e2eP95Ms, outputTokensPerSec, requests, preemptions, evictions, maxRequestsPerReplica,
        meanRequestsPerReplica, maxSessionsPerReplica, meanSessionsPerReplica, routingMeanMicros,
        routingP99Micros, routingMeanMicros, routingP99Micros, clippedRequests, rejectedRequests,
        routerRejectedRequests, firstRouterRejection, simulatedSeconds, wallSeconds,
        simulatedRequestsPerWallSecond, ttftCdfMs);
  }

  /**
   * Whether {@code other} had the same outcome: every column of the report equal except the
   * wall-clock ones (routing times, wall seconds), the TTFT samples included.
   */
  public boolean sameOutcomeAs(PolicyResult other) {
    // figures without samples are NaN, which == never finds equal
    return same(prefixCacheHitRate, other.prefixCacheHitRate) && same(ttftP50Ms, other.ttftP50Ms)
        && same(ttftP95Ms, other.ttftP95Ms) && same(ttftP99Ms, other.ttftP99Ms)
        && same(itlP50Ms, other.itlP50Ms) && same(e2eP50Ms, other.e2eP50Ms)
        && same(e2eP95Ms, other.e2eP95Ms)
        && same(outputTokensPerSec, other.outputTokensPerSec) && requests == other.requests
        && preemptions == other.preemptions && evictions == other.evictions
        && maxRequestsPerReplica == other.maxRequestsPerReplica
        && meanRequestsPerReplica == other.meanRequestsPerReplica
        && maxSessionsPerReplica == other.maxSessionsPerReplica
        && meanSessionsPerReplica == other.meanSessionsPerReplica
        && clippedRequests == other.clippedRequests && rejectedRequests == other.rejectedRequests
        && routerRejectedRequests == other.routerRejectedRequests
        && unservedRequests == other.unservedRequests
        && simulatedSeconds == other.simulatedSeconds && pd.equals(other.pd)
        && java.util.Arrays.equals(ttftCdfMs, other.ttftCdfMs);
  }

  private static boolean same(double a, double b) {
    return Double.compare(a, b) == 0 || a == b;
  }
}
