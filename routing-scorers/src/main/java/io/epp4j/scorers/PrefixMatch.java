package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.PrefixHits;
import io.epp4j.api.PoolOrder;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * The hits {@code prefix-cache-scorer} computed for one request: per scored candidate, the
 * consecutive blocks from the first one it is believed to hold. Wraps the cycle's candidate list
 * without copying, so the hot path allocates no id array (a cycle's candidate lists are not
 * modified). The counts are kept densely (one per candidate) or, when few candidates hit, as
 * (position, count) pairs of the hits only: in a large pool a prompt lives on a handful of
 * endpoints, and a dense array would cost 4 bytes per endpoint on every request.
 */
final class PrefixMatch implements PrefixHits {
  private final int totalBlocks;
  private final int blockSizeTokens;
  private final List<Candidate> candidates;
  private final int size;
  // dense: matched[i] for candidate i; sparse: pairs (i, count) of the hits, ascending i
  private final int[] matched;
  private final boolean sparse;

  private PrefixMatch(int totalBlocks, int blockSizeTokens, List<Candidate> candidates, int size,
      int[] matched, boolean sparse) {
    this.totalBlocks = totalBlocks;
    this.blockSizeTokens = blockSizeTokens;
    this.candidates = candidates;
    this.size = size;
    this.matched = matched;
    this.sparse = sparse;
  }

  /**
   * The match of {@code candidates} from the scores {@code prefix-cache-scorer} gave them
   * ({@code scores[i] = matched / totalBlocks}, which gives back the exact count), in whichever
   * form is smaller.
   */
  static PrefixMatch fromScores(int totalBlocks, int blockSizeTokens, List<Candidate> candidates,
      double[] scores) {
    return build(totalBlocks, blockSizeTokens, candidates, scores, null, candidates.size());
  }

  /**
   * {@link #fromScores} when only the ascending positions {@code found[0..k)} can have scored
   * above 0: the same match, without reading the other candidates' scores.
   */
  static PrefixMatch fromFound(int totalBlocks, int blockSizeTokens, List<Candidate> candidates,
      double[] scores, int[] found, int k) {
    return build(totalBlocks, blockSizeTokens, candidates, scores, found, k);
  }

  /** The positions read are {@code found[0..k)}, or {@code 0..k} without {@code found}. */
  private static PrefixMatch build(int totalBlocks, int blockSizeTokens,
      List<Candidate> candidates, double[] scores, int @Nullable [] found, int k) {
    int n = candidates.size();
    int hits = 0;
    for (int j = 0; j < k; j++) {
      if (scores[found == null ? j : found[j]] > 0) {
        hits++;
      }
    }
    boolean sparse = 2 * hits < n;
    int[] m = new int[sparse ? 2 * hits : n];
    for (int j = 0, o = 0; j < k; j++) {
      int i = found == null ? j : found[j];
      double score = scores[i];
      if (!(score > 0)) {
        continue; // most candidates of a large pool hold nothing: no rounding for them
      }
      int count = (int) Math.round(score * totalBlocks);
      if (!sparse) {
        m[i] = count;
      } else {
        m[o++] = i;
        m[o++] = count;
      }
    }
    return new PrefixMatch(totalBlocks, blockSizeTokens, candidates, n, m, sparse);
  }

  /** A list in the pool's order knows its positions by id: no comparison of every id. */
  @Override
  public int indexOf(String endpointId) {
    if (!(candidates instanceof PoolOrder po)) {
      return PrefixHits.super.indexOf(endpointId);
    }
    int i = po.positionOf(endpointId);
    return i >= 0 && i < size && candidates.get(i).id().equals(endpointId) ? i : -1;
  }

  @Override
  public int size() {
    return size;
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
    return matchedAt(i);
  }

  @Override
  public int blockSizeTokens(int i) {
    return blockSizeTokens;
  }

  @Override
  public boolean anyHit() {
    if (sparse) {
      return matched.length > 0;
    }
    for (int m : matched) {
      if (m > 0) {
        return true;
      }
    }
    return false;
  }

  /** Matched blocks at a position of {@link #indexOf}. */
  int matchedAt(int i) {
    if (!sparse) {
      return matched[i];
    }
    if (i < 0 || i >= size) {
      throw new IndexOutOfBoundsException("candidate " + i + " of " + size);
    }
    // the pairs are in ascending candidate order: a binary search, since a picker asks for
    // every candidate of a large pool in turn and only a few of them hold anything
    int lo = 0;
    int hi = matched.length / 2 - 1;
    while (lo <= hi) {
      int mid = (lo + hi) >>> 1;
      int at = matched[2 * mid];
      if (at < i) {
        lo = mid + 1;
      } else if (at > i) {
        hi = mid - 1;
      } else {
        return matched[2 * mid + 1];
      }
    }
    return 0;
  }

  @Override
  public String toString() {
    StringBuilder sb = new StringBuilder("PrefixMatch{total=").append(totalBlocks)
        .append(", blockSize=").append(blockSizeTokens);
    for (int i = 0; i < size; i++) {
      sb.append(", ").append(endpointId(i)).append('=').append(matchedAt(i));
    }
    return sb.append('}').toString();
  }
}
