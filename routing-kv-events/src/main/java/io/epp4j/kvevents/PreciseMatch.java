package io.epp4j.kvevents;

import io.epp4j.api.AttributeKey;
import org.jspecify.annotations.Nullable;

/**
 * What the precise scorer found for one request, published in the cycle state under
 * {@link #KEY} for later plugins (and used after routing to record speculative entries).
 * Per candidate: the request's total full blocks at that endpoint's block size and the weighted
 * run of consecutive blocks from block 0 the endpoint holds.
 */
public final class PreciseMatch {

  /** Where the precise scorer publishes its match. */
  public static final AttributeKey<PreciseMatch> KEY =
      AttributeKey.of("epp4j.precise-prefix-match", PreciseMatch.class);

  private final String[] endpointIds;
  private final long[][] keys;
  private final double[] weights;

  PreciseMatch(String[] endpointIds, long[][] keys, double[] weights) {
    this.endpointIds = endpointIds;
    this.keys = keys;
    this.weights = weights;
  }

  /** Candidates in the order they were scored. */
  int size() {
    return endpointIds.length;
  }

  /** Whether candidate {@code i} of the scored list is {@code endpointId} (fast path). */
  boolean isAt(int i, String endpointId) {
    return i < endpointIds.length && endpointIds[i].equals(endpointId);
  }

  int totalBlocksAt(int i) {
    return keys[i] == null ? 0 : keys[i].length;
  }

  double matchedWeightAt(int i) {
    return weights[i];
  }

  long @Nullable [] keysAt(int i) {
    return keys[i];
  }

  private int indexOf(String endpointId) {
    for (int i = 0; i < endpointIds.length; i++) {
      if (endpointIds[i].equals(endpointId)) {
        return i;
      }
    }
    return -1;
  }

  /** Full blocks of the request at this endpoint's block size (0 if the endpoint was not scored). */
  public int totalBlocks(String endpointId) {
    int i = indexOf(endpointId);
    return i < 0 || keys[i] == null ? 0 : keys[i].length;
  }

  /** Weighted consecutive matched blocks from block 0 (GPU 1.0, offloaded 0.8 each). */
  public double matchedWeight(String endpointId) {
    int i = indexOf(endpointId);
    return i < 0 ? 0 : weights[i];
  }

  /** The highest matched weight over all scored endpoints. */
  public double bestMatchedWeight() {
    double best = 0;
    for (double w : weights) {
      best = Math.max(best, w);
    }
    return best;
  }

  /** The request's block keys as computed for this endpoint, or {@code null}. */
  long @Nullable [] keys(String endpointId) {
    int i = indexOf(endpointId);
    return i < 0 ? null : keys[i];
  }
}
