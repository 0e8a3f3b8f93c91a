package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.PrefixHits;
import java.util.List;

/**
 * The hits {@code prefix-cache-scorer} computed for one request: per scored candidate, the
 * consecutive blocks from the first one it is believed to hold. Wraps the cycle's candidate list
 * and the match counts without copying, so the hot path allocates no id array (a cycle's
 * candidate lists are not modified).
 */
final class PrefixMatch implements PrefixHits {
  private final int totalBlocks;
  private final int blockSizeTokens;
  private final List<Candidate> candidates;
  private final int[] matched;

  /** {@code matched[i]} belongs to {@code candidates.get(i)}. */
  PrefixMatch(int totalBlocks, int blockSizeTokens, List<Candidate> candidates, int[] matched) {
    this.totalBlocks = totalBlocks;
    this.blockSizeTokens = blockSizeTokens;
    this.candidates = candidates;
    this.matched = matched;
  }

  @Override
  public int size() {
    return matched.length;
  }

  @Override
  public String endpointId(int i) {
    return candidates.get(i).id();
  }

  @Override
  public int totalBlocks(int i) {
    return totalBlocks;
  }

  @Override
  public double cachedBlocks(int i) {
    return matched[i];
  }

  @Override
  public int blockSizeTokens(int i) {
    return blockSizeTokens;
  }

  @Override
  public boolean anyHit() {
    for (int m : matched) {
      if (m > 0) {
        return true;
      }
    }
    return false;
  }

  /** Matched blocks at a position of {@link #indexOf}. */
  int matchedAt(int i) {
    return matched[i];
  }

  @Override
  public String toString() {
    StringBuilder sb = new StringBuilder("PrefixMatch{total=").append(totalBlocks)
        .append(", blockSize=").append(blockSizeTokens);
    for (int i = 0; i < matched.length; i++) {
      sb.append(", ").append(endpointId(i)).append('=').append(matched[i]);
    }
    return sb.append('}').toString();
  }
}
