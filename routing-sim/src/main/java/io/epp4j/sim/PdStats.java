package io.epp4j.sim;

/**
 * What prefill/decode disaggregation did in one run: how many requests were prefilled on another
 * replica than the one that decoded them, how much KV crossed the link and how long that took,
 * and the inter-token latency tail, where decodes that share a step with prefills show.
 *
 * @param cluster              prefill/decode roles were given ({@code --pd}); false for a run
 *                             without them that still moved KV (a configuration with a prefill
 *                             profile on unlabelled replicas never does)
 * @param disaggregated        requests served with a prefill pick other than their decode pick
 * @param transferredTokens    prompt tokens whose KV crossed the link (uncached at decode)
 * @param decodeHitTokens      prompt tokens the decode replicas already held (not moved)
 * @param transferMeanMs       mean time of a transfer, bytes / bandwidth + latency
 * @param transferP95Ms        its 95th percentile
 * @param itlP95Ms             inter-token latency, 95th percentile, every request
 */
public record PdStats(boolean cluster, int disaggregated, long transferredTokens,
    long decodeHitTokens, double transferMeanMs, double transferP95Ms, double itlP95Ms) {

  /** A run without disaggregation. */
  public static final PdStats NONE = new PdStats(false, 0, 0, 0, 0, 0, 0);

  /** Whether the report shows these figures: a P/D cluster, or KV that moved. */
  public boolean reported() {
    return cluster || disaggregated > 0;
  }
}
